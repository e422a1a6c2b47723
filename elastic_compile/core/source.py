"""Reading an input named on the command line: its bytes, bounded."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Final

from elastic_compile.core.errors import Problem, SpecError

#: The most bytes of one spec we read: a spec is tens of lines; anything near this is an accident or an attack.
MAX_BYTES: Final = 1024 * 1024


def read_input(path: str | Path, max_bytes: int = MAX_BYTES) -> tuple[bytes, str]:
    """The bytes of ``path`` (``-``: standard input, named ``<stdin>``), at most ``max_bytes`` + 1 of them.

    One byte more than the limit is read so that the loaders can say the input is too
    large without reading all of it.
    """
    if str(path) == "-":
        return sys.stdin.buffer.read(max_bytes + 1), "<stdin>"
    try:
        with Path(path).open("rb") as f:
            return f.read(max_bytes + 1), str(path)
    except OSError as e:
        raise SpecError([Problem(str(path), 1, 1, "spec", f"cannot read the file: {e.strerror}")]) from e


__all__ = ["MAX_BYTES", "read_input"]
