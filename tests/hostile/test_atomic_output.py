"""Nothing half-written: ``-o DIR`` either writes every file or leaves DIR exactly as it was.

``writer.write_directory`` writes each new file to a temporary file beside it, then renames
them into place, keeping each old file as a hard link until the end. Each test first writes
a known previous output, then makes a later run fail at a different point (a bad spec in a
batch, a template that raises or emits invalid YAML for the second target, a full disk
mid-write, a failing rename or link, an immutable or read-only target) and checks that
the previous bytes are untouched and no temporary file is left.

We run as root, so permission bits stop nothing: the read-only cases use ``chattr +i``
(ext4 here) and a read-only bind mount in a private mount namespace (``unshare -m``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from elastic_compile.compiler import output, writer
from elastic_compile.compiler.cli import main
from elastic_compile.compiler.render import BUILTIN_TEMPLATES

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = str(ROOT / "examples" / "ddp-2x8-gpu.yaml")
MINIMAL = str(ROOT / "examples" / "minimal.yaml")


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` with its bytes (the previous output we must not touch)."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def leftovers(root: Path) -> list[str]:
    """Temporary files of ours (new files and kept old ones) that outlived a run, anywhere under ``root``."""
    return sorted(
        str(p.relative_to(root)) for p in root.rglob("*") if re.search(r"\.elastic-compile-(new|old)-", p.name)
    )


@pytest.fixture
def previous(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> tuple[Path, dict[str, bytes]]:
    """``tmp_path/out/base`` holding a good earlier output of minimal.yaml, and its snapshot.

    The tests run in ``tmp_path`` (the working tree ``-o`` must stay inside).
    """
    monkeypatch.chdir(tmp_path)
    target = tmp_path / "out" / "base"
    assert main([MINIMAL, "-t", "all", "-o", str(target)]) == 0
    capsys.readouterr()
    before = snapshot(target)
    assert {"pytorchjob.yaml", "podtemplate.yaml", output.MANIFEST} <= set(before)
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


def test_bad_second_spec_in_a_batch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
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


def _failing(real: Callable[..., Any], fail_on: int, calls: list[str]) -> Callable[..., Any]:
    """``real``, except that call number ``fail_on`` raises EIO (every call is recorded)."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls.append(str(args[0]))
        if len(calls) == fail_on:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real(*args, **kwargs)

    return wrapper


def test_disk_full_while_writing_the_second_file(
    previous: tuple[Path, dict[str, bytes]], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    target, before = previous
    real = writer._write_new
    calls: list[str] = []

    def write_new(parent: int, name: str, data: bytes) -> str:
        calls.append(name)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(parent, name, data)

    monkeypatch.setattr(writer, "_write_new", write_new)
    assert main([EXAMPLE, "-t", "all", "-o", str(target)]) == 2
    assert capsys.readouterr().err == (
        f"elastic-compile: error: cannot write {target}/pytorchjob.yaml: No space left on device\n"
    )
    # kustomization.yaml, openapi.json and the manifest are the same for both specs: not rewritten.
    assert calls == ["podtemplate.yaml", "pytorchjob.yaml"]
    _assert_untouched(target, before)


def test_a_failing_fsync_puts_every_file_back(
    previous: tuple[Path, dict[str, bytes]], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The staged files are made durable together before any rename: when that fails, nothing moved."""
    target, before = previous
    synced: list[int] = []

    def fsync(fd: int) -> None:
        synced.append(fd)
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(writer.os, "fsync", fsync)
    assert main([EXAMPLE, "-t", "all", "-o", str(target)]) == 2
    assert capsys.readouterr().err == (
        f"elastic-compile: error: cannot write {target}/podtemplate.yaml: Input/output error\n"
    )
    monkeypatch.undo()
    assert len(synced) == 2, "both staged files were synced, none renamed"
    _assert_untouched(target, before)


@pytest.mark.parametrize("fail_on", [1, 2])
@pytest.mark.parametrize("call", ["rename", "link"])
def test_a_failing_rename_or_link_puts_every_file_back(
    previous: tuple[Path, dict[str, bytes]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    call: str,
    fail_on: int,
) -> None:
    """The Nth rename into place (or hard link keeping an old file) fails: every file keeps its old bytes."""
    target, before = previous
    calls: list[str] = []
    monkeypatch.setattr(writer.os, call, _failing(getattr(os, call), fail_on, calls))
    assert main([EXAMPLE, "-t", "all", "-o", str(target)]) == 2
    assert "Input/output error" in capsys.readouterr().err
    monkeypatch.undo()
    assert len(calls) >= fail_on
    _assert_untouched(target, before)


def test_removing_a_stale_file_fails(
    previous: tuple[Path, dict[str, bytes]], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """-t pytorchjob after -t all removes podtemplate.yaml; when that fails, the new files go too."""
    target, before = previous
    calls: list[str] = []
    monkeypatch.setattr(writer.os, "unlink", _failing(os.unlink, 1, calls))
    assert main([EXAMPLE, "-o", str(target)]) == 2
    assert capsys.readouterr().err == (
        f"elastic-compile: error: cannot write {target}/podtemplate.yaml: Input/output error\n"
    )
    monkeypatch.undo()
    _assert_untouched(target, before)


def test_a_new_subdirectory_is_removed_on_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    target = tmp_path / "deploy"
    target.mkdir()
    (target / "prod").mkdir()
    (target / "prod" / "kustomization.yaml").write_text("resources: [../llm-finetune]\n")
    before = snapshot(target)
    calls: list[str] = []
    # New files are put in place with link(), which never replaces anything: the 4th of 7 fails.
    monkeypatch.setattr(writer.os, "link", _failing(os.link, 4, calls))
    assert main([EXAMPLE, MINIMAL, "-o", str(target)]) == 2
    capsys.readouterr()
    monkeypatch.undo()
    assert snapshot(target) == before
    assert sorted(p.name for p in target.iterdir()) == ["prod"], "the new base directories are gone"


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
    assert err == f"elastic-compile: error: cannot write {target}/podtemplate.yaml: Operation not permitted\n"
    _assert_untouched(target, before)


def test_immutable_parent_directory_does_not_matter(
    previous: tuple[Path, dict[str, bytes]], capsys: pytest.CaptureFixture[str]
) -> None:
    """Only DIR is written (its temporary files live inside it): an immutable parent changes nothing."""
    target, _ = previous
    with immutable(target.parent):
        assert main([EXAMPLE, "-t", "all", "-o", str(target)]) == 0
    assert capsys.readouterr().err == ""
    assert "llm-finetune" in (target / "pytorchjob.yaml").read_text()
    assert leftovers(target) == []


def test_immutable_old_file(previous: tuple[Path, dict[str, bytes]], capsys: pytest.CaptureFixture[str]) -> None:
    """An old file that cannot be replaced: every other file keeps its old bytes too."""
    target, before = previous
    with immutable(target / "pytorchjob.yaml"):
        code = main([EXAMPLE, "-t", "all", "-o", str(target)])
        err = capsys.readouterr().err
    assert code == 2
    assert err == f"elastic-compile: error: cannot write {target}/pytorchjob.yaml: Operation not permitted\n"
    _assert_untouched(target, before)


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
        cwd=target.parent.parent,
    )
    assert run.returncode == 2, run.stderr
    assert run.stderr == f"elastic-compile: error: cannot write {target}/podtemplate.yaml: Read-only file system\n"
    assert run.stdout == ""
    _assert_untouched(target, before)


def test_a_full_filesystem_for_real(tmp_path: Path) -> None:
    """A 64 KiB tmpfs: the previous output fits, the larger one does not. Nothing changes."""
    if not _unshare_available():
        pytest.skip("unshare -m with mount is not permitted here (needs CAP_SYS_ADMIN)")
    mnt = tmp_path / "small"
    mnt.mkdir()
    big = tmp_path / "big.yaml"
    env = "".join(f"  V{i}: {'x' * 1000}\n" for i in range(100))
    big.write_text(f"name: big\nimage: x:1\ncommand: [python, t.py]\nenv:\n{env}")
    cli = [sys.executable, "-m", "elastic_compile.compiler.cli"]
    script = (
        'mount -t tmpfs -o size=64k none "$1" && cd "$1" && mkdir work && cd work && '
        '"$2" -m elastic_compile.compiler.cli "$3" -t all -o base && '
        "sha256sum base/* base/.elastic-compile-owned > ../before && "
        '{ "$2" -m elastic_compile.compiler.cli "$4" -t all -o base; echo "exit $?"; } && '
        "sha256sum base/* base/.elastic-compile-owned | cmp - ../before && ls -A base"
    )
    run = subprocess.run(
        ["unshare", "-m", "sh", "-c", script, "sh", str(mnt), cli[0], MINIMAL, str(big)],
        capture_output=True, text=True, timeout=120, check=False, cwd=ROOT,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert "exit 2" in run.stdout
    assert run.stderr.startswith("elastic-compile: error: cannot write base/")
    assert run.stderr.endswith(": No space left on device\n")
    assert run.stdout.split("exit 2\n")[1].split() == sorted(
        [".elastic-compile-owned", "kustomization.yaml", "openapi.json", "podtemplate.yaml", "pytorchjob.yaml"]
    )
