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
from typing import Final

from elastic_compile.core.quantity import is_quantity, parse_quantity

HUGEPAGES_PREFIX: Final = "hugepages-"

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
