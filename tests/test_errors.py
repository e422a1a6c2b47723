"""The error catalogue: ``tests/errors/<case>.yaml`` and the exact stderr it must produce.

Error text is product surface: each ``<case>.stderr`` holds what
``elastic-compile tests/errors/<case>.yaml`` prints, run from the repository root. After an
intended change to a message, regenerate and review the diff:

    ELASTIC_COMPILE_REGEN=1 .venv/bin/pytest tests/test_errors.py

Every case is checked through ``main()`` in-process (exact text, fast) and through the real
CLI in one batched subprocess; a sample also runs as one subprocess per file.
"""

from __future__ import annotations

import difflib
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from elastic_compile.compiler.cli import main
from elastic_compile.compiler.pipeline import compile_path
from elastic_compile.core.errors import SpecError

REPO = Path(__file__).resolve().parent.parent
ERRORS = REPO / "tests" / "errors"
REGEN_ENV = "ELASTIC_COMPILE_REGEN"
REGEN_COMMAND = f"{REGEN_ENV}=1 .venv/bin/pytest tests/test_errors.py"
REGEN_HINT = f"if the change is intended, regenerate with `{REGEN_COMMAND}` and review the diff"

CASES = sorted(p.stem for p in ERRORS.glob("*.yaml"))
# One located line per problem: file:line:col: field.path: message
LINE = re.compile(r"^[^:]+:\d+:\d+: (?:[^ \[]|\[[^\]]*\])+: .+")
# A few cases run as their own process too: loader errors, schema errors, several at once.
SUBPROCESS_SAMPLE = ("alias-bomb", "invalid-utf8", "python-object-tag", "several-problems", "unknown-field-typo")
EXIT_INPUT = 2


def rel(case: str) -> str:
    """The path as a user types it from the repository root."""
    return f"tests/errors/{case}.yaml"


def _regen() -> bool:
    return os.environ.get(REGEN_ENV) == "1"


def expected_stderr(case: str) -> str:
    path = ERRORS / f"{case}.stderr"
    if not path.is_file():
        pytest.fail(f"{path.relative_to(REPO)} is missing; {REGEN_HINT}")
    return path.read_bytes().decode("utf-8")


def assert_stderr(case: str, actual: str) -> None:
    """``actual`` is exactly the pinned stderr of ``case`` (or rewrite it in regen mode)."""
    path = ERRORS / f"{case}.stderr"
    if _regen():
        if not path.is_file() or path.read_bytes() != actual.encode("utf-8"):
            path.write_bytes(actual.encode("utf-8"))
        return
    expected = expected_stderr(case)
    if actual != expected:
        diff = "".join(
            difflib.unified_diff(
                expected.splitlines(True), actual.splitlines(True), f"expected/{rel(case)[:-5]}.stderr", "actual"
            )
        )
        pytest.fail(f"stderr of {rel(case)} changed; {REGEN_HINT}\n{diff}")


def assert_well_formed(stderr: str) -> None:
    assert stderr.endswith("\n")
    assert "Traceback" not in stderr
    for line in stderr.splitlines():
        assert LINE.match(line), f"not a located one-line problem: {line!r}"


def _cli(*args: str) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if k != REGEN_ENV}
    return subprocess.run(
        [sys.executable, "-m", "elastic_compile.compiler.cli", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        check=False,
        timeout=120,
    )


# --------------------------------------------------------------------------- the catalogue itself


def test_catalogue_is_complete() -> None:
    assert len(CASES) >= 30
    stderr_files = {p.stem for p in ERRORS.glob("*.stderr")}
    assert stderr_files <= set(CASES), f"orphan .stderr files: {sorted(stderr_files - set(CASES))}"
    if not _regen():
        assert set(CASES) <= stderr_files, f"missing .stderr files: {sorted(set(CASES) - stderr_files)}; {REGEN_HINT}"
    assert {p.suffix for p in ERRORS.iterdir()} <= {".yaml", ".stderr"}
    for case in CASES:
        raw = (ERRORS / f"{case}.yaml").read_bytes()
        assert raw == b"" or raw.startswith(b"# "), f"{case}: start with a comment saying what is wrong"


# --------------------------------------------------------------------------- every case


@pytest.mark.parametrize("case", CASES)
def test_error_in_process(case: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(REPO)
    code = main([rel(case)])
    out, err = capsys.readouterr()
    assert code == EXIT_INPUT, err
    assert out == ""
    assert_well_formed(err)
    assert_stderr(case, err)


@pytest.mark.parametrize("case", CASES)
def test_error_through_the_api(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``compile_path`` raises one ``SpecError`` whose problems are the CLI's lines."""
    monkeypatch.chdir(REPO)
    with pytest.raises(SpecError) as info:
        compile_path(rel(case))
    if not _regen():
        assert "".join(f"{p}\n" for p in info.value.problems) == expected_stderr(case)


@pytest.fixture(scope="module")
def batch() -> subprocess.CompletedProcess[bytes]:
    """The whole catalogue through one real CLI process: problems of every file, in argument order."""
    return _cli(*map(rel, CASES))


def test_errors_batched_in_one_process(batch: subprocess.CompletedProcess[bytes]) -> None:
    assert batch.returncode == EXIT_INPUT
    assert batch.stdout == b""
    stderr, summary = batch.stderr.decode("utf-8").rsplit("\n", 2)[:2]
    stderr += "\n"
    assert_well_formed(stderr)
    # A run of several specs ends with one line that counts them and the problems.
    assert re.fullmatch(rf"elastic-compile: {len(CASES)} specs, nothing written, 0 warnings, \d+ errors", summary)
    if not _regen():
        assert stderr == "".join(expected_stderr(c) for c in CASES)


@pytest.fixture(scope="module")
def one_process_each() -> dict[str, subprocess.CompletedProcess[bytes]]:
    with ThreadPoolExecutor(max_workers=len(SUBPROCESS_SAMPLE)) as pool:
        return dict(zip(SUBPROCESS_SAMPLE, pool.map(lambda c: _cli(rel(c)), SUBPROCESS_SAMPLE), strict=True))


@pytest.mark.parametrize("case", SUBPROCESS_SAMPLE)
def test_error_in_its_own_process(case: str, one_process_each: dict[str, subprocess.CompletedProcess[bytes]]) -> None:
    run = one_process_each[case]
    assert (run.returncode, run.stdout) == (EXIT_INPUT, b"")
    stderr = run.stderr.decode("utf-8")
    assert_well_formed(stderr)
    if not _regen():
        assert stderr == expected_stderr(case)


# --------------------------------------------------------------------------- around the messages


def test_debug_shows_the_traceback(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """--debug is for us: the traceback, then the same lines and the same exit code (red-team item 13)."""
    monkeypatch.chdir(REPO)
    assert main([rel("nnodes-zero"), "--debug"]) == EXIT_INPUT
    err = capsys.readouterr().err
    assert err.startswith("Traceback") and "SpecError" in err
    assert err.endswith(expected_stderr("nnodes-zero"))


def test_debug_in_a_process() -> None:
    run = _cli(rel("duplicate-key"), "--debug")
    assert run.returncode == EXIT_INPUT
    assert run.stdout == b""
    assert b"Traceback" in run.stderr
    assert b"SpecError" in run.stderr


def _tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


@pytest.mark.parametrize(
    "specs",
    [
        pytest.param([rel("several-problems")], id="bad-spec"),
        pytest.param(["tests/golden/minimal/elastic.yaml", rel("nnodes-zero")], id="good-then-bad"),
    ],
)
def test_bad_spec_leaves_output_dir_untouched(
    specs: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "deploy"
    out.mkdir()
    (out / "pytorchjob.yaml").write_text("previous: content\n")
    (out / "kustomization.yaml").write_text("resources: [pytorchjob.yaml]\n")
    before, siblings = _tree(out), sorted(p.name for p in tmp_path.iterdir())
    monkeypatch.chdir(REPO)
    code = main([*specs, "-o", str(out)])
    captured = capsys.readouterr()
    assert code == EXIT_INPUT
    assert captured.out == ""
    assert _tree(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == siblings, "no staging directory left behind"
