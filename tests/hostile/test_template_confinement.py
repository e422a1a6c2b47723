"""``--templates DIR`` reads only regular files inside DIR, and never prints what it refused.

A pull request can commit symbolic links, and CI runs ``elastic-compile --templates DIR``
on it: a link to a secret file, to ``/proc/self/environ`` (the CI's tokens) or to a
directory outside must not be read, whether it is the template itself or something it
includes, imports or extends. FIFOs and devices must not be opened (a FIFO would block),
hard links not followed to the file they share, and oversized files not read. Each case
ends with exit 2, one line naming the file, and none of the secret on stdout or stderr.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from elastic_compile.compiler.cli import main
from elastic_compile.compiler.render import BUILTIN_TEMPLATES
from elastic_compile.compiler.sandbox import MAX_TEMPLATE_BYTES

ROOT = Path(__file__).resolve().parents[2]
MINIMAL = str(ROOT / "examples" / "minimal.yaml")
BUILTIN = (BUILTIN_TEMPLATES / "pytorchjob.yaml.j2").read_text()
SECRET = "TOP-SECRET-7f3a9c"
NAME = "pytorchjob.yaml.j2"


def _secret(tmp_path: Path) -> Path:
    """A file outside the templates directory, as a CI runner's credentials would be."""
    outside = tmp_path / "outside"
    outside.mkdir(exist_ok=True)
    secret = outside / "credentials"
    secret.write_text(f"token: {SECRET}\n")
    return secret


def _printing(name: str, how: str = "include") -> str:
    """The built-in template, with the content of ``name`` pulled in as a comment (as an attacker would)."""
    if how == "include":
        return "# {% include '" + name + "' %}\n" + BUILTIN
    if how == "import":
        return "{% import '" + name + "' as m %}# {{ m.x | tojson }}\n" + BUILTIN
    return "{% extends '" + name + "' %}"


def file_is_link_outside(tmp_path: Path, d: Path) -> None:
    (d / NAME).symlink_to(_secret(tmp_path))


def file_is_link_to_environ(tmp_path: Path, d: Path) -> None:
    os.environ.setdefault("EC_TEST_SECRET", SECRET)  # restored by the fixture below
    (d / NAME).symlink_to("/proc/self/environ")


def file_is_link_inside(tmp_path: Path, d: Path) -> None:
    (d / "real.j2").write_text(BUILTIN)
    (d / NAME).symlink_to("real.j2")  # harmless target, still a link: refused (no symlinks at all)


def include_of_link(tmp_path: Path, d: Path) -> None:
    (d / NAME).write_text(_printing("secret.j2"))
    (d / "secret.j2").symlink_to(_secret(tmp_path))


def import_of_link(tmp_path: Path, d: Path) -> None:
    (d / NAME).write_text(_printing("secret.j2", "import"))
    (d / "secret.j2").symlink_to(_secret(tmp_path))


def extends_of_link(tmp_path: Path, d: Path) -> None:
    (d / NAME).write_text(_printing("base.j2", "extends"))
    (d / "base.j2").symlink_to(_secret(tmp_path))


def include_through_linked_directory(tmp_path: Path, d: Path) -> None:
    (d / NAME).write_text(_printing("sub/credentials"))
    (d / "sub").symlink_to(_secret(tmp_path).parent, target_is_directory=True)


def include_of_fifo(tmp_path: Path, d: Path) -> None:
    (d / NAME).write_text(_printing("pipe.j2"))
    os.mkfifo(d / "pipe.j2")  # opening it for reading would block forever


def file_is_fifo(tmp_path: Path, d: Path) -> None:
    os.mkfifo(d / NAME)


def include_of_hard_link(tmp_path: Path, d: Path) -> None:
    (d / NAME).write_text(_printing("secret.j2"))
    os.link(_secret(tmp_path), d / "secret.j2")


def file_too_large(tmp_path: Path, d: Path) -> None:
    (d / NAME).write_text(BUILTIN + "#" * MAX_TEMPLATE_BYTES + f"\n# {SECRET}\n")


SETUPS: dict[str, tuple[Callable[[Path, Path], None], str]] = {
    "file-is-link-outside": (file_is_link_outside, "a symbolic link"),
    "file-is-link-to-proc-environ": (file_is_link_to_environ, "a symbolic link"),
    "file-is-link-inside": (file_is_link_inside, "a symbolic link"),
    "include-of-link": (include_of_link, "a symbolic link"),
    "import-of-link": (import_of_link, "a symbolic link"),
    "extends-of-link": (extends_of_link, "a symbolic link"),
    "include-through-linked-directory": (include_through_linked_directory, "symbolic link"),
    "include-of-fifo": (include_of_fifo, "not a regular file"),
    "file-is-fifo": (file_is_fifo, "not a regular file"),
    "include-of-hard-link": (include_of_hard_link, "a hard link"),
    "file-too-large": (file_too_large, f"larger than {MAX_TEMPLATE_BYTES} bytes"),
}


@pytest.fixture(autouse=True)
def _secret_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EC_TEST_SECRET", SECRET)


@pytest.mark.parametrize("case", sorted(SETUPS))
def test_templates_dir_reads_only_regular_files_inside(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    setup, fragment = SETUPS[case]
    templates = tmp_path / "templates"
    templates.mkdir()
    setup(tmp_path, templates)
    assert main([MINIMAL, "--templates", str(templates)]) == 2
    out, err = capsys.readouterr()
    assert SECRET not in out and SECRET not in err
    assert out == "" and err.count("\n") == 1, err
    assert fragment in err and str(templates) in err, err


def test_the_templates_directory_itself_may_not_be_a_link(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    real = tmp_path / "elsewhere"
    real.mkdir()
    (real / NAME).write_text(f"# {SECRET}\n" + BUILTIN)
    (tmp_path / "templates").symlink_to(real, target_is_directory=True)
    assert main([MINIMAL, "--templates", str(tmp_path / "templates")]) == 2
    out, err = capsys.readouterr()
    assert SECRET not in out + err and "a symbolic link" in err and err.count("\n") == 1


@pytest.mark.skipif(os.geteuid() != 0, reason="creating a device node needs root")
def test_a_device_node_is_never_opened(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    templates = tmp_path / "templates"
    templates.mkdir()
    (templates / NAME).write_text(_printing("zero.j2"))
    os.mknod(templates / "zero.j2", 0o600 | 0o020000, os.makedev(1, 5))  # a /dev/zero: reading never ends
    assert main([MINIMAL, "--templates", str(templates)]) == 2
    assert "not a regular file" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["../outside/credentials", "/etc/passwd", "..\\outside\\credentials"])
def test_names_outside_the_directory_are_not_found(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    _secret(tmp_path)
    templates = tmp_path / "templates"
    templates.mkdir()
    (templates / NAME).write_text(_printing(name))
    assert main([MINIMAL, "--templates", str(templates)]) == 2
    out, err = capsys.readouterr()
    assert SECRET not in out + err and "root:" not in out + err
    assert "not found" in err and err.count("\n") == 1


def test_regular_includes_inside_the_directory_work(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Confinement refuses links, not structure: a template split over files in subdirectories renders."""
    templates = tmp_path / "templates"
    (templates / "parts").mkdir(parents=True)
    (templates / "parts" / "head.j2").write_text('apiVersion: "kubeflow.org/v1"\nkind: "PyTorchJob"\n')
    (templates / NAME).write_text("{% include 'parts/head.j2' %}" + BUILTIN.split('kind: "PyTorchJob"\n', 1)[1])
    assert main([MINIMAL, "--templates", str(templates)]) == 0
    assert "kind: PyTorchJob" in capsys.readouterr().out
