"""``elastic-compile doctor``: every rule fires on a manifest that has its trap, and only there.

Each rule is tested with a manifest that has it (the code, the exact location) and its
near twin that does not; the compiler's own output passes every rule it does not opt out
of; streams, standard input and hostile input behave.
"""

from __future__ import annotations

import copy
import io
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from elastic_compile.compiler import doctor
from elastic_compile.compiler.cli import main
from elastic_compile.compiler.lint import lint
from elastic_compile.compiler.output import stream_text
from elastic_compile.compiler.pipeline import compile_path, compile_text
from elastic_compile.core.emit import to_yaml

GOLDEN = Path(__file__).resolve().parents[1] / "golden"

# A hand-written job with none of the traps: Worker-only, elastic, restarts set, /dev/shm,
# a native sidecar, torchrun reading what the operator injects, restarted in place on failure.
CLEAN: dict[str, Any] = yaml.safe_load(
    """
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: clean}
spec:
  elasticPolicy: {rdzvBackend: c10d, minReplicas: 1, maxReplicas: 3, maxRestarts: 3}
  nprocPerNode: "2"
  runPolicy: {cleanPodPolicy: Running, activeDeadlineSeconds: 86400}
  pytorchReplicaSpecs:
    Worker:
      replicas: 3
      restartPolicy: OnFailure
      template:
        metadata:
          annotations: {sidecar.istio.io/inject: "false"}
        spec:
          initContainers:
            - {name: logs, image: fluent/fluent-bit:3.0, restartPolicy: Always}
          containers:
            - name: pytorch
              image: ghcr.io/example/train:1.0
              command: [torchrun, train.py]
              env: [{name: NCCL_DEBUG, value: WARN}]
              volumeMounts: [{name: dshm, mountPath: /dev/shm}]
          volumes:
            - {name: dshm, emptyDir: {medium: Memory}}
"""
)
W = "spec.pytorchReplicaSpecs.Worker"
C = f"{W}.template.spec.containers.0"


def _with(base: dict[str, Any] | None = None, **changes: Any) -> dict[str, Any]:
    """CLEAN (or ``base``) with dotted paths set (None removes; a list index is a number)."""
    doc = copy.deepcopy(CLEAN if base is None else base)
    for path, value in changes.items():
        node: Any = doc
        *parents, last = path.split(".")
        for part in parents:
            node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
        if value is None:
            node.pop(int(last) if last.isdigit() else last)
        elif last.isdigit() and int(last) == len(node):
            node.append(value)
        elif last.isdigit():
            node[int(last)] = value
        else:
            node[last] = value
    return doc


def _codes(doc: dict[str, Any] | list[dict[str, Any]]) -> list[str]:
    report = doctor.doctor_stream(to_yaml(doc if isinstance(doc, list) else [doc]), "job.yaml")
    return [p.message.split(" ", 1)[0] for p in report.problems]


TRAINJOB: dict[str, Any] = yaml.safe_load(
    """
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: clean}
spec:
  runtimeRef: {name: torch-distributed}
  trainer:
    image: ghcr.io/example/train:1.0
    command: [torchrun, train.py]
    numNodes: 2
    numProcPerNode: 2
  runtimePatches:
    - manager: example.com/team
      trainingRuntimeSpec:
        template:
          spec:
            replicatedJobs:
              - name: node
                template:
                  spec:
                    template:
                      spec:
                        containers: [{name: node, volumeMounts: [{name: dshm, mountPath: /dev/shm}]}]
                        volumes: [{name: dshm, emptyDir: {medium: Memory}}]
"""
)
RUNTIME: dict[str, Any] = yaml.safe_load(
    """
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainingRuntime
metadata: {name: clean, labels: {trainer.kubeflow.org/framework: torch}}
spec:
  mlPolicy: {numNodes: 2, torch: {}}
  template:
    spec:
      replicatedJobs:
        - name: node
          replicas: 1
          template:
            metadata: {labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}}
            spec:
              template:
                spec:
                  containers: [{name: node, image: ghcr.io/example/train:1.0}]
"""
)
T = "spec.trainer"
RJ = "spec.template.spec.replicatedJobs.0.template.spec.template.spec"


def _tj(runtime: dict[str, Any] | None = None, **changes: Any) -> list[dict[str, Any]]:
    """TRAINJOB with changes; with ``runtime``, that runtime first and the job referencing it."""
    job = _with(base=TRAINJOB, **changes)
    if runtime is None:
        return [job]
    job["spec"]["runtimeRef"] = {"name": "clean", "kind": "TrainingRuntime"}
    return [runtime, job]


def test_clean_job_has_nothing() -> None:
    assert _codes(CLEAN) == []
    assert _codes(_tj()) == []
    assert _codes(_tj(RUNTIME)) == []


# (code, the manifest with the trap, the path where it is reported)
CASES: list[tuple[str, dict[str, Any] | list[dict[str, Any]], str]] = [
    ("DR001", _with(**{f"{C}.name": "trainer"}), f"{W}.template.spec.containers"),
    ("DR001", _with(**{"metadata.name": "Clean"}), "metadata.name"),
    # Python's "$" matches before a final newline; the rule (core/names.py) ends with \Z.
    ("DR001", _with(**{"metadata.name": "llama\n"}), "metadata.name"),
    ("DR002", _with(**{f"{W}.replicas": "3"}), f"{W}.replicas"),
    ("DR002", _with(**{"spec.runPolicy.cleanPodPolicyy": "All"}), "spec.runPolicy.cleanPodPolicyy"),
    ("DR003", _with(**{"spec.pytorchReplicaSpecs.Master": {"replicas": 1, "restartPolicy": "OnFailure",
                       "template": CLEAN["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]}}),
     "spec.pytorchReplicaSpecs.Master"),
    ("DR004", _with(**{"spec.elasticPolicy.standalone": True}), "spec.elasticPolicy.standalone"),
    ("DR005", _with(**{"spec.elasticPolicy.rdzvConf": []}), "spec.elasticPolicy.rdzvConf"),
    ("DR006", _with(**{f"{W}.replicas": 5}), f"{W}.replicas"),
    ("DR007", _with(**{"metadata.name": "a" * 55}), "metadata.name"),
    ("DR008", _with(**{f"{C}.volumeMounts": None}), C),
    ("DR009", _with(**{f"{C}.command": ["torchrun", "--nnodes=3", "train.py"]}), f"{C}.command[1]"),
    ("DR009", _with(**{f"{C}.command": ["torchrun", "--standalone", "train.py"]}), f"{C}.command[1]"),
    ("DR010", _with(**{f"{C}.command": ["torchrun", "--no-python", "torchrun", "train.py"]}), f"{C}.command[2]"),
    ("DR011", _with(**{f"{C}.env": [{"name": "PET_NNODES", "value": "3"}]}), f"{C}.env[0].name"),
    ("DR011", _with(**{f"{C}.env": [{"name": "WORLD_SIZE", "value": "6"}]}), f"{C}.env[0].name"),
    ("DR012", _with(**{f"{W}.template.spec.containers.1": {"name": "logs", "image": "fluent/fluent-bit:3.0"}}),
     f"{W}.template.spec.containers[1]"),
    ("DR013", _with(**{"spec.elasticPolicy": None}), f"{W}.replicas"),
    ("DR014", _with(**{"spec.elasticPolicy.maxRestarts": None}), "spec.elasticPolicy"),
    ("DR015", _with(**{"spec.runPolicy.backoffLimit": 3, f"{W}.restartPolicy": "Never"}),
     "spec.runPolicy.backoffLimit"),
    ("DR016", _with(**{f"{W}.restartPolicy": None}), W),
    ("DR017", _with(**{f"{W}.template.spec.restartPolicy": "Never"}), f"{W}.template.spec.restartPolicy"),
    ("DR018", _with(**{f"{W}.template.metadata.annotations": {"sidecar.istio.io/inject": "true"}}),
     f'{W}.template.metadata.annotations["sidecar.istio.io/inject"]'),
    ("DR019", _with(**{f"{W}.template.spec.hostNetwork": True}), f"{W}.template.spec.hostNetwork"),
    ("DR020", _with(**{"spec.pytorchReplicaSpecs": {}}), "spec.pytorchReplicaSpecs"),
    ("DR021", _tj(**{f"{T}.env": [{"name": "PET_NNODES", "value": "2"}]}), f"{T}.env.0.name"),
    ("DR021", _tj(**{f"{T}.numProcPerNode": 0}), f"{T}.numProcPerNode"),
    ("DR007", _tj(**{"metadata.name": "a" * 49}), "metadata.name"),
    ("DR022", _tj(_with(base=RUNTIME, **{"metadata.labels": None})), "metadata.labels"),
    ("DR023", _tj(**{f"{T}.command": ["python", "train.py"]}), f"{T}.command"),
    ("DR023", _tj(**{f"{T}.command": ["python", "t.py"], f"{T}.numNodes": 1, f"{T}.numProcPerNode": None,
                     f"{T}.resourcesPerNode": {"limits": {"nvidia.com/gpu": "2"}}}), f"{T}.command"),
    ("DR024", _tj(_with(base=RUNTIME, **{"spec.template.spec.ttlSecondsAfterFinished": 60})),
     "spec.template.spec.ttlSecondsAfterFinished"),
    # An overlay that lowers numNodes below the elastic minimum (red team: the pods crash-loop).
    ("DR031", _tj(**{f"{T}.command": ["elastic-launch", "--min-nodes", "3", "--", "python", "t.py"],
                     f"{T}.numNodes": 2}), f"{T}.numNodes"),
    ("DR031", _tj(**{f"{T}.command": ["torchrun", "--nnodes=3:$(PET_NNODES)", "train.py"], f"{T}.numNodes": 2}),
     f"{T}.numNodes"),
    # Read as torchrun reads it (schema/launchers.parse_torchrun), inside a plain shell script too.
    ("DR031", _tj(**{f"{T}.command": ["bash", "-c"], f"{T}.args": ["cd /w && torchrun --nnodes 3:4 train.py"],
                     f"{T}.numNodes": 2}), f"{T}.numNodes"),
    # An elastic range run by Trainer's stock runtime, or by a runtime without the node Job's successPolicy.
    ("DR032", _tj(**{f"{T}.command": ["elastic-launch", "--rdzv-at-master", "--min-nodes", "1", "--", "python",
                                      "t.py"]}), "spec.runtimeRef.name"),
    ("DR032", _tj(**{f"{T}.command": ["torchrun", "--nnodes=1:$(PET_NNODES)", "train.py"]}), "spec.runtimeRef.name"),
    ("DR032", _tj(**{f"{T}.command": ["bash", "-c"], f"{T}.args": ["cd /w && torchrun --nnodes 1:4 train.py"]}),
     "spec.runtimeRef.name"),
    ("DR032", _tj(RUNTIME, **{f"{T}.command": ["elastic-launch", "--rdzv-at-master", "--min-nodes=1", "--",
                                               "python", "t.py"]}), "spec.runtimeRef.name"),
    ("DR025", _with(**{"spec.elasticPolicy.rdzvConf": [{"key": "keep_alive_interval", "value": "5"},
                                                       {"key": "is_host", "value": "true"}]}),
     "spec.elasticPolicy.rdzvConf.1.value"),
    ("DR025", _with(**{"spec.elasticPolicy.rdzvConf": [{"key": "is_host", "value": "0"}]}),
     "spec.elasticPolicy.rdzvConf.0.value"),
    ("DR026", _with(**{f"{W}.restartPolicy": "ExitCode"}), f"{W}.restartPolicy"),
    ("DR026", _with(**{f"{W}.restartPolicy": "ExitCode", f"{C}.command": ["python3", "-m", "torch.distributed.run",
                                                                          "train.py"]}), f"{W}.restartPolicy"),
    ("DR026", _with(**{f"{W}.restartPolicy": "ExitCode", f"{C}.command": ["sh", "-c", "cd /w && torchrun t.py"]}),
     f"{W}.restartPolicy"),
    ("DR008", _tj(**{"spec.runtimePatches": None}), T),
    ("DR009", _tj(**{f"{T}.command": ["torchrun", "--nnodes=3", "train.py"]}), f"{T}.command.1"),
    ("DR011", _tj(**{f"{T}.env": [{"name": "WORLD_SIZE", "value": "4"}]}), f"{T}.env.0.name"),
    ("DR012", _tj(_with(base=RUNTIME, **{f"{RJ}.containers.1": {"name": "logs", "image": "x:1"}})),
     f"{RJ}.containers.1"),
    # The compiler's pod-value rules and text lints, on what a hand-written job carries.
    ("DR027", _with(**{f"{C}.imagePullPolicy": "always"}), f"{C}.imagePullPolicy"),
    ("DR027", _tj(**{f"{T}.env": [{"name": "1BAD", "value": "x"}]}), f"{T}.env.0.name"),
    ("DR027", _tj(**{f"{T}.resourcesPerNode": {"limits": {"cpu": "1"}, "requests": {"cpu": "2"}}}),
     f"{T}.resourcesPerNode.requests.cpu"),
    ("DR027", _tj(**{f"spec.runtimePatches.0.trainingRuntimeSpec.{RJ[5:]}.tolerations":
                     [{"key": "a", "operator": "Exists", "value": "x"}]}),
     f"spec.runtimePatches.0.trainingRuntimeSpec.{RJ[5:]}.tolerations.0.value"),
    ("DR027", _tj(_with(base=RUNTIME, **{f"{RJ}.containers.0.imagePullPolicy": "sometimes"})),
     f"{RJ}.containers.0.imagePullPolicy"),
    ("DR028", _with(**{f"{C}.env.1": {"name": "API_TOKEN", "value": "s3cr3t"}}), f"{C}.env.1.value"),
    ("DR028", _with(**{f"{C}.args": ["--token", "ghp_" + "a" * 36]}), f"{C}.args.1"),
    ("DR028", _tj(**{f"{T}.env": [{"name": "HF_TOKEN", "value": "hf_" + "b" * 34}]}), f"{T}.env.0.value"),
    ("DR029", _with(**{f"{C}.args": ["--out=/data\u202e/x"]}), f"{C}.args.0"),
    ("DR029", _tj(**{f"{T}.command": ["torchrun", "train.py\u200b"]}), f"{T}.command.1"),
    ("DR030", _with(**{f"{C}.args": ["--cfg=a\nimage: evil:1"]}), f"{C}.args.0"),
    ("DR030", _with(**{f"{W}.template.metadata.annotations.note": "x" + " " * 40 + "y"}),
     f"{W}.template.metadata.annotations.note"),
]  # fmt: skip

# The near twins: the same setting written the way that works.
NEAR_MISSES: list[tuple[str, dict[str, Any] | list[dict[str, Any]]]] = [
    ("DR001", _with(**{f"{C}.name": "pytorch"})),
    ("DR004", _with(**{"spec.elasticPolicy.standalone": False})),
    ("DR005", _with(**{"spec.elasticPolicy.rdzvConf": [{"key": "join_timeout", "value": "900"}]})),
    ("DR006", _with(**{f"{W}.replicas": 1})),
    ("DR025", _with(**{"spec.elasticPolicy.rdzvConf": [{"key": "is_host", "value": "false"}],
                       "spec.elasticPolicy.rdzvHost": "store.example.com"})),
    ("DR025", _with(**{"spec.elasticPolicy.rdzvConf": [{"key": "is_host", "value": "true"}], f"{W}.replicas": 1,
                       "spec.elasticPolicy.minReplicas": 1, "spec.elasticPolicy.maxReplicas": 1})),
    ("DR007", _with(**{"metadata.name": "a" * 54})),
    ("DR008", _with(**{f"{C}.volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm/"}]})),
    ("DR009", _with(**{f"{C}.command": ["torchrun", "--nnodes=$(PET_NNODES)", "--max-restarts=3", "train.py"]})),
    # The same values as the operator's (kubeflow/trainer@v1.9.4:pkg/controller.v1/pytorch/elastic.go:78-91):
    # nothing is overridden (issue 27, class 6).
    ("DR009", _with(**{f"{C}.command": ["torchrun", "--rdzv_backend=c10d", "--nnodes=1:3", "train.py"]})),
    ("DR009", _tj(**{f"{T}.command": ["torchrun", "--nnodes=2", "--nproc-per-node=2", "train.py"]})),
    ("DR010", _with(**{f"{C}.command": ["torchrun", "--no-python", "python", "train.py"]})),
    ("DR011", _with(**{f"{C}.env": [{"name": "RANKING", "value": "1"}, {"name": "PETS", "value": "2"}]})),
    ("DR012", _with(**{f"{W}.template.spec.initContainers.0.restartPolicy": "Always"})),
    ("DR013", _with(**{"spec.elasticPolicy": None, f"{W}.replicas": 1})),
    ("DR014", _with(**{"spec.elasticPolicy.maxRestarts": None, f"{C}.command": ["torchrun", "--max-restarts=2", "t.py"]})),  # noqa: E501
    ("DR015", _with(**{"spec.runPolicy.backoffLimit": 3, f"{W}.restartPolicy": "OnFailure"})),
    ("DR026", _with(**{f"{W}.restartPolicy": "ExitCode", f"{C}.command": ["elastic-launch", "--", "python", "t.py"]})),
    ("DR026", _with(**{f"{W}.restartPolicy": "ExitCode", f"{C}.command": ["python3", "/opt/elastic-launch/elastic-launch.py", "--", "python", "t.py"]})),  # noqa: E501
    ("DR026", _with(**{f"{W}.restartPolicy": "Never"})),
    ("DR016", _with(**{f"{W}.restartPolicy": "OnFailure"})),
    ("DR018", _with(**{f"{W}.template.metadata.annotations": {"sidecar.istio.io/inject": "false"}})),
    ("DR019", _with(**{f"{W}.template.spec.hostNetwork": True, f"{W}.template.spec.dnsPolicy": "ClusterFirstWithHostNet"})),  # noqa: E501
    ("DR021", _tj(**{f"{T}.env": [{"name": "PET_RDZV_BACKEND", "value": "c10d"}]})),
    # Left out, both come from the runtime and the node's resources (Trainer v2.3.0 torch.go).
    ("DR021", _tj(**{f"{T}.numNodes": None, f"{T}.numProcPerNode": None})),
    ("DR007", _tj(**{"metadata.name": "a" * 48})),
    ("DR022", _tj(_with(base=RUNTIME, **{"metadata.labels": {"trainer.kubeflow.org/framework": "torch"}}))),
    ("DR024", _tj(_with(base=RUNTIME, **{"spec.template.spec.failurePolicy": {"maxRestarts": 2}}))),
    ("DR031", _tj(**{f"{T}.command": ["elastic-launch", "--min-nodes=2", "--", "python", "t.py"], f"{T}.numNodes": 2})),
    ("DR031", _tj(**{f"{T}.command": ["torchrun", "--nnodes", "2:$(PET_NNODES)", "train.py"], f"{T}.numNodes": 3})),
    # --nnodes as a script's argument is the script's, not torchrun's.
    ("DR031", _tj(**{f"{T}.command": ["torchrun", "train.py", "--nnodes", "3:4"], f"{T}.numNodes": 2})),
    # A range that is none (MIN = numNodes), a fixed count, and a runtime with our node Job policies.
    ("DR032", _tj(**{f"{T}.command": ["elastic-launch", "--rdzv-at-master", "--min-nodes", "2", "--", "python",
                                      "t.py"]})),
    ("DR032", _tj(**{f"{T}.command": ["torchrun", "--nnodes=2", "train.py"]})),
    ("DR032", _tj(_with(base=RUNTIME, **{"spec.template.spec.replicatedJobs.0.template.spec.successPolicy":
                                         {"rules": [{"succeededIndexes": "0"}]}}),
                  **{f"{T}.command": ["torchrun", "--nnodes=1:$(PET_NNODES)", "train.py"]})),
    ("DR031", _tj(**{f"{T}.command": ["torchrun", "--nnodes", "2:$(PET_NNODES)", "train.py"], f"{T}.numNodes": 3})),
    ("DR012", _tj(_with(base=RUNTIME, **{f"{RJ}.initContainers": [{"name": "logs", "image": "x:1",
                                                                   "restartPolicy": "Always"}]}))),
    ("DR023", _tj(**{f"{T}.command": ["python", "train.py"], f"{T}.numNodes": 1, f"{T}.numProcPerNode": 1})),
    # One node with one GPU: Trainer's "auto" is one process (red team).
    ("DR023", _tj(**{f"{T}.command": ["python", "t.py"], f"{T}.numNodes": 1, f"{T}.numProcPerNode": None,
                     f"{T}.resourcesPerNode": {"limits": {"cpu": "4", "nvidia.com/gpu": "1"}}})),
    ("DR023", _tj(**{f"{T}.command": ["bash", "-c"], f"{T}.args": ["cd /w && torchrun train.py"]})),
    # No command: the image's entrypoint runs (with the args), which a manifest does not show.
    ("DR023", _tj(**{f"{T}.command": None})),
    ("DR023", _tj(**{f"{T}.command": None, f"{T}.args": ["--epochs", "3"]})),
    ("DR027", _with(**{f"{C}.imagePullPolicy": "Always"})),
    ("DR027", _tj(**{f"{T}.resourcesPerNode": {"limits": {"cpu": "2"}, "requests": {"cpu": "2"}}})),
    ("DR028", _with(**{f"{C}.env.1": {"name": "API_TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "t"}}}})),
    ("DR028", _with(**{f"{C}.env.1": {"name": "TOKENIZERS_PARALLELISM", "value": "false"}})),
    ("DR028", _with(**{f"{C}.args": ["--token", "$(HF_TOKEN)"]})),
    ("DR029", _with(**{f"{C}.args": ["--out=/data/\u00e9t\u00e9"]})),
    ("DR030", _with(**{f"{C}.args": ["--cfg=line one\nline two"]})),
]  # fmt: skip


def test_every_rule_is_tested() -> None:
    assert sorted({code for code, _, _ in CASES}) == [rule.code for rule in doctor.rules()]


@pytest.mark.parametrize(("code", "doc", "path"), CASES, ids=[f"{c}-{i}" for i, (c, _, _) in enumerate(CASES)])
def test_rule_fires(code: str, doc: dict[str, Any] | list[dict[str, Any]], path: str) -> None:
    report = doctor.doctor_stream(to_yaml(doc if isinstance(doc, list) else [doc]), "job.yaml")
    hits = [p for p in report.problems if p.message.startswith(code + " ")]
    assert hits, [str(p) for p in report.problems]
    expected = re.sub(r"\.([0-9]+)(?=\.|$)", r"[\1]", path)
    assert any(p.path == expected for p in hits), [str(p) for p in hits]
    rule = next(r for r in doctor.rules() if r.code == code)
    assert all(p.message.startswith(f"{code} {rule.name}: ") for p in hits)
    # One trap, one line: no place is reported twice (under two codes, or twice under one).
    places = [(p.line, p.col) for p in report.problems]
    assert len(places) == len(set(places)), [str(p) for p in report.problems]


@pytest.mark.parametrize(("code", "doc"), NEAR_MISSES, ids=[c for c, _ in NEAR_MISSES])
def test_rule_stays_quiet_on_its_near_miss(code: str, doc: dict[str, Any] | list[dict[str, Any]]) -> None:
    assert code not in _codes(doc)


def test_yaml11_octal_mode_says_what_to_write() -> None:
    # kubectl reads 0644 as octal (YAML 1.1); our loader keeps it as text: say so, as the compiler does.
    text = to_yaml([CLEAN]) + "          - {name: cfg, configMap: {name: c, defaultMode: 0644}}\n"
    (hit,) = [p for p in doctor.doctor_stream(text, "job.yaml").problems if p.path.endswith("defaultMode")]
    assert hit.message == (
        "DR002 schema: 0644 is the octal file mode 420 to YAML 1.1 and the decimal 644 to YAML 1.2, so readers "
        "disagree; write 0o644 (or 420)"
    )


def test_compiled_output_passes() -> None:
    """What the compiler writes has none of the traps, except where the spec turned a default off.

    Sidecars included: the compiler writes them as native sidecars, which DR012 accepts."""
    opted_out = {"shm-off": {"DR008"}, "trainjob-own-runtime-always": {"DR008"}}
    for case in sorted(p.name for p in GOLDEN.iterdir() if (p / "elastic.yaml").is_file()):
        text = stream_text([compile_path(GOLDEN / case / "elastic.yaml")], "yaml")
        codes = {p.message.split(" ", 1)[0] for p in doctor.doctor_stream(text, "job.yaml").problems}
        assert codes <= opted_out.get(case, set()), (case, codes)


def test_cli_streams_and_exit_codes(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clean, trapped = tmp_path / "clean.yaml", tmp_path / "all.yaml"
    clean.write_text(to_yaml([CLEAN]))
    bad = _with(**{"spec.elasticPolicy.standalone": True})
    trapped.write_text("apiVersion: v1\nkind: Service\nmetadata: {name: s}\n---\n" + to_yaml([bad]))
    assert main(["doctor", str(clean)]) == 0
    assert capsys.readouterr().out == ""
    assert main(["doctor", str(clean), str(trapped)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out == [f"{trapped}:15:17: spec.elasticPolicy.standalone: DR004 standalone: must not be true: the operator sets "  # noqa: E501
                   'PET_STANDALONE="" and torchrun crashes parsing it (accepted by the webhook, fails at runtime)']  # fmt: skip  # noqa: E501
    # kustomize output on standard input
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(trapped.read_bytes())))
    assert main(["doctor", "-"]) == 1
    assert capsys.readouterr().out.startswith("<stdin>:15:17: ")


def test_cli_escapes_what_the_manifest_names(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A container name with a terminal control sequence is printed escaped, never as the sequence."""
    job = tmp_path / "job.yaml"
    sidecar = {"name": "logs\x1b[2J\u202e", "image": "fluent/fluent-bit:3.0"}
    job.write_text(to_yaml([_with(**{f"{W}.template.spec.containers.1": sidecar})]))
    assert main(["doctor", str(job)]) == 1
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\u202e" not in out
    assert "container logs\\x1b[2J\\u202e runs beside pytorch" in out


def test_cli_never_prints_a_secret(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """DR028 says what a literal looks like, never what it is; DR029 names the character by code point."""
    job = tmp_path / "job.yaml"
    token = "hf_" + "Zq9" * 12
    env = [{"name": "NCCL_DEBUG", "value": "WARN"}, {"name": "HF_TOKEN", "value": token}]
    job.write_text(to_yaml([_with(**{f"{C}.env": env, f"{C}.args": ["--api-key", token, "x\u202e"]})]))
    assert main(["doctor", str(job)]) == 1
    out = capsys.readouterr().out
    assert token not in out and "\u202e" not in out
    assert out.splitlines() == [
        f"{job}:38:22: {C.replace('.0', '[0]')}.env[1].value: DR028 literal-secret-env: HF_TOKEN looks like a secret "
        f"but has a literal value",
        f"{job}:44:15: {C.replace('.0', '[0]')}.args[1]: DR028 literal-secret-env: a literal value that looks like "
        "a Hugging Face token (not shown)",
        f"{job}:45:15: {C.replace('.0', '[0]')}.args[2]: DR029 invisible-text: the value contains U+202E "
        "RIGHT-TO-LEFT OVERRIDE (a bidi control) at character 2",
    ]


def test_cli_reads_every_file_before_failing(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    broken, trapped = tmp_path / "broken.yaml", tmp_path / "trapped.yaml"
    broken.write_text("a: [1\n")
    trapped.write_text(to_yaml([_with(**{"spec.elasticPolicy.standalone": True})]))
    assert main(["doctor", str(broken), str(trapped)]) == 2
    out, err = capsys.readouterr()
    assert "DR004 standalone" in out  # the readable file's findings are not lost
    assert err.startswith(f"{broken}:")


def test_cli_without_jobs_and_bad_input(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    service = tmp_path / "svc.yaml"
    service.write_text("apiVersion: v1\nkind: Service\nmetadata: {name: s}\n")
    assert main(["doctor", str(service)]) == 0
    assert "no PyTorchJob" in capsys.readouterr().err
    broken = tmp_path / "broken.yaml"
    broken.write_text("a: [1\n")
    assert main(["doctor", str(broken)]) == 2
    assert capsys.readouterr().err.startswith(f"{broken}:")
    deep = tmp_path / "deep.yaml"
    deep.write_text("[" * 300 + "]" * 300)
    assert main(["doctor", str(deep)]) == 2
    assert "nesting deeper" in capsys.readouterr().err


@pytest.mark.parametrize(
    "odd",
    [
        {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob"},
        {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": [], "spec": "x"},
        {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": 5},
         "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": None, "template": {"spec": {"containers": [1, "x"]}}}},
                  "elasticPolicy": "x"}},
        _with(**{f"{C}.command": [1, {"a": "b"}]}),
        {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": "x"},
         "spec": {"trainer": {"command": "x", "env": {"a": 1}, "numNodes": "2"}, "runtimePatches": "x"}},
        {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": "x"},
         "spec": {"runtimeRef": {"name": "r", "kind": "TrainingRuntime"}, "trainer": {"command": [1]}}},
        # Shapes the rules met unchecked (internal errors, exit 3): a number for a list, a list for a name.
        _with(**{f"{C}.command": 5}),
        _tj(**{f"{T}.command": 5})[0],
        _tj(**{f"{T}.env": [{"name": ["PET_NNODES"], "value": "2"}]})[0],
        _tj(**{"spec.runtimePatches.0.trainingRuntimeSpec.template.spec.replicatedJobs": [{"name": {"a": 1}}]})[0],
        _tj(**{"spec.runtimePatches.0.trainingRuntimeSpec.template.spec.replicatedJobs": 1.5})[0],
    ],
)  # fmt: skip
def test_odd_types_are_findings_not_crashes(odd: dict[str, Any]) -> None:
    report = doctor.doctor_stream(to_yaml([odd]), "job.yaml")
    assert report.jobs == 1
    assert any(p.message.startswith(("DR001 ", "DR002 ", "DR021 ")) for p in report.problems)


@pytest.mark.parametrize(("field", "skipped"), [("apiVersion", "PyTorchJob"), ("kind", "?")])
def test_a_kind_that_is_not_a_string_is_skipped(field: str, skipped: str) -> None:
    """A mapping where the kind goes (unhashable) was an internal error; it names no kind doctor checks."""
    report = doctor.doctor_stream(to_yaml([_with(**{field: {"a": "b"}}), CLEAN]), "job.yaml")
    assert (report.jobs, report.skipped, report.problems) == (1, (skipped,), ())


def test_a_runtime_of_another_shape_is_its_own_finding() -> None:
    """A TrainJob's checks read the runtime in the stream: a runtime the schema refuses stops no check."""
    runtime = _with(base=RUNTIME, **{"spec.template.spec.replicatedJobs": 1.5})
    report = doctor.doctor_stream(to_yaml(_tj(runtime)), "job.yaml")
    assert report.jobs == 1
    assert any(p.message.startswith("DR002 ") for p in report.problems), [str(p) for p in report.problems]


@pytest.mark.parametrize("target", ["pytorchjob", "trainjob"])
@pytest.mark.parametrize("launcher", ["bundled", "torchrun"])
def test_compiled_launcher_modes_pass(launcher: str, target: str) -> None:
    # python3 /opt/elastic-launch/elastic-launch.py is elastic-launch: no "no launcher" (DR023) on a TrainJob.
    spec = (
        "name: d\nimage: x:1.0\ncommand: [python, t.py]\nnnodes: 2\nnproc_per_node: 2\n"
        f"restart_policy: OnFailure\nlauncher: {launcher}\ntarget: {target}\n"
    )
    text = stream_text([compile_text(spec, "elastic.yaml")], "yaml")
    assert doctor.doctor_stream(text, "job.yaml").problems == ()


@pytest.mark.parametrize(("launcher", "said"), [("torchrun", True), ("bundled", False), ("elastic-launch", False)])
def test_doctor_agrees_with_the_compiler_on_exit_codes(launcher: str, said: bool) -> None:
    # The compiler warns (EC116) on the spec exactly when doctor finds DR026 in its output.
    spec = (
        f"name: d\nimage: x:1.0\ncommand: [python, t.py]\nnnodes: 2\nrestart_policy: ExitCode\nlauncher: {launcher}\n"
    )
    compiled = compile_text(spec, "elastic.yaml")
    assert any(w.code == "EC116" for w in lint(compiled.spec, compiled.plan)) == said
    found = doctor.doctor_stream(stream_text([compiled], "yaml"), "job.yaml").problems
    assert [p.message.split(" ")[0] for p in found] == (["DR026"] if said else [])


def test_a_spec_is_not_a_manifest(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """doctor on an elastic.yaml used to say "nothing to check" and exit 0, which reads as a pass (red team 23)."""
    spec = tmp_path / "job.elastic.yaml"
    spec.write_text("name: t\nimage: ghcr.io/x/y:1.0\ncommand: [python, t.py]\n")
    assert main(["doctor", str(spec)]) == 2
    assert capsys.readouterr().err == (
        f"{spec}:1:1: spec: an elastic.yaml spec, not a manifest: doctor checks jobs written by hand; compile the "
        f"spec (elastic-compile {spec}), or check what it compiles to (elastic-compile {spec} | elastic-compile "
        "doctor -)\n"
    )


def test_empty_standard_input_is_named_as_its_findings_name_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Findings in standard input say ``<stdin>:15:17:``; the note for none said ``-`` (red team 2, item 15)."""
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"")))
    assert main(["doctor", "-"]) == 0
    assert capsys.readouterr().err == "elastic-compile doctor: <stdin>: no PyTorchJob or TrainJob to check\n"
