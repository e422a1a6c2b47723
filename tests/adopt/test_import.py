"""``elastic-compile import``: hand-written jobs and torchrun command lines as elastic.yaml.

The round trip is the main property: for every golden, compile -> import -> compile gives
the same bytes, and importing our own output reports nothing (it changed nothing). Then
hand-written layouts (Master + Worker, Worker-only, elastic or not), launchers in every
form we unwrap, and hostile manifests: every one either imports into a spec that
compiles, or fails with located lines and exit 2.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from support.cli import run_cli

from elastic_compile.compiler.cli import main
from elastic_compile.compiler.importer import import_stream, import_torchrun
from elastic_compile.compiler.output import stream_text
from elastic_compile.compiler.pipeline import compile_path, compile_text
from elastic_compile.core.emit import to_yaml
from elastic_compile.core.errors import SpecError

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
# Every golden: those that name target: trainjob compile to a TrainJob (and our TrainingRuntime).
CASES = sorted(p.name for p in GOLDEN.iterdir() if (p / "elastic.yaml").is_file())
LINE = re.compile(r"^[^:]+:\d+:\d+: \S+: (note|warning|cannot import): .+")


def _spec(text: str) -> dict[str, Any]:
    data = yaml.safe_load(text)
    assert isinstance(data, dict)
    return data


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, list[str]]:
    code, out, err = run_cli(capsys, "import", *argv)
    return code, out, err.splitlines()


# --------------------------------------------------------------------------- round trip


@pytest.mark.parametrize("case", CASES)
def test_golden_round_trip(case: str) -> None:
    first = stream_text([compile_path(GOLDEN / case / "elastic.yaml")], "yaml")
    (imported,) = import_stream(first, "job.yaml")
    second = stream_text([compile_text(imported.text, "imported.yaml")], "yaml")
    assert second == first
    # Our own output changed nothing, so there is nothing to say about it.
    assert [str(n) for n in imported.notes] == []


def test_imported_spec_is_clean() -> None:
    """Only what differs from the defaults is written (the minimal golden gives back its three fields)."""
    first = stream_text([compile_path(GOLDEN / "minimal" / "elastic.yaml")], "yaml")
    (imported,) = import_stream(first, "job.yaml")
    assert _spec(imported.text) == {
        "name": "minimal",
        "image": "ghcr.io/example/trainer:1.0",
        "command": ["python", "train.py"],
    }


_GKE, _EKS, _GFD = "cloud.google.com/gke-accelerator", "k8s.amazonaws.com/accelerator", "nvidia.com/gpu.product"
_names = st.from_regex(r"[a-z][a-z0-9]{0,8}", fullmatch=True)
_values = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=12)


@st.composite
def _specs(draw: st.DrawFn) -> dict[str, Any]:
    lo = draw(st.integers(1, 4))
    hi = draw(st.integers(lo, 6))
    spec: dict[str, Any] = {"name": draw(_names), "image": f"reg.example/{draw(_names)}:1", "nnodes": f"{lo}:{hi}"}
    trainjob = draw(st.booleans())
    if trainjob:
        # An elastic range too (issue 30): MAX pods, --min-nodes, our runtime's policies.
        spec.update(target="trainjob")
    if draw(st.booleans()):
        spec["command"] = ["python", "train.py", *draw(st.lists(_values, max_size=3))]
        if draw(st.booleans()):  # torchrun runs a command only
            spec["launcher"] = "torchrun"
    else:
        spec["function"] = {"target": "pkg.mod:fn", "args": draw(st.lists(_values, max_size=2))}
    gpus = draw(st.sampled_from([0, 1, 8]))
    if gpus:
        spec["resources"] = {"requests": {"gpu": gpus}, "limits": {"memory": "64Gi"}}
    spec["nproc_per_node"] = gpus or draw(st.sampled_from([1, 2] if trainjob else [1, 2, "auto", "cpu"]))
    spec["shared_memory"] = draw(st.sampled_from([True, False, "8Gi"]))
    if spec["shared_memory"] == "8Gi" and gpus:
        spec["resources"]["limits"]["memory"] = "64Gi"
    spec["max_restarts"] = draw(st.integers(0, 5))
    spec["shutdown_timeout"] = draw(st.sampled_from([30, 60]))
    spec["restart_policy"] = draw(
        st.sampled_from(["OnFailure", "Never"] if trainjob else ["ExitCode", "OnFailure", "Never"])
    )
    spec["istio_sidecar"] = draw(st.booleans())
    spec["rdzv"] = {
        "join_timeout": draw(st.sampled_from([300, 900, 1200])),
        "read_timeout": draw(st.sampled_from([60, 900])),
        "conf": draw(st.sampled_from([{}, {"keep_alive_interval": "10"}])),
    }
    if not trainjob and draw(st.booleans()):  # Trainer fixes the port
        spec["rdzv"]["port"] = draw(st.sampled_from([23456, 29400]))
    env = draw(st.dictionaries(st.from_regex(r"[A-Z][A-Z0-9_]{0,6}", fullmatch=True), _values, max_size=3))
    spec["env"] = {k: v for k, v in env.items() if not k.startswith(("PET_", "ELASTIC_LAUNCH_")) and k not in (
        "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "PYTHONUNBUFFERED")}  # fmt: skip
    if draw(st.booleans()):  # what the compiler also writes under launcher: torchrun, set by hand
        name = draw(st.sampled_from(["TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"]))
        spec["env"][name] = draw(st.sampled_from(["1", "30", "60"]))
    if trainjob:
        spec["run_policy"] = {"active_deadline_seconds": draw(st.sampled_from([600, 3600]))}
    else:
        spec["run_policy"] = {"clean_pod_policy": draw(st.sampled_from(["All", "Running", "None"]))}
    if draw(st.booleans()):
        spec["pod_template"] = {
            "spec": {
                "nodeSelector": {"pool": draw(_names)},
                "containers": [{"name": "pytorch", "imagePullPolicy": "Always"}],
            }
        }
    if gpus and draw(st.booleans()):  # a device type on a preset's label (read back by import)
        label, device = draw(st.sampled_from([(_GKE, "nvidia-l4"), (_EKS, "nvidia-h100"), (_GFD, "nvidia-tesla-t4")]))
        if gpus == 1 and label != _GFD and draw(st.booleans()):
            device = {"device": "nvidia-tesla-a100", "partition": draw(st.sampled_from(["1g.5gb", "3g.20gb"]))}
        spec.update(accelerator=device, accelerator_label=label)
        if draw(st.booleans()):
            spec["accelerator_tolerations"] = [{"key": label, "operator": "Exists", "effect": "NoSchedule"}]
    return spec


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_specs())
def test_generated_specs_round_trip(spec: dict[str, Any]) -> None:
    """PyTorchJobs and TrainJobs (with our TrainingRuntime when the spec needs one)."""
    event(spec.get("target", "pytorchjob"))
    first = stream_text([compile_text(to_yaml([spec]), "spec.yaml")], "yaml")
    (imported,) = import_stream(first, "job.yaml")
    assert stream_text([compile_text(imported.text, "imported.yaml")], "yaml") == first
    assert [str(n) for n in imported.notes] == []


# --------------------------------------------------------------------------- hand-written jobs

MASTER_WORKER = """\
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: resnet
  namespace: vision
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      restartPolicy: OnFailure
      template:
        spec:
          containers:
            - name: pytorch
              image: ghcr.io/example/resnet:2.1
              command: [python, -m, torch.distributed.run, --nproc_per_node=2, train.py, --epochs, "90"]
              resources:
                limits: {nvidia.com/gpu: 2, memory: 64Gi}
    Worker:
      replicas: 3
      restartPolicy: OnFailure
      template:
        spec:
          containers:
            - name: pytorch
              image: ghcr.io/example/resnet:2.1
              command: [python, -m, torch.distributed.run, --nproc_per_node=2, train.py, --epochs, "90"]
              resources:
                limits: {nvidia.com/gpu: 2, memory: 64Gi}
"""


def test_master_worker_folds_the_master(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(MASTER_WORKER)
    code, out, err = _run(capsys, str(job))
    assert code == 0
    assert _spec(out) == {
        "name": "resnet",
        "namespace": "vision",
        "image": "ghcr.io/example/resnet:2.1",
        "command": ["python", "train.py", "--epochs", "90"],
        "nnodes": 4,
        "resources": {"limits": {"gpu": 2, "memory": "64Gi"}},
        "restart_policy": "OnFailure",
    }
    assert all(LINE.match(line) for line in err), err
    text = "\n".join(err)
    assert f"{job}:9:7: spec.pytorchReplicaSpecs.Master: note: Master folded into Workers" in text
    assert "python -m torch.distributed.run unwrapped" in text
    assert "max_restarts 3 now (the default): the job had 0" in text
    assert "memory-backed /dev/shm now" in text
    # The comments in the spec say the same, above the values they explain.
    assert "# Master folded into Workers" in out.split("nnodes:")[0]
    # Defaults that now apply where the job behaved otherwise are comments too, not only stderr lines.
    for default in ("rdzv.join_timeout 900 s now", "monitor_interval 5 s now", "terminationGracePeriodSeconds 45 now"):
        assert f"# - {default}" in out, out
    assert compile_text(out, "spec.yaml").spec.nnodes.max == 4


def _job(**changes: Any) -> str:
    doc = yaml.safe_load(MASTER_WORKER)
    del doc["spec"]["pytorchReplicaSpecs"]["Master"]
    for path, value in changes.items():
        node = doc
        *parents, last = path.split(".")
        for part in parents:
            node = node.setdefault(part, {}) if not part.isdigit() else node[int(part)]
        if value is None:
            node.pop(last, None)
        else:
            node[last] = value
    return to_yaml([doc])


_WORKER = "spec.pytorchReplicaSpecs.Worker"
_CONTAINER = f"{_WORKER}.template.spec.containers.0"


@pytest.mark.parametrize(
    ("changes", "expected", "said"),
    [
        pytest.param({}, {"nnodes": 3}, "3 Workers without a Master or elasticPolicy", id="worker-only-static"),
        pytest.param(
            {"spec.elasticPolicy": {"minReplicas": 1, "maxReplicas": 3, "maxRestarts": 5}},
            {"nnodes": "1:3", "max_restarts": 5},
            "",
            id="elastic",
        ),
        pytest.param(
            {
                "spec.elasticPolicy": {
                    "rdzvBackend": "c10d",
                    "rdzvConf": [
                        {"key": "join_timeout", "value": "1200"},
                        {"key": "keep_alive_interval", "value": "10"},
                    ],
                    "standalone": True,
                }
            },
            {"nnodes": 3, "rdzv": {"join_timeout": 1200, "conf": {"keep_alive_interval": "10"}}},
            "standalone dropped",
            id="rdzv-conf",
        ),
        pytest.param(
            {f"{_CONTAINER}.command": ["python", "train.py"], "spec.elasticPolicy": {"maxReplicas": 2}},
            {"nnodes": 2, "command": ["python", "train.py"], "nproc_per_node": 1},
            "runs under elastic-launch now",
            id="no-launcher",
        ),
        pytest.param(
            {
                f"{_CONTAINER}.command": ["bash", "-c"],
                f"{_CONTAINER}.args": [
                    "cd /src && export NCCL_DEBUG=INFO && torchrun --nnodes=$(PET_NNODES) --nproc_per_node=$NPROC train.py"  # noqa: E501
                ],
                "spec.elasticPolicy": {"maxReplicas": 3},
            },
            {
                "command": ["python", "train.py"],
                "env": {"NCCL_DEBUG": "INFO"},
                "pod_template": {"spec": {"containers": [{"name": "pytorch", "workingDir": "/src"}]}},
            },
            "the bash script unwrapped",
            id="shell-script",
        ),
        pytest.param(
            {f"{_CONTAINER}.env": [{"name": "PET_NNODES", "value": "3"}, {"name": "HF_HOME", "value": "/data"}]},
            {"env": {"HF_HOME": "/data"}},
            "warning: PET_NNODES dropped",
            id="operator-env",
        ),
        pytest.param(
            {
                f"{_WORKER}.template.spec.volumes": [
                    {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}}
                ],
                f"{_CONTAINER}.volumeMounts": [{"name": "shm", "mountPath": "/dev/shm"}],
            },
            {"shared_memory": "8Gi"},
            "the /dev/shm volume shm becomes shared_memory",
            id="own-shm",
        ),
        pytest.param(
            # A duration elastic-launch reads (15m, 1h30m) was an internal error: the grace period is computed from it.
            {f"{_CONTAINER}.command": ["elastic-launch", "--shutdown-timeout", "1m", "--", "python", "train.py"]},
            {"shutdown_timeout": "1m"},
            "terminationGracePeriodSeconds 75 now (shutdown_timeout + 15",
            id="launcher-shutdown-duration",
        ),
        pytest.param(
            {"spec.elasticPolicy": {"maxReplicas": 3, "metrics": []}, "spec.runPolicy": {"managedByX": 1}},
            {"nnodes": 3},
            "",
            id="unknown-field",
        ),
    ],
)
def test_hand_written_layouts(changes: dict[str, Any], expected: dict[str, Any], said: str) -> None:
    (imported,) = import_stream(_job(**changes), "job.yaml")
    spec = _spec(imported.text)
    for key, value in expected.items():
        assert spec.get(key) == value, (key, imported.text)
    notes = "\n".join(map(str, imported.notes))
    assert said in notes
    compile_text(imported.text, "spec.yaml")  # what import writes, compiles


@pytest.mark.parametrize(
    ("selector", "gpus", "expected", "kept"),
    [
        ({_GKE: "nvidia-tesla-t4"}, 1, {"accelerator": "nvidia-tesla-t4", "accelerator_label": _GKE}, None),
        (
            {"pool": "a", _GKE: "nvidia-tesla-a100", "cloud.google.com/gke-gpu-partition-size": "1g.5gb"},
            1,
            {"accelerator": {"device": "nvidia-tesla-a100", "partition": "1g.5gb"}, "accelerator_label": _GKE},
            {"pool": "a"},
        ),
        # GKE's two H100 types: the device is read, and the selector that chooses one stays.
        ({_GKE: "nvidia-h100-mega-80gb"}, 8, {"accelerator": "nvidia-h100"}, {_GKE: "nvidia-h100-mega-80gb"}),
        ({_EKS: "nvidia-h200"}, 8, {"accelerator": "nvidia-h200", "accelerator_label": _EKS}, None),
        ({_GFD: "NVIDIA-L4"}, 2, {"accelerator": "nvidia-l4", "accelerator_label": _GFD}, None),
        # Not read: a product that is not one device's, a value no preset knows, no GPU, a partition flytekit
        # does not define.
        ({_GFD: "NVIDIA-A100-SXM4-80GB"}, 8, {"accelerator": None}, {_GFD: "NVIDIA-A100-SXM4-80GB"}),
        ({_GKE: "nvidia-h100-80gbx"}, 8, {"accelerator": None}, {_GKE: "nvidia-h100-80gbx"}),
        ({_GKE: "nvidia-l4"}, 0, {"accelerator": None}, {_GKE: "nvidia-l4"}),
        (
            {_GKE: "nvidia-tesla-a100", "cloud.google.com/gke-gpu-partition-size": "1g.10gb"},
            1,
            {"accelerator": None},
            {_GKE: "nvidia-tesla-a100", "cloud.google.com/gke-gpu-partition-size": "1g.10gb"},
        ),
    ],
)
def test_a_device_type_is_read_from_the_node_selector(
    selector: dict[str, str], gpus: int, expected: dict[str, Any], kept: dict[str, str] | None
) -> None:
    limits = {"nvidia.com/gpu": gpus} if gpus else {"memory": "64Gi"}
    changes: dict[str, Any] = {
        f"{_WORKER}.template.spec.nodeSelector": selector,
        f"{_CONTAINER}.resources": {"limits": limits},
    }
    (imported,) = import_stream(_job(**changes), "job.yaml")
    spec = _spec(imported.text)
    for key, value in expected.items():
        assert spec.get(key) == value, imported.text
    assert (spec.get("pod_template") or {}).get("spec", {}).get("nodeSelector") == kept
    assert not [n for n in imported.notes if "accelerator" in str(n)]
    compiled = compile_text(imported.text, "spec.yaml")  # and it compiles to the same selection
    pod = compiled.outputs[0].doc["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    assert pod["nodeSelector"] == selector


def test_unknown_fields_and_metrics_are_warnings() -> None:
    (imported,) = import_stream(
        _job(
            **{
                "spec.elasticPolicy": {"maxReplicas": 3, "metrics": []},
                "spec.runPolicy": {"cleanPodPolicy": "All", "bogus": 1},
            }
        ),
        "job.yaml",
    )
    notes = [str(n) for n in imported.notes]
    assert any("spec.runPolicy.bogus: warning: unknown field" in n for n in notes), notes
    assert any("spec.elasticPolicy.metrics: warning: cannot carry elasticPolicy.metrics" in n for n in notes), notes


def test_several_documents(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    other = _job().replace("name: resnet", "name: second")
    stream = tmp_path / "all.yaml"
    stream.write_text("apiVersion: v1\nkind: Service\nmetadata: {name: s}\n---\n" + _job() + "---\n" + other)
    code, out, err = _run(capsys, str(stream))
    assert code == 0
    docs = list(yaml.safe_load_all(out))
    assert [d["name"] for d in docs] == ["resnet", "second"]
    assert f"{stream}:1:1: spec: note: skipped (kind Service)" in "\n".join(err)


# --------------------------------------------------------------------------- torchrun


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["torchrun", "--nnodes=1:4", "--nproc-per-node=8", "train.py"], {"nnodes": "1:4", "nproc_per_node": 8}),
        (["torchrun", "--nproc_per_node", "2", "-m", "pkg.train", "--x"], {"command": ["python", "-m", "pkg.train", "--x"]}),  # noqa: E501
        (["torchrun", "--no-python", "./run.sh", "a"], {"command": ["./run.sh", "a"]}),
        (["python3", "-m", "torch.distributed.run", "--standalone", "t.py"], {"command": ["python3", "t.py"]}),
        (["torchrun", "--rdzv-backend=etcd-v2", "--rdzv-endpoint=etcd:2379", "--nnodes=2", "t.py"],
         {"rdzv": {"backend": "etcd-v2", "host": "etcd", "port": 2379}, "nnodes": 2}),
        (["torchrun", "--rdzv_conf=read_timeout=120,join_timeout=900", "--max_restarts=3", "--monitor-interval=5", "t.py"],  # noqa: E501
         {"rdzv": {"read_timeout": 120}}),
        (["torchrun", "--rdzv-id=none", "--rdzv-endpoint=localhost:29400", "--nnodes=2", "t.py"], {"nnodes": 2}),
    ],
)  # fmt: skip
def test_torchrun_command_lines(argv: list[str], expected: dict[str, Any]) -> None:
    imported = import_torchrun(argv, image="reg.example/t:1")
    spec = _spec(imported.text)
    for key, value in expected.items():
        assert spec.get(key) == value, (key, imported.text)
    assert "max_restarts" not in spec or "--max_restarts=3" not in argv  # 3 is the default: left out


@pytest.mark.parametrize("conf", ["join_timeout=900,read_timeout=900", "join_timeout=600,read_timeout=60"])
def test_torchrun_timeouts_it_set_get_no_default_note(conf: str) -> None:
    # A timeout the job set is carried (or equals the default): no "the default now applies" note.
    imported = import_torchrun(["torchrun", "--nnodes=2", f"--rdzv-conf={conf}", "t.py"], image="reg.example/t:1")
    said = [str(n) for n in imported.notes]
    assert not [n for n in said if "join_timeout" in n or "read_timeout" in n], said
    rdzv = _spec(imported.text).get("rdzv", {})
    assert rdzv == ({} if conf.startswith("join_timeout=900") else {"join_timeout": 600, "read_timeout": 60})
    # Left unset, torchrun's defaults were in force: the notes say the spec's differ.
    unset = import_torchrun(["torchrun", "--nnodes=2", "t.py"], image="reg.example/t:1")
    assert sum("torchrun used" in str(n) for n in unset.notes) == 2


def test_torchrun_through_the_cli(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "--torchrun", "--image", "reg.example/t:1", "--name", "bert", "--",
                          "torchrun", "--nnodes=2", "--log-dir=/logs", "train.py")  # fmt: skip
    assert code == 0
    assert _spec(out)["name"] == "bert"
    assert "<torchrun>:1:21: argv[2]: warning: cannot carry the log directory" in "\n".join(err), err

    code, out, err = _run(capsys, "--torchrun", "--image", "reg.example/t:1", "--name", "bert", "--message-format",
                          "json", "--", "torchrun", "--nnodes=2", "--log-dir=/logs", "train.py")  # fmt: skip
    records = [json.loads(line) for line in err]
    assert code == 0 and records, err
    carried = next(r for r in records if r["message"].startswith("cannot carry the log directory"))
    assert (carried["severity"], carried["file"], carried["line"], carried["column"]) == (
        "warning",
        "<torchrun>",
        1,
        21,
    )
    assert [(r["line"], r["column"]) for r in records] == sorted(
        (r["line"], r["column"]) for r in records
    )  # file order


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["torchrun", "--bogus", "t.py"], "<torchrun>:1:10: argv[1]: cannot import: --bogus: not a torchrun option"),
        (["torchrun", "--nnodes=2"], "cannot import: no training script after the launcher's options"),
        (["python", "train.py"], "cannot import: not a torchrun command line"),
        (["torchrun", "--no-python", "torchrun", "t.py"], "cannot import: torchrun runs another launcher"),
        (["bash", "-c", "pip install x | tee log && torchrun t.py"], "a shell script the import cannot unwrap"),
    ],
)
def test_torchrun_errors(argv: list[str], message: str) -> None:
    with pytest.raises(SpecError) as e:
        import_torchrun(argv, image="reg.example/t:1")
    assert any(message in str(p) for p in e.value.problems), e.value.problems


def test_torchrun_needs_an_image(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "--torchrun", "--", "torchrun", "t.py")
    assert (code, out) == (2, "")
    assert "give --image IMAGE" in err[-1]


# --------------------------------------------------------------------------- hostile manifests


@pytest.mark.parametrize(
    ("text", "located"),
    [
        (_job(**{f"{_WORKER}.replicas": "3"}), "job.yaml:9:17: spec.pytorchReplicaSpecs.Worker.replicas: cannot import: expected"),  # noqa: E501
        (_job(**{f"{_WORKER}.template.spec.containers": {"name": "pytorch"}}), "containers: cannot import: expected a list"),  # noqa: E501
        (_job(**{"spec.pytorchReplicaSpecs": ["Worker"]}), "spec.pytorchReplicaSpecs: cannot import: expected"),
        (_job(**{f"{_CONTAINER}.image": "has space"}), "cannot import: image: not an image reference"),
        (_job(**{f"{_CONTAINER}.env": [{"name": "N", "value": 1}]}), "env[0].value: cannot import: expected a string"),
        (_job(**{f"{_CONTAINER}.command": None}), "cannot import: the container has no command"),
        (_job(**{f"{_CONTAINER}.command": ["elastic-launch", "--shutdown-timeout", "soon", "--", "python", "t.py"]}),
         "command[1]: cannot import: shutdown_timeout: expected seconds"),
        ("a: &a [1, 2]\nb: [*a, *a, *a]\n" * 1, "nothing to import"),
        ("[" * 200 + "]" * 200, "nesting deeper than"),
        ("apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata: {name: x}\nspec: {x: !!python/object:os.system 1}\n", "tags"),  # noqa: E501
    ],
)  # fmt: skip
def test_hostile_manifests(capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, located: str) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(text)
    code, out, err = _run(capsys, str(job))
    assert (code, out) == (2, ""), err
    assert err and all(re.match(r"^[^:]+:\d+:\d+: ", line) for line in err), err
    assert located.replace("job.yaml", str(job)) in "\n".join(err) or located in "\n".join(err), err


def test_yaml11_octal_mode_says_what_to_write(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # kubectl reads 0644 as octal (YAML 1.1); our loader keeps it as text: say so, as the compiler does.
    job = tmp_path / "job.yaml"
    job.write_text(
        MASTER_WORKER
        + "          volumes:\n            - name: cfg\n              configMap: {name: c, defaultMode: 0644}\n"
    )
    code, out, err = _run(capsys, str(job))
    assert (code, out) == (2, ""), err
    (line,) = [e for e in err if "defaultMode" in e]
    assert line.endswith("configMap.defaultMode: cannot import: 0644 is the octal file mode 420 to YAML 1.1 and the "
                         "decimal 644 to YAML 1.2, so readers disagree; write 0o644 (or 420)"), line  # fmt: skip


def test_large_manifest_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_bytes(b"# " + b"x" * (2 * 1024 * 1024) + b"\n")
    code, _, err = _run(capsys, str(job))
    assert code == 2
    assert "larger than" in err[0]


def test_compile_suggests_import(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(MASTER_WORKER)
    assert main([str(job)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"{job}:1:1: apiVersion: a PyTorchJob manifest, not an elastic.yaml spec; write one from it with: "
        f"elastic-compile import {job}"
    ]


def test_compile_suggests_import_for_a_stream(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kubectl kustomize output (several documents) given where a spec goes, from a file or standard input."""
    stream = tmp_path / "all.yaml"
    stream.write_text("apiVersion: v1\nkind: Service\nmetadata: {name: s}\n---\n" + TRAINJOB)
    hint = "expected one YAML document, found several (--- separators); a stream of manifests with a TrainJob: "
    assert main([str(stream)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"{stream}:4:1: yaml: {hint}write a spec from it with: elastic-compile import {stream}"
    ]
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(stream.read_bytes())))
    assert main(["-"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"<stdin>:4:1: yaml: {hint}write a spec from it with: elastic-compile import -"
    ]
    # Two specs in one file are not manifests: no hint.
    specs = tmp_path / "specs.yaml"
    specs.write_text("name: a\n---\nkind: Job\nname: b\n")
    assert main([str(specs)]) == 2
    assert capsys.readouterr().err.strip().endswith("found several (--- separators)")


# --------------------------------------------------------------------------- TrainJob

TRAINJOB = """\
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata:
  name: mnist
  namespace: ml
  labels: {kueue.x-k8s.io/queue-name: team-a}
spec:
  runtimeRef: {name: torch-distributed}
  trainer:
    image: pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime
    command: [torchrun, --nproc-per-node=2, mnist.py, --epochs, "3"]
    numNodes: 2
    resourcesPerNode: {limits: {nvidia.com/gpu: 2}}
    env:
      - {name: PET_MASTER_PORT, value: "29500"}
      - {name: NCCL_DEBUG, value: INFO}
  runtimePatches:
    - manager: trainer.kubeflow.org/kubeflow-sdk
      trainingRuntimeSpec:
        template:
          spec:
            replicatedJobs:
              - name: node
                template:
                  spec:
                    template:
                      spec:
                        tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
"""


def test_hand_written_trainjob() -> None:
    (imported,) = import_stream(TRAINJOB, "tj.yaml")
    assert _spec(imported.text) == {
        "target": "trainjob",
        "name": "mnist",
        "namespace": "ml",
        "image": "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime",
        "command": ["python", "mnist.py", "--epochs", "3"],
        "nnodes": 2,
        "resources": {"limits": {"gpu": 2}},
        "env": {"NCCL_DEBUG": "INFO"},
        "kueue": {"queue": "team-a"},
        "pod_template": {
            "spec": {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}
        },
    }
    notes = [str(n) for n in imported.notes]
    assert "tj.yaml:15:16: spec.trainer.env[0].name: warning: PET_MASTER_PORT dropped" in "\n".join(notes)
    assert any("tj.yaml:11:15: spec.trainer.command[0]: note: torchrun unwrapped" in n for n in notes)
    compiled = compile_text(imported.text, "spec.yaml")
    assert [o.doc["kind"] for o in compiled.outputs] == ["TrainJob"]


def test_a_bare_fractional_quantity_in_a_trainjob() -> None:
    """``cpu: 1.5`` unquoted: Trainer's mutating webhook decodes the TrainJob before the API server's
    schema check, so the server takes it (kube-apiserver 1.37 stores 1500m), and so does import."""
    text = TRAINJOB.replace(
        "resourcesPerNode: {limits: {nvidia.com/gpu: 2}}", "resourcesPerNode: {requests: {cpu: 1.5}}"
    )
    (imported,) = import_stream(text, "tj.yaml")
    assert _spec(imported.text)["resources"] == {"requests": {"cpu": 1.5}}
    compiled = compile_text(imported.text, "spec.yaml")
    assert compiled.outputs[0].doc["spec"]["trainer"]["resourcesPerNode"] == {"requests": {"cpu": "1.5"}}


def test_trainjob_runtime_in_the_stream() -> None:
    """A TrainingRuntime beside the TrainJob is read with it: its sidecars, backoffLimit and pod fields."""
    runtime = yaml.safe_load(
        stream_text([compile_path(GOLDEN / "trainjob-sidecar-runtime" / "elastic.yaml")], "yaml").split("---")[0]
    )
    runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["backoffLimit"] = 5
    job = yaml.safe_load(TRAINJOB)
    job["metadata"]["name"] = "demo"
    job["spec"]["runtimeRef"] = {"name": "demo", "kind": "TrainingRuntime"}
    (imported,) = import_stream(to_yaml([runtime, job]), "all.yaml")
    spec = _spec(imported.text)
    assert spec["run_policy"]["backoff_limit"] == 5
    containers = spec["pod_template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["pytorch", "metrics"]
    assert "restartPolicy" not in containers[1]  # a native sidecar in the runtime is a sidecar in the spec
    assert spec["pod_template"]["spec"]["priorityClassName"] == "high"


def test_trainjob_with_a_malformed_runtime(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    job = yaml.safe_load(TRAINJOB)
    job["spec"]["runtimeRef"] = {"name": "rt", "kind": "TrainingRuntime"}
    runtime = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime",
               "metadata": {"name": "rt", "namespace": "ml"},
               "spec": {"template": {"spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {
                   "template": {"spec": {"containers": "abc"}}}}}]}}}}  # fmt: skip
    stream = tmp_path / "all.yaml"
    stream.write_text(to_yaml([runtime, job]))
    code, out, err = _run(capsys, str(stream))
    assert (code, out) == (2, "")
    assert any(
        line.startswith(f"{stream}:") and "containers: cannot import: expected a list" in line for line in err
    ), err


@pytest.mark.parametrize("target", ["pytorchjob", "trainjob"])
def test_bundled_launcher_round_trip(target: str) -> None:
    # The ConfigMap's volume, its mount and the pods' launcher annotations are the compiler's:
    # they become launcher: bundled, and the compiled job comes back byte for byte.
    spec = f"name: d\nimage: x:1.0\ncommand: [python, t.py]\nnnodes: 2\nlauncher: bundled\ntarget: {target}\n"
    first = stream_text([compile_text(spec, "elastic.yaml")], "yaml")
    (imported,) = import_stream(first, "job.yaml")
    assert _spec(imported.text)["launcher"] == "bundled"
    assert "elastic-launch" not in imported.text.replace("launcher: bundled", "")
    second = stream_text([compile_text(imported.text, "imported.yaml")], "yaml")
    assert second == first
    assert [str(n).partition(": note: ")[2] for n in imported.notes] == [
        "skipped (kind ConfigMap): import reads PyTorchJob (kubeflow.org/v1) or TrainJob "
        "(trainer.kubeflow.org/v1alpha1)"
    ]


@pytest.mark.parametrize("target", ["pytorchjob", "trainjob"])
@pytest.mark.parametrize("nnodes", [1, 2])
def test_torchrun_launcher_round_trip(target: str, nnodes: int) -> None:
    # The compiler's torchrun form (its --local-addr, --rdzv-conf and the env it adds for
    # torchrun) becomes launcher: torchrun again, not user env and notes about torchrun's defaults.
    spec = (
        f"name: d\nimage: x:1.0\ncommand: [python, t.py]\nnnodes: {nnodes}\nlauncher: torchrun\n"
        f"target: {target}\nshutdown_timeout: 60\nrdzv: {{join_timeout: 300}}\nenv: {{A: b}}\n"
    )
    first = stream_text([compile_text(spec, "elastic.yaml")], "yaml")
    assert "TORCH_ELASTIC_SHUTDOWN_TIMEOUT" in first and "--local-addr" in first
    (imported,) = import_stream(first, "job.yaml")
    back = _spec(imported.text)
    assert back["launcher"] == "torchrun"
    assert back["env"] == {"A": "b"}
    assert back["shutdown_timeout"] == 60
    assert back["rdzv"] == {"join_timeout": 300}
    assert stream_text([compile_text(imported.text, "imported.yaml")], "yaml") == first
    assert [str(n) for n in imported.notes] == []


@pytest.mark.parametrize("target", ["pytorchjob", "trainjob"])
@pytest.mark.parametrize(
    ("extra", "env"),
    [
        ("", {"A": "1", "TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "60", "B": "2"}),
        ("", {"A": "1", "TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "60"}),  # last of yours: the compiler's come after
        ("", {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1", "TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "60"}),  # nothing added
        ("shutdown_timeout: 45\n", {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "60", "A": "1"}),
        ("shutdown_timeout: 60\n", {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "60"}),
    ],
)
def test_torchrun_env_the_user_set_stays_theirs(target: str, extra: str, env: dict[str, str]) -> None:
    """TORCH_ELASTIC_SHUTDOWN_TIMEOUT written by hand is env, not the compiler's shutdown_timeout."""
    spec = f"name: d\nimage: x:1.0\ncommand: [python, t.py]\nlauncher: torchrun\ntarget: {target}\n{extra}"
    first = stream_text([compile_text(spec + f"env: {json.dumps(env)}\n", "elastic.yaml")], "yaml")
    (imported,) = import_stream(first, "job.yaml")
    assert stream_text([compile_text(imported.text, "imported.yaml")], "yaml") == first
    back = _spec(imported.text)
    if not extra:
        assert (back["env"], "shutdown_timeout" in back) == (env, False)


def test_bundled_launcher_without_its_volume_is_an_error() -> None:
    spec = "name: d\nimage: x:1.0\ncommand: [python, t.py]\nlauncher: bundled\n"
    (job,) = (
        d for d in yaml.safe_load_all(stream_text([compile_text(spec, "e.yaml")], "yaml")) if d["kind"] != "ConfigMap"
    )
    pod = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    del pod["volumes"]
    with pytest.raises(SpecError) as e:
        import_stream(to_yaml([job]), "job.yaml")
    assert any(
        "no ConfigMap volume elastic-launch is mounted at /opt/elastic-launch" in str(p) for p in e.value.problems
    )
