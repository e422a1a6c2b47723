"""Hostile input: how fast the bounds stop it, and what the custom-template sandbox costs.

    .venv/bin/python bench/hostile_bench.py [--runs 7]

Measures, on this machine (medians of ``--runs``):
* the loader rejecting an amplified alias: one 50,000-character string aliased 19,000
  times (126 KB of YAML that expands to ~950 million characters) and a billion-laughs
  bomb; both stop at a bound (8 MiB of characters, 20,000 values) while parsing.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from elastic_compile.core.errors import SpecError
from elastic_compile.core.loader import load_text

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


if __name__ == "__main__":
    main()
