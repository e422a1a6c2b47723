"""An elastic TrainJob (issue 30, item 4) through the real Trainer v2.3, JobSet v0.12 and Job controller.

A ``nnodes: "2:3"`` spec is compiled with the CLI; our TrainingRuntime and then the TrainJob are
applied in a fresh namespace. The asserts hold what the engines made of them (docs/trainer-v2.md,
"Elastic TrainJobs"): the webhooks accept both without a warning; the JobSet carries
``failurePolicy.maxRestarts: 0``; the node Job runs MAX indexes with our ``successPolicy``,
``podReplacementPolicy: Failed`` and ``backoffLimit``; MAX pods exist with restartPolicy OnFailure,
``PET_NNODES`` = MAX, ``PET_NODE_RANK`` = the completion index, node 0's address and
``--min-nodes 2``.

There is no kubelet, so the pods stay Pending; the test then plays the kubelet's part through
the pod status subresource, as a kubelet would write it, and watches the Job controller:

* index 0's pod deleted: its replacement appears only once the old pod is gone or Failed,
  never next to a live old one (``podReplacementPolicy: Failed``);
* index 0's pod ``Succeeded``: the successPolicy is met, the other pods are removed, the Job,
  the JobSet and the TrainJob complete;
* in a second job, ``backoffLimit + 1`` pods ``Failed``: the Job, then the JobSet (with no
  restart) and the TrainJob fail.

docs/trainer-v2.md, "Tested on the real control plane", states what they did.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from kube_helpers import Cluster, apply, compile_spec, container, run_cli, wait_for_pods

#: MIN:MAX of the spec.
MIN, MAX = 2, 3
BACKOFF_LIMIT = 9
INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"

SPEC = """\
target: trainjob
name: {name}
image: python:3.12
command: [python, train.py]
nnodes: "{min}:{max}"
max_restarts: 3
run_policy:
  backoff_limit: {backoff_limit}
resources:
  requests: {{cpu: 1, memory: 1Gi}}
"""

#: Polls of the state the controllers reach, 0.25 s apart (bounded by count, not by time).
POLLS = 480
EVERY = 0.25


def _get(cluster: Cluster, api_version: str, kind: str, name: str, namespace: str) -> dict[str, Any] | None:
    """The object as a plain dict, or None when it does not exist."""
    from kubernetes.dynamic.exceptions import NotFoundError

    resource = cluster.dynamic.resources.get(api_version=api_version, kind=kind)
    try:
        found: dict[str, Any] = resource.get(name=name, namespace=namespace).to_dict()
    except NotFoundError:
        return None
    return found


def _wait_for(cluster: Cluster, api_version: str, kind: str, name: str, namespace: str) -> dict[str, Any]:
    for _ in range(POLLS):
        found = _get(cluster, api_version, kind, name, namespace)
        if found is not None:
            return found
        time.sleep(EVERY)
    raise AssertionError(f"no {kind} {namespace}/{name} after {POLLS} polls")


def _conditions(obj: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: c["status"] for c in (obj.get("status") or {}).get("conditions") or []}


def _pods(cluster: Cluster, namespace: str, selector: str) -> list[dict[str, Any]]:
    from kubernetes import client

    found = client.CoreV1Api(cluster.api).list_namespaced_pod(namespace, label_selector=selector).items
    pods: list[dict[str, Any]] = [cluster.api.sanitize_for_serialization(p) for p in found]
    return sorted(pods, key=lambda p: p["metadata"]["name"])


def _env(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container(pod, "node")["env"]}


def _state(pod: dict[str, Any]) -> str:
    """A pod's name, phase, whether it is being deleted, and who said why it stopped."""
    meta, status = pod["metadata"], pod["status"]
    why = [f"{c['type']}={c.get('reason')}" for c in status.get("conditions") or [] if c["type"] == "DisruptionTarget"]
    deleting = "deleting" if meta.get("deletionTimestamp") else "live"
    return ":".join([meta["name"], str(status.get("phase")), deleting, *why])


def _index0(cluster: Cluster, namespace: str, selector: str) -> list[dict[str, Any]]:
    return _pods(cluster, namespace, f"{selector},{INDEX_LABEL}=0")


def test_elastic_trainjob_on_the_real_engines(cluster: Cluster, namespace: str, tmp_path: Path) -> None:
    from kubernetes import client

    spec = tmp_path / "elastic.yaml"
    spec.write_text(SPEC.format(name="elastic3", min=MIN, max=MAX, backoff_limit=BACKOFF_LIMIT))
    docs = compile_spec(spec, "trainjob")
    assert [d["kind"] for d in docs] == ["TrainingRuntime", "TrainJob"]
    runtime, trainjob = docs
    name = trainjob["metadata"]["name"]

    # The runtime first (the TrainJob webhook resolves runtimeRef), then the TrainJob.
    for doc in docs:
        applied = apply(cluster, doc, namespace=namespace)
        assert applied.warnings == [], f"{doc['kind']}: the server warned: {applied.warnings}"

    jobset = _wait_for(cluster, "jobset.x-k8s.io/v1alpha2", "JobSet", name, namespace)
    # Trainer builds the JobSet from Go types, where maxRestarts is omitempty: our 0 arrives as
    # no field, which JobSet reads as 0 (the runtime itself keeps the 0 as written).
    assert jobset["spec"]["failurePolicy"].get("maxRestarts", 0) == 0, jobset["spec"]["failurePolicy"]
    (rjob,) = jobset["spec"]["replicatedJobs"]
    assert rjob["name"] == "node"

    job = _wait_for(cluster, "batch/v1", "Job", f"{name}-node-0", namespace)
    ours = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert ours["backoffLimit"] == BACKOFF_LIMIT
    assert job["spec"]["parallelism"] == MAX
    assert job["spec"]["completions"] == MAX
    assert job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["successPolicy"] == ours["successPolicy"] == {"rules": [{"succeededIndexes": "0"}]}
    assert job["spec"]["podReplacementPolicy"] == ours["podReplacementPolicy"] == "Failed"
    assert job["spec"]["backoffLimit"] == BACKOFF_LIMIT

    selector = f"jobset.sigs.k8s.io/jobset-name={name}"
    pods = wait_for_pods(cluster, namespace, selector, MAX)
    assert len(pods) == MAX
    indexes = []
    for pod in pods:
        assert pod["spec"]["restartPolicy"] == "OnFailure"
        index = pod["metadata"]["annotations"][INDEX_ANNOTATION]
        assert pod["metadata"]["labels"][INDEX_LABEL] == index
        indexes.append(index)
        env = _env(pod)
        assert env["PET_NNODES"]["value"] == str(MAX)
        assert env["PET_MASTER_ADDR"]["value"] == f"{name}-node-0-0.{name}"
        # The node rank is the completion index: Trainer reads the Job controller's annotation,
        # the Job controller's own JOB_COMPLETION_INDEX its label; both hold the index.
        assert env["PET_NODE_RANK"]["valueFrom"]["fieldRef"]["fieldPath"] == (
            f"metadata.annotations['{INDEX_ANNOTATION}']"
        ), env["PET_NODE_RANK"]
        assert env["JOB_COMPLETION_INDEX"]["valueFrom"]["fieldRef"]["fieldPath"] == (
            f"metadata.labels['{INDEX_LABEL}']"
        ), env["JOB_COMPLETION_INDEX"]
        args = container(pod, "node")["args"]
        assert args[args.index("--min-nodes") + 1] == str(MIN)
        assert "--rdzv-at-master" in args
    assert sorted(indexes) == [str(i) for i in range(MAX)]

    core = client.CoreV1Api(cluster.api)

    # Index 0's pod lost: no new index-0 pod while the old one lives and has not Failed.
    (old,) = _index0(cluster, namespace, selector)
    old_name = old["metadata"]["name"]
    core.delete_namespaced_pod(old_name, namespace)
    seen: list[tuple[str, ...]] = []
    replacement: dict[str, Any] | None = None
    for _ in range(POLLS):
        now = _index0(cluster, namespace, selector)
        state = tuple(_state(p) for p in now)
        if not seen or seen[-1] != state:
            seen.append(state)
        new = [p for p in now if p["metadata"]["name"] != old_name]
        olds = [p for p in now if p["metadata"]["name"] == old_name]
        if new:
            assert all(p["status"].get("phase") == "Failed" for p in olds), f"two index-0 pods: {seen}"
            replacement = new[0]
            break
        time.sleep(EVERY)
    assert replacement is not None, f"no new pod for index 0 after {POLLS} polls: {seen}"
    print(f"index 0 after deleting {old_name}: {seen}")

    # The kubelet's part: index 0's (new) pod succeeds. The successPolicy ends the Job.
    core.patch_namespaced_pod_status(replacement["metadata"]["name"], namespace, {"status": {"phase": "Succeeded"}})
    for _ in range(POLLS):
        job = _get(cluster, "batch/v1", "Job", f"{name}-node-0", namespace) or {}
        if _conditions(job).get("Complete") == "True":
            break
        time.sleep(EVERY)
    conditions = _conditions(job)
    assert conditions.get("SuccessCriteriaMet") == "True", job.get("status")
    assert conditions.get("Complete") == "True", job.get("status")
    print(f"Job status: {job['status']}")
    for _ in range(POLLS):
        others = [p for p in _pods(cluster, namespace, selector) if p["metadata"]["labels"][INDEX_LABEL] != "0"]
        if not others:
            break
        time.sleep(EVERY)
    assert others == [], [(p["metadata"]["name"], p["status"].get("phase")) for p in others]

    for _ in range(POLLS):
        jobset = _get(cluster, "jobset.x-k8s.io/v1alpha2", "JobSet", name, namespace) or {}
        done = _get(cluster, "trainer.kubeflow.org/v1alpha1", "TrainJob", name, namespace) or {}
        if _conditions(jobset).get("Completed") == "True" and _conditions(done).get("Complete") == "True":
            break
        time.sleep(EVERY)
    assert _conditions(jobset).get("Completed") == "True", jobset.get("status")
    assert _conditions(done).get("Complete") == "True", done.get("status")


def test_backoff_limit_fails_the_trainjob_without_a_jobset_restart(
    cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    """backoffLimit + 1 failed pods fail the node Job; the JobSet fails at once (no restart, as
    maxRestarts 0 says even though the field does not reach the JobSet) and the TrainJob fails."""
    from kubernetes import client

    limit = 1
    name = "elastic-fail"
    spec = tmp_path / "elastic.yaml"
    spec.write_text(SPEC.format(name=name, min=MIN, max=MAX, backoff_limit=limit))
    for doc in compile_spec(spec, "trainjob"):
        apply(cluster, doc, namespace=namespace)
    selector = f"jobset.sigs.k8s.io/jobset-name={name}"
    wait_for_pods(cluster, namespace, selector, MAX)
    core = client.CoreV1Api(cluster.api)
    failed: list[str] = []
    job: dict[str, Any] = {}
    # The kubelet's part: pods fail one at a time (index 1, then whichever lives), until the Job fails.
    for _ in range(POLLS):
        job = _get(cluster, "batch/v1", "Job", f"{name}-node-0", namespace) or {}
        if _conditions(job).get("Failed") == "True":
            break
        live = [
            p
            for p in _pods(cluster, namespace, selector)
            if p["status"].get("phase") == "Pending" and not p["metadata"].get("deletionTimestamp")
        ]
        if len(failed) <= limit and live and (job.get("status") or {}).get("failed", 0) == len(failed):
            victim = sorted(live, key=lambda p: p["metadata"]["labels"][INDEX_LABEL] == "0")[0]
            core.patch_namespaced_pod_status(victim["metadata"]["name"], namespace, {"status": {"phase": "Failed"}})
            failed.append(victim["metadata"]["name"])
        time.sleep(EVERY)
    assert len(failed) == limit + 1, failed
    assert _conditions(job).get("Failed") == "True", job.get("status")
    reasons = [c.get("reason") for c in job["status"]["conditions"] if c["type"] == "Failed"]
    assert reasons == ["BackoffLimitExceeded"], job["status"]
    print(f"Job status: {job['status']}")

    jobset: dict[str, Any] = {}
    trainjob: dict[str, Any] = {}
    for _ in range(POLLS):
        jobset = _get(cluster, "jobset.x-k8s.io/v1alpha2", "JobSet", name, namespace) or {}
        trainjob = _get(cluster, "trainer.kubeflow.org/v1alpha1", "TrainJob", name, namespace) or {}
        if _conditions(jobset).get("Failed") == "True" and _conditions(trainjob).get("Failed") == "True":
            break
        time.sleep(EVERY)
    assert _conditions(jobset).get("Failed") == "True", jobset.get("status")
    assert (jobset.get("status") or {}).get("restarts", 0) == 0, jobset["status"]
    assert _conditions(trainjob).get("Failed") == "True", trainjob.get("status")
    print(f"JobSet status: {jobset['status']}")
    print(f"TrainJob conditions: {trainjob['status']['conditions']}")


def test_an_elastic_range_on_the_stock_runtime(cluster: Cluster, namespace: str, tmp_path: Path) -> None:
    """What ``doctor`` DR032 says, as the real engines make it: the compiled elastic TrainJob pointed
    at Trainer's stock torch-distributed instead of our runtime gets a node Job with no
    successPolicy (it completes only when all MAX indexes have) and podReplacementPolicy
    TerminatingOrFailed (a lost node 0 is replaced while the old pod terminates). doctor flags it,
    and not the same job given with our runtime."""
    from elastic_compile.targets.trainjob import api

    spec = tmp_path / "elastic.yaml"
    spec.write_text(SPEC.format(name="elastic-stock", min=MIN, max=MAX, backoff_limit=BACKOFF_LIMIT))
    runtime, trainjob = compile_spec(spec, "trainjob")
    stock = {**trainjob, "metadata": {"name": "on-stock", "namespace": namespace}}
    stock["spec"] = {**trainjob["spec"], "runtimeRef": {"name": api.STOCK_RUNTIME}}
    apply(cluster, stock, namespace=namespace)
    job = _wait_for(cluster, "batch/v1", "Job", "on-stock-node-0", namespace)["spec"]
    assert "successPolicy" not in job and job["completions"] == MAX, job
    assert job["podReplacementPolicy"] == "TerminatingOrFailed", job
    assert job["backoffLimit"] == api.JOB_BACKOFF_LIMIT_DEFAULT, job  # what --explain says of the stock runtime

    manifest = tmp_path / "stock.yaml"
    manifest.write_text(json.dumps(stock))
    status, out, _err = run_cli(["doctor", str(manifest)])
    assert status == 1 and "DR032 elastic-stock-runtime" in out, out
    ours = tmp_path / "ours.yaml"
    ours.write_text(json.dumps(runtime) + "\n---\n" + json.dumps(trainjob))
    assert "DR032" not in run_cli(["doctor", str(ours)])[1]


#: The same range, without run_policy.backoff_limit.
UNBOUNDED = SPEC.replace("run_policy:\n  backoff_limit: {backoff_limit}\n", "")


def test_an_unset_backoff_limit_is_what_explain_shows(cluster: Cluster, namespace: str, tmp_path: Path) -> None:
    """Our runtime without run_policy.backoff_limit writes no backoffLimit: the API server fills
    Kubernetes' default into the node Job (api.JOB_BACKOFF_LIMIT_DEFAULT), and ``--explain`` shows
    that value, not the PyTorchJob's "no limit"."""
    from elastic_compile.compiler.explain import explain
    from elastic_compile.compiler.pipeline import compile_path
    from elastic_compile.targets.trainjob import api

    spec = tmp_path / "elastic.yaml"
    spec.write_text(UNBOUNDED.format(name="unbounded", min=MIN, max=MAX))
    runtime, trainjob = compile_spec(spec, "trainjob")
    assert "backoffLimit" not in runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]
    for doc in (runtime, trainjob):
        apply(cluster, doc, namespace=namespace)
    job = _wait_for(cluster, "batch/v1", "Job", "unbounded-node-0", namespace)["spec"]
    assert job["backoffLimit"] == api.JOB_BACKOFF_LIMIT_DEFAULT
    shown = explain(compile_path(spec, ("trainjob",)))
    assert f"run_policy.backoff_limit: {job['backoffLimit']} " in shown, shown
