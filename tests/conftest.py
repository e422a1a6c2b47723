"""Shared pytest fixtures."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from elastic_compile.core import crdcheck

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


@pytest.fixture(scope="session", autouse=True)
def _no_user_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Fixtures wider than one test run the CLI too: their runs never reach the user's ``~/.cache``."""
    from elastic_compile.compiler import cache, server

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(cache.DIR_ENV, str(tmp_path_factory.mktemp("session-cache") / "elastic-compile"))
        # No run of the suite starts a compile server, except in tests/test_server.py, which
        # stops each it starts: a server left behind would outlive the suite by minutes.
        patch.setenv(server.MODE_ENV, "off")
        yield
    assert not _servers_below(tmp_path_factory.getbasetemp()), "a test left a compile server running"


def _servers_below(base: Path) -> list[int]:
    """The compile servers whose cache directory is under ``base`` (their environment names it).

    A server's forks (a run's handler and worker) have its command line too: only those whose
    parent is not one of them are servers.
    """
    found: list[int] = []
    if not os.path.isdir("/proc"):
        return found  # no server runs where there is no /proc either
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"elastic_compile.compiler.server import serve" not in f.read():
                    continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                environ = f.read().split(b"\0")
        except OSError:
            continue
        if any(v.startswith(b"ELASTIC_COMPILE_CACHE_DIR=" + os.fsencode(base)) for v in environ):
            found.append(int(pid))
    parents: dict[int, int] = {}
    for server in found:
        with contextlib.suppress(OSError), open(f"/proc/{server}/stat", "rb") as f:
            parents[server] = int(f.read().rsplit(b")", 1)[1].split()[1])
    return [server for server in found if parents.get(server) not in found]


@pytest.fixture(autouse=True)
def _own_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test its own result cache (created on first use), never the user's ``~/.cache``.

    Tests replace parts of the compiler in process; a result stored by another test must
    not stand in for what they mean to run.
    """
    from elastic_compile.compiler import cache

    monkeypatch.setenv(cache.DIR_ENV, str(tmp_path_factory.mktemp("cache") / "elastic-compile"))
