"""Fixtures for the entrypoint tests: real elastic-launch processes, cleaned up afterwards."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from launch_helpers import Launcher


@pytest.fixture
def launcher(tmp_path: Path) -> Iterator[Launcher]:
    """Start agents with ``launcher.start/run``; anything still alive at teardown is killed."""
    launcher = Launcher(tmp_path)
    yield launcher
    launcher.cleanup()
