"""The kustomize base that ``-o DIR`` writes: ``kustomization.yaml`` and ``openapi.json``.

Why ``openapi.json`` exists: kustomize merges a strategic-merge patch into a list by a
key only when its OpenAPI schema names that key. It knows Kubernetes' built-in kinds but
not the PyTorchJob CRD, so a patch that touches
``spec.pytorchReplicaSpecs.Worker.template.spec.containers`` silently *replaces* the whole
list: sidecars vanish and the ``pytorch`` container loses its command, args, env and
mounts (tooling.md §2; ``tests/kustomize/test_overlays.py`` shows it).

The kustomization's ``openapi: {path: openapi.json}`` fixes that, but the file then
*replaces* kustomize's built-in schema for every kind in the build, PodTemplate included.
So the schema below is self-contained: it gives PyTorchJob and every core kind we emit
the list merge keys and strategies Kubernetes itself uses (``k8s.io/api/core/v1/types.go``
``patchMergeKey`` / ``patchStrategy`` tags), and nothing else. Lists and fields it does
not name behave as Kubernetes' own atomic lists do (a patch replaces them), and maps
merge key by key, exactly as with the built-in schema.

What kustomize v5.8.1 (in kubectl 1.37) needs, found by experiment:

- ``definitions`` with ``x-kubernetes-group-version-kind`` on each top-level kind; without
  it the kind falls back to no schema. ``swagger``, ``info``, ``paths`` and ``type`` are not
  read; we keep them so the file is an ordinary Swagger 2.0 document.
- ``$ref`` must be ``#/definitions/<name>`` inside this file. Any other form (a bare name,
  a reference into kustomize's built-in schema) does not resolve and silently disables
  merging below it.
- Both ``x-kubernetes-patch-merge-key`` and ``x-kubernetes-patch-strategy: merge`` on the
  list: the key alone still replaces the list, the strategy alone is an error, and the
  server-side-apply markers (``x-kubernetes-list-type: map``, ``list-map-keys``) are ignored.
- ``additionalProperties`` is followed, so ``pytorchReplicaSpecs`` is typed as the map it
  is in the CRD and covers Master and Worker alike.
- ``retainKeys`` (Kubernetes' strategy for ``volumes``) is accepted and ignored, with the
  built-in schema as with ours: patching a volume's source adds it next to the old one.
  We keep Kubernetes' value so a PodTemplate patch behaves as with the built-in schema.

The PyTorchJob CRD is not copied (it is not ours to ship); these few definitions are
written here from the field paths in kubeflow-pytorchjob.md §1.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from elastic_compile.core.emit import to_yaml

KUSTOMIZATION_FILE = "kustomization.yaml"
OPENAPI_FILE = "openapi.json"

# Definition names follow Kubernetes' own (reverse-DNS group, version, kind), so a user
# who merges this file with another OpenAPI document gets the same names, not duplicates.
_CORE = "io.k8s.api.core.v1."
_KUBEFLOW = "org.kubeflow.v1."

# Kubernetes' strategic-merge keys (k8s.io/api/core/v1/types.go). volumeMounts merge by
# mountPath, not name: one volume may be mounted at several paths (the name is not unique
# in the list), and using Kubernetes' keys keeps a PodTemplate patch behaving as it would
# with kubectl's built-in schema. Entries: field -> (merge key, patch strategy).
_POD_SPEC_LISTS: dict[str, tuple[str, str]] = {
    "containers": ("name", "merge"),
    "initContainers": ("name", "merge"),
    "volumes": ("name", "merge,retainKeys"),
    "imagePullSecrets": ("name", "merge"),
    "hostAliases": ("ip", "merge"),
    "topologySpreadConstraints": ("topologyKey", "merge"),
    "schedulingGates": ("name", "merge"),
    "resourceClaims": ("name", "merge,retainKeys"),
    "evictionResponders": ("name", "merge"),
}
# Left out: ephemeralContainers, which the API server rejects in a pod template.
_CONTAINER_LISTS: dict[str, tuple[str, str]] = {
    "env": ("name", "merge"),
    "ports": ("containerPort", "merge"),
    "volumeMounts": ("mountPath", "merge"),
    "volumeDevices": ("devicePath", "merge"),
}
# Lists of containers: their items are Containers, whose own lists merge too.
_CONTAINER_FIELDS = ("containers", "initContainers")


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/definitions/{name}"}


def _object(properties: dict[str, Any], description: str) -> dict[str, Any]:
    return {"type": "object", "description": description, "properties": properties}


def _merged_list(key: str, strategy: str, items: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "array",
        "items": items,
        "x-kubernetes-patch-merge-key": key,
        "x-kubernetes-patch-strategy": strategy,
    }


def _gvk(group: str, version: str, kind: str) -> list[dict[str, str]]:
    return [{"group": group, "kind": kind, "version": version}]


def openapi_schema() -> dict[str, Any]:
    """The OpenAPI (Swagger 2.0) document kustomize reads through ``openapi: {path: ...}``."""
    pod_spec = {
        field: _merged_list(
            key, strategy, _ref(_CORE + "Container") if field in _CONTAINER_FIELDS else {"type": "object"}
        )
        for field, (key, strategy) in _POD_SPEC_LISTS.items()
    }
    container = {
        field: _merged_list(key, strategy, {"type": "object"}) for field, (key, strategy) in _CONTAINER_LISTS.items()
    }
    definitions: dict[str, Any] = {
        _KUBEFLOW + "PyTorchJob": {
            **_object({"spec": _ref(_KUBEFLOW + "PyTorchJobSpec")}, "Kubeflow training-operator PyTorchJob."),
            "x-kubernetes-group-version-kind": _gvk("kubeflow.org", "v1", "PyTorchJob"),
        },
        _KUBEFLOW + "PyTorchJobSpec": _object(
            {
                "pytorchReplicaSpecs": {
                    "type": "object",
                    "description": "Replica type (Master, Worker) -> ReplicaSpec.",
                    "additionalProperties": _ref(_KUBEFLOW + "ReplicaSpec"),
                }
            },
            "PyTorchJob spec: only the path to the pod templates.",
        ),
        _KUBEFLOW + "ReplicaSpec": _object(
            {"template": _ref(_CORE + "PodTemplateSpec")}, "One replica type: its pod template."
        ),
        _CORE + "PodTemplate": {
            **_object({"template": _ref(_CORE + "PodTemplateSpec")}, "Core PodTemplate."),
            "x-kubernetes-group-version-kind": _gvk("", "v1", "PodTemplate"),
        },
        _CORE + "PodTemplateSpec": _object({"spec": _ref(_CORE + "PodSpec")}, "Pod template: its pod spec."),
        _CORE + "PodSpec": _object(pod_spec, "Pod spec: the lists Kubernetes merges by key."),
        _CORE + "Container": _object(container, "Container: the lists Kubernetes merges by key."),
    }
    return {
        "swagger": "2.0",
        "info": {
            "title": "elastic-compile merge keys for kustomize",
            "description": (
                "Generated by elastic-compile. Gives kustomize the strategic-merge keys of PyTorchJob and "
                "PodTemplate so that patches merge containers, env and volumes instead of replacing them. "
                "It replaces kustomize's built-in schema for this build, so it covers every kind the base holds."
            ),
            # The document's own version, not the package's: a release must not make every
            # committed base stale for --check.
            "version": "v1",
        },
        "paths": {},
        "definitions": definitions,
    }


def openapi_text() -> str:
    """``openapi.json``: sorted keys and fixed indentation, so the bytes never vary."""
    return json.dumps(openapi_schema(), indent=2, sort_keys=True, ensure_ascii=True) + "\n"


# kustomize keeps comments out of its output, so this header is only for whoever opens
# the base: it tells them why openapi.json must stay.
_KUSTOMIZATION_HEADER = f"""\
# Generated by elastic-compile: change the spec and recompile, or layer an overlay on top.
# {OPENAPI_FILE} gives kustomize the merge keys of PyTorchJob lists (containers, env and
# volumes by name, volumeMounts by mountPath, ports by containerPort). Without it a
# strategic-merge patch replaces a PyTorchJob's whole containers list, dropping sidecars.
"""


def kustomization(resources: Sequence[str]) -> dict[str, Any]:
    """The Kustomization listing ``resources`` and pointing kustomize at ``openapi.json``."""
    return {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": list(resources),
        "openapi": {"path": OPENAPI_FILE},
    }


def kustomization_text(resources: Sequence[str]) -> str:
    """``kustomization.yaml``: a comment header, then the canonical YAML of :func:`kustomization`."""
    return _KUSTOMIZATION_HEADER + to_yaml([kustomization(resources)])
