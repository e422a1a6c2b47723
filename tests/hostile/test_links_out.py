"""A file or directory named on the command line that a link leads out of the tree is refused by name.

Red-team report items 1 and 2: ``run`` read a spec through a link to a file outside the
repository and printed its first line in an error (``/etc/shadow``, a credentials file), and
a directory named on the command line that is a link out (``teams -> ../secret``) was walked
by compiling and ``apply``. Every command now reads what it is named through one reader
(``elastic_compile.core.source``), which refuses both, never opening the link.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from elastic_compile.compiler.cli import main

SECRET = "TOPSECRET-hunter2"
JOB = "name: t\nimage: ghcr.io/x/y:1.0\ncommand: [python, t.py]\n"


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A git working tree with links to a file and a directory outside it."""
    outside = tmp_path / "secret"
    outside.mkdir()
    (outside / "creds.yaml").write_text(f"{SECRET}: value\n")
    (outside / "x.elastic.yaml").write_text(f"{SECRET}: value\n")
    tree = tmp_path / "repo"
    (tree / ".git").mkdir(parents=True)
    (tree / "job.yaml").write_text(JOB)
    os.symlink("../secret/creds.yaml", tree / "leak.yaml")
    os.symlink("../secret", tree / "teams")
    monkeypatch.chdir(tree)
    return tree


COMMANDS = {
    "compile": [],
    "doctor": ["doctor"],
    "import": ["import"],
    "run": ["run", "--dry-run"],
}


@pytest.mark.parametrize("named", ["leak.yaml", "teams", "teams/x.elastic.yaml"])
@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_command_refuses_a_link_out_by_name(
    repo: Path, capsys: pytest.CaptureFixture[str], command: str, named: str
) -> None:
    argv = [*COMMANDS[command], named]
    if command == "run":
        argv = ["run", named, "--dry-run"]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert SECRET not in captured.out + captured.err
    assert captured.err.splitlines() == [f"{named}:1:1: spec: a symbolic link that leads outside {repo}; not followed"]


def test_apply_refuses_a_directory_that_links_out(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """apply compiles what it is named as compiling does: the linked directory is not walked."""
    assert main(["apply", "teams", "--kubeconfig", str(repo / "none.kubeconfig")]) == 2
    err = capsys.readouterr().err
    assert SECRET not in err
    assert f"teams:1:1: spec: a symbolic link that leads outside {repo}; not followed" in err


def test_links_that_stay_inside_and_paths_outside_as_written_are_read(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    os.symlink("job.yaml", repo / "inside.yaml")
    assert main(["run", "inside.yaml", "--dry-run"]) == 0
    assert main(["run", str(repo.parent / "secret" / "creds.yaml"), "--dry-run"]) == 2  # read, and judged
    assert "unknown field" in capsys.readouterr().err


@pytest.mark.parametrize("named", ["repo/leak.yaml", "repo/teams", "repo/teams/x.elastic.yaml"])
@pytest.mark.parametrize("command", list(COMMANDS))
def test_from_outside_any_git_tree_a_checkout_still_holds_its_links(
    repo: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], command: str, named: str
) -> None:
    """Red team 2, item 14: run from a directory that is no git working tree (a CI workspace, a home
    directory), the boundary is that directory, yet a link in a checkout below it may not lead beside it."""
    workspace = repo.parent
    assert not any(os.path.lexists(p / ".git") for p in (workspace, *workspace.parents))
    monkeypatch.chdir(workspace)
    argv = ["run", named, "--dry-run"] if command == "run" else [*COMMANDS[command], named]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert SECRET not in captured.out + captured.err
    assert captured.err.splitlines() == [f"{named}:1:1: spec: a symbolic link that leads outside repo; not followed"]
    if command == "compile":  # a file beside the checkout, named as itself, is the command's to read
        assert main(["secret/creds.yaml"]) == 2
        assert "unknown field" in capsys.readouterr().err
