"""Hostile input: how fast the bounds stop it, and what the custom-template sandbox costs.

    .venv/bin/python bench/hostile_bench.py [--runs 7]

Measures, on this machine (medians of ``--runs``):
* the loader rejecting an amplified alias: one 50,000-character string aliased 19,000
  times (126 KB of YAML that expands to ~950 million characters) and a billion-laughs
  bomb; both stop at a bound (8 MiB of characters, 20,000 values) while parsing;
* the cost of the custom-template sandbox: compiling ``examples/ddp-2x8-gpu.yaml`` in
  process with the built-in template against the same template given as ``--templates``
  (confined loading, bounded environment, a forked child under CPU and address-space
  limits, the output parsed back as untrusted).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from elastic_compile.compiler.pipeline import compile_path
from elastic_compile.compiler.render import BUILTIN_TEMPLATES
from elastic_compile.core.errors import SpecError
from elastic_compile.core.loader import load_text

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "ddp-2x8-gpu.yaml"

BASE = "name: t\nimage: x:1\ncommand: [python, t.py]\n"
AMPLIFIED = BASE + "s: &s " + "x" * 50_000 + "\nargs: [" + ", ".join(["*s"] * 19_000) + "]\n"
LAUGHS = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True)
)


def median_seconds(action: Callable[[], object], runs: int) -> float:
    """Median wall seconds of ``action`` over ``runs`` calls (after one warm-up)."""
    action()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def median_cpu_seconds(action: Callable[[], object], runs: int) -> float:
    """Median CPU seconds of ``action``, this process and its children (steadier than wall time on a busy machine)."""
    action()
    times = []
    for _ in range(runs):
        before = os.times()
        action()
        after = os.times()
        times.append(sum(after[:4]) - sum(before[:4]))
    return statistics.median(times)


def rejected(text: str) -> Callable[[], str]:
    def load() -> str:
        try:
            load_text(text, "bench.yaml")
        except SpecError as e:
            return e.problems[0].message
        raise SystemExit("the loader accepted a hostile document")

    return load


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    for name, text in (("amplified alias", AMPLIFIED), ("billion laughs", LAUGHS)):
        seconds = median_seconds(rejected(text), args.runs)
        print(f"{name}: {len(text.encode())} bytes rejected in {seconds * 1000:.1f} ms ({rejected(text)()})")
    with tempfile.TemporaryDirectory() as folder:
        custom = Path(folder)
        (custom / "pytorchjob.yaml.j2").write_text((BUILTIN_TEMPLATES / "pytorchjob.yaml.j2").read_text())
        builtin = median_seconds(lambda: compile_path(EXAMPLE), args.runs * 5)
        sandboxed = median_seconds(lambda: compile_path(EXAMPLE, template_dir=custom), args.runs * 5)
        builtin_cpu = median_cpu_seconds(lambda: compile_path(EXAMPLE), args.runs * 5)
        sandboxed_cpu = median_cpu_seconds(lambda: compile_path(EXAMPLE, template_dir=custom), args.runs * 5)
    print(
        f"compile {EXAMPLE.name}: built-in template {builtin * 1000:.1f} ms, the same as --templates "
        f"{sandboxed * 1000:.1f} ms wall (sandbox cost {(sandboxed - builtin) * 1000:.1f} ms per custom template); "
        f"CPU {builtin_cpu * 1000:.0f} ms vs {sandboxed_cpu * 1000:.0f} ms (10 ms clock ticks)"
    )


if __name__ == "__main__":
    main()
