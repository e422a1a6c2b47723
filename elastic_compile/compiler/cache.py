"""The result cache: the same run on the same inputs prints or writes what it did, without compiling.

A pre-commit hook or ``make check`` runs ``elastic-compile -o deploy/ --check specs/`` on
every commit, and most commits change no spec. Starting the compiler (PyYAML, Jinja2,
pydantic and the spec models) costs several times the interpreter's own start; a run
whose inputs are unchanged needs none of it. So a successful run stores its result, and a
later run reuses it only when everything the result depends on is the same:

* the command line, word for word, and the current directory;
* the compiler: the content of every file of the ``elastic_compile`` package, the installed
  versions of the libraries it compiles with, and Python's version;
* the ``ELASTIC_COMPILE_*`` environment variables;
* the boundary (``--root`` or the working tree) and what the spec walk finds: the same
  specs and bases, the same notes;
* every file the compile read, byte for byte: each spec is read again with the compiler's
  own reader, and each base again through the boundary, never through a link leading out
  of it, after checking that its path still resolves to the same file.

Anything else is a miss: the run compiles as if there were no cache, and stores its
result when its compile succeeds. Only what a compile decides is stored (the stream, or the
files of ``-o`` and the lint lines); writing into ``-o DIR`` and ``--check`` always run
against the disk as it is now. Runs whose compile fails, ``--explain``, ``--templates``
(templates are inputs we do not track), and specs that are not regular files (``-``, a
pipe: reading them again would take what the compile must read) are never stored.

The cache is a directory of the user's own: ``$ELASTIC_COMPILE_CACHE_DIR``, else
``$XDG_CACHE_HOME/elastic-compile``, else ``~/.cache/elastic-compile``; ``--no-cache``
or ``ELASTIC_COMPILE_CACHE_DIR=""`` turn it off; a relative one is not used (and said so).
It is created with mode 0700 and used only while it is a directory (not a link) owned by
the user that nobody else may read or write; entries are files of mode 0600, read without
following links, bounded in size,
checked against a digest of their own and then against the shape we write (a stored result
is data, never trusted as code or as a path: the writer checks every name it writes), and
at most :data:`MAX_ENTRIES` of :data:`MAX_TOTAL_BYTES` together are kept (the least recently
used go first; nothing but our own names is ever removed). This module imports nothing of
the compiler.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import stat
import sys
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from elastic_compile.compiler import inputs, writer
from elastic_compile.compiler.cachedir import DIR_ENV, directory, open_directory, package_files
from elastic_compile.core import safefs
from elastic_compile.core.errors import SpecError
from elastic_compile.core.source import MAX_BYTES, read_input

#: Entries kept at most; a store beyond it removes the least recently used down to 3/4 of it.
MAX_ENTRIES: Final = 512
#: The largest entry stored or read: 500 specs' bases are about 5 MB.
MAX_ENTRY_BYTES: Final = 64 * 1024 * 1024
#: Changes whenever what an entry holds, or how it is keyed, changes.
_FORMAT: Final = 1
#: The distributions whose code the compile runs (their installed versions key the cache).
_LIBRARIES: Final = frozenset(
    {
        "pydantic",
        "pydantic_core",
        "jinja2",
        "markupsafe",
        "pyyaml",
        "typing_extensions",
        "annotated_types",
        "typing_inspection",
    }
)
#: Options whose inputs the cache cannot see: a run with one is never stored or reused.
_UNTRACKED: Final = frozenset({"--templates", "--explain", "-h", "--help", "--version"})
_SUFFIX: Final = ".json"
#: An entry's name: its key (64 hex digits) and the suffix; nothing else in the directory is ours.
_ENTRY_NAME: Final = re.compile(r"^(\.?)[0-9a-f]{64}\.json(\.[0-9]+\.[0-9a-f]{8})?$")
#: All entries together, at most (each is also held to MAX_ENTRY_BYTES).
MAX_TOTAL_BYTES: Final = 256 * 1024 * 1024
#: The package's directory, whose files are the compiler.
_PACKAGE: Final = Path(__file__).resolve().parent.parent
_NOFOLLOW: Final = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC: Final = getattr(os, "O_CLOEXEC", 0)


@dataclass
class Result:
    """What a compile decided: the stream (``text``), or the files of ``-o`` and the specs it read."""

    text: str | None = None
    files: dict[str, str] | None = None
    #: Every spec and base the run read: ``-o DIR`` may hold none of them.
    read: list[str] | None = None


@dataclass
class Hit:
    """A stored run that still holds: its parsed options, lint lines and result."""

    options: argparse.Namespace
    boundary: safefs.Boundary
    found: inputs.Inputs
    stderr: str
    result: Result


def applies(argv: Sequence[str]) -> bool:
    """Whether a run with ``argv`` may use the cache at all (before anything is parsed)."""
    if "--no-cache" in argv or "-" in argv:
        return False
    return not any(word.split("=", 1)[0] in _UNTRACKED for word in argv)


# --------------------------------------------------------------------------- the key


#: The package's digest, set by a compile server once it loaded the package: it checks before
#: each run it forks that no file of the package changed since, so its runs need not read it again.
_known_package: str | None = None


def remember_package() -> None:
    """Compute the package's digest once, for every run forked from this process (the compile server)."""
    global _known_package  # noqa: PLW0603 -- set once, in the server, before any run forks
    _known_package = _package_digest()


def _package_digest() -> str:
    """A digest of every file of the ``elastic_compile`` package (code, templates, schemas), by content.

    By content, not by time: a clean clone or a fresh install has new times but the same
    compiler, and a cache restored in CI should still hold for it (about 1.3 MB: 3 ms).
    """
    package = _PACKAGE
    digest = hashlib.sha256()
    for path in package_files(str(package)):
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:  # a dangling link (an editor's lock file) is nothing imported
            continue
        digest.update(os.fsencode(os.path.relpath(path, package)) + f"\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()


def _libraries() -> list[str]:
    """The ``*.dist-info`` and ``*.egg-info`` names (name and version) of :data:`_LIBRARIES` and of us, on ``sys.path``.

    A library run from a source tree on ``PYTHONPATH`` has neither, and is not in the key.
    """
    found = []
    for entry in dict.fromkeys(sys.path):
        if not entry or not os.path.isdir(entry):
            continue
        try:
            names = os.listdir(entry)
        except OSError:
            continue
        for name in names:
            if name.endswith((".dist-info", ".egg-info")):
                project = name.split("-", 1)[0].lower().replace(".", "_")
                if project in _LIBRARIES or project == "elastic_compile":
                    found.append(f"{entry}/{name}")
    return sorted(found)


def _key(argv: Sequence[str], package: str) -> str:
    material = {
        "format": _FORMAT,
        "python": sys.version,
        "package": package,
        "libraries": _libraries(),
        "cwd": os.getcwd(),
        "argv": list(argv),
        "env": sorted((k, v) for k, v in os.environ.items() if k.startswith("ELASTIC_COMPILE_") and k != DIR_ENV),
    }
    return hashlib.sha256(json.dumps(material).encode("utf-8")).hexdigest()


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _read_entry(dir_fd: int, name: str) -> dict[str, Any] | None:
    try:
        fd = os.open(name, os.O_RDONLY | _NOFOLLOW | _CLOEXEC | getattr(os, "O_NONBLOCK", 0), dir_fd=dir_fd)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid() or info.st_size > MAX_ENTRY_BYTES:
            return None
        with os.fdopen(os.dup(fd), "rb") as f:
            raw = f.read(MAX_ENTRY_BYTES + 1)
    finally:
        os.close(fd)
    digest, _, body = raw.partition(b"\n")
    if len(raw) > MAX_ENTRY_BYTES or digest.decode("ascii", "replace") != _digest(body):
        return None  # torn, truncated or edited: recompile
    try:
        entry = json.loads(body)
    except (ValueError, RecursionError):
        return None
    return entry if isinstance(entry, dict) else None


# --------------------------------------------------------------------------- the store


class Store:
    """The cache for one run's command line: :meth:`lookup`, and :meth:`save` after a compile."""

    def __init__(self, argv: Sequence[str], path: Path) -> None:
        """``argv``: the command line after the program's name; ``path``: the cache directory."""
        self.path = path
        self.package = _known_package or _package_digest()
        self.key = _key(argv, self.package)
        self.name = self.key + _SUFFIX

    def lookup(self) -> Hit | None:
        """The stored run for this command line, when it holds for the inputs as they are now."""
        dir_fd = open_directory(self.path, create=False)
        if dir_fd is None:
            return None
        try:
            entry = _read_entry(dir_fd, self.name)
            hit = _check(entry) if entry is not None and entry.get("key") == self.key else None
            if hit is not None:
                # Least recently used goes first when the cache is full.
                with suppress(OSError):
                    os.utime(self.name, dir_fd=dir_fd, follow_symlinks=False)
            return hit
        finally:
            os.close(dir_fd)

    def save(
        self,
        options: argparse.Namespace,
        *,
        boundary: safefs.Boundary,
        found: inputs.Inputs,
        sources: Sequence[Source],
        stderr: str,
        result: Result,
    ) -> None:
        """Store a successful compile; a cache that cannot be written is skipped, never an error.

        Nothing is stored when a spec was read from something other than a regular file (a
        pipe, ``/dev/stdin``, ``<(...)``): checking it again would consume what the compile
        then reads.
        """
        if not all(how != "spec" or _regular(path) for how, path, _, _ in sources):
            return
        try:
            if _known_package is None and _package_digest() != self.package:
                # The compiler changed during the run (a checkout, an install): which one compiled?
                # (A server's run compiles with what the server loaded, keyed by its digest.)
                return
        except (OSError, ValueError):
            return
        texts: dict[str, int] = {}
        files = None
        if result.files is not None:
            # One openapi.json and kustomization.yaml serve hundreds of bases: stored once.
            files = {rel: texts.setdefault(text, len(texts)) for rel, text in result.files.items()}
        entry = {
            "key": self.key,
            "options": _options_data(options),
            "boundary": str(boundary.root),
            "found": _found_data(found),
            "sources": [[how, path, real, _digest(data)] for how, path, real, data in sources],
            "stderr": stderr,
            "text": result.text,
            "files": files,
            "texts": list(texts),
            "read": result.read,
        }
        # ASCII: a path may hold any bytes, which Python keeps as lone surrogates.
        body = json.dumps(entry, separators=(",", ":")).encode("ascii")
        if len(body) > MAX_ENTRY_BYTES:
            return
        dir_fd = open_directory(self.path, create=True)
        if dir_fd is None:
            return
        try:
            _write(dir_fd, self.name, _digest(body).encode("ascii") + b"\n" + body)
            _prune(dir_fd)
        except OSError:
            pass
        finally:
            os.close(dir_fd)


#: A file the compile read: ``("spec", path, "", bytes)`` read by path, ``("base", absolute,
#: resolved, bytes)`` read inside the boundary, ``("path", absolute, resolved, b"")`` a path
#: that led to a base already read (only where it leads is checked).
Source = tuple[str, str, str, bytes]


def open_store(argv: Sequence[str]) -> Store | None:
    """The cache for this command line, or None when it does not apply, is off, or cannot be keyed."""
    if not applies(argv):
        return None
    path = directory()
    if path is None:
        return None
    try:
        return Store(argv, path)
    except (OSError, ValueError):  # the current directory was removed, the package cannot be read: no cache
        return None


def _regular(path: str) -> bool:
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def _write(dir_fd: int, name: str, data: bytes) -> None:
    temp = f".{name}.{os.getpid()}.{os.urandom(4).hex()}"
    safefs.create(dir_fd, temp, data, 0o600)
    os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


def _prune(dir_fd: int) -> None:
    """Keep at most :data:`MAX_ENTRIES` entries and :data:`MAX_TOTAL_BYTES`: the least recently used go.

    Only names of ours are looked at (entries, and the temporary files of a run killed while
    saving); anything else in the directory is left alone.
    """
    ours = []
    with os.scandir(dir_fd) as it:
        for item in it:
            if _ENTRY_NAME.match(item.name):
                ours.append(item.name)
                if len(ours) > 4 * MAX_ENTRIES:  # a hostile directory: look no further
                    break
    aged = []
    for name in ours:
        with suppress(OSError):
            info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            aged.append((info.st_mtime_ns, name, info.st_size))
    total = sum(size for _, _, size in aged)
    if len(aged) <= MAX_ENTRIES and total <= MAX_TOTAL_BYTES:
        return
    aged.sort()
    while aged and (len(aged) > MAX_ENTRIES * 3 // 4 or total > MAX_TOTAL_BYTES * 3 // 4):
        _, name, size = aged.pop(0)
        with suppress(OSError):
            os.unlink(name, dir_fd=dir_fd)
        total -= size


# --------------------------------------------------------------------------- what holds


def _options_data(options: argparse.Namespace) -> dict[str, Any]:
    values = vars(options)
    return {
        "paths": sorted(k for k, v in values.items() if isinstance(v, Path)),
        "values": {k: str(v) if isinstance(v, Path) else v for k, v in values.items()},
    }


def _found_data(found: inputs.Inputs) -> dict[str, Any]:
    return {
        "jobs": found.jobs,
        "bases": found.bases,
        "directories": found.directories,
        "notes": found.notes,
        "problems": [str(p) for p in found.problems],
    }


def _unchanged(source: list[Any], boundary: safefs.Boundary) -> bool:
    """Whether a file the compile read still holds the same bytes (see :data:`Source`)."""
    how, path, real, digest = source
    try:
        if how == "spec":
            # Only a regular file is read again: a pipe would lose what the compile must read.
            return _regular(path) and _digest(read_input(path)[0]) == digest
        # A base: the path must still lead to the same file, read inside the boundary.
        if os.path.realpath(path) != real:
            return False
        if how == "path":
            return True
        data = boundary.read(Path(real), MAX_BYTES)
    except (SpecError, safefs.Refused, OSError, ValueError):
        return False
    return data is not None and _digest(data) == digest


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _optional(value: Any, kind: type) -> bool:
    return value is None or isinstance(value, kind)


def _shaped(entry: dict[str, Any]) -> bool:
    """Whether ``entry`` has the shape :meth:`Store.save` writes (it is checked, not trusted)."""
    options, found = entry.get("options"), entry.get("found")
    if not (isinstance(options, dict) and _strings(options.get("paths")) and isinstance(options.get("values"), dict)):
        return False
    values = options["values"]
    if not (
        _strings(values.get("specs"))
        and all(k in values and isinstance(values[k], (str, type(None))) for k in _OPTIONS)
    ):
        return False
    if not all(name in values and isinstance(values[name], str) for name in options["paths"]):
        return False
    if not (
        isinstance(found, dict) and isinstance(entry.get("boundary"), str) and isinstance(entry.get("stderr"), str)
    ):
        return False
    sources = entry.get("sources")
    if not (isinstance(sources, list) and all(_strings(s) and len(s) == 4 for s in sources)):
        return False
    texts: list[str] = entry.get("texts") or []
    files = entry.get("files")
    if not (_strings(entry.get("texts")) and _optional(entry.get("text"), str) and _optional(files, dict)):
        return False
    if files is not None and not all(isinstance(i, int) and 0 <= i < len(texts) for i in files.values()):
        return False
    return (files is None) != (entry.get("text") is None) and (files is None or _strings(entry.get("read")))


#: The options a replay reads besides ``specs``: each a string or None.
_OPTIONS: Final = ("root", "output", "check")


def _check(entry: dict[str, Any]) -> Hit | None:
    if not _shaped(entry):
        return None  # another version's entry, or not ours: recompile
    data = entry["options"]
    values = dict(data["values"])
    for name in data["paths"]:
        values[name] = Path(values[name])
    options = argparse.Namespace(**values)
    boundary = writer.default_boundary(options.root)
    if str(boundary.root) != entry["boundary"]:
        return None
    found = inputs.collect(options.specs, boundary.root)
    if _found_data(found) != entry["found"]:
        return None
    if not all(_unchanged(source, boundary) for source in entry["sources"]):
        return None
    texts = entry["texts"]
    files = None if entry["files"] is None else {rel: texts[index] for rel, index in entry["files"].items()}
    return Hit(options, boundary, found, entry["stderr"], Result(entry["text"], files, entry["read"]))


__all__ = [
    "DIR_ENV",
    "MAX_ENTRIES",
    "MAX_ENTRY_BYTES",
    "MAX_TOTAL_BYTES",
    "Hit",
    "Result",
    "Source",
    "Store",
    "applies",
    "directory",
    "open_store",
]
