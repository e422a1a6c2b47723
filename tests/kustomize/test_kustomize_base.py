"""The files of a base, without kubectl: kustomization.yaml, and openapi.json against Kubernetes' own keys."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from elastic_compile.compiler import kustomize, output
from elastic_compile.compiler.pipeline import ALL, compile_text

FLYTE_SPEC = """\
name: tiny
image: ghcr.io/example/tiny:1.0
command: [python, train.py]
flyte: {project: ml, domain: development, version: v1}
"""

# PodSpec lists with a Kubernetes patch strategy that openapi.json leaves out, and why.
NOT_COVERED = {
    # The API server rejects ephemeral containers in a pod template ("cannot be set on create").
    "ephemeralContainers",
}


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref":
                yield value
            else:
                yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


def test_openapi_text_is_canonical() -> None:
    text = kustomize.openapi_text()
    assert text == kustomize.openapi_text()
    assert text == json.dumps(json.loads(text), indent=2, sort_keys=True, ensure_ascii=True) + "\n"
    assert text.isascii() and text.endswith("}\n")


def test_every_ref_resolves_inside_the_file() -> None:
    """kustomize resolves only ``#/definitions/<name>`` of this file; any other $ref silently disables merging."""
    schema = kustomize.openapi_schema()
    refs = set(_refs(schema))
    assert refs, "the kinds reach their pod specs through $ref"
    for ref in refs:
        assert ref.startswith("#/definitions/"), ref
        assert ref.removeprefix("#/definitions/") in schema["definitions"], ref


def _gvks(schema: dict[str, Any]) -> set[tuple[str, str]]:
    found = set()
    for definition in schema["definitions"].values():
        for gvk in definition.get("x-kubernetes-group-version-kind", []):
            group_version = f"{gvk['group']}/{gvk['version']}" if gvk["group"] else gvk["version"]
            found.add((group_version, gvk["kind"]))
    return found


def test_every_kind_we_emit_has_a_schema() -> None:
    """The file replaces kustomize's built-in schema: a kind left out loses its merge keys."""
    outputs = compile_text(FLYTE_SPEC, targets=(ALL,)).outputs
    emitted = {(o.document.api_version, o.document.kind) for o in outputs if o.is_resource}
    assert emitted == {("kubeflow.org/v1", "PyTorchJob"), ("v1", "PodTemplate")}
    assert _gvks(kustomize.openapi_schema()) == emitted


def _merge_lists(definition: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {
        field: (prop["x-kubernetes-patch-merge-key"], prop["x-kubernetes-patch-strategy"])
        for field, prop in definition.get("properties", {}).items()
        if "x-kubernetes-patch-strategy" in prop
    }


@pytest.fixture(scope="module")
def kubernetes_definitions() -> dict[str, Any]:
    """Kubernetes' own definitions (kubernetes-validate's copy), used here only as the oracle."""
    kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="install the test extra")
    root = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
    newest = max(
        (p for p in root.glob("v*-local") if p.is_dir()), key=lambda p: tuple(map(int, p.name[1:-6].split(".")))
    )
    data = json.loads((newest / "_definitions.json").read_text(encoding="utf-8"))
    return dict(data.get("definitions") or data["$defs"])


@pytest.mark.parametrize("name", ["PodSpec", "Container"])
def test_merge_keys_are_kubernetes_own(name: str, kubernetes_definitions: dict[str, Any]) -> None:
    """Same keys and strategies as Kubernetes, so a PodTemplate patch behaves as with kubectl's built-in schema.

    volumeMounts merge by mountPath and ports by containerPort, not by name: that is
    Kubernetes' choice (a volume may be mounted at several paths, a port need not be named).
    """
    full = f"io.k8s.api.core.v1.{name}"
    ours = _merge_lists(kustomize.openapi_schema()["definitions"][full])
    theirs = {k: v for k, v in _merge_lists(kubernetes_definitions[full]).items() if k not in NOT_COVERED}
    assert ours == theirs


def test_kubernetes_keys_for_the_lists_users_patch() -> None:
    """The keys spelled out, for a reader who has no Kubernetes definitions at hand."""
    defs = kustomize.openapi_schema()["definitions"]
    pod, container = (
        _merge_lists(defs["io.k8s.api.core.v1.PodSpec"]),
        _merge_lists(defs["io.k8s.api.core.v1.Container"]),
    )
    assert pod["containers"] == pod["initContainers"] == ("name", "merge")
    assert pod["volumes"] == ("name", "merge,retainKeys")
    assert container["env"] == ("name", "merge")
    assert container["volumeMounts"] == ("mountPath", "merge")
    assert container["ports"] == ("containerPort", "merge")


def test_replica_specs_are_a_map() -> None:
    """Master and Worker (any replica type) reach the same ReplicaSpec, as in the CRD."""
    defs = kustomize.openapi_schema()["definitions"]
    specs = defs["org.kubeflow.v1.PyTorchJobSpec"]["properties"]["pytorchReplicaSpecs"]
    assert specs["additionalProperties"] == {"$ref": "#/definitions/org.kubeflow.v1.ReplicaSpec"}


def test_kustomization_lists_kubernetes_objects_and_the_openapi_file() -> None:
    compiled = compile_text(FLYTE_SPEC, targets=(ALL,))
    files = output.directory_files([compiled], "yaml")
    assert sorted(files) == [
        "flyte-task.yaml",
        "kustomization.yaml",
        "openapi.json",
        "podtemplate.yaml",
        "pytorchjob.yaml",
    ]
    kustomization = yaml.safe_load(files["kustomization.yaml"])
    # The Flyte TaskSpec is no Kubernetes object: kustomize would refuse the whole base.
    assert kustomization == {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": ["pytorchjob.yaml", "podtemplate.yaml"],
        "openapi": {"path": "openapi.json"},
    }
    assert files["kustomization.yaml"].startswith("# Generated by elastic-compile")
    assert files["openapi.json"] == kustomize.openapi_text()


def test_json_format_keeps_yaml_kustomization() -> None:
    """kustomize only reads kustomization.yaml (or .yml, or Kustomization); resources may be JSON."""
    files = output.directory_files([compile_text(FLYTE_SPEC)], "json")
    assert sorted(files) == ["kustomization.yaml", "openapi.json", "pytorchjob.json"]
    assert yaml.safe_load(files["kustomization.yaml"])["resources"] == ["pytorchjob.json"]


def test_docs_show_the_real_kustomization() -> None:
    """docs/overlays.md quotes kustomization.yaml verbatim; keep the quote true."""
    docs = (Path(__file__).resolve().parents[2] / "docs" / "overlays.md").read_text(encoding="utf-8")
    quoted = "$ cat deploy/base/kustomization.yaml\n" + kustomize.kustomization_text(
        ["pytorchjob.yaml", "podtemplate.yaml"]
    )
    assert quoted in docs
