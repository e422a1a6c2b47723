"""Shared pytest fixtures."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest

from elastic_compile.core import crdcheck

CRDS_MISSING = "PyTorchJob CRD not found: set ELASTIC_COMPILE_CRDS or provide ../shared/crds"


@pytest.fixture(scope="session")
def pytorchjob_validator() -> crdcheck.CrdValidator:
    """The strict PyTorchJob CRD validator, converted once per session; skips without CRDs."""
    pytest.importorskip("jsonschema", reason="install the test extra: pip install -e '.[test]'")
    try:
        return crdcheck.pytorchjob_validator(strict=True)
    except crdcheck.CrdUnavailable:
        pytest.skip(CRDS_MISSING)


@pytest.fixture
def check_manifest(pytorchjob_validator: crdcheck.CrdValidator) -> Callable[[Mapping[str, Any]], list[str]]:
    """``crdcheck.check_manifest``; depends on the CRD fixture so PyTorchJob checks skip cleanly."""
    return crdcheck.check_manifest
