"""Generate the compact schemas in ``elastic_compile/schema/compact/`` from their upstream sources.

Usage (from a checkout, with the test extra installed)::

    ELASTIC_COMPILE_CRDS=/path/to/crds python -m elastic_compile.schema.generate          # write
    ELASTIC_COMPILE_CRDS=/path/to/crds python -m elastic_compile.schema.generate --check  # compare

Sources:

* ``k8s-core.json``: Kubernetes' PodTemplate, PodSpec and ObjectMeta with everything they
  reference, from the strict schemas kubernetes-validate bundles (a test dependency) for
  :data:`KUBERNETES_VERSION`;
* ``k8s-merge-keys.json``: what kustomize needs to merge the built-in kinds, from the same
  source at :data:`KUSTOMIZE_KUBERNETES_VERSION` (see ``compiler/kustomize.py``);
* one file per CRD in :data:`CRDS`, from the CRD YAML in the directory ``--crds`` or
  ``$ELASTIC_COMPILE_CRDS`` names. The file is named after the CRD (``<plural>.<group>.json``).

A CRD file is exact: it accepts what the CRD's ``openAPIV3Schema`` accepts (strictly:
unknown fields are errors, as with ``kubectl --validate=strict``), minus the CEL rules
it lists as unchecked. Two things keep it small without changing its meaning: a subtree
identical to a Kubernetes definition becomes a reference into ``k8s-core.json``, and a
subtree the CRD repeats (a Container under containers, initContainers and
ephemeralContainers) is written once under ``definitions``. The root ``metadata``, which
CRDs leave as a bare object, refers to ``ObjectMeta``: the API server validates it as such.

To add a CRD, add its upstream file name to :data:`CRDS` and run the command.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from elastic_compile.core.quantity import QUANTITY_PATTERN
from elastic_compile.schema.compact import COMPACT_DIR, CORE_FILE, INT_RANGES, MERGE_KEYS_FILE, OPENAPI_SAME

CRDS_ENV: Final = "ELASTIC_COMPILE_CRDS"

#: Kubernetes minor version of ``k8s-core.json`` (the pod_template check and the
#: PodTemplate target). 1.33 is the oldest minor still supported upstream when this was
#: chosen: a field newer clusters accept but 1.33 prunes is an error, not a silent loss.
KUBERNETES_VERSION: Final = "1.33"
#: The Kubernetes definitions ``k8s-core.json`` starts from (with everything they reference).
CORE_ROOTS: Final = {
    "v1 PodTemplate": "io.k8s.api.core.v1.PodTemplate",
    "v1 ConfigMap": "io.k8s.api.core.v1.ConfigMap",  # launcher: bundled
}
CORE_DEFINITIONS: Final = ("io.k8s.api.core.v1.PodSpec", "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta")
_OBJECT_META: Final = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
_QUANTITY_REF: Final = "io.k8s.apimachinery.pkg.api.resource.Quantity"
_INT_OR_STRING_REF: Final = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"

#: Defaults the API server applies to list-map keys before it compares entries, which
#: kubernetes-validate's schemas do not carry (the CRDs do): SetDefaults_ContainerPort.
_K8S_KEY_DEFAULTS: Final = {("io.k8s.api.core.v1.ContainerPort", "protocol"): "TCP"}

#: Upstream CRD files (in ``$ELASTIC_COMPILE_CRDS``) that get a compact schema.
CRDS: Final = (
    "kubeflow.org_pytorchjobs.yaml",  # training-operator v1.9.4
    "trainer.kubeflow.org_trainjobs.yaml",  # Trainer v2.3.0
    "trainer.kubeflow.org_trainingruntimes.yaml",
    "trainer.kubeflow.org_clustertrainingruntimes.yaml",
)

# A repeated subtree is written once when its JSON is at least this long: below it a
# reference ({"ref": "<its path>"}) saves nothing.
_MIN_SHARED: Final = 120


def dump(data: Mapping[str, Any]) -> str:
    """The bytes we commit: one space of indentation keeps diffs readable and files small."""
    return json.dumps(data, indent=1, ensure_ascii=True) + "\n"


# --------------------------------------------------------------------------- Kubernetes


def k8s_core(version: str = KUBERNETES_VERSION) -> dict[str, Any]:
    """``k8s-core.json`` from kubernetes-validate's bundled strict schemas (a test dependency)."""
    import kubernetes_validate

    base = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema" / f"v{version}.0-local-strict"
    defs: dict[str, Any] = json.loads((base / "_definitions.json").read_text(encoding="utf-8"))["$defs"]
    out: dict[str, Any] = {}
    pending = [*CORE_ROOTS.values(), *CORE_DEFINITIONS]
    while pending:
        name = pending.pop()
        if name in out:
            continue
        out[name] = None  # placeholder against cycles
        out[name] = _k8s_node(defs[name], pending, name)
    return {
        "source": f"kubernetes-validate strict schemas, Kubernetes {version}",
        "kubernetes": version,
        "roots": {key: {"ref": name} for key, name in CORE_ROOTS.items()},
        "definitions": dict(sorted(out.items())),
    }


def _types(node: Mapping[str, Any]) -> list[str]:
    raw = node.get("type", [])
    return [t for t in ([raw] if isinstance(raw, str) else raw) if t != "null"]


def _k8s_node(node: Mapping[str, Any], pending: list[str], owner: str) -> dict[str, Any]:
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        if name == _QUANTITY_REF:
            return {"kind": "quantity"}
        if name == _INT_OR_STRING_REF:
            return {"kind": "int-or-string"}
        pending.append(name)
        return {"ref": name}
    if "oneOf" in node:  # only Quantity and IntOrString use it, and they are $refs above
        return {}
    out: dict[str, Any] = {}
    types = _types(node)
    if types:
        out["type"] = types[0]
    _scalars(node, out)
    if "properties" in node:
        out["properties"] = {k: _k8s_node(v, pending, owner) for k, v in sorted(node["properties"].items())}
    if node.get("required"):
        out["required"] = sorted(node["required"])
    if isinstance(node.get("additionalProperties"), dict):
        out["values"] = _k8s_node(node["additionalProperties"], pending, owner)
    if "items" in node:
        out["items"] = _k8s_node(node["items"], pending, owner)
        item = node["items"].get("$ref", "").rsplit("/", 1)[-1]
        _list_type(node, out, {k: v for (d, k), v in _K8S_KEY_DEFAULTS.items() if d == item})
    return out


def _scalars(node: Mapping[str, Any], out: dict[str, Any]) -> None:
    if node.get("format") in INT_RANGES:
        out["format"] = node["format"]
    if "enum" in node:
        out["enum"] = [v for v in node["enum"] if v is not None]
    for key in OPENAPI_SAME:
        if key in node:
            out[key] = node[key]


def _list_type(node: Mapping[str, Any], out: dict[str, Any], key_defaults: Mapping[str, Any]) -> None:
    list_type = node.get("x-kubernetes-list-type")
    keys = node.get("x-kubernetes-list-map-keys")
    if list_type == "map" and keys:
        out["mapKeys"] = list(keys)
        defaults = {k: key_defaults[k] for k in keys if k in key_defaults}
        if defaults:
            out["keyDefaults"] = defaults
    elif list_type == "set":
        out["set"] = True


# --------------------------------------------------------------------------- CRDs


class _Converter:
    """openAPIV3Schema -> compact nodes, collecting the CEL rules it does not evaluate."""

    def __init__(self) -> None:
        self.rules: list[str] = []

    def node(self, node: Mapping[str, Any], path: str) -> dict[str, Any]:
        for rule in node.get("x-kubernetes-validations", ()):
            self.rules.append(f"{path or '<root>'}: {rule.get('rule', '')}")
        if node.get("x-kubernetes-int-or-string"):
            if node.get("pattern") == QUANTITY_PATTERN:
                return {"kind": "quantity"}
            out: dict[str, Any] = {"kind": "int-or-string"}
            _scalars(node, out)
            return out
        out = {}
        if "type" in node:
            out["type"] = node["type"]
        _scalars(node, out)
        properties = dict(node.get("properties", {}))
        if node.get("x-kubernetes-embedded-resource"):
            # An embedded object is a whole resource: apiVersion and kind are implied.
            properties.setdefault("apiVersion", {"type": "string"})
            properties.setdefault("kind", {"type": "string"})
            properties.setdefault("metadata", {"type": "object"})
        if properties:
            out["properties"] = {k: self.node(v, _join(path, k)) for k, v in sorted(properties.items())}
        required = set(node.get("required", ()))
        if node.get("x-kubernetes-embedded-resource"):
            required |= {"apiVersion", "kind"}
        if required:
            out["required"] = sorted(required)
        extra = node.get("additionalProperties")
        if isinstance(extra, Mapping):
            out["values"] = self.node(extra, path + ".*")
        if node.get("x-kubernetes-preserve-unknown-fields") or extra is True:
            out["open"] = True
        items = node.get("items")
        if isinstance(items, Mapping):
            out["items"] = self.node(items, path + "[]")
            item_props = items.get("properties", {})
            defaults = {k: v["default"] for k, v in item_props.items() if "default" in v}
            _list_type(node, out, defaults)
        if node.get("nullable") is True:
            out["nullable"] = True
        return out


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def crd_compact(crd: Mapping[str, Any], core: Mapping[str, Any], source: str = "") -> dict[str, Any]:
    """The compact schema of one CRD (a parsed CustomResourceDefinition).

    ``core`` is ``k8s-core.json`` (parsed): subtrees identical to one of its definitions
    become references to it. ``source`` names the upstream file in the output.
    """
    spec = crd["spec"]
    converter = _Converter()
    roots: dict[str, Any] = {}
    for version in spec["versions"]:
        if not version.get("served", False):
            continue
        root = converter.node(version["schema"]["openAPIV3Schema"], "")
        root.setdefault("properties", {})["metadata"] = {"ref": _OBJECT_META}
        roots[f"{spec['group']}/{version['name']} {spec['names']['kind']}"] = root
    known = _expanded_core(core["definitions"])
    roots = {key: _refer_to_core(node, known) for key, node in roots.items()}
    definitions = _share_repeats(roots)
    out: dict[str, Any] = {"source": source, "crd": crd["metadata"]["name"]}
    generator = crd["metadata"].get("annotations", {}).get("controller-gen.kubebuilder.io/version")
    if generator:
        out["generator"] = f"controller-gen {generator}"
    out["kubernetes"] = core.get("kubernetes")
    out["scope"] = spec.get("scope")
    # CEL is not evaluated (no Kubernetes CEL library in the standard library); the
    # targets' own checks cover the rules that matter for what we emit.
    out["uncheckedRules"] = list(dict.fromkeys(converter.rules))
    out["roots"] = roots
    out["definitions"] = definitions
    return out


def _canonical(node: Any) -> str:
    return json.dumps(node, sort_keys=True, separators=(",", ":"))


def _expand(node: Mapping[str, Any], defs: Mapping[str, Any], depth: int = 0) -> dict[str, Any]:
    if depth > 64:
        raise ValueError("reference cycle in k8s-core.json")
    if "ref" in node:
        return _expand(defs[node["ref"]], defs, depth + 1)
    out = dict(node)
    if "properties" in out:
        out["properties"] = {k: _expand(v, defs, depth + 1) for k, v in out["properties"].items()}
    for key in ("values", "items"):
        if key in out:
            out[key] = _expand(out[key], defs, depth + 1)
    return out


def _expanded_core(defs: Mapping[str, Any]) -> dict[str, str]:
    """Canonical JSON of each core object definition, fully expanded -> its name."""
    known: dict[str, str] = {}
    for name in sorted(defs):
        expanded = _expand({"ref": name}, defs)
        if "properties" in expanded:
            known.setdefault(_canonical(expanded), name)
    return known


def _refer_to_core(node: dict[str, Any], known: Mapping[str, str]) -> dict[str, Any]:
    # Top-down, so the largest identical subtree becomes the reference.
    name = known.get(_canonical(node)) if "properties" in node else None
    if name is not None:
        return {"ref": name}
    out = dict(node)
    if "properties" in out:
        out["properties"] = {k: _refer_to_core(v, known) for k, v in out["properties"].items()}
    for key in ("values", "items"):
        if key in out:
            out[key] = _refer_to_core(out[key], known)
    return out


def _subtrees(node: Any, path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    if not isinstance(node, dict) or "ref" in node:
        return
    yield path, node
    for key, sub in node.get("properties", {}).items():
        yield from _subtrees(sub, _join(path, key))
    if "values" in node:
        yield from _subtrees(node["values"], path + ".*")
    if "items" in node:
        yield from _subtrees(node["items"], path + "[]")


def _replace(node: dict[str, Any], canonical: str, ref: dict[str, str]) -> dict[str, Any]:
    if _canonical(node) == canonical:
        return dict(ref)
    out = dict(node)
    if "properties" in out:
        out["properties"] = {k: _replace(v, canonical, ref) for k, v in out["properties"].items()}
    for key in ("values", "items"):
        if key in out and isinstance(out[key], dict):
            out[key] = _replace(out[key], canonical, ref)
    return out


def _share_repeats(roots: dict[str, Any]) -> dict[str, Any]:
    """Move each subtree that occurs more than once into ``definitions``, largest first.

    A definition is named by the path of its first occurrence (roots in order, fields
    sorted), e.g. ``kubeflow.org/v1 PyTorchJob:spec.pytorchReplicaSpecs.*.template.spec.containers[]``,
    so the names are stable and say where the shape comes from.
    """
    definitions: dict[str, Any] = {}
    while True:
        counts: Counter[str] = Counter()
        first: dict[str, str] = {}
        trees = [(key + ":", node) for key, node in roots.items()]
        trees += [(name + ":", node) for name, node in definitions.items()]
        for prefix, tree in trees:
            for path, sub in _subtrees(tree, ""):
                canonical = _canonical(sub)
                counts[canonical] += 1
                first.setdefault(canonical, prefix + path)
        repeated = [c for c, n in counts.items() if n > 1 and len(c) >= _MIN_SHARED]
        if not repeated:
            break
        canonical = max(repeated, key=lambda c: (len(c), c))
        name = first[canonical]
        ref = {"ref": name}
        definitions = {k: _replace(v, canonical, ref) for k, v in definitions.items()}
        roots.update({k: _replace(v, canonical, ref) for k, v in roots.items()})
        definitions[name] = json.loads(canonical)
    return dict(sorted(definitions.items()))


# --------------------------------------------------------------------------- kustomize's merge keys

#: The Kubernetes minor of ``k8s-merge-keys.json``: the oldest kubernetes-validate bundles, the
#: nearest to the schema kustomize has built in (Kubernetes 1.21.2 in kubectl 1.37's kustomize
#: v5.8.1), whose merging our file must reproduce for built-in kinds.
KUSTOMIZE_KUBERNETES_VERSION: Final = "1.25"
_PATCH_KEYS: Final = ("x-kubernetes-patch-strategy", "x-kubernetes-patch-merge-key")
_GVK: Final = "x-kubernetes-group-version-kind"
#: Where Kubernetes 1.25 merges but kustomize's built-in 1.21.2 schema does not, found with
#: the real kubectl by tests/kustomize/test_kustomize_builtin_kinds.py: left out, so that a
#: patch on them behaves as it does without our file.
KUSTOMIZE_NOT_MERGED: Final = {
    ("io.k8s.api.core.v1.EphemeralContainer", "ports"),
    ("io.k8s.api.networking.v1.NetworkPolicyStatus", "conditions"),
}
#: Group-versions kustomize's built-in schema does not know (it replaces their lists): left out.
KUSTOMIZE_UNKNOWN: Final = {"autoscaling/v2"}


def _gvk_api_version(gvk: Mapping[str, str]) -> str:
    return f"{gvk['group']}/{gvk['version']}" if gvk["group"] else gvk["version"]


def k8s_merge_keys(version: str = KUSTOMIZE_KUBERNETES_VERSION) -> dict[str, Any]:
    """``k8s-merge-keys.json``: what kustomize needs to merge built-in kinds, and nothing else.

    Kubernetes' definitions (Swagger form, ``#/definitions/`` references) pruned to the
    paths that lead to a list with a patch strategy: kustomize reads nothing else from a
    schema when it merges (a field without one merges as a map, or is replaced as a list,
    with a schema or without). Kinds keep their ``x-kubernetes-group-version-kind``.
    """
    import kubernetes_validate

    base = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema" / f"v{version}.0-local"
    defs: dict[str, Any] = json.loads((base / "_definitions.json").read_text(encoding="utf-8"))["$defs"]
    pruned = _MergePruner(defs).run()
    return {
        "source": f"kubernetes-validate schemas, Kubernetes {version}, pruned to merge keys",
        "kubernetes": version,
        "definitions": pruned,
    }


class _MergePruner:
    def __init__(self, defs: Mapping[str, Any]) -> None:
        self.defs = defs
        self.done: dict[str, dict[str, Any] | None] = {}
        self.items_only: set[str] = set()

    def run(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in sorted(self.defs):
            definition = self.defs[name]
            gvks = definition.get(_GVK, [])
            if name.endswith("List") or any(_gvk_api_version(g) in KUSTOMIZE_UNKNOWN for g in gvks):
                continue  # a List is expanded before any patch; unknown group-versions have no schema
            pruned = self.definition(name)
            if pruned is not None and gvks:
                out[name] = {**pruned, _GVK: gvks}
        # Everything the kinds reach.
        reached = self._reached(out)
        for name in sorted(reached - set(out)):
            out[name] = self.done.get(name) or {"type": "object"}
        return dict(sorted(out.items()))

    def _reached(self, out: Mapping[str, Any]) -> set[str]:
        seen: set[str] = set()
        stack = list(out.values())
        while stack:
            node = stack.pop()
            if isinstance(node, dict):
                ref = node.get("$ref")
                if isinstance(ref, str):
                    name = ref.rsplit("/", 1)[-1]
                    if name not in seen:
                        seen.add(name)
                        stack.append(self.done.get(name) or {})
                stack.extend(v for v in node.values() if isinstance(v, (dict, list)))
            elif isinstance(node, list):
                stack.extend(node)
        return seen

    def definition(self, name: str) -> dict[str, Any] | None:
        if name not in self.done:
            self.done[name] = None  # against cycles: a cycle adds nothing
            self.done[name] = self.node(self.defs[name], name)
        return self.done[name]

    def node(self, node: Mapping[str, Any], owner: str, field: str = "") -> dict[str, Any] | None:
        ref = node.get("$ref")
        if isinstance(ref, str):
            name = ref.rsplit("/", 1)[-1]
            return {"$ref": f"#/definitions/{name}"} if self.definition(name) is not None else None
        out: dict[str, Any] = {}
        if (owner, field) not in KUSTOMIZE_NOT_MERGED:
            out.update({k: node[k] for k in _PATCH_KEYS if k in node})
        items = node.get("items")
        if isinstance(items, Mapping):
            inner = self.node(items, owner)
            if inner is None and out and "$ref" in items:
                # A merged list of plain objects: kustomize still needs to reach the items.
                name = items["$ref"].rsplit("/", 1)[-1]
                inner = {"$ref": f"#/definitions/{name}"}
            if inner is not None:
                out["items"] = inner
        extra = node.get("additionalProperties")
        if isinstance(extra, Mapping):
            inner = self.node(extra, owner)
            if inner is not None:
                out["additionalProperties"] = inner
        properties = {}
        for key, sub in sorted(node.get("properties", {}).items()):
            inner = self.node(sub, owner, key)
            if inner is not None:
                properties[key] = inner
        if properties:
            out["properties"] = properties
        if not out:
            return None
        # kustomize reads one type (["array", "null"] would hide the items from it).
        types = _types(node)
        if types:
            out["type"] = types[0]
        return out


# --------------------------------------------------------------------------- files


def load_crd(path: Path) -> dict[str, Any]:
    """A CRD YAML file, parsed (libyaml when present: 9x faster on a 644 KB CRD)."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with path.open(encoding="utf-8") as handle:
        crd: dict[str, Any] = yaml.load(handle, Loader=loader)
    if crd.get("kind") != "CustomResourceDefinition":
        raise ValueError(f"{path}: not a CustomResourceDefinition")
    return crd


def crd_file_name(crd: Mapping[str, Any]) -> str:
    """The compact file of a CRD: its own name (``<plural>.<group>``) plus ``.json``."""
    return f"{crd['metadata']['name']}.json"


def source_name(path: Path) -> str:
    """How a compact file names its upstream file: the name and the start of its SHA-256."""
    return f"{path.name} (sha256 {hashlib.sha256(path.read_bytes()).hexdigest()[:16]})"


def generate_all(crds: Path | None) -> dict[str, str]:
    """File name -> text of every compact schema we can generate here.

    ``k8s-core.json`` needs kubernetes-validate; the CRD files need ``crds``.
    """
    out: dict[str, str] = {}
    core = k8s_core()
    out[CORE_FILE] = dump(core)
    out[MERGE_KEYS_FILE] = dump(k8s_merge_keys())
    if crds is not None:
        for name in CRDS:
            path = crds / name
            crd = load_crd(path)
            out[crd_file_name(crd)] = dump(crd_compact(crd, core, source_name(path)))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Write (or with ``--check`` compare) the compact schemas; returns the exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m elastic_compile.schema.generate", description="Generate the compact schemas."
    )
    parser.add_argument("--crds", type=Path, help=f"directory of the upstream CRD files (default: ${CRDS_ENV})")
    parser.add_argument("--check", action="store_true", help="compare with the committed files; write nothing")
    args = parser.parse_args(argv)
    crds = args.crds or (Path(os.environ[CRDS_ENV]) if os.environ.get(CRDS_ENV) else None)
    if crds is None:
        print(f"no CRD directory: set {CRDS_ENV} or pass --crds; only {CORE_FILE} is generated", file=sys.stderr)
    files = generate_all(crds)
    stale = []
    for name, text in files.items():
        path = COMPACT_DIR / name
        current = path.read_text(encoding="utf-8") if path.is_file() else None
        if current == text:
            continue
        stale.append(name)
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8", newline="\n")
        print(f"{'stale' if args.check else 'wrote'} {path} ({len(text.encode())} bytes)", file=sys.stderr)
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
