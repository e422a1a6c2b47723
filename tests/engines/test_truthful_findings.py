"""Issue 27, class 6: doctor and lints that tell the truth.

* DR023 counts processes as Trainer's torch plugin does (numProcPerNode, else one per requested
  CPU without a GPU: kubeflow/trainer@v2.3.0:pkg/runtime/framework/plugins/torch/torch.go:121-135),
  and a command that reads PET_* itself is not said to ignore them.
* EC114 is the PyTorchJob's: its headless services publish a pod only once Ready (the operator
  sets no publishNotReadyAddresses: kubeflow/trainer@v1.9.4:pkg/controller.v1/common/service.go:230-231),
  while JobSet defaults publishNotReadyAddresses to true
  (kubernetes-sigs/jobset@v0.12.0:pkg/webhooks/jobset_webhook.go:137-138,
  pkg/controllers/jobset_controller.go:816): never on a TrainJob, whatever else -t all emits.
* DR009 flags a launcher flag only when it differs from what the engine injects
  (kubeflow/trainer@v1.9.4:pkg/controller.v1/pytorch/elastic.go:78-91: PET_RDZV_BACKEND is
  rdzvBackend or c10d, PET_NNODES MIN:MAX).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from elastic_compile.compiler import doctor
from elastic_compile.compiler.cli import main
from elastic_compile.core.emit import to_yaml

TRAINJOB: dict[str, Any] = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1",
    "kind": "TrainJob",
    "metadata": {"name": "tj"},
    "spec": {
        "runtimeRef": {"name": "torch-distributed"},
        "trainer": {"image": "x:1.0", "command": ["python", "train.py"], "numNodes": 1},
    },
}


def _findings(doc: dict[str, Any] | list[dict[str, Any]], code: str) -> list[str]:
    report = doctor.doctor_stream(to_yaml(doc if isinstance(doc, list) else [doc]), "j.yaml")
    return [p.message for p in report.problems if p.message.startswith(code + " ")]


def _trainjob(**trainer: Any) -> dict[str, Any]:
    job = copy.deepcopy(TRAINJOB)
    job["spec"]["trainer"].update(trainer)
    return job


def test_dr023_counts_the_cpus_trainer_counts() -> None:
    # One node, no numProcPerNode, 4 CPUs requested: Trainer says 4 processes, the command runs 1.
    (message,) = _findings(_trainjob(resourcesPerNode={"requests": {"cpu": "4"}}), "DR023")
    assert "runs once per pod (1 x 1, where Trainer's PET_* say 1 node(s) x 4 per node)" in message
    assert "torch's env:// finds no MASTER_ADDR, RANK or WORLD_SIZE" in message
    # One CPU on one node: one process either way, nothing to say.
    assert _findings(_trainjob(resourcesPerNode={"requests": {"cpu": "1"}}), "DR023") == []


def test_dr023_leaves_a_script_that_reads_pet_itself() -> None:
    script = "import os; print(os.environ['PET_NODE_RANK'], os.environ['PET_NNODES'])"
    assert _findings(_trainjob(command=["python3", "-c", script], numNodes=4), "DR023") == []
    assert _findings(_trainjob(command=["python3", "-c", "print(1)"], numNodes=4), "DR023") != []


def test_no_torch_rules_on_another_frameworks_runtime() -> None:
    runtime = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": "flux-distributed", "labels": {"trainer.kubeflow.org/framework": "flux"}},
        "spec": {"mlPolicy": {"numNodes": 1, "flux": {}}, "template": {"spec": {"replicatedJobs": [{
            "name": "node", "template": {"metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step":
            "trainer"}}, "spec": {"template": {"spec": {"containers": [{"name": "node", "image": "u:1"}]}}}}}]}}},
    }  # fmt: skip
    job = _trainjob(command=["lmp", "-in", "x"], numNodes=2)
    job["spec"]["runtimeRef"] = {"name": "flux-distributed"}
    assert _findings([runtime, job], "DR023") == []


READY = (
    'pod_template:\n  spec:\n    containers:\n    - name: pytorch\n      readinessProbe: {exec: {command: ["true"]}}\n'
)
SPEC = "name: j\nimage: x:1.0\ncommand: [python, t.py]\nnnodes: 2\nnproc_per_node: 1\n" + READY


@pytest.mark.parametrize(
    ("target", "flags", "fires"),
    [
        ("pytorchjob", [], True),
        ("pytorchjob", ["-t", "podtemplate"], True),
        ("trainjob", [], False),
        ("trainjob", ["-t", "all"], False),  # the PodTemplate beside a TrainJob is not a PyTorchJob's pod
        ("trainjob", ["-t", "pytorchjob"], True),
    ],
)
def test_ec114_is_the_pytorchjobs_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], target: str, flags: list[str], fires: bool
) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC + f"target: {target}\n")
    assert main([str(spec), *flags]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if "EC114" in line]
    assert bool(lines) == fires, lines
    for line in lines:
        assert "the PyTorchJob's headless services publish a pod only once it is Ready" in line
        assert "j-worker-0" in line


ELASTIC = {
    "apiVersion": "kubeflow.org/v1",
    "kind": "PyTorchJob",
    "metadata": {"name": "e"},
    "spec": {
        "elasticPolicy": {"rdzvBackend": "c10d", "minReplicas": 1, "maxReplicas": 3, "maxRestarts": 3},
        "pytorchReplicaSpecs": {"Worker": {"replicas": 2, "restartPolicy": "OnFailure", "template": {"spec": {
            "containers": [{"name": "pytorch", "image": "x:1.0", "command": ["torchrun", "t.py"]}]}}}},
    },
}  # fmt: skip


@pytest.mark.parametrize(
    ("flags", "fires"),
    [
        (["--rdzv_backend=c10d"], False),  # the upstream echo example's: the manifest's own backend
        (["--rdzv-backend", "etcd"], True),
        (["--nnodes=1:3"], False),
        (["--nnodes=3"], True),  # 3:3 is not 1:3
        (["--rdzv-endpoint", "e-worker-0:23456"], False),
        (["--rdzv-endpoint", "other:23456"], True),
    ],
)
def test_dr009_only_when_the_flag_differs_from_the_operator(flags: list[str], fires: bool) -> None:
    job = copy.deepcopy(ELASTIC)
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["command"] = [
        "torchrun",
        *flags,
        "t.py",
    ]
    assert bool(_findings(job, "DR009")) == fires
