"""How many workers this container can run: ``--nproc-per-node auto|cpu|gpu``.

``gpu`` counts any accelerator torch can drive here, not only CUDA devices: AMD GPUs (torch's
ROCm builds expose them through ``torch.cuda``), Intel XPUs, Habana Gaudi (HPU) and private-use
backends. When torch sees none, the error says which build this is and which accelerator
device files the container has, which tells a CPU-only or wrong-vendor image from a pod that
requested no accelerator.

``os.cpu_count()`` (what torchrun uses for ``cpu``) counts the node's CPUs, not the pod's: a
pod limited to 4 CPUs on a 64-core node would start 64 workers. We read the container's
CPU limit from its cgroup and the scheduler affinity (cpusets) instead and take the smaller.
"""

from __future__ import annotations

import importlib.util
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from elastic_compile import contract as c
from elastic_compile.entrypoint.settings import UsageError

# Inside a container with its own cgroup namespace (the default for cgroup v2 runtimes) and
# with Docker-style v1 mounts, this directory is the container's own cgroup.
DEFAULT_CGROUP_ROOT: Final = Path("/sys/fs/cgroup")
_V1_CPU_DIRS: Final = ("cpu", "cpu,cpuacct", "cpuacct,cpu")


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def cgroup_cpu_limit(cgroup_root: Path = DEFAULT_CGROUP_ROOT) -> float | None:
    """The CPU limit in CPUs (``1.5`` for 1500m), or ``None`` when there is none or it is unreadable.

    cgroup v2: ``cpu.max`` holds ``"<quota> <period>"`` or ``"max <period>"``.
    cgroup v1: ``cpu/cpu.cfs_quota_us`` (``-1`` for none) over ``cpu/cpu.cfs_period_us``.
    """
    v2 = _read(cgroup_root / "cpu.max")
    if v2 is not None:
        fields = v2.split()
        if len(fields) == 2 and fields[0] != "max":
            return _ratio(fields[0], fields[1])
        return None
    for name in _V1_CPU_DIRS:
        quota = _read(cgroup_root / name / "cpu.cfs_quota_us")
        period = _read(cgroup_root / name / "cpu.cfs_period_us")
        if quota is not None and period is not None:
            return _ratio(quota, period)
    return None


def _ratio(quota: str, period: str) -> float | None:
    try:
        q, p = int(quota), int(period)
    except ValueError:
        return None
    return q / p if q > 0 and p > 0 else None


def usable_cpus(cgroup_root: Path = DEFAULT_CGROUP_ROOT, affinity: int | None = None) -> int:
    """CPUs this container may use: min(cgroup limit rounded down, affinity), at least 1.

    ``affinity`` defaults to ``len(os.sched_getaffinity(0))``; tests pass it.
    """
    cpus = len(os.sched_getaffinity(0)) if affinity is None else affinity
    limit = cgroup_cpu_limit(cgroup_root)
    if limit is not None:
        cpus = min(cpus, math.floor(limit))
    return max(1, cpus)


# --------------------------------------------------------------------------- accelerators

#: What each accelerator kind is called in messages. torch reaches AMD GPUs through
#: ``torch.cuda`` in its ROCm builds (``torch.version.hip`` set), Intel GPUs through
#: ``torch.xpu``, Gaudi through ``torch.hpu`` (registered by the Habana bridge).
ACCELERATOR_NAMES: Final[Mapping[str, str]] = {
    "cuda": "NVIDIA GPU (CUDA)",
    "rocm": "AMD GPU (ROCm)",
    "xpu": "Intel GPU (XPU)",
    "hpu": "Habana Gaudi (HPU)",
    "mtia": "MTIA",
}

#: Device files that Kubernetes device plugins put into a container, the accelerator they
#: belong to, and the torch it needs: evidence for the message when torch sees none.
DEVICE_FILES: Final[tuple[tuple[str, str, str], ...]] = (
    ("nvidia[0-9]*", "NVIDIA GPU", "a CUDA build of torch"),
    ("kfd", "AMD GPU", "a ROCm build of torch"),
    ("accel/accel[0-9]*", "Habana Gaudi", "the Habana PyTorch bridge (habana_frameworks)"),
    ("hl[0-9]*", "Habana Gaudi", "the Habana PyTorch bridge (habana_frameworks)"),
    ("neuron[0-9]*", "AWS Neuron", "torch-neuronx"),
    ("dri/renderD[0-9]*", "GPU render node (Intel or AMD)", "an XPU build (Intel) or a ROCm build (AMD) of torch"),
)
DEFAULT_DEV_ROOT: Final = Path("/dev")


@dataclass(frozen=True)
class Accelerators:
    """What torch sees in this container: devices per kind (in torch's order of preference), and its build."""

    counts: Mapping[str, int]
    build: str  # "CUDA 12.8", "ROCm 6.4", "CPU-only", ... for messages

    def first(self) -> tuple[str, int] | None:
        """The kind to use, with its device count; None when torch sees no accelerator."""
        return next(((kind, n) for kind, n in self.counts.items() if n > 0), None)


def probe_accelerators() -> Accelerators:
    """Ask this container's torch for every accelerator it can drive (imports torch).

    Never initialises a device context: ``device_count`` is what torchrun itself calls
    before starting workers. Each backend is asked only if this torch has it; a backend
    that fails to answer counts as none.
    """
    import torch

    counts: dict[str, int] = {}

    def ask(kind: str, count: Callable[[], int]) -> None:
        try:
            n = int(count())
        except Exception:  # a broken driver stack is "none visible", reported as such
            n = 0
        counts[kind] = max(counts.get(kind, 0), n)

    current = torch.accelerator.current_accelerator()
    hip = getattr(torch.version, "hip", None)
    ask("rocm" if hip else "cuda", torch.cuda.device_count)
    for kind in ("xpu", "hpu", "mtia"):
        module = getattr(torch, kind, None)
        if module is not None and hasattr(module, "device_count"):
            ask(kind, module.device_count)
    if "hpu" not in counts and importlib.util.find_spec("habana_frameworks") is not None:
        # Older Gaudi stacks register torch.hpu only once their bridge is imported.
        def habana() -> int:
            from habana_frameworks.torch import hpu  # type: ignore[import-not-found]

            return int(hpu.device_count())

        ask("hpu", habana)
    if current is not None and current.type not in ("cuda", *counts):
        ask(current.type, torch.accelerator.device_count)  # a private-use backend (npu, ...)
    # The build's own accelerator first: that is the one torch.accelerator would pick.
    first = "rocm" if current is not None and current.type == "cuda" and hip else getattr(current, "type", None)
    ordered = dict(sorted(counts.items(), key=lambda kv: kv[0] != first))
    if hip:
        build = f"ROCm {hip}"
    elif torch.version.cuda:
        build = f"CUDA {torch.version.cuda}"
    elif getattr(torch.version, "xpu", None):
        build = f"XPU {torch.version.xpu}"
    else:
        build = "CPU-only" if current is None else current.type
    return Accelerators(ordered, build)


def device_files(dev_root: Path = DEFAULT_DEV_ROOT) -> list[tuple[str, str, str]]:
    """``(path, accelerator, what torch it needs)`` for each accelerator device file in the container."""
    found: list[tuple[str, str, str]] = []
    seen: set[str] = set()
    for pattern, what, needs in DEVICE_FILES:
        for path in sorted(dev_root.glob(pattern)):
            if what.startswith("GPU render") and any(w == "AMD GPU" for _p, w, _n in found):
                continue  # AMD's render nodes come with /dev/kfd, already named
            if str(path) not in seen:
                seen.add(str(path))
                found.append((str(path), what, needs))
    return found


def no_accelerator_message(spec: str, accelerators: Accelerators, dev_root: Path = DEFAULT_DEV_ROOT) -> str:
    """Why ``--nproc-per-node gpu`` has nothing to count, with the evidence and the fix."""
    kinds = ", ".join(ACCELERATOR_NAMES.get(k, k) for k in accelerators.counts) or "none"
    text = (
        f"{c.OPT_NPROC_PER_NODE} {spec}: no accelerator is visible to torch "
        f"({accelerators.build} build; asked: {kinds})"
    )
    files = device_files(dev_root)
    if files:
        shown = ", ".join(p for p, _w, _n in files[:4]) + (", ..." if len(files) > 4 else "")
        wants = sorted({f"{w}: {n}" for _p, w, n in files})
        return f"{text}; the container has {shown}, which needs {'; '.join(wants)}"
    return (
        f"{text}, and the container has no accelerator device file: request the accelerator in the pod's "
        "resources (nvidia.com/gpu, amd.com/gpu, gpu.intel.com/i915, habana.ai/gaudi), or use a number or cpu"
    )


def resolve_nproc(
    spec: int | str,
    accelerators: Callable[[], Accelerators],
    cgroup_root: Path = DEFAULT_CGROUP_ROOT,
    affinity: int | None = None,
    dev_root: Path = DEFAULT_DEV_ROOT,
) -> tuple[int, str]:
    """Turn ``--nproc-per-node`` into a worker count, and say where it came from.

    ``gpu``: the devices of the accelerator torch sees (NVIDIA, AMD through ROCm, Intel
    XPU, Habana HPU, a private-use backend), an error if none; ``cpu``:
    :func:`usable_cpus`; ``auto``: ``gpu`` when an accelerator is visible, else ``cpu``.
    ``accelerators`` is :func:`probe_accelerators` in the launcher; it is only called for
    ``gpu``/``auto``.
    """
    if isinstance(spec, int):
        return spec, "given"
    if spec == "cpu":
        return usable_cpus(cgroup_root, affinity), "usable CPUs"
    if spec not in ("gpu", "auto"):
        raise UsageError(f"{c.OPT_NPROC_PER_NODE}: expected a positive integer, auto, cpu or gpu (given: {spec})")
    seen = accelerators()
    first = seen.first()
    if first is not None:
        kind, n = first
        return n, f"{ACCELERATOR_NAMES.get(kind, kind)} devices torch sees"
    if spec == "gpu":
        raise UsageError(no_accelerator_message(spec, seen, dev_root))
    return usable_cpus(cgroup_root, affinity), "usable CPUs (torch sees no accelerator)"
