"""Confined file access: every path stays inside a boundary, and no symbolic link leads out of it.

Specs and their output directories arrive in pull requests, and CI runs us on them: a
committed symlink ``deploy -> ../../elsewhere`` must not make ``-o deploy/base`` write
outside the repository, and a link inside an output directory must not make ``--check``
print a file it points to. So:

* the *boundary* is the git working tree the command runs in (the nearest ancestor of the
  current directory holding ``.git``), else the current directory; ``--root`` names another;
* a directory is reached by a walk from the boundary, one component at a time, with
  ``dir_fd`` and ``O_NOFOLLOW``. A component that is a symbolic link is followed only when
  it resolves inside the boundary, and what was opened is checked again afterwards
  (``/proc/self/fd`` on Linux), so swapping a path between the check and the open gains
  nothing. A link that leads out is refused with one line that never shows its target;
* inside the directory the user named, nothing is followed: files are opened with
  ``O_NOFOLLOW`` relative to the directory's descriptor, and a link where a file or
  directory of ours belongs is refused;
* files are read only when regular (``O_NONBLOCK``: a FIFO cannot hang us) and only up to a
  bound.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Final

#: The most we read of one file we compare: far above any manifest we write.
MAX_READ: Final = 16 * 1024 * 1024

_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW: Final = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK: Final = getattr(os, "O_NONBLOCK", 0)


class Refused(Exception):
    """A path we will not use; the message is one line naming it (never a link's target)."""


class NotRegular(Refused):
    """A file we would read is not a regular file; ``kind`` says what it is, in words."""

    def __init__(self, message: str, kind: str) -> None:
        """``message``: the line naming it; ``kind``: what :func:`kind` says it is."""
        super().__init__(message)
        self.kind = kind


def work_tree(start: Path | None = None) -> Path:
    """The git working tree containing ``start`` (default: the current directory), else ``start`` itself."""
    here = Path(os.path.realpath(start or Path.cwd()))
    for candidate in (here, *here.parents):
        if os.path.lexists(candidate / ".git"):
            return candidate
    return here


def display(path: Path) -> str:
    """``path`` as a user would write it: relative to the current directory when below it."""
    cwd = Path(os.path.realpath(Path.cwd()))
    return str(path.relative_to(cwd)) if inside(path, cwd) and path != cwd else str(path)


def inside(path: Path, boundary: Path) -> bool:
    """True when ``path`` is ``boundary`` or below it (both absolute, compared by components)."""
    return path == boundary or boundary in path.parents


def _opened_path(fd: int) -> Path | None:
    """Where an open directory really is, when the platform can say (Linux: /proc/self/fd)."""
    link = f"/proc/self/fd/{fd}"
    if sys.platform.startswith("linux") and os.path.exists(link):
        return Path(os.readlink(link))
    return None


class Boundary:
    """Directories and files below one boundary directory, reached without leaving it."""

    def __init__(self, root: Path) -> None:
        """``root`` is resolved once; everything is then checked against the resolved path."""
        self.root = Path(os.path.realpath(root))

    def relative(self, path: Path, shown: str) -> Path:
        """``path`` (absolute, or relative to the current directory) relative to the boundary.

        Refuses a path that is outside it as written: ``../elsewhere`` never becomes a walk.
        """
        absolute = Path(os.path.abspath(path))
        if inside(absolute, self.root):
            return absolute.relative_to(self.root)
        raise Refused(f"{shown}: outside {self.root}, the directory elastic-compile may write in (see --root)")

    @contextmanager
    def directory(self, path: Path, shown: str, *, create: bool = False) -> Iterator[int | None]:
        """A descriptor of the directory ``path``; None when it does not exist and ``create`` is false.

        Missing directories are created (mode 0777 minus the umask) when ``create`` is true.
        """
        parts = self.relative(path, shown).parts
        fd = os.open(self.root, _DIR_FLAGS)
        try:
            walked = self.root
            for index, part in enumerate(parts):
                walked = walked / part
                shown_part = shown if index == len(parts) - 1 else display(walked)
                opened = self._step(fd, part, walked, shown_part, create=create)
                os.close(fd)
                fd = -1
                if opened is None:
                    yield None
                    return
                fd = opened
            yield fd
        finally:
            if fd >= 0:
                os.close(fd)

    def read(self, path: Path, limit: int = MAX_READ) -> bytes | None:
        """The regular file ``path`` (at most ``limit`` + 1 bytes), reached inside; None when absent.

        Raises :class:`Refused` for a link leading out on the way (:class:`NotRegular` for a
        file that is not regular), ``OSError`` when it cannot be read.
        """
        with self.directory(path.parent, str(path.parent)) as parent:
            return None if parent is None else read_regular(parent, path.name, str(path), limit)

    def _step(self, parent: int, name: str, walked: Path, shown: str, *, create: bool) -> int | None:
        try:
            return os.open(name, _DIR_FLAGS | _NOFOLLOW, dir_fd=parent)
        except FileNotFoundError:
            if not create:
                return None
            with suppress(FileExistsError):  # created meanwhile: the open below decides what it is
                os.mkdir(name, 0o777, dir_fd=parent)
            return os.open(name, _DIR_FLAGS | _NOFOLLOW, dir_fd=parent)
        except OSError as e:
            if e.errno not in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                raise
        info = os.stat(name, dir_fd=parent, follow_symlinks=False)
        if not stat.S_ISLNK(info.st_mode):
            raise Refused(f"{shown}: exists and is not a directory")
        # A link on the way to the directory: followed only when it resolves inside.
        if not inside(Path(os.path.realpath(walked)), self.root):
            raise Refused(f"{shown}: a symbolic link that leads outside {self.root}; not followed")
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
        really = _opened_path(fd)
        if really is not None and not inside(really, self.root):
            os.close(fd)  # swapped between the check and the open
            raise Refused(f"{shown}: a symbolic link that leads outside {self.root}; not followed")
        return fd


def subdirectory(parent: int, name: str, shown: str, *, create: bool = False) -> int | None:
    """``name`` inside an open directory, never through a link; None when absent and not created."""
    try:
        return os.open(name, _DIR_FLAGS | _NOFOLLOW, dir_fd=parent)
    except FileNotFoundError:
        if not create:
            return None
        os.mkdir(name, 0o777, dir_fd=parent)
        return os.open(name, _DIR_FLAGS | _NOFOLLOW, dir_fd=parent)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
            raise Refused(f"{shown}: {kind(parent, name)} where elastic-compile needs a directory of its own") from e
        raise


def kind(parent: int, name: str) -> str:
    """What the entry ``name`` is, in words, without following it ("absent" when there is none)."""
    try:
        mode = os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return "absent"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISREG(mode):
        return "a file"
    return "a special file"


def read_regular(parent: int, name: str, shown: str, limit: int = MAX_READ) -> bytes | None:
    """The bytes of the regular file ``name`` (at most ``limit`` + 1); None when it does not exist.

    A link, a directory, a FIFO or a device is refused by name (:class:`NotRegular`).
    """
    try:
        fd = os.open(name, os.O_RDONLY | _NOFOLLOW | _NONBLOCK | getattr(os, "O_CLOEXEC", 0), dir_fd=parent)
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO, errno.EMLINK):
            raise _not_regular(parent, name, shown) from e
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _not_regular(parent, name, shown)
        chunks = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _not_regular(parent: int, name: str, shown: str) -> NotRegular:
    what = kind(parent, name)
    return NotRegular(f"{shown}: {what}, not a file elastic-compile wrote", what)


def create(parent: int, name: str, data: bytes, mode: int) -> None:
    """A new file ``name`` holding ``data`` (``mode`` minus the umask); never an existing one, never a link.

    On any failure the file is removed again: nothing half-written is left behind.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(name, flags, mode, dir_fd=parent)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except BaseException:
        os.close(fd)
        os.unlink(name, dir_fd=parent)
        raise
    os.close(fd)


def entries(parent: int, limit: int) -> list[str]:
    """Names in an open directory, sorted; at most ``limit`` (a directory may be hostile and huge)."""
    names = []
    with os.scandir(parent) as it:
        for entry in it:
            names.append(entry.name)
            if len(names) >= limit:
                break
    return sorted(names)
