"""What ``elastic_compile.flyte2`` costs a Flyte 2 workflow module: imports and building the environment.

    .venv/bin/python bench/flyte2_bench.py [--runs 7]

Whole-process medians on this machine (wall seconds, CPU seconds, peak RSS), next to a
bare interpreter and ``import flyte`` alone. CPU time (user + system, from ``wait4``) is
the steadier figure on a shared machine: wall time grows with the load, CPU time barely.
``environment_kwargs`` imports flyteplugins-pytorch, which imports torch at module level:
that is the price of ``Elastic`` in any Flyte 2 module, with or without us.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

from compile_bench import ROOT

SPEC = ROOT / "examples" / "flyte2" / "elastic.yaml"
SETTINGS = f"from elastic_compile.flyte2 import environment_settings as s; s({str(SPEC)!r})"
KWARGS = f"from elastic_compile.flyte2 import environment_kwargs as k; k({str(SPEC)!r})"
ROWS = [
    ("python -c pass", "pass"),
    ("import elastic_compile.flyte2", "import elastic_compile.flyte2"),
    ("import flyte", "import flyte"),
    ("import elastic_compile.flyte2, flyte", "import elastic_compile.flyte2, flyte"),
    ("environment_settings(spec) (no flyte)", SETTINGS),
    ("import flyte, flyteplugins.pytorch (no us)", "import flyte, flyteplugins.pytorch"),
    ("environment_kwargs(spec)", KWARGS),
]


def run_once(code: str) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds and peak RSS (KiB) of ``python -c code``."""
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{code!r} failed")
    return time.perf_counter() - start, usage.ru_utime + usage.ru_stime, usage.ru_maxrss


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    print(f"whole process, median of {args.runs} runs, load average {os.getloadavg()[0]:.1f} at the start")
    print(f"{'what':<44} {'wall s':>7} {'CPU s':>7} {'peak RSS MiB':>13}")
    for label, code in ROWS:
        run_once(code)  # warm the page cache and bytecode
        runs = [run_once(code) for _ in range(args.runs)]
        wall, cpu = statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)
        print(f"{label:<44} {wall:>7.2f} {cpu:>7.2f} {max(r[2] for r in runs) / 1024:>13.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
