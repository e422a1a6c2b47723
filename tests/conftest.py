"""Shared pytest fixtures."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from support import crdcheck
from support.cli import Cli, run_cli

CRDS_UNSET = (
    f"{crdcheck.CRDS_ENV} is not set: this test needs the upstream CRD files "
    "(everything else runs against the compact schemas the package ships)"
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # `pytest -m crds` runs exactly the tests that skip without the upstream CRDs (.ci/run).
    for item in items:
        if "crds_dir" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.crds)


@pytest.fixture(scope="session")
def crds_dir() -> Path:
    """The directory of the upstream CRD files (``$ELASTIC_COMPILE_CRDS``); skips when unset."""
    env = os.environ.get(crdcheck.CRDS_ENV)
    if not env:
        pytest.skip(CRDS_UNSET)
    path = Path(env)
    if not path.is_dir():
        pytest.fail(f"{crdcheck.CRDS_ENV}={env} is not a directory")
    return path


@pytest.fixture(scope="session")
def pytorchjob_validator() -> crdcheck.CrdValidator:
    """The strict PyTorchJob CRD validator: the upstream CRD when at hand, else the shipped compact schema."""
    pytest.importorskip("jsonschema", reason="install the test extra: pip install -e '.[test]'")
    return crdcheck.pytorchjob_validator(strict=True)


@pytest.fixture
def check_manifest(pytorchjob_validator: crdcheck.CrdValidator) -> Callable[[Mapping[str, Any]], list[str]]:
    """``crdcheck.check_manifest`` (needs jsonschema and kubernetes-validate, the test extra)."""
    pytest.importorskip("kubernetes_validate", reason="install the test extra: pip install -e '.[test]'")
    return crdcheck.check_manifest


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Cli:
    """``elastic-compile`` in this process: ``cli("spec.yaml", "-t", "all")`` -> ``(code, out, err)``.

    Arguments may be paths; standard output and error are what the command printed.
    """
    return functools.partial(run_cli, capsys)
