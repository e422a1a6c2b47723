"""Choosing where worker logs and temporary files go (``entrypoint.scratch``), on real directories.

The processes-level tests (a read-only root in a mount namespace) are in
``test_launch_container.py``; here each candidate is a real path that cannot hold a
directory (a regular file, a missing path) or can.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from elastic_compile import contract as c
from elastic_compile.entrypoint.scratch import apply_scratch, candidates, prepare_scratch
from elastic_compile.entrypoint.settings import UsageError


def test_candidates_put_tmpdir_first_and_never_the_working_directory() -> None:
    found = [d for d, _ in candidates({c.ENV_TMPDIR: "/scratch"})]
    assert found == ["/scratch", "/tmp", "/var/tmp", "/usr/tmp", "/dev/shm"]
    assert os.getcwd() not in found
    assert next(d for d, _ in candidates({c.ENV_TMPDIR: " "})) == "/tmp"  # blank counts as unset


def test_first_writable_directory_wins_quietly(tmp_path: Path) -> None:
    scratch = prepare_scratch(None, {}, [(str(tmp_path), "$TMPDIR")])
    assert Path(scratch.log_dir).parent == tmp_path and Path(scratch.log_dir).is_dir()
    assert scratch.tmpdir is None and scratch.notes == ()


def test_fallback_points_the_workers_at_what_was_chosen(tmp_path: Path) -> None:
    a_file, missing, good = tmp_path / "file", tmp_path / "missing", tmp_path / "good"
    a_file.write_text("x")
    good.mkdir()
    order = [(str(a_file), "$TMPDIR"), (str(missing), "default"), (str(good), "default")]
    scratch = prepare_scratch(None, {}, order)
    assert scratch.tmpdir == str(good) and Path(scratch.log_dir).parent == good
    [note] = scratch.notes
    assert note.startswith(f"TMPDIR={good} for the agent and the workers; not writable: {a_file} (Not a directory)")
    assert f"{missing} (No such file or directory)" in note


def test_nothing_writable_is_a_usage_error_that_says_what_to_mount(tmp_path: Path) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(UsageError) as e:
        prepare_scratch(None, {}, [(str(a_file), "default"), (str(tmp_path / "missing"), "default")])
    message = str(e.value)
    assert message.startswith("no writable directory for worker logs and error files (read-only root filesystem?)")
    assert "Mount an emptyDir at /tmp, or set TMPDIR to a writable mount, or pass --log-dir" in message
    assert list(tmp_path.iterdir()) == [a_file]  # nothing left behind


def test_log_dir_option_is_created_and_must_be_writable(tmp_path: Path) -> None:
    wanted = tmp_path / "logs" / "run"
    assert prepare_scratch(str(wanted), {}).log_dir == str(wanted) and wanted.is_dir()
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(UsageError, match=r"--log-dir .*: cannot create it"):
        prepare_scratch(str(a_file / "sub"), {})


def test_apply_sets_tmpdir_for_this_process_and_its_children(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(c.ENV_TMPDIR, raising=False)
    monkeypatch.setattr(tempfile, "tempdir", None)
    scratch = prepare_scratch(None, {}, [(str(tmp_path / "missing"), "default"), (str(tmp_path), "default")])
    env: dict[str, str] = {}
    apply_scratch(scratch, env)
    assert env == {c.ENV_TMPDIR: str(tmp_path)} and tempfile.gettempdir() == str(tmp_path)
