"""``accelerator`` on Flyte 1: ``-t flyte`` against the task flytekit serializes with ``@task(accelerator=...)``.

flytekit writes the device type into the TaskTemplate's ``extendedResources.gpuAccelerator``
(``flytekit/extras/accelerators.py`` ``to_flyte_idl``), which Flyte's propeller turns into
node affinities on its own labels. For every GPU of the vocabulary and every partition
flytekit defines, written the way a flytekit user writes them (``T4``,
``A100.partition_1g_5gb``), ``-t flyte`` gives the same ``extendedResources`` bar for bar; for
whole elastic jobs, ``custom``, type, resources and the pod's node selection are equal too
(Flyte selects the nodes: no nodeSelector of ours in the Flyte pod, whatever
``accelerator_label`` says).
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from flyte_helpers import IMAGE, canonical, compile_flyte, primary, spec_text

from elastic_compile.core.accelerators import DEVICES
from elastic_compile.core.errors import SpecError

GPUS = [d for d in DEVICES.values() if not d.tpu]
#: (device, partition) for every GPU and every partition flytekit defines: 25 at flytekit 1.16.31.
ALL = [(d.name, None) for d in GPUS] + [(d.name, p) for d in GPUS for p in d.partitions]


def train() -> None:
    """The task body; never run here."""


def flytekit_accelerator(device: str, partition: str | None) -> Any:
    """The accelerator as a flytekit user writes it: the module's constant, or its partition attribute."""
    from flytekit.extras import accelerators

    constant = getattr(accelerators, DEVICES[device].constant)
    return constant if partition is None else getattr(constant, "partition_" + partition.replace(".", "_"))


def _fields(device: str, partition: str | None, gpus: int = 1, **more: Any) -> dict[str, Any]:
    accelerator: Any = device if partition is None else {"device": device, "partition": partition}
    return {"resources": {"requests": {"gpu": gpus}}, "accelerator": accelerator, **more}


def test_every_device_and_partition_is_serialized_as_flytekit_does(serialize: Any) -> None:
    from flytekit import Resources, task

    assert len(ALL) == 25
    for device, partition in ALL:
        theirs = serialize(
            task(
                accelerator=flytekit_accelerator(device, partition),
                requests=Resources(gpu="1"),
                limits=Resources(gpu="1"),
                container_image=IMAGE,
            )(train)
        )["template"]["extendedResources"]
        ours = compile_flyte(spec_text(**_fields(device, partition)))["template"]["extendedResources"]
        assert canonical(ours) == canonical(theirs), (device, partition)
        assert ours["gpuAccelerator"]["device"] == device


CASES = {
    "t4-fixed": (("nvidia-tesla-t4", None), {"nnodes": 2}, {"nnodes": 2, "nproc_per_node": 4}, 4),
    "h100-range": (("nvidia-h100", None), {"nnodes": "1:4"}, {"nnodes": "1:4", "nproc_per_node": 8}, 8),
    "a100-whole": (("nvidia-tesla-a100", None), {"nnodes": 2}, {"nnodes": 2, "nproc_per_node": 8}, 8),
    "a100-slice": (("nvidia-tesla-a100", "1g.5gb"), {"nnodes": 3}, {"nnodes": 3, "nproc_per_node": 1}, 1),
    "a100-80gb-slice": (("nvidia-a100-80gb", "3g.40gb"), {"nnodes": 2}, {"nnodes": 2, "nproc_per_node": 1}, 1),
}


@pytest.fixture(scope="module")
def peers(serialize: Any) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """Each case as -t flyte (with a platform label that Flyte must ignore) and as flytekit's Elastic task."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's import-time warnings (no numpy) are not flytekit's
        import torch.distributed.run  # noqa: F401
    from flytekit import Resources, task
    from flytekitplugins.kfpytorch import CleanPodPolicy, Elastic, RunPolicy

    ours_defaults = {"max_restarts": 3, "run_policy": RunPolicy(clean_pod_policy=CleanPodPolicy.RUNNING)}
    out = {}
    for name, ((device, partition), spec, elastic, gpus) in CASES.items():
        fields = _fields(device, partition, gpus, **spec, accelerator_label="cloud.google.com/gke-accelerator")
        ours = compile_flyte(spec_text(**fields))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            theirs = serialize(
                task(
                    task_config=Elastic(**ours_defaults, **elastic, increase_shared_mem=False),
                    accelerator=flytekit_accelerator(device, partition),
                    requests=Resources(gpu=str(gpus)),
                    limits=Resources(gpu=str(gpus)),
                    container_image=IMAGE,
                )(train)
            )
        out[name] = (ours, theirs)
    return out


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_elastic_job_is_flytekits(peers: dict[str, tuple[dict[str, Any], dict[str, Any]]], name: str) -> None:
    ours, theirs = (doc["template"] for doc in peers[name])
    assert canonical(ours["extendedResources"]) == canonical(theirs["extendedResources"])
    assert canonical(ours["custom"]) == canonical(theirs["custom"])  # nproc from the devices: 1 on a slice
    assert (ours["type"], ours["taskTypeVersion"]) == (theirs["type"], theirs["taskTypeVersion"])
    their_resources = theirs["container"]["resources"]  # flytekit's plain container: IDL names
    gpus = CASES[name][3]
    assert {"name": "GPU", "value": str(gpus)} in their_resources["requests"]
    assert primary(peers[name][0])["resources"] == {"requests": {"gpu": str(gpus)}, "limits": {"gpu": str(gpus)}}
    # Flyte's propeller selects the nodes from gpuAccelerator: neither task carries a selector.
    assert "nodeSelector" not in ours["k8sPod"]["podSpec"] and "affinity" not in ours["k8sPod"]["podSpec"]


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        (
            {"resources": {"requests": {"nvidia.com/mig-1g.5gb": 1}},
             "accelerator": {"device": "nvidia-tesla-a100", "partition": "1g.5gb"}},
            'resources.requests["nvidia.com/mig-1g.5gb"]: Flyte applies accelerator only to pods that request '
            "nvidia.com/gpu",
        ),
        (
            {"resources": {"requests": {"nvidia.com/mig-1g.5gb": 1}}, "accelerator": "nvidia-tesla-a100"},
            'resources.requests["nvidia.com/mig-1g.5gb"]: Flyte applies accelerator only to pods that request '
            "nvidia.com/gpu",
        ),
    ],
)  # fmt: skip
def test_a_mig_resource_is_an_error_on_flyte(write_spec: Any, fields: dict[str, Any], expected: str) -> None:
    """Flyte's propeller applies the device only to pods with an nvidia.com/gpu limit (pod_helper.go)."""
    from elastic_compile.compiler.pipeline import compile_text

    path = write_spec(**fields)
    with pytest.raises(SpecError) as e:
        compile_text(path.read_text(), str(path), ["flyte"])
    [problem] = e.value.problems
    assert expected in str(problem)
    # The same spec is fine where the resource selects the slice itself (the mixed strategy).
    compile_text(path.read_text() + "accelerator_label: example.com/gpu\n", str(path), ["pytorchjob"])


def test_no_accelerator_no_extended_resources() -> None:
    assert "extendedResources" not in compile_flyte(spec_text(resources={"requests": {"gpu": 2}}))["template"]
