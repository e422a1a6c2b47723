"""What ``elastic_compile.flyte2`` costs a Flyte 2 workflow module: imports and building the environment.

    .venv/bin/python bench/flyte2_bench.py [--runs 7]

Whole-process medians (wall seconds, peak RSS) on this machine, next to a bare interpreter
and ``import flyte`` alone. ``environment_kwargs`` imports flyteplugins-pytorch, which
imports torch at module level: that is the price of ``Elastic`` in any Flyte 2 module, with
or without us. Also prints ``-X importtime``'s cumulative figure for the imports, which
is steadier than wall time on a busy machine.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys

from compile_bench import ROOT, median_run

SPEC = ROOT / "examples" / "flyte2" / "elastic.yaml"

SETTINGS = f"from elastic_compile.flyte2 import environment_settings as s; s({str(SPEC)!r})"
KWARGS = f"from elastic_compile.flyte2 import environment_kwargs as k; k({str(SPEC)!r})"
ROWS = [
    ("python -c pass", "pass"),
    ("import elastic_compile.flyte2", "import elastic_compile.flyte2"),
    ("import flyte", "import flyte"),
    ("import elastic_compile.flyte2, flyte", "import elastic_compile.flyte2, flyte"),
    ("environment_settings(spec) (no flyte)", SETTINGS),
    ("environment_kwargs(spec)", KWARGS),
    ("import flyte, flyteplugins.pytorch (no us)", "import flyte, flyteplugins.pytorch"),
]  # fmt: skip


def import_seconds(module: str) -> float:
    """``-X importtime``: cumulative microseconds of ``module``'s import, as seconds."""
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import {module}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stderr
    top = [line for line in out.splitlines() if re.search(rf"\|\s*{re.escape(module)}$", line)]
    return int(top[-1].split("|")[1]) / 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    measured = [(label, *median_run([sys.executable, "-c", code], args.runs)) for label, code in ROWS]
    print(f"whole process, median of {args.runs} runs")
    print(f"{'what':<46} {'median s':>9} {'peak RSS MiB':>13}")
    for label, seconds, rss in measured:
        print(f"{label:<46} {seconds:>9.3f} {rss / 1024:>13.1f}")
    for module in ("elastic_compile.flyte2", "flyte"):
        print(f"-X importtime {module}: {import_seconds(module):.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
