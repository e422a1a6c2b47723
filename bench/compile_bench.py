"""Compile speed: whole-process medians against the import floor, and in process.

    .venv/bin/python bench/compile_bench.py [--runs 7] [--compiles 1000] [--batch 500]

Measures, on this machine and in one run (so that the ratios compare like with like), wall and
CPU time (user + system: the steadier figure on a shared machine, where waiting for a core
does not count) with the load average. Every process is cold: a new interpreter, and a spec
it has never seen (each run writes a new spec file, with another name and size).

* ``python -c pass`` (the floor any Python CLI pays) and the *import floor*: a process that
  only imports the three libraries a compile needs, ``python -c "import yaml, jinja2.sandbox,
  pydantic"`` (the floor for *this* compiler, whatever it does itself), and the *pydantic
  floor*: the same and one strict model built and used, plugins off (what a spec made of
  pydantic models cannot go below);
* ``elastic-compile SPEC`` for one new spec (goal: at most 1.5x the import floor), and the
  same for ``-t all --format json`` and a Trainer v2 spec;
* ``--batch`` new specs compiled by one invocation into a new ``-o DIR`` (goal: at most 4x
  one spec), and the same jobs as a directory whose specs share their settings through
  ``extends:`` (a platform base and two team bases);
* ``--version`` (imports nothing but the CLI), and the peer: flytekit defining and
  serializing the equivalent Elastic task (``--no-peer`` skips it);
* peak RSS of each process (from ``wait4``; goal: at most 40 MiB for one spec);
* in-process throughput: specs compiled per second over N compiles (load, validate, plan,
  render, parse back, check, emit; goal: at least 1,000 a second), and for ``-t pytorchjob``
  against ``-t trainjob`` (Trainer v2);
* the compact schemas (docs/schemas.md): their sizes, the cost of loading them, and of
  checking one emitted PyTorchJob against the CRD's.

``--instructions`` counts instructions instead (``valgrind --tool=cachegrind``, which the
load of a shared machine does not change): the import and pydantic floors, one cold compile, one more spec
in process (N+1 compiles less 1, over N) and the ``-o DIR`` batch (slow under valgrind: a
smaller ``--batch`` runs sooner, but spreads the ``-o`` path's one-time work over fewer specs).

The package's bytecode is compiled first, as ``pip install`` does: an editable checkout run
with ``PYTHONDONTWRITEBYTECODE=1`` would otherwise compile every module from source on every
run and measure the compiler of Python rather than ours.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "ddp-2x8-gpu.yaml"
# The same job for Trainer v2 (no ttl, which a TrainJob cannot carry): both targets compile it.
V2_EXAMPLE = ROOT / "examples" / "trainjob-2x8-gpu.yaml"
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

# What any compile must import: the floor for this compiler, whatever it does itself.
IMPORT_FLOOR = "import yaml, jinja2.sandbox, pydantic"
# The floor of a spec that is pydantic models: the import floor and one model, as strict as
# ours, built and used with plugins off (as every command but run builds them). ``import
# pydantic`` loads none of the model machinery; the first model loads it, and pydantic's
# plugin loader imports importlib.metadata when it builds the first validator, plugins off
# or not. What the one-spec goal cannot beat, whatever the compiler does itself.
PYDANTIC_FLOOR = (
    f"{IMPORT_FLOOR}\nfrom pydantic import BaseModel, ConfigDict, Field\n"
    "class A(BaseModel):\n"
    "    model_config = ConfigDict(extra='forbid', frozen=True, strict=True)\n"
    "    x: int = Field(1, description='x')\n"
    "A()"
)
PLUGINS_OFF = {**os.environ, "PYDANTIC_DISABLE_PLUGINS": "__all__"}
#: The goals (issue 25): one spec against the import floor, the batch against one spec, in process, memory.
GOAL_ONE_SPEC, GOAL_BATCH, GOAL_RATE, GOAL_RSS_MIB = 1.5, 4.0, 1000, 40


def timed(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, int, float]:
    """Wall seconds, peak RSS (KiB) and CPU seconds (user + system) of one process run."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        shown = " ".join(cmd[:6]) + (" ..." if len(cmd) > 6 else "")
        raise SystemExit(f"{shown} failed: {proc.stderr.read().decode() if proc.stderr else ''}")
    return elapsed, usage.ru_maxrss, usage.ru_utime + usage.ru_stime


def batch_specs(directory: Path, count: int, example: Path = EXAMPLE) -> list[str]:
    """``count`` distinct specs in a new ``directory``: the example with its own name and node count each."""
    directory.mkdir(parents=True)
    text = example.read_text(encoding="utf-8")
    paths = []
    for i in range(count):
        spec = text.replace("name: llm-finetune", f"name: llm-finetune-{i}")
        spec = spec.replace("nnodes: 2", f"nnodes: {1 + i % 8}")
        path = directory / f"spec-{i:04d}.yaml"
        path.write_text(spec, encoding="utf-8")
        paths.append(str(path))
    return paths


PLATFORM_BASE = """\
image: ghcr.io/example/trainer:2.13.0-cuda13
resources:
  requests: {cpu: 64, memory: 480Gi, gpu: 8}
  limits: {memory: 480Gi}
shared_memory: 64Gi
rdzv:
  join_timeout: 900
max_restarts: 3
env:
  NCCL_DEBUG: WARN
run_policy:
  ttl_seconds_after_finished: 86400
"""


def extends_specs(directory: Path, count: int) -> Path:
    """``count`` jobs under ``directory/teams``, each extending one of two team bases over one platform base."""
    (directory / "platform").mkdir(parents=True)
    (directory / "platform" / "_defaults.elastic.yaml").write_text(PLATFORM_BASE, encoding="utf-8")
    for team in ("nlp", "vision"):
        (directory / "teams" / team).mkdir(parents=True)
        base = f"extends: ../../platform/_defaults.elastic.yaml\nnamespace: {team}\n"
        (directory / "teams" / team / "_team.elastic.yaml").write_text(base, encoding="utf-8")
    for i in range(count):
        team = ("nlp", "vision")[i % 2]
        job = (
            f"extends: _team.elastic.yaml\nname: llm-finetune-{i}\nnnodes: {1 + i % 8}\n"
            "command: [python, -m, trainer.finetune, --config, configs/llm.yaml, --lr, 1e-4]\n"
        )
        (directory / "teams" / team / f"job-{i:04d}.elastic.yaml").write_text(job, encoding="utf-8")
    return directory / "teams"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--compiles", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=500, help="specs in the one-invocation -o DIR case")
    parser.add_argument("--no-peer", action="store_true", help="skip the flytekit peer (needs the test extra)")
    parser.add_argument(
        "--baseline",
        type=Path,
        metavar="DIR",
        help="another checkout (say `git archive main | tar -x -C DIR`) whose package is measured in the same run: "
        "its one spec, its -o batch and its in-process rate, through this interpreter with PYTHONPATH=DIR",
    )
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="count instructions under valgrind (cachegrind) instead of timing: floor, one spec, in process, batch",
    )
    parser.add_argument("--in-process-only", action="store_true", help=argparse.SUPPRESS)  # a baseline's child
    args = parser.parse_args()
    if args.in_process_only:
        print(json.dumps(in_process(args.compiles)))
        return 0

    compileall.compile_dir(ROOT / "elastic_compile", quiet=1)
    if args.instructions:
        return count_instructions(args.batch, args.compiles)
    baseline_env = None
    if args.baseline is not None:
        compileall.compile_dir(args.baseline / "elastic_compile", quiet=1)
        # A checkout from before issue 25 kept a result cache and started a compile server: off.
        baseline_env = {
            **os.environ,
            "PYTHONPATH": str(args.baseline.resolve()),
            "ELASTIC_COMPILE_CACHE_DIR": "",
            "ELASTIC_COMPILE_SERVER": "off",
        }
    work = Path(tempfile.mkdtemp(prefix="compile-bench-"))
    fresh = iter(range(10**9))

    def new(directory: str) -> Path:
        # A new directory each run: a spec never seen, an -o DIR as in a clean clone.
        return Path(tempfile.mkdtemp(prefix=f"{directory}-", dir=work))

    def one(example: Path = EXAMPLE, *options: str) -> Callable[[], list[str]]:
        def command() -> list[str]:
            (spec,) = batch_specs(new("one") / "specs", 1, example)
            renamed = Path(spec).with_name(f"job-{next(fresh)}.yaml")
            Path(spec).rename(renamed)
            return [str(BIN / "elastic-compile"), str(renamed), *options]

        return command

    def batch() -> list[str]:
        top = new("batch")
        specs = batch_specs(top / "specs", args.batch)
        return [str(BIN / "elastic-compile"), "--root", str(top), "-o", str(top / "deploy"), *specs]

    def shared() -> list[str]:
        top = new("shared")
        teams = extends_specs(top, args.batch)
        return [str(BIN / "elastic-compile"), "--root", str(top), "-o", str(top / "deploy"), str(teams)]

    one_spec = "elastic-compile SPEC (ddp-2x8-gpu.yaml, new)"
    rows: list[tuple[str, Any] | tuple[str, Any, dict[str, str] | None]] = [
        ("python -c pass", [sys.executable, "-c", "pass"]),
        (f"import floor: {IMPORT_FLOOR}", [sys.executable, "-c", IMPORT_FLOOR]),
        ("pydantic floor: + one strict model (plugins off)", [sys.executable, "-c", PYDANTIC_FLOOR], PLUGINS_OFF),
        ("elastic-compile --version", [str(BIN / "elastic-compile"), "--version"]),
        (one_spec, one()),
        ("elastic-compile SPEC -t all --format json", one(EXAMPLE, "-t", "all", "--format", "json")),
        ("v2 SPEC -t trainjob", one(V2_EXAMPLE, "-t", "trainjob")),
        (f"elastic-compile -o DIR <{args.batch} specs>", batch),
        (f"... <{args.batch} specs, 3 shared bases>", shared),
    ]
    if baseline_env is not None:
        rows.append(("baseline: SPEC", one(), baseline_env))
        rows.append((f"baseline: -o DIR <{args.batch} specs>", batch, baseline_env))
    if not args.no_peer:
        rows.append(("flytekit: define + serialize (peer)", [sys.executable, "-c", FLYTE_PEER]))

    try:
        # Interleaved runs: load from other work on the machine falls on every row alike.
        results: dict[str, list[tuple[float, int, float]]] = {row[0]: [] for row in rows}
        for attempt in range(args.runs + 1):
            for label, cmd, *env in rows:
                result = timed(cmd() if callable(cmd) else cmd, *env)
                if attempt:  # the first round warms the page cache
                    results[label].append(result)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    measured = {
        label: (statistics.median(r[0] for r in rs), max(r[1] for r in rs), statistics.median(r[2] for r in rs))
        for label, rs in results.items()
    }
    floor, _, cpu_floor = measured[f"import floor: {IMPORT_FLOOR}"]
    one_wall, one_rss, cpu_one = measured[one_spec]
    # CPU time is the steadier figure on a shared machine: waiting for a core does not count.
    print(f"whole process, median of {args.runs} interleaved runs (os.cpu_count()={os.cpu_count()}, {_load()})")
    print(
        f"{'command':<50} {'median s':>9} {'x floor':>8} {'x one spec':>11} "
        f"{'CPU s':>7} {'CPU x floor':>12} {'CPU x one':>10} {'peak RSS MiB':>13}"
    )
    for label, (seconds, rss, cpu) in measured.items():
        print(
            f"{label:<50} {seconds:>9.3f} {seconds / floor:>8.2f} {seconds / one_wall:>11.2f} "
            f"{cpu:>7.3f} {cpu / cpu_floor:>12.2f} {cpu / cpu_one:>10.2f} {rss / 1024:>13.1f}"
        )
    rate, cpu_rate = in_process(args.compiles)
    print(
        f"in-process: {rate:,.0f} specs/s over {args.compiles} compiles ({1000 / rate:.2f} ms each); "
        f"{cpu_rate:,.0f} per CPU second ({_load()})"
    )
    batch_wall = measured[f"elastic-compile -o DIR <{args.batch} specs>"][0]
    goals = [
        (f"one spec <= {GOAL_ONE_SPEC}x the import floor", one_wall / floor, one_wall / floor <= GOAL_ONE_SPEC),
        (
            f"{args.batch} specs -o DIR <= {GOAL_BATCH}x one spec",
            batch_wall / one_wall,
            batch_wall / one_wall <= GOAL_BATCH,
        ),
        (f"in process >= {GOAL_RATE:,} specs/s", rate, rate >= GOAL_RATE),
        (f"peak RSS of one spec <= {GOAL_RSS_MIB} MiB", one_rss / 1024, one_rss / 1024 <= GOAL_RSS_MIB),
    ]
    for name, value, met in goals:
        print(f"goal: {name}: {value:,.2f} ({'met' if met else 'NOT met'})")
    for target in ("pytorchjob", "trainjob"):
        rate, cpu_rate = in_process(args.compiles, V2_EXAMPLE, target)
        print(f"in-process, v2 spec -t {target}: {rate:,.0f} specs/s ({1000 / rate:.2f} ms), {cpu_rate:,.0f}/CPU s")
    if baseline_env is not None:
        child = [sys.executable, __file__, "--in-process-only", "--compiles", str(args.compiles)]
        reply = subprocess.run(child, env=baseline_env, check=True, capture_output=True, text=True).stdout
        rate, cpu_rate = json.loads(reply)
        print(f"baseline in-process: {rate:,.0f} specs/s ({1000 / rate:.2f} ms each); {cpu_rate:,.0f} per CPU second")
    load, merged = extends_cost(args.compiles)
    print(
        f"in-process, load + validate one spec: {load * 1000:.3f} ms alone, {merged * 1000:.3f} ms extending "
        "two bases (read once per run)"
    )
    schema_cost(args.compiles)
    return 0


def instructions(cmd: list[str], env: dict[str, str] | None = None) -> int:
    """Instructions a process runs, as ``valgrind --tool=cachegrind`` counts them (Ir)."""
    with tempfile.TemporaryDirectory(prefix="cachegrind-") as work:
        out = Path(work) / "cachegrind.out"
        valgrind = ["valgrind", "--tool=cachegrind", "--cache-sim=no", f"--cachegrind-out-file={out}"]
        subprocess.run([*valgrind, *cmd], cwd=ROOT, check=True, capture_output=True, env=env)
        summary = next(line for line in out.read_text().splitlines() if line.startswith("summary:"))
        return int(summary.split()[1])


def count_instructions(batch: int, compiles: int) -> int:
    """Print the instruction counts of the goals' cases: the floor, one spec cold, in process, the batch."""
    if shutil.which("valgrind") is None:
        raise SystemExit("--instructions needs valgrind")
    work = Path(tempfile.mkdtemp(prefix="compile-bench-"))
    try:
        floor = instructions([sys.executable, "-c", IMPORT_FLOOR])
        models = instructions([sys.executable, "-c", PYDANTIC_FLOOR], PLUGINS_OFF)
        (spec,) = batch_specs(work / "one", 1)
        one = instructions([str(BIN / "elastic-compile"), spec])
        child = [sys.executable, __file__, "--in-process-only", "--compiles"]
        warm, more = (instructions([*child, str(n)]) for n in (1, 1 + compiles))
        per_spec = (more - warm) / compiles
        specs = batch_specs(work / "batch" / "specs", batch)
        top = work / "batch"
        many = instructions([str(BIN / "elastic-compile"), "--root", str(top), "-o", str(top / "deploy"), *specs])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"import floor ({IMPORT_FLOOR}): {floor / 1e6:,.0f} M instructions")
    print(f"pydantic floor (+ one strict model, plugins off): {models / 1e6:,.0f} M ({models / floor:.2f}x the floor)")
    print(f"one spec, cold: {one / 1e6:,.0f} M ({one / floor:.2f}x the floor; goal {GOAL_ONE_SPEC}x)")
    print(f"one more spec in process: {per_spec / 1e6:,.2f} M (over {compiles} compiles)")
    print(
        f"-o DIR, {batch} new specs: {many / 1e6:,.0f} M ({many / one:.2f}x one spec; goal {GOAL_BATCH}x), "
        f"{(many - one) / max(batch - 1, 1) / 1e6:,.2f} M per spec beyond the first"
    )
    return 0


def _load() -> str:
    """The load averages, to say how busy the machine was."""
    return "load average {:.1f} {:.1f} {:.1f}".format(*os.getloadavg())


def in_process(compiles: int, example: Path = EXAMPLE, target: str | None = None) -> tuple[float, float]:
    """Specs compiled and emitted in this process per second and per CPU second (``example`` for ``target``)."""
    from elastic_compile.compiler.output import stream_text
    from elastic_compile.compiler.pipeline import compile_text

    text = example.read_bytes()
    targets = None if target is None else (target,)
    stream_text([compile_text(text, "bench.yaml", targets)], "yaml")  # warm: the modules and schemas loaded
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(compiles):
        stream_text([compile_text(text, "bench.yaml", targets)], "yaml")
    return compiles / (time.perf_counter() - start), compiles / (time.process_time() - cpu)


def extends_cost(loads: int) -> tuple[float, float]:
    """Seconds to load and validate the example alone, and the same job extending two shared bases."""
    from elastic_compile.compiler.pipeline import load_spec, resolver

    work = Path(tempfile.mkdtemp(prefix="extends-bench-"))
    try:
        alone = work / "alone.elastic.yaml"
        alone.write_bytes(EXAMPLE.read_bytes())
        teams = extends_specs(work, 1)
        job = next(teams.glob("nlp/job-*.elastic.yaml"))
        timings = []
        for path in (alone, job):
            bases = resolver(work)
            load_spec(path, bases)  # warm: the bases are read here, once
            start = time.perf_counter()
            for _ in range(loads):
                load_spec(path, bases)
            timings.append((time.perf_counter() - start) / loads)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return timings[0], timings[1]


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


if __name__ == "__main__":
    sys.exit(main())
