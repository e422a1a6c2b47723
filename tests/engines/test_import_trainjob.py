"""Issue 27, class 3: import of a TrainJob keeps what the job meant.

* the process count the torch plugin gives a node without numProcPerNode: "auto" with a resource
  named *gpu*, else max(1, the CPU request, else limit, rounded up)
  (kubeflow/trainer@v2.3.0:pkg/runtime/framework/plugins/torch/torch.go:121-135, :227-240;
  pkg/runtime/runtime.go:254-298);
* JobSet-level and Job-level metadata of runtimePatches, which Trainer copies onto the JobSet
  and merges into the Job (kubeflow/trainer@v2.3.0:pkg/runtime/core/trainingruntime.go:141-180);
* the image of the referenced runtime when trainer.image is unset (the stock one:
  kubeflow/trainer@v2.3.0:manifests/base/runtimes/torch_distributed.yaml:38);
* every setting not carried is a comment in the spec, and v2 notes give v2 reasons.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
import yaml
from job_meaning import docs, meaning

from elastic_compile.compiler.importer import import_stream
from elastic_compile.compiler.output import stream_text
from elastic_compile.compiler.pipeline import compile_text
from elastic_compile.core.emit import to_yaml
from elastic_compile.core.errors import SpecError
from elastic_compile.localrun import trainer

JOB: dict[str, Any] = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1",
    "kind": "TrainJob",
    "metadata": {"name": "tj"},
    "spec": {
        "runtimeRef": {"name": "torch-distributed"},
        "trainer": {"image": "x:1.0", "command": ["torchrun", "train.py"], "numNodes": 2},
    },
}


def _job(**trainer_fields: Any) -> dict[str, Any]:
    job = copy.deepcopy(JOB)
    job["spec"]["trainer"].update(trainer_fields)
    return job


def _round_trip(stream: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any], str]:
    (imported,) = import_stream(to_yaml(stream), "tj.yaml")
    compiled = docs(stream_text([compile_text(imported.text, "s.yaml")], "yaml"))
    return meaning(stream), meaning(compiled, runtimes=stream), imported.text


@pytest.mark.parametrize(
    ("resources", "nproc"),
    [
        ({"requests": {"cpu": "2"}, "limits": {"cpu": "4"}}, "2"),  # the request first
        ({"limits": {"cpu": "3"}}, "3"),  # else the limit
        ({"requests": {"cpu": "3500m"}}, "4"),  # rounded up (Quantity.Value)
        ({"requests": {"cpu": "500m"}}, "1"),  # at least 1
        ({"requests": {"memory": "1Gi"}}, "1"),  # no CPU at all: 1
        ({"limits": {"nvidia.com/gpu": "4"}}, "4"),  # "auto": one per device
        ({"limits": {"aws.amazon.com/neuroncore": "2", "cpu": "8"}}, "8"),  # not named *gpu*: the CPUs
    ],
)
def test_the_plugins_process_count_is_kept(resources: dict[str, Any], nproc: str) -> None:
    job = _job(resourcesPerNode=resources)
    (pod, _) = trainer.pods(job)
    assert pod.env["PET_NPROC_PER_NODE"] in (nproc, "auto")
    before, after, spec = _round_trip([job])
    assert before["pod"][2] == nproc
    assert after == before, spec


def test_a_runtimes_resources_count_when_the_trainer_gives_none() -> None:
    runtime = yaml.safe_load(
        """
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata: {name: cpu-rt, labels: {trainer.kubeflow.org/framework: torch}}
spec:
  mlPolicy: {numNodes: 3, torch: {}}
  template:
    spec:
      replicatedJobs:
        - name: node
          template:
            metadata: {labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}}
            spec:
              template:
                spec:
                  containers: [{name: node, image: reg/x:2, resources: {requests: {cpu: "6"}}}]
"""
    )
    job = copy.deepcopy(JOB)
    job["spec"]["runtimeRef"] = {"name": "cpu-rt"}
    del job["spec"]["trainer"]["image"], job["spec"]["trainer"]["numNodes"]
    before, after, spec = _round_trip([runtime, job])
    assert before["pod"][0] == "reg/x:2" and before["pod"][2] == "6" and before["pods"] == 3
    assert after == before, spec
    assert "nproc_per_node: 6" in spec and "image: reg/x:2" in spec


def test_a_command_without_launcher_ran_once_per_pod() -> None:
    # The plugin's PET_NPROC_PER_NODE goes unread without torchrun: one process per pod.
    job = _job(command=["python3", "train.py"], resourcesPerNode={"requests": {"cpu": "4"}})
    before, after, spec = _round_trip([job])
    assert before["pod"][2] == "1"
    assert after == before, spec


def test_jobset_and_job_metadata_of_the_patches_are_carried() -> None:
    job = copy.deepcopy(JOB)
    job["spec"]["runtimePatches"] = [
        {
            "manager": "example.io/platform",
            "trainingRuntimeSpec": {
                "template": {
                    "metadata": {"labels": {"team": "a"}, "annotations": {"scheduling.volcano.sh/queue-name": "q"}},
                    "spec": {"replicatedJobs": [{"name": "node", "template": {"metadata": {"labels": {"j": "1"}}}}]},
                }
            },
        }
    ]
    before, after, spec = _round_trip([job])
    assert before["jobset_metadata"] == {
        "labels": {"team": "a"},
        "annotations": {"scheduling.volcano.sh/queue-name": "q"},
    }
    assert after == before, spec
    compiled = compile_text(import_stream(to_yaml([job]), "tj.yaml")[0].text, "s.yaml").outputs[-1].doc
    (node_job,) = compiled["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert node_job["template"]["metadata"] == {"labels": {"j": "1"}}


def test_the_image_comes_from_the_stock_runtime() -> None:
    job = copy.deepcopy(JOB)
    del job["spec"]["trainer"]["image"]
    before, after, spec = _round_trip([job])
    assert before["pod"][0] == after["pod"][0] == "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime"
    assert after == before, spec


def test_an_image_the_input_cannot_say_is_a_located_error() -> None:
    job = copy.deepcopy(JOB)
    job["spec"]["runtimeRef"] = {"name": "elsewhere"}
    del job["spec"]["trainer"]["image"]
    with pytest.raises(SpecError) as e:
        import_stream(to_yaml([job]), "tj.yaml")
    (problem,) = e.value.problems
    assert problem.path == "spec.trainer"
    assert "no trainer.image: the image is the runtime elsewhere's, which is not in the input" in problem.message


def test_a_runtime_the_spec_cannot_carry_is_referenced() -> None:
    runtime = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": "gang", "labels": {"trainer.kubeflow.org/framework": "torch"}},
        "spec": {
            "mlPolicy": {"numNodes": 1, "torch": {}},
            "podGroupPolicy": {"volcano": {}},
            "template": {"spec": {"replicatedJobs": [{"name": "node", "template": {
                "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                "spec": {"template": {"spec": {"containers": [{"name": "node", "image": "x:1.0",
                         "volumeMounts": [{"name": "s", "mountPath": "/dev/shm"}]}],
                         "volumes": [{"name": "s", "emptyDir": {"medium": "Memory"}}]}}}}}]}},
        },
    }  # fmt: skip
    job = copy.deepcopy(JOB)
    job["spec"]["runtimeRef"] = {"name": "gang"}
    before, after, spec = _round_trip([runtime, job])
    assert after == before, spec
    assert before["runtime"] == after["runtime"] == {"podGroupPolicy": {"volcano": {}}}
    assert "the runtime gang is referenced, not carried: the spec has no field for spec.podGroupPolicy" in spec
    # Its node mounts /dev/shm: the compiled patch must not mount a second one.
    assert "shared_memory: false" in spec


def test_every_setting_not_carried_is_said_in_the_spec() -> None:
    job = copy.deepcopy(JOB)
    job["spec"]["managedBy"] = "kueue.x-k8s.io/multikueue"
    job["spec"]["trainer"]["env"] = [{"name": "PET_NNODES", "value": "2"}]
    job["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "X", "name": "o", "uid": "u"}]
    job["spec"]["runtimePatches"] = [{"manager": "a.io/b", "trainingRuntimeSpec": {"template": {"spec": {
        "replicatedJobs": [{"name": "other"}]}}}}]  # fmt: skip
    (imported,) = import_stream(to_yaml([job]), "tj.yaml")
    warnings = [n.message.removeprefix("warning: ") for n in imported.notes if n.message.startswith("warning: ")]
    assert len(warnings) >= 4
    comments = imported.text
    for warning in warnings:
        assert warning in comments, warning


@pytest.mark.parametrize(
    "command",
    [
        ["torchrun", "--node-rank", "0", "--master-addr", "h", "t.py"],
        ["torchrun", "--rdzv-backend", "static", "t.py"],
        ["torchrun", "--rdzv-backend", "c10d", "--rdzv-endpoint", "h:29400", "t.py"],
        ["torchrun", "t.py"],
    ],
)
def test_v2_notes_give_v2_reasons(command: list[str]) -> None:
    (imported,) = import_stream(to_yaml([_job(command=command)]), "tj.yaml")
    text = "\n".join(str(n) for n in imported.notes) + imported.text
    assert not re.search(r"worker-0|the operator|training operator", text), text
    assert "node 0" in text
