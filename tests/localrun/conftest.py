"""Fixtures for the ``elastic-compile run`` tests: a unique marker per test, and no leftovers."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from run_helpers import kill_marked, new_marker


@pytest.fixture
def marker() -> Iterator[str]:
    """A unique value for the test spec's env; the test fails if a process carrying it outlives ``run``."""
    value = new_marker()
    yield value
    leaked = kill_marked(value)
    assert not leaked, f"processes outlived elastic-compile run: {leaked}"


@pytest.fixture
def torch_installed() -> None:
    """The pods run elastic-launch, which needs torch (the launch or test extra)."""
    pytest.importorskip("torch", reason="elastic-launch needs torch: pip install -e '.[launch]'")
