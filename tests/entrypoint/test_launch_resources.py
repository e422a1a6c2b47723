"""``--nproc-per-node auto|cpu|gpu`` against fake cgroup trees."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from elastic_compile.entrypoint import UsageError
from elastic_compile.entrypoint.resources import cgroup_cpu_limit, resolve_nproc, usable_cpus


def cgroup(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
    return root


@pytest.mark.parametrize(
    ("files", "limit"),
    [
        ({"cpu.max": "max 100000"}, None),  # v2, no limit
        ({"cpu.max": "150000 100000"}, 1.5),  # v2, 1500m
        ({"cpu.max": "400000 50000"}, 8.0),
        ({"cpu.max": "garbage"}, None),
        ({"cpu/cpu.cfs_quota_us": "-1", "cpu/cpu.cfs_period_us": "100000"}, None),  # v1, no limit
        ({"cpu/cpu.cfs_quota_us": "300000", "cpu/cpu.cfs_period_us": "100000"}, 3.0),
        ({"cpu,cpuacct/cpu.cfs_quota_us": "250000", "cpu,cpuacct/cpu.cfs_period_us": "100000"}, 2.5),
        ({}, None),
    ],
    ids=["v2-max", "v2-1500m", "v2-8", "v2-garbage", "v1-unlimited", "v1-3", "v1-cpu,cpuacct", "none"],
)
def test_cgroup_cpu_limit(tmp_path: Path, files: dict[str, str], limit: float | None) -> None:
    assert cgroup_cpu_limit(cgroup(tmp_path, files)) == limit


@pytest.mark.parametrize(
    ("cpu_max", "affinity", "expected"),
    [
        ("max 100000", 6, 6),  # no limit: the affinity mask
        ("200000 100000", 8, 2),  # a 2-CPU limit on an 8-CPU node
        ("400000 100000", 2, 2),  # a cpuset smaller than the quota
        ("150000 100000", 8, 1),  # 1.5 CPUs: rounded down
        ("50000 100000", 8, 1),  # 500m: still at least one worker
    ],
)
def test_usable_cpus_is_the_smaller_of_limit_and_affinity(
    tmp_path: Path, cpu_max: str, affinity: int, expected: int
) -> None:
    assert usable_cpus(cgroup(tmp_path, {"cpu.max": cpu_max}), affinity=affinity) == expected


def test_usable_cpus_defaults_to_this_process_affinity(tmp_path: Path) -> None:
    assert usable_cpus(tmp_path) == len(os.sched_getaffinity(0))


def no_gpu_probe() -> int:
    raise AssertionError("must not ask torch for GPUs")


def test_resolve_nproc(tmp_path: Path) -> None:
    root = cgroup(tmp_path, {"cpu.max": "300000 100000"})
    assert resolve_nproc(4, no_gpu_probe, root, affinity=16) == 4
    assert resolve_nproc("cpu", no_gpu_probe, root, affinity=16) == 3
    assert resolve_nproc("gpu", lambda: 8, root, affinity=16) == 8
    assert resolve_nproc("auto", lambda: 2, root, affinity=16) == 2
    assert resolve_nproc("auto", lambda: 0, root, affinity=16) == 3


def test_gpu_without_devices_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"^--nproc-per-node gpu: no CUDA device is visible in this container$"):
        resolve_nproc("gpu", lambda: 0, tmp_path)
