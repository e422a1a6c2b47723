"""Limits that hold under attack, through the whole command line.

tests/test_loader.py covers the loader's limits in-process. Here each hostile file goes
through ``elastic-compile`` in its own process, as a user (or CI) would run it, and must
end with exit 2, one located line on stderr, no traceback, well under a second of compile
time (measured in-process around ``main()``, so interpreter start and imports do not count)
and a bounded peak RSS (the child's ``ru_maxrss`` from ``os.wait4``).

Known gaps are strict xfails whose reason names the file at fault.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.specs import MINIMAL as BASE
from support.summary import SUMMARY, without_summary

from elastic_compile.core.source import MAX_BYTES

LINE = re.compile(r"^[^:\n]+:\d+:\d+: [^ \n]+: [^\n]+$")
# Work, not seconds (a wall-clock bound fails on a loaded machine): the Python-level calls
# main() makes, counted with sys.setprofile. A document stopped at the 20,000-value cap
# costs about 2.9 million (some 140 per value); the same 1 MiB parsed to its end would cost
# over 60 million. The bound sits between.
MAX_CALLS = 5_000_000
# A hang guard only, never an assertion: a child still running after this long is killed.
DEADLINE_SECONDS = 120.0
MAX_RSS_GROWTH_MIB = 100  # peak RSS during main() over what the imports already took
MAX_RSS_MIB = 250  # the whole child process; imports alone take about 60 MiB
CLI = str(Path(sys.executable).with_name("elastic-compile"))

# Runs main() in the child and records the exit status, the Python calls main() made and
# peak RSS before and after it. Peak RSS is the process's own VmHWM: ru_maxrss (and so
# wait4's) carries over the parent's peak through fork and exec, and pytest's is hundreds of MiB.
DRIVER = textwrap.dedent(
    """
    import json, sys, time
    def hwm():
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    from elastic_compile.compiler.cli import main
    calls = 0
    def count(frame, event, arg):
        global calls
        if event in ("call", "c_call"):
            calls += 1
    before = hwm()
    sys.setprofile(count)
    code = main(sys.argv[2:])
    sys.setprofile(None)
    after = hwm()
    with open(sys.argv[1], "w") as f:
        json.dump({"code": code, "calls": calls, "rss_before_kib": before, "rss_after_kib": after}, f)
    sys.exit(code)
    """
)

LAUGHS = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True)
)


@dataclass(frozen=True)
class Hostile:
    """A hostile input and a fragment its one error line must contain."""

    name: str
    content: bytes
    fragment: str
    gap: str | None = None  # a known gap: the reason of a strict xfail


def _b(text: str) -> bytes:
    return text.encode()


HOSTILE = [
    Hostile("over-1mib", _b("# " + "x" * MAX_BYTES + "\n" + BASE), "larger than 1048576 bytes"),
    Hostile("over-1mib-one-value", _b(BASE + "env: {A: " + "a" * MAX_BYTES + "}\n"), "larger than 1048576 bytes"),
    Hostile("billion-laughs", _b(LAUGHS), "expands to more than 20000 values"),
    # One 50,000-character string aliased 19,000 times (126 KB): minutes and gigabytes
    # before the loader counted expanded characters (8 MiB at most).
    Hostile(
        "amplified-alias",
        _b(BASE + "s: &s " + "x" * 50_000 + "\nargs: [" + ", ".join(["*s"] * 19_000) + "]\n"),
        "expands to more than 8388608 characters",
    ),
    Hostile("alias-bomb-in-a-field", _b(BASE + LAUGHS.replace("i: &i", "env: &i")), "expands to more than"),
    Hostile("deep-flow", _b(BASE + "x: " + "[" * 10_000 + "]" * 10_000 + "\n"), "nesting deeper than 64 levels"),
    Hostile("deep-flow-maps", _b(BASE + "x: " + "{a: " * 5_000 + "1" + "}" * 5_000 + "\n"), "nesting deeper than"),
    Hostile("deep-block", _b("a:\n" + "".join("  " * i + "- \n" for i in range(1, 300))), "nesting deeper than"),
    Hostile(
        "python-apply-tag",
        _b(BASE + "x: !!python/object/apply:os.system ['touch {marker}']\n"),
        "YAML tags other than the standard ones",
    ),
    Hostile(
        "python-new-tag",
        _b(BASE + "x: !!python/object/new:os.system ['touch {marker}']\n"),
        "YAML tags other than the standard ones",
    ),
    Hostile("python-name-tag", _b(BASE + "x: !!python/name:os.system\n"), "YAML tags other than the standard ones"),
    Hostile("invalid-utf8", b"name: t\nimage: \xff\xfe\ncommand: [python, t.py]\n", "not valid UTF-8"),
    Hostile("utf16-surrogate-bytes", b"name: t\nimage: \xed\xa0\x80\ncommand: [a]\n", "not valid UTF-8"),
    Hostile("nul-byte", b"name: t\x00\nimage: x:1\n", "control characters are not allowed"),
    Hostile("escape-byte", b"name: t\nimage: x\x1b[31m:1\n", "control characters are not allowed"),
    Hostile("undefined-alias", _b(BASE + "env: *nope\n"), "undefined alias"),
    Hostile("several-documents", _b(BASE + "---\n" + BASE), "found several"),
    Hostile("recursive-alias", _b(BASE + "x: &a [*a]\n"), "recursive alias"),
    # The next four crashed with exit 3 until 40301cc (self-merge RecursionError, int() past
    # 4300 digits, float() past 1.8e308); the loader now caps numbers at 100 characters.
    Hostile("recursive-merge", _b(BASE + "x: &a {<<: *a}\n"), "x: unknown field"),
    Hostile("huge-integer", _b(BASE + "max_restarts: 1" + "0" * 5_000 + "\n"), "number too long"),
    Hostile("huge-integer-in-a-string-field", _b(BASE + "env: {A: 1" + "0" * 5_000 + "}\n"), "number too long"),
    Hostile("huge-duration", _b(BASE + "monitor_interval: 1" + "0" * 400 + "\n"), "number too long"),
    # Dense documents stop while parsing, at 20,000 values (they once took 6-20 s and 360 MiB).
    Hostile("wide-flat-list", _b("x: [" + "0," * 500_000 + "]\n"), "more than 20000 values in the document"),
    Hostile(
        "wide-flat-map",
        _b("{" + ",".join(f"k{i}: 1" for i in range(100_000)) + "}\n"),
        "more than 20000 values in the document",
    ),
    Hostile("many-duplicate-keys", _b(BASE + "x: 1\n" * 200_000), "more than 20000 values in the document"),
]


def _run(tmp_path: Path, case: Hostile, *, stdin: bytes | None = None) -> tuple[int, str, dict[str, Any], int]:
    """Run the driver on ``case``; returns exit status, stderr, in-process metrics, child peak RSS (KiB).

    A child still running after DEADLINE_SECONDS is killed (status -9, no metrics): known
    gaps that take tens of seconds then fail fast instead of slowing the suite down.
    """
    marker = tmp_path / "pwned"
    spec = tmp_path / f"{case.name}.yaml"
    spec.write_bytes(case.content.replace(b"{marker}", str(marker).encode()))
    metrics = tmp_path / "metrics.json"
    err_path = tmp_path / "stderr.txt"
    with open(err_path, "wb") as err, open(os.devnull, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-c", DRIVER, str(metrics), "-" if stdin is not None else str(spec)],
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            cwd=tmp_path,
        )
        if stdin is not None:
            assert process.stdin is not None
            with contextlib.suppress(BrokenPipeError):  # the CLI stops reading past the limit: good
                process.stdin.write(stdin)
            with contextlib.suppress(BrokenPipeError):
                process.stdin.close()
        deadline = time.monotonic() + DEADLINE_SECONDS
        while True:
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                process.kill()
                _, status, usage = os.wait4(process.pid, 0)
                break
            time.sleep(0.02)
        process.returncode = os.waitstatus_to_exitcode(status)
    assert not marker.exists(), "a YAML tag executed a command"
    measured = json.loads(metrics.read_text()) if metrics.exists() else {"code": None, "calls": MAX_CALLS + 1}
    del usage  # ru_maxrss includes the parent's peak; the driver's own VmHWM is the measure
    return process.returncode, err_path.read_text(errors="replace"), measured, measured.get("rss_after_kib", 0)


def _params() -> list[Any]:
    return [
        pytest.param(case, id=case.name, marks=[pytest.mark.xfail(strict=True, reason=case.gap)] if case.gap else [])
        for case in HOSTILE
    ]


@pytest.mark.parametrize("case", _params())
def test_hostile_file_fails_fast_small_and_located(tmp_path: Path, case: Hostile) -> None:
    code, stderr, metrics, child_rss_kib = _run(tmp_path, case)
    assert "Traceback" not in stderr and "internal error" not in stderr, stderr[:500]
    assert code == 2 and metrics["code"] == 2
    lines = stderr.splitlines()
    assert len(lines) == 1, f"{len(lines)} lines: {stderr[:300]}"
    assert LINE.match(lines[0]) and lines[0].startswith(f"{tmp_path / case.name}.yaml:"), lines[0]
    assert case.fragment in lines[0]
    assert metrics["calls"] < MAX_CALLS, f"main() made {metrics['calls']} calls"
    growth_mib = (metrics["rss_after_kib"] - metrics["rss_before_kib"]) / 1024
    assert growth_mib < MAX_RSS_GROWTH_MIB, f"peak RSS grew by {growth_mib:.0f} MiB"
    assert child_rss_kib / 1024 < MAX_RSS_MIB, f"child peak RSS {child_rss_kib / 1024:.0f} MiB"


def test_hostile_stdin_over_the_limit(tmp_path: Path) -> None:
    case = Hostile("stdin", b"", "")
    code, stderr, metrics, child_rss_kib = _run(tmp_path, case, stdin=b"# " + b"x" * (4 * MAX_BYTES))
    assert (code, stderr) == (2, "<stdin>:1:1: spec: the file is larger than 1048576 bytes\n")
    assert metrics["calls"] < MAX_CALLS and child_rss_kib / 1024 < MAX_RSS_MIB


def test_the_console_script_on_all_hostile_files_at_once(tmp_path: Path) -> None:
    """The installed ``elastic-compile``: every file reported, one line each, one exit status."""
    files = []
    for case in HOSTILE:
        if case.gap is None:
            path = tmp_path / f"{case.name}.yaml"
            path.write_bytes(case.content.replace(b"{marker}", str(tmp_path / "pwned").encode()))
            files.append(path)
    run = subprocess.run([CLI, *map(str, files)], capture_output=True, text=True, timeout=60, check=False)
    assert run.returncode == 2 and run.stdout == ""
    assert "Traceback" not in run.stderr
    # One line per file, then the summary line a run of several specs ends with.
    assert SUMMARY.search(run.stderr), run.stderr[-300:]
    lines = without_summary(run.stderr).splitlines()
    assert [line.split(":", 1)[0] for line in lines] == [str(f) for f in files]
    assert all(LINE.match(line) for line in lines)
    assert not (tmp_path / "pwned").exists()


def test_a_large_valid_spec_compiles_within_the_budget(tmp_path: Path) -> None:
    case = Hostile("many-args", _b("name: t\nimage: x:1\ncommand: [python" + ", a" * 99_000 + "]\n"), "")
    code, _, metrics, _ = _run(tmp_path, case)
    assert code in (0, 2) and metrics["calls"] < MAX_CALLS, metrics
