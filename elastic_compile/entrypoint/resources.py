"""How many workers this container can run: ``--nproc-per-node auto|cpu|gpu``.

``os.cpu_count()`` (what torchrun uses for ``cpu``) counts the node's CPUs, not the pod's: a
pod limited to 4 CPUs on a 64-core node would start 64 workers. We read the container's
CPU limit from its cgroup and the scheduler affinity (cpusets) instead and take the smaller.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
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


def resolve_nproc(
    spec: int | str,
    gpu_count: Callable[[], int],
    cgroup_root: Path = DEFAULT_CGROUP_ROOT,
    affinity: int | None = None,
) -> int:
    """Turn ``--nproc-per-node`` into a worker count.

    ``gpu``: the visible CUDA devices (an error if none); ``cpu``: :func:`usable_cpus`;
    ``auto``: ``gpu`` when a CUDA device is visible, else ``cpu``. ``gpu_count`` is
    ``torch.cuda.device_count`` in the launcher; it is only called for ``gpu``/``auto``.
    """
    if isinstance(spec, int):
        return spec
    if spec == "cpu":
        return usable_cpus(cgroup_root, affinity)
    gpus = gpu_count()
    if spec == "gpu":
        if gpus < 1:
            raise UsageError(f"{c.OPT_NPROC_PER_NODE} gpu: no CUDA device is visible in this container")
        return gpus
    if spec == "auto":
        return gpus if gpus > 0 else usable_cpus(cgroup_root, affinity)
    raise UsageError(f"{c.OPT_NPROC_PER_NODE}: expected a positive integer, auto, cpu or gpu (given: {spec})")
