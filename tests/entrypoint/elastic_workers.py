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


def raise_now(message: str) -> None:
    """Every rank raises ``ValueError(message)`` at once."""
    raise ValueError(message)


def fill_and_raise(directory: str) -> None:
    """Fill the disk under ``directory``, then fail with an error of the worker's own."""
    try:
        with (Path(directory) / f"ballast.{os.environ['RANK']}").open("wb") as f:
            while True:
                f.write(bytes(65536))
                f.flush()
    except OSError as e:
        raise RuntimeError(f"the disk is full: {e}") from None


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
    data = {
        "TMPDIR": os.environ.get("TMPDIR"),
        "gettempdir": tempfile.gettempdir(),
        "made": made,
        "error_file": os.environ.get("TORCHELASTIC_ERROR_FILE"),  # under the launcher's log directory
    }
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


def return_unpicklable() -> object:
    """A value that cannot even reach the agent (multiprocessing pickles it)."""
    import threading

    return threading.Lock()


# Faults a cluster produces, injected by one pod's worker (tests/entrypoint/test_launch_faults.py,
# tests/localrun/test_run_faults.py).
FAULTS = ("sigkill", "preempt", "exit3", "teardown", "hang", "hold")


def _pod() -> str:
    """This pod's name: what the compiler's downward API gives (or the kubelet's HOSTNAME under run)."""
    return os.environ.get("ELASTIC_LAUNCH_POD_NAME") or os.environ.get("HOSTNAME", "")


def _once(out_dir: str) -> bool:
    """True for the first caller only, across restarts and recreated pods (a file made with O_EXCL)."""
    try:
        fd = os.open(Path(out_dir) / "fault-done", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as f:
        f.write(repr(time.time()))  # when the fault came (bench/faults_bench.py times the job's end from it)
    return True


def fault(out_dir: str, kind: str, pod: str, steps: str = "6") -> str:
    """All-reduce ``steps`` times; the first time, pod ``pod``'s local rank 0 injects ``kind`` at step 2.

    * ``sigkill``: the worker is SIGKILLed (the OOM killer);
    * ``preempt``: its agent gets SIGTERM (the pod is deleted or preempted);
    * ``exit3``: ``os._exit(3)``, an exit of its own;
    * ``teardown``: after the last step and ``destroy_process_group``, SIGSEGV (a crash at teardown);
    * ``hang``: it stops renewing its heartbeat and sleeps (stuck in data loading);
    * ``hold``: after the last step it writes ``<pod>.finished`` and returns only once the file
      ``release`` exists in ``out_dir``.

    Every worker renews ``$ELASTIC_LAUNCH_HEARTBEAT_FILE`` each step when it is set, logs each
    step to ``<pod>.log`` and returns its pod's name.
    """
    if kind not in FAULTS:
        raise ValueError(f"unknown fault {kind}")
    mine = _pod() == pod and os.environ["LOCAL_RANK"] == "0"
    beat = os.environ.get("ELASTIC_LAUNCH_HEARTBEAT_FILE")
    dist.init_process_group("gloo")
    armed = False
    for step in range(int(steps)):
        if beat:
            Path(beat).touch()
        t = torch.ones(1)
        dist.all_reduce(t)
        line = f"rank {dist.get_rank()} step {step} world {int(t.item())}"
        print(line, flush=True)  # run --kill POD@/step 2 / waits for it
        with (Path(out_dir) / f"{_pod()}.log").open("a") as f:
            f.write(line + "\n")
        if step == 2 and mine and kind not in ("teardown", "hold"):
            armed = _once(out_dir)
        if armed and kind == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
        if armed and kind == "preempt":
            os.kill(os.getppid(), signal.SIGTERM)  # the agent: it stops this worker in turn
            time.sleep(120)
        if armed and kind == "exit3":
            os._exit(3)
        if armed and kind == "hang":
            time.sleep(600)
        time.sleep(0.1)
    dist.destroy_process_group()
    if mine and kind == "teardown" and _once(out_dir):
        os.kill(os.getpid(), signal.SIGSEGV)
    if mine and kind == "hold":
        (Path(out_dir) / f"{_pod()}.finished").write_text("")
        deadline = time.monotonic() + 300
        while not (Path(out_dir) / "release").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    return _pod()


def main() -> None:
    """Script mode: ``python elastic_workers.py NAME ARGS...``."""
    name, *args = sys.argv[1:]
    # A script needs its own @record for its traceback to reach the agent
    # (torch/distributed/elastic/multiprocessing/errors/__init__.py).
    record(globals()[name])(*args)


if __name__ == "__main__":
    main()
