"""``accelerator`` on the Kubernetes targets: the nodeSelector of each preset, MIG partitions, errors.

Every case compiles for the PyTorchJob, the TrainJob and the PodTemplate, whose pods must
carry the same selection (one builder, ``targets/pod.py``). The label values are the
presets' tables (``core/accelerators.py``, each fact with its source there); what is checked
here is that the compiler writes them, refuses what it cannot know, and never contradicts
what the spec wrote itself.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from elastic_compile.compiler.pipeline import compile_text
from elastic_compile.core.accelerators import DEVICES, PRESETS
from elastic_compile.core.errors import SpecError

BASE: dict[str, Any] = {"name": "train", "image": "ghcr.io/example/trainer:v1", "command": ["python", "train.py"]}
GKE, EKS, GFD = "cloud.google.com/gke-accelerator", "k8s.amazonaws.com/accelerator", "nvidia.com/gpu.product"
GKE_PARTITION, EKS_PARTITION = "cloud.google.com/gke-gpu-partition-size", "k8s.amazonaws.com/gpu-partition-size"
TARGETS = ("pytorchjob", "trainjob", "podtemplate")


def text(**fields: Any) -> str:
    spec = {**BASE, "resources": {"requests": {"gpu": 1}}, **fields}
    return yaml.safe_dump({k: v for k, v in spec.items() if v is not None}, sort_keys=False)


def pods(source: str, targets: tuple[str, ...] = TARGETS) -> dict[str, dict[str, Any]]:
    """The worker pod spec of each target (the TrainJob's: its runtime patch)."""
    out: dict[str, dict[str, Any]] = {}
    for output in compile_text(source, "elastic.yaml", list(targets)).outputs:
        doc = output.doc
        if doc["kind"] == "PyTorchJob":
            out["pytorchjob"] = doc["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
        elif doc["kind"] == "TrainJob":
            [patch] = doc["spec"]["runtimePatches"]
            [job] = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
            out["trainjob"] = job["template"]["spec"]["template"]["spec"]
        elif doc["kind"] == "PodTemplate":
            out["podtemplate"] = doc["template"]["spec"]
    return out


def selectors(source: str) -> dict[str, Any]:
    """The one nodeSelector all three targets give (asserted equal)."""
    found = {name: pod.get("nodeSelector") for name, pod in pods(source).items()}
    assert len(found) == 3 and len({yaml.safe_dump(s) for s in found.values()}) == 1, found
    return found["pytorchjob"] or {}


def errors(source: str, targets: tuple[str, ...] = ("pytorchjob",)) -> list[str]:
    with pytest.raises(SpecError) as e:
        compile_text(source, "elastic.yaml", list(targets))
    return [str(p) for p in e.value.problems]


# --------------------------------------------------------------------------- the presets


@pytest.mark.parametrize(
    ("label", "device", "expected"),
    [
        (GKE, "nvidia-tesla-t4", {GKE: "nvidia-tesla-t4"}),
        (GKE, "nvidia-l4", {GKE: "nvidia-l4"}),
        (GKE, "nvidia-tesla-a100", {GKE: "nvidia-tesla-a100"}),
        (GKE, "nvidia-a100-80gb", {GKE: "nvidia-a100-80gb"}),
        (GKE, "nvidia-h200", {GKE: "nvidia-h200-141gb"}),  # GKE's one H200 type
        (EKS, "nvidia-a10g", {EKS: "nvidia-a10g"}),  # Flyte's device names, verbatim
        (EKS, "nvidia-h100", {EKS: "nvidia-h100"}),
        (GFD, "nvidia-tesla-t4", {GFD: "Tesla-T4"}),
        (GFD, "nvidia-l4", {GFD: "NVIDIA-L4"}),
        (GFD, "nvidia-a10g", {GFD: "NVIDIA-A10G"}),
        (GFD, "nvidia-l40s", {GFD: "NVIDIA-L40S"}),
        ("example.com/gpu-type", "nvidia-tesla-v100", {"example.com/gpu-type": "nvidia-tesla-v100"}),
    ],
)
def test_each_preset_writes_its_value(label: str, device: str, expected: dict[str, str]) -> None:
    assert selectors(text(accelerator=device, accelerator_label=label)) == expected


def test_the_spec_keeps_its_own_selector_and_ours_comes_after() -> None:
    source = text(
        accelerator="nvidia-l4", accelerator_label=GKE, pod_template={"spec": {"nodeSelector": {"pool": "gpu"}}}
    )
    assert list(selectors(source).items()) == [("pool", "gpu"), (GKE, "nvidia-l4")]


def test_tolerations_only_where_the_platform_asks_for_them() -> None:
    toleration = {"key": EKS, "operator": "Exists", "effect": "NoSchedule"}
    theirs = {"key": "spot", "operator": "Exists", "effect": "NoSchedule"}
    plain = pods(text(accelerator="nvidia-l4", accelerator_label=EKS))
    assert all("tolerations" not in pod for pod in plain.values())
    asked = pods(
        text(
            accelerator="nvidia-l4",
            accelerator_label=EKS,
            accelerator_tolerations=[toleration],
            pod_template={"spec": {"tolerations": [theirs, toleration]}},
        )
    )
    for pod in asked.values():
        assert pod["tolerations"] == [theirs, toleration]  # the pod template's already has it: not twice
    # Without an accelerator the platform's GPU tolerations stay off the pod (a CPU job on a GPU node).
    cpu = pods(text(resources=None, accelerator_label=EKS, accelerator_tolerations=[toleration]))
    assert all("tolerations" not in pod and "nodeSelector" not in pod for pod in cpu.values())


# --------------------------------------------------------------------------- MIG partitions


@pytest.mark.parametrize(
    ("label", "device", "partition", "expected"),
    [
        (GKE, "nvidia-tesla-a100", "1g.5gb", {GKE: "nvidia-tesla-a100", GKE_PARTITION: "1g.5gb"}),
        (GKE, "nvidia-a100-80gb", "7g.80gb", {GKE: "nvidia-a100-80gb", GKE_PARTITION: "7g.80gb"}),
        (EKS, "nvidia-tesla-a100", "3g.20gb", {EKS: "nvidia-tesla-a100", EKS_PARTITION: "3g.20gb"}),
    ],
)
def test_a_partition_adds_the_partition_label(label: str, device: str, partition: str, expected: Any) -> None:
    source = text(nnodes=3, accelerator={"device": device, "partition": partition}, accelerator_label=label)
    assert selectors(source) == expected
    compiled = compile_text(source, "elastic.yaml", ["pytorchjob", "trainjob"])
    # One slice per pod, one process on it: core/resources' rule for MIG, through nvidia.com/gpu.
    assert compiled.spec.nproc_per_node == 1
    assert compiled.spec.derived_note("nproc_per_node") == (
        f"derived: 1, one process on the pod's one MIG slice (nvidia.com/mig-{partition}: 1)"
    )
    trainjob = next(o.doc for o in compiled.outputs if o.doc["kind"] == "TrainJob")
    assert trainjob["spec"]["trainer"]["numProcPerNode"] == 1


def test_a_partition_label_of_your_own() -> None:
    source = text(
        accelerator={"device": "nvidia-tesla-a100", "partition": "2g.10gb"},
        accelerator_label="example.com/gpu",
        accelerator_partition_label="example.com/mig",
    )
    assert selectors(source) == {"example.com/gpu": "nvidia-tesla-a100", "example.com/mig": "2g.10gb"}


def test_gpu_feature_discovery_names_a_slice_in_the_product() -> None:
    accelerator = {"device": "nvidia-tesla-a100", "partition": "1g.5gb"}
    [problem] = errors(text(accelerator=accelerator, accelerator_label=GFD))
    assert "names a MIG slice in the product (nvidia.com/gpu.product: <product>-MIG-1g.5gb)" in problem
    chosen = {"nodeSelector": {GFD: "NVIDIA-A100-PCIE-40GB-MIG-1g.5gb"}}
    assert selectors(text(accelerator=accelerator, accelerator_label=GFD, pod_template={"spec": chosen})) == {
        GFD: "NVIDIA-A100-PCIE-40GB-MIG-1g.5gb"
    }
    other = {"nodeSelector": {GFD: "NVIDIA-A100-PCIE-40GB-MIG-2g.10gb"}}
    [problem] = errors(text(accelerator=accelerator, accelerator_label=GFD, pod_template={"spec": other}))
    assert "does not name a 1g.5gb slice" in problem


def test_a_mig_resource_selects_its_slice_itself() -> None:
    """The device plugin's mixed strategy: nvidia.com/mig-1g.5gb is only on nodes with such slices."""
    source = text(
        resources={"requests": {"nvidia.com/mig-1g.5gb": 1}},
        accelerator={"device": "nvidia-tesla-a100", "partition": "1g.5gb"},
        accelerator_label=GKE,
    )
    assert selectors(source) == {GKE: "nvidia-tesla-a100"}


# --------------------------------------------------------------------------- errors


def test_no_label_on_a_kubernetes_target_names_the_presets() -> None:
    source = text(accelerator="nvidia-l4")
    for target in TARGETS:
        [problem] = errors(source, (target,))
        assert problem.startswith("elastic.yaml:9:14: accelerator: nvidia-l4 is selected by a node label")
        assert all(f"{label} ({preset.name})" in problem for label, preset in PRESETS.items())
    compile_text(source + "flyte: {project: p, domain: d, version: v}\n", "elastic.yaml", ["flyte"])  # Flyte's own


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"accelerator": "nvidia-tesla-a1000"}, "accelerator.device: not a device type of flytekit's accelerators "
         "(did you mean nvidia-tesla-a100?)"),
        ({"accelerator": "T4"}, "accelerator.device: not a device type of flytekit's accelerators (flytekit's T4 is "
         "nvidia-tesla-t4)"),
        ({"accelerator": "tpu-v5p-slice"}, "accelerator.device: a Cloud TPU slice (flytekit's V5P)"),
        ({"accelerator": {"device": "nvidia-h100", "partition": "1g.10gb"}}, "accelerator.partition: flytekit "
         "defines no partitions of nvidia-h100 (H100 is a whole GPU); remove partition"),
        ({"accelerator": {"device": "nvidia-a100-80gb", "partition": "1g.5gb"}}, "accelerator.partition: not a "
         "partition of nvidia-a100-80gb (did you mean 1g.10gb?)"),
        ({"accelerator": {"device": "nvidia-l4", "size": "x"}}, "accelerator.size:"),
        ({"accelerator": "nvidia-l4", "resources": None}, "accelerator: nvidia-l4 places the pods on nodes with that "
         "GPU, and resources requests no GPU"),
        ({"accelerator": "nvidia-l4", "resources": {"requests": {"amd.com/gpu": 1}}}, "accelerator: nvidia-l4 is an "
         "NVIDIA GPU, and the pod requests amd.com/gpu"),
        ({"accelerator": {"device": "nvidia-tesla-a100", "partition": "1g.5gb"},
          "resources": {"requests": {"gpu": 2}}}, "resources.requests.gpu: 2 MIG slices in one pod"),
        ({"accelerator": {"device": "nvidia-tesla-a100", "partition": "1g.5gb"},
          "resources": {"requests": {"nvidia.com/mig-2g.10gb": 1}}}, 'resources.requests["nvidia.com/mig-2g.10gb"]: '
         "a 2g.10gb slice, and accelerator.partition is 1g.5gb"),
        ({"accelerator_label": "not a/label/key"}, "accelerator_label: not a node label key"),
        ({"accelerator": 5}, "accelerator: expected a device type (nvidia-l4) or {device, partition} (given: 5)"),
        ({"accelerator": "NVIDIA-TESLA-T4"}, "(did you mean nvidia-tesla-t4? the names are lower case)"),
        ({"accelerator": "nvidia-l4", "accelerator_partition_label": GKE}, "accelerator_partition_label: the same "
         "label as accelerator_label"),
        ({"accelerator": "nvidia-l4", "accelerator_label": GKE_PARTITION}, "accelerator_label: "
         "cloud.google.com/gke-gpu-partition-size is GKE's partition label; the device's is "
         "cloud.google.com/gke-accelerator"),
        ({"accelerator_tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedul"}]},
         "accelerator_tolerations[0].effect:"),
    ],
)  # fmt: skip
def test_spec_errors_are_located(fields: dict[str, Any], expected: str) -> None:
    source = text(**{"accelerator_label": GKE, **fields})
    found = errors(source)
    assert any(expected in p for p in found), found


@pytest.mark.parametrize(
    ("label", "device", "expected"),
    [
        (GKE, "nvidia-h100", "accelerator: nvidia-h100 is nvidia-h100-80gb or nvidia-h100-mega-80gb on GKE; choose "
         "one: pod_template.spec.nodeSelector {cloud.google.com/gke-accelerator: ...}"),
        (GKE, "nvidia-a10g", "accelerator: GKE has no nvidia-a10g (cloud.google.com/gke-accelerator values: "),
        (GKE, "nvidia-l4-vws", "accelerator: GKE has no nvidia-l4-vws"),
        (GFD, "nvidia-h100", "accelerator: nvidia.com/gpu.product holds the card's product name"),
        (GFD, "nvidia-l4-vws", "accelerator: nvidia.com/gpu.product holds the card's product name"),
        (GKE, {"device": "nvidia-tesla-a100", "partition": "1g.5gb"}, None),
        ("example.com/gpu", {"device": "nvidia-tesla-a100", "partition": "1g.5gb"}, "accelerator.partition: "
         "example.com/gpu has no partition label elastic-compile knows: set accelerator_partition_label"),
    ],
)  # fmt: skip
def test_what_cannot_be_known_is_refused(label: str, device: Any, expected: str | None) -> None:
    source = text(accelerator=device, accelerator_label=label)
    if expected is None:
        compile_text(source, "elastic.yaml", list(TARGETS))
        return
    for target in TARGETS:
        [problem] = errors(source, (target,))
        assert expected in problem


@pytest.mark.parametrize(
    ("label", "device", "given", "expected"),
    [
        (GKE, "nvidia-tesla-t4", "nvidia-l4", "accelerator nvidia-tesla-t4 is nvidia-tesla-t4 on "
         "cloud.google.com/gke-accelerator (GKE); give one device"),
        (GKE, "nvidia-h100", "nvidia-h200-141gb", "accelerator nvidia-h100 is nvidia-h100-80gb or "
         "nvidia-h100-mega-80gb on cloud.google.com/gke-accelerator (GKE)"),
        (EKS, "nvidia-l4", "nvidia-l4-vws", "accelerator nvidia-l4 is nvidia-l4 on k8s.amazonaws.com/accelerator "
         "(EKS)"),
        ("example.com/gpu", "nvidia-l4", "L4", "accelerator nvidia-l4 is nvidia-l4 on example.com/gpu; give"),
        (GFD, "nvidia-h100", "NVIDIA-A100-SXM4-80GB", "does not name nvidia-h100 (a product of it holds H100)"),
        (GFD, "nvidia-tesla-a100", "NVIDIA-A100-SXM4-80GB", "does not name nvidia-tesla-a100 (a product of it holds "
         "A100 and 40GB)"),
        (GFD, "nvidia-tesla-p4", "Tesla-P40", "does not name nvidia-tesla-p4"),
        (GFD, "nvidia-tesla-a100", "NVIDIA-A100-PCIE-40GB-MIG-1g.5gb", "names a MIG slice (-MIG-1g.5gb); give it as "
         "accelerator.partition"),
    ],
)  # fmt: skip
def test_the_spec_writing_another_value_for_the_key_is_a_conflict(
    label: str, device: str, given: str, expected: str
) -> None:
    source = text(accelerator=device, accelerator_label=label, pod_template={"spec": {"nodeSelector": {label: given}}})
    [problem] = errors(source)
    # Located at the value the spec wrote: line 14 of the dumped spec, after the key.
    line = source.splitlines()[13]
    column = line.index(given) + 1
    assert problem.startswith(f'elastic.yaml:14:{column}: pod_template.spec.nodeSelector["{label}"]: ')
    assert expected in problem and problem.endswith(f"(given: {given})")


@pytest.mark.parametrize(
    ("label", "device", "given"),
    [
        (GKE, "nvidia-tesla-t4", "nvidia-tesla-t4"),  # the same value: fine, not written twice
        (GKE, "nvidia-h100", "nvidia-h100-80gb"),  # the spec chooses one of GKE's two H100s
        (GFD, "nvidia-h100", "NVIDIA-H100-80GB-HBM3"),  # the spec names its product
        (GFD, "nvidia-a100-80gb", "NVIDIA-A100-80GB-PCIe"),
        (GFD, "nvidia-tesla-t4", "Tesla-T4-SHARED"),  # a time-sliced T4 (GPU feature discovery's suffix)
        (GFD, "nvidia-rtx-pro-6000", "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition"),
    ],
)
def test_a_value_the_spec_chooses_is_kept(label: str, device: str, given: str) -> None:
    source = text(accelerator=device, accelerator_label=label, pod_template={"spec": {"nodeSelector": {label: given}}})
    assert selectors(source) == {label: given}


def test_a_partition_selected_in_the_pod_template_needs_the_partition() -> None:
    whole = text(
        accelerator="nvidia-tesla-a100",
        accelerator_label=GKE,
        pod_template={"spec": {"nodeSelector": {GKE_PARTITION: "1g.5gb"}}},
    )
    [problem] = errors(whole)
    assert "selects nodes partitioned into 1g.5gb slices, and accelerator names a whole nvidia-tesla-a100" in problem
    other = text(
        accelerator={"device": "nvidia-tesla-a100", "partition": "2g.10gb"},
        accelerator_label=GKE,
        pod_template={"spec": {"nodeSelector": {GKE_PARTITION: "1g.5gb"}}},
    )
    [problem] = errors(other)
    assert problem.endswith("accelerator.partition is 2g.10gb; give one partition (given: 1g.5gb)")
    # The same under the mixed strategy, where the resource selects the slice and no label is written.
    mixed = text(
        resources={"requests": {"nvidia.com/mig-2g.10gb": 1}},
        accelerator={"device": "nvidia-tesla-a100", "partition": "2g.10gb"},
        accelerator_label=GKE,
        pod_template={"spec": {"nodeSelector": {GKE_PARTITION: "1g.5gb"}}},
    )
    [problem] = errors(mixed)
    assert problem.endswith("accelerator.partition is 2g.10gb; give one partition (given: 1g.5gb)")


def test_every_preset_value_is_a_label_value() -> None:
    """What the compiler writes passes Kubernetes' label rules (63 characters, [A-Za-z0-9._-])."""
    from elastic_compile.schema.models import meta_name_problems

    values = {v for preset in PRESETS.values() for vs in (preset.values or {}).values() for v in vs}
    values |= set(DEVICES) | {p for d in DEVICES.values() for p in d.partitions}
    assert meta_name_problems({f"k/{i}": v for i, v in enumerate(sorted(values))}, "label", check_value=True) == []
    for preset in PRESETS.values():
        assert set(preset.values or {}) <= set(DEVICES) and set(preset.models) <= set(DEVICES)


# --------------------------------------------------------------------------- the example


def test_the_example_compiles_as_the_docs_say() -> None:
    """examples/accelerator/: a GKE platform base and two jobs (docs/spec.md, "Which GPU")."""
    import json
    from pathlib import Path

    import jsonschema

    from elastic_compile.compiler.pipeline import compile_path, resolver
    from elastic_compile.core.loader import load_file

    root = Path(__file__).resolve().parents[1]
    folder = root / "examples" / "accelerator"
    schema = jsonschema.Draft202012Validator(json.loads((root / "elastic.schema.json").read_text()))
    for path in sorted(folder.glob("*.elastic.yaml")):
        assert list(schema.iter_errors(load_file(path).data)) == [], path.name
    bases = resolver(root)
    sweep = compile_path(folder / "sweep.elastic.yaml", ("pytorchjob", "flyte"), bases=bases)
    job, task = (o.doc for o in sweep.outputs)
    assert job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["nodeSelector"] == {
        GKE: "nvidia-tesla-a100",
        GKE_PARTITION: "1g.5gb",
    }
    assert job["spec"]["nprocPerNode"] == "1"
    assert task["template"]["extendedResources"]["gpuAccelerator"] == {
        "device": "nvidia-tesla-a100",
        "partitionSize": "1g.5gb",
    }
    pretrain = compile_path(folder / "pretrain.elastic.yaml", TARGETS, bases=bases)
    for output in pretrain.outputs:
        assert '"cloud.google.com/gke-accelerator": "nvidia-h100-mega-80gb"' in json.dumps(output.doc)


def test_a_custom_flyte2_template_is_held_to_flytes_device() -> None:
    """-t flyte2's check of a rendered environment (a --templates typo) knows flyte.Device's fields."""
    from elastic_compile.targets.flyte2.environment import check_environment

    base = {"name": "train", "image": "x:1", "plugin_config": {"nnodes": 2, "nproc_per_node": 1}}
    good = {**base, "resources": {"gpu": {"device": "nvidia-l4", "quantity": 2}}}
    assert check_environment(good) == []
    bad = {**base, "resources": {"gpu": {"device": "nvidia-l4", "quantity": 0, "partiton": "1g.5gb"}}}
    assert check_environment(bad) == [
        "resources.gpu: expected {device, quantity, partition} (flyte.Device)",
        "resources.gpu.quantity: expected a whole number >= 1",
    ]
