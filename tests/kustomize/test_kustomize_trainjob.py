"""Overlays on a TrainJob base (``-t trainjob -o DIR``), built by the real ``kubectl kustomize``.

What a user of Trainer v2 writes: a strategic-merge patch that adds a toleration and a
volume mount through the TrainJob's runtimePatches (merged by manager, replicatedJobs and
containers by name, so our /dev/shm and volumes stay), trainer env merged by name, a
second runtimePatches manager of their own, a patch on our TrainingRuntime's sidecar, and a
namePrefix that must carry runtimeRef along. Every built document must still pass the
Trainer v2.3 CRDs and webhook rules.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from support import crdcheck

from elastic_compile.compiler import kustomize
from elastic_compile.compiler.cli import main
from elastic_compile.targets.trainjob.checks import manifest_errors

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "tests" / "golden" / "trainjob-sidecar-runtime" / "elastic.yaml"
Build = Callable[[Path], list[dict[str, Any]]]
MANAGER = "elastic-compile.dev/compiler"


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("trainjob") / "base"
    assert main([str(SPEC), "-t", "trainjob", "-o", str(out), "--root", str(out.parent)]) == 0
    return out


def _overlay(directory: Path, base: Path, **fields: Any) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(base, directory)],
        # What our base's own kustomization says: keep the runtime before the TrainJob.
        "sortOptions": {"order": "fifo"},
        **fields,
    }
    (directory / "kustomization.yaml").write_text(yaml.safe_dump(kustomization, sort_keys=False), encoding="utf-8")
    return directory


def _node_pod(doc: Mapping[str, Any], manager: str = MANAGER) -> dict[str, Any]:
    (patch,) = (p for p in doc["spec"]["runtimePatches"] if p["manager"] == manager)
    (rjob,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    return dict(rjob["template"]["spec"]["template"]["spec"])


def _accepted(docs: list[dict[str, Any]]) -> None:
    runtime = next((d for d in docs if d["kind"] == "TrainingRuntime"), None)
    for doc in docs:
        assert manifest_errors(doc, runtime) == [], doc["kind"]
    for doc in docs:  # last: skips without the CRD files
        try:
            errors = crdcheck.check_manifest(doc)
        except crdcheck.CrdUnavailable as e:
            pytest.skip(str(e))
        assert errors == [], doc["kind"]


def test_base_builds_runtime_first(base: Path, kustomize_build: Build) -> None:
    docs = kustomize_build(base)
    assert [d["kind"] for d in docs] == ["TrainingRuntime", "TrainJob"]
    assert (base / kustomize.CONFIG_FILE).is_file()
    _accepted(docs)


def test_patch_merges_by_manager_job_and_container(base: Path, kustomize_build: Build, tmp_path: Path) -> None:
    job = yaml.safe_load((base / "trainjob.yaml").read_text(encoding="utf-8"))
    ident = {"apiVersion": job["apiVersion"], "kind": "TrainJob", "metadata": {"name": "demo", "namespace": "ml"}}
    node_pod = {
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [{"name": "node", "volumeMounts": [{"name": "cache", "mountPath": "/cache"}]}],
        "volumes": [{"name": "cache", "emptyDir": {}}],
    }
    patch = {
        **ident,
        "spec": {
            "trainer": {"env": [{"name": "WANDB_PROJECT", "value": "demo"}]},
            "runtimePatches": [
                {
                    "manager": MANAGER,
                    "trainingRuntimeSpec": {
                        "template": {
                            "spec": {
                                "replicatedJobs": [
                                    {"name": "node", "template": {"spec": {"template": {"spec": node_pod}}}}
                                ]
                            }
                        }
                    },
                },
                {
                    "manager": "example.com/platform",
                    "trainingRuntimeSpec": {
                        "template": {
                            "spec": {
                                "replicatedJobs": [
                                    {
                                        "name": "node",
                                        "template": {"spec": {"template": {"spec": {"nodeSelector": {"zone": "a"}}}}},
                                    }
                                ]
                            }
                        }
                    },
                },
            ],
        },
    }
    overlay = _overlay(tmp_path / "ov", base, patches=[{"patch": yaml.safe_dump(patch)}])
    docs = kustomize_build(overlay)
    built = docs[-1]
    pod = _node_pod(built)
    (node,) = pod["containers"]
    mounts = [m["mountPath"] for m in node["volumeMounts"]]
    assert sorted(mounts) == ["/cache", "/data", "/dev/shm"], "merged by mountPath; ours kept"
    assert sorted(v["name"] for v in pod["volumes"]) == ["cache", "data", "dshm"]
    assert pod["nodeSelector"] == {"pool": "gpu"} and pod["tolerations"][0]["key"] == "nvidia.com/gpu"
    assert [p["manager"] for p in built["spec"]["runtimePatches"]] == [MANAGER, "example.com/platform"]
    assert _node_pod(built, "example.com/platform")["nodeSelector"] == {"zone": "a"}
    env = [e["name"] for e in built["spec"]["trainer"]["env"]]
    assert [e for e in env if e != "WANDB_PROJECT"] == [
        "ELASTIC_LAUNCH_POD_IP",
        "ELASTIC_LAUNCH_POD_NAME",
        "ELASTIC_LAUNCH_NAMESPACE",
        "ELASTIC_LAUNCH_JOB_NAME",
    ]
    assert "WANDB_PROJECT" in env
    assert built["spec"]["trainer"]["args"] == job["spec"]["trainer"]["args"], "atomic lists stay whole"
    _accepted(docs)


def test_without_openapi_the_patch_replaces_runtime_patches(base: Path, kustomize_build: Build, tmp_path: Path) -> None:
    """Why openapi.json is there: kustomize knows no TrainJob keys and replaces the whole list."""
    copy = tmp_path / "base"
    copy.mkdir()
    for item in base.iterdir():
        text = item.read_text(encoding="utf-8")
        if item.name == kustomize.KUSTOMIZATION_FILE:
            text = text.replace(f"openapi:\n  path: {kustomize.OPENAPI_FILE}\n", "")
        (copy / item.name).write_text(text, encoding="utf-8")
    patch = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "demo", "namespace": "ml"},
        "spec": {"runtimePatches": [{"manager": "example.com/platform"}]},
    }
    overlay = _overlay(tmp_path / "ov", copy, patches=[{"patch": yaml.safe_dump(patch)}])
    built = kustomize_build(overlay)[-1]
    assert [p["manager"] for p in built["spec"]["runtimePatches"]] == ["example.com/platform"], "ours is gone"


def test_sidecar_patch_on_our_runtime(base: Path, kustomize_build: Build, tmp_path: Path) -> None:
    patch = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainingRuntime",
        "metadata": {"name": "demo", "namespace": "ml"},
        "spec": {
            "template": {
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": "node",
                            "template": {
                                "spec": {
                                    "template": {
                                        "spec": {
                                            "initContainers": [
                                                {"name": "metrics", "image": "prom/node-exporter:v1.9.0"}
                                            ]
                                        }
                                    }
                                }
                            },
                        }
                    ]
                }
            }
        },
    }
    docs = kustomize_build(_overlay(tmp_path / "ov", base, patches=[{"patch": yaml.safe_dump(patch)}]))
    runtime = docs[0]
    pod = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    (sidecar,) = pod["initContainers"]
    assert sidecar["image"] == "prom/node-exporter:v1.9.0"
    assert sidecar["restartPolicy"] == "Always" and sidecar["ports"], "merged by name, not replaced"
    assert [c["name"] for c in pod["containers"]] == ["node"]
    _accepted(docs)


def test_name_prefix_carries_the_runtime_ref(base: Path, kustomize_build: Build, tmp_path: Path) -> None:
    docs = kustomize_build(_overlay(tmp_path / "ov", base, namePrefix="exp1-"))
    runtime, job = docs
    assert runtime["metadata"]["name"] == job["metadata"]["name"] == "exp1-demo"
    assert job["spec"]["runtimeRef"]["name"] == "exp1-demo", "kustomizeconfig.yaml: a name reference"
    _accepted(docs)


def test_without_fifo_kustomize_puts_the_trainjob_first(base: Path, kustomize_build: Build, tmp_path: Path) -> None:
    """Why the base sets sortOptions and overlays should too: kustomize's legacy order sorts TrainJob first."""
    docs = kustomize_build(_overlay(tmp_path / "ov", base, sortOptions={"order": "legacy"}))
    assert [d["kind"] for d in docs] == ["TrainJob", "TrainingRuntime"]


def test_images_pins_the_trainer_image(base: Path, kustomize_build: Build, tmp_path: Path) -> None:
    """An overlay's ``images:`` reaches spec.trainer.image, the image the node container runs.

    Trainer sets container ``node``'s image from ``trainer.image``, so a pin that only
    reached our runtime's containers (kustomize's default image paths) would leave the
    job on the old image without a word.
    """
    job = yaml.safe_load((base / "trainjob.yaml").read_text(encoding="utf-8"))
    name = job["spec"]["trainer"]["image"].rsplit(":", 1)[0]
    overlay = _overlay(tmp_path / "ov", base, images=[{"name": name, "newTag": "pinned"}])
    runtime, built = kustomize_build(overlay)
    assert built["spec"]["trainer"]["image"] == f"{name}:pinned"
    pod = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert [c["image"] for c in pod["containers"]] == [f"{name}:pinned"]
    _accepted([runtime, built])


def _doc_block(text: str, first_line: str) -> str:
    (block,) = [b for b in re.findall(r"```yaml\n(.*?)```", text, flags=re.S) if b.startswith(first_line + "\n")]
    return str(block)


def test_the_docs_overlay_recipe(kustomize_build: Build, tmp_path: Path) -> None:
    """docs/trainer-v2.md's production overlay, as written: image, nodes, resources, env, nodeSelector, tolerations."""
    docs = (ROOT / "docs" / "trainer-v2.md").read_text(encoding="utf-8")
    deploy = tmp_path / "deploy"
    spec = ROOT / "examples" / "trainjob-2x8-gpu.yaml"
    assert main([str(spec), "-o", str(deploy / "base"), "--root", str(tmp_path)]) == 0
    (deploy / "prod").mkdir()
    for name in ("kustomization.yaml", "trainjob-prod.yaml"):
        (deploy / "prod" / name).write_text(_doc_block(docs, f"# deploy/prod/{name}"), encoding="utf-8")
    docs_built = kustomize_build(deploy / "prod")
    (job,) = [d for d in docs_built if d["kind"] == "TrainJob"]
    trainer = job["spec"]["trainer"]
    assert trainer["image"] == "ghcr.io/example/trainer:2.14.0-cuda13"
    assert trainer["numNodes"] == 4
    assert trainer["resourcesPerNode"]["limits"] == {
        "ephemeral-storage": "200Gi", "memory": "480Gi", "nvidia.com/gpu": "8",
    }  # fmt: skip
    assert trainer["resourcesPerNode"]["requests"]["nvidia.com/gpu"] == "8"
    assert {"NCCL_IB_HCA", "NCCL_DEBUG", "ELASTIC_LAUNCH_POD_IP"} <= {e["name"] for e in trainer["env"]}
    pod = _node_pod(job)
    assert pod["nodeSelector"] == {"cloud.google.com/gke-nodepool": "a3-prod"}
    toleration = {"key": "dedicated", "operator": "Equal", "value": "training", "effect": "NoSchedule"}
    assert pod["tolerations"] == [toleration]
    (node,) = pod["containers"]
    assert [m["mountPath"] for m in node["volumeMounts"]] == ["/dev/shm"], "ours kept"
    assert len(job["spec"]["runtimePatches"]) == 1, "merged into ours, not appended"
    _accepted(docs_built)
