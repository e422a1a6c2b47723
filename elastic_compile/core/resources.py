"""Kubernetes resource names: which ones the API server lets you overcommit, and which are accelerators.

Facts from Kubernetes' own validation (``pkg/apis/core/helper``, ``validation.go``,
``ValidateContainerResourceRequirements``):

* a *native* resource has no domain, or a ``kubernetes.io/`` one (``cpu``, ``memory``,
  ``ephemeral-storage``, ``hugepages-2Mi``); anything else with a domain is *extended*;
* native resources other than hugepages may be overcommitted (request below limit);
  hugepages and extended resources may not: a request needs a limit, and the two must be
  equal (a limit alone is fine: the request defaults to it);
* extended resources are counted in whole units; hugepages need a cpu or memory request or
  limit beside them.

Accelerators are the extended resources a device plugin hands out one device (or one
device slice) at a time, so that one worker process per unit is the natural default.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Final

from elastic_compile.core.quantity import is_quantity, parse_quantity

HUGEPAGES_PREFIX: Final = "hugepages-"
#: The most units of an extended resource (a device) the API server takes: it checks the count
#: is whole in thousandths held in 64 bits (validateResourceQuantityValue's MilliValue), so a
#: larger one is "must be an integer" (seen on kube-apiserver 1.37).
MAX_DEVICE_UNITS: Final = (2**63 - 1) // 1000

#: Device-plugin resources counted one worker process per unit. Shares of a device
#: (gpu.intel.com/millicores, gpu.intel.com/memory.max) are not devices and are not here.
ACCELERATORS: Final = (
    "nvidia.com/gpu",  # NVIDIA device plugin
    "amd.com/gpu",  # ROCm k8s-device-plugin
    "gpu.intel.com/i915",  # Intel GPU plugin, i915 driver
    "gpu.intel.com/xe",  # Intel GPU plugin, xe driver
    "habana.ai/gaudi",  # Intel Gaudi (Habana) device plugin
    "aws.amazon.com/neuron",  # AWS Neuron devices
    "aws.amazon.com/neurondevice",
    "aws.amazon.com/neuroncore",  # AWS Neuron cores (one process per core is torch-neuronx's layout)
)
#: NVIDIA MIG slices: nvidia.com/mig-1g.10gb, nvidia.com/mig-3g.40gb, ... (one process per slice).
ACCELERATOR_PREFIXES: Final = ("nvidia.com/mig-",)


def is_native(name: str) -> bool:
    """No domain, or a kubernetes.io one: Kubernetes' own resources."""
    domain, slash, _ = name.partition("/")
    return not slash or domain == "kubernetes.io" or domain.endswith(".kubernetes.io")


def is_hugepages(name: str) -> bool:
    """``hugepages-2Mi``, ``hugepages-1Gi``, ..."""
    return name.startswith(HUGEPAGES_PREFIX)


def whole_units(amount: Decimal) -> bool:
    """Whether ``amount`` of an extended resource is a count the API server takes (whole, at most MAX_DEVICE_UNITS)."""
    return amount == amount.to_integral_value() and amount <= MAX_DEVICE_UNITS


def overcommit_allowed(name: str) -> bool:
    """Whether a request may be below the limit (cpu, memory, ephemeral-storage: yes; devices, hugepages: no)."""
    return is_native(name) and not is_hugepages(name)


def is_accelerator(name: str) -> bool:
    """A device-plugin accelerator: one worker process per unit by default."""
    return name in ACCELERATORS or name.startswith(ACCELERATOR_PREFIXES)


def accelerator_counts(*sides: Mapping[str, object]) -> dict[str, int]:
    """Accelerator units per resource name, from requests and limits (the first side that has it wins).

    Values that are not whole quantities are skipped: the schema reports those.
    """
    counts: dict[str, int] = {}
    for side in sides:
        for name, raw in side.items():
            if name in counts or not is_accelerator(name):
                continue
            text = str(raw)
            if not is_quantity(text):
                continue
            amount = parse_quantity(text)
            if amount == amount.to_integral_value() and amount >= 0:
                counts[name] = int(amount)
    return counts


# --------------------------------------------------------------------------- processes from devices

#: AWS Neuron *devices*: all the NeuronCores of each device go to the container, and processes
#: follow cores (one process per (logical) NeuronCore: the Neuron device plugin docs,
#: https://awsdocs-neuron.readthedocs-hosted.com/en/latest/containers/tutorials/k8s-neuron-device-plugin.html;
#: 2 cores per device on Trn1 and Inf2, 4 on Inf1, 8 on Trn2 seen as 4 logical cores by default:
#: the PyTorch NeuronX training guide). The count depends on the instance, which the spec cannot see.
NEURON_DEVICES: Final = ("aws.amazon.com/neuron", "aws.amazon.com/neurondevice")
NEURON_CORES: Final = "aws.amazon.com/neuroncore"
MIG_PREFIX: Final = "nvidia.com/mig-"


def is_mig(name: str) -> bool:
    """An NVIDIA MIG slice (``nvidia.com/mig-1g.10gb``), as the device plugin's mixed strategy names them."""
    return name.startswith(MIG_PREFIX)


def accelerator_problems(counts: Mapping[str, int], spelled: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
    """``(resource, why)`` for requests of accelerators the devices cannot serve as processes.

    * Two accelerator resources in one pod: no node has both kinds (or, for two MIG
      profiles, a CUDA process sees one), and the default process count would add them up.
    * More than one MIG slice: a CUDA process enumerates one MIG device only (NVIDIA MIG
      user guide, "CUDA Device Enumeration"), so every worker of the pod would land on the
      first slice. The rule: one slice per pod, and nnodes pods for more slices.

    ``spelled``: how the spec names each resource (``gpu`` for nvidia.com/gpu), for the fix.
    """
    key = dict(spelled or {})
    problems: list[tuple[str, str]] = []
    names = [name for name, count in counts.items() if count > 0]  # a zero request asks for no device
    for other in names[1:]:
        first = names[0]
        problems.append(
            (
                other,
                f"{first} and {other} in one pod: no node offers both, and the processes would be counted from "
                f"both ({counts[first] + counts[other]}); keep one (in a spec that extends a base, write "
                f"{key.get(first, first)}: null beside yours to remove the base's)",
            )
        )
    for name, count in counts.items():
        if is_mig(name) and count > 1:
            problems.append(
                (
                    name,
                    f"{count} MIG slices in one pod: a CUDA process enumerates a single MIG device, so every "
                    f"worker would run on the first slice; request 1 per pod and multiply nnodes by {count}",
                )
            )
    return problems


def process_rule(counts: Mapping[str, int]) -> tuple[int | None, str]:
    """The default worker processes per node for these accelerators, and the rule that gave it.

    None when the devices do not say (AWS Neuron devices: cores per device vary by instance).
    """
    counts = {name: count for name, count in counts.items() if count > 0}
    if not counts:
        return 1, "1, no accelerator is requested"
    described = ", ".join(f"{name}: {count}" for name, count in counts.items())
    if any(name in NEURON_DEVICES for name in counts):
        return None, f"AWS Neuron devices ({described}) hold several NeuronCores each, as many as the instance has"
    if any(is_mig(name) for name in counts):
        return 1, f"1, one process on the pod's one MIG slice ({described})"
    if NEURON_CORES in counts:
        return counts[NEURON_CORES], f"one process per NeuronCore ({described})"
    return sum(counts.values()), f"one process per device ({described})"
