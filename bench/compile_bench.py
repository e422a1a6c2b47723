"""Compile speed: whole-process medians against a bare interpreter and the Flyte peer.

    .venv/bin/python bench/compile_bench.py [--runs 7] [--compiles 1000]

Measures, on this machine:
* the whole-process wall time of ``elastic-compile examples/ddp-2x8-gpu.yaml`` against
  ``python -c pass`` (the floor any Python CLI pays) and against the peer: flytekit
  defining and serializing the equivalent Elastic task (what a Flyte user runs today);
* peak RSS of each process (from ``wait4``);
* in-process throughput: specs compiled per second over N compiles (load, validate, plan,
  render, parse back, check, emit);
* the compact schemas (docs/schemas.md): their sizes, the cost of loading them, and of
  checking one emitted PyTorchJob against the CRD's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "ddp-2x8-gpu.yaml"
BIN = Path(sys.executable).parent

FLYTE_PEER = """
from flytekit import PodTemplate, Resources, task
from flytekit.configuration import Image, ImageConfig, SerializationSettings
from flytekit.tools.translator import get_serializable
from flytekitplugins.kfpytorch import Elastic
from collections import OrderedDict

@task(task_config=Elastic(nnodes=2, nproc_per_node=8, max_restarts=3,
                          rdzv_configs={"timeout": 900, "join_timeout": 900}),
      requests=Resources(cpu="64", mem="480Gi", gpu="8"), limits=Resources(mem="480Gi", gpu="8"),
      container_image="ghcr.io/example/trainer:2.13.0-cuda13", environment={"NCCL_DEBUG": "WARN"})
def train() -> None: ...

img = Image(name="default", fqn="ghcr.io/example/trainer", tag="2.13.0-cuda13")
settings = SerializationSettings(project="p", domain="d", version="v1", image_config=ImageConfig(default_image=img))
get_serializable(OrderedDict(), settings, train)
"""


def timed(cmd: list[str]) -> tuple[float, int]:
    """Wall seconds and peak RSS (KiB) of one process run."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{cmd} failed: {proc.stderr.read().decode() if proc.stderr else ''}")
    return elapsed, usage.ru_maxrss


def median_run(cmd: list[str], runs: int) -> tuple[float, int]:
    timed(cmd)  # warm the page cache and bytecode
    results = [timed(cmd) for _ in range(runs)]
    return statistics.median(r[0] for r in results), max(r[1] for r in results)


def in_process(compiles: int) -> float:
    from elastic_compile.compiler.output import stream_text
    from elastic_compile.compiler.pipeline import compile_text

    text = EXAMPLE.read_bytes()
    stream_text([compile_text(text, "bench.yaml")], "yaml")  # warm caches
    start = time.perf_counter()
    for _ in range(compiles):
        stream_text([compile_text(text, "bench.yaml")], "yaml")
    return compiles / (time.perf_counter() - start)


def schema_cost(checks: int) -> None:
    from elastic_compile.compiler.pipeline import compile_path
    from elastic_compile.schema import compact
    from elastic_compile.targets import pytorchjob
    from elastic_compile.targets.checks import schema_errors

    for path in sorted(compact.COMPACT_DIR.glob("*.json")):
        print(f"{path.name:<52} {path.stat().st_size / 1024:>6.1f} KiB")
    start = time.perf_counter()
    compact.load(pytorchjob.SCHEMA_FILE)
    print(f"load {pytorchjob.SCHEMA_FILE} + {compact.CORE_FILE}: {(time.perf_counter() - start) * 1000:.2f} ms")
    doc = compile_path(str(EXAMPLE), ("pytorchjob",)).outputs[0].doc
    start = time.perf_counter()
    for _ in range(checks):
        schema_errors(doc, pytorchjob.SCHEMA_FILE, pytorchjob.API_VERSION, pytorchjob.KIND)
    print(f"check one PyTorchJob against the compact CRD: {(time.perf_counter() - start) / checks * 1000:.3f} ms")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--compiles", type=int, default=1000)
    parser.add_argument("--no-peer", action="store_true", help="skip the flytekit peer (needs the test extra)")
    args = parser.parse_args()

    rows = [
        ("python -c pass", [sys.executable, "-c", "pass"]),
        ("elastic-compile ddp-2x8-gpu.yaml", [str(BIN / "elastic-compile"), str(EXAMPLE)]),
        (
            "elastic-compile -t all --format json",
            [str(BIN / "elastic-compile"), str(EXAMPLE), "-t", "all", "--format", "json"],
        ),
    ]
    if not args.no_peer:
        rows.append(("flytekit: define + serialize (peer)", [sys.executable, "-c", FLYTE_PEER]))
    measured = [(label, *median_run(cmd, args.runs)) for label, cmd in rows]
    floor = measured[0][1]
    ours = measured[1][1]
    print(f"whole process, median of {args.runs} runs (os.cpu_count()={os.cpu_count()})")
    print(f"{'command':<40} {'median s':>9} {'x python':>9} {'x ours':>8} {'peak RSS MiB':>13}")
    for label, seconds, rss in measured:
        print(f"{label:<40} {seconds:>9.3f} {seconds / floor:>9.1f} {seconds / ours:>8.2f} {rss / 1024:>13.1f}")
    rate = in_process(args.compiles)
    print(f"in-process: {rate:,.0f} specs/s over {args.compiles} compiles ({1000 / rate:.2f} ms each)")
    schema_cost(args.compiles)
    return 0


if __name__ == "__main__":
    sys.exit(main())
