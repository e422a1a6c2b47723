"""One engine interface (localrun/engine.py): what the kubelet does is the same for a PyTorchJob and a TrainJob.

The TrainJob path once counted devices by "gpu" in a resource's name (so
``gpu.intel.com/millicores: 500`` was 500 GPUs and ``habana.ai/gaudi`` none), and ignored
the container's workingDir and readOnlyRootFilesystem. Each engine here is driven through
the same steps ``run`` takes, in process, on a job the compiler wrote.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.specs import TWO_NODES as BASE

from elastic_compile import api
from elastic_compile.localrun import rootfs
from elastic_compile.localrun.cli import ENGINES
from elastic_compile.localrun.engine import Engine, emulate_read_only_root, working_directory
from elastic_compile.localrun.process import Options

TARGETS = ("pytorchjob", "trainjob")


def _engine(target: str, body: str) -> Engine:
    documents = api.compile_text(BASE + body, target).documents
    (job,) = [d for d in documents if d["kind"] in ENGINES]
    engine = ENGINES[job["kind"]](job, "t.yaml", [d for d in documents if d is not job])
    engine.check()
    return engine


def _fit(engine: Engine, gpus: list[str]) -> list[str]:
    return engine.fit(Options(source="t.yaml"), gpus=gpus, cpus=4, is_busy=lambda _port: False)


def _nproc(engine: Engine) -> str:
    spec = engine.job["spec"]
    return str(spec["trainer"].get("numProcPerNode") if "trainer" in spec else spec.get("nprocPerNode"))


@pytest.mark.parametrize("target", TARGETS)
def test_a_gaudi_job_is_scaled_down_to_a_cpu_run(target: str) -> None:
    engine = _engine(target, "nproc_per_node: 8\nresources: {limits: {habana.ai/gaudi: 8}}\n")
    notes = _fit(engine, gpus=[])
    assert _nproc(engine) == "1"
    assert any("each pod requests 8 GPU(s)" in n and "CPU run" in n for n in notes), notes


@pytest.mark.parametrize("target", TARGETS)
def test_millicores_of_a_gpu_are_not_gpus(target: str) -> None:
    engine = _engine(target, "nproc_per_node: 2\nresources: {limits: {gpu.intel.com/millicores: 500}}\n")
    notes = _fit(engine, gpus=[])
    assert _nproc(engine) == "2"
    assert not any("GPU(s)" in n for n in notes), notes


@pytest.mark.parametrize("target", TARGETS)
def test_a_pod_sees_only_the_devices_it_requests(target: str) -> None:
    gpus = ["0", "1", "2", "3"]
    for body, seen in (("", ["", ""]), ("nproc_per_node: 1\nresources: {limits: {gpu: 1}}\n", ["0", "1"])):
        engine = _engine(target, body)
        _fit(engine, gpus)
        pods, _ = engine.build_pods(environ={}, gpus=gpus, token="t", given={})
        assert [p.env["CUDA_VISIBLE_DEVICES"] for p in pods] == seen, body


CONTAINER = """\
pod_template:
  spec:
    containers:
    - name: pytorch
      workingDir: {workdir}
      securityContext: {{readOnlyRootFilesystem: true}}
      volumeMounts: [{{name: scratch, mountPath: {volume}}}]
    volumes: [{{name: scratch, emptyDir: {{}}}}]
"""


@pytest.mark.parametrize("target", TARGETS)
def test_working_dir_and_read_only_root_apply_to_both_engines(target: str, tmp_path: Path) -> None:
    (workdir := tmp_path / "image").mkdir()
    (volume := tmp_path / "volume").mkdir()
    engine = _engine(target, CONTAINER.format(workdir=workdir, volume=volume))
    _fit(engine, gpus=[])
    note = f"the pods run in the container's workingDir {workdir}"
    assert working_directory(engine, None, tmp_path) == (workdir, note)
    assert engine.read_only_root()
    pods, _ = engine.build_pods(environ={}, gpus=[], token="t", given={})
    notes = emulate_read_only_root(engine, pods, tmp_path / "scratch")
    assert notes and str(volume) in notes[0]
    for pod in pods:
        assert pod.argv[1:3] == ["-m", rootfs.__name__], pod.argv
        assert (tmp_path / "scratch" / pod.name / "volume-0").is_dir()


def test_run_names_no_engine_outside_its_module() -> None:
    """``run`` drives every engine by the interface: no kind is named in localrun/cli.py's code."""
    source = (Path(rootfs.__file__).parent / "cli.py").read_text()
    code = source.split('"""', 2)[2]  # past the module docstring
    assert [kind for kind in ENGINES if f'"{kind}"' in code] == []
