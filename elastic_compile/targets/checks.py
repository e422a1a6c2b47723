"""Checks every Kubernetes target applies to what it rendered: identity and known fields.

A custom template's typo (``restartPolcy``) must be an error here, not a field the API
server prunes with only a warning. A shape is a nested dict of known fields: a dict is an
object, None accepts any value, and the string ``"podspec"`` is a PodSpec, checked
against the compact Kubernetes schema.
"""

from __future__ import annotations

from typing import Any

from elastic_compile.schema.podspec import podspec_problems

#: ObjectMeta fields we may emit on a top-level object.
META_SHAPE: dict[str, Any] = dict.fromkeys(
    ("name", "namespace", "labels", "annotations", "generateName", "finalizers", "ownerReferences")
)
#: A PodTemplateSpec.
POD_SHAPE: dict[str, Any] = {
    "metadata": dict.fromkeys(("name", "namespace", "labels", "annotations", "finalizers")),
    "spec": "podspec",
}


def identity_errors(doc: dict[str, Any], api_version: str | None, kind: str | None, name: str) -> list[str]:
    """apiVersion, kind and metadata.name as the document must have them."""
    problems = []
    if doc.get("apiVersion") != api_version or doc.get("kind") != kind:
        problems.append(f"expected apiVersion {api_version} and kind {kind}")
    meta = doc.get("metadata")
    if not isinstance(meta, dict) or meta.get("name") != name:
        problems.append(f"metadata.name must be {name}")
    return problems


def shape_errors(value: Any, shape: Any, path: str = "") -> list[str]:
    """Unknown fields (and non-objects where objects belong) in ``value``, by ``shape``."""
    if shape is None:
        return []
    if shape == "podspec":
        return [f"{path}.{'.'.join(map(str, loc))}: {msg}" for loc, msg in podspec_problems(value)] \
            if isinstance(value, dict) else [f"{path}: expected a mapping"]  # fmt: skip
    if not isinstance(value, dict):
        return [f"{path or 'the document'}: expected a mapping"]
    errors = []
    for key, item in value.items():
        where = f"{path}.{key}" if path else str(key)
        if key not in shape:
            errors.append(f"{where}: unknown field")
        else:
            errors += shape_errors(item, shape[key], where)
    return errors
