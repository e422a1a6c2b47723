"""Running ``elastic-compile`` in the test's own process: the ``cli`` fixture and its helper."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

#: ``cli(*argv)``: ``elastic-compile ARGV`` run in this process, as ``(exit code, stdout, stderr)``.
Cli = Callable[..., tuple[int, str, str]]


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    """``elastic-compile ARGV`` in this process: ``(exit code, stdout, stderr)`` of this command alone.

    Arguments may be paths. What was printed before the call is discarded, so that a test
    that runs the command twice reads each run's output.
    """
    from elastic_compile.compiler.cli import main

    capsys.readouterr()
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err
