"""Class 6 of issue 10 (compiler side): accelerators beyond NVIDIA.

``amd.com/gpu: 8`` used to give one process per node, seven GPUs idle. Every device-plugin
accelerator counts for the nproc_per_node default, the lints and --explain; ``nproc_per_node:
gpu`` with none requested is an error (the pod has no device and the launcher refuses it).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cluster_helpers import BASE, compile_cli, run_cli

ACCELERATORS = [
    ("amd.com/gpu", 8),
    ("nvidia.com/gpu", 4),
    ("gpu", 2),
    ("nvidia.com/mig-1g.10gb", 1),
    ("gpu.intel.com/i915", 2),
    ("gpu.intel.com/xe", 4),
    ("habana.ai/gaudi", 8),
    ("aws.amazon.com/neuroncore", 32),
]
# AWS Neuron devices (aws.amazon.com/neuron) hold as many cores as the instance has: an error without
# nproc_per_node (tests/engines/test_accelerators.py). MIG: one slice per pod (the same file).
RULES = {"nvidia.com/mig-1g.10gb": "1, one process on the pod's one MIG slice", "aws.amazon.com/neuroncore":
         "one process per NeuronCore"}  # fmt: skip


@pytest.mark.parametrize(("resource", "count"), ACCELERATORS)
def test_every_accelerator_sets_the_nproc_default(tmp_path: Path, resource: str, count: int) -> None:
    text = BASE + f"resources: {{requests: {{{resource}: {count}, cpu: {2 * count}}}}}\n"
    run = compile_cli(tmp_path, text)
    assert (run.status, run.err) == (0, "")
    assert run.job["spec"]["nprocPerNode"] == str(count)
    name = "nvidia.com/gpu" if resource == "gpu" else resource
    assert run.training["resources"]["limits"][name] == str(count)  # a device: limit == request
    explain = compile_cli(tmp_path, text, "--explain").out
    assert f"nproc_per_node: {count}" in explain
    rule = RULES.get(name, "one process per device")
    assert f"# derived: {rule} ({name}: {count})" in explain


@pytest.mark.parametrize("resource", ["gpu.intel.com/millicores", "example.com/fpga"])
def test_shares_and_other_devices_are_not_accelerators(tmp_path: Path, resource: str) -> None:
    text = BASE + f"resources: {{limits: {{{resource}: 2}}}}\n"
    run = compile_cli(tmp_path, text)
    assert run.status == 0 and run.job["spec"]["nprocPerNode"] == "1"
    assert "# derived: 1, no accelerator is requested" in compile_cli(tmp_path, text, "--explain").out


def test_the_nproc_lint_counts_amd_gpus(tmp_path: Path) -> None:
    run = compile_cli(tmp_path, BASE + "resources: {requests: {amd.com/gpu: 8}}\nnproc_per_node: 1\n")
    assert run.status == 0
    [line] = run.errors
    assert "warning EC101: 1 processes per node, but the devices make one process per device (amd.com/gpu: 8)" in line


def test_the_cpu_lint_counts_gaudi_for_auto(tmp_path: Path) -> None:
    text = BASE + "resources: {requests: {habana.ai/gaudi: 8, cpu: 4}}\nnproc_per_node: auto\n"
    [line] = compile_cli(tmp_path, text).errors
    assert "warning EC106: cpu 4 is below nproc_per_node 8" in line


def test_nproc_gpu_without_an_accelerator_is_an_error(tmp_path: Path) -> None:
    run = compile_cli(tmp_path, BASE + "nproc_per_node: gpu\n")
    assert run.status == 2 and run.out == ""
    assert run.errors == [
        "s.yaml:4:17: nproc_per_node: gpu counts the accelerators in the pod, and resources requests none: the pod "
        "gets no device and elastic-launch refuses to start; request one (resources.requests.gpu, amd.com/gpu, ...) "
        "or give a number (given: gpu)"
    ]


@pytest.mark.parametrize("resource", ["gpu", "amd.com/gpu", "aws.amazon.com/neuroncore"])
def test_nproc_gpu_with_an_accelerator_compiles(tmp_path: Path, resource: str) -> None:
    run = compile_cli(tmp_path, BASE + f"nproc_per_node: gpu\nresources: {{limits: {{{resource}: 2}}}}\n")
    assert (run.status, run.err) == (0, "")
    assert run.job["spec"]["nprocPerNode"] == "gpu"


def test_run_fits_an_amd_job_to_this_machine(tmp_path: Path) -> None:
    """``run`` counts the same accelerators: 8 AMD GPUs per pod on a machine without them is a CPU run."""
    (tmp_path / "s.yaml").write_text(BASE + "resources: {requests: {amd.com/gpu: 8}}\n")
    result = run_cli(tmp_path / "s.yaml", "--dry-run")
    assert result.status == 0, result.err
    notes = json.loads(result.out)["notes"]
    assert any("each pod requests 8 GPU(s)" in note and "nprocPerNode 1 (was 8)" in note for note in notes), notes
