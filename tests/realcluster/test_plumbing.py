"""The first tests against the real control plane: the compiled examples pass the API server with
its webhooks, and the operators make pods from them.

Each compiled object goes through server-side apply with strict field validation: a dry run
(CRD schema, defaulting, CEL, the operators' validating and mutating webhooks), or for real, then
the pods the operators (and, for a TrainJob, JobSet and the Job controller) create are read back.
The wide matrix and the comparison with ``elastic-compile run`` build on these helpers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kube_helpers import REPO, ApplyError, Cluster, apply, compile_spec, container, wait_for_pods

EXAMPLES = REPO / "examples"
SPECS = sorted([*EXAMPLES.glob("*.yaml"), EXAMPLES / "flyte2" / "elastic.yaml"])

#: Examples the compiler refuses for a target, each with its reason (tests/test_errors.py has
#: the messages): nothing to send to the server.
REFUSED = {
    ("ddp-2x8-gpu.yaml", "trainjob"): "run_policy.ttl_seconds_after_finished: no TTL at Trainer v2.3",
    ("flyte2/elastic.yaml", "trainjob"): "an elastic nnodes range: Trainer v2.3 has no elastic jobs",
}
CASES = [
    pytest.param(spec, target, id=f"{spec.relative_to(EXAMPLES)}-{target}")
    for spec in SPECS
    for target in ("pytorchjob", "trainjob")
    if (str(spec.relative_to(EXAMPLES)), target) not in REFUSED
]


def test_cases_cover_every_example() -> None:
    """A new example joins the dry runs (or REFUSED, with its reason) without editing this file."""
    assert len(SPECS) >= 5
    assert len(CASES) + len(REFUSED) == 2 * len(SPECS)


def _runtime_first(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The TrainJob's webhook wants its runtime to exist: runtimes before jobs."""
    return sorted(docs, key=lambda d: d["kind"] != "TrainingRuntime")


@pytest.mark.parametrize(("spec", "target"), CASES)
def test_example_passes_a_strict_server_side_dry_run(cluster: Cluster, namespace: str, spec: Path, target: str) -> None:
    docs = _runtime_first(compile_spec(spec, target))
    assert docs
    for doc in docs:
        # A TrainingRuntime of ours is created for real: the TrainJob's dry run looks it up.
        result = apply(cluster, doc, namespace=namespace, dry_run=doc["kind"] != "TrainingRuntime")
        assert result.warnings == [], f"{doc['kind']} {doc['metadata']['name']}"
        assert result.obj["kind"] == doc["kind"]
        assert result.obj["metadata"]["namespace"] == namespace


def test_dry_run_refuses_a_field_the_schema_does_not_declare(cluster: Cluster, namespace: str) -> None:
    """A misspelled field is an error, not a field pruned in silence.

    Server-side apply builds a typed patch from the CRD's schema before any validation, and a
    field the schema does not declare fails that step: kube-apiserver 1.37 answers 500
    ("failed to create typed patch object"), where a create with fieldValidation=Strict answers
    400 ("strict decoding error: unknown field").
    """
    job = compile_spec(EXAMPLES / "minimal.yaml", "pytorchjob")[0]
    job["spec"]["runPolicy"]["cleanPodPolicyy"] = "None"
    with pytest.raises(ApplyError) as refused:
        apply(cluster, job, namespace=namespace, dry_run=True)
    assert refused.value.status == 500
    assert "failed to create typed patch object" in str(refused.value)
    assert ".spec.runPolicy.cleanPodPolicyy: field not declared in schema" in str(refused.value)


def _env_names(c: dict[str, Any]) -> list[str]:
    return [e["name"] for e in c.get("env", [])]


def test_pytorchjob_pods_carry_the_compiled_container(cluster: Cluster, namespace: str) -> None:
    """training-operator v1 makes one pod per Worker replica; each keeps our container and gets its env."""
    job = compile_spec(EXAMPLES / "cpu-ddp.yaml", "pytorchjob")[0]
    apply(cluster, job, namespace=namespace)
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]
    ours = next(c for c in worker["template"]["spec"]["containers"] if c["name"] == "pytorch")

    selector = f"training.kubeflow.org/job-name={job['metadata']['name']}"
    pods = wait_for_pods(cluster, namespace, selector, worker["replicas"])

    assert [p["metadata"]["name"] for p in pods] == [f"cpu-ddp-worker-{i}" for i in range(worker["replicas"])]
    for pod in pods:
        assert pod["status"]["phase"] == "Pending"
        assert "nodeName" not in pod["spec"]  # no scheduler: the spec is exactly what the operator made
        theirs = container(pod, "pytorch")
        assert theirs["command"] == ours["command"]
        assert theirs["args"] == ours["args"]
        names = _env_names(theirs)
        # Ours first, in order; then the operator's (appended, elastic form: c10d at worker-0).
        assert names[: len(ours["env"])] == _env_names(ours)
        env = {e["name"]: e.get("value") for e in theirs["env"]}
        assert env["PET_RDZV_BACKEND"] == "c10d"
        assert env["PET_RDZV_ENDPOINT"] == "cpu-ddp-worker-0:23456"
        assert env["PET_NNODES"] == "2:2"
        assert env["PET_NPROC_PER_NODE"] == "2"
        assert theirs["volumeMounts"][: len(ours["volumeMounts"])] == ours["volumeMounts"]
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        for v in worker["template"]["spec"]["volumes"]:
            assert volumes[v["name"]] == v
        assert pod["spec"]["restartPolicy"] == "Never"  # restartPolicy ExitCode: the pod's is Never


def test_trainjob_pods_carry_the_compiled_trainer(cluster: Cluster, namespace: str) -> None:
    """Trainer v2 makes a JobSet, JobSet a Job, the Job controller the pods: our trainer in container node."""
    job = compile_spec(EXAMPLES / "cpu-ddp.yaml", "trainjob")[0]
    assert job["kind"] == "TrainJob"
    apply(cluster, job, namespace=namespace)
    trainer = job["spec"]["trainer"]
    name = job["metadata"]["name"]

    pods = wait_for_pods(cluster, namespace, f"jobset.sigs.k8s.io/jobset-name={name}", trainer["numNodes"])

    assert len(pods) == trainer["numNodes"]
    indexes = sorted(p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] for p in pods)
    assert indexes == [str(i) for i in range(trainer["numNodes"])]
    for pod in pods:
        assert pod["status"]["phase"] == "Pending"
        assert pod["spec"]["subdomain"] == name
        assert pod["spec"]["hostname"].startswith(f"{name}-node-0-")
        node = container(pod, "node")
        assert node["image"] == trainer["image"]
        assert node["command"] == trainer["command"]
        assert node["args"] == trainer["args"]
        names = _env_names(node)
        # The trainer's env in order, then the torch plugin's PET_* (static rendezvous at node 0).
        assert names[: len(trainer["env"])] == _env_names(trainer)
        env = {e["name"]: e for e in node["env"]}
        assert env["PET_NNODES"]["value"] == str(trainer["numNodes"])
        assert env["PET_NPROC_PER_NODE"]["value"] == str(trainer["numProcPerNode"])
        assert env["PET_MASTER_ADDR"]["value"] == f"{name}-node-0-0.{name}"
        assert env["PET_MASTER_PORT"]["value"] == "29500"
        rank = env["PET_NODE_RANK"]["valueFrom"]["fieldRef"]["fieldPath"]
        assert rank == "metadata.annotations['batch.kubernetes.io/job-completion-index']"
        assert {"name": "dshm", "mountPath": "/dev/shm"} in node["volumeMounts"]
        assert any(v["name"] == "dshm" and v["emptyDir"]["medium"] == "Memory" for v in pod["spec"]["volumes"])
