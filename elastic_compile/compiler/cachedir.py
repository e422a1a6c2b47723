"""Where the user's cache directory is, whether it may be used, and which files are the compiler.

It holds the result cache's entries (:mod:`elastic_compile.compiler.cache`) and the compile
server's socket (:mod:`elastic_compile.compiler.server`). Both trust what they find there
(an entry is printed as our own output, a socket is handed the run), so the directory is
used only while it is a directory, not a link, owned by the user, that nobody else may read
or write. This module is imported before anything else of a run: it imports nothing of the
compiler.
"""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Final

#: The environment variable naming the cache directory (empty: no cache, and no compile server).
DIR_ENV: Final = "ELASTIC_COMPILE_CACHE_DIR"
_NOFOLLOW: Final = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC: Final = getattr(os, "O_CLOEXEC", 0)


def directory() -> Path | None:
    """The cache directory this run would use (None: the cache is off)."""
    configured = os.environ.get(DIR_ENV)
    if configured is not None:
        if configured and not os.path.isabs(configured):
            # Relative, it would be a new cache in each directory a run starts in (inside the checkout).
            _refuse(Path(configured), "it must be an absolute path")
            return None
        return Path(configured) if configured else None
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "elastic-compile"
    try:
        home = Path.home()
    except RuntimeError:  # no home directory to be found: no cache
        return None
    # An empty or relative HOME would put the cache under / or the current directory.
    return home / ".cache" / "elastic-compile" if home.is_absolute() and str(home) != "/" else None


def open_directory(path: Path, *, create: bool) -> int | None:
    """The cache directory, opened without following a link; None when it may not be used.

    Another user's directory, one others may read or write, or a link, is never used: an
    entry is printed and written as our own output. Said once on stderr; a cache that cannot
    be created (a read-only home in CI) is silently off.
    """
    if create:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        except OSError:
            return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW | _CLOEXEC)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            _refuse(path, "it is a symbolic link or not a directory; name the directory itself")
        return None
    info = os.fstat(fd)
    if info.st_uid != os.geteuid() or info.st_mode & 0o077:
        os.close(fd)
        _refuse(path, "it must be a directory of yours that nobody else may read or write (chmod 700 it)")
        return None
    return fd


_refused: set[str] = set()


def _refuse(path: Path, why: str) -> None:
    """Say once per run why the cache directory is not used: it needs the user's attention."""
    if str(path) not in _refused:
        _refused.add(str(path))
        from elastic_compile.core.errors import printable  # only when there is something to say

        shown = printable(str(path))
        print(f"elastic-compile: note: the cache {shown} is not used: {why}, or set {DIR_ENV}", file=sys.stderr)


def package_files(package: str) -> Iterator[str]:
    """The paths of a package's files as the import system reaches them, in a stable order.

    Links are followed as imports follow them (an install may link every file), each directory
    once; bytecode is left out (it follows from the sources). The result cache keys a run by
    their content; the compile server watches them.
    """
    seen = set()
    for where, dirs, files in os.walk(package, followlinks=True):
        real = os.path.realpath(where)
        if real in seen:
            dirs[:] = []
            continue
        seen.add(real)
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        yield from (os.path.join(where, name) for name in sorted(files) if not name.endswith((".pyc", ".pyo")))
