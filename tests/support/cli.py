"""The type of the ``cli`` fixture (tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Callable

#: ``cli(*argv)``: ``elastic-compile ARGV`` run in this process, as ``(exit code, stdout, stderr)``.
Cli = Callable[..., tuple[int, str, str]]
