"""``@task(**task_kwargs("elastic.yaml"))``: flytekit serializes the same task as ``-t flyte``.

Equal: ``custom`` (exactly), type, config, pod metadata and pod spec. Different, and only
this: the training container's command and args (flytekit runs pyflyte-execute), and two
environment variables for flytekit's launcher that elastic-launch sets for itself.

Every task is defined once, in the module-scoped ``tasks`` fixture (defining an Elastic
task imports torch).
"""

from __future__ import annotations

import copy
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from flyte_helpers import IMAGE, canonical, compile_flyte, primary, spec_text

from elastic_compile.core.errors import SpecError

SIDECAR = {"name": "logger", "image": "busybox", "args": ["tail", "-f", "/dev/null"]}
SECRET_ENV = [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "hub", "key": "token"}}}]
LAUNCHER_ENV = [
    {"name": "TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "value": "1"},
    {"name": "TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "value": "30"},
]

CASES: dict[str, dict[str, Any]] = {
    "range-gpus-run-policy": {
        "nnodes": "1:4",
        "resources": {"requests": {"cpu": 8, "memory": "32Gi", "gpu": 2}, "limits": {"memory": "32Gi"}},
        "run_policy": {"clean_pod_policy": "All", "ttl_seconds_after_finished": 600},
        "monitor_interval": 2.5,
    },
    "sidecar-and-pod-settings": {
        "nnodes": 2,
        "env": SECRET_ENV,
        "pod_template": {
            "metadata": {"labels": {"team": "ml"}},
            "spec": {
                "containers": [{**SIDECAR, "ports": [{"containerPort": 8080}]}],
                "securityContext": {"runAsUser": 1000},
                "nodeSelector": {"pool": "a100"},
                "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
            },
        },
    },
    "shm-off": {"nnodes": 2, "shared_memory": False},
    "shm-sized": {"nnodes": 2, "shared_memory": "16Gi", "shutdown_timeout": 60},
    "single-node": {"nproc_per_node": 2, "start_method": "fork"},
    "extended-resource": {"nnodes": 2, "resources": {"requests": {"cpu": 2, "example.com/fpga": 1}}},
    "rdzv-port-and-conf": {"nnodes": 2, "rdzv": {"port": 29400, "conf": {"keep_alive_interval": "10"}}},
    "user-sets-launcher-env": {"nnodes": 2, "env": {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "0"}},
    "accelerator": {"nnodes": 2, "resources": {"requests": {"gpu": 4}}, "accelerator": "nvidia-l4"},
    "accelerator-partition": {
        "nnodes": 2,
        "resources": {"requests": {"gpu": 1}},
        "accelerator": {"device": "nvidia-a100-80gb", "partition": "2g.20gb"},
        "accelerator_label": "k8s.amazonaws.com/accelerator",  # for the Kubernetes targets: Flyte ignores it
    },
}


def train() -> None:
    """The task body; never run here."""


@dataclass
class Built:
    kwargs: dict[str, Any]
    ours: dict[str, Any]
    theirs: dict[str, Any]
    warnings: list[str]


@pytest.fixture(scope="module")
def tasks(serialize: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Built]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's import-time warnings (no numpy) are not flytekit's
        import torch.distributed.run  # noqa: F401
    from flytekit import task

    from elastic_compile.flyte import task_kwargs

    out: dict[str, Built] = {}
    for name, fields in CASES.items():
        path = tmp_path_factory.mktemp(name) / "elastic.yaml"
        path.write_text(spec_text(**fields))
        kwargs = task_kwargs(path)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            defined = task(**kwargs)(train)
        theirs = serialize(defined)
        out[name] = Built(kwargs, compile_flyte(path.read_text()), theirs, [str(w.message) for w in caught])
    return out


@pytest.mark.parametrize("name", sorted(CASES))
def test_serialized_like_dash_t_flyte(tasks: dict[str, Built], name: str) -> None:
    ours, theirs = tasks[name].ours["template"], tasks[name].theirs["template"]
    assert canonical(theirs.get("custom")) == canonical(ours.get("custom"))
    for key in ("type", "taskTypeVersion", "config"):
        assert theirs[key] == ours[key], key
    assert canonical(theirs.get("extendedResources")) == canonical(ours.get("extendedResources"))
    assert theirs["k8sPod"]["metadata"] == ours["k8sPod"]["metadata"]
    our_pod, their_pod = copy.deepcopy(ours["k8sPod"]["podSpec"]), copy.deepcopy(theirs["k8sPod"]["podSpec"])
    our_primary = next(c for c in our_pod["containers"] if c["name"] == "pytorch")
    their_primary = next(c for c in their_pod["containers"] if c["name"] == "pytorch")
    assert our_primary.pop("command") == ["elastic-launch"] and their_primary.pop("command") == []
    assert their_primary.pop("args")[0] == "pyflyte-execute" and our_primary.pop("args")[-2] != "pyflyte-execute"
    our_env, their_env = our_primary.pop("env"), their_primary.pop("env")
    added = [e for e in their_env if e not in our_env]
    assert their_env == our_env + added
    assert {e["name"] for e in added} <= {e["name"] for e in LAUNCHER_ENV}
    assert canonical(their_pod) == canonical(our_pod)


def test_accelerator_is_flytekits_constant(tasks: dict[str, Built]) -> None:
    from flytekit.extras.accelerators import A100_80GB, L4

    assert tasks["accelerator"].kwargs["accelerator"] is L4
    assert tasks["accelerator"].theirs["template"]["extendedResources"] == {"gpuAccelerator": {"device": "nvidia-l4"}}
    partition = tasks["accelerator-partition"].kwargs["accelerator"].to_flyte_idl()
    assert partition == A100_80GB.partition_2g_20gb.to_flyte_idl()
    assert "accelerator" not in tasks["shm-off"].kwargs


def test_launcher_env_is_added_unless_the_spec_sets_it(tasks: dict[str, Built]) -> None:
    env = primary(tasks["shm-off"].theirs)["env"]
    assert env[-2:] == LAUNCHER_ENV
    assert primary(tasks["shm-sized"].theirs)["env"][-1] == {"name": "TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "value": "60"}
    user = primary(tasks["user-sets-launcher-env"].theirs)["env"]
    assert [e for e in user if e["name"] == "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == [
        {"name": "TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "value": "0"}
    ]


def test_elastic_config_spells_out_every_runtime_setting(tasks: dict[str, Built]) -> None:
    from flytekitplugins.kfpytorch import CleanPodPolicy

    config = tasks["range-gpus-run-policy"].kwargs["task_config"]
    assert (config.nnodes, config.nproc_per_node, config.start_method, config.monitor_interval) == (
        "1:4",
        2,
        "spawn",
        2.5,
    )
    assert config.max_restarts == 3
    assert config.increase_shared_mem is False
    assert config.rdzv_configs == {
        "timeout": 900,
        "join_timeout": 900,
        "last_call_timeout": 30,
        "close_timeout": 30,
        "heartbeat_timeout": 5,
        "read_timeout": 900,
    }
    assert config.run_policy.clean_pod_policy is CleanPodPolicy.ALL
    assert config.run_policy.ttl_seconds_after_finished == 600
    conf = tasks["rdzv-port-and-conf"].kwargs["task_config"].rdzv_configs
    assert conf["keep_alive_interval"] == "10"
    single = tasks["single-node"].kwargs["task_config"]
    assert (single.nnodes, single.start_method) == (1, "fork")  # the int 1: a plain pod task


def test_resources_go_to_flytekit_when_it_can_carry_them(tasks: dict[str, Built]) -> None:
    from flytekit import Resources

    kwargs = tasks["range-gpus-run-policy"].kwargs
    assert kwargs["requests"] == Resources(cpu="8", mem="32Gi", gpu="2")
    assert kwargs["limits"] == Resources(mem="32Gi", gpu="2")
    assert kwargs["container_image"] == IMAGE
    # example.com/fpga has no Resources field, and flytekit would replace the template's
    # resources with its own: they stay in the pod template only.
    extended = tasks["extended-resource"]
    assert "requests" not in extended.kwargs and "limits" not in extended.kwargs
    assert primary(extended.theirs)["resources"] == {
        "requests": {"cpu": "2", "example.com/fpga": "1"},
        "limits": {"example.com/fpga": "1"},
    }


def test_no_warning_and_the_kwargs_can_be_reused(tasks: dict[str, Built], serialize: Any) -> None:
    from flytekit import task

    for built in tasks.values():
        assert built.warnings == []
    # flytekit's default shm template mutates the PodTemplate, so a second task with the
    # same one fails ("A shared memory volume mount is already configured"); ours does not.
    kwargs = tasks["sidecar-and-pod-settings"].kwargs
    again = serialize(task(**kwargs)(train))
    assert canonical(again["template"]["k8sPod"]) == canonical(
        tasks["sidecar-and-pod-settings"].theirs["template"]["k8sPod"]
    )


def test_needs_no_flyte_section(write_spec: Any) -> None:
    from elastic_compile.flyte import task_kwargs

    assert task_kwargs(write_spec(flyte=None))["container_image"] == IMAGE


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"nproc_per_node": "auto"}, "nproc_per_node: flytekit's Elastic takes a number of processes; write the "
         "number, e.g. 8 (given: auto)"),
        ({"start_method": "forkserver"}, "start_method: flytekit's Elastic starts workers with spawn or fork only "
         "(given: forkserver)"),
        ({"rdzv": {"host": "etcd"}}, "rdzv.host: Flyte cannot set the rendezvous host: the PyTorchJob it creates "
         "points every pod at worker-0; remove it (given: etcd)"),
    ],
)  # fmt: skip
def test_settings_flytekit_cannot_carry_are_located_errors(
    write_spec: Any, fields: dict[str, Any], expected: str
) -> None:
    from elastic_compile.flyte import task_kwargs

    path = write_spec(**fields)
    with pytest.raises(SpecError) as e:
        task_kwargs(path)
    [problem] = e.value.problems
    assert str(problem).startswith(f"{path}:") and str(problem).endswith(expected)


def test_a_pod_field_the_kubernetes_client_drops_is_an_error(tmp_path: Path) -> None:
    from elastic_compile.targets.flyte.task import pod_spec_object

    with pytest.raises(SpecError, match=r"cannot represent futureField, so flytekit would drop it"):
        pod_spec_object({"containers": [{"name": "pytorch", "image": IMAGE}], "futureField": True}, None, "flytekit")
