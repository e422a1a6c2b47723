"""Overlays on the base ``elastic-compile -o DIR`` writes, built by the real ``kubectl kustomize``.

Each overlay is what a user would write: a new image with ``images:``, an env var and a
resource limit for the ``pytorch`` container with a strategic-merge patch (on the
PyTorchJob and on the PodTemplate), and a worker count with a JSON6902 patch. Every built
PyTorchJob must still pass the CRD schema and webhook checks.

The base's ``openapi.json`` is what makes the strategic-merge patches safe:
``test_without_openapi_a_patch_replaces_the_containers_list`` shows what happens without it.
"""

from __future__ import annotations

import copy
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from support import crdcheck
from support import docs as support_docs

from elastic_compile.compiler import kustomize, output
from elastic_compile.compiler.cli import main
from elastic_compile.targets.pytorchjob.checks import webhook_errors

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "ddp-2x8-gpu.yaml"

# A user pod_template with a sidecar that shares a volume with the training container.
# (No integers inside pod_template: see the pod-template-integers golden case.)
SIDECAR_SPEC = """\
name: vit-train
namespace: ml
image: ghcr.io/example/vit:1.2
command: [python, train_vit.py, --epochs, "90"]
nnodes: 2
resources:
  requests: {gpu: 1}
pod_template:
  spec:
    volumes:
      - name: logs
        emptyDir: {}
    containers:
      - name: log-shipper
        image: fluent/fluent-bit:3.0
        volumeMounts:
          - {name: logs, mountPath: /logs, readOnly: true}
      - name: pytorch
        volumeMounts:
          - {name: logs, mountPath: /logs}
"""

Build = Callable[[Path], list[dict[str, Any]]]


@pytest.fixture(scope="module")
def bases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two bases (PyTorchJob and PodTemplate each): the example, and the sidecar spec."""
    root = tmp_path_factory.mktemp("bases")
    spec = root / "vit-train.yaml"
    spec.write_text(SIDECAR_SPEC, encoding="utf-8")
    out = {}
    for name, path in (("example", EXAMPLE), ("sidecar", spec)):
        assert main([str(path), "-t", "all", "-o", str(root / name), "--root", str(root)]) == 0
        out[name] = root / name
    return out


def _assert_accepted(*docs: Mapping[str, Any]) -> None:
    """The CRD schema (the upstream CRD when at hand, else the shipped compact one), webhook and core checks pass."""
    for doc in docs:
        assert crdcheck.check_manifest(doc) == [], doc["kind"]


def _write_overlay(directory: Path, base: Path | list[Path], **fields: Any) -> Path:
    """An overlay kustomization over ``base`` (one base or several) with ``fields`` added."""
    directory.mkdir(parents=True, exist_ok=True)
    bases = [base] if isinstance(base, Path) else base
    kustomization: dict[str, Any] = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        # Relative, as users write them: kustomize accepts absolute paths too, but a
        # relative one is what the docs show.
        "resources": [os.path.relpath(b, directory) for b in bases],
        **fields,
    }
    (directory / "kustomization.yaml").write_text(yaml.safe_dump(kustomization, sort_keys=False), encoding="utf-8")
    return directory


def _by_kind(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["kind"]: d for d in docs}


def _pod_spec(doc: Mapping[str, Any], role: str = "Worker") -> dict[str, Any]:
    if doc["kind"] == "PyTorchJob":
        return dict(doc["spec"]["pytorchReplicaSpecs"][role]["template"]["spec"])
    return dict(doc["template"]["spec"])


def _container(pod_spec: Mapping[str, Any], name: str = "pytorch") -> dict[str, Any]:
    """A container by name; sidecars are native sidecars, in initContainers."""
    (found,) = (c for c in [*pod_spec["containers"], *pod_spec.get("initContainers", [])] if c["name"] == name)
    return dict(found)


def _identity(doc: Mapping[str, Any]) -> dict[str, Any]:
    # A strategic-merge patch must name the resource exactly, namespace included
    # (kustomize: "no resource matches strategic merge patch" otherwise).
    meta = {"name": doc["metadata"]["name"]}
    if "namespace" in doc["metadata"]:
        meta["namespace"] = doc["metadata"]["namespace"]
    return {"apiVersion": doc["apiVersion"], "kind": doc["kind"], "metadata": meta}


PYTORCH_PATCH = {
    "name": "pytorch",
    "env": [{"name": "WANDB_PROJECT", "value": "vision"}],
    "resources": {"limits": {"ephemeral-storage": "100Gi"}},
}


def _job_patch(job: Mapping[str, Any]) -> str:
    patch = _identity(job)
    patch["spec"] = {"pytorchReplicaSpecs": {"Worker": {"template": {"spec": {"containers": [PYTORCH_PATCH]}}}}}
    return yaml.safe_dump(patch, sort_keys=False)


def _podtemplate_patch(pt: Mapping[str, Any]) -> str:
    patch = _identity(pt)
    patch["template"] = {"spec": {"containers": [PYTORCH_PATCH]}}
    return yaml.safe_dump(patch, sort_keys=False)


def _assert_patched(before: Mapping[str, Any], after: Mapping[str, Any]) -> None:
    """``after`` is ``before`` with exactly PYTORCH_PATCH merged into its pytorch container."""
    old, new = _pod_spec(before), _pod_spec(after)
    old_c, new_c = _container(old), _container(new)
    assert new_c["command"] == old_c["command"] and new_c["args"] == old_c["args"]
    untouched = set(old_c) - {"env", "resources"}
    assert set(new_c) == set(old_c) | {"env", "resources"}
    assert {k: new_c[k] for k in untouched} == {k: old_c[k] for k in untouched}
    assert {"name": "WANDB_PROJECT", "value": "vision"} in new_c["env"]
    assert [e for e in new_c["env"] if e["name"] != "WANDB_PROJECT"] == old_c["env"], "compiled env kept"
    assert new_c["resources"]["limits"] == {**old_c["resources"].get("limits", {}), "ephemeral-storage": "100Gi"}
    assert new_c["resources"].get("requests") == old_c["resources"].get("requests")
    assert new_c["volumeMounts"] == old_c["volumeMounts"]
    assert {"name": "dshm", "mountPath": "/dev/shm"} in new_c["volumeMounts"]
    assert [c for c in new["containers"] if c["name"] != "pytorch"] == [
        c for c in old["containers"] if c["name"] != "pytorch"
    ]
    assert new.get("initContainers") == old.get("initContainers"), "sidecars kept"
    assert new["volumes"] == old["volumes"]
    # Nothing else in the object moved.
    expected = copy.deepcopy(dict(before))
    _replace_pod_spec(
        expected, {**old, "containers": [new_c if c["name"] == "pytorch" else c for c in old["containers"]]}
    )
    assert after == expected


def _replace_pod_spec(doc: dict[str, Any], pod_spec: dict[str, Any]) -> None:
    if doc["kind"] == "PyTorchJob":
        doc["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"] = pod_spec
    else:
        doc["template"]["spec"] = pod_spec


# ------------------------------------------------------------------------------ the base itself


@pytest.mark.parametrize("base", ["example", "sidecar"])
def test_base_builds_unchanged(base: str, bases: dict[str, Path], kustomize_build: Build) -> None:
    """The base alone builds to exactly what the compiler wrote, and it passes the CRD checks."""
    built = _by_kind(kustomize_build(bases[base]))
    written = _by_kind([yaml.safe_load((bases[base] / f).read_text()) for f in ("pytorchjob.yaml", "podtemplate.yaml")])
    assert built == written
    _assert_accepted(*built.values())


# ------------------------------------------------------------------------------ (a) images


def test_images_changes_every_pytorch_container(tmp_path: Path, bases: dict[str, Path], kustomize_build: Build) -> None:
    overlay = _write_overlay(
        tmp_path / "prod",
        bases["example"],
        images=[{"name": "ghcr.io/example/trainer", "newName": "registry.example.com/trainer", "newTag": "2.14.0"}],
    )
    built = _by_kind(kustomize_build(overlay))
    for doc in built.values():
        assert _container(_pod_spec(doc))["image"] == "registry.example.com/trainer:2.14.0"
    _assert_accepted(*built.values())


def test_images_leaves_sidecars_alone(tmp_path: Path, bases: dict[str, Path], kustomize_build: Build) -> None:
    overlay = _write_overlay(
        tmp_path / "o", bases["sidecar"], images=[{"name": "ghcr.io/example/vit", "newTag": "1.3"}]
    )
    for doc in kustomize_build(overlay):
        assert _container(_pod_spec(doc))["image"] == "ghcr.io/example/vit:1.3"
        assert _container(_pod_spec(doc), "log-shipper")["image"] == "fluent/fluent-bit:3.0"


# ------------------------------------------------------------------------------ (b) strategic merge


@pytest.mark.parametrize("base", ["example", "sidecar"])
def test_strategic_merge_on_the_job_and_the_podtemplate(
    base: str, tmp_path: Path, bases: dict[str, Path], kustomize_build: Build
) -> None:
    """(b) env and a limit merge into ``pytorch``; (b2) the same patch on the PodTemplate, in one kustomization."""
    before = _by_kind(kustomize_build(bases[base]))
    overlay = _write_overlay(
        tmp_path / "o",
        bases[base],
        patches=[
            {"patch": _job_patch(before["PyTorchJob"])},
            {"patch": _podtemplate_patch(before["PodTemplate"])},
        ],
    )
    after = _by_kind(kustomize_build(overlay))
    for kind in ("PyTorchJob", "PodTemplate"):
        _assert_patched(before[kind], after[kind])
    if base == "sidecar":
        assert [c["name"] for c in _pod_spec(after["PyTorchJob"])["containers"]] == ["pytorch"]
        assert [c["name"] for c in _pod_spec(after["PyTorchJob"])["initContainers"]] == ["log-shipper"]
    _assert_accepted(*after.values())


def test_podtemplate_merges_as_with_the_builtin_schema(
    tmp_path: Path, bases: dict[str, Path], kustomize_build: Build
) -> None:
    """openapi.json replaces kustomize's built-in schema; for PodTemplate it must not change a thing.

    The patch touches every list kind a user is likely to patch, with Kubernetes' own keys:
    containers, env, volumes (by name), volumeMounts (by mountPath), ports (by containerPort).
    """
    bare = _without_openapi(bases["sidecar"], tmp_path / "bare")
    pt = _by_kind(kustomize_build(bare))["PodTemplate"]
    patch = _identity(pt)
    patch["template"] = {
        "spec": {
            "volumes": [{"name": "cache", "emptyDir": {}}],
            "imagePullSecrets": [{"name": "regcred"}],
            "containers": [
                {
                    "name": "pytorch",
                    "env": [{"name": "A", "value": "1"}],
                    "ports": [{"containerPort": 9090, "name": "metrics"}],
                    "volumeMounts": [{"name": "logs", "mountPath": "/logs", "readOnly": True}],
                },
            ],
            "initContainers": [{"name": "log-shipper", "env": [{"name": "B", "value": "2"}]}],
        }
    }
    patches = [{"patch": yaml.safe_dump(patch, sort_keys=False)}]
    ours = _by_kind(kustomize_build(_write_overlay(tmp_path / "ours", bases["sidecar"], patches=patches)))
    builtin = _by_kind(kustomize_build(_write_overlay(tmp_path / "builtin", bare, patches=patches)))
    assert ours["PodTemplate"] == builtin["PodTemplate"]
    mounts = _container(_pod_spec(ours["PodTemplate"]))["volumeMounts"]
    assert {"name": "logs", "mountPath": "/logs", "readOnly": True} in mounts and len(mounts) == 2
    shipper = _container(_pod_spec(ours["PodTemplate"]), "log-shipper")
    assert shipper["image"] == "fluent/fluent-bit:3.0" and shipper["env"] == [{"name": "B", "value": "2"}]


def _without_openapi(base: Path, target: Path) -> Path:
    """A copy of ``base`` as it would be without our openapi file."""
    shutil.copytree(base, target)
    (target / kustomize.OPENAPI_FILE).unlink()
    text = (target / "kustomization.yaml").read_text()
    (target / "kustomization.yaml").write_text(text.replace(f"openapi:\n  path: {kustomize.OPENAPI_FILE}\n", ""))
    assert "openapi" not in yaml.safe_load((target / "kustomization.yaml").read_text())
    return target


def test_without_openapi_a_patch_replaces_the_containers_list(
    tmp_path: Path, bases: dict[str, Path], kustomize_build: Build
) -> None:
    """Why openapi.json exists: kustomize does not know the CRD's merge keys and replaces the list.

    ``pytorch`` keeps only what the patch says (no image, command, args or mounts), silently:
    kustomize exits 0. The webhook check catches the missing image. (The sidecar, a native
    sidecar in initContainers, is in a list the patch does not touch.)
    """
    bare = _without_openapi(bases["sidecar"], tmp_path / "bare")
    job = _by_kind(kustomize_build(bare))["PyTorchJob"]
    after = _by_kind(kustomize_build(_write_overlay(tmp_path / "o", bare, patches=[{"patch": _job_patch(job)}])))
    containers = _pod_spec(after["PyTorchJob"])["containers"]
    assert [c["name"] for c in containers] == ["pytorch"]
    assert set(containers[0]) == {"name", "env", "resources"}
    assert containers[0]["env"] == PYTORCH_PATCH["env"], "the compiled env is gone too"
    # The webhook rules alone (no CRD files needed) reject the result.
    assert any(e.endswith("image: required field is missing") for e in webhook_errors(after["PyTorchJob"]))


def test_a_patch_must_repeat_the_namespace(tmp_path: Path, bases: dict[str, Path], kustomize_build: Build) -> None:
    job = _by_kind(kustomize_build(bases["example"]))["PyTorchJob"]
    patch = yaml.safe_load(_job_patch(job))
    del patch["metadata"]["namespace"]
    overlay = _write_overlay(tmp_path / "o", bases["example"], patches=[{"patch": yaml.safe_dump(patch)}])
    with pytest.raises(Exception, match="no resource matches strategic merge patch"):
        kustomize_build(overlay)


def test_an_overlay_openapi_replaces_the_base_one(
    tmp_path: Path, bases: dict[str, Path], kustomize_build: Build
) -> None:
    """An overlay with its own ``openapi:`` wins over the base's, for the base's resources too.

    Documented in docs/overlays.md: an overlay that needs its own schema must carry our
    definitions as well (kustomize refuses to load ../base/openapi.json from an overlay).
    """
    job = _by_kind(kustomize_build(bases["sidecar"]))["PyTorchJob"]
    overlay = _write_overlay(
        tmp_path / "o", bases["sidecar"], patches=[{"patch": _job_patch(job)}], openapi={"path": "own.json"}
    )
    (overlay / "own.json").write_text('{"definitions": {}}\n')
    [pytorch] = _pod_spec(_by_kind(kustomize_build(overlay))["PyTorchJob"])["containers"]
    assert "image" not in pytorch  # the list was replaced
    (overlay / "own.json").write_text(kustomize.openapi_text())
    [pytorch] = _pod_spec(_by_kind(kustomize_build(overlay))["PyTorchJob"])["containers"]
    assert pytorch["image"] == "ghcr.io/example/vit:1.2"  # merged by name


# ------------------------------------------------------------------------------ (c) JSON6902


def test_json6902_changes_the_worker_count(tmp_path: Path, bases: dict[str, Path], kustomize_build: Build) -> None:
    """Scale to 4 workers. elasticPolicy's bounds must move too: PET_NNODES comes from them,
    and workers beyond maxReplicas never join the rendezvous (no schema or webhook checks it)."""
    before = _by_kind(kustomize_build(bases["example"]))["PyTorchJob"]
    ops = [
        {"op": "replace", "path": "/spec/pytorchReplicaSpecs/Worker/replicas", "value": 4},
        {"op": "replace", "path": "/spec/elasticPolicy/minReplicas", "value": 4},
        {"op": "replace", "path": "/spec/elasticPolicy/maxReplicas", "value": 4},
    ]
    target = {"group": "kubeflow.org", "version": "v1", "kind": "PyTorchJob", "name": "llm-finetune"}
    overlay = _write_overlay(
        tmp_path / "o", bases["example"], patches=[{"target": target, "patch": yaml.safe_dump(ops)}]
    )
    after = _by_kind(kustomize_build(overlay))
    job = after["PyTorchJob"]
    expected = copy.deepcopy(before)
    expected["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 4
    expected["spec"]["elasticPolicy"].update(minReplicas=4, maxReplicas=4)
    assert job == expected
    policy = job["spec"]["elasticPolicy"]
    assert policy["minReplicas"] <= job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] <= policy["maxReplicas"]
    assert after["PodTemplate"] == _by_kind(kustomize_build(bases["example"]))["PodTemplate"]
    _assert_accepted(job)


# ------------------------------------------------------------------------------ several specs


def test_one_base_per_spec_and_one_overlay_over_both(
    tmp_path: Path, bases: dict[str, Path], kustomize_build: Build
) -> None:
    """``elastic-compile a.yaml b.yaml -o out/`` writes out/<namespace>/<name>/ bases; an overlay can take both."""
    out = tmp_path / "out"
    spec = tmp_path / "vit.yaml"
    spec.write_text(SIDECAR_SPEC, encoding="utf-8")
    assert main([str(EXAMPLE), str(spec), "-o", str(out), "--root", str(tmp_path)]) == 0
    assert sorted(p.name for p in out.iterdir()) == [output.MANIFEST, "ml", "ml-team"]
    places = [out / "ml-team" / "llm-finetune", out / "ml" / "vit-train"]
    for place in places:
        assert sorted(p.name for p in place.iterdir()) == [
            "kustomization.yaml",
            kustomize.OPENAPI_FILE,
            "pytorchjob.yaml",
        ]
    jobs = [kustomize_build(place)[0] for place in places]
    overlay = _write_overlay(tmp_path / "o", places, patches=[{"patch": _job_patch(job)} for job in jobs])
    built = kustomize_build(overlay)
    assert [d["metadata"]["name"] for d in built] == ["llm-finetune", "vit-train"]
    for before, after in zip(jobs, built, strict=True):
        _assert_patched(before, after)
    _assert_accepted(*built)


# ------------------------------------------------------------------------------ the docs' own overlay


def _doc_block(text: str, first_line: str) -> str:
    """The fenced YAML block of docs/overlays.md that starts with ``first_line``."""
    for block in re.findall(r"```yaml\n(.*?)```", text, flags=re.S):
        if block.startswith(first_line + "\n"):
            return str(block)
    raise AssertionError(f"docs/overlays.md has no block starting with {first_line!r}")


def test_the_docs_overlay_builds_a_pod_that_can_finish(
    tmp_path: Path, kustomize_build: Build, kubectl: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/overlays.md's production overlay, as written, over the example's base: the sidecar is native.

    The doc's excerpt of ``kubectl kustomize deploy/prod`` is what kubectl prints, line for line.
    """
    docs = (ROOT / "docs" / "overlays.md").read_text(encoding="utf-8")
    deploy = tmp_path / "deploy"
    assert main([str(EXAMPLE), "-t", "all", "-o", str(deploy / "base"), "--root", str(tmp_path)]) == 0
    (deploy / "prod").mkdir()
    for name in ("kustomization.yaml", "pytorch-env.yaml"):
        (deploy / "prod" / name).write_text(_doc_block(docs, f"# deploy/prod/{name}"), encoding="utf-8")
    built = _by_kind(kustomize_build(deploy / "prod"))
    printed = subprocess.run(
        [kubectl, "kustomize", str(deploy / "prod")], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    shown = docs.split("$ kubectl kustomize deploy/prod\n", 1)[1].split("```", 1)[0]
    assert support_docs.is_excerpt(shown) and support_docs.not_printed(shown, printed) == []
    # ... and its excerpt of the same overlay over a base without openapi.json
    _without_openapi(deploy / "base", tmp_path / "bare" / "base")
    shutil.copytree(deploy / "prod", tmp_path / "bare" / "prod")
    bare = subprocess.run(
        [kubectl, "kustomize", str(tmp_path / "bare" / "prod")], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    shown = docs.split("$ kubectl kustomize deploy/prod      # the same overlay over a base without openapi.json\n")[1]
    shown = shown.split("```", 1)[0]
    assert support_docs.is_excerpt(shown) and support_docs.not_printed(shown, bare) == []
    pod = _pod_spec(built["PyTorchJob"])
    assert [c["name"] for c in pod["containers"]] == ["pytorch"]
    assert pod["initContainers"] == [
        {"image": "fluent/fluent-bit:3.0", "name": "log-shipper", "restartPolicy": "Always"}
    ]
    assert pod["nodeSelector"] == {"cloud.google.com/gke-nodepool": "a3-prod"}
    toleration = {"key": "dedicated", "operator": "Equal", "value": "training", "effect": "NoSchedule"}
    assert pod["tolerations"] == [toleration]
    (training,) = pod["containers"]
    assert training["image"] == "ghcr.io/example/trainer:2.14.0-cuda13"
    assert training["resources"]["limits"] == {"ephemeral-storage": "200Gi", "memory": "480Gi", "nvidia.com/gpu": "8"}
    assert built["PyTorchJob"]["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 4
    _assert_accepted(*built.values())
    manifest = tmp_path / "prod.yaml"
    manifest.write_text(yaml.safe_dump_all(built.values()), encoding="utf-8")
    capsys.readouterr()
    assert main(["run", str(manifest), "--dry-run"]) == 0
    err = capsys.readouterr().err
    assert "native sidecar log-shipper is not run locally" in err and "regular sidecar" not in err, err
