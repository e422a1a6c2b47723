"""Compact schemas of Kubernetes objects and custom resources, and a small validator for them.

The compiler checks what it emits (and the user's ``pod_template.spec``) against the
schemas the API server applies, without shipping the upstream files (a 644 KB CRD, a
108 MB kubernetes-validate wheel) and without a dependency beyond the standard library.
``python -m elastic_compile.schema.generate`` writes the files in ``compact/`` from the
upstream sources; a test regenerates them and compares when the sources are at hand.

The format, one JSON file per source:

``definitions``
    name -> node. ``k8s-core.json`` holds Kubernetes' own definitions
    (``io.k8s.api.core.v1.PodSpec`` and everything it references); a CRD file holds the
    subtrees it repeats, named by the path of their first occurrence.
``roots``
    ``"<apiVersion> <kind>"`` -> node: what a whole object of that kind must be.

A node has any of:

``ref``            the named definition (in the file itself or in ``k8s-core.json``)
``type``           object, array, string, integer, number or boolean
``kind``           ``quantity`` (the API server's grammar) or ``int-or-string``
``format``         int32 or int64: the value's range
``enum``           allowed values
``properties``     field -> node; any other field is unknown (strict), unless ``open``
``required``       fields that must be present
``values``         node of every value of a map (``additionalProperties``)
``items``          node of every list item
``mapKeys``        a list-map: no two items may have the same values of these fields
                   (``keyDefaults`` fills in a missing key as the API server defaults it)
``set``            a list-set: no two items may be equal
``open``           unknown fields are kept (``x-kubernetes-preserve-unknown-fields``)
``nullable``       null is a value
``minimum`` ``maximum`` ``minLength`` ``maxLength`` ``minItems`` ``maxItems``
``minProperties`` ``maxProperties`` ``pattern``
                   as in OpenAPI (patterns must match the whole string, as Go's do)

What it leaves out: descriptions, defaults other than list-map keys, and CEL rules
(``x-kubernetes-validations``; each file lists the rules it does not evaluate).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final, NamedTuple

from elastic_compile.core.loader import dotted
from elastic_compile.core.pattern import pattern_matches
from elastic_compile.core.quantity import OUT_OF_RANGE, QUANTITY_PATTERN, is_quantity, out_of_range

#: Where the compact schemas live (package data).
COMPACT_DIR: Final = Path(__file__).with_name("compact")
#: The Kubernetes definitions every other file may refer to.
CORE_FILE: Final = "k8s-core.json"
#: Kubernetes' strategic-merge keys for the built-in kinds, for kustomize (not a schema to validate with).
MERGE_KEYS_FILE: Final = "k8s-merge-keys.json"

#: The end of the message for a missing required field (a base's fragment check drops them).
REQUIRED: Final = " is required here"

Loc = tuple[str | int, ...]
Problem = tuple[Loc, str]
Node = Mapping[str, Any]

#: Keywords the compact form keeps under their OpenAPI names.
OPENAPI_SAME: Final = (
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "pattern",
)

INT_RANGES: Final = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}

_EXPECTED: Final = {
    "object": "a mapping",
    "array": "a list",
    "string": "a string",
    "integer": "a whole number",
    "number": "a number",
    "boolean": "true or false",
}


def describe(value: Any) -> str:
    """What kind of YAML value ``value`` is, for messages ("a mapping", "a string", ...)."""
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
        # 2.0 is not an integer here: a float where an int32 belongs means arithmetic
        # leaked into a template (/ instead of //), and the operator cannot decode it.
        return isinstance(value, int) and not isinstance(value, bool)
    if expected == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return True


def _key(value: Any) -> Any:
    """What two list-map entries must differ in: their key values (JSON for unhashable ones)."""
    if isinstance(value, dict) and all(type(v) in (str, int) or v is None for v in value.values()):
        return tuple(value.items())
    return json.dumps(value, sort_keys=True, default=repr)


class CompactSchema(NamedTuple):
    """One compact schema file, its references resolved against ``k8s-core.json``."""

    name: str
    definitions: Mapping[str, Node]
    roots: Mapping[str, Node]
    meta: Mapping[str, Any]

    def root(self, api_version: str, kind: str) -> Node | None:
        """The node for a whole ``api_version`` ``kind`` object, or None when the file has none."""
        return self.roots.get(f"{api_version} {kind}")

    def problems(self, value: Any, node: Node, *, decoded: bool = False) -> list[Problem]:
        """Every problem in ``value`` against ``node``, each with its location below ``value``.

        ``decoded``: an admission webhook decodes the object into Go types before the API server
        validates it (:data:`WEBHOOK_DECODED`), so a bare fractional number in a quantity field
        reaches the schema as a quantity string, and is no problem.
        """
        found: list[Problem] = []
        self._check(value, node, (), found)
        if decoded:
            found = [(loc, message) for loc, message in found if not message.startswith(FRACTIONAL_QUANTITY)]
        return found

    def objects(self, value: Any, node: Node, loc: Loc = ()) -> Iterator[tuple[str, dict[str, Any], Loc]]:
        """Every mapping in ``value`` that ``node`` names a definition for: (definition, mapping, location).

        Follows the same properties, map values and list items as :meth:`problems`; a value of
        the wrong type is not entered. Rules about values hang off this walk
        (:mod:`elastic_compile.schema.podvalues`).
        """
        found: list[tuple[str, dict[str, Any], Loc]] = []
        self._objects(value, node, loc, found)
        return iter(found)

    def _objects(self, value: Any, node: Node, loc: Loc, found: list[tuple[str, dict[str, Any], Loc]]) -> None:
        # Collected into one list: nested generators would pass each item up every level.
        name = None
        while "ref" in node:
            name = node["ref"]
            node = self.definitions[name]
        if isinstance(value, dict):
            if name is not None:
                found.append((name, value, loc))
            properties: Mapping[str, Node] = node.get("properties", _NO_PROPERTIES)
            values = node.get("values")
            for key, item in value.items():
                if isinstance(item, (dict, list)):  # a scalar holds no mapping
                    child = properties.get(key, values)
                    if child is not None:
                        self._objects(item, child, (*loc, key), found)
        elif isinstance(value, list) and "items" in node:
            items = node["items"]
            for index, item in enumerate(value):
                if isinstance(item, (dict, list)):  # a scalar holds no mapping (a command's words)
                    self._objects(item, items, (*loc, index), found)

    def definition(self, name: str) -> Node:
        """The node of a named definition (``KeyError`` when the file has none)."""
        return self.definitions[name]

    def to_openapi(self, node: Node) -> dict[str, Any]:
        """``node`` as an OpenAPI v3 schema again, as a CRD would carry it (references inlined).

        What it gives back is what the compact form kept, so a validator of CRD schemas
        (the tests' oracle, ``tests/support/crdcheck.py``) can judge documents against a shipped compact schema with an
        engine of its own.
        """
        node = self._resolve(node)
        kind = node.get("kind")
        out: dict[str, Any] = {}
        if kind in ("quantity", "int-or-string"):
            out = {"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}]}
            if kind == "quantity":
                out["pattern"] = QUANTITY_PATTERN
        for key in ("type", "format", "enum", *OPENAPI_SAME, "nullable"):
            if key in node:
                out[key] = node[key]
        if "properties" in node:
            out["properties"] = {k: self.to_openapi(v) for k, v in node["properties"].items()}
        if "values" in node:
            out["additionalProperties"] = self.to_openapi(node["values"])
        if node.get("open"):
            out["x-kubernetes-preserve-unknown-fields"] = True
        if "items" in node:
            out["items"] = self.to_openapi(node["items"])
            if "mapKeys" in node:
                out["x-kubernetes-list-type"] = "map"
                out["x-kubernetes-list-map-keys"] = list(node["mapKeys"])
                for key, default in node.get("keyDefaults", {}).items():
                    out["items"].setdefault("properties", {}).setdefault(key, {})["default"] = default
            elif node.get("set"):
                out["x-kubernetes-list-type"] = "set"
        if "required" in node:
            out["required"] = list(node["required"])
        return out

    def to_crd(self) -> dict[str, Any]:
        """A CustomResourceDefinition serving each root of this file (for the tests' oracle)."""
        versions = []
        group, kind = "", ""
        for key, root in self.roots.items():
            api_version, kind = key.split(" ", 1)
            group, _, version = api_version.rpartition("/")
            versions.append({"name": version, "served": True, "schema": {"openAPIV3Schema": self.to_openapi(root)}})
        return {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": self.meta.get("crd", self.name)},
            "spec": {"group": group, "names": {"kind": kind}, "versions": versions},
        }

    # ------------------------------------------------------------------ validation

    def _resolve(self, node: Node) -> Node:
        """``node``, or the definition it refers to (through every ``ref``)."""
        while "ref" in node:
            node = self.definitions[node["ref"]]
        return node

    def _check(self, value: Any, node: Node, loc: Loc, problems: list[Problem]) -> None:
        while "ref" in node:
            node = self.definitions[node["ref"]]
        if value is None:
            if not node.get("nullable"):
                problems.append((loc, "empty value; give a value or remove the key"))
            return
        kind = node.get("kind")
        if kind == "quantity":
            _check_quantity(value, loc, problems)
            return
        if kind == "int-or-string":
            if isinstance(value, bool) or not isinstance(value, (int, str)):
                problems.append((loc, f"expected a whole number or a string, not {describe(value)}"))
            elif isinstance(value, str) and "pattern" in node and not pattern_matches(node["pattern"], value):
                problems.append((loc, f"must match {node['pattern']}"))
            return
        expected = node.get("type")
        if expected is not None and not _is_type(value, expected):
            problems.append((loc, f"expected {_EXPECTED.get(expected, expected)}, not {describe(value)}"))
            return
        if "enum" in node and value not in node["enum"]:
            problems.append((loc, "must be one of " + ", ".join(map(str, node["enum"]))))
        if isinstance(value, str):  # the commonest value of a manifest
            if "minLength" in node or "maxLength" in node or "pattern" in node:
                _check_string(value, node, loc, problems)
        elif isinstance(value, dict):
            self._check_object(value, node, loc, problems)
        elif isinstance(value, list):
            self._check_list(value, node, loc, problems)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            _check_number(value, node, loc, problems)

    def _check_list(self, value: list[Any], node: Node, loc: Loc, problems: list[Problem]) -> None:
        if "minItems" in node and len(value) < node["minItems"]:
            problems.append((loc, f"must have at least {node['minItems']} items"))
        if "maxItems" in node and len(value) > node["maxItems"]:
            problems.append((loc, f"must have at most {node['maxItems']} items"))
        items = node.get("items")
        keys: Sequence[str] = node.get("mapKeys", ())
        defaults: Mapping[str, Any] = node.get("keyDefaults", {})
        seen: dict[Any, int] = {}
        for index, item in enumerate(value):
            if items is not None:
                self._check(item, items, (*loc, index), problems)
            if keys and isinstance(item, dict):
                # A missing key takes its default first, as the API server defaults before it
                # compares: containerPort 8080 and 8080/TCP are the same entry.
                entry = {k: item.get(k, defaults.get(k)) for k in keys}
                what = f"same {', '.join(keys)} as item"
            elif node.get("set"):
                entry, what = item, "same value as item"
            else:
                continue
            key = _key(entry)
            if key in seen:
                problems.append(((*loc, index), f"duplicate entry: {what} {seen[key]}"))
            seen.setdefault(key, index)

    def _check_object(self, value: dict[str, Any], node: Node, loc: Loc, problems: list[Problem]) -> None:
        if "minProperties" in node and len(value) < node["minProperties"]:
            problems.append((loc, f"must have at least {node['minProperties']} fields"))
        if "maxProperties" in node and len(value) > node["maxProperties"]:
            problems.append((loc, f"must have at most {node['maxProperties']} fields"))
        properties: Mapping[str, Node] | None = node.get("properties")
        values: Node | None = node.get("values")
        for key, item in value.items():
            if properties is not None and key in properties:
                self._check(item, properties[key], (*loc, key), problems)
            elif values is not None:
                self._check(item, values, (*loc, key), problems)
            elif properties is not None and not node.get("open"):
                import difflib  # a misspelling's suggestion only

                close = difflib.get_close_matches(str(key), list(properties), n=1, cutoff=0.6)
                hint = f"; did you mean {close[0]}?" if close else ""
                problems.append(((*loc, key), "unknown field" + hint))
        for key in node.get("required", ()):
            if key not in value:
                problems.append((loc, key + REQUIRED))


_NO_PROPERTIES: Final[Mapping[str, Node]] = MappingProxyType({})


#: Why a bare fractional number is refused where a CRD types a quantity as int-or-string.
FRACTIONAL_QUANTITY: Final = "write a fractional quantity as a string"

#: (apiVersion, kind) of the objects an admission webhook decodes into Go types before the API
#: server validates them: Trainer v2.3's mutating webhook writes a TrainJob's ``cpu: 1.5`` back as
#: ``1500m`` (seen on kube-apiserver 1.37: tests/realcluster/test_refusals_vs_server.py), where the
#: PyTorchJob's CRD refuses the number.
WEBHOOK_DECODED: Final = frozenset({("trainer.kubeflow.org/v1alpha1", "TrainJob")})


def _check_quantity(value: Any, loc: Loc, problems: list[Problem]) -> None:
    text = value if isinstance(value, str) else None if isinstance(value, bool) else str(value)
    if text is not None and out_of_range(text):
        problems.append((loc, OUT_OF_RANGE))
    elif text is None or not is_quantity(text):
        problems.append((loc, "not a Kubernetes quantity; use a number with an optional suffix: 500m, 8, 64Gi"))
    elif isinstance(value, float):
        # CRDs type quantities as int-or-string: a bare 0.5 is rejected there.
        shown = getattr(value, "text", repr(value))
        problems.append((loc, f'{FRACTIONAL_QUANTITY}: "{shown}"'))


def _check_number(value: float, node: Node, loc: Loc, problems: list[Problem]) -> None:
    fmt = node.get("format")
    if fmt in INT_RANGES and isinstance(value, int):
        low, high = INT_RANGES[fmt]
        if not low <= value <= high:
            problems.append((loc, f"out of range for {fmt}"))
    if "minimum" in node and value < node["minimum"]:
        problems.append((loc, f"must be at least {node['minimum']}"))
    if "maximum" in node and value > node["maximum"]:
        problems.append((loc, f"must be at most {node['maximum']}"))


def _check_string(value: str, node: Node, loc: Loc, problems: list[Problem]) -> None:
    # Lengths in characters, as the API server counts them (Go's utf8.RuneCountInString).
    if "minLength" in node and len(value) < node["minLength"]:
        problems.append((loc, f"must be at least {node['minLength']} characters"))
    if "maxLength" in node and len(value) > node["maxLength"]:
        problems.append((loc, f"must be at most {node['maxLength']} characters"))
    if "pattern" in node and not pattern_matches(node["pattern"], value):
        problems.append((loc, f"must match {node['pattern']}"))


# --------------------------------------------------------------------------- loading


def _read(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((COMPACT_DIR / name).read_text(encoding="utf-8"))
    return data


@cache
def load(name: str) -> CompactSchema:
    """The compact schema file ``name`` (e.g. ``pytorchjobs.kubeflow.org.json``), loaded once."""
    data = _read(name)
    definitions = dict(data.get("definitions", {}))
    if name != CORE_FILE:
        definitions = {**_read(CORE_FILE)["definitions"], **definitions}
    meta = {k: v for k, v in data.items() if k not in ("definitions", "roots")}
    return CompactSchema(name, definitions, dict(data.get("roots", {})), meta)


@cache
def merge_keys() -> dict[str, Any]:
    """Kubernetes' strategic-merge keys of the built-in kinds (``k8s-merge-keys.json``'s definitions).

    Swagger form: ``$ref`` is ``#/definitions/<name>``; a merged list carries
    ``x-kubernetes-patch-merge-key`` and ``x-kubernetes-patch-strategy``.
    """
    return dict(_read(MERGE_KEYS_FILE)["definitions"])


def core() -> CompactSchema:
    """Kubernetes' own definitions (``k8s-core.json``)."""
    return load(CORE_FILE)


def render(problems: Sequence[Problem], prefix: Loc = ()) -> list[str]:
    """``path: message`` lines, the path in the usual dotted form (``containers[0].image``)."""
    return [f"{dotted((*prefix, *loc)) if prefix or loc else '<root>'}: {message}" for loc, message in problems]
