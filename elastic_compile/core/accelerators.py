"""Accelerator device types: Flyte's vocabulary, and how each platform labels its nodes with them.

Pure data and lookups: the compile path imports no flytekit, so the vocabulary is written
here and ``tests/flyte/test_accelerator_vocabulary.py`` holds it equal to flytekit's own
``flytekit.extras.accelerators`` (flytekit 1.16.31), constant by constant and partition by
partition, so the two can never drift apart.

How each engine selects a device type:

* Flyte (both generations) carries the device name in the task's
  ``extendedResources.gpuAccelerator``; Flyte's propeller turns it into a required node
  affinity on its ``gpu-device-node-label`` (default ``k8s.amazonaws.com/accelerator``) with
  the device name as the value, and a partition into one on ``gpu-partition-size-node-label``
  (default ``k8s.amazonaws.com/gpu-partition-size``), only for pods that request
  ``nvidia.com/gpu`` (its ``gpu-resource-name``): flyteorg/flyte v1.16.8
  ``flyteplugins/go/tasks/pluginmachinery/flytek8s/pod_helper.go`` ``ApplyGPUNodeSelectors``
  and ``flytek8s/config/config.go:61-62``.
* A PyTorchJob, a TrainJob or a PodTemplate get a ``nodeSelector`` on the label the platform
  names once (``accelerator_label``): :data:`PRESETS` know the values of three such labels.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, NamedTuple


class Device(NamedTuple):
    """One device type of flytekit's ``flytekit.extras.accelerators``.

    ``name`` is what flytekit serializes (``extendedResources.gpuAccelerator.device``),
    ``constant`` the module's constant for it, ``partitions`` the partition sizes flytekit
    defines on it (``A100.partition_1g_5gb`` is ``1g.5gb``; none for a plain
    ``GPUAccelerator``), ``tpu`` a Cloud TPU slice (flytekit's V5E, V5P, V6E).
    """

    name: str
    constant: str
    partitions: tuple[str, ...] = ()
    tpu: bool = False


#: flytekit 1.16.31 ``flytekit/extras/accelerators.py``: every constant, in the module's order.
DEVICES: Final[Mapping[str, Device]] = {
    d.name: d
    for d in (
        Device("nvidia-a10g", "A10G"),
        Device("nvidia-l4", "L4"),
        Device("nvidia-l4-vws", "L4_VWS"),
        Device("nvidia-l40s", "L40S"),
        Device("nvidia-tesla-k80", "K80"),
        Device("nvidia-tesla-m60", "M60"),
        Device("nvidia-tesla-p4", "P4"),
        Device("nvidia-tesla-p100", "P100"),
        Device("nvidia-tesla-t4", "T4"),
        Device("nvidia-tesla-v100", "V100"),
        Device("nvidia-h100", "H100"),
        Device("nvidia-h200", "H200"),
        Device("nvidia-rtx-pro-6000", "RTX_PRO_6000"),
        Device("nvidia-tesla-a100", "A100", ("1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb")),
        Device("nvidia-a100-80gb", "A100_80GB", ("1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")),
        Device(
            "tpu-v5-lite-podslice",
            "V5E",
            ("1x1", "2x2", "2x4", "4x4", "4x8", "8x8", "8x16", "16x16"),
            tpu=True,
        ),
        Device(
            "tpu-v5p-slice",
            "V5P",
            (
                "2x2x1",
                "2x2x2",
                "2x4x4",
                "4x4x4",
                "4x4x8",
                "4x8x8",
                "8x8x8",
                "8x8x16",
                "8x16x16",
                "16x16x16",
                "16x16x24",
            ),
            tpu=True,
        ),
        Device("tpu-v6e-slice", "V6E", ("1x1", "2x2", "2x4", "4x4", "4x8", "8x8", "8x16", "16x16"), tpu=True),
    )
}

#: The resource Flyte's propeller keys its device selection on (its default gpu-resource-name).
NVIDIA_GPU: Final = "nvidia.com/gpu"


def device_problem(name: str) -> str | None:
    """Why ``name`` is not a device of the vocabulary (with a did-you-mean), or None."""
    if name in DEVICES:
        return None
    by_constant = {d.constant.lower(): d.name for d in DEVICES.values()}
    if name.lower() in DEVICES:
        hint = f" (did you mean {name.lower()}? the names are lower case)"
    elif name.lower() in by_constant:
        hint = f" (flytekit's {name.upper()} is {by_constant[name.lower()]})"
    else:
        import difflib  # a misspelling's suggestion only

        close = difflib.get_close_matches(name, list(DEVICES), n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]}?)" if close else ""
    gpus = ", ".join(d.name for d in DEVICES.values() if not d.tpu)
    return f"not a device type of flytekit's accelerators{hint}; one of {gpus}"


def partition_problem(device: Device, partition: str) -> str | None:
    """Why ``partition`` is not one of the partitions flytekit defines on ``device``, or None."""
    if partition in device.partitions:
        return None
    if not device.partitions:
        return f"flytekit defines no partitions of {device.name} ({device.constant} is a whole GPU); remove partition"
    import difflib  # a misspelling's suggestion only

    close = difflib.get_close_matches(partition, device.partitions, n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return f"not a partition of {device.name}{hint}; one of {', '.join(device.partitions)}"


# --------------------------------------------------------------------------- node labels


class Preset(NamedTuple):
    """A node label whose values elastic-compile knows for some device types.

    ``values``: device name -> the label values that mean it on such nodes; one value is
    written, several make the spec choose one itself (its pod_template's nodeSelector),
    a device absent from the map has none there. ``None``: the label holds Flyte's device
    names verbatim, as Flyte's propeller writes them. ``partition_label``: the label of a
    MIG partition size (None: partitions are not on a label of their own). ``models``:
    for a label whose values name products, the words each device's value must hold
    (a value the spec writes itself is checked against them).
    """

    name: str
    label: str
    partition_label: str | None
    values: Mapping[str, tuple[str, ...]] | None
    source: str
    models: Mapping[str, tuple[str, ...]] = {}  # read only: one empty mapping serves every preset
    #: The product label's suffix of a MIG slice (GPU feature discovery's single strategy), or None.
    partition_suffix: str | None = None


# GKE: "GKE attaches a unique node selector to GPU nodes ... Key: cloud.google.com/gke-accelerator,
# Value: The type of GPU accelerator that you use. For example, nvidia-tesla-t4" (GKE, "Run GPUs in GKE
# Standard node pools", docs.cloud.google.com/kubernetes-engine/docs/how-to/gpus, updated 2026-04-08).
# The accelerator types on that page: nvidia-b200 (A4), nvidia-h200-141gb (A3 Ultra), nvidia-h100-80gb
# (A3 High), nvidia-h100-mega-80gb (A3 Mega), nvidia-tesla-a100 (A2 Standard, 40 GB), nvidia-a100-80gb
# (A2 Ultra), nvidia-l4 (G2), nvidia-rtx-pro-6000 (G4), and on N1 T4, V100, P100 and P4, which Compute
# Engine names nvidia-tesla-t4, -v100, -p100 (the page's example) and -p4. The flytekit names equal
# these where they exist; H100 is two GKE types (High and Mega), so the spec chooses; the A10G, L40S,
# M60 (AWS GPUs), K80 (retired) and the L4 vWS licence are not GKE accelerator types.
# MIG: the nodes of a partitioned pool carry cloud.google.com/gke-gpu-partition-size = the size
# (GKE, "Running multi-instance GPUs", .../how-to/gpus-multi; kubernetes/autoscaler's GKE
# GPUPartitionSizeLabel), and each slice is one nvidia.com/gpu (GKE's single strategy).
GKE: Final = Preset(
    name="GKE",
    label="cloud.google.com/gke-accelerator",
    partition_label="cloud.google.com/gke-gpu-partition-size",
    values={
        "nvidia-tesla-t4": ("nvidia-tesla-t4",),
        "nvidia-tesla-v100": ("nvidia-tesla-v100",),
        "nvidia-tesla-p100": ("nvidia-tesla-p100",),
        "nvidia-tesla-p4": ("nvidia-tesla-p4",),
        "nvidia-l4": ("nvidia-l4",),
        "nvidia-tesla-a100": ("nvidia-tesla-a100",),
        "nvidia-a100-80gb": ("nvidia-a100-80gb",),
        "nvidia-h100": ("nvidia-h100-80gb", "nvidia-h100-mega-80gb"),
        "nvidia-h200": ("nvidia-h200-141gb",),
        "nvidia-rtx-pro-6000": ("nvidia-rtx-pro-6000",),
    },
    source="GKE's node label; its values are Compute Engine's accelerator types",
)

# EKS: Flyte's default gpu-device-node-label and gpu-partition-size-node-label (flyteorg/flyte v1.16.8
# flyteplugins/go/tasks/pluginmachinery/flytek8s/config/config.go:61-62). EKS sets no such label
# itself: the node groups carry it as the platform labels them, and Flyte's propeller selects the
# device name verbatim ("the value ... is not [arbitrary] ... your node label has to use one of those
# values": flyte v1.16.8 docs/user_guide/productionizing/configuring_access_to_gpus.md).
EKS: Final = Preset(
    name="EKS",
    label="k8s.amazonaws.com/accelerator",
    partition_label="k8s.amazonaws.com/gpu-partition-size",
    values=None,
    source="Flyte's default device label; its values are Flyte's device names",
)

# NVIDIA GPU feature discovery (k8s-device-plugin v0.20.0 internal/lm/resource.go): the product label
# is NVML's device name with every character but [A-Za-z0-9-_. ] dropped and blanks turned into "-"
# (sanitise), then "-MIG-<profile>" for a MIG device under the single strategy, and "-SHARED" for a
# time-sliced or MPS-shared GPU that is not renamed. NVML names one product per model only for some
# cards: "Tesla T4" (Tesla-T4), "NVIDIA L4", "NVIDIA A10G" (AWS G5), "NVIDIA L40S" (AWS G6e), as GPU
# feature discovery labels those nodes everywhere. The other models come in several form factors and
# sizes (NVIDIA-A100-SXM4-80GB and NVIDIA-A100-80GB-PCIe are both nvidia-a100-80gb), so the spec
# writes the product of its nodes itself; the L4 vWS licence has no product name of its own.
NVIDIA_GFD: Final = Preset(
    name="NVIDIA GPU feature discovery",
    label="nvidia.com/gpu.product",
    partition_label=None,
    values={
        "nvidia-tesla-t4": ("Tesla-T4",),
        "nvidia-l4": ("NVIDIA-L4",),
        "nvidia-a10g": ("NVIDIA-A10G",),
        "nvidia-l40s": ("NVIDIA-L40S",),
    },
    source="GPU feature discovery's product label; its values are NVML's product names",
    models={
        "nvidia-tesla-t4": ("T4",),
        "nvidia-l4": ("L4",),
        "nvidia-a10g": ("A10G",),
        "nvidia-l40s": ("L40S",),
        "nvidia-tesla-k80": ("K80",),
        "nvidia-tesla-m60": ("M60",),
        "nvidia-tesla-p4": ("P4",),
        "nvidia-tesla-p100": ("P100",),
        "nvidia-tesla-v100": ("V100",),
        "nvidia-tesla-a100": ("A100", "40GB"),
        "nvidia-a100-80gb": ("A100", "80GB"),
        "nvidia-h100": ("H100",),
        "nvidia-h200": ("H200",),
        "nvidia-rtx-pro-6000": ("RTX-PRO-6000",),
    },
    partition_suffix="-MIG-",
)

#: The labels elastic-compile knows, by label key.
PRESETS: Final[Mapping[str, Preset]] = {p.label: p for p in (GKE, EKS, NVIDIA_GFD)}

#: GPU feature discovery's suffix of a shared (time-sliced or MPS) GPU's product.
SHARED_SUFFIX: Final = "-SHARED"


def preset_names() -> str:
    """The presets, for messages: ``cloud.google.com/gke-accelerator (GKE), ...``."""
    return ", ".join(f"{p.label} ({p.name})" for p in PRESETS.values())


def product_names_device(preset: Preset, device: Device, value: str, partition: str | None) -> str | None:
    """Why a product label ``value`` the spec wrote does not name ``device`` (and ``partition``), or None.

    GPU feature discovery's product: words separated by ``-``, then ``-MIG-<profile>`` for a
    slice and ``-SHARED`` for a shared GPU (see :data:`NVIDIA_GFD`).
    """
    base = value.removesuffix(SHARED_SUFFIX)
    suffix = preset.partition_suffix or ""
    head, mig, profile = base.partition(suffix) if suffix else (base, "", "")
    if partition is None and mig:
        return f"names a MIG slice ({suffix}{profile}); give it as accelerator.partition"
    if partition is not None and profile != partition:
        return f"does not name a {partition} slice (GPU feature discovery writes <product>{suffix}{partition})"
    words = preset.models.get(device.name)
    if words is None:
        return f"{preset.label} has no product name for {device.name}"
    missing = [w for w in words if f"-{w}-" not in f"-{head}-"]
    if missing:
        return f"does not name {device.name} (a product of it holds {' and '.join(words)})"
    return None


class Selected(NamedTuple):
    """A device type read back from a pod's nodeSelector (``import``).

    ``keys``: the selector's entries the compiler writes again from ``accelerator`` (the
    device's label when the preset has one value for it, and the partition label); the
    others stay in ``pod_template``.
    """

    preset: Preset
    device: str
    partition: str | None
    keys: tuple[str, ...]


def read_selector(selector: Mapping[str, object]) -> Selected | None:
    """The device type a nodeSelector names on a preset's label with a value known for one device, or None.

    Only exact values are read: a product label's value names a device only where the preset
    maps that device to it (``Tesla-T4``), never by a guess at its words.
    """
    for preset in PRESETS.values():
        value = selector.get(preset.label)
        if not isinstance(value, str):
            continue
        if preset.values is None:
            devices = [value] if value in DEVICES and not DEVICES[value].tpu else []
        else:
            devices = [name for name, values in preset.values.items() if value in values]
        if len(devices) != 1:
            continue
        device = DEVICES[devices[0]]
        single = preset.values is None or len(preset.values[device.name]) == 1
        keys: tuple[str, ...] = (preset.label,) if single else ()
        partition = selector.get(preset.partition_label) if preset.partition_label else None
        if isinstance(partition, str) and preset.partition_label is not None:
            if partition not in device.partitions:
                continue  # a partition flytekit does not name: the selector stays as written
            return Selected(preset, device.name, partition, (*keys, preset.partition_label))
        return Selected(preset, device.name, None, keys)
    return None
