"""``elastic-compile SPEC -t flyte2`` and ``elastic_compile.flyte2``: located errors, data, a light path."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from flyte_helpers import IMAGE, spec_text
from support.cli import run_cli as run

from elastic_compile.compiler.cli import main
from elastic_compile.compiler.pipeline import compile_text
from elastic_compile.core.errors import CompileError, SpecError
from elastic_compile.core.loader import load_text
from elastic_compile.flyte2 import environment_settings
from elastic_compile.schema.validate import validate

ROOT = Path(__file__).resolve().parents[2]
HEADER = "name: train\nimage: trainer:v1\n"
FUNCTION = "function: trainer.main:train\n"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "elastic.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("command: [python, train.py]\n", "3:10: command: Flyte 2's Elastic runs a Python function (the task you "
         "decorate), not a command; use function: pkg.module:fn and decorate that function"),
        ("function: {target: 'a.b:c', args: [--lr, '1e-4']}\n", "3:35: function.args: Flyte 2 calls the task with "
         "its inputs, not with string arguments; make them task inputs"),
        (FUNCTION + "start_method: fork\n", "4:15: start_method: Flyte 2's Elastic always starts workers with "
         "spawn; remove it (given: fork)"),
        (FUNCTION + "nproc_per_node: auto\n", "4:17: nproc_per_node: Flyte 2's Elastic takes a number of "
         "processes; write the number, e.g. 8 (given: auto)"),
        (FUNCTION + "nnodes: 2\nnproc_per_node: gpu\nresources: {requests: {gpu: 1}}\n",
         "5:17: nproc_per_node: Flyte's ElasticConfig.nprocPerNode takes a number of processes; write the number, "
         "e.g. 8 (given: gpu)"),
        (FUNCTION + "shared_memory: true\npod_template:\n  spec:\n    containers:\n      - name: pytorch\n"
         "        volumeMounts: [{name: mine, mountPath: /dev/shm}]\n    volumes: [{name: mine, emptyDir: {}}]\n",
         "9:48: pod_template.spec.containers[0].volumeMounts[0].mountPath: you mount /dev/shm yourself, so "
         "shared_memory would be ignored (Flyte 2's backend fails a task with two); remove one of them "
         "(given: /dev/shm)"),
        (FUNCTION + "pod_template:\n  spec:\n    volumes: [{name: flyte-shm, emptyDir: {}}]\n",
         "6:22: pod_template.spec.volumes[0].name: Flyte 2's backend adds the /dev/shm volume under this name and "
         "fails the task when it exists; rename it (given: flyte-shm)"),
        (FUNCTION + "env: {HOST: 'worker-$(ELASTIC_LAUNCH_POD_NAME)'}\n", "4:13: env.HOST: Flyte 2 runs no "
         "elastic-launch, so the pod has no ELASTIC_LAUNCH_* variables and the reference would stay literal; use "
         "the downward API (valueFrom.fieldRef) instead (given: worker-$(ELASTIC_LAUNCH_POD_NAME))"),
        (FUNCTION + "restart_policy: OnFailure\n", "4:17: restart_policy: Flyte's elastic tasks run workers with "
         "restartPolicy Never (a failed pod fails the job; Flyte retries rerun it); use ExitCode or Never "
         "(given: OnFailure)"),
        (FUNCTION + "rdzv: {backend: etcd, host: etcd.example.com}\n", "4:17: rdzv.backend: Flyte's elastic tasks "
         "rendezvous with c10d on worker-0 (the backend sets no rendezvous host); use c10d (given: etcd)"),
    ],
)  # fmt: skip
def test_what_flyte2_cannot_run_is_a_located_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], body: str, expected: str
) -> None:
    path = write(tmp_path, HEADER + body)
    code, out, err = run(capsys, str(path), "-t", "flyte2")
    assert (code, out) == (2, "")
    assert err.splitlines()[0] == f"{path}:{expected}"
    # The same lines from the Python API, which never gets as far as importing flyte.
    with pytest.raises(SpecError) as e:
        environment_settings(path)
    assert str(e.value).splitlines()[0] == f"{path}:{expected}"


def test_one_run_reports_every_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "name: a--b\nimage: trainer:v1\ncommand: [train]\nstart_method: fork\n")
    code, _, err = run(capsys, str(path), "-t", "flyte2")
    assert code == 2
    assert [line.split(": ")[1] for line in err.splitlines()] == ["name", "command", "start_method"]
    assert err.splitlines()[0] == (
        f"{path}:1:7: name: Flyte 2 environment names are snake or kebab case (a single '-' or '_' between "
        "letters and digits); rename it or pass name= to environment_kwargs (given: a--b)"
    )


def test_a_user_shm_mount_is_kept_when_shared_memory_is_left_at_its_default(tmp_path: Path) -> None:
    mount = {"name": "mine", "mountPath": "/dev/shm"}
    pod = {"spec": {"containers": [{"name": "pytorch", "volumeMounts": [mount]}],
                    "volumes": [{"name": "mine", "emptyDir": {"medium": "Memory"}}]}}  # fmt: skip
    settings = environment_settings(write(tmp_path, spec_text(command=None, function="a.b:c", pod_template=pod)))
    assert "shm" not in settings["resources"]
    assert settings["pod_template"]["pod_spec"]["containers"][0]["volumeMounts"] == [mount]


def test_prints_what_environment_settings_returns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, spec_text(command=None, function="a.b:c", nnodes="1:4", env={"A": "1"}))
    code, out, err = run(capsys, str(path), "-t", "flyte2", "--format", "json")
    assert (code, err) == (0, "")
    settings = environment_settings(path)
    assert json.loads(out) == settings
    assert list(settings) == ["name", "image", "env_vars", "resources", "pod_template", "plugin_config"]
    assert settings["plugin_config"]["nnodes"] == "1:4"
    assert (settings["name"], settings["image"], settings["env_vars"]) == ("train", IMAGE, {"A": "1"})
    code, out_yaml, _ = run(capsys, str(path), "-t", "flyte2")
    assert yaml.safe_load(out_yaml) == settings
    assert "nnodes: '1:4'" in out_yaml  # a string: MIN:MAX; a fixed size prints as an int


def test_the_int_and_the_string(tmp_path: Path) -> None:
    """A fixed size is the int (1: a plain pod, as -t flyte), never the string "1" (a one-worker PyTorchJob)."""
    for nnodes, expected in ((1, 1), ("1", 1), (2, 2), ("3:3", 3), ("1:2", "1:2")):
        text = spec_text(command=None, function="a.b:c", nnodes=nnodes)
        assert environment_settings(write(tmp_path, text))["plugin_config"]["nnodes"] == expected


def test_name_argument_and_spec_objects(tmp_path: Path) -> None:
    text = spec_text(command=None, function="a.b:c")
    spec = validate(load_text(text, "elastic.yaml"))
    assert environment_settings(spec, name="trainer_v2")["name"] == "trainer_v2"
    with pytest.raises(ValueError, match="'Trainer': Flyte 2 environment names are snake or kebab case"):
        environment_settings(spec, name="Trainer")
    bad = validate(load_text(spec_text(), "elastic.yaml"))  # command:, built in Python: no file to point at
    with pytest.raises(SpecError, match=r"^<spec>:1:1: command: Flyte 2's Elastic runs a Python function"):
        environment_settings(bad)


def test_not_in_all_and_written_to_output_directories(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # -o writes below the working directory only
    path = write(tmp_path, spec_text(command=None, function="a.b:c", nnodes=2))
    code, out, _ = run(capsys, str(path), "-t", "all")
    assert code == 0
    assert [d.get("kind", "flyte task") for d in yaml.safe_load_all(out)] == ["PyTorchJob", "PodTemplate", "flyte task"]
    out_dir = tmp_path / "out"
    assert main([str(path), "-t", "flyte2", "-o", str(out_dir)]) == 0
    assert yaml.safe_load((out_dir / "flyte2-environment.yaml").read_text()) == environment_settings(path)
    assert "flyte2-environment.yaml" not in yaml.safe_load((out_dir / "kustomization.yaml").read_text())["resources"]


def test_a_custom_template_is_held_to_the_sdk_shape(tmp_path: Path) -> None:
    (tmp_path / "flyte2_environment.yaml.j2").write_text(
        "name: {{ env.name | tojson }}\nimage: {{ env.image | tojson }}\n"
        'resources: {"cpus": 2}\nplugin_config: {"nnodes": "2", "nproc_per_node": 8}\n'
        "pod_template: {{ env.pod_template | to_yaml }}\n"
    )
    with pytest.raises(CompileError) as e:
        compile_text(spec_text(command=None, function="a.b:c", nnodes=2), "elastic.yaml", ["flyte2"], tmp_path)
    assert str(e.value) == (
        f"template {tmp_path / 'flyte2_environment.yaml.j2'}: resources.cpus: unknown field; "
        "plugin_config.nnodes: expected a whole number >= 1 or MIN:MAX"
    )


def _modules_after(code: str) -> list[str]:
    probe = code + "\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))\n"
    result = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True)
    modules: list[str] = json.loads(result.stdout.splitlines()[-1])
    return modules


HEAVY = ("flyte", "flyteplugins", "flyteidl2", "torch", "kubernetes", "google")


def test_importing_and_checking_imports_no_flyte_torch_or_kubernetes(tmp_path: Path) -> None:
    path = write(tmp_path, spec_text(command=None, function="a.b:c", nnodes=2))
    for code in (
        "import elastic_compile.flyte2",
        "import io, contextlib\nfrom elastic_compile.compiler.cli import main\n"
        f"with contextlib.redirect_stdout(io.StringIO()):\n    assert main([{str(path)!r}, '-t', 'flyte2']) == 0",
        f"from elastic_compile.flyte2 import environment_settings\nenvironment_settings({str(path)!r})",
    ):
        heavy = [m for m in _modules_after(code) if m.split(".")[0] in HEAVY]
        assert heavy == [], f"{code!r} imported {heavy}"


def test_environment_kwargs_imports_flyte(tmp_path: Path) -> None:
    """The real thing, in a fresh interpreter: what the heavy import is for."""
    path = write(tmp_path, spec_text(command=None, function="a.b:c", nnodes=2))
    modules = _modules_after(
        f"from elastic_compile.flyte2 import environment_kwargs\nkw = environment_kwargs({str(path)!r})\n"
        "import flyte\nassert isinstance(kw['pod_template'], flyte.PodTemplate)"
    )
    assert {"flyte", "flyteplugins.pytorch", "kubernetes.client", "torch"} <= set(modules)


def test_missing_flyte_gives_an_install_hint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from elastic_compile.flyte2 import environment_kwargs

    monkeypatch.setitem(sys.modules, "flyte", None)  # what `import flyte` sees without the extra
    path = write(tmp_path, spec_text(command=None, function="a.b:c"))
    with pytest.raises(ImportError, match=r"pip install 'elastic-compile\[flyte2\]'"):
        environment_kwargs(path)
