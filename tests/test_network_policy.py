"""``network_policy: true``: a NetworkPolicy that admits ingress to the job's pods only from the job.

The c10d store on worker-0 loads pickles from whoever connects; on a cluster its port is
open to every pod of the pod network. The policy selects the pods by the label the operator
puts on every pod of the job and admits ingress only from pods with the same label (same
namespace, any port: NCCL and gloo pick theirs). Checked here: the emitted object is valid
for Kubernetes, selects exactly what the operator labels, admits exactly the job's pods
when evaluated as a CNI would, is off by default, is listed in ``-o`` bases, and cannot
be widened by a custom template. The same for a TrainJob (``-t trainjob``). The label is ours
(targets/network.POD_LABEL, on every pod's template), not the engine's job-name label, so that a
kustomize rename keeps the policy on the job (tests/engines/test_network_policy_renames.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from support import crdcheck

from elastic_compile.compiler.cli import main
from elastic_compile.compiler.pipeline import compile_text
from elastic_compile.localrun import kubeflow, trainer
from elastic_compile.targets import network

BASE = "name: train\nnamespace: ml\nimage: ghcr.io/x/y:1.0\ncommand: [python, t.py]\nnnodes: 2\n"
TRAINJOB = BASE + "target: trainjob\nnproc_per_node: 2\n"
# Each engine's spec, the label the policy selects (ours, on every pod of the job), and the job's kind.
ENGINES = {
    "pytorchjob": (BASE, network.POD_LABEL, "PyTorchJob"),
    "trainjob": (TRAINJOB, network.POD_LABEL, "TrainJob"),
}


def _docs(text: str) -> list[dict[str, Any]]:
    return [o.doc for o in compile_text(text, "s.yaml").outputs]


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector["matchLabels"].items())


def _admits(policy: dict[str, Any], source_ns: str, source: dict[str, str], target: dict[str, str]) -> bool:
    """Whether ``policy`` lets a pod labelled ``source`` reach one labelled ``target`` (NetworkPolicy semantics)."""
    spec = policy["spec"]
    if not _selects(spec["podSelector"], target):
        return True  # not selected: the policy says nothing about it
    same_ns = source_ns == policy["metadata"].get("namespace", "default")
    return any(same_ns and _selects(peer["podSelector"], source) for rule in spec["ingress"] for peer in rule["from"])


def _pod_labels(job: dict[str, Any]) -> list[dict[str, str]]:
    """The labels each pod of ``job`` gets from its engine (the localrun emulations compute them)."""
    if job["kind"] == "TrainJob":
        return [p.labels for p in trainer.pods(job)]
    return [p.labels for p in kubeflow.pods(job)]


@pytest.mark.parametrize("engine", ENGINES)
def test_off_by_default(engine: str) -> None:
    base, _label, kind = ENGINES[engine]
    assert [d["kind"] for d in _docs(base)] == [kind]


@pytest.mark.parametrize("engine", ENGINES)
def test_the_policy_is_valid_and_admits_only_the_jobs_pods(engine: str) -> None:
    base, label, kind = ENGINES[engine]
    job, policy = _docs(base + "network_policy: true\n")
    assert job["kind"] == kind
    assert (policy["apiVersion"], policy["kind"], policy["metadata"]) == (
        "networking.k8s.io/v1",
        "NetworkPolicy",
        {"name": "train", "namespace": "ml"},
    )
    assert crdcheck.core_errors(policy) == []
    assert policy["spec"]["policyTypes"] == ["Ingress"]  # egress (data, the API server) untouched
    assert all("ports" not in rule for rule in policy["spec"]["ingress"])  # NCCL and gloo ports are random
    assert policy["spec"]["podSelector"] == {"matchLabels": {label: "train"}}
    # The labels the engine gives the job's pods (kubeflow.pods and trainer.pods emulate it), and others.
    ours = _pod_labels(job)
    assert len(ours) == 2
    other_job = dict(ours[0], **{label: "other"})
    for target in ours:
        assert all(_admits(policy, "ml", source, target) for source in ours)
        assert not _admits(policy, "ml", other_job, target)
        assert not _admits(policy, "ml", {"app": "anything"}, target)
        assert not _admits(policy, "other-namespace", ours[0], target)


@pytest.mark.parametrize("engine", ENGINES)
def test_the_policy_is_a_resource_of_the_base(tmp_path: Path, engine: str) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(ENGINES[engine][0] + "network_policy: true\n")
    assert main([str(spec), "-o", str(tmp_path / "base"), "--root", str(tmp_path)]) == 0
    kustomization = yaml.safe_load((tmp_path / "base" / "kustomization.yaml").read_text())
    assert kustomization["resources"] == [f"{engine}.yaml", "networkpolicy.yaml"]


def test_the_trainjob_policy_follows_our_runtime(tmp_path: Path) -> None:
    """With our TrainingRuntime (a sidecar needs one), the pods of every replicated job are selected."""
    text = TRAINJOB + "network_policy: true\npod_template:\n  spec:\n    initContainers:\n"
    text += "      - {name: proxy, image: 'ghcr.io/x/proxy:1.0', restartPolicy: Always}\n"
    runtime, job, policy = _docs(text)
    assert [d["kind"] for d in (runtime, job, policy)] == ["TrainingRuntime", "TrainJob", "NetworkPolicy"]
    ours = [p.labels for p in trainer.pods(job, runtime)]
    assert len(ours) == 2 and all(_admits(policy, "ml", a, b) for a in ours for b in ours)
    assert not _admits(policy, "ml", dict(ours[0], **{network.POD_LABEL: "other"}), ours[1])


@pytest.mark.parametrize("engine", ENGINES)
def test_a_custom_template_cannot_widen_the_policy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], engine: str
) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(ENGINES[engine][0] + "network_policy: true\n")
    templates = tmp_path / "templates"
    templates.mkdir()
    (templates / "networkpolicy.yaml.j2").write_text(
        'apiVersion: "networking.k8s.io/v1"\nkind: "NetworkPolicy"\nmetadata: {{ policy.metadata | to_yaml }}\n'
        'spec: {"podSelector": {}, "policyTypes": ["Ingress"], "ingress": [{}]}\n'
    )
    assert main([str(spec), "--templates", str(templates)]) == 2
    err = capsys.readouterr().err
    assert "networkpolicy.yaml.j2" in err and "must be the compiler's" in err


@pytest.mark.parametrize("engine", ENGINES)
def test_import_reads_the_policy_back(engine: str) -> None:
    """The pods' label of ours and the policy that selects it are network_policy: true, nothing else."""
    from elastic_compile.compiler.importer import import_stream
    from elastic_compile.compiler.output import stream_text

    first = stream_text([compile_text(ENGINES[engine][0] + "network_policy: true\n", "s.yaml")], "yaml")
    (imported,) = import_stream(first, "job.yaml")
    assert "network_policy: true" in imported.text and network.POD_LABEL not in imported.text
    assert [str(n) for n in imported.notes] == []
    assert stream_text([compile_text(imported.text, "i.yaml")], "yaml") == first


def test_the_label_is_the_compilers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(
        BASE + f"network_policy: true\npod_template:\n  metadata:\n    labels: {{{network.POD_LABEL}: x}}\n"
    )
    assert main([str(spec)]) == 2
    assert "set by the compiler on every pod for network_policy" in capsys.readouterr().err
