"""The real control plane for the tests of this folder (docs/development.md, "The real control plane").

Every test here carries the ``realcluster`` marker and runs against one cluster per session:

* ``ELASTIC_COMPILE_USE_KUBECONFIG=1``: the cluster of ``$KUBECONFIG``, as it is (it must run
  what ``make cluster`` runs: the operators, their webhooks, the stock runtimes);
* else the cluster of the state directory (``$ELASTIC_COMPILE_CLUSTER_DIR``, default ``.cluster``):
  one already running there (``make cluster``) is reused and left running; otherwise the session
  builds and starts one, as ``make cluster`` does, and stops it at the end.

Without Go the tests skip, saying so; with ``ELASTIC_COMPILE_REQUIRE_CLUSTER=1`` (``.ci/run``)
they fail instead. A start that fails is a failure either way, with the launcher's output.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kube_helpers import (
    STATE_ENV,
    USE_KUBECONFIG_ENV,
    Cluster,
    LauncherError,
    build_launcher,
    connect,
    create_namespace,
    delete_namespace,
    launcher_down,
    launcher_status,
    launcher_up,
    state_dir,
    unavailable,
)

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.realcluster)
            # The first test also waits for the session's cluster: a cold build takes many
            # minutes. The suite's timeout stays on the test itself.
            item.add_marker(pytest.mark.timeout(func_only=True))


def _echo(config: pytest.Config) -> Callable[[str], None]:
    """Print a line now, past pytest's capture: a cold build is long and should show progress."""
    capture = config.pluginmanager.getplugin("capturemanager")
    terminal = config.pluginmanager.getplugin("terminalreporter")

    def echo(line: str) -> None:
        if terminal is None:
            return
        if capture is None:
            terminal.write_line(line)
            return
        with capture.global_and_fixture_disabled():
            terminal.write_line(line)

    return echo


@pytest.fixture(scope="session")
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """The session's cluster (see the module's docstring for which one)."""
    cache = tmp_path_factory.mktemp("discovery") / "cache.json"
    if os.environ.get(USE_KUBECONFIG_ENV) == "1":
        given = os.environ.get("KUBECONFIG")
        if not given:
            pytest.fail(f"{USE_KUBECONFIG_ENV}=1 needs KUBECONFIG", pytrace=False)
        c = connect(Path(given), cache)
        yield c
        c.api.close()
        return
    if shutil.which("go") is None:
        unavailable(
            "Go is not on PATH: the real-cluster tests build etcd, kube-apiserver, kube-controller-manager and "
            f"the operators from Go modules (docs/development.md); or point {USE_KUBECONFIG_ENV}=1 and "
            "KUBECONFIG at such a cluster"
        )
    state = state_dir()
    try:
        launcher = build_launcher(state)
        kubeconfig = launcher_status(launcher, state)
        started = kubeconfig is None
        if kubeconfig is None:
            kubeconfig = launcher_up(launcher, state, _echo(request.config))
    except LauncherError as e:
        pytest.fail(f"the cluster did not start (state: {state}; ${STATE_ENV} to move it):\n{e}", pytrace=False)
    c = connect(kubeconfig, cache)
    try:
        yield c
    finally:
        c.api.close()
        if started:
            launcher_down(launcher, state)


@pytest.fixture
def namespace(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace for one test, named after it, deleted afterwards."""
    prefix = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40] + "-"
    name = create_namespace(cluster, prefix)
    yield name
    delete_namespace(cluster, name)


@pytest.fixture
def dry_namespace(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace for objects that make no pods (dry runs, runtimes): no waiting for its
    ``default`` service account. Named after the test, deleted afterwards."""
    prefix = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40] + "-"
    name = create_namespace(cluster, prefix, for_pods=False)
    yield name
    delete_namespace(cluster, name)
