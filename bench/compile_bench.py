"""Compile speed: whole-process medians against a bare interpreter and the Flyte peer.

    .venv/bin/python bench/compile_bench.py [--runs 7] [--compiles 1000] [--batch 500]

Measures, on this machine and in one run (so that the ratios compare like with like), wall and
CPU time (user + system: the steadier figure on a shared machine, where waiting for a core
does not count) with the load average:

* the whole-process wall time of ``elastic-compile examples/ddp-2x8-gpu.yaml`` against
  ``python -c pass`` (the floor any Python CLI pays), against a process that only imports
  the three libraries a compile needs (PyYAML, Jinja2, pydantic: the floor for
  *this* compiler) and against the peer: flytekit defining and serializing the equivalent
  Elastic task (what a Flyte user runs today);
* ``--batch`` distinct specs (the example with another name and size each) compiled by one
  invocation into ``-o DIR``, against one spec: into a new DIR each run (a clean clone), into
  the same DIR again with nothing changed, and into a DIR just deleted; and the same jobs as a directory whose specs
  share their settings through ``extends:`` (a platform base and two team bases), so each
  job file holds only its name, namespace base, command and size;
* the result cache (docs/compiler.md): the one spec and the ``-o DIR`` batch again (written
  and ``--check``) when the warm-up round stored their result; every other row runs with the
  cache off, so it compiles;
* the compile server (docs/compiler.md): the one spec and the ``-o DIR`` batch compiled by a
  warm server's fork (``--no-cache``: it compiles every time); its peak RSS is the client's,
  and the server's own resident size is printed below the table;
* ``--version`` (imports nothing but the CLI);
* peak RSS of each process (from ``wait4``);
* in-process throughput: specs compiled per second over N compiles (load, validate, plan,
  render, parse back, check, emit), and for ``-t pytorchjob`` against ``-t trainjob`` (Trainer v2);
* the compact schemas (docs/schemas.md): their sizes, the cost of loading them, and of
  checking one emitted PyTorchJob against the CRD's.

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
from pathlib import Path

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

# What any compile must import: the floor for this compiler, whatever it does itself (the
# sandbox is imported only for --templates).
IMPORT_FLOOR = "import yaml, jinja2\nfrom pydantic import BaseModel"


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


def batch_specs(directory: Path, count: int) -> list[str]:
    """``count`` distinct specs: the example with its own name and node count each."""
    text = EXAMPLE.read_text(encoding="utf-8")
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
    parser.add_argument("--in-process-only", action="store_true", help=argparse.SUPPRESS)  # a baseline's child
    args = parser.parse_args()
    if args.in_process_only:
        print(json.dumps(in_process(args.compiles)))
        return 0

    compileall.compile_dir(ROOT / "elastic_compile", quiet=1)
    baseline_env = None
    if args.baseline is not None:
        compileall.compile_dir(args.baseline / "elastic_compile", quiet=1)
        baseline_env = {**os.environ, "PYTHONPATH": str(args.baseline.resolve())}
    work = Path(tempfile.mkdtemp(prefix="compile-bench-"))
    os.environ["ELASTIC_COMPILE_CACHE_DIR"] = ""  # no result cache, unless a row says otherwise
    os.environ["ELASTIC_COMPILE_SERVER"] = "off"  # and no compile server
    served = {**os.environ, "ELASTIC_COMPILE_CACHE_DIR": str(work / "server"), "ELASTIC_COMPILE_SERVER": "on"}
    server_pid, server_rss = None, None
    server_cpu: dict[str, float] = {}
    try:
        specs = batch_specs(work, args.batch)
        teams = extends_specs(work / "shared", args.batch)
        out = work / "out"
        same = work / "same" / "deploy"

        def fresh() -> Path:
            # A new directory each run, as in a clean clone. Rewriting the tree just deleted
            # (the next row) costs the kernel more than the compile: ext4's inode allocator
            # steps over the recently deleted inodes of the block group (perf:
            # recently_deleted under ext4_create and ext4_mkdir).
            return Path(tempfile.mkdtemp(prefix="out-", dir=work)) / "deploy"

        def batch() -> list[str]:
            return [str(BIN / "elastic-compile"), "--root", str(work), "-o", str(fresh()), *specs]

        def rewritten() -> list[str]:
            shutil.rmtree(out, ignore_errors=True)
            return [str(BIN / "elastic-compile"), "--root", str(work), "-o", str(out), *specs]

        def unchanged() -> list[str]:
            # Written by the first (warm-up) round; every later run finds each file up to date.
            return [str(BIN / "elastic-compile"), "--root", str(work), "-o", str(same), *specs]

        def shared() -> list[str]:
            return [str(BIN / "elastic-compile"), "--root", str(work), "-o", str(fresh()), str(teams)]

        def check_unchanged() -> list[str]:
            return [*unchanged()[:3], "-o", str(same), "--check", *specs]

        ours = [str(BIN / "elastic-compile"), str(EXAMPLE)]
        # Every run compiles (no result cache), but for the rows that say "stored": those reuse the
        # result the warm-up round stored in a cache of the bench's own (docs/compiler.md).
        cached = {**os.environ, "ELASTIC_COMPILE_CACHE_DIR": str(work / "cache")}
        rows: list[tuple[str, object] | tuple[str, object, dict[str, str] | None]] = [
            ("python -c pass", [sys.executable, "-c", "pass"]),
            ("import floor: yaml, jinja2, pydantic", [sys.executable, "-c", IMPORT_FLOOR]),
            ("elastic-compile --version", [str(BIN / "elastic-compile"), "--version"]),
            ("elastic-compile ddp-2x8-gpu.yaml", ours),
            ("elastic-compile -t all --format json", [*ours, "-t", "all", "--format", "json"]),
            ("v2 spec -t pytorchjob", [str(BIN / "elastic-compile"), str(V2_EXAMPLE), "-t", "pytorchjob"]),
            ("v2 spec -t trainjob", [str(BIN / "elastic-compile"), str(V2_EXAMPLE), "-t", "trainjob"]),
            (f"elastic-compile -o DIR <{args.batch} specs>", batch),
            ("... into DIR again, nothing changed", unchanged),
            ("... into DIR just deleted (rm -rf DIR)", rewritten),
            (f"... <{args.batch} specs, 3 shared bases, a DIR>", shared),
            ("ddp-2x8-gpu.yaml, result stored", ours, cached),
            (f"-o DIR <{args.batch} specs> again, stored", unchanged, cached),
            (f"-o DIR --check <{args.batch} specs>, stored", check_unchanged, cached),
        ]
        if sys.platform == "linux":
            started = subprocess.run(
                [str(BIN / "elastic-compile"), "server", "start"],
                env=served,
                capture_output=True,
                text=True,
                check=True,
            )
            server_pid = int(started.stdout.split()[2])
            rows.append(("ddp-2x8-gpu.yaml, compile server", [*ours, "--no-cache"], served))
            rows.append((f"-o DIR <{args.batch} specs>, compile server", lambda: [*batch(), "--no-cache"], served))
        if baseline_env is not None:
            rows.append(("baseline: ddp-2x8-gpu.yaml", ours, baseline_env))
            rows.append((f"baseline: -o DIR <{args.batch} specs>", batch, baseline_env))
        if not args.no_peer:
            rows.append(("flytekit: define + serialize (peer)", [sys.executable, "-c", FLYTE_PEER]))

        # Interleaved runs: load from other work on the machine falls on every row alike.
        results: dict[str, list[tuple[float, int, float]]] = {row[0]: [] for row in rows}
        for attempt in range(args.runs + 1):
            for label, cmd, *env in rows:
                result = timed(cmd() if callable(cmd) else cmd, *env)  # type: ignore[arg-type]
                if attempt:  # the first round warms the page cache
                    results[label].append(result)
        server_rss = _resident(server_pid)
        if server_pid is not None:
            # The served rows' CPU column is the client's: the server's part, measured apart.
            for label, cmd, *env in rows:
                if env and env[0] is served:
                    server_cpu[label] = _server_cpu(server_pid, cmd, served, args.runs)
    finally:
        if server_pid is not None:
            subprocess.run(
                [str(BIN / "elastic-compile"), "server", "stop"], env=served, capture_output=True, check=False
            )
        shutil.rmtree(work, ignore_errors=True)

    measured = {
        label: (statistics.median(r[0] for r in rs), max(r[1] for r in rs), statistics.median(r[2] for r in rs))
        for label, rs in results.items()
    }
    floor, _, cpu_floor = measured["python -c pass"]
    one, _, cpu_one = measured["elastic-compile ddp-2x8-gpu.yaml"]
    # CPU time is the steadier figure on a shared machine: waiting for a core does not count.
    print(f"whole process, median of {args.runs} interleaved runs (os.cpu_count()={os.cpu_count()}, {_load()})")
    print(
        f"{'command':<40} {'median s':>9} {'x python':>9} {'x one spec':>11} "
        f"{'CPU s':>7} {'CPU x python':>13} {'CPU x one':>10} {'peak RSS MiB':>13}"
    )
    for label, (seconds, rss, cpu) in measured.items():
        print(
            f"{label:<40} {seconds:>9.3f} {seconds / floor:>9.1f} {seconds / one:>11.2f} "
            f"{cpu:>7.3f} {cpu / cpu_floor:>13.1f} {cpu / cpu_one:>10.2f} {rss / 1024:>13.1f}"
        )
    if server_rss is not None:
        print(f"compile server (pid {server_pid}): resident {server_rss[0]:.1f} MiB, peak {server_rss[1]:.1f} MiB")
        for label, seconds in server_cpu.items():
            print(f"  {label}: the server's CPU per run {seconds:.3f} s (its forks), the client's above")
    rate, cpu_rate = in_process(args.compiles)
    print(
        f"in-process: {rate:,.0f} specs/s over {args.compiles} compiles ({1000 / rate:.2f} ms each); "
        f"{cpu_rate:,.0f} per CPU second ({_load()})"
    )
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


def _server_cpu(pid: int, cmd: object, env: dict[str, str], runs: int) -> float:
    """The CPU time a server's forks spent per run of ``cmd``: its reaped children's, from /proc.

    The server reaps a run's handler (which reaped its worker) within a second of the run's
    end, so the total is read after a pause longer than that.
    """

    def reaped() -> float:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")  # cutime + cstime

    time.sleep(1.5)
    before = reaped()
    for _ in range(runs):
        timed(cmd() if callable(cmd) else cmd, env)  # type: ignore[arg-type]
    time.sleep(1.5)
    return (reaped() - before) / runs


def _resident(pid: int | None) -> tuple[float, float] | None:
    """A process's resident and peak resident size in MiB, from /proc."""
    if pid is None:
        return None
    facts = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            name, _, value = line.partition(":")
            if name in ("VmRSS", "VmHWM"):
                facts[name] = int(value.split()[0]) / 1024
    return facts["VmRSS"], facts["VmHWM"]


def _load() -> str:
    """The load averages, to say how busy the machine was."""
    return "load average {:.1f} {:.1f} {:.1f}".format(*os.getloadavg())


def in_process(compiles: int, example: Path = EXAMPLE, target: str | None = None) -> tuple[float, float]:
    """Specs compiled and emitted in this process per second and per CPU second (``example`` for ``target``)."""
    from elastic_compile.compiler.output import stream_text
    from elastic_compile.compiler.pipeline import compile_text

    text = example.read_bytes()
    targets = None if target is None else (target,)
    stream_text([compile_text(text, "bench.yaml", targets)], "yaml")  # warm caches
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
