"""Parity with the peer: ``-t flyte`` against the task flytekit itself serializes for the same job.

For each configuration the flytekit task is written the way a flytekit user would write
it (``Elastic`` + ``PodTemplate`` + ``Resources`` + ``container_image``) and serialized by
flytekit's translator, as ``pyflyte register`` does. Equal: ``custom`` (exactly, floats
and all), task type, config, resources, image, and the /dev/shm meaning. Different on
purpose, asserted here and explained in docs/flyte.md: the container's command (we run
elastic-launch, flytekit runs pyflyte-execute), /dev/shm on the training container only,
the user's template left untouched, nproc from GPUs, our defaults.

Defining an Elastic task imports torch (about 2 s), so every flytekit task is defined
once, in the module-scoped ``peers`` fixture.
"""

from __future__ import annotations

import copy
import warnings
from dataclasses import dataclass, field
from typing import Any

import pytest
from flyte_helpers import IMAGE, canonical, compile_flyte, containers, primary, shm_mounts, spec_text

from elastic_compile.compiler.pipeline import compile_text

SIDECAR = {"name": "logger", "image": "busybox", "args": ["tail", "-f", "/dev/null"]}


def train() -> None:
    """The task body; never run here."""


@dataclass
class Case:
    """One job, written as elastic.yaml fields and as flytekit arguments."""

    spec: dict[str, Any]
    elastic: dict[str, Any]
    task: dict[str, Any] = field(default_factory=dict)


def _cases() -> dict[str, Case]:
    from flytekit import PodTemplate, Resources
    from flytekitplugins.kfpytorch import CleanPodPolicy, RunPolicy
    from kubernetes.client import V1Container, V1PodSpec

    # Our defaults written out for flytekit, so that `custom` can be compared exactly;
    # test_flytekit_defaults_differ_as_documented compares against flytekit's own defaults.
    ours = {"max_restarts": 3, "run_policy": RunPolicy(clean_pod_policy=CleanPodPolicy.RUNNING)}
    return {
        "fixed": Case({"nnodes": 2, "nproc_per_node": 4}, {**ours, "nnodes": 2, "nproc_per_node": 4}),
        "range": Case({"nnodes": "1:4"}, {**ours, "nnodes": "1:4"}),
        "max-restarts": Case({"nnodes": 2, "max_restarts": 0}, {**ours, "nnodes": 2, "max_restarts": 0}),
        "run-policy": Case(
            {
                "nnodes": 3,
                "run_policy": {
                    "clean_pod_policy": "All",
                    "ttl_seconds_after_finished": 600,
                    "active_deadline_seconds": 7200,
                    "backoff_limit": 2,
                },
            },
            {
                **ours,
                "nnodes": 3,
                "run_policy": RunPolicy(
                    clean_pod_policy=CleanPodPolicy.ALL,
                    ttl_seconds_after_finished=600,
                    active_deadline_seconds=7200,
                    backoff_limit=2,
                ),
            },
        ),
        "clean-pod-policy-none": Case(
            {"nnodes": 2, "run_policy": {"clean_pod_policy": "None"}},
            {**ours, "nnodes": 2, "run_policy": RunPolicy(clean_pod_policy=CleanPodPolicy.NONE)},
        ),
        "gpus": Case(
            {
                "nnodes": 2,
                "resources": {"requests": {"cpu": 8, "memory": "32Gi", "gpu": 2}, "limits": {"memory": "32Gi"}},
            },
            # nproc 2: we default it from the GPUs; flytekit users have to write it.
            {**ours, "nnodes": 2, "nproc_per_node": 2},
            {"requests": Resources(cpu="8", mem="32Gi", gpu="2"), "limits": Resources(mem="32Gi", gpu="2")},
        ),
        "sidecar": Case(
            {"nnodes": 2, "pod_template": {"spec": {"containers": [SIDECAR], "nodeSelector": {"pool": "a100"}}}},
            {**ours, "nnodes": 2},
            {
                "pod_template": PodTemplate(
                    pod_spec=V1PodSpec(
                        containers=[V1Container(name="logger", image="busybox", args=["tail", "-f", "/dev/null"])],
                        node_selector={"pool": "a100"},
                    ),
                    primary_container_name="pytorch",
                )
            },
        ),
        "shm-off": Case({"nnodes": 2, "shared_memory": False}, {**ours, "nnodes": 2, "increase_shared_mem": False}),
        "shm-sized": Case({"nnodes": 2, "shared_memory": "16Gi"}, {**ours, "nnodes": 2}),
        "single-node": Case({"nproc_per_node": 2}, {**ours, "nnodes": 1, "nproc_per_node": 2}),
    }


@dataclass
class Peer:
    """A case compiled by us and serialized by flytekit."""

    case: Case
    ours: dict[str, Any]
    theirs: dict[str, Any]
    warnings: list[str]
    template_before: Any = None


@pytest.fixture(scope="module")
def peers(serialize: Any) -> dict[str, Peer]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's import-time warnings (no numpy) are not flytekit's
        import torch.distributed.run  # noqa: F401
    from flytekit import task
    from flytekitplugins.kfpytorch import Elastic

    out: dict[str, Peer] = {}
    for name, case in _cases().items():
        before = copy.deepcopy(case.task.get("pod_template"))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            flytekit_task = task(task_config=Elastic(**case.elastic), container_image=IMAGE, **case.task)(train)
        out[name] = Peer(
            case,
            compile_flyte(spec_text(**case.spec)),
            serialize(flytekit_task),
            [str(w.message) for w in caught],
            before,
        )
    return out


CASES = [
    "fixed",
    "range",
    "max-restarts",
    "run-policy",
    "clean-pod-policy-none",
    "gpus",
    "sidecar",
    "shm-off",
    "shm-sized",
    "single-node",
]


@pytest.mark.parametrize("name", CASES)
def test_custom_and_task_type_are_flytekits_exactly(peers: dict[str, Peer], name: str) -> None:
    ours, theirs = peers[name].ours["template"], peers[name].theirs["template"]
    assert canonical(ours.get("custom")) == canonical(theirs.get("custom"))
    assert (ours["type"], ours["taskTypeVersion"]) == (theirs["type"], theirs["taskTypeVersion"])


@pytest.mark.parametrize("name", [n for n in CASES if n != "shm-off"])
def test_resources_and_image_are_flytekits(peers: dict[str, Peer], name: str) -> None:
    ours, theirs = peers[name].ours, peers[name].theirs
    assert primary(ours).get("resources") == primary(theirs).get("resources")
    assert primary(ours)["image"] == primary(theirs)["image"] == IMAGE


@pytest.mark.parametrize("name", [n for n in CASES if n != "shm-off"])
def test_the_primary_container_already_has_the_backends_name(peers: dict[str, Peer], name: str) -> None:
    """flytekit's default is "primary", which the backend renames to pytorch for a PyTorchJob (flyteplugins
    kfoperators/pytorch/pytorch.go)."""
    ours, theirs = peers[name].ours, peers[name].theirs
    assert ours["template"]["config"] == {"primary_container_name": "pytorch"}
    expected = "pytorch" if "pod_template" in peers[name].case.task else "primary"
    assert theirs["template"]["config"] == {"primary_container_name": expected}


def test_gpu_resources_keep_flytes_name(peers: dict[str, Peer]) -> None:
    """``gpu``, not nvidia.com/gpu: the backend maps it to its configured GPU resource."""
    assert primary(peers["gpus"].ours)["resources"] == {
        "requests": {"cpu": "8", "memory": "32Gi", "gpu": "2"},
        "limits": {"memory": "32Gi", "gpu": "2"},
    }


@pytest.mark.parametrize("name", ["fixed", "range", "gpus", "single-node", "run-policy"])
def test_shared_memory_means_the_same(peers: dict[str, Peer], name: str) -> None:
    """A memory-backed emptyDir at /dev/shm of the training container; only the volume's name differs."""
    ours, theirs = peers[name].ours, peers[name].theirs
    assert shm_mounts(ours) == [primary(ours)["name"]] == ["pytorch"]
    assert shm_mounts(theirs) == [primary(theirs)["name"]]
    [our_volume] = ours["template"]["k8sPod"]["podSpec"]["volumes"]
    [their_volume] = theirs["template"]["k8sPod"]["podSpec"]["volumes"]
    assert our_volume["emptyDir"] == their_volume["emptyDir"] == {"medium": "Memory"}


def test_sidecar_gets_no_shm_and_the_template_is_not_mutated(peers: dict[str, Peer]) -> None:
    peer = peers["sidecar"]
    # flytekit mounts /dev/shm on containers[0], the sidecar, and not on the training container.
    assert shm_mounts(peer.theirs) == ["logger"]
    assert shm_mounts(peer.ours) == ["pytorch"]
    assert list(containers(peer.ours)) == ["pytorch"]
    # flytekit keeps the sidecar a regular container, so the pod never finishes; ours is a
    # native sidecar (an init container that restarts), copied otherwise as written.
    [native] = peer.ours["template"]["k8sPod"]["podSpec"]["initContainers"]
    assert native == {**SIDECAR, "restartPolicy": "Always"}
    assert peer.ours["template"]["k8sPod"]["podSpec"]["nodeSelector"] == {"pool": "a100"}
    # flytekit appended its volume and mount to the caller's PodTemplate; we copy ours.
    their_template = peer.case.task["pod_template"]
    assert their_template != peer.template_before
    assert [v.name for v in their_template.pod_spec.volumes] == ["shm"]
    text = spec_text(**peer.case.spec)
    compiled = compile_text(text, "elastic.yaml", ["flyte", "pytorchjob"])
    assert compiled.spec.pod_template.spec == {"containers": [SIDECAR], "nodeSelector": {"pool": "a100"}}


def test_shared_memory_off_and_sized(peers: dict[str, Peer]) -> None:
    off = peers["shm-off"]
    assert shm_mounts(off.ours) == []
    assert "volumes" not in off.ours["template"]["k8sPod"]["podSpec"]
    # flytekit without its template writes a plain container; we keep k8sPod, one pod shape for all specs.
    assert "container" in off.theirs["template"] and "k8sPod" not in off.theirs["template"]
    sized = peers["shm-sized"]
    [volume] = sized.ours["template"]["k8sPod"]["podSpec"]["volumes"]
    assert volume["emptyDir"] == {"medium": "Memory", "sizeLimit": "16Gi"}  # flytekit's has no size


@pytest.mark.parametrize("name", CASES)
def test_the_container_runs_elastic_launch_with_explicit_timeouts(peers: dict[str, Peer], name: str) -> None:
    ours = primary(peers[name].ours)
    theirs = peers[name].theirs["template"].get("container") or primary(peers[name].theirs)
    assert ours["command"] == ["elastic-launch"]
    assert theirs.get("command", []) == [] and theirs["args"][0] == "pyflyte-execute"
    args = ours["args"]
    timeouts = {args[i]: args[i + 1] for i in range(len(args) - 1) if args[i].endswith("-timeout")}
    # flytekit never serializes rdzv_configs; ours are in the pod: read_timeout 900, not torch's 60.
    assert timeouts["--join-timeout"] == timeouts["--read-timeout"] == "900"
    assert args[args.index("--") + 1 :] == ["python", "train.py"]


def test_flytekit_defaults_differ_as_documented(serialize: Any) -> None:
    """The same short spec against flytekit's defaults: each difference is a row of docs/flyte.md."""
    from flytekit import Resources, task
    from flytekitplugins.kfpytorch import Elastic

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        theirs = serialize(
            task(task_config=Elastic(nnodes=2), requests=Resources(gpu="4"), limits=Resources(gpu="4"))(train)
        )
    ours = compile_flyte(spec_text(nnodes=2, resources={"requests": {"gpu": 4}}))
    assert theirs["template"]["custom"]["elasticConfig"] == {
        "rdzvBackend": "c10d",
        "minReplicas": 2.0,
        "maxReplicas": 2.0,
        "nprocPerNode": 1.0,
    }
    assert "runPolicy" not in theirs["template"]["custom"]
    assert ours["template"]["custom"]["elasticConfig"]["nprocPerNode"] == 4.0  # one process per GPU
    assert ours["template"]["custom"]["elasticConfig"]["maxRestarts"] == 3.0
    assert ours["template"]["custom"]["runPolicy"] == {"cleanPodPolicy": "CLEANPOD_POLICY_RUNNING"}
    assert any("increase_shared_mem" in str(w.message) and "deprecated" in str(w.message) for w in caught)


def test_no_deprecation_warning_needed_for_our_shape(peers: dict[str, Peer]) -> None:
    """flytekit warns on every default task; only its default shm template triggers it."""
    assert any("deprecated" in w for w in peers["fixed"].warnings)
    assert not any("deprecated" in w for w in peers["shm-off"].warnings)
