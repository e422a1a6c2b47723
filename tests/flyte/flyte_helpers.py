"""Helpers for the Flyte tests: specs, compiling ``-t flyte``, comparing the way protobuf does."""

from __future__ import annotations

import json
from typing import Any

import yaml

from elastic_compile.compiler.pipeline import compile_text
from elastic_compile.core.emit import plain

IMAGE = "ghcr.io/example/trainer:v1"
FLYTE = {"project": "proj", "domain": "dev", "version": "v1"}
BASE: dict[str, Any] = {"name": "train", "image": IMAGE, "command": ["python", "train.py"], "flyte": FLYTE}


def spec_text(**fields: Any) -> str:
    """An elastic.yaml: the base spec with ``fields`` replacing top-level keys (None removes one)."""
    spec = {**BASE, **fields}
    return yaml.safe_dump({k: v for k, v in spec.items() if v is not None}, sort_keys=False)


def compile_flyte(text: str) -> dict[str, Any]:
    """``-t flyte`` of ``text`` as plain data (what the CLI prints, before formatting)."""
    (output,) = compile_text(text, "elastic.yaml", ["flyte"]).outputs
    doc: dict[str, Any] = plain(output.doc)
    return doc


def canonical(data: Any) -> str:
    """JSON text that tells ``2`` from ``2.0``: equal only when MessageToDict would agree exactly."""
    return json.dumps(data, sort_keys=True)


def containers(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The pod's containers by name."""
    return {c["name"]: c for c in doc["template"]["k8sPod"]["podSpec"]["containers"]}


def primary(doc: dict[str, Any]) -> dict[str, Any]:
    """The container Flyte runs the task in (config.primary_container_name)."""
    return containers(doc)[doc["template"]["config"]["primary_container_name"]]


def shm_mounts(doc: dict[str, Any]) -> list[str]:
    """Containers that mount a memory-backed emptyDir at /dev/shm (the meaning, whatever the volume's name)."""
    pod = doc["template"]["k8sPod"]["podSpec"]
    memory = {v["name"] for v in pod.get("volumes") or [] if (v.get("emptyDir") or {}).get("medium") == "Memory"}
    return [
        c["name"]
        for c in pod["containers"]
        if any(m["mountPath"] == "/dev/shm" and m["name"] in memory for m in c.get("volumeMounts") or [])
    ]
