"""Emit compiled resources: a stream, or a directory written atomically; and --check.

A directory is written into a fresh temporary sibling and renamed into place, so a
failure at any point (a bad spec in a batch, a read-only target, a crash mid-render)
leaves the previous contents untouched.
"""

from __future__ import annotations

import difflib
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from elastic_compile.compiler import kustomize
from elastic_compile.compiler.pipeline import Compiled
from elastic_compile.core.emit import to_json, to_yaml

KUSTOMIZATION = kustomize.KUSTOMIZATION_FILE


class WriteError(Exception):
    """The output directory could not be written."""


def stream_text(compiled: Sequence[Compiled], fmt: str) -> str:
    """All resources of all specs as one YAML stream or one JSON document."""
    docs = [o.doc for c in compiled for o in c.outputs]
    return to_json(docs) if fmt == "json" else to_yaml(docs)


def _base_files(c: Compiled, fmt: str) -> dict[str, str]:
    """One spec's kustomize base: a file per resource, ``kustomization.yaml`` and ``openapi.json``.

    Only Kubernetes objects are listed as kustomize resources: the Flyte TaskSpec (``-t
    all`` on a spec with a ``flyte:`` section) has no apiVersion or kind, and kustomize
    refuses the whole base over it ("missing Resource metadata"). It is still written.
    """
    ext = "json" if fmt == "json" else "yaml"
    files: dict[str, str] = {}
    resources: list[str] = []
    for o in c.outputs:
        name = o.filename.rsplit(".", 1)[0] + "." + ext
        files[name] = to_json([o.doc]) if fmt == "json" else to_yaml([o.doc])
        if o.is_resource:
            resources.append(name)
    files[KUSTOMIZATION] = kustomize.kustomization_text(resources)
    files[kustomize.OPENAPI_FILE] = kustomize.openapi_text()
    return files


def directory_files(compiled: Sequence[Compiled], fmt: str, *, several: bool) -> dict[str, str]:
    """Relative path -> content for ``-o DIR``: one base, or one base per spec under DIR/<name>/."""
    if not several:
        return _base_files(compiled[0], fmt)
    files: dict[str, str] = {}
    seen: dict[str, str] = {}
    for c in compiled:
        where = c.loaded.file if c.loaded else c.spec.name
        if c.spec.name in seen:
            raise WriteError(
                f"{where}: name {c.spec.name} is also used by {seen[c.spec.name]}; each spec needs its own directory"
            )
        seen[c.spec.name] = where
        for rel, text in _base_files(c, fmt).items():
            files[f"{c.spec.name}/{rel}"] = text
    return files


def write_directory(target: Path, files: dict[str, str]) -> None:
    """Replace ``target`` with exactly ``files``, atomically (rename of a complete sibling)."""
    target = target.absolute()
    if target.exists() and not target.is_dir():
        raise WriteError(f"{target} exists and is not a directory")
    parent = target.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=parent))
    except OSError as e:
        raise WriteError(f"cannot write {target}: {e.strerror}") from e
    backup: Path | None = None
    try:
        for rel, text in sorted(files.items()):
            path = staging / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            # newline="\n": the same bytes on every platform (Windows would write CRLF).
            path.write_text(text, encoding="utf-8", newline="\n")
        os.chmod(staging, 0o755)  # mkdtemp makes it 0700
        if target.exists():
            backup = Path(tempfile.mkdtemp(prefix=f".{target.name}.old.", dir=parent))
            os.rename(target, backup / "d")
        try:
            os.rename(staging, target)
        except OSError:
            if backup is not None:
                os.rename(backup / "d", target)
            raise
    except OSError as e:
        shutil.rmtree(staging, ignore_errors=True)
        if backup is not None and not (backup / "d").exists():
            shutil.rmtree(backup, ignore_errors=True)  # empty: the old output is back in place
        raise WriteError(f"cannot write {target}: {e.strerror or e}") from e
    if backup is not None:
        try:
            shutil.rmtree(backup)
        except OSError as e:
            # The new output is in place; say where the old one is rather than hide it.
            print(
                f"elastic-compile: warning: the previous contents of {target} are left in {backup}: {e.strerror or e}",
                file=sys.stderr,
            )


def _lines(text: str) -> list[str]:
    # difflib glues a last line without a newline onto the next diff line; mark it the
    # way diff and git do so the diff stays readable (and applicable).
    lines = text.splitlines(True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n\\ No newline at end of file\n"
    return lines


def _unified(old: str | None, new: str | None, name: str) -> str:
    """A unified diff; ``None`` on one side means the file is created or removed."""
    diff = "".join(
        difflib.unified_diff(
            _lines(old or ""),
            _lines(new or ""),
            "/dev/null" if old is None else f"a/{name}",
            "/dev/null" if new is None else f"b/{name}",
        )
    )
    if not diff and (old is None) != (new is None):
        # An empty file that appears or vanishes has no lines to show.
        diff = f"{'new' if old is None else 'deleted'} empty file {name}\n"
    return diff


def _read(path: Path) -> str:
    # A stray binary file must show up as drift, not crash the check; universal newlines
    # as before, so a checkout with CRLF line ends is not drift.
    with path.open(encoding="utf-8", errors="replace") as f:
        return f.read()


def diff_file(path: Path, text: str) -> str:
    """Unified diff from the file on disk to ``text`` (empty when identical)."""
    return _unified(_read(path) if path.is_file() else None, text, str(path))


def diff_directory(target: Path, files: dict[str, str]) -> str:
    """Unified diff from ``target`` on disk to ``files``, including files that would vanish."""
    on_disk = (
        {p.relative_to(target).as_posix(): _read(p) for p in sorted(target.rglob("*")) if p.is_file()}
        if target.is_dir()
        else {}
    )
    out = []
    for rel in sorted(set(on_disk) | set(files)):
        old, new = on_disk.get(rel), files.get(rel)
        if old != new:
            out.append(_unified(old, new, f"{target}/{rel}"))
    return "".join(out)
