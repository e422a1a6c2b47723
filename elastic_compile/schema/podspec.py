"""Compile-time check of ``pod_template.spec`` against the Kubernetes PodSpec schema.

Without it, a typo such as ``nodeSelectr`` passes the compiler, and the API server
silently prunes it from a PyTorchJob (custom resources are pruned, not rejected): the
job runs on the wrong nodes. So we validate the fragment here, with a location and a
did-you-mean, before anything is emitted.

The schema is a compact form of Kubernetes 1.33's PodSpec and everything it references
(descriptions dropped), stored in ``k8s_podspec.json`` and generated from the strict
schemas that kubernetes-validate bundles (``generate()``; a test keeps it current).
The validator is deliberately small: types, known fields, required fields, maps,
quantities and int-or-string; it has no dependency beyond the standard library.
"""

from __future__ import annotations

import difflib
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from elastic_compile.core.quantity import is_quantity

SCHEMA_FILE = Path(__file__).with_name("k8s_podspec.json")
KUBERNETES_VERSION = "1.33"
ROOT = "io.k8s.api.core.v1.PodSpec"

Loc = tuple[str | int, ...]
_INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}


# --------------------------------------------------------------------------- generation (dev only)


def generate(version: str = KUBERNETES_VERSION) -> dict[str, Any]:
    """Build the compact schema from kubernetes-validate's bundled strict schemas (a test dependency)."""
    import kubernetes_validate

    base = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema" / f"v{version}.0-local-strict"
    defs: dict[str, Any] = json.loads((base / "_definitions.json").read_text())["$defs"]
    out: dict[str, Any] = {}
    pending = [ROOT]
    while pending:
        name = pending.pop()
        if name in out:
            continue
        out[name] = None  # placeholder against cycles
        out[name] = _compact(defs[name], pending)
    return {"kubernetes": version, "root": ROOT, "definitions": dict(sorted(out.items()))}


def _types(node: dict[str, Any]) -> list[str]:
    raw = node.get("type", [])
    return [t for t in ([raw] if isinstance(raw, str) else raw) if t != "null"]


def _compact(node: dict[str, Any], pending: list[str]) -> dict[str, Any]:
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        if name == "io.k8s.apimachinery.pkg.api.resource.Quantity":
            return {"kind": "quantity"}
        if name == "io.k8s.apimachinery.pkg.util.intstr.IntOrString":
            return {"kind": "int-or-string"}
        pending.append(name)
        return {"ref": name}
    if "oneOf" in node:  # only Quantity and IntOrString use it, and they are $refs above
        return {}
    out: dict[str, Any] = {}
    types = _types(node)
    if types:
        out["type"] = types[0]
    if "format" in node and node["format"] in _INT_RANGES:
        out["format"] = node["format"]
    if "enum" in node:
        out["enum"] = [v for v in node["enum"] if v is not None]
    if "properties" in node:
        out["properties"] = {k: _compact(v, pending) for k, v in sorted(node["properties"].items())}
    if node.get("required"):
        out["required"] = sorted(node["required"])
    if isinstance(node.get("additionalProperties"), dict):
        out["values"] = _compact(node["additionalProperties"], pending)
    if "items" in node:
        out["items"] = _compact(node["items"], pending)
    keys = node.get("x-kubernetes-list-map-keys")
    if keys and node.get("x-kubernetes-list-type") == "map":
        out["mapKeys"] = list(keys)
    return out


# --------------------------------------------------------------------------- validation


@lru_cache(maxsize=1)
def _schema() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    return data


def _kind(value: Any) -> str:
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, bool):
        return "a boolean"
    if value is None:
        return "nothing (null)"
    if isinstance(value, (int, float)):
        return "a number"
    return "a string"


_EXPECTED = {
    "object": "a mapping",
    "array": "a list",
    "string": "a string",
    "integer": "a whole number",
    "number": "a number",
    "boolean": "true or false",
}


def podspec_problems(spec: dict[str, Any]) -> list[tuple[Loc, str]]:
    """Problems in a PodSpec fragment, each with its location relative to the fragment."""
    problems: list[tuple[Loc, str]] = []
    _check(spec, {"ref": ROOT}, (), problems)
    # A fragment: the compiler supplies the training container, so `containers` is optional.
    return [p for p in problems if p != ((), "containers is required here")]


def _resolve(node: dict[str, Any]) -> dict[str, Any]:
    while "ref" in node:
        node = _schema()["definitions"][node["ref"]]
    return node


def _check(value: Any, node: dict[str, Any], loc: Loc, problems: list[tuple[Loc, str]]) -> None:
    node = _resolve(node)
    kind = node.get("kind")
    if value is None:
        problems.append((loc, "empty value; give a value or remove the key"))
        return
    if kind == "quantity":
        text = value if isinstance(value, str) else None if isinstance(value, bool) else str(value)
        if text is None or not is_quantity(text):
            problems.append((loc, "not a Kubernetes quantity; use a number with an optional suffix: 500m, 8, 64Gi"))
        elif isinstance(value, float):
            # The PyTorchJob CRD types quantities as int-or-string: a bare 0.5 is rejected there.
            shown = getattr(value, "text", repr(value))
            problems.append((loc, f'write a fractional quantity as a string: "{shown}"'))
        return
    if kind == "int-or-string":
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            problems.append((loc, f"expected a whole number or a string, not {_kind(value)}"))
        return
    expected = node.get("type")
    if expected is not None and not _is_type(value, expected):
        problems.append((loc, f"expected {_EXPECTED.get(expected, expected)}, not {_kind(value)}"))
        return
    if "enum" in node and value not in node["enum"]:
        problems.append((loc, "must be one of " + ", ".join(map(str, node["enum"]))))
    fmt = node.get("format")
    if fmt in _INT_RANGES and isinstance(value, int):
        lo, hi = _INT_RANGES[fmt]
        if not lo <= value <= hi:
            problems.append((loc, f"out of range for {fmt}"))
    if isinstance(value, dict):
        _check_object(value, node, loc, problems)
    elif isinstance(value, list) and "items" in node:
        seen: dict[tuple[Any, ...], int] = {}
        for index, item in enumerate(value):
            _check(item, node["items"], (*loc, index), problems)
            if node.get("mapKeys") and isinstance(item, dict):
                key = tuple(json.dumps(item.get(k), sort_keys=True) for k in node["mapKeys"])
                if key in seen:
                    problems.append(
                        ((*loc, index), f"duplicate entry: same {', '.join(node['mapKeys'])} as item {seen[key]}")
                    )
                seen.setdefault(key, index)


def _is_type(value: Any, expected: str) -> bool:
    if expected == "object":
        return isinstance(value, dict)
    if expected == "array":
        return isinstance(value, list)
    if expected == "string":
        return isinstance(value, str)
    if expected == "boolean":
        return isinstance(value, bool)
    if expected == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if expected == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return True


def _check_object(value: dict[str, Any], node: dict[str, Any], loc: Loc, problems: list[tuple[Loc, str]]) -> None:
    properties: dict[str, Any] | None = node.get("properties")
    for key, item in value.items():
        if properties is not None and key in properties:
            _check(item, properties[key], (*loc, key), problems)
        elif "values" in node:
            _check(item, node["values"], (*loc, key), problems)
        elif properties is not None:
            close = difflib.get_close_matches(key, list(properties), n=1, cutoff=0.6)
            problems.append(((*loc, key), "unknown field" + (f"; did you mean {close[0]}?" if close else "")))
    for key in node.get("required", []):
        if key not in value:
            problems.append((loc, f"{key} is required here"))


def field_names(definition: str) -> list[str]:
    """Known fields of a definition (for messages and tests)."""
    return sorted(_resolve({"ref": definition}).get("properties", {}))
