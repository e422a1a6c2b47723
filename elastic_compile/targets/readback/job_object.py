"""The object around the pod: its kind's schema, its metadata, and the process count its devices imply."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from elastic_compile.core.resources import accelerator_counts, process_rule
from elastic_compile.schema.models import GPU_KEY, GPU_RESOURCE
from elastic_compile.targets.readback.draft import Draft, Path


def schema_problems(draft: Draft, data: Any, schema_file: str, api_version: str, kind: str) -> dict[str, Any]:
    """``data`` checked against its kind's compact schema: a copy without the fields the API server prunes.

    Unknown fields (which the API server rejects or prunes) are dropped with a warning;
    values of the wrong type or shape are errors, so the mapping reads only well-formed
    data. ``status`` is the cluster's and is left out quietly.
    """
    from elastic_compile.schema import compact
    from elastic_compile.schema.podspec import octal_hint

    doc = copy.deepcopy(data) if isinstance(data, dict) else {}
    if "status" in doc:
        draft.note(("status",), "status dropped (the cluster writes it)")
        doc.pop("status")
    schema = compact.load(schema_file)
    root = schema.root(api_version, kind)
    if root is None:  # pragma: no cover - the shipped schemas have these roots
        raise KeyError(f"{schema_file} has no schema for {api_version} {kind}")
    for problem in schema.problems(doc, root, decoded=(api_version, kind) in compact.WEBHOOK_DECODED):
        loc, message = octal_hint(doc, problem)
        if message.startswith("unknown field") and loc:
            draft.warn(loc, f"{message}: the API server would not keep it; dropped")
            parent: Any = doc
            for part in loc[:-1]:
                parent = parent[part]
            parent.pop(loc[-1], None)
        else:
            draft.fail(loc, message)
    return doc


def adopt_metadata(draft: Draft, doc: Mapping[str, Any]) -> None:
    """name, namespace, labels and annotations of the object; what the API server set is dropped."""
    from elastic_compile.targets.checks import SERVER_SET_METADATA

    meta = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
    assert isinstance(meta, dict)
    path: Path = ("metadata",)
    if "name" in meta:
        draft.set(("name",), meta["name"], (*path, "name"))
    else:
        draft.fail(path, "the object has no metadata.name (generateName cannot name a job's pods)")
    if meta.get("namespace") is not None:
        draft.set(("namespace",), meta["namespace"], (*path, "namespace"))
    if meta.get("labels"):
        draft.set(("labels",), dict(meta["labels"]), (*path, "labels"))
    annotations = dict(meta.get("annotations") or {})
    if LAST_APPLIED in annotations:
        draft.note((*path, "annotations", LAST_APPLIED), "kubectl's last-applied-configuration dropped")
        del annotations[LAST_APPLIED]
    if annotations:
        draft.set(("annotations",), annotations, (*path, "annotations"))
    for key in meta:
        if key in SERVER_SET_METADATA:
            draft.note((*path, key), f"metadata.{key} dropped (the API server sets it)")
        elif key not in ("name", "namespace", "labels", "annotations"):
            draft.warn((*path, key), f"cannot carry metadata.{key}; dropped")


#: kubectl apply's copy of the object, in an annotation.
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def drop_default_nproc(draft: Draft) -> None:
    """Leave out nproc_per_node where it means what the spec's default means (core/resources.process_rule)."""
    value = draft.get("nproc_per_node")
    if value is None:
        return
    sides = [
        {GPU_RESOURCE if k == GPU_KEY else str(k): str(v) for k, v in raw.items()}
        for raw in (draft.get("resources", side) or {} for side in ("requests", "limits"))
        if isinstance(raw, dict)
    ]
    counts = accelerator_counts(*sides)
    default, _rule = process_rule(counts)
    # auto and gpu count the devices the pod sees: the requested ones (not for Neuron devices, whose cores count).
    if value == default or (default and counts and value in ("auto", "gpu")):
        del draft.values["nproc_per_node"]
