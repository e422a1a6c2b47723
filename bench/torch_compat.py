"""elastic-launch's real multi-process tests on every torch release installable here.

    .venv/bin/python bench/torch_compat.py [--setup] [--torch VERSION ...] [-k EXPR] [--last] [--by-scenario]

Each row is one test of ``tests/entrypoint/test_launch_processes.py`` (two agents running a
DDP step, a restart in place after a worker failure, scale-up, exit codes, root-cause
reports, SIGTERM, rendezvous timeout), run by this venv's pytest with ``EC_TEST_PYTHON``
naming the interpreter that runs elastic-launch and therefore its workers.

Releases:

* 2.13.0: this venv (the CPU wheel on disk, pinned by constraints.txt);
* 2.14.1 and 2.9.1: one venv each under ``.torch-compat/`` (gitignored), which ``--setup``
  creates with ``pip install torch==X numpy==2.4.6``. On Python 3.11 pip takes 2.14.1 from
  this machine's disk and 2.9.1 from PyPI; both are CUDA builds of 5-7 GB, which is why
  this is a bench and not CI. Only these exact versions are ever asked for: an open torch
  requirement would download the newest CUDA build.
* any other venv at ``.torch-compat/torch-VERSION/`` is run too. docs/install.md says how
  the 2.12.0 one (the oldest supported release) was put together from its wheel.

Those venvs hold torch and what pip installs with it, never elastic-compile: the launcher
runs from this checkout through ``PYTHONPATH``, so every row also shows it needs nothing but
torch and the standard library (pydantic and PyYAML are absent there).

Prints a Markdown table: torch version, scenario, pass/fail, seconds (``--by-scenario``: one
column per release); then, for a release with failures, the launcher's error lines.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMPAT_DIR = ROOT / ".torch-compat"
TESTS = "tests/entrypoint/test_launch_processes.py"
THIS_VENV = "2.13.0"
# What --setup installs, each into COMPAT_DIR / f"torch-{version}". Exact versions only.
SETUP = ("2.9.1", "2.14.1")
NUMPY = "numpy==2.4.6"  # the test extra's; torch warns on every start without numpy
# Not a launcher scenario: it checks the test helpers' process scan, without torch.
DESELECT = "not process_scan"


@dataclass(frozen=True)
class Row:
    torch: str
    scenario: str
    passed: bool
    seconds: float
    why: str = ""


def releases() -> list[str]:
    """This venv's release, the setup releases and any other torch venv in COMPAT_DIR, oldest first."""
    found = {THIS_VENV, *SETUP} | {
        p.parents[1].name.removeprefix("torch-") for p in COMPAT_DIR.glob("torch-*/bin/python")
    }
    return sorted(found, key=lambda v: tuple(int(n) for n in re.findall(r"\d+", v)))


def python_of(version: str) -> Path:
    if version == THIS_VENV:
        return Path(sys.executable)
    return COMPAT_DIR / f"torch-{version}" / "bin" / "python"


def torch_version(python: Path) -> str | None:
    if not python.exists():
        return None
    result = subprocess.run(
        [str(python), "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True, check=False
    )
    return result.stdout.strip() if result.returncode == 0 else None


def setup(version: str) -> None:
    """Create the venv of ``version`` unless it already holds that torch."""
    venv = COMPAT_DIR / f"torch-{version}"
    if (torch_version(python_of(version)) or "").startswith(version):
        return
    print(f"setting up {venv} (pip install torch=={version}, several GB)", file=sys.stderr, flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "pip"), "install", "--quiet", "--progress-bar", "off"]
    subprocess.run([*pip, f"torch=={version}", NUMPY], check=True)


def launcher_error(text: str) -> str:
    """The launcher's first error line in a failure report ("" if the report has none)."""
    match = re.search(r"elastic-launch: (?:agent error|error|rendezvous error)[^\n]*", text)
    return match.group(0)[:160] if match else ""


def run_release(version: str, selection: str, rerun: bool = True) -> list[Row]:
    python = python_of(version)
    found = torch_version(python)
    if found is None:
        return [Row(version, "(not installed: run with --setup)", False, 0.0)]
    report = COMPAT_DIR / f"results-{version}.xml"
    if rerun or not report.exists():
        report.parent.mkdir(exist_ok=True)
        pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", TESTS, "-k", selection]
        subprocess.run(
            [*pytest, f"--junitxml={report}"],
            cwd=ROOT,
            env={**os.environ, "EC_TEST_PYTHON": str(python)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
        )
    rows = []
    for case in ET.parse(report).getroot().iter("testcase"):
        problem = case.find("failure")
        if problem is None:
            problem = case.find("error")
        if case.find("skipped") is not None:
            continue
        why = "" if problem is None else launcher_error(f"{problem.get('message', '')}\n{problem.text or ''}")
        name = case.get("name", "").removeprefix("test_")
        rows.append(Row(found, name, problem is None, float(case.get("time", 0)), why))
    return rows


def print_by_scenario(rows: list[Row]) -> None:
    releases = list(dict.fromkeys(r.torch for r in rows))
    cells = {(r.scenario, r.torch): f"{'pass' if r.passed else 'FAIL'} {r.seconds:.1f}" for r in rows}
    print("| scenario | " + " | ".join(releases) + " |")
    print("|---|" + "---|" * len(releases))
    for scenario in dict.fromkeys(r.scenario for r in rows):
        print(f"| {scenario} | " + " | ".join(cells.get((scenario, t), "-") for t in releases) + " |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--setup", action="store_true", help="create the missing torch venvs (downloads GBs)")
    parser.add_argument("--torch", action="append", help="only these releases (e.g. 2.14.1)")
    parser.add_argument("--last", action="store_true", help="print the last results again instead of running")
    parser.add_argument("--by-scenario", action="store_true", help="one row per scenario, one column per release")
    parser.add_argument("-k", default=DESELECT, help=f"pytest -k selection (default: {DESELECT!r})")
    args = parser.parse_args(argv)
    if args.setup:
        for version in SETUP:
            if not args.torch or version in args.torch:
                setup(version)
    versions = [v for v in releases() if not args.torch or v in args.torch]

    rows: list[Row] = []
    for version in versions:
        started = time.monotonic()
        release_rows = run_release(version, args.k, rerun=not args.last)
        rows += release_rows
        passed = sum(r.passed for r in release_rows)
        took = "(last run)" if args.last else f"in {time.monotonic() - started:.0f}s"
        print(
            f"torch {version}: {passed}/{len(release_rows)} passed {took}",
            file=sys.stderr,
            flush=True,
        )

    if args.by_scenario:
        print_by_scenario(rows)
    else:
        print("| torch | scenario | result | seconds |")
        print("|---|---|---|---:|")
        for r in rows:
            print(f"| {r.torch} | {r.scenario} | {'pass' if r.passed else 'FAIL'} | {r.seconds:.1f} |")
    for torch in dict.fromkeys(r.torch for r in rows if not r.passed):
        whys = sorted({r.why for r in rows if r.torch == torch and r.why})
        print(f"\ntorch {torch}: " + (" / ".join(whys) or f"see {COMPAT_DIR.name}/results-*.xml"))
    return 0 if all(r.passed for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
