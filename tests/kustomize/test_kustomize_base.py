"""The files of a base, without kubectl: kustomization.yaml, and openapi.json against Kubernetes' own keys."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from elastic_compile import targets
from elastic_compile.compiler import kustomize, output
from elastic_compile.compiler.pipeline import ALL, compile_text
from elastic_compile.targets import kustomize_kinds

FLYTE_SPEC = """\
name: tiny
image: ghcr.io/example/tiny:1.0
command: [python, train.py]
flyte: {project: ml, domain: development, version: v1}
"""


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
    assert json.loads(text) == kustomize.openapi_schema()
    assert text.isascii() and text.endswith("}\n")
    # One definition per line: a change to one kind's keys is a one-line diff in the base.
    assert text.count("\n") == len(kustomize.openapi_schema()["definitions"]) + 7


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


def test_every_kind_we_emit_and_every_builtin_kind_has_a_schema() -> None:
    """The file replaces kustomize's built-in schema for the whole build: a kind left out loses its merge keys."""
    outputs = compile_text(FLYTE_SPEC, targets=(ALL,)).outputs
    emitted = {(o.document.api_version, o.document.kind) for o in outputs if o.is_resource}
    assert emitted == {("kubeflow.org/v1", "PyTorchJob"), ("v1", "PodTemplate")}
    kinds = _gvks(kustomize.openapi_schema())
    assert emitted <= kinds
    workloads = {("apps/v1", k) for k in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet")}
    assert workloads | {("batch/v1", "Job"), ("batch/v1", "CronJob"), ("v1", "Pod"), ("v1", "Service")} <= kinds
    outputs = compile_text("target: trainjob\n" + FLYTE_SPEC, targets=(ALL,)).outputs
    emitted = {(o.document.api_version, o.document.kind) for o in outputs if o.is_resource}
    assert ("trainer.kubeflow.org/v1alpha1", "TrainJob") in emitted
    trainer = {("trainer.kubeflow.org/v1alpha1", k) for k in ("TrainJob", "TrainingRuntime", "ClusterTrainingRuntime")}
    assert emitted | trainer <= kinds


def _merge_lists(definition: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {
        field: (prop.get("x-kubernetes-patch-merge-key", ""), prop["x-kubernetes-patch-strategy"])
        for field, prop in definition.get("properties", {}).items()
        if "x-kubernetes-patch-strategy" in prop
    }


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
    # Newer than kustomize's built-in schema (Kubernetes 1.21.2): replaced there, so here too.
    assert "schedulingGates" not in pod and "resourceClaims" not in pod


def test_pytorchjob_pod_templates_are_kubernetes_own() -> None:
    """Master and Worker (any replica type) reach the PodTemplateSpec a Deployment's template is."""
    defs = kustomize.openapi_schema()["definitions"]
    specs = defs["org.kubeflow.v1.PyTorchJobSpec"]["properties"]["pytorchReplicaSpecs"]
    assert specs["additionalProperties"]["properties"]["template"] == {
        "$ref": f"#/definitions/{kustomize_kinds.POD_TEMPLATE_SPEC}"
    }
    assert (
        defs["io.k8s.api.apps.v1.DeploymentSpec"]["properties"]["template"]
        == specs["additionalProperties"]["properties"]["template"]
    )


def job_ref() -> dict[str, Any]:
    template = {"$ref": f"#/definitions/{kustomize_kinds.JOB_TEMPLATE_SPEC}"}
    return {"type": "object", "properties": {"template": template}}


def test_a_registered_target_adds_its_kinds_to_every_base() -> None:
    """openapi.json is assembled from the targets' own answers (Target.kustomize): one registered joins it."""

    class Widget(targets.Target):
        name, summary, order = "widget", "a Widget", 90

        def kustomize(self) -> kustomize_kinds.Kustomize:
            job = kustomize_kinds.obj(template=kustomize_kinds.ref(kustomize_kinds.JOB_TEMPLATE_SPEC))
            spec = kustomize_kinds.obj(jobs=kustomize_kinds.merged_list("name", job))
            widget = kustomize_kinds.CustomKind("widgets.example.com", "v1", "Widget", spec)
            return kustomize_kinds.Kustomize(kinds=(widget,))

    before = kustomize.openapi_text()
    targets.register(Widget())
    try:
        schema = json.loads(kustomize.openapi_text())
        assert ("widgets.example.com/v1", "Widget") in _gvks(schema)
        assert schema["definitions"]["com.example.widgets.v1.WidgetSpec"]["properties"]["jobs"]["items"] == job_ref()
    finally:
        targets.unregister("widget")
    assert kustomize.openapi_text() == before
    schema = kustomize.openapi_schema()
    assert set(_refs(schema)) <= {f"#/definitions/{name}" for name in schema["definitions"]}


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
