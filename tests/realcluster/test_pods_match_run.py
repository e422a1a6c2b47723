"""The pods the real engines create, held against what ``elastic-compile run`` starts for each pod.

Each job is applied for real in a fresh namespace; the training operator (PyTorchJob), or
Trainer, JobSet and the Job controller (TrainJob), create its pods, which stay Pending (no
kubelet). Each pod is compared with ``run``'s pod of the same object (``pod_compare``):
command and args, the env in order after the engine's injections (resolved as the kubelet
resolves it), image, restart policy, labels, ConfigMap mounts, the rest of the pod spec
run derives from, and the addresses in the env (the host is a pod of the job behind a headless
Service, the port one of its containerPorts). Every difference fails the test, except the
documented exceptions of ``pod_compare``.

Cases: every example and golden spec for both generations (where the compiler accepts the
target), the three launcher modes, and hand-written PyTorchJobs of layouts the compiler never
emits but ``run`` accepts (a Master replica, an elasticPolicy with rdzvId, nProcPerNode,
only maxReplicas; no elasticPolicy). A suspended job (``run_policy.suspend``, for Kueue) is
applied unsuspended, as Kueue releases it.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kube_helpers import REPO, Cluster, apply, documents, wait_for_pods, wait_for_services
from pod_compare import addresses, differences
from specs import EXAMPLES, GOLDEN, SPECS, platform_runtimes, trainjob_refusal

from elastic_compile.compiler.output import stream_text
from elastic_compile.compiler.pipeline import compile_path, resolver
from elastic_compile.compiler.writer import default_boundary

#: The launcher modes beyond the default (elastic-launch), each on a spec of each generation.
LAUNCHERS = ("bundled", "torchrun")
LAUNCHER_SPECS = (EXAMPLES / "cpu-ddp.yaml", GOLDEN / "pod-template-sidecar" / "elastic.yaml")


@dataclass(frozen=True)
class Case:
    """A spec compiled for one target, with an optional launcher mode added."""

    spec: Path
    target: str
    launcher: str | None = None

    @property
    def id(self) -> str:
        return f"{self.spec.relative_to(REPO)}-{self.target}" + (f"-{self.launcher}" if self.launcher else "")


# A spec the compiler refuses under -t trainjob has no TrainJob to compare (tests/errors pins why).
CASES = [
    Case(s, t) for s in SPECS for t in ("pytorchjob", "trainjob") if t != "trainjob" or trainjob_refusal(s) is None
]
CASES += [Case(s, t, launcher) for s in LAUNCHER_SPECS for t in ("pytorchjob", "trainjob") for launcher in LAUNCHERS]


def _compile(case: Case, tmp_path: Path) -> list[dict[str, Any]]:
    """The documents of the case."""
    spec = case.spec
    if case.launcher is not None:
        spec = tmp_path / "elastic.yaml"
        spec.write_text(case.spec.read_text().rstrip("\n") + f"\nlauncher: {case.launcher}\n")
    compiled = compile_path(spec, (case.target,), None, resolver(default_boundary(REPO)))
    return documents(stream_text([compiled], "yaml"))


def _prerequisites(cluster: Cluster, namespace: str, docs: list[dict[str, Any]]) -> None:
    """What the platform would have: the service accounts and priority classes the pods name
    (the API server refuses a pod without them)."""
    for account in sorted(set(_values(docs, "serviceAccountName")) - {"default"}):
        apply(
            cluster, {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account}}, namespace=namespace
        )
    for priority in sorted(set(_values(docs, "priorityClassName"))):
        apply(
            cluster,
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": priority},
                "value": 1000,
            },
        )


def _values(node: Any, key: str) -> list[str]:
    if isinstance(node, Mapping):
        return [str(v) for k, v in node.items() if k == key] + [x for v in node.values() for x in _values(v, key)]
    if isinstance(node, list):
        return [x for v in node for x in _values(v, key)]
    return []


def _unsuspended(doc: dict[str, Any]) -> dict[str, Any]:
    """The job as Kueue admits it: suspend false (kueue.x-k8s.io is not installed here)."""
    doc = copy.deepcopy(doc)
    if doc["kind"] == "TrainJob" and doc["spec"].get("suspend"):
        doc["spec"]["suspend"] = False
    if doc["kind"] == "PyTorchJob" and doc["spec"].get("runPolicy", {}).get("suspend"):
        doc["spec"]["runPolicy"]["suspend"] = False
    return doc


def _check(cluster: Cluster, namespace: str, docs: list[dict[str, Any]], label: str) -> int:
    """Apply ``docs`` for real, wait for the job's pods, compare them with run's; returns the pod count."""
    _prerequisites(cluster, namespace, docs)
    docs = [*platform_runtimes(cluster, docs), *docs]
    job = next(d for d in docs if d["kind"] in ("PyTorchJob", "TrainJob"))
    runtime = next((d for d in docs if d["kind"] == "TrainingRuntime"), None)
    for doc in sorted(docs, key=lambda d: d["kind"] in ("PyTorchJob", "TrainJob")):
        apply(cluster, _unsuspended(doc), namespace=namespace)
    job = _unsuspended(job)
    job["metadata"]["namespace"] = namespace
    name = job["metadata"]["name"]
    if job["kind"] == "PyTorchJob":
        selector = f"training.kubeflow.org/job-name={name}"
        count = sum(int(r.get("replicas", 1)) for r in job["spec"]["pytorchReplicaSpecs"].values())
    else:
        selector = f"jobset.sigs.k8s.io/jobset-name={name}"
        from elastic_compile.localrun import trainer

        count = trainer.num_nodes(job, runtime)
    real = wait_for_pods(cluster, namespace, selector, count)
    # The operator makes a headless Service per pod (v1), JobSet one for the job (v2), after the pods.
    hosts = [p["metadata"]["name"] for p in real] if job["kind"] == "PyTorchJob" else [name]
    services = wait_for_services(cluster, namespace, hosts)
    ours, found = differences(job, runtime, real)
    found += addresses(job, ours, real, services)
    assert not found, f"{label}: the engines' pods differ from run's:\n" + "\n".join(found)
    return len(real)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_pods_match_run(cluster: Cluster, namespace: str, tmp_path: Path, case: Case) -> None:
    docs = _compile(case, tmp_path)
    assert _check(cluster, namespace, docs, case.id) >= 1


def _handwritten(name: str, spec: dict[str, Any], *, master: bool = False, workers: int = 2) -> dict[str, Any]:
    template = {
        "spec": {
            "containers": [{"name": "pytorch", "image": "python:3.12", "command": ["torchrun"], "args": ["train.py"]}]
        }
    }
    replicas: dict[str, Any] = {"Worker": {"replicas": workers, "restartPolicy": "OnFailure", "template": template}}
    if master:
        replicas["Master"] = {"replicas": 1, "restartPolicy": "OnFailure", "template": copy.deepcopy(template)}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name},
        "spec": {**spec, "pytorchReplicaSpecs": replicas},
    }


#: PyTorchJobs written by hand, in layouts the compiler never emits and run accepts.
HANDWRITTEN = {
    "master-worker": _handwritten("mw", {"nprocPerNode": "2"}, master=True),
    "master-worker-elastic": _handwritten("mwe", {"elasticPolicy": {"rdzvBackend": "c10d"}}, master=True),
    "no-elastic-policy": _handwritten("plain", {}),
    "elastic-only-max": _handwritten("onlymax", {"elasticPolicy": {"maxReplicas": 3}}),
    "elastic-policy-fields": _handwritten(
        "fields",
        {
            "elasticPolicy": {
                "minReplicas": 1, "maxReplicas": 2, "maxRestarts": 4, "rdzvId": "run-7", "nProcPerNode": 3,
                "rdzvConf": [{"key": "join_timeout", "value": "600"}, {"key": "last_call_timeout", "value": "5"}],
            }
        },
    ),
}  # fmt: skip


@pytest.mark.parametrize("layout", sorted(HANDWRITTEN))
def test_handwritten_pytorchjob_pods_match_run(cluster: Cluster, namespace: str, layout: str) -> None:
    assert _check(cluster, namespace, [HANDWRITTEN[layout]], layout) >= 2
