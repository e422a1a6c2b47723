"""Offline structural validation of the manifests we emit: the tests' oracle, not part of the product.

It stands in for the real API server (``cluster/``): a copy of the CRDs' and Kubernetes' schemas
run by jsonschema, the targets' own rules beside them.

Three layers, each catching what the others cannot:

* :class:`CrdValidator` checks a custom resource against its CRD's ``openAPIV3Schema``,
  converted to JSON Schema 2020-12: the upstream CRD from ``$ELASTIC_COMPILE_CRDS``, or
  without it the compact schema the package ships. In strict mode it rejects unknown fields the way
  ``kubectl --validate=strict`` does; the API server's default is to prune them with a
  warning, so without this a typo such as ``imagee`` vanishes silently.
* ``targets.pytorchjob.checks.webhook_errors`` re-implements the training-operator v1.9.4 validating webhook
  plus the traps the webhook accepts but that break at runtime.
* :func:`core_errors` and :func:`pod_template_spec_errors` reuse the strict core schemas
  bundled with kubernetes-validate, for PodTemplates and for the pod templates embedded
  in a PyTorchJob.

jsonschema, referencing and kubernetes-validate are test dependencies, imported inside
functions: a test that skips without them can still import this module.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from elastic_compile.core.manifest import as_int, as_mapping, join_path, name_errors, show
from elastic_compile.core.pattern import pattern_matches
from elastic_compile.core.quantity import QUANTITY_PATTERN
from elastic_compile.targets.pytorchjob.checks import webhook_errors
from elastic_compile.targets.trainjob.checks import manifest_errors

if TYPE_CHECKING:
    from referencing import Registry

__all__ = [
    "CORE_KUBERNETES_VERSION",
    "CRDS_ENV",
    "PYTORCHJOB_COMPACT",
    "PYTORCHJOB_CRD",
    "TRAINER_CRDS",
    "CrdUnavailable",
    "CrdValidator",
    "as_int",
    "as_mapping",
    "check_manifest",
    "core_errors",
    "crd_dir",
    "join_path",
    "name_errors",
    "pod_template_spec_errors",
    "pytorchjob_validator",
    "show",
    "trainer_validator",
]

CRDS_ENV: Final = "ELASTIC_COMPILE_CRDS"
PYTORCHJOB_CRD: Final = "kubeflow.org_pytorchjobs.yaml"
#: The compact schema shipped in the package, used when the upstream CRD is not at hand.
PYTORCHJOB_COMPACT: Final = "pytorchjobs.kubeflow.org.json"
# Kubeflow Trainer v2.3.0 (manifests/base/crds/): kind -> (upstream CRD file, compact schema).
TRAINER_CRDS: Final = {
    "TrainJob": ("trainer.kubeflow.org_trainjobs.yaml", "trainjobs.trainer.kubeflow.org.json"),
    "TrainingRuntime": ("trainer.kubeflow.org_trainingruntimes.yaml", "trainingruntimes.trainer.kubeflow.org.json"),
    "ClusterTrainingRuntime": (
        "trainer.kubeflow.org_clustertrainingruntimes.yaml",
        "clustertrainingruntimes.trainer.kubeflow.org.json",
    ),
}

# The cluster version we validate core kinds against. kubernetes-validate bundles
# 1.25-1.37; when a future release drops 1.33 we fall back to its newest.
CORE_KUBERNETES_VERSION: Final = "1.33"

# The API server's quantity grammar (the same pattern the PyTorchJob CRD carries).
# kubernetes-validate types Quantity as plain string|number, so without it "64Gx" in a
# PodTemplate would pass.
_QUANTITY_PATTERN: Final = QUANTITY_PATTERN

# RFC 3339 as the API server parses metav1.Time; only status fields use it in our CRDs.
_DATE_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")

_INT_RANGES: Final = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}


# Marker we leave in converted schemas so error messages can say "integer or string"
# instead of jsonschema's "is not valid under any of the given schemas".
_INT_OR_STRING: Final = "x-kubernetes-int-or-string"

_CORE_DEFS_URI: Final = "https://kubernetes.io/api/_definitions.json"


class CrdUnavailable(RuntimeError):
    """The CRD files are not available, so a custom resource cannot be validated."""


# --------------------------------------------------------------------------- CRD files


def crd_dir() -> Path | None:
    """The directory ``$ELASTIC_COMPILE_CRDS`` names, or None when it is unset.

    The upstream CRD files are reference data that a clone does not carry; without them the
    PyTorchJob is checked against the compact schema the package ships.
    """
    env = os.environ.get(CRDS_ENV)
    return Path(env) if env else None


def _crd_file(name: str) -> Path | None:
    """The upstream CRD file ``name``; None when ``$ELASTIC_COMPILE_CRDS`` is unset.

    Set but wrong is an error: a CI job that means to test against the upstream CRDs must
    not silently fall back to the compact schema.
    """
    directory = crd_dir()
    if directory is None:
        return None
    if not directory.is_dir():
        raise CrdUnavailable(f"{CRDS_ENV}={directory} is not a directory")
    path = directory / name
    if not path.is_file():
        raise CrdUnavailable(f"CRD not found: {path} does not exist")
    return path


# ----------------------------------------------------------------- schema conversion


def _convert(node: Mapping[str, Any], *, strict: bool, structural: bool, path: str, rules: list[str]) -> dict[str, Any]:
    """One openAPIV3Schema node as JSON Schema 2020-12.

    ``structural`` is False below anyOf/allOf/oneOf/not: in a structural schema those
    branches may only restate fields declared beside them, so closing them with
    ``additionalProperties: false`` would reject fields that are in fact declared.
    """
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("description", "example", "externalDocs", "nullable"):
            continue
        if key == "x-kubernetes-validations":
            # CEL is not evaluated here (no Kubernetes CEL library in Python). Transition rules (oldSelf) never apply
            # on create; any other rule is
            # recorded so callers can see what went unchecked.
            for rule in value:
                text = str(rule.get("rule", ""))
                if "oldSelf" not in text:
                    rules.append(f"{path or '<root>'}: {text}")
            continue
        if key == "properties":
            out[key] = {
                name: _convert(sub, strict=strict, structural=structural, path=join_path(path, name), rules=rules)
                for name, sub in value.items()
            }
        elif key == "items" and isinstance(value, Mapping):
            out[key] = _convert(value, strict=strict, structural=structural, path=path + "[]", rules=rules)
        elif key == "additionalProperties" and isinstance(value, Mapping):
            out[key] = _convert(value, strict=strict, structural=structural, path=path + ".*", rules=rules)
        elif key in ("anyOf", "allOf", "oneOf"):
            out[key] = [_convert(sub, strict=strict, structural=False, path=path, rules=rules) for sub in value]
        elif key == "not":
            out[key] = _convert(value, strict=strict, structural=False, path=path, rules=rules)
        elif key in ("exclusiveMinimum", "exclusiveMaximum") and isinstance(value, bool):
            continue  # OpenAPI 3.0 boolean form, folded into minimum/maximum below
        else:
            out[key] = value

    # OpenAPI 3.0 writes exclusive bounds as booleans next to minimum/maximum.
    for bound, exclusive in (("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum")):
        if node.get(exclusive) is True and bound in out:
            out[exclusive] = out.pop(bound)

    if node.get(_INT_OR_STRING):
        # controller-gen already emits anyOf [integer, string]; a pattern beside it then
        # applies to strings only, which is what the API server does with quantities.
        out.pop("type", None)
        out.setdefault("anyOf", [{"type": "integer"}, {"type": "string"}])

    if node.get("x-kubernetes-embedded-resource"):
        # An embedded object is a full resource: apiVersion and kind are implied and
        # required, metadata is ObjectMeta.
        props = out.setdefault("properties", {})
        props.setdefault("apiVersion", {"type": "string"})
        props.setdefault("kind", {"type": "string"})
        props.setdefault("metadata", {"type": "object"})
        out["required"] = sorted({*out.get("required", ()), "apiVersion", "kind"})

    if (
        strict
        and structural
        and "properties" in out
        and "additionalProperties" not in out
        and not node.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False

    if node.get("nullable") is True:
        out = _nullable(out)
    return out


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """Let ``schema`` also accept null.

    Without ``nullable`` we reject null. The API server would prune such a null before
    validating, but in our output a null is always a rendering bug (an unset template
    variable), so rejecting it is the point.
    """
    kind = schema.get("type")
    if isinstance(kind, str):
        # Adding "null" to the type keeps jsonschema's precise per-keyword messages.
        schema = {**schema, "type": [kind, "null"]}
        if "enum" in schema:
            schema["enum"] = [*schema["enum"], None]
        return schema
    return {"anyOf": [{"type": "null"}, schema]}


# ------------------------------------------------------------------ jsonschema glue


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=repr)


def _list_type_keyword(validator: Any, list_type: Any, instance: Any, schema: Mapping[str, Any]) -> Iterator[Any]:
    """``x-kubernetes-list-type``: ``set`` and ``map`` lists must not repeat an entry.

    The API server rejects such lists ("Duplicate value"); strategic merge and
    server-side apply would otherwise silently collapse them (two containers named
    ``pytorch`` become one).
    """
    from jsonschema.exceptions import ValidationError

    if not isinstance(instance, list) or list_type not in ("set", "map"):
        return
    seen: dict[str, int] = {}
    if list_type == "set":
        for index, item in enumerate(instance):
            key = _canonical(item)
            if key in seen:
                yield ValidationError(
                    f"duplicate value {show(item)} (same as item {seen[key]})", path=[index], instance=item
                )
            else:
                seen[key] = index
        return
    keys = list(schema.get("x-kubernetes-list-map-keys", ()))
    item_props = schema.get("items", {}).get("properties", {})
    for index, item in enumerate(instance):
        if not isinstance(item, Mapping) or not keys:
            continue  # the type keyword reports non-objects
        # A missing key takes its schema default, as the API server defaults before it
        # compares (ports: containerPort 8080 and 8080/TCP are the same entry).
        entry = {k: item.get(k, item_props.get(k, {}).get("default")) for k in keys}
        key = _canonical(entry)
        if key in seen:
            shown = ", ".join(f"{k}={show(v)}" for k, v in entry.items())
            yield ValidationError(
                f"duplicate entry {shown} (same key as item {seen[key]})", path=[index], instance=item
            )
        else:
            seen[key] = index


def _pattern_keyword(validator: Any, pattern: str, instance: Any, schema: Mapping[str, Any]) -> Iterator[Any]:
    """``pattern`` with Go's semantics: ``$`` is the end of the text, not before a final newline."""
    from jsonschema.exceptions import ValidationError

    if isinstance(instance, str) and not pattern_matches(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _is_integer(checker: Any, instance: object) -> bool:
    # JSON Schema counts 2.0 as an integer; we do not. We only ever emit ints, so a
    # float where an int32 belongs means arithmetic leaked into a template (/ not //).
    return isinstance(instance, int) and not isinstance(instance, bool)


@functools.cache
def _validator_class() -> Any:
    """Draft 2020-12 plus the list-type keyword and Go patterns (jsonschema ships no type hints: Any)."""
    from jsonschema import Draft202012Validator, validators

    return validators.extend(
        Draft202012Validator,
        validators={"x-kubernetes-list-type": _list_type_keyword, "pattern": _pattern_keyword},
        type_checker=Draft202012Validator.TYPE_CHECKER.redefine("integer", _is_integer),
    )


@functools.cache
def _format_checker() -> Any:
    """Only the formats the API server enforces on the fields we emit.

    jsonschema's default checker knows neither int32 nor int64, and a value out of the
    int32 range (``replicas: 3000000000``) cannot even be decoded by the operator.
    """
    from jsonschema import FormatChecker

    checker = FormatChecker(formats=())

    def int_checker(fmt: str) -> None:
        low, high = _INT_RANGES[fmt]

        @checker.checks(fmt)  # type: ignore[untyped-decorator]
        def _check(value: object) -> bool:
            return not isinstance(value, int) or isinstance(value, bool) or low <= value <= high

    for fmt in _INT_RANGES:
        int_checker(fmt)

    @checker.checks("date-time")  # type: ignore[untyped-decorator]
    def _date_time(value: object) -> bool:
        return not isinstance(value, str) or _DATE_TIME.match(value) is not None

    return checker


def _format_path(parts: Sequence[str | int] | Iterator[str | int], prefix: str = "") -> str:
    path = prefix
    for part in parts:
        path = join_path(path, part)
    return path


def _render(error: Any, prefix: str = "") -> list[str]:
    """Human-readable messages for one jsonschema error, with a JSON path."""
    from jsonschema.exceptions import best_match

    path = _format_path(list(error.absolute_path), prefix)
    where = path or "<root>"
    keyword = error.validator
    instance = error.instance
    schema = error.schema if isinstance(error.schema, Mapping) else {}

    if keyword == "additionalProperties" and error.validator_value is False and isinstance(instance, Mapping):
        declared = schema.get("properties", {})
        patterns = [re.compile(p) for p in schema.get("patternProperties", {})]
        return [
            f"{join_path(path, key)}: unknown field"
            for key in instance
            if key not in declared and not any(p.search(key) for p in patterns)
        ]
    if keyword == "required" and isinstance(instance, Mapping):
        return [
            f"{join_path(path, key)}: required field is missing" for key in error.validator_value if key not in instance
        ]
    if keyword == "type":
        types = error.validator_value
        wanted = " or ".join(types) if isinstance(types, list) else str(types)
        return [f"{where}: must be of type {wanted} (given: {show(instance)})"]
    if keyword == "format":
        fmt = error.validator_value
        if fmt in _INT_RANGES:
            return [f"{where}: out of range for {fmt} (given: {show(instance)})"]
        return [f"{where}: must be a valid {fmt} (given: {show(instance)})"]
    if keyword == "pattern":
        if error.validator_value == _QUANTITY_PATTERN:
            return [f"{where}: must be a Kubernetes quantity such as 500m, 4Gi or 1e3 (given: {show(instance)})"]
        return [f"{where}: must match {error.validator_value} (given: {show(instance)})"]
    if keyword == "enum":
        allowed = ", ".join(show(v) for v in error.validator_value)
        return [f"{where}: must be one of {allowed} (given: {show(instance)})"]
    if keyword in ("anyOf", "oneOf"):
        if schema.get(_INT_OR_STRING):
            return [f"{where}: must be an integer or a string (given: {show(instance)})"]
        if error.context:
            return _render(best_match(error.context), prefix)
    return [f"{where}: {error.message}"]


def _messages(validator: Any, instance: Any, prefix: str = "") -> list[str]:
    out: list[str] = []
    for error in validator.iter_errors(instance):
        out.extend(_render(error, prefix))
    return list(dict.fromkeys(out))  # one fact can fail several keywords


# ----------------------------------------------------------------------- CRD checks


class CrdValidator:
    """Validates custom resources against one CRD's openAPIV3Schema.

    Build it with :meth:`from_file`, which caches one validator per (file, strict) for the
    whole process: loading and converting the 644 KB PyTorchJob CRD costs ~0.1 s, while
    validating an object afterwards costs well under a millisecond.
    """

    def __init__(self, crd: Mapping[str, Any], *, strict: bool = True, source: str = "<memory>") -> None:
        """Convert every served version of ``crd`` (a parsed CustomResourceDefinition)."""
        spec = crd.get("spec")
        if crd.get("kind") != "CustomResourceDefinition" or not isinstance(spec, Mapping):
            raise ValueError(f"{source}: not a CustomResourceDefinition")
        self.source = source
        self.strict = strict
        self.group: str = spec["group"]
        self.kind: str = spec["names"]["kind"]
        rules: list[str] = []
        self.schemas: dict[str, dict[str, Any]] = {}
        for version in spec.get("versions", ()):
            if not version.get("served", False):
                continue
            raw = version.get("schema", {}).get("openAPIV3Schema")
            if raw is None:
                raise ValueError(f"{source}: version {version.get('name')} has no openAPIV3Schema")
            self.schemas[version["name"]] = _convert(raw, strict=strict, structural=True, path="", rules=rules)
        if not self.schemas:
            raise ValueError(f"{source}: no served version")
        #: CEL rules we did not evaluate (transition rules are left out: they never apply
        #: on create). Empty for PyTorchJob v1.9.4.
        self.unchecked_rules: tuple[str, ...] = tuple(dict.fromkeys(rules))
        cls = _validator_class()
        self._validators = {
            name: cls(schema, format_checker=_format_checker()) for name, schema in self.schemas.items()
        }

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], strict: bool = True) -> CrdValidator:
        """The validator for the CRD YAML at ``path``, converted once per process."""
        return _cached_validator(str(Path(path).resolve()), strict)

    @property
    def api_versions(self) -> tuple[str, ...]:
        """The ``apiVersion`` values this CRD serves, e.g. ``("kubeflow.org/v1",)``."""
        return tuple(f"{self.group}/{name}" for name in self.schemas)

    def errors(self, obj: Mapping[str, Any]) -> list[str]:
        """Every problem in ``obj``, as ``"<json path>: <message>"`` strings; [] if valid."""
        out: list[str] = []
        api_version = obj.get("apiVersion")
        version = str(api_version).partition("/")[2]
        if api_version not in self.api_versions:
            served = ", ".join(self.api_versions)
            out.append(f"apiVersion: must be one of {served} (given: {show(api_version)})")
            version = next(iter(self.schemas))  # still check the body against something
        if obj.get("kind") != self.kind:
            out.append(f"kind: must be {self.kind} (given: {show(obj.get('kind'))})")
        out.extend(_messages(self._validators[version], obj))
        out.extend(name_errors(obj))
        return list(dict.fromkeys(out))


@functools.lru_cache(maxsize=16)
def _cached_validator(path: str, strict: bool) -> CrdValidator:
    return _load_validator(path, strict)


def _load_validator(path: str, strict: bool) -> CrdValidator:
    import yaml

    # libyaml parses the 644 KB PyTorchJob CRD ~9x faster than the pure-Python loader.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with open(path, encoding="utf-8") as handle:
        crd = yaml.load(handle, Loader=loader)
    return CrdValidator(crd, strict=strict, source=path)


def pytorchjob_validator(strict: bool = True) -> CrdValidator:
    """The cached validator for the PyTorchJob CRD.

    The upstream CRD from ``$ELASTIC_COMPILE_CRDS`` when that is set (raises
    :class:`CrdUnavailable` when it is wrong), otherwise the compact schema the package ships
    (``schema/compact/pytorchjobs.kubeflow.org.json``, generated from that CRD and compared
    with it by a test), turned back into OpenAPI and judged by jsonschema: an engine of its
    own, not the compiler's validator.
    """
    path = _crd_file(PYTORCHJOB_CRD)
    if path is None:
        return _compact_validator(PYTORCHJOB_COMPACT, strict)
    return CrdValidator.from_file(path, strict=strict)


@functools.lru_cache(maxsize=8)
def _compact_validator(name: str, strict: bool) -> CrdValidator:
    from elastic_compile.schema import compact  # the schema layer: imported only for this fallback

    schema = compact.load(name)
    return CrdValidator(schema.to_crd(), strict=strict, source=str(compact.COMPACT_DIR / name))


def trainer_validator(kind: str, strict: bool = True) -> CrdValidator:
    """The cached validator of a Trainer v2.3.0 kind (TrainJob, ...), as :func:`pytorchjob_validator` chooses."""
    crd, compact_file = TRAINER_CRDS[kind]
    path = _crd_file(crd)
    if path is None:
        return _compact_validator(compact_file, strict)
    return CrdValidator.from_file(path, strict=strict)


# --------------------------------------------------------------- helpers


# --------------------------------------------------------------- core kinds


def _schema_root() -> Path:
    spec = importlib.util.find_spec("kubernetes_validate")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("kubernetes-validate is not installed: pip install 'elastic-compile[test]'")
    return Path(next(iter(spec.submodule_search_locations))) / "kubernetes-json-schema"


@functools.cache
def _core_schema_dir() -> Path:
    """The bundled ``-local-strict`` schema directory for CORE_KUBERNETES_VERSION.

    Found on disk rather than through ``kubernetes_validate.utils``: its ``validate()``
    re-reads the 1.4 MB definitions on every call and stops at the first error.
    """
    root = _schema_root()
    wanted = root / f"v{CORE_KUBERNETES_VERSION}.0-local-strict"
    if wanted.is_dir():
        return wanted

    def version_key(path: Path) -> tuple[int, ...]:
        return tuple(int(part) for part in path.name[1:].split("-")[0].split("."))

    strict_dirs = sorted(root.glob("v*-local-strict"), key=version_key)
    if not strict_dirs:
        raise FileNotFoundError(f"no strict schemas under {root}")
    return strict_dirs[-1]


@functools.cache
def _core_registry() -> Registry[Any]:
    """Bundled ``_definitions.json`` as a referencing registry, loaded once."""
    from referencing import Registry, Resource

    with open(_core_schema_dir() / "_definitions.json", encoding="utf-8") as handle:
        definitions = json.load(handle)
    defs = definitions["$defs"]
    # Tighten Quantity to the API server's grammar (see _QUANTITY_PATTERN).
    defs["io.k8s.apimachinery.pkg.api.resource.Quantity"] = {
        "type": ["string", "number"],
        "pattern": _QUANTITY_PATTERN,
    }
    resource: Resource[Any] = Resource.from_contents(definitions)
    registry: Registry[Any] = Registry().with_resource(_CORE_DEFS_URI, resource)
    return registry


@functools.cache
def _core_validator(filename: str) -> Any:
    """Validator for one bundled schema file (e.g. ``podtemplate-v1.json``), or None."""
    path = _core_schema_dir() / filename
    if not path.is_file():
        return None
    with open(path, encoding="utf-8") as handle:
        schema = json.load(handle)
    return _validator_class()(schema, registry=_core_registry(), format_checker=_format_checker())


def _core_filename(kind: str, api_version: str) -> str:
    # kubernetes-validate's naming: rbac.authorization.k8s.io/v1 -> rbac-v1, v1 -> v1.
    suffix = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    return f"{kind.lower()}-{suffix}.json"


def core_errors(obj: Mapping[str, Any], kind_hint: str | None = None) -> list[str]:
    """Strict validation of a core Kubernetes object (e.g. PodTemplate v1).

    Uses kubernetes-validate's bundled strict schemas for Kubernetes
    CORE_KUBERNETES_VERSION, reporting every error rather than the first, plus the
    checks those schemas lack: quantity grammar, int32/int64 ranges and duplicate
    entries in list-map fields such as ``containers``. ``kind_hint`` names the kind the
    caller expects: it fills in a missing ``kind`` (apiVersion then defaults to ``v1``)
    and a different ``kind`` is reported.
    """
    kind = obj.get("kind")
    if kind_hint is not None and kind is not None and kind != kind_hint:
        return [f"kind: must be {kind_hint} (given: {show(kind)})"]
    kind = kind or kind_hint
    api_version = obj.get("apiVersion", "v1" if kind_hint else None)
    if not isinstance(kind, str) or not isinstance(api_version, str):
        return ["<root>: apiVersion and kind are required to pick a schema"]
    validator = _core_validator(_core_filename(kind, api_version))
    if validator is None:
        # Unlike the kubernetes-validate CLI, which warns and exits 0, an unknown kind
        # is an error: it would otherwise pass CI unchecked.
        return [f"kind: no Kubernetes {_core_schema_dir().name} schema for {api_version} {kind}"]
    document = obj if "kind" in obj else {**obj, "kind": kind, "apiVersion": api_version}
    return _messages(validator, document)


def pod_template_spec_errors(template: Mapping[str, Any], path: str = "") -> list[str]:
    """Strict validation of a PodTemplateSpec such as ``spec.pytorchReplicaSpecs.Worker.template``.

    ``path`` prefixes every message, so errors can point into the enclosing object.
    """
    validator = _core_validator("podtemplatespec-v1.json")
    if validator is None:
        raise FileNotFoundError(f"podtemplatespec-v1.json missing under {_core_schema_dir()}")
    return _messages(validator, template, path)


def _object_meta_errors(meta: Any, path: str) -> list[str]:
    # The CRD leaves root metadata open; ObjectMeta's strict schema catches typos such
    # as "lables" that the API server would drop.
    validator = _object_meta_validator()
    return _messages(validator, meta, path) if isinstance(meta, Mapping) else []


@functools.cache
def _object_meta_validator() -> Any:
    schema = {"$ref": f"{_CORE_DEFS_URI}#/$defs/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}
    return _validator_class()(schema, registry=_core_registry(), format_checker=_format_checker())


# ------------------------------------------------------------------- dispatch


def check_manifest(doc: Mapping[str, Any]) -> list[str]:
    """Every problem in one emitted manifest; [] when it would be accepted and run.

    A PyTorchJob goes through the strict CRD schema, the webhook rules and traps, strict
    ObjectMeta, and each replica's pod template against the core PodTemplateSpec. A
    Trainer v2 TrainJob or (Cluster)TrainingRuntime goes through its strict CRD schema
    (which embeds the pod templates), Trainer's webhook rules and strict ObjectMeta. Core
    kinds go through :func:`core_errors`. Raises :class:`CrdUnavailable` for a custom
    resource when ``$ELASTIC_COMPILE_CRDS`` is set but does not hold its CRD.
    """
    if doc.get("kind") == "PyTorchJob":
        errors = pytorchjob_validator(strict=True).errors(doc)
        errors += webhook_errors(doc)
        errors += _object_meta_errors(doc.get("metadata"), "metadata")
        specs = as_mapping(as_mapping(doc.get("spec")).get("pytorchReplicaSpecs"))
        for rtype, rspec in specs.items():
            template = as_mapping(rspec).get("template")
            if isinstance(template, Mapping):
                errors += pod_template_spec_errors(
                    template, join_path(join_path("spec.pytorchReplicaSpecs", rtype), "template")
                )
        return list(dict.fromkeys(errors))
    kind = doc.get("kind")
    if isinstance(kind, str) and kind in TRAINER_CRDS:
        errors = trainer_validator(kind, strict=True).errors(doc)
        errors += manifest_errors(doc)
        errors += _object_meta_errors(doc.get("metadata"), "metadata")
        return list(dict.fromkeys(errors))
    return core_errors(doc)
