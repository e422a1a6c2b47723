"""What a new user and a CI pipeline meet first: machine-readable diagnostics, big runs, typos, completion.

Every command runs as users run it (``main()`` in-process, or the console script in a real
process, a real pseudo-terminal and real shells).
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from elastic_compile import __version__
from elastic_compile.compiler import diagnostics
from elastic_compile.compiler.cli import main

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
BAD = ROOT / "tests" / "readme" / "bad.yaml"
MANY_JOBS = ROOT / "examples" / "many-jobs"
JSON_FIELDS = ["version", "severity", "code", "file", "line", "column", "field", "message"]


@pytest.fixture(autouse=True)
def _in_a_working_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def _specs(where: Path, count: int) -> Path:
    """``count`` jobs that each fire EC102 (a memory-backed /dev/shm, no memory limit) on line 4."""
    where.mkdir()
    for i in range(count):
        (where / f"job{i:03}.elastic.yaml").write_text(
            f"name: job{i:03}\nimage: ghcr.io/example/t:1.0\ncommand: [python, t.py]\nshared_memory: 1Gi\n"
        )
    return where


# --------------------------------------------------------------------------- --message-format


def test_json_is_one_versioned_object_per_problem(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(BAD), "--message-format", "json"]) == 2
    out, err = capsys.readouterr()
    assert main([str(BAD)]) == 2
    text_lines = capsys.readouterr().err.splitlines()
    records = [json.loads(line) for line in err.splitlines()]
    assert out == "" and len(records) == len(text_lines) == 6
    assert all(list(r) == JSON_FIELDS and r["version"] == diagnostics.JSON_VERSION for r in records)
    first = records[0]
    assert (first["file"], first["line"], first["column"], first["field"], first["severity"], first["code"]) == (
        str(BAD), 4, 9, "nnodes", "error", None,
    )  # fmt: skip
    # The text line is the same problem: file:line:col: field: message
    assert text_lines[0] == f"{first['file']}:{first['line']}:{first['column']}: {first['field']}: {first['message']}"


def test_json_lints_carry_code_and_severity(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    specs = _specs(tmp_path / "specs", 1)
    assert main([str(specs / "job000.elastic.yaml"), "--message-format=json"]) == 0
    (record,) = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert (record["code"], record["severity"], record["line"], record["field"]) == (
        "EC102", "warning", 4, "shared_memory",
    )  # fmt: skip
    assert not record["message"].startswith("warning")  # the code and severity have fields of their own
    assert main([str(specs / "job000.elastic.yaml"), "--message-format=json", "--strict"]) == 2
    assert json.loads(capsys.readouterr().err)["severity"] == "error"


def test_usage_errors_in_json_have_no_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["improt", "job.yaml", "--message-format", "json"]) == 2
    (record,) = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert (record["code"], record["file"], record["line"], record["field"]) == ("usage", None, None, None)
    assert "did you mean import?" in record["message"]


def test_github_workflow_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(BAD), "--message-format", "github"]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == (
        f"::error file={BAD},line=4,col=9::nnodes: expected N or MIN:MAX with 1 <= MIN <= MAX, e.g. 2 or 1:4 "
        "(given: 4:1)"
    )
    specs = _specs(tmp_path / "specs", 2)
    assert main([str(specs), "--message-format", "github"]) == 0
    first, _, summary = capsys.readouterr().err.splitlines()
    assert first.startswith(f"::warning file={specs}/job000.elastic.yaml,line=4,col=16,title=EC102::shared_memory: ")
    assert summary == "elastic-compile: 2 specs, printed to standard output, 2 warnings, 0 errors"


def test_github_escapes_what_would_end_a_command() -> None:
    from elastic_compile.core.errors import Problem

    line = diagnostics.github_line(Problem("a,b:c.yaml", 1, 2, "env.X", "100% sure\nnext", code="EC1"))
    assert line == "::error file=a%2Cb%3Ac.yaml,line=1,col=2,title=EC1::env.X: 100%25 sure%0Anext"


def test_doctor_findings_in_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = tmp_path / "job.yaml"
    job.write_text((ROOT / "tests" / "readme" / "handwritten-job.yaml").read_text())
    assert main(["doctor", str(job)]) == 1
    text = capsys.readouterr().out.splitlines()
    assert main(["doctor", str(job), "--message-format", "json"]) == 1
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(records) == len(text) > 0
    assert all(re.fullmatch(r"DR\d{3}", r["code"]) and r["file"] == str(job) for r in records)
    assert text[0].startswith(f"{job}:{records[0]['line']}:{records[0]['column']}: {records[0]['field']}: ")
    assert main(["doctor", str(job), "--message-format", "github"]) == 1
    assert capsys.readouterr().out.startswith(f"::error file={job},line={records[0]['line']},")


def test_stale_check_in_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = _specs(tmp_path / "specs", 1) / "job000.elastic.yaml"
    assert main([str(spec), "-o", "base"]) == 0
    spec.write_text(spec.read_text().replace("t:1.0", "t:2.0"))
    capsys.readouterr()
    assert main([str(spec), "-o", "base", "--check", "--message-format", "json"]) == 1
    records = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert [(r["code"], r["severity"]) for r in records] == [("EC102", "warning"), ("stale", "error")]
    stale = records[1]
    image_line = _image_line(tmp_path / "base" / "pytorchjob.yaml")
    assert (stale["file"], stale["line"], stale["column"], stale["field"]) == (
        "base/pytorchjob.yaml",
        image_line,
        1,
        None,
    )
    assert (
        stale["message"] == f"stale: a write would change it from line {image_line}; rerun without --check to update it"
    )


def test_stale_check_names_each_stale_file_for_github(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One annotation per file a write would change, create or remove (red team 9), at a path GitHub matches."""
    specs = _specs(tmp_path / "specs", 3)
    assert main(["./specs", "-o", "./deploy"]) == 0
    (specs / "job000.elastic.yaml").write_text((specs / "job000.elastic.yaml").read_text().replace("t:1.0", "t:2.0"))
    (specs / "job001.elastic.yaml").unlink()
    (specs / "job003.elastic.yaml").write_text((specs / "job002.elastic.yaml").read_text().replace("job002", "job003"))
    capsys.readouterr()
    assert main(["./specs", "-o", "./deploy", "--check", "--message-format", "github"]) == 1
    out, err = capsys.readouterr()
    stale = [line for line in err.splitlines() if "title=stale" in line]
    assert stale == [
        # Its two comment lines, then job000's three files: job001's go, job003's come.
        "::error file=deploy/.elastic-compile-owned,line=6,col=1,title=stale::stale: a write would change it from "
        "line 6; rerun without --check to update it",
        *(
            f"::error file=deploy/job000/{name},line={line},col=1,title=stale::stale: a write would change it from "
            f"line {line}; rerun without --check to update it"
            for name, line in (("pytorchjob.yaml", _image_line(tmp_path / "deploy" / "job000" / "pytorchjob.yaml")),)
        ),
        *(
            f"::error file=deploy/job001/{name},line=1,col=1,title=stale::stale: a write would remove it (no spec "
            "emits it any more); rerun without --check to update it"
            for name in ("kustomization.yaml", "openapi.json", "pytorchjob.yaml")
        ),
        *(
            f"::error file=deploy/job003/{name},line=1,col=1,title=stale::stale: a write would create it; rerun "
            "without --check to update it"
            for name in ("kustomization.yaml", "openapi.json", "pytorchjob.yaml")
        ),
    ], err
    assert "--- a/./deploy/job000/pytorchjob.yaml" in out or "--- a/deploy/job000/pytorchjob.yaml" in out
    assert not any("file=./" in line for line in err.splitlines())


def _image_line(path: Path) -> int:
    """The line of the image a test spec wrote (the first a change of it makes stale)."""
    return [line.strip() for line in path.read_text().splitlines()].index("image: ghcr.io/example/t:1.0") + 1


def test_github_and_json_paths_are_normalised(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``elastic-compile .`` finds ``./a.elastic.yaml``; GitHub drops an annotation on that spelling (red team 10)."""
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.elastic.yaml").write_text(
        "name: t\nimage: ghcr.io/x/y:1.0\ncommand: [python, t.py]\nmax_restarts: -1\n"
    )
    os.chdir(tmp_path / "d")
    assert main([".", "--message-format", "github"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("::error file=a.elastic.yaml,line=4,col=15::max_restarts: "), err
    assert main(["./sub/../a.elastic.yaml", "--message-format", "json"]) == 2
    assert json.loads(capsys.readouterr().err.splitlines()[0])["file"] == "a.elastic.yaml"
    assert main(["."]) == 2
    assert capsys.readouterr().err.startswith("./a.elastic.yaml:4:15: max_restarts: ")  # text: as found


def test_json_escapes_a_file_name_that_is_not_utf8(tmp_path: Path) -> None:
    """``bad\\xff.yaml`` (red team 11): every line stays UTF-8 JSON; Python's reader gets the name's bytes back."""
    name = os.fsdecode(b"bad\xff.yaml")
    (tmp_path / name).write_text("name: t\nname: u\n")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / os.fsdecode(b"x\xfe.elastic.yaml")).write_text("name: t\nname: u\n")
    env = {**os.environ, "LC_ALL": "C.UTF-8"}
    for args in ([name], ["d"], ["doctor", name]):
        done = subprocess.run(
            [BIN / "elastic-compile", *args, "--message-format", "json"], capture_output=True, env=env, check=False
        )
        assert done.returncode in (1, 2), done.stderr
        raw = done.stdout if args[0] == "doctor" and done.stdout else done.stderr
        lines = raw.decode("utf-8").splitlines()  # valid UTF-8, or this raises
        assert lines and "internal" not in raw.decode(), raw
        record = json.loads(lines[0])
        assert os.fsencode(record["file"]).endswith((b"bad\xff.yaml", b"x\xfe.elastic.yaml")), record
        assert b"\\udc" in raw  # the JSON escape of the byte, the six characters text shows


# --------------------------------------------------------------------------- big runs


def test_repeated_warnings_are_one_line_and_a_summary_ends_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    specs = _specs(tmp_path / "specs", 12)
    assert main([str(specs), "-o", "deploy"]) == 0
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert out == "" and len(lines) == 2
    assert lines[0].startswith(
        f"elastic-compile: warning EC102: 12 times in 12 files: {specs}/job000.elastic.yaml:4:16, "
        f"{specs}/job001.elastic.yaml:4:16, {specs}/job002.elastic.yaml:4:16 and 9 more; a memory-backed"
    )
    assert lines[1] == "elastic-compile: 12 specs, 36 files written to deploy, 0 unchanged, 12 warnings, 0 errors"
    assert main([str(specs), "-o", "deploy"]) == 0
    assert capsys.readouterr().err.splitlines()[1] == (
        "elastic-compile: 12 specs, 0 files written to deploy, 36 unchanged, 12 warnings, 0 errors"
    )
    # json lists every one: a program counts them itself
    assert main([str(specs), "--message-format", "json"]) == 0
    assert len(capsys.readouterr().err.splitlines()) == 12
    # a few are printed as they are
    few = _specs(tmp_path / "few", diagnostics.GROUP_AFTER)
    assert main([str(few)]) == 0
    assert len([line for line in capsys.readouterr().err.splitlines() if "warning EC102" in line]) == 3


def test_errors_of_a_big_run_end_with_the_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    specs = _specs(tmp_path / "specs", 3)
    (specs / "job001.elastic.yaml").write_text("name: broken\n")
    assert main([str(specs), "-o", "deploy"]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines == [lines[0], "elastic-compile: 3 specs, nothing written, 0 warnings, 1 error"]
    assert not (tmp_path / "deploy").exists()


def test_a_name_collision_and_strict_lints_end_with_the_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two jobs for one directory, and a lint under --strict in every spec: grouped, then the summary (red team 20)."""
    specs = _specs(tmp_path / "specs", 5)
    assert main([str(specs), "-o", "deploy", "--strict"]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("elastic-compile: error EC102: 5 times in 5 files: "), lines
    assert lines[1:] == ["elastic-compile: 5 specs, nothing written, 0 warnings, 5 errors"]

    (specs / "job001.elastic.yaml").write_text((specs / "job000.elastic.yaml").read_text())
    assert main([str(specs), "-o", "deploy"]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert "is also the base of" in lines[-2], lines
    assert lines[-1] == "elastic-compile: 5 specs, nothing written, 5 warnings, 1 error"
    assert not (tmp_path / "deploy").exists()


def _in_a_pty(argv: list[str], cwd: Path, after: float) -> str:
    """Run ``elastic-compile ARGV`` with a terminal as stdin, stdout and stderr; all it printed there.

    ``after``: the progress threshold, set in the child before the command runs (a run of this
    test's size is fast; the threshold, not the clock, decides what shows).
    """
    code = (
        "import sys; from elastic_compile.compiler import diagnostics; "
        f"diagnostics.PROGRESS_AFTER = {after!r}; "
        "from elastic_compile.compiler.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    pid, fd = pty.fork()
    if pid == 0:  # the child: a new session on the terminal
        os.chdir(cwd)
        os.execv(sys.executable, [sys.executable, "-c", code, *argv])
    chunks = []
    while True:
        ready, _, _ = select.select([fd], [], [], 60)
        if not ready:
            break
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.waitpid(pid, 0)
    os.close(fd)
    return b"".join(chunks).decode()


def test_progress_shows_on_a_terminal_only(tmp_path: Path) -> None:
    specs = _specs(tmp_path / "specs", 4)
    shown = _in_a_pty([str(specs), "-o", "deploy", "--ignore", "EC102"], tmp_path, after=0.0)
    assert "elastic-compile: compiling 1/4 specs" in shown
    # erased before the summary: the terminal's last line is the summary alone
    assert shown.rsplit("\r\x1b[K", 1)[1].strip() == (
        "elastic-compile: 4 specs, 12 files written to deploy, 0 unchanged, 0 warnings, 0 errors"
    )
    assert not re.search(r"\d+(\.\d+)?\s*s\b", shown)  # never a time
    # a run faster than the threshold shows none
    quiet = _in_a_pty([str(specs), "-o", "deploy", "--ignore", "EC102"], tmp_path, after=3600.0)
    assert "compiling" not in quiet and "4 specs, 0 files written" in quiet
    # standard error that is not a terminal never gets it, even past the threshold
    code = (
        "import sys; from elastic_compile.compiler import diagnostics; diagnostics.PROGRESS_AFTER = 0.0; "
        "from elastic_compile.compiler.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    piped = subprocess.run(
        [sys.executable, "-c", code, str(specs), "--ignore", "EC102"], capture_output=True, text=True, check=True
    )
    assert piped.stderr == "elastic-compile: 4 specs, printed to standard output, 0 warnings, 0 errors\n"


# --------------------------------------------------------------------------- small things


def test_a_mistyped_command_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["improt", "job.yaml"]) == 2
    assert capsys.readouterr().err == (
        "elastic-compile: error: improt: no such command or file; did you mean import? commands: schema, import, "
        "doctor, run, completion, apply; a spec is a file (elastic.yaml)\n"
    )
    Path("improt").write_text("name: t\nimage: x:1\ncommand: [a]\n")  # a file of that name is a spec
    assert main(["improt"]) == 0


@pytest.mark.parametrize(
    ("argv", "hint"),
    [
        (["--strict", "improt"], "did you mean elastic-compile import (a command goes first)?"),
        (["-t", "all", "job.yaml", "explian"], "did you mean --explain?"),
        (["explain"], "did you mean --explain?"),
        (["--strict", "check"], "did you mean --check?"),
        (["help"], "did you mean --help?"),
        (["compile", "job.yaml"], "compiling needs no command: elastic-compile SPEC."),
    ],
)
def test_a_command_word_anywhere_gets_a_pointer(capsys: pytest.CaptureFixture[str], argv: list[str], hint: str) -> None:
    """Not only the first word (red team 18); and the words of options point at the option."""
    Path("job.yaml").write_text("name: t\nimage: x:1\ncommand: [a]\n")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and hint in err, err
    assert "completion" not in err.partition("commands:")[0], err  # `compile` is not `completion`


def test_options_that_would_do_nothing_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """``--root`` that is no directory, ``--explain`` with ``-o``, ``--check`` or ``--format json`` (red team 19)."""
    Path("job.yaml").write_text("name: t\nimage: x:1\ncommand: [a]\n")
    assert main(["job.yaml", "--root", "/nonexistent", "--explain", "-o", "out", "--format", "json"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "elastic-compile: error: --root /nonexistent: not a directory",
        "elastic-compile: error: --explain prints the resolved spec to standard output; it writes no -o DIR and "
        "checks nothing",
        "elastic-compile: error: --explain prints text; --format json is for the manifests",
    ]
    assert not Path("out").exists()
    assert main(["--check", "job.yaml"]) == 2  # red team 23: the spec is missing, not "SPEC" in general
    assert capsys.readouterr().err == (
        "elastic-compile: error: --check job.yaml compares what SPEC compiles to with that file: give the spec too "
        "(elastic-compile SPEC --check job.yaml), or -o DIR to compare a directory\n"
    )


def test_elastic_launch_version() -> None:
    result = subprocess.run([BIN / "elastic-launch", "--version"], capture_output=True, text=True, check=False)
    assert (result.returncode, result.stdout, result.stderr) == (0, f"elastic-launch {__version__}\n", "")


# --------------------------------------------------------------------------- completion


def _script(shell: str, tmp_path: Path) -> Path:
    result = subprocess.run([BIN / "elastic-compile", "completion", shell], capture_output=True, text=True, check=True)
    path = tmp_path / f"completion.{shell}"
    path.write_text(result.stdout)
    return path


BASH_COMPLETE = """
source "$1"; shift
COMP_WORDS=("$@"); COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 )); COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}
_shtab_elastic_compile elastic-compile "${COMP_WORDS[-1]}" "${COMP_WORDS[-2]}"
printf '%s\\n' "${COMPREPLY[@]}"
"""


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        (["imp"], ["import"]),
        (["-t", ""], ["pytorchjob", "trainjob", "podtemplate", "flyte", "flyte2", "all"]),
        (["spec.yaml", "--message-f"], ["--message-format"]),
        (["spec.yaml", "--message-format", ""], ["text", "json", "github"]),
        (["import", "--torch"], ["--torchrun"]),
        (["run", "spec.yaml", "--nproc"], ["--nproc-per-node"]),
        (["completion", "f"], ["fish"]),
        (["spec.yaml", "-o", "dep"], ["deploy"]),
    ],
)
def test_bash_completes_from_the_parsers(tmp_path: Path, words: list[str], expected: list[str]) -> None:
    """The bash script, sourced in a real bash, completes commands, options, choices and paths."""
    script = _script("bash", tmp_path)
    (tmp_path / "deploy").mkdir()
    result = subprocess.run(
        ["bash", "-c", BASH_COMPLETE, "bash", script, "elastic-compile", *words],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )
    assert result.stdout.split() == expected


@pytest.mark.parametrize(("shell", "check"), [("zsh", ["zsh", "-n"]), ("fish", ["fish", "--no-execute"])])
def test_zsh_and_fish_scripts_parse(tmp_path: Path, shell: str, check: list[str]) -> None:
    script = _script(shell, tmp_path)
    text = script.read_text()
    assert "--message-format" in text and "import" in text and "pytorchjob" in text
    if shutil.which(check[0]) is None:
        pytest.skip(f"{check[0]} is not installed here (apt-get install {check[0]}); the script was generated")
    subprocess.run([*check, str(script)], check=True)


def test_fish_completes_in_fish(tmp_path: Path) -> None:
    if shutil.which("fish") is None:
        pytest.skip("fish is not installed here (apt-get install fish)")
    script = _script("fish", tmp_path)
    result = subprocess.run(
        ["fish", "--no-config", "-c", f"source {script}; complete -C 'elastic-compile --message-format '"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert {line.split("\t")[0] for line in result.stdout.splitlines()} >= {"text", "json", "github"}


# --------------------------------------------------------------------------- --explain under -t trainjob

TRAINJOB_EXAMPLE = ROOT / "examples" / "trainjob-2x8-gpu.yaml"
NOT_CARRIED = (
    "restart_policy",
    "run_policy.clean_pod_policy",
    "run_policy.ttl_seconds_after_finished",
    "run_policy.managed_by",
    "run_policy.scheduling",
)


def _explained(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, str]:
    assert main([str(TRAINJOB_EXAMPLE), "--explain", *args]) == 0
    rows = {}
    for line in capsys.readouterr().out.splitlines():
        if not line.startswith("#"):
            setting, _, note = line.partition("  # ")
            rows[setting.partition(": ")[0]] = f"{setting.partition(': ')[2].strip()}  # {note}"
    return rows


def test_explain_under_trainjob_says_what_the_trainjob_carries(capsys: pytest.CaptureFixture[str]) -> None:
    """The PyTorchJob's ExitCode and cleanPodPolicy never reach a TrainJob: --explain says so, not their defaults."""
    for args in ((), ("-t", "all")):  # target: trainjob; -t all emits its TrainJob (and a PodTemplate)
        trainjob = _explained(capsys, *args)
        for path in NOT_CARRIED:
            assert trainjob[path].startswith("null  # not in a TrainJob: "), trainjob[path]
    # the same spec as a PyTorchJob keeps the operator's defaults
    pytorchjob = _explained(capsys, "-t", "pytorchjob")
    assert pytorchjob["restart_policy"].startswith('"ExitCode"  # default ExitCode')
    assert pytorchjob["run_policy.clean_pod_policy"].startswith('"Running"  # default Running')
