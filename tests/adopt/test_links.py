"""``import`` and ``doctor`` hold to the boundary compiling holds to: a link out of the repository is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from elastic_compile.compiler.cli import main

SECRET = "apiVersion: v1\nkind: Secret\nmetadata: {name: do-not-print}\nstringData: {token: hunter2}\n"


@pytest.mark.parametrize("command", ["import", "doctor", "compile"])
def test_a_link_out_of_the_repository_is_refused_by_name(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (tmp_path / "secret.yaml").write_text(SECRET, encoding="utf-8")
    (repo / "job.yaml").symlink_to(tmp_path / "secret.yaml")
    monkeypatch.chdir(repo)
    args = ["job.yaml"] if command == "compile" else [command, "job.yaml"]
    assert main(args) == 2
    out, err = capsys.readouterr()
    assert err == "job.yaml:1:1: spec: a symbolic link that leads outside " + str(repo) + "; not followed\n"
    assert "hunter2" not in out + err and "do-not-print" not in out + err


@pytest.mark.parametrize("command", ["import", "doctor"])
def test_a_file_outside_the_repository_named_as_such_is_read(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A path outside the boundary as written is the command's own choice, as for compiling."""
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (tmp_path / "other.yaml").write_text(SECRET, encoding="utf-8")
    monkeypatch.chdir(repo)
    main([command, str(tmp_path / "other.yaml")])
    assert "a symbolic link" not in capsys.readouterr().err
