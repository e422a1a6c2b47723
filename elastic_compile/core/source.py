"""Reading an input named on the command line: its bytes, bounded, never through a link out of the tree.

Every command that reads a file the user named (compiling, ``doctor``, ``import``, ``run``)
reads it here, so they all refuse the same thing: a path inside the boundary as written that
a symbolic link on its way leads out of (a spec or manifest in the repository that a pull
request turned into a link to ``~/.git-credentials``). It is never opened, so nothing of it
(the first line an error would quote) is shown. A path outside the boundary as written is
the command's own choice, and is read.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Final

from elastic_compile.core import safefs
from elastic_compile.core.errors import Problem, SpecError

#: The most bytes of one spec we read: a spec is tens of lines; anything near this is an accident or an attack.
MAX_BYTES: Final = 1024 * 1024


def leads_out(root: Path) -> str:
    """The message for a named path that a link leads out of ``root`` (never the link's target)."""
    return f"a symbolic link that leads outside {safefs.display(root)}; not followed"


def refused(path: str | Path, boundary: Path | None = None) -> Problem | None:
    """Why the file or directory ``path`` named on the command line is not read, or None.

    ``boundary``: the git working tree the command runs in (or ``--root``); default
    :func:`safefs.work_tree`. ``-`` (standard input) is never refused.
    """
    if str(path) == "-":
        return None
    root = Path(os.path.realpath(boundary if boundary is not None else safefs.work_tree()))
    written = Path(os.path.abspath(path))
    if not safefs.inside(written, root):
        return None  # outside the boundary as written: the command's own choice
    tree = Path(os.path.realpath(_checkout(written, root)))
    if not safefs.inside(Path(os.path.realpath(path)), tree):
        return Problem(str(path), 1, 1, "spec", leads_out(tree))
    return None


def _checkout(written: Path, root: Path) -> Path:
    """The git working tree below ``root`` that holds ``written`` (the path as written), else ``root``.

    A command run from a directory that is no git working tree (a CI workspace, a home
    directory) has that directory as its boundary; a checkout below it is still the tree the
    file belongs to, so a link in it may not lead to a file beside the checkout
    (``checkout/leak.yaml`` -> ``../.git-credentials``).
    """
    for candidate in written.parents:
        if candidate == root or not safefs.inside(candidate, root):
            break
        if os.path.lexists(candidate / ".git"):
            return candidate
    return root


def read_input(path: str | Path, max_bytes: int = MAX_BYTES, boundary: Path | None = None) -> tuple[bytes, str]:
    """The bytes of ``path`` (``-``: standard input, named ``<stdin>``), at most ``max_bytes`` + 1 of them.

    One byte more than the limit is read so that the loaders can say the input is too
    large without reading all of it. Raises ``SpecError`` for a path :func:`refused`
    (``boundary`` as there) or one that cannot be read.
    """
    if str(path) == "-":
        return sys.stdin.buffer.read(max_bytes + 1), "<stdin>"
    refusal = refused(path, boundary)
    if refusal is not None:
        raise SpecError([refusal])
    try:
        with Path(path).open("rb") as f:
            return f.read(max_bytes + 1), str(path)
    except OSError as e:
        raise SpecError([Problem(str(path), 1, 1, "spec", f"cannot read the file: {e.strerror}")]) from e


__all__ = ["MAX_BYTES", "leads_out", "read_input", "refused"]
