"""Where the pods of a Kubernetes target run for ``accelerator``: a nodeSelector, and the platform's tolerations.

A PyTorchJob, a TrainJob and a PodTemplate select the device type by a node label that the
platform names once (``accelerator_label``, usually in a base). The label's values come from
:mod:`elastic_compile.core.accelerators`: a preset's table (GKE, NVIDIA GPU feature
discovery), or Flyte's device names verbatim (EKS's preset, and any other key, as Flyte's
propeller writes them). Where a device has several values on a label the spec chooses one
in its own ``pod_template.spec.nodeSelector``, and a value it writes there for the same key
must name the same device: nothing is guessed, and nothing contradicts.

The Flyte targets carry the device in the task instead (``extendedResources.gpuAccelerator``)
and get none of this: Flyte's propeller selects the nodes from its own configuration.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from elastic_compile.core.accelerators import DEVICES, PRESETS, Preset, preset_names, product_names_device
from elastic_compile.schema import ElasticSpec
from elastic_compile.targets.checks import FieldPath


class Placement(NamedTuple):
    """What the compiler adds to the pod for ``accelerator``, and what is wrong.

    ``node_selector``: the entries to add (those the spec's pod_template already has are
    not repeated); ``tolerations``: ``accelerator_tolerations`` not already in the pod
    template; ``kept``: the spec's own nodeSelector entries that choose the device;
    ``problems``: located errors (the targets raise them before building the pod).
    """

    # Read-only types: the empty defaults are shared by every Placement.
    node_selector: Mapping[str, str] = {}
    tolerations: Sequence[dict[str, Any]] = ()
    kept: Mapping[str, str] = {}
    preset: Preset | None = None
    problems: Sequence[tuple[FieldPath, str]] = ()


def placement(spec: ElasticSpec) -> Placement:
    """The nodeSelector entries and tolerations of ``spec.accelerator`` on a Kubernetes target."""
    acc = spec.accelerator
    if acc is None:
        return Placement()
    label = spec.accelerator_label
    if label is None:
        why = (
            f"{acc.device} is selected by a node label on a Kubernetes target, and accelerator_label names none; "
            f"set it once (a platform base is the place) to the label your GPU nodes carry: {preset_names()}, "
            "or a key of your own whose values are Flyte's device names"
        )
        return Placement(problems=[(("accelerator",), why)])
    device = DEVICES[acc.device]
    preset = PRESETS.get(label)
    partitions = {p.partition_label: p for p in PRESETS.values() if p.partition_label is not None}
    if label in partitions:
        why = f"{label} is {partitions[label].name}'s partition label; the device's is {partitions[label].label}"
        return Placement(problems=[(("accelerator_label",), why)])
    chosen: dict[str, str] = spec.pod_template.spec.get("nodeSelector") or {}
    problems: list[tuple[FieldPath, str]] = []
    add: dict[str, str] = {}
    kept: dict[str, str] = {}
    user_path: FieldPath = ("pod_template", "spec", "nodeSelector")

    def conflict(key: str, why: str) -> None:
        problems.append(((*user_path, key), why))

    partition_label = spec.accelerator_partition_label or (preset.partition_label if preset else None)
    in_product = preset is not None and preset.partition_suffix is not None and partition_label is None
    # nvidia.com/mig-<partition> (the device plugin's mixed strategy) is only on nodes with such slices:
    # the resource selects the partition, and no label is needed for it.
    by_resource = acc.mig_resource() in spec.resources.accelerators()
    # The device label.
    given = chosen.get(label)
    if preset is not None and preset.models:
        # A product label (GPU feature discovery): values name products, each checked by its model.
        partition = acc.partition if in_product and not by_resource else None
        if given is not None:
            wrong = product_names_device(preset, device, given, partition)
            if wrong is not None:
                conflict(label, f"{wrong}, and accelerator is {acc.device}; give one device")
            else:
                kept[label] = given
        else:
            values = (preset.values or {}).get(device.name, ())
            if partition is not None or len(values) != 1:
                problems.append((("accelerator",), _choose(preset, device.name, values, partition)))
            else:
                add[label] = values[0]
    else:
        values = (device.name,) if preset is None or preset.values is None else preset.values.get(device.name, ())
        if given is not None:
            if given in values:
                kept[label] = given
            else:
                platform = f" ({preset.name})" if preset is not None else ""
                what = " or ".join(values) if values else "no value"
                conflict(
                    label,
                    f"accelerator {acc.device} is {what} on {label}{platform}; give one device: remove this entry "
                    "or change accelerator",
                )
        elif len(values) == 1 or preset is None:  # a key of the spec's own holds the device name
            add[label] = device.name if preset is None else values[0]
        else:
            problems.append((("accelerator",), _choose(preset, device.name, values, None)))
    # The partition label.
    if acc.partition is not None and partition_label is not None and partition_label in chosen:
        if chosen[partition_label] != acc.partition:
            conflict(partition_label, f"accelerator.partition is {acc.partition}; give one partition")
        else:
            kept[partition_label] = acc.partition
    elif acc.partition is not None and not in_product and not by_resource:
        if partition_label is None:
            problems.append((
                ("accelerator", "partition"),
                f"{label} has no partition label elastic-compile knows: set accelerator_partition_label to the "
                "label your partitioned nodes carry (Flyte's gpu-partition-size-node-label)",
            ))  # fmt: skip
        else:
            add[partition_label] = acc.partition
    elif acc.partition is None and partition_label is not None and partition_label in chosen:
        conflict(
            partition_label,
            f"selects nodes partitioned into {chosen[partition_label]} slices, and accelerator names a whole "
            f"{acc.device}; write accelerator: {{device: {acc.device}, partition: {chosen[partition_label]}}}",
        )
    present = spec.pod_template.spec.get("tolerations") or []
    tolerations = [t for t in spec.accelerator_tolerations if t not in present]
    return Placement(add, tolerations, kept, preset, problems)


def _choose(preset: Preset, device: str, values: tuple[str, ...], partition: str | None) -> str:
    """Why the compiler cannot write the device label's value, and how the spec chooses it."""
    where = f"pod_template.spec.nodeSelector {{{preset.label}: ...}}"
    if partition is not None:
        return (
            f"{preset.name} names a MIG slice in the product ({preset.label}: <product>{preset.partition_suffix}"
            f"{partition}), and the product of {device} is not one name; write {where} with your nodes' value"
        )
    if preset.models:
        return (
            f"{preset.label} holds the card's product name (NVML's: model, form factor, memory), and {device} is "
            f"more than one product; write {where} with your nodes' value (it must name {device}), or label the "
            "nodes with Flyte's device names under a key of your own (accelerator_label)"
        )
    if values:
        return f"{device} is {' or '.join(values)} on {preset.name}; choose one: {where}"
    offered = ", ".join(sorted({v for vs in (preset.values or {}).values() for v in vs}))
    return f"{preset.name} has no {device} ({preset.label} values: {offered}); choose another device"


def add_to_pod(spec: ElasticSpec, pod: dict[str, Any]) -> None:
    """Add ``spec.accelerator``'s nodeSelector entries and tolerations to a built pod spec (after the user's)."""
    place = placement(spec)
    if place.node_selector and "nodeSelector" in pod:
        pod["nodeSelector"] = {**pod["nodeSelector"], **place.node_selector}
    elif place.node_selector:
        # A new nodeSelector goes before the tolerations, whoever wrote those: one place for it, so
        # that compile -> import -> compile gives the same bytes (import leaves the tolerations).
        entries = list(pod.items())
        at = next((i for i, (key, _) in enumerate(entries) if key == "tolerations"), len(entries))
        entries.insert(at, ("nodeSelector", dict(place.node_selector)))
        pod.clear()
        pod.update(entries)
    if place.tolerations:
        pod["tolerations"] = [*(pod.get("tolerations") or []), *place.tolerations]


def placement_problems(spec: ElasticSpec) -> list[tuple[FieldPath, str]]:
    """Located errors of ``accelerator`` on a Kubernetes target (none without one)."""
    return list(placement(spec).problems)


def describe(spec: ElasticSpec) -> str | None:
    """One --explain line: the device's nodeSelector and where its parts come from; None without an accelerator."""
    acc = spec.accelerator
    if acc is None or spec.accelerator_label is None:
        return None
    place = placement(spec)
    selector = {**place.kept, **place.node_selector}
    origin = f"{place.preset.name} preset" if place.preset else "Flyte's device names, as Flyte's propeller writes them"
    own = f"; {', '.join(place.kept)} from pod_template" if place.kept else ""
    tolerations = f"; {len(place.tolerations)} toleration(s) from accelerator_tolerations" if place.tolerations else ""
    pairs = ", ".join(f"{k}: {v}" for k, v in selector.items())
    return f"# accelerator {acc.device}: nodeSelector {{{pairs}}} ({origin}{own}){tolerations}\n"
