"""elastic-launch against bare torchrun on the same 2-agent job.

    .venv/bin/python bench/launch_bench.py [--runs 3]

The job: 2 agents (two processes standing for two pods) x 1 worker, c10d rendezvous on
127.0.0.1, a trivial gloo all_reduce script, script mode for both launchers. One run is
the wall time from starting the first agent to both having exited 0. Launchers run
interleaved (one run of each per round) after one warm-up round, so drift in machine
load hits all of them alike; the table shows the median of ``--runs`` rounds.

Rows:
* torchrun: ``python -m torch.distributed.run`` with its defaults (0.1 s monitor interval);
* elastic-launch with ``--monitor-interval 0.1``: the same polling, so the difference is
  the launcher's own overhead;
* elastic-launch with its defaults: a 5 s monitor interval, polled once per interval, so
  a job this short pays up to one interval more before the agent sees its workers done;
* a bad option: how long each launcher takes to reject ``--nnodes 2x``.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = """
import torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(1)
dist.all_reduce(t)
assert t.item() == dist.get_world_size(), t
dist.destroy_process_group()
"""

Command = Callable[[int, str, Path], list[str]]


def torchrun(port: int, run_id: str, script: Path) -> list[str]:
    return [
        sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
        "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", run_id, str(script),
    ]  # fmt: skip


def elastic_launch(*extra: str) -> Command:
    def command(port: int, run_id: str, script: Path) -> list[str]:
        return [
            sys.executable, "-m", "elastic_compile.entrypoint", "--nnodes", "2", "--nproc-per-node", "1",
            "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", run_id,
            *extra, "--", "python", str(script),
        ]  # fmt: skip

    return command


def clean_env() -> dict[str, str]:
    """No inherited launcher inputs (PET_*, our own, torch elastic's)."""
    drop = ("PET_", "ELASTIC_LAUNCH_", "TORCHELASTIC_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.pop("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", None)
    env.pop("OMP_NUM_THREADS", None)
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def two_agents(command: Command, script: Path, timeout: float = 180) -> float:
    """Wall seconds from the first agent's start to both agents' exit; fails on any error."""
    port, run_id = free_port(), f"bench-{uuid.uuid4().hex[:8]}"
    env = clean_env()
    start = time.perf_counter()
    agents = [
        subprocess.Popen(
            command(port, run_id, script), cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        for _ in range(2)
    ]
    for agent in agents:
        try:
            _, err = agent.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for a in agents:
                a.kill()
            raise SystemExit(f"{command(port, run_id, script)[:4]}... still running after {timeout}s") from None
        if agent.returncode != 0:
            raise SystemExit(f"agent exited {agent.returncode}:\n{err.decode(errors='replace')[-3000:]}")
    return time.perf_counter() - start


def usage_error(cmd: list[str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, env=clean_env(), capture_output=True, timeout=60, check=False)
    if done.returncode == 0:
        raise SystemExit(f"{cmd} accepted a bad option")
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    runs = parser.parse_args().runs

    rows: dict[str, Callable[[Path], float]] = {
        "torchrun (python -m torch.distributed.run)": lambda s: two_agents(torchrun, s),
        "elastic-launch --monitor-interval 0.1": lambda s: two_agents(elastic_launch("--monitor-interval", "0.1"), s),
        "elastic-launch (defaults: monitor 5 s)": lambda s: two_agents(elastic_launch(), s),
        "torchrun --nnodes 2x (rejected)": lambda _s: usage_error(
            [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2x", "x.py"]
        ),
        "elastic-launch --nnodes 2x (rejected)": lambda _s: usage_error(
            [sys.executable, "-m", "elastic_compile.entrypoint", "--nnodes", "2x", "--", "true"]
        ),
    }
    times: dict[str, list[float]] = {name: [] for name in rows}
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "allreduce.py"
        script.write_text(SCRIPT)
        for round_ in range(runs + 1):  # round 0 warms caches and is not counted
            for name, run in rows.items():
                elapsed = run(script)
                if round_:
                    times[name].append(elapsed)
            print(f"round {round_}/{runs} done", file=sys.stderr, flush=True)

    base = {name: statistics.median(times[name]) for name in rows}
    reference = {
        "elastic-launch --monitor-interval 0.1": "torchrun (python -m torch.distributed.run)",
        "elastic-launch (defaults: monitor 5 s)": "torchrun (python -m torch.distributed.run)",
        "elastic-launch --nnodes 2x (rejected)": "torchrun --nnodes 2x (rejected)",
    }
    print(f"2 agents x 1 worker, c10d on 127.0.0.1, gloo all_reduce; median of {runs} (cpus: {os.cpu_count()})")
    print(f"{'launcher':44} {'median s':>9}  {'runs s':24} {'vs torchrun':>11}")
    for name in rows:
        ratio = f"{base[name] / base[reference[name]]:.2f}x" if name in reference else "1.00x"
        each = "/".join(f"{t:.2f}" for t in times[name])
        print(f"{name:44} {base[name]:9.2f}  {each:24} {ratio:>11}")


if __name__ == "__main__":
    main()
