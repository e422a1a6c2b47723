"""``flyte.TaskEnvironment(**environment_kwargs("elastic.yaml"))``, serialized by flyte-sdk itself.

Every case is built with the real flyte 2.12.1 and flyteplugins-pytorch 2.12.1 and
serialized offline with ``flyte.extras.serialize``, then compared with our Flyte 1 task
(``-t flyte``) for the same spec:

* equal: task type and version, ``custom`` (exactly, doubles included; Flyte 2 also
  writes one for a single node, where Flyte 1 has none), ``config``, the pod's metadata,
  sidecars, volumes, node selector and every other pod field;
* different, and only this (``as_flyte2`` below spells it out): the training container's
  command and args (flyte's ``a0`` runtime instead of elastic-launch), elastic-launch's
  downward-API variables (nothing reads them), the two variables elastic-launch would set
  for itself, and /dev/shm, which Flyte 2 asks the backend for through
  ``extendedResources.sharedMemory`` instead of a volume in the pod.

Every environment is built once, in the module-scoped ``built`` fixture (flyteplugins'
import brings torch).
"""

from __future__ import annotations

import copy
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from flyte_helpers import IMAGE, canonical, compile_flyte, spec_text

from elastic_compile import contract

ROOT = Path(__file__).resolve().parents[2]
FUNCTION = "trainer.main:train"
SIDECAR = {"name": "logger", "image": "busybox:1.36", "args": ["tail", "-f", "/dev/null"]}
SECRET = {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "hub", "key": "token"}}}
SHM = {"mountName": "flyte-shm", "mountPath": "/dev/shm"}

CASES: dict[str, dict[str, Any]] = {
    "range-gpus-run-policy": {
        "nnodes": "1:4",
        "resources": {"requests": {"cpu": 8, "memory": "32Gi", "gpu": 2}, "limits": {"cpu": 16, "memory": "32Gi"}},
        "shared_memory": "16Gi",
        "run_policy": {
            "clean_pod_policy": "All",
            "ttl_seconds_after_finished": 600,
            "active_deadline_seconds": 7200,
            "backoff_limit": 2,
        },
        "monitor_interval": 2.5,
    },
    "sidecar-secret-env-and-pod-settings": {
        "nnodes": 2,
        "env": [{"name": "NCCL_DEBUG", "value": "WARN"}, SECRET, {"name": "HUB_URL", "value": "https://$(TOKEN)@hub"}],
        "pod_template": {
            "metadata": {"labels": {"team": "ml"}, "annotations": {"example.com/owner": "ml"}},
            "spec": {
                "containers": [
                    {"name": "pytorch", "env": [{"name": "FROM_TEMPLATE", "value": "yes"}]},
                    {**SIDECAR, "ports": [{"containerPort": 8080}]},
                ],
                "securityContext": {"runAsUser": 1000},
                "nodeSelector": {"nvidia.com/gpu.product": "H100"},
                "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
            },
        },
    },
    "shm-off": {"nnodes": 2, "shared_memory": False},
    "own-shm-mount": {
        "nnodes": 2,
        "pod_template": {
            "spec": {
                "containers": [{"name": "pytorch", "volumeMounts": [{"name": "mine", "mountPath": "/dev/shm"}]}],
                "volumes": [{"name": "mine", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}}],
            }
        },
    },
    "single-node": {"nproc_per_node": 4},
    "disk-and-extended-resources": {
        "nnodes": 2,
        "resources": {
            "requests": {"cpu": "500m", "ephemeral-storage": "10Gi", "example.com/fpga": 1},
            "limits": {"ephemeral-storage": "20Gi", "memory": "8Gi"},
        },
    },
    "rdzv-port-conf-and-timeouts": {
        "nnodes": "2:3",
        "max_restarts": 0,
        "rdzv": {"port": 29400, "conf": {"keep_alive_interval": "10"}, "join_timeout": "20m", "read_timeout": 1200},
        "shutdown_timeout": 60,
    },
    "gpu-written-out-and-user-launcher-env": {
        "nnodes": 2,
        "resources": {"requests": {"nvidia.com/gpu": 1}},
        "env": {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "0", "OMP_NUM_THREADS": "4"},
    },
    "accelerator": {"nnodes": 2, "resources": {"requests": {"gpu": 8}}, "accelerator": "nvidia-h100"},
    "accelerator-partition": {
        "nnodes": "1:3",
        "resources": {"requests": {"gpu": 1}},
        "accelerator": {"device": "nvidia-tesla-a100", "partition": "1g.5gb"},
        # For the Kubernetes targets: Flyte selects the nodes itself, from gpuAccelerator.
        "accelerator_label": "cloud.google.com/gke-accelerator",
        "accelerator_tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    },
}

DOWNWARD = {name for name, _ in contract.DOWNWARD_ENV}


def train(epochs: int = 1) -> float | None:
    """The task body; never run here. Optional: pods without rank 0 return None (flyte-sdk#1398)."""
    return None


@dataclass
class Built:
    kwargs: dict[str, Any]
    env: Any
    flyte1: dict[str, Any]  # -t flyte's admin.TaskSpec
    flyte2: dict[str, Any]  # MessageToDict(flyte.extras.serialize(task))


def _text(fields: dict[str, Any]) -> str:
    return spec_text(command=None, function=FUNCTION, **fields)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Built]:
    import flyte
    from flyte.extras import serialize
    from flyte.models import SerializationContext
    from google.protobuf.json_format import MessageToDict

    from elastic_compile.flyte2 import environment_kwargs

    ctx = SerializationContext(version="v1", project="proj", domain="dev", root_dir=ROOT)
    out: dict[str, Built] = {}
    for name, fields in CASES.items():
        path = tmp_path_factory.mktemp(name) / "elastic.yaml"
        path.write_text(_text(fields))
        kwargs = environment_kwargs(path)
        env = flyte.TaskEnvironment(**kwargs)
        task = env.task(train)
        out[name] = Built(kwargs, env, compile_flyte(path.read_text()), MessageToDict(serialize(task, ctx)))
    return out


def _containers(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Containers by name, native sidecars (initContainers) included."""
    return {c["name"]: c for c in [*pod["containers"], *pod.get("initContainers", [])]}


def launcher_env(shutdown_timeout: int = 30) -> list[dict[str, str]]:
    return [
        {"name": "TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "value": "1"},
        {"name": "TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "value": str(shutdown_timeout)},
    ]


def as_flyte2(flyte1_pod: dict[str, Any], args: list[str], fields: dict[str, Any]) -> dict[str, Any]:
    """Our Flyte 1 pod with exactly the documented Flyte 2 differences applied."""
    pod = copy.deepcopy(flyte1_pod)
    primary = _containers(pod)["pytorch"]
    primary["command"], primary["args"] = [], args
    user_env = set(fields["env"]) if isinstance(fields.get("env"), dict) else set()
    env = [e for e in primary.pop("env") if e["name"] not in DOWNWARD]
    env += [e for e in launcher_env(fields.get("shutdown_timeout", 30)) if e["name"] not in user_env]
    primary["env"] = env
    mounts = [m for m in primary.pop("volumeMounts", []) if m["name"] != "dshm"]
    if mounts:
        primary["volumeMounts"] = mounts
    volumes = [v for v in pod.pop("volumes", []) if v["name"] != "dshm"]
    if volumes:
        pod["volumes"] = volumes
    return pod


def _without_empty_sides(pod: dict[str, Any]) -> dict[str, Any]:
    """flyte writes ``limits: {}`` when it merges requests only: to Kubernetes the same as no limits."""
    pod = copy.deepcopy(pod)
    for container in pod["containers"]:
        res = container.get("resources")
        if res is not None:
            container["resources"] = {side: v for side, v in res.items() if v}
    return pod


@pytest.mark.parametrize("name", sorted(CASES))
def test_serialized_like_our_flyte1_task(built: dict[str, Built], name: str) -> None:
    ours, theirs = built[name].flyte1["template"], built[name].flyte2["taskTemplate"]
    for key in ("type", "taskTypeVersion", "config"):
        assert theirs[key] == ours[key], key
    if "custom" in ours:
        assert canonical(theirs["custom"]) == canonical(ours["custom"])
    assert theirs["k8sPod"]["metadata"] == ours["k8sPod"]["metadata"]
    their_pod = theirs["k8sPod"]["podSpec"]
    args = _containers(their_pod)["pytorch"]["args"]
    assert args[0] == "a0" and args[-4:] == ["mod", "tests.flyte.test_flyte2_environment", "instance", "train"]
    expected = as_flyte2(ours["k8sPod"]["podSpec"], args, CASES[name])
    assert canonical(_without_empty_sides(their_pod)) == canonical(expected)
    assert theirs["id"]["name"] == "train.train"  # <environment>.<function>


def test_one_node_is_a_plain_pod_with_a_custom_flyte1_leaves_out(built: dict[str, Built]) -> None:
    """Flyte 2 writes ``custom`` even for the int 1 (python-task); the pod plugin never reads it."""
    ours, theirs = built["single-node"].flyte1["template"], built["single-node"].flyte2["taskTemplate"]
    assert (ours["type"], theirs["type"]) == ("python-task", "python-task")
    assert "custom" not in ours
    assert theirs["custom"] == {
        "elasticConfig": {"rdzvBackend": "c10d", "minReplicas": 1.0, "maxReplicas": 1.0, "nprocPerNode": 4.0,
                          "maxRestarts": 3.0},
        "runPolicy": {"cleanPodPolicy": "CLEANPOD_POLICY_RUNNING"},
        "workerReplicas": {"replicas": 1.0},
    }  # fmt: skip


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("range-gpus-run-policy", {"sharedMemory": {**SHM, "sizeLimit": "16Gi"}}),
        ("sidecar-secret-env-and-pod-settings", {"sharedMemory": SHM}),  # shared_memory: true is "auto"
        ("shm-off", None),
        ("own-shm-mount", None),  # the user's /dev/shm stays, the backend adds none
    ],
)
def test_shared_memory_goes_to_the_backend(built: dict[str, Built], name: str, expected: Any) -> None:
    theirs = built[name].flyte2["taskTemplate"]
    assert theirs.get("extendedResources") == expected
    # Whatever the case, the backend's /dev/shm never meets a second one in the pod.
    pod = theirs["k8sPod"]["podSpec"]
    mounts = [m["mountPath"] for c in pod["containers"] for m in c.get("volumeMounts", [])]
    assert mounts.count("/dev/shm") == (1 if name == "own-shm-mount" else 0)
    assert "flyte-shm" not in {v["name"] for v in pod.get("volumes", [])}


@pytest.mark.parametrize(
    ("name", "device"),
    [
        ("accelerator", {"device": "nvidia-h100"}),
        ("accelerator-partition", {"device": "nvidia-tesla-a100", "partitionSize": "1g.5gb"}),
        ("range-gpus-run-policy", None),  # a GPU count alone asks for no device type
    ],
)
def test_the_device_type_is_flytekits(built: dict[str, Built], name: str, device: Any) -> None:
    """flyte serializes the Device as flytekit serializes its constant: one gpuAccelerator for both generations.

    The device is passed verbatim (flyte.Device): flyte's own short names map H100 to nvidia-tesla-h100, where
    flytekit's H100 is nvidia-h100, and a Flyte 2 task would then select other nodes than the Flyte 1 task.
    """
    import flyte

    theirs = built[name].flyte2["taskTemplate"]
    assert (theirs.get("extendedResources") or {}).get("gpuAccelerator") == device
    assert (built[name].flyte1["template"].get("extendedResources") or {}).get("gpuAccelerator") == device
    if device is not None:
        gpus = 8 if name == "accelerator" else 1
        assert built[name].kwargs["resources"].gpu == flyte.Device(
            quantity=gpus, device_class="GPU", device=device["device"], partition=device.get("partitionSize")
        )
        primary = _containers(theirs["k8sPod"]["podSpec"])["pytorch"]
        assert primary["resources"] == {"requests": {"gpu": str(gpus)}, "limits": {"gpu": str(gpus)}}
        # Neither our nodeSelector nor the platform's tolerations: the backend adds its own from gpuAccelerator.
        assert "nodeSelector" not in theirs["k8sPod"]["podSpec"] and "tolerations" not in theirs["k8sPod"]["podSpec"]
    assert built["accelerator-partition"].env.plugin_config.nproc_per_node == 1  # one process on a MIG slice


def test_sidecars_node_selector_and_env_order(built: dict[str, Built]) -> None:
    pod = built["sidecar-secret-env-and-pod-settings"].flyte2["taskTemplate"]["k8sPod"]["podSpec"]
    # The sidecar is a native sidecar, or the pod could never finish.
    assert [c["name"] for c in pod["containers"]] == ["pytorch"]
    assert [c["name"] for c in pod["initContainers"]] == ["logger"]
    assert _containers(pod)["logger"] == {**SIDECAR, "ports": [{"containerPort": 8080.0}], "restartPolicy": "Always"}
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "H100"}
    assert pod["tolerations"] == [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]
    # env_vars (plain values up to the first valueFrom) come first, then the rest in the
    # order written, so $(TOKEN) still follows TOKEN.
    assert [e["name"] for e in _containers(pod)["pytorch"]["env"]] == [
        "NCCL_DEBUG", "TOKEN", "HUB_URL", "FROM_TEMPLATE", *(e["name"] for e in launcher_env())
    ]  # fmt: skip
    assert built["sidecar-secret-env-and-pod-settings"].kwargs["env_vars"] == {"NCCL_DEBUG": "WARN"}
    assert built["gpu-written-out-and-user-launcher-env"].kwargs["env_vars"] == {
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "0",
        "OMP_NUM_THREADS": "4",
    }


def test_resources_flyte_can_say_go_to_flyte_resources(built: dict[str, Built]) -> None:
    import flyte

    gpus = built["range-gpus-run-policy"]
    assert gpus.kwargs["resources"] == flyte.Resources(cpu=("8", "16"), memory=("32Gi", "32Gi"), gpu=2, shm="16Gi")
    # Resources has GPU requests only; the limit Kubernetes needs stays on the template.
    assert gpus.kwargs["pod_template"].pod_spec.containers[0].resources.limits == {"gpu": "2"}
    disk = built["disk-and-extended-resources"]
    assert disk.kwargs["resources"] == flyte.Resources(cpu="500m", disk="10Gi", shm="auto")
    template = disk.kwargs["pod_template"].pod_spec.containers[0].resources
    assert (template.requests, template.limits) == (
        {"example.com/fpga": "1"},
        {"ephemeral-storage": "20Gi", "memory": "8Gi", "example.com/fpga": "1"},
    )
    written_out = built["gpu-written-out-and-user-launcher-env"]
    assert written_out.kwargs["resources"] == flyte.Resources(shm="auto")
    assert written_out.flyte2["taskTemplate"]["k8sPod"]["podSpec"]["containers"][0]["resources"] == {
        "requests": {"nvidia.com/gpu": "1"},
        "limits": {"nvidia.com/gpu": "1"},
    }


def test_elastic_settings_are_explicit(built: dict[str, Built]) -> None:
    from flyteplugins.pytorch import Elastic
    from flyteplugins.pytorch.task import RunPolicy

    timeouts = {"last_call_timeout": 30, "close_timeout": 30, "heartbeat_timeout": 5}
    config = built["range-gpus-run-policy"].env.plugin_config
    assert config == Elastic(
        nnodes="1:4",
        nproc_per_node=2,
        rdzv_backend="c10d",
        max_restarts=3,  # ours; flyte-sdk's default is also 3, flytekit's 0
        monitor_interval=2.5,  # flyte-sdk's default is 3
        rdzv_configs={"timeout": 900, "join_timeout": 900, **timeouts, "read_timeout": 900},
        run_policy=RunPolicy(
            clean_pod_policy="all", ttl_seconds_after_finished=600, active_deadline_seconds=7200, backoff_limit=2
        ),
    )
    rdzv = built["rdzv-port-conf-and-timeouts"].env.plugin_config
    assert (rdzv.nnodes, rdzv.max_restarts, rdzv.monitor_interval) == ("2:3", 0, 5)
    assert rdzv.rdzv_configs == {
        "timeout": 1200, "join_timeout": 1200, **timeouts, "read_timeout": 1200, "keep_alive_interval": "10"
    }  # fmt: skip
    assert rdzv.run_policy == RunPolicy(clean_pod_policy="Running")
    # The int 1 is a plain pod and the int 2 a fixed PyTorchJob: the type Flyte 1 gives them.
    assert built["single-node"].env.plugin_config.nnodes == 1
    assert built["shm-off"].env.plugin_config.nnodes == 2


def test_shutdown_timeout_and_rdzv_port_reach_the_pod(built: dict[str, Built]) -> None:
    pod = built["rdzv-port-conf-and-timeouts"].flyte2["taskTemplate"]["k8sPod"]["podSpec"]
    primary = _containers(pod)["pytorch"]
    assert {"name": "TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "value": "60"} in primary["env"]
    assert primary["ports"] == [{"name": "pytorchjob-port", "containerPort": 29400.0, "protocol": "TCP"}]
    assert pod["terminationGracePeriodSeconds"] == 75.0


def test_the_image_is_the_environments(built: dict[str, Built]) -> None:
    for case in built.values():
        assert case.kwargs["image"] == IMAGE
        assert _containers(case.flyte2["taskTemplate"]["k8sPod"]["podSpec"])["pytorch"]["image"] == IMAGE


def test_kwargs_are_reusable(built: dict[str, Built]) -> None:
    """flyte deep-copies the template: the same kwargs build a second environment that serializes the same."""
    import flyte
    from flyte.extras import serialize
    from flyte.models import SerializationContext
    from google.protobuf.json_format import MessageToDict

    case = built["sidecar-secret-env-and-pod-settings"]
    again = flyte.TaskEnvironment(**case.kwargs).task(train)
    ctx = SerializationContext(version="v1", project="proj", domain="dev", root_dir=ROOT)
    assert canonical(MessageToDict(serialize(again, ctx))["taskTemplate"]["k8sPod"]) == canonical(
        case.flyte2["taskTemplate"]["k8sPod"]
    )


def test_the_example_module_defines_and_serializes(monkeypatch: pytest.MonkeyPatch) -> None:
    """examples/flyte2/train.py, the module docs/flyte2.md shows, as flyte loads it."""
    import importlib.util

    from flyte.extras import serialize
    from flyte.models import SerializationContext
    from google.protobuf.json_format import MessageToDict

    folder = ROOT / "examples" / "flyte2"
    loader = importlib.util.spec_from_file_location("train", folder / "train.py")
    assert loader is not None and loader.loader is not None
    module = importlib.util.module_from_spec(loader)
    monkeypatch.setitem(sys.modules, "train", module)
    loader.loader.exec_module(module)
    assert module.env.include == ("elastic.yaml",)
    ctx = SerializationContext(version="v1", project="proj", domain="dev", root_dir=folder)
    theirs = MessageToDict(serialize(module.train, ctx))["taskTemplate"]
    text = (folder / "elastic.yaml").read_text() + "flyte: {project: proj, domain: dev, version: v1}\n"
    ours = compile_flyte(text)["template"]
    assert theirs["type"] == ours["type"] == "pytorch"
    assert canonical(theirs["custom"]) == canonical(ours["custom"])
    assert theirs["extendedResources"] == {"sharedMemory": {**SHM, "sizeLimit": "16Gi"}}
    assert [c["name"] for c in theirs["k8sPod"]["podSpec"]["containers"]] == ["pytorch"]
    assert [c["name"] for c in theirs["k8sPod"]["podSpec"]["initContainers"]] == ["log-shipper"]
    assert theirs["k8sPod"]["podSpec"]["containers"][0]["args"][-4:] == ["mod", "train", "instance", "train"]
