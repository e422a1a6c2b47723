"""examples/many-jobs, the layout the README and docs/many-jobs.md show, built as a user would.

A copy of the example is a working tree: ``elastic-compile teams -o deploy/base`` writes one
base per job, and the real ``kubectl kustomize`` builds the staging and production overlays
over them. The checks are on what reaches the cluster: every value from the platform's and the
team's bases, the overlay's patch merged into (not replacing) the merged env.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from elastic_compile.compiler.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "many-jobs"
JOBS = ["nlp/llm-finetune", "nlp/nightly-eval", "vision/nightly-eval", "vision/resnet50"]
Build = Callable[[Path], list[dict[str, Any]]]


@pytest.fixture(scope="module")
def layout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the example with its bases compiled, as a git working tree."""
    tree = tmp_path_factory.mktemp("many-jobs") / "repo"
    shutil.copytree(EXAMPLE, tree)
    (tree / ".git").mkdir()
    result = subprocess.run(
        [sys.executable, "-m", "elastic_compile.compiler.cli", "teams", "-o", "deploy/base"],
        cwd=tree,
        capture_output=True,
        text=True,
        check=False,
    )
    assert (result.returncode, result.stdout) == (0, "")
    assert (
        result.stderr
        == "elastic-compile: 4 specs and 2 bases, 12 files written to deploy/base, 0 unchanged, 0 warnings, 0 errors\n"
    )
    return tree


def _pod(job: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    return spec


def _jobs(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {f"{d['metadata']['namespace']}/{d['metadata']['name']}": d for d in docs if d["kind"] == "PyTorchJob"}


def _env(job: dict[str, Any]) -> dict[str, Any]:
    pytorch = next(c for c in _pod(job)["containers"] if c["name"] == "pytorch")
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in pytorch["env"]}


def test_one_base_per_job_and_one_name_in_two_namespaces(layout: Path) -> None:
    bases = sorted(
        str(p.parent.relative_to(layout / "deploy/base")) for p in layout.glob("deploy/base/*/*/kustomization.yaml")
    )
    assert bases == JOBS


def test_the_bases_are_current(
    layout: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(layout)
    assert main(["teams", "-o", "deploy/base", "--check"]) == 0
    # The platform's defaults are an input of every job: one change, four stale bases.
    defaults = layout / "platform/_defaults.elastic.yaml"
    original = defaults.read_text()
    defaults.write_text(original.replace("max_restarts: 3", "max_restarts: 4"))
    try:
        assert main(["teams", "-o", "deploy/base", "--check"]) == 1
        out = capsys.readouterr().out
        assert sorted(line[6:] for line in out.splitlines() if line.startswith("+++ b/")) == [
            f"deploy/base/{job}/pytorchjob.yaml" for job in JOBS
        ]
    finally:
        defaults.write_text(original)


def test_staging_overlay(layout: Path, kustomize_build: Build) -> None:
    jobs = _jobs(kustomize_build(layout / "deploy/staging"))
    assert sorted(jobs) == JOBS
    for name, job in jobs.items():
        assert job["spec"]["runPolicy"]["suspend"] is True
        assert job["metadata"]["labels"] == {"environment": "staging", "platform.example.com/managed-by": "ml-platform"}
        image = _pod(job)["containers"][0]["image"]
        team = name.split("/")[0]
        tag = "2.14.0-rc1-cuda13" if team == "nlp" else "2.13.0-cuda13"
        assert image == f"registry.example.com/{team}/trainer:{tag}"


def test_production_overlay(layout: Path, kustomize_build: Build) -> None:
    jobs = _jobs(kustomize_build(layout / "deploy/production"))
    llm = jobs["nlp/llm-finetune"]
    # The overlay's patch merged into the env the job got from two bases and itself.
    assert _env(llm) | {"ELASTIC_LAUNCH_POD_IP": None} == {
        "NCCL_IB_HCA": "mlx5",
        "ELASTIC_LAUNCH_POD_IP": None,
        "ELASTIC_LAUNCH_POD_NAME": {"fieldRef": {"fieldPath": "metadata.name"}},
        "ELASTIC_LAUNCH_NAMESPACE": {"fieldRef": {"fieldPath": "metadata.namespace"}},
        "ELASTIC_LAUNCH_JOB_NAME": {"fieldRef": {"fieldPath": "metadata.labels['training.kubeflow.org/job-name']"}},
        "NCCL_DEBUG": "INFO",
        "NCCL_SOCKET_IFNAME": "eth0",
        "WANDB_PROJECT": "nlp",
        "WANDB_API_KEY": {"secretKeyRef": {"name": "wandb", "key": "api-key"}},
        "HF_HOME": "/data/hf",
    }
    assert _env(jobs["nlp/nightly-eval"])["NCCL_DEBUG"] == "WARN"
    assert "NCCL_IB_HCA" not in _env(jobs["nlp/nightly-eval"])
    assert llm["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 4
    pod = _pod(llm)
    assert (pod["priorityClassName"], pod["nodeSelector"], pod["imagePullSecrets"]) == (
        "training",
        {"node.kubernetes.io/instance-type": "p4d.24xlarge"},
        [{"name": "registry-credentials"}],
    )
    assert {v["name"] for v in pod["volumes"]} == {"datasets", "dshm"}
    tolerations = {name: [t["key"] for t in _pod(job)["tolerations"]] for name, job in jobs.items()}
    assert tolerations == {
        "nlp/llm-finetune": ["nvidia.com/gpu"],
        "nlp/nightly-eval": ["nvidia.com/gpu"],
        "vision/nightly-eval": ["nvidia.com/gpu"],  # the team's spot toleration deleted for this job
        "vision/resnet50": ["nvidia.com/gpu", "capacity.example.com/spot"],
    }
    resnet = jobs["vision/resnet50"]
    assert (resnet["spec"]["elasticPolicy"]["minReplicas"], resnet["spec"]["elasticPolicy"]["maxReplicas"]) == (2, 8)
    shipper = [
        c for c in [*_pod(resnet)["containers"], *_pod(resnet).get("initContainers", [])] if c["name"] == "log-shipper"
    ]
    assert [c["image"] for c in shipper] == ["fluent/fluent-bit:3.0"]
