"""Issue 27, class 1: the NetworkPolicy keeps selecting the job's pods through kustomize renames.

A ``namePrefix``/``nameSuffix`` renames the job, and with it the engine's job-name label on every
pod (training-operator v1.9.4 sets ``training.kubeflow.org/job-name: <job>``:
kubeflow/trainer@v1.9.4:pkg/controller.v1/common/pod.go, JobNameLabel; JobSet v0.12.0 sets
``jobset.sigs.k8s.io/jobset-name: <jobset>``, the TrainJob's name: kubernetes-sigs/jobset@v0.12.0:
api/jobset/v1alpha2/jobset_types.go:24), but kustomize changes no label value in a policy. The
policy therefore selects a label of ours in the pods' template, and the ``-o`` base's
kustomizeconfig.yaml renames that label's value in the pods and in the policy with the job.
Built here with the real ``kubectl kustomize``; the pods are those of the operator emulations.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from elastic_compile.compiler.cli import main
from elastic_compile.localrun import kubeflow, trainer

Build = Callable[[Path], list[dict[str, Any]]]

SPECS = {
    "pytorchjob": "name: train\nnamespace: ml\nimage: ghcr.io/x/y:1.0\ncommand: [python, t.py]\nnnodes: 2\n"
    "network_policy: true\n",
    "trainjob": "name: train\nnamespace: ml\nimage: ghcr.io/x/y:1.0\ncommand: [python, t.py]\nnnodes: 2\n"
    "nproc_per_node: 1\ntarget: trainjob\nnetwork_policy: true\n",
    # A TrainJob with our TrainingRuntime (a sidecar needs one): the runtime is renamed too.
    "trainjob-runtime": "name: train\nnamespace: ml\nimage: ghcr.io/x/y:1.0\ncommand: [python, t.py]\nnnodes: 2\n"
    "nproc_per_node: 1\ntarget: trainjob\nnetwork_policy: true\npod_template:\n  spec:\n    initContainers:\n"
    "      - {name: proxy, image: 'ghcr.io/x/proxy:1.0', restartPolicy: Always}\n",
}
RENAMES = {
    "prefix": "namePrefix: dev-\n",
    "suffix": "nameSuffix: -b\n",
    "both": "namePrefix: dev-\nnameSuffix: -b\n",
    # Labels kustomize adds to the policy's selectors, which it knows, and (by kustomizeconfig.yaml) to
    # our pods, which it does not (found by the red-team pass: the policy then required a label no pod had).
    "common-labels": "namePrefix: c-\ncommonLabels: {team: a}\n",
    "labels-with-selectors": "nameSuffix: -l\nlabels:\n- pairs: {team: b}\n  includeSelectors: true\n",
}


def _base(tmp_path: Path, spec: str) -> Path:
    (tmp_path / "s.yaml").write_text(spec)
    assert main([str(tmp_path / "s.yaml"), "-o", str(tmp_path / "base"), "--root", str(tmp_path)]) == 0
    return tmp_path / "base"


def _overlay(tmp_path: Path, name: str, base: str, rename: str) -> Path:
    overlay = tmp_path / name
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(f"resources: [{base}]\nsortOptions: {{order: fifo}}\n{rename}")
    return overlay


def _pods(docs: list[dict[str, Any]]) -> list[dict[str, str]]:
    """The labels the engine's pods get (the emulations add the engine's own to the template's)."""
    job = next(d for d in docs if d["kind"] in ("PyTorchJob", "TrainJob"))
    if job["kind"] == "PyTorchJob":
        return [p.labels for p in kubeflow.pods(job)]
    runtime = next((d for d in docs if d["kind"] == "TrainingRuntime"), None)
    return [p.labels for p in trainer.pods(job, runtime)]


def _selects(policy: dict[str, Any], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in policy["spec"]["podSelector"]["matchLabels"].items())


def _admits(policy: dict[str, Any], source: dict[str, str], target: dict[str, str]) -> bool:
    """NetworkPolicy semantics in one namespace: an unselected pod is not restricted."""
    if not _selects(policy, target):
        return True
    peers = [peer["podSelector"] for rule in policy["spec"]["ingress"] for peer in rule["from"]]
    return any(all(source.get(k) == v for k, v in peer["matchLabels"].items()) for peer in peers)


@pytest.mark.parametrize("rename", RENAMES)
@pytest.mark.parametrize("engine", SPECS)
def test_the_policy_follows_the_renamed_job(tmp_path: Path, kustomize_build: Build, engine: str, rename: str) -> None:
    _base(tmp_path, SPECS[engine])
    docs = kustomize_build(_overlay(tmp_path, "over", "../base", RENAMES[rename]))
    job = next(d for d in docs if d["kind"] in ("PyTorchJob", "TrainJob"))
    assert job["metadata"]["name"] != "train"  # renamed
    (policy,) = [d for d in docs if d["kind"] == "NetworkPolicy"]
    pods = _pods(docs)
    assert len(pods) == 2 and all(_selects(policy, p) for p in pods)  # the store is closed again
    assert all(_admits(policy, a, b) for a in pods for b in pods)  # the job's own traffic passes
    outsider = {"app": "anything"}
    assert not any(_admits(policy, outsider, p) for p in pods)


@pytest.mark.parametrize("engine", SPECS)
def test_two_overlays_of_one_base_stay_apart(tmp_path: Path, kustomize_build: Build, engine: str) -> None:
    _base(tmp_path, SPECS[engine])
    a = kustomize_build(_overlay(tmp_path, "a", "../base", "namePrefix: a-\n"))
    b = kustomize_build(_overlay(tmp_path, "b", "../base", "nameSuffix: -b\n"))
    (policy_a,) = [d for d in a if d["kind"] == "NetworkPolicy"]
    for source in _pods(b):
        assert not any(_admits(policy_a, source, target) for target in _pods(a))


@pytest.mark.parametrize("engine", ["pytorchjob", "trainjob"])  # our runtime's runtimeRef needs the config anyway
def test_without_the_bases_config_the_policy_still_selects_the_job(
    tmp_path: Path, kustomize_build: Build, engine: str
) -> None:
    """The compiled stream in a kustomization of one's own (no kustomizeconfig.yaml): nothing is renamed in
    the label, so the policy and the pods still agree (the engine's label alone would select nothing)."""
    (tmp_path / "s.yaml").write_text(SPECS[engine])
    plain = tmp_path / "plain"
    plain.mkdir()
    assert main([str(tmp_path / "s.yaml"), "-o", str(tmp_path / "ignored"), "--root", str(tmp_path)]) == 0
    stream = "---\n".join(p.read_text() for p in sorted((tmp_path / "ignored").glob("*.yaml")) if p.name not in (
        "kustomization.yaml", "kustomizeconfig.yaml"))  # fmt: skip
    (plain / "job.yaml").write_text(stream)
    (plain / "kustomization.yaml").write_text("resources: [job.yaml]\nnamePrefix: dev-\n")
    docs = kustomize_build(plain)
    (policy,) = [d for d in docs if d["kind"] == "NetworkPolicy"]
    pods = _pods(docs)
    assert all(_selects(policy, p) for p in pods)
    engine_label = "training.kubeflow.org/job-name" if engine == "pytorchjob" else "jobset.sigs.k8s.io/jobset-name"
    assert all(p[engine_label] == "dev-train" for p in pods)  # what a policy on the engine's label would miss
