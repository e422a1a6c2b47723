"""``network_policy: true``: a NetworkPolicy that admits ingress to the job's pods only from the job.

The c10d store on worker-0 loads pickles from whoever connects; on a cluster its port is
open to every pod of the pod network. The policy selects the pods by the label the operator
puts on every pod of the job and admits ingress only from pods with the same label (same
namespace, any port: NCCL and gloo pick theirs). Checked here: the emitted object is valid
for Kubernetes, selects exactly what the operator labels, admits exactly the job's pods
when evaluated as a CNI would, is off by default, is listed in ``-o`` bases, and cannot
be widened by a custom template.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from elastic_compile import contract
from elastic_compile.compiler.cli import main
from elastic_compile.compiler.pipeline import compile_text
from elastic_compile.core import crdcheck
from elastic_compile.localrun.kubeflow import pods

BASE = "name: train\nnamespace: ml\nimage: ghcr.io/x/y:1.0\ncommand: [python, t.py]\nnnodes: 2\n"


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


def test_off_by_default() -> None:
    assert [d["kind"] for d in _docs(BASE)] == ["PyTorchJob"]


def test_the_policy_is_valid_and_admits_only_the_jobs_pods() -> None:
    job, policy = _docs(BASE + "network_policy: true\n")
    assert (policy["apiVersion"], policy["kind"], policy["metadata"]) == (
        "networking.k8s.io/v1",
        "NetworkPolicy",
        {"name": "train", "namespace": "ml"},
    )
    assert crdcheck.core_errors(policy) == []
    assert policy["spec"]["policyTypes"] == ["Ingress"]  # egress (data, the API server) untouched
    assert all("ports" not in rule for rule in policy["spec"]["ingress"])  # NCCL and gloo ports are random
    # The labels the operator gives the job's pods (kubeflow.pods emulates it), and others.
    ours = [p.labels for p in pods(job)]
    assert len(ours) == 2
    other_job = dict(ours[0], **{contract.LABEL_JOB_NAME: "other"})
    for target in ours:
        assert all(_admits(policy, "ml", source, target) for source in ours)
        assert not _admits(policy, "ml", other_job, target)
        assert not _admits(policy, "ml", {"app": "anything"}, target)
        assert not _admits(policy, "other-namespace", ours[0], target)


def test_the_policy_is_a_resource_of_the_base(tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(BASE + "network_policy: true\n")
    assert main([str(spec), "-o", str(tmp_path / "base"), "--root", str(tmp_path)]) == 0
    kustomization = yaml.safe_load((tmp_path / "base" / "kustomization.yaml").read_text())
    assert kustomization["resources"] == ["pytorchjob.yaml", "networkpolicy.yaml"]


def test_a_custom_template_cannot_widen_the_policy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(BASE + "network_policy: true\n")
    templates = tmp_path / "templates"
    templates.mkdir()
    (templates / "networkpolicy.yaml.j2").write_text(
        'apiVersion: "networking.k8s.io/v1"\nkind: "NetworkPolicy"\nmetadata: {{ policy.metadata | to_yaml }}\n'
        'spec: {"podSelector": {}, "policyTypes": ["Ingress"], "ingress": [{}]}\n'
    )
    assert main([str(spec), "--templates", str(templates)]) == 2
    err = capsys.readouterr().err
    assert "networkpolicy.yaml.j2" in err and "must be the compiler's" in err
