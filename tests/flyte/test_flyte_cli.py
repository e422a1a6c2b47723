"""``elastic-compile SPEC -t flyte``: formats, ``-t all``, located errors, and a light compile path."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from flyte_helpers import BASE, compile_flyte, spec_text
from support.cli import run_cli as run

from elastic_compile.compiler.cli import main
from elastic_compile.compiler.pipeline import compile_text
from elastic_compile.core.errors import CompileError

ROOT = Path(__file__).resolve().parents[2]
# flytekitplugins itself is an empty namespace package that a .pth file creates at startup.
HEAVY = ("torch", "kubernetes", "flytekit", "flyteidl", "google.protobuf", "flytekitplugins.")


def test_yaml_by_default_and_json_on_request(write_spec: Any, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(write_spec(nnodes="1:4"))
    code, out, err = run(capsys, path, "-t", "flyte")
    assert (code, err) == (0, "")
    doc = yaml.safe_load(out)
    assert list(doc) == ["template"]
    assert doc["template"]["custom"]["workerReplicas"] == {"replicas": 4.0}
    code, out_json, _ = run(capsys, path, "-t", "flyte", "--format", "json")
    assert code == 0
    assert json.loads(out_json) == doc
    assert '"replicas": 4.0' in out_json  # a Struct double, as MessageToDict prints it


def test_without_a_flyte_section_is_a_located_error(write_spec: Any, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_spec(flyte=None)
    code, out, err = run(capsys, str(path), "-t", "flyte")
    assert (code, out) == (2, "")
    assert err == (
        f"{path}:1:1: flyte: -t flyte needs a flyte: section with project, domain and version "
        "(name defaults to the spec name)\n"
    )


def test_all_includes_flyte_only_with_a_flyte_section(write_spec: Any, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, str(write_spec(nnodes=2)), "-t", "all")
    docs = list(yaml.safe_load_all(out))
    assert code == 0
    assert [d.get("kind", "flyte task") for d in docs] == ["PyTorchJob", "PodTemplate", "flyte task"]
    code, out, _ = run(capsys, str(write_spec(nnodes=2, flyte=None)), "-t", "all")
    assert code == 0
    assert [d["kind"] for d in yaml.safe_load_all(out)] == ["PyTorchJob", "PodTemplate"]


def test_the_pod_is_the_pytorchjobs_pod(write_spec: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """Same pod template as the PyTorchJob's Worker, but for Struct doubles and Flyte's name for GPUs."""
    resources = {"requests": {"cpu": 8, "gpu": 2}}
    sidecar = {"name": "logger", "image": "busybox"}
    path = write_spec(nnodes=2, resources=resources, pod_template={"spec": {"containers": [sidecar]}})
    _, out, _ = run(capsys, str(path), "-t", "all")
    job, _podtemplate, task = yaml.safe_load_all(out)
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    pod = task["template"]["k8sPod"]
    assert pod["metadata"] == worker["metadata"]
    job_spec = json.loads(json.dumps(worker["spec"]).replace("nvidia.com/gpu", "gpu"))
    assert json.dumps(pod["podSpec"]) == json.dumps(job_spec).replace(": 45", ": 45.0")


HEADER = "name: train\nimage: trainer:v1\ncommand: [python, train.py]\nflyte: {project: p, domain: d, version: v1}\n"


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ("nnodes: 2\nnproc_per_node: auto", "6:17: nproc_per_node: Flyte's ElasticConfig.nprocPerNode takes a number "
         "of processes; write the number, e.g. 8 (given: auto)"),
        ("restart_policy: OnFailure", "5:17: restart_policy: Flyte's elastic tasks run workers with restartPolicy "
         "Never (a failed pod fails the job; Flyte retries rerun it); use ExitCode or Never (given: OnFailure)"),
        ("rdzv: {backend: etcd-v2, host: etcd}", "5:17: rdzv.backend: Flyte's elastic tasks rendezvous with c10d on "
         "worker-0 (the backend sets no rendezvous host); use c10d (given: etcd-v2)"),
        ("rdzv:\n  id: fixed", "6:7: rdzv.id: Flyte names the PyTorchJob of each attempt and the run id comes from "
         "that name; remove it (given: fixed)"),
        ("run_policy: {ttl_seconds_after_finished: 0}", "5:42: run_policy.ttl_seconds_after_finished: Flyte's "
         "RunPolicy drops a 0 (a proto3 zero value), so the job would get no ttlSecondsAfterFinished at all; use 1 "
         "or more, or remove it (given: 0)"),
        ("run_policy: {suspend: true}", "5:23: run_policy.suspend: Flyte's RunPolicy cannot create a suspended job; "
         "remove it (given: true)"),
    ],
)  # fmt: skip
def test_settings_flyte_cannot_carry_are_located_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fields: str, expected: str
) -> None:
    path = tmp_path / "elastic.yaml"
    path.write_text(HEADER + fields + "\n")
    code, out, err = run(capsys, str(path), "-t", "flyte")
    assert (code, out) == (2, "")
    assert err.splitlines()[0] == f"{path}:{expected}"


def test_one_run_reports_every_problem(write_spec: Any, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_spec(nnodes=2, nproc_per_node="gpu", resources={"requests": {"gpu": 1}}, rdzv={"host": "h", "id": "x"})
    code, _, err = run(capsys, str(path), "-t", "flyte")
    assert code == 2
    assert [line.split(": ")[1] for line in err.splitlines()] == ["nproc_per_node", "rdzv.host", "rdzv.id"]


def test_defaults_flyte_cannot_carry_are_accepted() -> None:
    """ExitCode (the default restart_policy) becomes Flyte's Never; job metadata is Flyte's to decide."""
    doc = compile_flyte(spec_text(nnodes=2, restart_policy="ExitCode", namespace="ml", labels={"team": "ml"}))
    assert "restartPolicy" not in json.dumps(doc)
    assert "namespace" not in doc["template"]["id"]


def test_single_node_gets_the_topology_as_options() -> None:
    """No operator runs for a plain pod task, so nothing injects PET_NPROC_PER_NODE."""
    text = spec_text(nproc_per_node="gpu", resources={"requests": {"gpu": 1}}, rdzv={"conf": {"is_host": "true"}})
    template = compile_flyte(text)["template"]
    args = template["k8sPod"]["podSpec"]["containers"][0]["args"]
    assert template["type"] == "python-task" and "custom" not in template
    assert args[:4] == ["--nproc-per-node", "gpu", "--rdzv-conf", "is_host=true"]
    assert args[args.index("--max-restarts") + 1] == "3"


def test_task_name_defaults_to_the_spec_name() -> None:
    named = {**BASE["flyte"], "name": "pkg.train"}
    assert compile_flyte(spec_text())["template"]["id"]["name"] == "train"
    assert compile_flyte(spec_text(flyte=named))["template"]["id"]["name"] == "pkg.train"


def test_a_custom_template_is_held_to_flyteidl_shape(tmp_path: Path) -> None:
    (tmp_path / "flyte_task.yaml.j2").write_text(
        'template: {"id": {{ task.id | to_yaml }}, "type": "pytorch", "taskTypeVersion": 1,\n'
        '  "custom": {"workerReplicas": {"replicas": 2}}, "k8sPod": {{ task.k8s_pod | to_yaml }},\n'
        '  "config": {"primary_container_name": "main"}}\n'
    )
    with pytest.raises(CompileError) as e:
        compile_text(spec_text(nnodes=2), "elastic.yaml", ["flyte"], tmp_path)
    assert str(e.value) == (
        f"template {tmp_path / 'flyte_task.yaml.j2'}: template.custom.workerReplicas.replicas: a Struct holds "
        "doubles; write 2.0; template.config.primary_container_name: must name a container of the pod (['pytorch'])"
    )


def test_directory_kustomization_lists_only_kubernetes_resources(
    write_spec: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    assert main([str(write_spec(nnodes=2)), "-t", "all", "-o", str(out)]) == 0
    assert (out / "flyte-task.yaml").is_file()
    kustomization = yaml.safe_load((out / "kustomization.yaml").read_text())
    assert "flyte-task.yaml" not in kustomization["resources"]


def test_compiling_flyte_imports_no_flytekit_flyteidl_kubernetes_or_torch(write_spec: Any) -> None:
    probe = (
        "import io, json, sys, contextlib\n"
        "from elastic_compile.compiler.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        f"    code = main([{str(write_spec(nnodes=2))!r}, '-t', 'flyte'])\n"
        "print(json.dumps([code, 'template:' in out.getvalue(), sorted(sys.modules)]))\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True)
    code, printed, modules = json.loads(result.stdout.splitlines()[-1])
    assert (code, printed) == (0, True)
    heavy = sorted(m for m in modules if m.split(".")[0] in HEAVY or m.startswith(HEAVY[-2:]))
    assert heavy == [], f"-t flyte imported {heavy}"
