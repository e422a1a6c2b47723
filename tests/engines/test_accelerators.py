"""Issue 27, class 2: accelerators counted the way the devices work.

* Two accelerator resources in one pod: no node has both, and the default process count would
  add them up: a located error (in the file that added the second, through extends), and
  ``<inherited>: null`` in the extending spec replaces the vendor (docs/many-jobs.md null removal).
* MIG (``nvidia.com/mig-*``, the NVIDIA device plugin's mixed strategy): a CUDA process enumerates
  a single MIG device (NVIDIA MIG user guide, "CUDA Device Enumeration",
  https://docs.nvidia.com/datacenter/tesla/mig-user-guide/), so the rule is one slice per pod:
  more than one slice is an error, one slice is one process.
* AWS Neuron: ``aws.amazon.com/neuron`` (and ``neurondevice``) allocates whole devices, all their
  NeuronCores; ``aws.amazon.com/neuroncore`` allocates cores (Neuron device plugin,
  https://awsdocs-neuron.readthedocs-hosted.com/en/latest/containers/tutorials/k8s-neuron-device-plugin.html),
  and one process drives one (logical) NeuronCore (PyTorch NeuronX training guide). Cores per
  device vary by instance (2 Trn1/Inf2, 4 Trn2 by default, 4 Inf1): devices without
  nproc_per_node are an error; cores give one process each.
* ``--explain`` names the rule that gave the process count.
* On a TrainJob the count is always written as numProcPerNode: Trainer's own default would count
  CPUs for any resource whose name lacks "gpu" (kubeflow/trainer@v2.3.0:pkg/runtime/runtime.go:280-298).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from elastic_compile.compiler.cli import main
from elastic_compile.compiler.lint import lint as lints
from elastic_compile.compiler.pipeline import compile_path, compile_text
from elastic_compile.core.errors import SpecError

BASE = "name: j\nimage: x:1.0\ncommand: [python, t.py]\n"


def _errors(text: str) -> list[str]:
    with pytest.raises(SpecError) as e:
        compile_text(text, "s.yaml")
    return [str(p) for p in e.value.problems]


def _nproc(text: str, target: str = "pytorchjob") -> str:
    outputs = compile_text(text, "s.yaml", targets=(target,)).outputs
    job = next(o.doc for o in outputs if o.doc["kind"] in ("PyTorchJob", "TrainJob"))
    if target == "trainjob":
        return str(job["spec"]["trainer"]["numProcPerNode"])
    return str(job["spec"]["nprocPerNode"])


@pytest.mark.parametrize(
    ("resources", "second"),
    [
        ("{requests: {gpu: 8, amd.com/gpu: 8}}", 'resources.requests["amd.com/gpu"]'),
        ("{limits: {nvidia.com/gpu: 2, habana.ai/gaudi: 2}}", 'resources.limits["habana.ai/gaudi"]'),
        ("{requests: {nvidia.com/mig-1g.10gb: 1, nvidia.com/mig-3g.40gb: 1}}", 'resources.requests["nvidia.com/mig-3g'),
        (
            "{requests: {aws.amazon.com/neuron: 1, aws.amazon.com/neuroncore: 2}}",
            'resources.requests["aws.amazon.com/neuroncore',
        ),
    ],
)
def test_two_kinds_of_device_in_one_pod_is_an_error_at_the_second(resources: str, second: str) -> None:
    (line,) = _errors(BASE + f"resources: {resources}\n")
    assert line.startswith("s.yaml:4:") and f": {second}" in line, line
    assert "in one pod: no node offers both" in line


def test_an_extending_spec_replaces_the_vendor_with_null(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    monkeypatch.chdir(tmp_path)  # bases are read inside the repository of the current directory
    (tmp_path / "_base.elastic.yaml").write_text(BASE + "resources:\n  requests: {gpu: 8, cpu: 32}\n")
    added = tmp_path / "added.elastic.yaml"
    added.write_text("extends: _base.elastic.yaml\nname: a\nresources:\n  requests:\n    amd.com/gpu: 8\n")
    with pytest.raises(SpecError) as e:
        compile_path(added)
    (problem,) = e.value.problems
    # Located where the second vendor was written, in the extending file.
    assert (Path(problem.file).name, problem.line) == ("added.elastic.yaml", 5)
    assert "write gpu: null beside yours to remove the base's" in problem.message
    replaced = tmp_path / "replaced.elastic.yaml"
    replaced.write_text(
        "extends: _base.elastic.yaml\nname: r\nresources:\n  requests:\n    gpu: null\n    amd.com/gpu: 8\n"
    )
    job = next(o.doc for o in compile_path(replaced).outputs if o.doc["kind"] == "PyTorchJob")
    assert job["spec"]["nprocPerNode"] == "8"
    container = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert container["resources"] == {
        "requests": {"cpu": "32", "amd.com/gpu": "8"},
        "limits": {"amd.com/gpu": "8"},
    }


@pytest.mark.parametrize("target", ["pytorchjob", "trainjob"])
def test_mig_is_one_slice_per_pod(target: str) -> None:
    spec = BASE + f"target: {target}\nnnodes: 4\nresources: {{limits: {{nvidia.com/mig-1g.10gb: 1}}}}\n"
    assert _nproc(spec, target) == "1"
    (line,) = _errors(BASE + "resources: {limits: {nvidia.com/mig-1g.10gb: 4}}\n")
    assert 'resources.limits["nvidia.com/mig-1g.10gb"]: 4 MIG slices in one pod' in line
    assert "request 1 per pod and multiply nnodes by 4" in line


@pytest.mark.parametrize("device", ["aws.amazon.com/neuron", "aws.amazon.com/neurondevice"])
def test_neuron_devices_need_the_process_count(device: str) -> None:
    (line,) = _errors(BASE + f"resources: {{requests: {{{device}: 2}}}}\n")
    assert f'resources.requests["{device}"]: AWS Neuron devices ({device}: 2) hold several NeuronCores' in line
    assert "give nproc_per_node" in line and "aws.amazon.com/neuroncore" in line
    # Given, it is taken as is, with no EC101: the devices say nothing of the count.
    compiled = compile_text(BASE + f"resources: {{requests: {{{device}: 2}}}}\nnproc_per_node: 4\n", "s.yaml")
    assert [lint.code for lint in lints(compiled.spec, compiled.plan)] == []


@pytest.mark.parametrize("target", ["pytorchjob", "trainjob"])
def test_neuron_cores_are_one_process_each(target: str) -> None:
    spec = BASE + f"target: {target}\nnnodes: 2\nresources: {{requests: {{aws.amazon.com/neuroncore: 4, cpu: 16}}}}\n"
    assert _nproc(spec, target) == "4"  # not Trainer's 16 CPUs


@pytest.mark.parametrize(
    ("resources", "rule"),
    [
        ("{requests: {amd.com/gpu: 8}}", "nproc_per_node: 8 # derived: one process per device (amd.com/gpu: 8)"),
        ("{requests: {aws.amazon.com/neuroncore: 2}}", "2 # derived: one process per NeuronCore"),
        ("{limits: {nvidia.com/mig-2g.20gb: 1}}", "1 # derived: 1, one process on the pod's one MIG slice"),
        ("{requests: {cpu: 4}}", "nproc_per_node: 1 # derived: 1, no accelerator is requested"),
    ],
)
def test_explain_names_the_rule(tmp_path: Path, capsys: pytest.CaptureFixture[str], resources: str, rule: str) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(BASE + f"resources: {resources}\n")
    assert main([str(spec), "--explain"]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("nproc_per_node:"))
    assert rule in " ".join(line.split()), line


def test_a_zero_request_is_no_device() -> None:
    # Red-team: gpu: 0 beside amd.com/gpu: 8 asks for no NVIDIA device; not two kinds, and 8 processes.
    assert _nproc(BASE + "resources: {requests: {gpu: 0, amd.com/gpu: 8}}\n") == "8"
