"""Issue 27's findings about the engines, re-verified on the real ones (what they did is in the asserts).

* A NetworkPolicy keeps selecting the job's pods after a kustomize ``namePrefix``,
  ``nameSuffix`` or ``commonLabels`` overlay, for both generations: the pods the operators create
  carry ``elastic-compile.dev/job-name`` with the renamed value, and the API server's own label
  selection (the policy's selectors, as list selectors) finds exactly the job's pods; the
  bundled launcher's ConfigMap reference follows the rename too.
* The env each generation injects (``elastic_compile.core.engine_env``): ``PYTHONUNBUFFERED``
  from the v1 operator only; ``PET_NNODES`` on a Master + Worker job is the elasticPolicy's
  ``min:max`` as written, on every pod, the Master included.
* Trainer v2.3's torch plugin without ``numProcPerNode``: one process per requested CPU,
  rounded up (requests before limits), ``auto`` with a GPU, 1 with no resources.
* JobSet metadata: Trainer puts ``runtimePatches[].trainingRuntimeSpec.template.metadata`` on
  the JobSet, and not the TrainJob's own labels and annotations.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from kube_helpers import Cluster, apply, container, kustomize, wait_for_pods
from specs import EXAMPLES

from elastic_compile.compiler.output import directory_files
from elastic_compile.compiler.pipeline import compile_path, resolver
from elastic_compile.compiler.writer import default_boundary
from elastic_compile.core import engine_env
from elastic_compile.localrun.trainer import COMPLETION_INDEX_ENV
from elastic_compile.targets.trainjob import api

JOB_NAME_LABEL = "elastic-compile.dev/job-name"

#: The overlays: what each does to names and labels.
OVERLAYS = {
    "namePrefix": {"namePrefix": "team-a-"},
    "nameSuffix": {"nameSuffix": "-v2"},
    "commonLabels": {"commonLabels": {"team": "vision"}, "nameSuffix": "-cl"},
}


def _selector(selector: Mapping[str, Any]) -> str:
    """A LabelSelector as a list selector string, so that the API server does the matching."""
    terms = [f"{k}={v}" for k, v in (selector.get("matchLabels") or {}).items()]
    for e in selector.get("matchExpressions") or []:
        op, key, values = e["operator"], e["key"], ",".join(e.get("values") or [])
        terms.append(
            {"In": f"{key} in ({values})", "NotIn": f"{key} notin ({values})", "Exists": key}.get(op, f"!{key}")
        )
    return ",".join(terms)


def _write(directory: Path, files: Mapping[str, str]) -> None:
    for path, text in files.items():
        (directory / path).parent.mkdir(parents=True, exist_ok=True)
        (directory / path).write_text(text)


@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
@pytest.mark.parametrize("target", ["pytorchjob", "trainjob"])
def test_network_policy_selects_the_renamed_jobs_pods(
    cluster: Cluster, namespace: str, tmp_path: Path, target: str, overlay: str
) -> None:
    from kubernetes import client

    spec = tmp_path / "elastic.yaml"
    spec.write_text((EXAMPLES / "cpu-ddp.yaml").read_text() + "\nnetwork_policy: true\nlauncher: bundled\n")
    compiled = compile_path(spec, (target,), None, resolver(default_boundary(tmp_path)))
    _write(tmp_path / "base", directory_files([compiled], "yaml"))
    (tmp_path / "overlay").mkdir()
    kustomization = {"resources": ["../base"], "sortOptions": {"order": "fifo"}, **OVERLAYS[overlay]}
    (tmp_path / "overlay" / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    docs = kustomize(tmp_path / "overlay")
    for doc in docs:
        apply(cluster, doc, namespace=namespace)
    job = next(d for d in docs if d["kind"] in ("PyTorchJob", "TrainJob"))
    policy = next(d for d in docs if d["kind"] == "NetworkPolicy")
    configmap = next(d for d in docs if d["kind"] == "ConfigMap")
    name = job["metadata"]["name"]
    assert name != "cpu-ddp"
    owner = "training.kubeflow.org/job-name" if target == "pytorchjob" else "jobset.sigs.k8s.io/jobset-name"
    pods = wait_for_pods(cluster, namespace, f"{owner}={name}", 2)

    # The operators' pods carry the renamed value, and the policy's selectors find exactly them.
    assert {p["metadata"]["labels"][JOB_NAME_LABEL] for p in pods} == {name}
    core = client.CoreV1Api(cluster.api)
    want = sorted(p["metadata"]["name"] for p in pods)
    for selector in (policy["spec"]["podSelector"], policy["spec"]["ingress"][0]["from"][0]["podSelector"]):
        found = core.list_namespaced_pod(namespace, label_selector=_selector(selector)).items
        assert sorted(p.metadata.name for p in found) == want, selector
    if overlay == "commonLabels":
        assert all(p["metadata"]["labels"]["team"] == "vision" for p in pods)
        assert policy["spec"]["podSelector"]["matchLabels"]["team"] == "vision"
    # The launcher's volume names the renamed ConfigMap.
    for pod in pods:
        volume = next(v for v in pod["spec"]["volumes"] if v["name"] == "elastic-launch")
        assert volume["configMap"]["name"] == configmap["metadata"]["name"]


def _names_added(pod: Mapping[str, Any], cname: str, template_env: list[Mapping[str, Any]]) -> list[str]:
    theirs = [e["name"] for e in container(pod, cname).get("env") or []]
    assert theirs[: len(template_env)] == [e["name"] for e in template_env]
    return theirs[len(template_env) :]


def test_the_v1_operator_injects_its_table(cluster: Cluster, namespace: str) -> None:
    """PYTHONUNBUFFERED and the rows of engine_env.TRAINING_OPERATOR_V1 for a Master + Worker
    job with an explicit elastic range: PET_NNODES is min:max as written, on every pod."""
    template = {
        "spec": {
            "containers": [
                {
                    "name": "pytorch",
                    "image": "python:3.12",
                    "command": ["torchrun", "t.py"],
                    "env": [{"name": "A", "value": "1"}],
                }
            ]
        }
    }
    policy = {"minReplicas": 1, "maxReplicas": 3, "rdzvBackend": "c10d"}
    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "mw"},
        "spec": {
            "elasticPolicy": policy,
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": template},
                "Worker": {"replicas": 2, "restartPolicy": "OnFailure", "template": copy.deepcopy(template)},
            },
        },
    }
    apply(cluster, job, namespace=namespace)
    pods = wait_for_pods(cluster, namespace, "training.kubeflow.org/job-name=mw", 3)
    expected = engine_env.operator_v1_names(master=True, elastic_policy=policy)
    for pod in pods:
        added = _names_added(pod, "pytorch", template["spec"]["containers"][0]["env"])
        assert set(added) == expected, pod["metadata"]["name"]
        env = {e["name"]: e.get("value") for e in container(pod, "pytorch")["env"]}
        assert env["PYTHONUNBUFFERED"] == "1"
        assert env["PET_NNODES"] == "1:3"  # min:max as written, the Master included (issue 27 class 4)


def test_trainer_injects_its_table_and_no_pythonunbuffered(cluster: Cluster, namespace: str) -> None:
    """The torch plugin's five PET_* rows, then the Job controller's JOB_COMPLETION_INDEX; no
    PYTHONUNBUFFERED (issue 27 class 5: the name is the user's under -t trainjob)."""
    env = [{"name": "PYTHONUNBUFFERED", "value": "0"}]
    job = _trainjob("unbuf", {"numNodes": 2, "env": env})
    apply(cluster, job, namespace=namespace)
    pods = wait_for_pods(cluster, namespace, "jobset.sigs.k8s.io/jobset-name=unbuf", 2)
    rows = [row.name for row in engine_env.TRAINER_V2]
    for pod in pods:
        assert _names_added(pod, "node", env) == [*rows, COMPLETION_INDEX_ENV]
        values = [e.get("value") for e in container(pod, "node")["env"] if e["name"] == "PYTHONUNBUFFERED"]
        assert values == ["0"]  # the user's, once, untouched


def _trainjob(name: str, trainer: Mapping[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, **extra.pop("metadata", {})},
        "spec": {
            "runtimeRef": {
                "apiGroup": "trainer.kubeflow.org",
                "kind": "ClusterTrainingRuntime",
                "name": "torch-distributed",
            },
            "trainer": {"image": "python:3.12", "command": ["python", "t.py"], "numNodes": 1, **trainer},
            **extra,
        },
    }


#: resourcesPerNode without numProcPerNode -> what the real torch plugin set (CPU-only: issue 27 class 3).
CPU_ONLY = {
    "cpu3": ({"requests": {"cpu": "3"}}, "3"),
    "cpu2500m": ({"requests": {"cpu": "2500m"}}, "3"),
    "cpu500m": ({"requests": {"cpu": "500m"}}, "1"),
    "cpulimit": ({"limits": {"cpu": "2"}}, "2"),
    "reqlim": ({"requests": {"cpu": "2"}, "limits": {"cpu": "4"}}, "2"),
    "gpu": ({"limits": {"nvidia.com/gpu": "2"}}, "auto"),
    "none": (None, "1"),
}


def test_trainer_process_count_without_num_proc_per_node(cluster: Cluster, namespace: str) -> None:
    for name, (resources, _) in CPU_ONLY.items():
        trainer = {} if resources is None else {"resourcesPerNode": resources}
        apply(cluster, _trainjob(name, trainer), namespace=namespace)
    for name, (resources, expected) in CPU_ONLY.items():
        (pod,) = wait_for_pods(cluster, namespace, f"jobset.sigs.k8s.io/jobset-name={name}", 1)
        env = {e["name"]: e.get("value") for e in container(pod, "node")["env"]}
        assert env["PET_NPROC_PER_NODE"] == expected, name
        trainer = {} if resources is None else {"resourcesPerNode": resources}
        assert api.plugin_nproc(trainer, None) == expected, name  # what run, import and doctor use


def test_jobset_metadata_comes_from_runtime_patches_not_the_trainjob(cluster: Cluster, namespace: str) -> None:
    patch = {
        "manager": "example.com/platform",
        "trainingRuntimeSpec": {
            "template": {
                "metadata": {"labels": {"patched": "x"}, "annotations": {"patched-note": "y"}},
                "spec": {
                    "replicatedJobs": [{"name": "node", "template": {"metadata": {"labels": {"job-level": "z"}}}}]
                },
            }
        },
    }
    job = _trainjob(
        "meta", {}, metadata={"labels": {"own": "a"}, "annotations": {"own-note": "b"}}, runtimePatches=[patch]
    )
    apply(cluster, job, namespace=namespace)
    wait_for_pods(cluster, namespace, "jobset.sigs.k8s.io/jobset-name=meta", 1)
    jobset = cluster.dynamic.resources.get(api_version="jobset.x-k8s.io/v1alpha2", kind="JobSet")
    meta = jobset.get(name="meta", namespace=namespace).to_dict()["metadata"]
    assert meta.get("labels") == {"patched": "x"}
    assert meta.get("annotations") == {"patched-note": "y"}
    from kubernetes import client

    (batch_job,) = client.BatchV1Api(cluster.api).list_namespaced_job(namespace).items
    assert batch_job.metadata.labels["job-level"] == "z"
    assert api.LABEL_ANCESTOR in batch_job.metadata.labels
