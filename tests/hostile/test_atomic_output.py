"""Nothing half-written: ``-o DIR`` either replaces DIR completely or leaves it exactly as it was.

``output.write_directory`` writes into a temporary sibling and renames it into place. Each
test first writes a known previous output, then makes a later run fail at a different
point (a bad spec in a batch, a template that raises or emits invalid YAML for the second
target, a full disk mid-write, a failing final rename, an immutable or read-only target)
and checks that the previous bytes are untouched and no temporary sibling is left.

We run as root, so permission bits stop nothing: the read-only cases use ``chattr +i``
(ext4 here) and a read-only bind mount in a private mount namespace (``unshare -m``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from elastic_compile.compiler import output
from elastic_compile.compiler.cli import main
from elastic_compile.compiler.render import BUILTIN_TEMPLATES

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = str(ROOT / "examples" / "ddp-2x8-gpu.yaml")
MINIMAL = str(ROOT / "examples" / "minimal.yaml")


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` with its bytes (the previous output we must not touch)."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def leftovers(parent: Path) -> list[str]:
    """Hidden entries next to the output: staging and backup directories that outlived a run."""
    return sorted(p.name for p in parent.iterdir() if p.name.startswith("."))


@pytest.fixture
def previous(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[Path, dict[str, bytes]]:
    """``tmp_path/out/base`` holding a good earlier output of minimal.yaml, and its snapshot."""
    target = tmp_path / "out" / "base"
    assert main([MINIMAL, "-t", "all", "-o", str(target)]) == 0
    capsys.readouterr()
    before = snapshot(target)
    assert "pytorchjob.yaml" in before
    return target, before


def _templates(tmp_path: Path, podtemplate: str) -> Path:
    """A template dir: the built-in pytorchjob template, and ``podtemplate`` for the second target."""
    folder = tmp_path / "templates"
    folder.mkdir()
    shutil.copy(BUILTIN_TEMPLATES / "pytorchjob.yaml.j2", folder / "pytorchjob.yaml.j2")
    (folder / "podtemplate.yaml.j2").write_text(podtemplate)
    return folder


def _assert_untouched(target: Path, before: dict[str, bytes]) -> None:
    assert snapshot(target) == before
    assert leftovers(target.parent) == []


def test_bad_second_spec_in_a_batch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "out"
    assert main([EXAMPLE, MINIMAL, "-o", str(target)]) == 0
    before = snapshot(target)
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nimage: x:1\ncommand: [python, t.py]\nnnodes: 0\n")
    capsys.readouterr()
    assert main([EXAMPLE, str(bad), MINIMAL, "-o", str(target)]) == 2
    assert capsys.readouterr().err.startswith(f"{bad}:4:9: nnodes: ")
    _assert_untouched(target, before)


@pytest.mark.parametrize(
    ("podtemplate", "message"),
    [
        ("apiVersion: {{ plan.no_such_field | tojson }}\n", "undefined"),
        ("apiVersion: v1\nkind: [\n", "not valid YAML"),
        ("{{ plan.__class__.__mro__ | tojson }}\n", "template"),
        ('apiVersion: v1\nkind: "Pod"\nmetadata: {{ plan.metadata | to_yaml }}\n', "kind PodTemplate"),
        ("{{ (1 / 0) | tojson }}\n", "ZeroDivisionError"),
    ],
    ids=["undefined", "invalid-yaml", "sandbox", "wrong-kind", "raises"],
)
def test_second_target_fails_mid_render(
    tmp_path: Path,
    previous: tuple[Path, dict[str, bytes]],
    capsys: pytest.CaptureFixture[str],
    podtemplate: str,
    message: str,
) -> None:
    target, before = previous
    templates = _templates(tmp_path, podtemplate)
    # The exit status and message of each failure are pinned in test_custom_templates.py;
    # here only "nothing half-written" matters.
    assert main([EXAMPLE, "-t", "all", "--templates", str(templates), "-o", str(target)]) != 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    _assert_untouched(target, before)


def test_template_fails_only_for_the_second_spec_of_a_batch(
    tmp_path: Path, previous: tuple[Path, dict[str, bytes]], capsys: pytest.CaptureFixture[str]
) -> None:
    target, before = previous
    templates = _templates(
        tmp_path,
        (BUILTIN_TEMPLATES / "podtemplate.yaml.j2").read_text()
        + '{% if plan.name == "minimal" %}{{ plan.boom | tojson }}{% endif %}\n',
    )
    assert main([EXAMPLE, MINIMAL, "-t", "all", "--templates", str(templates), "-o", str(target)]) == 2
    assert "undefined" in capsys.readouterr().err
    _assert_untouched(target, before)


def test_disk_full_while_writing_the_second_file(
    previous: tuple[Path, dict[str, bytes]], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    target, before = previous
    real_write_text = Path.write_text
    calls = {"n": 0}

    def write_text(self: Path, *args: object, **kwargs: object) -> int:
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))
        return real_write_text(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "write_text", write_text)
    assert main([EXAMPLE, "-t", "all", "-o", str(target)]) == 2
    assert "No space left on device" in capsys.readouterr().err
    assert calls["n"] == 2
    monkeypatch.undo()
    _assert_untouched(target, before)


@pytest.mark.parametrize("which", ["old-target-aside", "staging-into-place"])
def test_a_failing_rename(
    previous: tuple[Path, dict[str, bytes]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    which: str,
) -> None:
    target, before = previous
    real_rename = os.rename

    def rename(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        moving_old = Path(src) == target
        moving_new = Path(dst) == target and Path(src).name.startswith(f".{target.name}.")
        if (which == "old-target-aside" and moving_old) or (which == "staging-into-place" and moving_new):
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        real_rename(src, dst)

    monkeypatch.setattr(output.os, "rename", rename)
    assert main([EXAMPLE, "-t", "all", "-o", str(target)]) == 2
    assert "Input/output error" in capsys.readouterr().err
    monkeypatch.undo()
    assert snapshot(target) == before  # kept, or moved back
    assert leftovers(target.parent) == []


# --------------------------------------------------------------------------- real read-only targets


def _chattr(flag: str, path: Path) -> bool:
    return subprocess.run(["chattr", flag, str(path)], capture_output=True, check=False).returncode == 0


_MADE_IMMUTABLE: list[Path] = []


@contextlib.contextmanager
def immutable(path: Path) -> Iterator[None]:
    """``chattr +i path`` for the block; skips when the filesystem or capabilities do not allow it."""
    if shutil.which("chattr") is None or not _chattr("+i", path):
        pytest.skip("chattr +i is not available here (needs ext4/xfs/btrfs and CAP_LINUX_IMMUTABLE)")
    _MADE_IMMUTABLE.append(path)
    try:
        yield
    finally:
        _chattr("-i", path)


@pytest.fixture(autouse=True)
def _never_leave_immutable_files() -> Iterator[None]:
    yield
    while _MADE_IMMUTABLE:  # again, in case a test died inside the block: pytest must delete tmp_path
        path = _MADE_IMMUTABLE.pop()
        if path.exists():
            _chattr("-i", path)


def test_immutable_target_directory(
    previous: tuple[Path, dict[str, bytes]], capsys: pytest.CaptureFixture[str]
) -> None:
    target, before = previous
    with immutable(target):
        assert main([EXAMPLE, "-t", "all", "-o", str(target)]) == 2
        err = capsys.readouterr().err
    assert err == f"elastic-compile: error: cannot write {target}: Operation not permitted\n"
    assert snapshot(target) == before


def test_immutable_target_directory_leaves_no_temporary_sibling(previous: tuple[Path, dict[str, bytes]]) -> None:
    target, _ = previous
    with immutable(target):
        assert main([EXAMPLE, "-o", str(target)]) == 2
    assert leftovers(target.parent) == []


def test_immutable_parent_directory(
    previous: tuple[Path, dict[str, bytes]], capsys: pytest.CaptureFixture[str]
) -> None:
    target, before = previous
    with immutable(target.parent):
        assert main([EXAMPLE, "-t", "all", "-o", str(target)]) == 2
        assert "Operation not permitted" in capsys.readouterr().err
        _assert_untouched(target, before)


def test_undeletable_old_file_is_not_left_silently(
    previous: tuple[Path, dict[str, bytes]], capsys: pytest.CaptureFixture[str]
) -> None:
    target, _ = previous
    with immutable(target / "pytorchjob.yaml"):
        code = main([EXAMPLE, "-o", str(target)])
        err = capsys.readouterr().err
    _MADE_IMMUTABLE.extend(target.parent.rglob("pytorchjob.yaml"))  # the old file moved into the backup
    assert code == 0
    assert leftovers(target.parent) == [] or "warning" in err, leftovers(target.parent)


def _unshare_available() -> bool:
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return False
    probe = subprocess.run(["unshare", "-m", "mount", "-t", "tmpfs", "none", "/mnt"], capture_output=True, check=False)
    return probe.returncode == 0


@pytest.mark.parametrize("mounted", ["target", "parent"])
def test_read_only_bind_mount(previous: tuple[Path, dict[str, bytes]], mounted: str) -> None:
    """The target (or its parent) bind-mounted read-only in a private mount namespace."""
    if not _unshare_available():
        pytest.skip("unshare -m with mount is not permitted here (needs CAP_SYS_ADMIN)")
    target, before = previous
    ro = target if mounted == "target" else target.parent
    script = 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && shift && exec "$@"'
    cli = [sys.executable, "-m", "elastic_compile.compiler.cli", EXAMPLE, "-t", "all", "-o", str(target)]
    run = subprocess.run(
        ["unshare", "-m", "sh", "-c", script, "sh", str(ro), *cli],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 2, run.stderr
    assert run.stderr.startswith(f"elastic-compile: error: cannot write {target}: ")
    assert "Traceback" not in run.stderr and run.stdout == ""
    assert snapshot(target) == before
    assert leftovers(target.parent) == []
