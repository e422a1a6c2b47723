"""``-t flyte`` output checked by the real IDL: flyteidl parses it strictly and prints it back unchanged.

``json_format.ParseDict(..., ignore_unknown_fields=False)`` rejects any field flyteidl
does not have, and ``MessageToDict`` of the parsed message must give our data back
exactly (floats as floats, zero values absent), which is what "as MessageToDict would
produce it" means.
"""

from __future__ import annotations

from typing import Any

import pytest
from flyte_helpers import IMAGE, canonical, compile_flyte, spec_text
from flyteidl.admin.task_pb2 import TaskSpec
from flyteidl.core.tasks_pb2 import TaskTemplate
from flyteidl.plugins.kubeflow.pytorch_pb2 import DistributedPyTorchTrainingTask
from google.protobuf.json_format import MessageToDict, ParseDict

from elastic_compile import __version__
from elastic_compile.compiler.pipeline import compile_text
from elastic_compile.targets.flyte.task import spec_to_flyte

SIDECAR = {"name": "logger", "image": "busybox", "args": ["tail", "-f", "/dev/null"]}

CASES: dict[str, dict[str, Any]] = {
    "single-node": {},
    "single-node-function": {"command": None, "function": {"target": "trainer.main:fit", "args": ["--lr", "1e-4"]}},
    "fixed": {"nnodes": 2, "nproc_per_node": 4},
    "range": {"nnodes": "1:4"},
    "no-restarts": {"nnodes": 2, "max_restarts": 0},
    "run-policy": {
        "nnodes": 3,
        "run_policy": {
            "clean_pod_policy": "All",
            "ttl_seconds_after_finished": 600,
            "active_deadline_seconds": 7200,
            "backoff_limit": 2,
        },
    },
    "clean-pod-policy-none": {"nnodes": 2, "run_policy": {"clean_pod_policy": "None"}},
    "gpus": {"nnodes": 2, "resources": {"requests": {"cpu": 8, "memory": "32Gi", "gpu": 2}}},
    "extended-resource": {"nnodes": 2, "resources": {"requests": {"example.com/fpga": 1, "nvidia.com/gpu": 1}}},
    "sidecar": {"nnodes": 2, "pod_template": {"spec": {"containers": [SIDECAR], "nodeSelector": {"pool": "a"}}}},
    "shm-off": {"nnodes": 2, "shared_memory": False},
    "shm-sized": {"nnodes": 2, "shared_memory": "16Gi"},
    "rdzv-conf-and-port": {"nnodes": "2:3", "rdzv": {"port": 29400, "conf": {"keep_alive_interval": "10"}}},
    "pod-integers": {
        "nnodes": 2,
        "pod_template": {
            "spec": {
                "securityContext": {"runAsUser": 1000},
                "containers": [{**SIDECAR, "ports": [{"containerPort": 8080}]}],
            }
        },
    },
    "pod-labels": {"nnodes": 2, "pod_template": {"metadata": {"labels": {"team": "ml"}}}, "istio_sidecar": True},
    "named": {"nnodes": 2, "flyte": {"project": "p", "domain": "d", "name": "train.elastic", "version": "abc123"}},
    "accelerator": {"nnodes": 2, "resources": {"requests": {"gpu": 8}}, "accelerator": "nvidia-h100"},
    "accelerator-partition": {
        "nnodes": 2,
        "resources": {"requests": {"gpu": 1}},
        "accelerator": {"device": "nvidia-tesla-a100", "partition": "1g.5gb"},
    },
}


@pytest.fixture(params=sorted(CASES), scope="module")
def case(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture(scope="module")
def doc(case: str) -> dict[str, Any]:
    return compile_flyte(spec_text(**CASES[case]))


def test_parses_as_admin_task_spec_and_prints_back_unchanged(doc: dict[str, Any]) -> None:
    message = ParseDict(doc, TaskSpec(), ignore_unknown_fields=False)
    assert canonical(MessageToDict(message)) == canonical(doc)


def test_template_parses_as_core_task_template(doc: dict[str, Any]) -> None:
    template = ParseDict(doc["template"], TaskTemplate(), ignore_unknown_fields=False)
    assert template.task_type_version == 1
    assert template.config["primary_container_name"] == "pytorch"
    assert not template.HasField("container")  # the pod is k8sPod, as flytekit writes it with a pod template


def test_custom_is_a_kubeflow_pytorch_task(doc: dict[str, Any]) -> None:
    template = doc["template"]
    if template["type"] == "python-task":
        assert "custom" not in template
        return
    task = ParseDict(template["custom"], DistributedPyTorchTrainingTask(), ignore_unknown_fields=False)
    # Through a Struct every number is a double: MessageToDict of the typed message has
    # ints, and the same data with floats is what the TaskTemplate carries.
    assert canonical(_doubles(MessageToDict(task))) == canonical(template["custom"])
    assert task.worker_replicas.replicas == task.elastic_config.max_replicas > 0
    assert task.elastic_config.rdzv_backend == "c10d"
    assert not task.HasField("master_replicas")


def _doubles(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _doubles(v) for k, v in value.items()}
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def test_pod_integers_become_doubles() -> None:
    pod = compile_flyte(spec_text(**CASES["pod-integers"]))["template"]["k8sPod"]["podSpec"]
    assert pod["securityContext"] == {"runAsUser": 1000.0}
    assert pod["initContainers"][0]["ports"] == [{"containerPort": 8080.0}]  # the sidecar, a native one


def test_enum_and_zero_values_follow_proto3() -> None:
    ranged = compile_flyte(spec_text(**CASES["run-policy"]))["template"]["custom"]
    assert ranged["runPolicy"] == {
        "cleanPodPolicy": "CLEANPOD_POLICY_ALL",
        "ttlSecondsAfterFinished": 600.0,
        "activeDeadlineSeconds": 7200.0,
        "backoffLimit": 2.0,
    }
    zero = compile_flyte(spec_text(**CASES["no-restarts"]))["template"]["custom"]["elasticConfig"]
    assert "maxRestarts" not in zero
    none = compile_flyte(spec_text(**CASES["clean-pod-policy-none"]))["template"]["custom"]
    assert none["runPolicy"] == {}  # set but all zero: the backend still reads it, cleanPodPolicy None


def test_canonical_case() -> None:
    """The whole output for a two-node spec: living documentation of ``-t flyte``."""
    doc = compile_flyte(spec_text(nnodes=2))
    launch_args = [
        "--join-timeout", "900", "--last-call-timeout", "30", "--close-timeout", "30", "--heartbeat-timeout", "5",
        "--read-timeout", "900", "--monitor-interval", "5", "--start-method", "spawn", "--shutdown-timeout", "30",
        "--", "python", "train.py",
    ]  # fmt: skip
    downward = [
        ("ELASTIC_LAUNCH_POD_IP", "status.podIP"),
        ("ELASTIC_LAUNCH_POD_NAME", "metadata.name"),
        ("ELASTIC_LAUNCH_NAMESPACE", "metadata.namespace"),
        ("ELASTIC_LAUNCH_JOB_NAME", "metadata.labels['training.kubeflow.org/job-name']"),
    ]
    assert doc == {
        "template": {
            "metadata": {"runtime": {"version": __version__, "flavor": "elastic-compile"}, "retries": {}},
            "id": {"resourceType": "TASK", "project": "proj", "domain": "dev", "name": "train", "version": "v1"},
            "type": "pytorch",
            "interface": {"inputs": {}, "outputs": {}},
            "custom": {
                "workerReplicas": {"replicas": 2.0},
                "runPolicy": {"cleanPodPolicy": "CLEANPOD_POLICY_RUNNING"},
                "elasticConfig": {
                    "rdzvBackend": "c10d",
                    "minReplicas": 2.0,
                    "maxReplicas": 2.0,
                    "nprocPerNode": 1.0,
                    "maxRestarts": 3.0,
                },
            },
            "taskTypeVersion": 1,
            "config": {"primary_container_name": "pytorch"},
            "k8sPod": {
                "metadata": {"annotations": {"sidecar.istio.io/inject": "false"}},
                "podSpec": {
                    "containers": [
                        {
                            "name": "pytorch",
                            "image": IMAGE,
                            "command": ["elastic-launch"],
                            "args": launch_args,
                            "env": [{"name": n, "valueFrom": {"fieldRef": {"fieldPath": p}}} for n, p in downward],
                            "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
                        }
                    ],
                    "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}],
                    "terminationGracePeriodSeconds": 45.0,
                },
            },
        }
    }


def test_the_template_only_prints_the_task(case: str, doc: dict[str, Any]) -> None:
    """Every value comes from targets/flyte/task.py; the Jinja template adds and decides nothing."""
    compiled = compile_text(spec_text(**CASES[case]), "elastic.yaml", ["flyte"])
    assert canonical(spec_to_flyte(compiled.spec).document()) == canonical(doc)


def test_flytekit_models_load_it(doc: dict[str, Any]) -> None:
    """What docs/flyte.md's registration snippet does before calling FlyteAdmin."""
    from flytekit.models.task import TaskSpec as TaskSpecModel

    model = TaskSpecModel.from_flyte_idl(ParseDict(doc, TaskSpec()))
    assert model.template.id.name == doc["template"]["id"]["name"]
    assert model.template.k8s_pod.pod_spec == doc["template"]["k8sPod"]["podSpec"]
