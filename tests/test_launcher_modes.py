"""``launcher``: elastic-launch (the default), bundled and torchrun, as the compiler writes them.

What runs in the pods is tested in tests/launchers/ (real processes); here: the spec field,
the bundled launcher's file and ConfigMap (built from the package's own files, byte-stable,
small), where each target puts it, and what torchrun is given.
"""

from __future__ import annotations

import ast
import hashlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from elastic_compile import contract
from elastic_compile.compiler.cli import main
from elastic_compile.compiler.pipeline import compile_text
from elastic_compile.core.errors import SpecError
from elastic_compile.targets import bundle
from elastic_compile.targets.launcher import torchrun_args

BASE = """\
name: demo
image: ghcr.io/example/train:1.0
command: [python, train.py, --lr, "1e-4"]
"""


def compiled(extra: str, targets: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    return [o.doc for o in compile_text(BASE + extra, "elastic.yaml", targets).outputs]


def training(pod_spec: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in pod_spec["containers"] if c["name"] == contract.TRAINING_CONTAINER)


def worker_pod(job: dict[str, Any]) -> dict[str, Any]:
    return dict(job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"])


def problems_of(text: str, targets: tuple[str, ...] | None = None) -> list[str]:
    """The problem lines of compiling the whole spec ``text``."""
    with pytest.raises(SpecError) as e:
        compile_text(text, "elastic.yaml", targets)
    return [str(p) for p in e.value.problems]


def problems(text: str, targets: tuple[str, ...] | None = None) -> list[str]:
    return problems_of(BASE + text, targets)


# --------------------------------------------------------------------------- the field


def test_the_default_is_elastic_launch_installed_in_the_image() -> None:
    (job,) = compiled("nnodes: 2\n")
    container = training(worker_pod(job)["spec"])
    assert container["command"] == ["elastic-launch"]
    assert container["args"][-5:] == ["--", "python", "train.py", "--lr", "1e-4"]
    assert "volumes" not in worker_pod(job)["spec"] or all(
        v["name"] != "elastic-launch" for v in worker_pod(job)["spec"]["volumes"]
    )


def test_an_unknown_launcher_is_a_located_error() -> None:
    (line,) = problems("launcher: torchrunx\n")
    assert line.startswith("elastic.yaml:4:11: launcher: "), line
    assert "'elastic-launch', 'bundled' or 'torchrun'" in line and "(given: torchrunx)" in line


def test_torchrun_cannot_call_a_function() -> None:
    (line,) = problems_of("name: demo\nimage: x:1\nfunction: pkg.train:main\nlauncher: torchrun\n")
    assert line.startswith("elastic.yaml:4:11: launcher: torchrun runs a command, not a function"), line


def test_bundled_refuses_a_volume_or_mount_of_its_own_name_or_path() -> None:
    lines = problems(
        "launcher: bundled\n"
        "pod_template:\n  spec:\n"
        "    volumes: [{name: elastic-launch, emptyDir: {}}, {name: tools, emptyDir: {}}]\n"
        "    containers:\n"
        "      - name: pytorch\n"
        "        volumeMounts: [{name: tools, mountPath: /opt/elastic-launch/}]\n"
    )
    assert lines == [
        "elastic.yaml:7:22: pod_template.spec.volumes[0].name: elastic-launch is the volume of the bundled launcher "
        "(launcher: bundled); rename yours (given: elastic-launch)",
        "elastic.yaml:10:49: pod_template.spec.containers[0].volumeMounts[0].mountPath: the bundled launcher is "
        "mounted at /opt/elastic-launch (launcher: bundled); mount yours outside it (given: /opt/elastic-launch/)",
    ]


@pytest.mark.parametrize(
    "path",
    [
        "/opt/./elastic-launch",
        "//opt/elastic-launch",
        "/opt/elastic-launch/elastic-launch.py",
        "/opt/x/../elastic-launch/a",
    ],
)
def test_bundled_refuses_a_mount_at_or_inside_its_directory_however_spelled(path: str) -> None:
    """The runtime resolves the path: another spelling, or a file inside, still shadows the bundled launcher."""
    lines = problems(
        "launcher: bundled\n"
        "pod_template:\n  spec:\n"
        "    volumes: [{name: tools, emptyDir: {}}]\n"
        "    containers:\n"
        f"      - name: pytorch\n        volumeMounts: [{{name: tools, mountPath: {path}, subPath: x.py}}]\n"
    )
    assert lines == [
        "elastic.yaml:10:49: pod_template.spec.containers[0].volumeMounts[0].mountPath: the bundled launcher is "
        f"mounted at /opt/elastic-launch (launcher: bundled); mount yours outside it (given: {path})"
    ]


def test_bundled_accepts_a_mount_beside_its_directory() -> None:
    (_configmap, job) = compiled(
        "launcher: bundled\n"
        "pod_template:\n  spec:\n"
        "    volumes: [{name: tools, emptyDir: {}}]\n"
        "    containers:\n"
        "      - name: pytorch\n        volumeMounts: [{name: tools, mountPath: /opt/elastic-launch-tools}]\n"
    )
    paths = [m["mountPath"] for m in training(worker_pod(job)["spec"])["volumeMounts"]]
    assert "/opt/elastic-launch-tools" in paths and "/opt/elastic-launch" in paths


# --------------------------------------------------------------------------- the bundled launcher's file


EXPECTED_MODULES = [
    "elastic_compile/__init__.py",
    "elastic_compile/contract.py",
    "elastic_compile/contract_values.py",
    "elastic_compile/entrypoint/__init__.py",
    *sorted(
        f"elastic_compile/entrypoint/{p.name}"
        for p in (bundle.package_root() / "entrypoint").glob("*.py")
        if p.name not in ("__init__.py", "__main__.py")
    ),
]


def test_the_bundle_holds_elastic_launch_and_the_contract_modules_it_imports() -> None:
    b = bundle.bundle()
    assert [m.relpath for m in b.modules] == EXPECTED_MODULES
    # Nothing of the compiler: the launcher imports only these (and torch, in the pod).
    assert not any(m.relpath.startswith(("elastic_compile/compiler", "elastic_compile/schema")) for m in b.modules)


def _embedded_sources(text: str) -> dict[str, str]:
    """relpath -> source, read from the generated file's ``_module(...)`` calls by Python's own parser."""
    out = {}
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "_module":
            name, is_package, relpath, source = (ast.literal_eval(arg) for arg in node.args)
            assert name.replace(".", "/") + ("/__init__.py" if is_package else ".py") == relpath
            out[relpath] = source
    return out


def test_the_configmap_holds_exactly_the_packages_code() -> None:
    (configmap, _job) = compiled("launcher: bundled\n")
    text = configmap["data"][bundle.BUNDLE_KEY]
    assert text == bundle.bundle().text
    embedded = _embedded_sources(text)
    root = bundle.package_root().parent
    assert list(embedded) == EXPECTED_MODULES
    for relpath, source in embedded.items():
        assert source.encode("utf-8") == (root / relpath).read_bytes(), relpath
    # The annotation is the file's SHA-256, as sha256sum prints it in the pod; the name carries its start.
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    assert configmap["metadata"]["annotations"] == {bundle.ANNOTATION_SHA256: digest}
    assert configmap["metadata"]["name"] == f"demo-elastic-launch-{digest[:10]}"
    assert configmap["metadata"]["labels"]["app.kubernetes.io/version"] == bundle.bundle().version
    assert configmap["immutable"] is True


_BUILD = "import sys; from elastic_compile.targets import bundle; sys.stdout.buffer.write(bundle.build().text.encode())"


def test_two_builds_are_byte_identical() -> None:
    # Separate processes with different hash seeds: no set or dict order, clock or path leaks in.
    runs = [
        subprocess.run(
            [sys.executable, "-c", _BUILD],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            check=True,
            timeout=120,
        ).stdout
        for seed in ("1", "2")
    ]
    assert runs[0] == runs[1] == bundle.bundle().text.encode("utf-8")
    assert b"/work/" not in runs[0] and str(bundle.package_root()).encode() not in runs[0]


def test_the_configmap_stays_well_under_the_one_mib_limit() -> None:
    (configmap, _job) = compiled("launcher: bundled\n")
    size = bundle.configmap_size(configmap)
    # Measured at 110 KB for 0.1.0 (12 modules); a quarter of the limit leaves room to grow.
    assert 50_000 < size < bundle.CONFIGMAP_LIMIT // 4, size


def test_a_module_that_cannot_be_embedded_verbatim_fails_the_build() -> None:
    for source in ("x = '''a'''\n", "x = 1\r\n", "x = 1"):
        module = bundle.Module("elastic_compile.x", False, "elastic_compile/x.py", source)
        with pytest.raises(ValueError, match="cannot be embedded verbatim"):
            bundle._embedded(module)


def test_the_bundle_is_the_import_closure_of_the_files_it_is_built_from(tmp_path: Path) -> None:
    # A copy of the package whose cli imports one more module of ours: the bundle follows it.
    source = bundle.package_root()
    copy = tmp_path / "elastic_compile"
    for path in source.rglob("*.py"):
        target = copy / path.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(path.read_bytes())
    cli = copy / "entrypoint" / "cli.py"
    cli.write_text(cli.read_text() + "\n\ndef _extra() -> None:\n    from elastic_compile.core import pattern\n")
    relpaths = [m.relpath for m in bundle.launcher_modules(copy)]
    assert "elastic_compile/core/pattern.py" in relpaths and "elastic_compile/core/__init__.py" not in relpaths
    assert set(EXPECTED_MODULES) < set(relpaths)


# --------------------------------------------------------------------------- where the targets put it


def test_bundled_pytorchjob_mounts_the_configmap_and_runs_it_with_the_images_python() -> None:
    configmap, job = compiled("nnodes: 2\nlauncher: bundled\n")
    assert configmap["kind"] == "ConfigMap" and job["kind"] == "PyTorchJob"  # the ConfigMap first
    pod = worker_pod(job)
    container = training(pod["spec"])
    assert container["command"] == ["python3", "/opt/elastic-launch/elastic-launch.py"]
    assert container["args"][-5:] == ["--", "python", "train.py", "--lr", "1e-4"]
    assert {"name": "elastic-launch", "mountPath": "/opt/elastic-launch", "readOnly": True} in container["volumeMounts"]
    assert {"name": "elastic-launch", "configMap": {"name": configmap["metadata"]["name"]}} in pod["spec"]["volumes"]
    assert pod["metadata"]["annotations"][bundle.ANNOTATION_SHA256] == bundle.bundle().sha256
    assert pod["metadata"]["annotations"][bundle.ANNOTATION_LAUNCHER] == "elastic-launch 0.1.0 (bundled)"


def test_all_targets_share_one_configmap_first_in_the_stream() -> None:
    docs = compiled("launcher: bundled\n", ("all",))
    assert [d["kind"] for d in docs] == ["ConfigMap", "PyTorchJob", "PodTemplate"]
    name = docs[0]["metadata"]["name"]
    volumes = [v for v in docs[2]["template"]["spec"]["volumes"] if v["name"] == "elastic-launch"]
    assert volumes == [{"name": "elastic-launch", "configMap": {"name": name}}]


def test_bundled_trainjob_carries_the_volume_in_its_runtime_patch_and_its_runtime() -> None:
    docs = compiled("nnodes: 2\nlauncher: bundled\ntarget: trainjob\n")
    assert [d["kind"] for d in docs] == ["ConfigMap", "TrainJob"]
    trainer = docs[1]["spec"]["trainer"]
    assert trainer["command"] == ["python3", "/opt/elastic-launch/elastic-launch.py"]
    assert "--rdzv-at-master" in trainer["args"]
    (patch,) = docs[1]["spec"]["runtimePatches"]
    (rjob,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    pod = rjob["template"]["spec"]["template"]["spec"]
    assert {"name": "elastic-launch", "configMap": {"name": docs[0]["metadata"]["name"]}} in pod["volumes"]
    assert {"name": "elastic-launch", "mountPath": "/opt/elastic-launch", "readOnly": True} in pod["containers"][0][
        "volumeMounts"
    ]
    own = compiled("nnodes: 2\nlauncher: bundled\ntarget: trainjob\ntrainjob: {own_runtime: always}\n")
    assert [d["kind"] for d in own] == ["ConfigMap", "TrainingRuntime", "TrainJob"]


def test_o_base_keeps_the_configmap_in_its_own_file_listed_first(tmp_path: Path) -> None:
    spec = tmp_path / "elastic.yaml"
    spec.write_text(BASE + "nnodes: 2\nlauncher: bundled\n")
    out = tmp_path / "base"
    assert main([str(spec), "-o", str(out), "--root", str(tmp_path)]) == 0
    kustomization = yaml.safe_load((out / "kustomization.yaml").read_text())
    assert kustomization["resources"] == [bundle.CONFIGMAP_FILE, "pytorchjob.yaml"]
    assert kustomization["configurations"] == ["kustomizeconfig.yaml"]
    job_text = (out / "pytorchjob.yaml").read_text()
    assert bundle.bundle().text.splitlines()[1] not in job_text  # the job's file holds no launcher code
    assert len(job_text) < 4000
    (configmap,) = yaml.safe_load_all((out / bundle.CONFIGMAP_FILE).read_text())
    assert configmap["data"][bundle.BUNDLE_KEY] == bundle.bundle().text
    # A second run writes the same bytes: --check finds nothing stale.
    assert main([str(spec), "-o", str(out), "--root", str(tmp_path), "--check"]) == 0


def test_bundled_manifest_is_literal_text_not_an_archive() -> None:
    out = compile_text(BASE + "launcher: bundled\n", "elastic.yaml").outputs
    from elastic_compile.core.emit import to_yaml

    text = to_yaml([out[0].doc])
    # The diff of a launcher change shows code: the file is a YAML literal block, line by line.
    assert "  elastic-launch.py: |\n    #!/usr/bin/env python3\n" in text
    assert "    def build_launch_config(settings: LaunchSettings, nproc: int) -> LaunchConfig:\n" in text


def test_flyte_cannot_carry_a_configmap_and_flyte2_runs_its_own_launcher() -> None:
    flyte = "flyte: {project: p, domain: development, version: v1}\n"
    (line,) = problems("launcher: bundled\n" + flyte, ("flyte",))
    assert line.startswith("elastic.yaml:4:11: launcher: Flyte creates only the pods of a task"), line
    for launcher in ("bundled", "torchrun"):
        text = f"name: demo\nimage: x:1\nfunction: pkg.train:main\nlauncher: {launcher}\n"
        if launcher == "torchrun":
            text = text.replace("function: pkg.train:main", "command: [python, t.py]")
        with pytest.raises(SpecError) as e:
            compile_text(text + flyte, "elastic.yaml", ("flyte2",))
        lines = [str(p) for p in e.value.problems if p.path == "launcher"]
        assert lines == [
            "elastic.yaml:4:11: launcher: Flyte 2's Elastic runs its own launcher in the task's process, whatever "
            f"launcher says; remove it (given: {launcher})"
        ]


def test_flyte_runs_torchrun_in_its_pod() -> None:
    flyte = "flyte: {project: p, domain: development, version: v1}\nnnodes: 2\nnproc_per_node: 4\n"
    (task,) = compiled("launcher: torchrun\n" + flyte, ("flyte",))
    pod = task["template"]["k8sPod"]["podSpec"]
    container = training(pod)
    assert container["command"] == ["torchrun"]
    assert container["args"][-2:] == ["train.py", "--lr"] or container["args"][-3:] == ["train.py", "--lr", "1e-4"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env[contract.ENV_DISABLE_SHARED_STORE] == "1"


# --------------------------------------------------------------------------- torchrun


def test_torchrun_gets_every_setting_elastic_launch_would_have() -> None:
    # The canonical case, as living documentation: a 2-node PyTorchJob.
    (job,) = compiled(
        "nnodes: 2\nlauncher: torchrun\nrestart_policy: OnFailure\nrdzv: {conf: {keep_alive_interval: '2'}}\n"
    )
    container = training(worker_pod(job)["spec"])
    assert container["command"] == ["torchrun"]
    assert container["args"] == [
        "--rdzv-id", "$(ELASTIC_LAUNCH_NAMESPACE).$(ELASTIC_LAUNCH_JOB_NAME)",
        "--rdzv-conf", "timeout=900,join_timeout=900,last_call_timeout=30,close_timeout=30,heartbeat_timeout=5,"
        "read_timeout=900,keep_alive_interval=2",
        "--monitor-interval", "5",
        "--local-addr", "$(ELASTIC_LAUNCH_POD_IP)",
        "train.py", "--lr", "1e-4",
    ]  # fmt: skip
    # nnodes, nproc, endpoint, backend and max restarts: the operator's PET_* (elasticPolicy)
    assert job["spec"]["elasticPolicy"]["maxRestarts"] == 3
    env = container["env"]
    assert env[-2:] == [
        {"name": contract.ENV_DISABLE_SHARED_STORE, "value": "1"},
        {"name": "TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "value": "30"},
    ]


@pytest.mark.parametrize(
    ("command", "program"),
    [
        (["python", "train.py", "--x"], ["train.py", "--x"]),
        (["python3", "-m", "pkg.train", "--x"], ["-m", "pkg.train", "--x"]),
        (["python", "-u", "train.py"], ["--no-python", "python", "-u", "train.py"]),
        (["/opt/conda/bin/python", "train.py"], ["--no-python", "/opt/conda/bin/python", "train.py"]),
        (["./run-training"], ["--no-python", "./run-training"]),
        (["python"], ["--no-python", "python"]),
    ],
)
def test_torchrun_runs_the_command_as_elastic_launch_would(command: list[str], program: list[str]) -> None:
    text = f"name: demo\nimage: x:1\ncommand: {command!r}\nlauncher: torchrun\n".replace("'", '"')
    (job,) = (o.doc for o in compile_text(text, "elastic.yaml").outputs)
    args = training(worker_pod(job)["spec"])["args"]
    assert args[: args.index("--local-addr") + 2][0] == "--standalone"  # one node: meets on its own pod
    assert args[args.index("--local-addr") + 2 :] == program


def test_torchrun_on_a_trainjob_meets_at_the_master() -> None:
    docs = compiled("nnodes: 2\nnproc_per_node: 2\nlauncher: torchrun\ntarget: trainjob\nrdzv: {id: exp-7}\n")
    (trainjob,) = docs
    # A shell makes node 0 the store host (schema/launchers.NODE0_SCRIPT; tests/engines/test_torchrun_node0.py).
    assert trainjob["spec"]["trainer"]["command"][:2] == ["sh", "-c"]
    args = trainjob["spec"]["trainer"]["args"]
    assert args[2:8] == [
        "--rdzv-backend", "c10d", "--rdzv-endpoint", "$(PET_MASTER_ADDR):$(PET_MASTER_PORT)", "--rdzv-id", "exp-7",
    ]  # fmt: skip
    assert args[args.index("--max-restarts") + 1] == "3"  # Trainer injects no PET_MAX_RESTARTS


def test_torchrun_args_refuse_a_function() -> None:
    from elastic_compile.schema.models import ElasticSpec

    spec = ElasticSpec.model_validate({"name": "d", "image": "x:1", "function": "a.b:c"})
    with pytest.raises(ValueError, match="not a function"):
        torchrun_args(spec.model_copy(update={"launcher": "torchrun"}), ["--"])


def test_the_bundled_launcher_in_command_is_a_nested_launcher() -> None:
    text = "name: demo\nimage: x:1\ncommand: [python3, /opt/elastic-launch/elastic-launch.py, --, python, t.py]\n"
    (line,) = problems_of(text)
    assert line.startswith("elastic.yaml:3:20: command[1]: the bundled elastic-launch would be a second launcher"), line
    assert "write command: [python, t.py]" in line
