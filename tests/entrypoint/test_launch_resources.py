"""``--nproc-per-node auto|cpu|gpu``: cgroup trees and /dev trees on disk, this machine's torch."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from elastic_compile.entrypoint import UsageError
from elastic_compile.entrypoint.resources import (
    Accelerators,
    cgroup_cpu_limit,
    no_accelerator_message,
    probe_accelerators,
    resolve_nproc,
    usable_cpus,
)


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


def no_probe() -> Accelerators:
    raise AssertionError("must not ask torch for accelerators")


def seen(**counts: int) -> Callable[[], Accelerators]:
    return lambda: Accelerators(counts, "test build")


def test_resolve_nproc(tmp_path: Path) -> None:
    root = cgroup(tmp_path, {"cpu.max": "300000 100000"})
    assert resolve_nproc(4, no_probe, root, affinity=16) == (4, "given")
    assert resolve_nproc("cpu", no_probe, root, affinity=16) == (3, "usable CPUs")
    assert resolve_nproc("gpu", seen(cuda=8), root, affinity=16) == (8, "NVIDIA GPU (CUDA) devices torch sees")
    assert resolve_nproc("auto", seen(cuda=2), root, affinity=16)[0] == 2
    assert resolve_nproc("auto", seen(cuda=0), root, affinity=16) == (3, "usable CPUs (torch sees no accelerator)")


@pytest.mark.parametrize(
    ("counts", "expected"),
    [
        ({"rocm": 8}, (8, "AMD GPU (ROCm)")),  # ROCm builds: AMD GPUs through torch.cuda
        ({"cuda": 0, "xpu": 4}, (4, "Intel GPU (XPU)")),
        ({"cuda": 0, "xpu": 0, "hpu": 8}, (8, "Habana Gaudi (HPU)")),
        ({"npu": 2, "cuda": 0}, (2, "npu")),  # a private-use backend torch.accelerator names
        ({"cuda": 4, "xpu": 2}, (4, "NVIDIA GPU (CUDA)")),  # the build's own accelerator comes first
    ],
)
def test_gpu_counts_every_accelerator_torch_drives(
    tmp_path: Path, counts: dict[str, int], expected: tuple[int, str]
) -> None:
    for spec in ("gpu", "auto"):
        n, why = resolve_nproc(spec, lambda: Accelerators(counts, "b"), tmp_path)
        assert (n, why.removesuffix(" devices torch sees")) == expected


def test_gpu_without_devices_is_a_usage_error_naming_the_build(tmp_path: Path) -> None:
    dev = tmp_path / "dev"
    dev.mkdir()
    with pytest.raises(UsageError) as e:
        resolve_nproc("gpu", lambda: Accelerators({"cuda": 0, "xpu": 0}, "CPU-only"), tmp_path, dev_root=dev)
    assert str(e.value) == (
        "--nproc-per-node gpu: no accelerator is visible to torch (CPU-only build; asked: NVIDIA GPU (CUDA), "
        "Intel GPU (XPU)), and the container has no accelerator device file: request the accelerator in the "
        "pod's resources (nvidia.com/gpu, amd.com/gpu, gpu.intel.com/i915, habana.ai/gaudi), or use a number or cpu"
    )


@pytest.mark.parametrize(
    ("files", "says"),
    [
        (["kfd", "dri/renderD128", "dri/renderD129"], "/dev/kfd, which needs AMD GPU: a ROCm build of torch"),
        (["dri/renderD128"], "GPU render node (Intel or AMD): an XPU build (Intel) or a ROCm build (AMD) of torch"),
        (["accel/accel0", "accel/accel1"], "Habana Gaudi: the Habana PyTorch bridge (habana_frameworks)"),
        (["nvidia0", "nvidiactl", "nvidia-uvm"], "/dev/nvidia0, which needs NVIDIA GPU: a CUDA build of torch"),
        (["neuron0"], "AWS Neuron: torch-neuronx"),
    ],
)
def test_device_files_say_which_torch_the_pod_needs(tmp_path: Path, files: list[str], says: str) -> None:
    # A real /dev-like tree: device plugins mount these files; torch (a CPU build here) sees nothing.
    dev = tmp_path / "dev"
    for name in files:
        (dev / name).parent.mkdir(parents=True, exist_ok=True)
        (dev / name).write_text("")
    message = no_accelerator_message("gpu", Accelerators({"cuda": 0}, "CPU-only"), dev)
    assert says.replace("/dev/", f"{dev}/") in message
    assert "nvidiactl" not in message  # control devices are no accelerator
    if (dev / "kfd").exists():
        assert "renderD" not in message  # AMD's render nodes come with /dev/kfd, named once


def test_probe_asks_this_machines_torch() -> None:
    torch = pytest.importorskip("torch", reason="needs torch (test extra)")
    found = probe_accelerators()
    assert found.counts["rocm" if torch.version.hip else "cuda"] == torch.cuda.device_count()
    if hasattr(torch, "xpu"):
        assert found.counts["xpu"] == torch.xpu.device_count()
    if torch.accelerator.current_accelerator() is None:  # a CPU-only build, as on the test machine
        assert found.first() is None and found.build == "CPU-only"
