"""Worker functions the entrypoint tests launch, in function mode and as a script.

Function mode: ``elastic-launch --function elastic_workers:NAME -- ARGS`` (the tests put this
directory on PYTHONPATH). Script mode: ``python elastic_workers.py NAME ARGS``. Every
function takes string arguments, writes what it observed under ``out_dir`` (one JSON
file per rank) and returns a small JSON-able value. Deadlines keep every loop bounded.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record


def _env_int(name: str) -> int:
    return int(os.environ[name])


def _write(out_dir: str, name: str, data: dict[str, Any]) -> None:
    path = Path(out_dir) / f"{name}.rank{os.environ['RANK']}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    tmp.replace(path)


def allreduce(out_dir: str, *extra: str) -> dict[str, Any]:
    """Sum of (rank + 1) over all ranks: world_size * (world_size + 1) / 2."""
    dist.init_process_group("gloo")
    try:
        t = torch.tensor([float(dist.get_rank() + 1)])
        dist.all_reduce(t)
        data = {
            "rank": dist.get_rank(),
            "world_size": dist.get_world_size(),
            "sum": t.item(),
            "extra": list(extra),
            "restart_count": _env_int("TORCHELASTIC_RESTART_COUNT"),
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
            "shared_store": os.environ.get("TORCHELASTIC_USE_AGENT_STORE"),
        }
    finally:
        dist.destroy_process_group()
    _write(out_dir, "allreduce", data)
    return data


def ddp_step(out_dir: str) -> None:
    """One DDP step on rank-specific data; records local and averaged gradients."""
    dist.init_process_group("gloo")
    try:
        rank, world = dist.get_rank(), dist.get_world_size()
        torch.manual_seed(0)  # same initial weights everywhere (DDP would broadcast rank 0's anyway)
        model = torch.nn.Linear(4, 2)
        local = torch.nn.Linear(4, 2)
        local.load_state_dict(model.state_dict())
        g = torch.Generator().manual_seed(1000 + rank)
        x, y = torch.randn(8, 4, generator=g), torch.randn(8, 2, generator=g)

        torch.nn.functional.mse_loss(local(x), y).backward()
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        torch.nn.functional.mse_loss(ddp(x), y).backward()
        data = {
            "rank": rank,
            "world_size": world,
            "local": [p.grad.flatten().tolist() for p in local.parameters() if p.grad is not None],
            "ddp": [p.grad.flatten().tolist() for p in model.parameters() if p.grad is not None],
        }
    finally:
        dist.destroy_process_group()
    _write(out_dir, "ddp", data)


def fail_first_attempt(out_dir: str) -> int:
    """Rank 1 raises on attempt 0; on a restart every rank runs an all_reduce."""
    if _env_int("TORCHELASTIC_RESTART_COUNT") == 0 and _env_int("RANK") == 1:
        raise RuntimeError("injected failure on attempt 0")
    return int(allreduce(out_dir)["restart_count"])


def grow(out_dir: str, agent: str, steps_at_two: str, deadline_s: str) -> int:
    """Step until world size 2 has been seen for ``steps_at_two`` steps; log every step.

    Each step all_reduces a 1 (the result is the world size) and appends a line to
    ``<agent>.log``. At world size 1 the loop waits for the agent to restart it into a
    bigger round; past ``deadline_s`` seconds it fails instead of hanging.
    """
    deadline = time.monotonic() + float(deadline_s)
    dist.init_process_group("gloo")
    seen = 0
    try:
        log = Path(out_dir) / f"{agent}.log"
        step = 0
        while seen < int(steps_at_two):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{agent}: world size 2 not seen {steps_at_two} times in {deadline_s}s")
            t = torch.ones(1)
            dist.all_reduce(t)
            world = int(t.item())
            with log.open("a") as f:
                f.write(f"restart={os.environ['TORCHELASTIC_RESTART_COUNT']} world={world} step={step}\n")
            seen += world == 2
            step += 1
            time.sleep(0.2)
    finally:
        dist.destroy_process_group()
    return seen


def raise_error(message: str) -> None:
    """Rank 1 raises ``ValueError(message)``; the others wait to be stopped."""
    if _env_int("RANK") == 1:
        raise ValueError(message)
    time.sleep(60)


def exit_with(code: str) -> None:
    """Rank 1 exits with ``code`` (or kills itself with signal ``-code``)."""
    if _env_int("RANK") == 1:
        n = int(code)
        if n < 0:
            os.kill(os.getpid(), -n)
        sys.exit(n)
    time.sleep(60)


def fail_after_a_trap(marker_dir: str, code: str) -> None:
    """Rank 0 traps SIGTERM and exits 143 (a wrapper script's ``trap``); rank 1 then exits with ``code``."""
    ready = Path(marker_dir) / "trap-set"
    if _env_int("RANK") == 0:
        signal.signal(signal.SIGTERM, lambda _n, _f: sys.exit(128 + signal.SIGTERM))
        ready.write_text("")
        time.sleep(600)
    while not ready.exists():
        time.sleep(0.05)
    sys.exit(int(code))


def sleep_forever(marker_dir: str, ignore_sigterm: str = "no") -> None:
    """Announce the start with a marker file, then sleep (optionally deaf to SIGTERM)."""
    if ignore_sigterm == "yes":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    (Path(marker_dir) / f"started.{os.environ['RANK']}").write_text(str(os.getpid()))
    time.sleep(600)


def scratch_report(out_dir: str) -> dict[str, Any]:
    """Where this worker's temporary files go, and that one can be made there."""
    import tempfile

    with tempfile.NamedTemporaryFile() as f:
        made = f.name
    data = {"TMPDIR": os.environ.get("TMPDIR"), "gettempdir": tempfile.gettempdir(), "made": made}
    _write(out_dir, "scratch", data)
    return data


def detach(out_dir: str, then: str = "return") -> str:
    """Leave a daemon behind (double fork, setsid, inherited descriptors closed, as daemons do), then return or raise.

    The daemon writes its pid to ``daemon.<rank>`` and sleeps; only rank 0 makes one. (A
    child that keeps the worker's descriptors keeps multiprocessing's sentinel pipe open,
    and torch then waits for the worker until that child exits: torch's behaviour.)
    """
    if os.environ["RANK"] == "0":
        child = os.fork()
        if child == 0:
            os.setsid()
            if os.fork() == 0:
                os.closerange(3, 65536)
                (Path(out_dir) / "daemon.0").write_text(str(os.getpid()))
                time.sleep(600)
                os._exit(0)
            os._exit(0)
        os.waitpid(child, 0)
        deadline = time.monotonic() + 30
        while not (Path(out_dir) / "daemon.0").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    if then == "raise":
        raise RuntimeError("failed after detaching a daemon")
    return "detached"


def return_unserializable() -> object:
    return {1, 2}


def main() -> None:
    """Script mode: ``python elastic_workers.py NAME ARGS...``."""
    name, *args = sys.argv[1:]
    # A script needs its own @record for its traceback to reach the agent
    # (torch/distributed/elastic/multiprocessing/errors/__init__.py).
    record(globals()[name])(*args)


if __name__ == "__main__":
    main()
