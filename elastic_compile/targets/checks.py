"""Checks every Kubernetes target applies to what it rendered: identity and schema.

A custom template's typo (``restartPolcy``) must be an error here, not a field the API
server prunes with only a warning. Each document is checked strictly against the compact
schema of its kind (:mod:`elastic_compile.schema.compact`): the CRD's for custom
resources, Kubernetes' own for core kinds.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from elastic_compile import contract
from elastic_compile.core.engine_env import Generation, generation_env_problem
from elastic_compile.core.errors import Problem, SpecError
from elastic_compile.core.loader import Loaded, dotted
from elastic_compile.core.manifest import join_path
from elastic_compile.schema import compact
from elastic_compile.schema.podspec import ROOT as POD_SPEC
from elastic_compile.schema.podspec import pod_value_problems

if TYPE_CHECKING:
    from elastic_compile.schema import ElasticSpec

#: A field of the spec, as the loader locates it: ("pod_template", "spec", "containers", 0).
FieldPath = tuple[str | int, ...]


class Finding(NamedTuple):
    """One thing wrong with a document: the rule that found it, where (a path in it), and what.

    ``str()`` gives the ``path: message`` line the compile-time checks print;
    ``elastic-compile doctor`` locates it in the file and gives the rule its code.
    """

    rule: str
    path: FieldPath
    message: str

    def __str__(self) -> str:
        where = ""
        for part in self.path:
            where = join_path(where, part)
        return f"{where}: {self.message}"


class DoctorRule(NamedTuple):
    """One ``elastic-compile doctor`` rule: its stable code, its name, and what goes wrong on the cluster.

    :class:`Finding` names its rule by ``name``; doctor prints the code. Codes are product
    surface: never renumbered or reused, and unique across every target.
    """

    code: str
    name: str
    why: str


#: ObjectMeta fields the API server sets: a manifest to create must not carry them
#: (``resourceVersion`` on a create is rejected; the others are overwritten or ignored,
#: and ``kubectl apply`` diffs would fight them forever).
SERVER_SET_METADATA: Final = (
    "creationTimestamp",
    "deletionGracePeriodSeconds",
    "deletionTimestamp",
    "generation",
    "managedFields",
    "resourceVersion",
    "selfLink",
    "uid",
)


def identity_errors(doc: dict[str, Any], api_version: str | None, kind: str | None, name: str) -> list[str]:
    """apiVersion, kind and metadata.name as the document must have them."""
    problems = []
    if doc.get("apiVersion") != api_version or doc.get("kind") != kind:
        problems.append(f"expected apiVersion {api_version} and kind {kind}")
    meta = doc.get("metadata")
    if not isinstance(meta, dict) or meta.get("name") != name:
        problems.append(f"metadata.name must be {name}")
    return problems


def schema_errors(doc: Any, schema_file: str, api_version: str, kind: str) -> list[str]:
    """Problems of ``doc`` against the compact schema of ``api_version`` ``kind`` in ``schema_file``.

    Also refuses the metadata fields the API server sets (:data:`SERVER_SET_METADATA`),
    at the top and in a pod template's metadata.
    """
    schema = compact.load(schema_file)
    root = schema.root(api_version, kind)
    if root is None:
        raise KeyError(f"{schema_file} has no schema for {api_version} {kind}")
    problems = schema.problems(doc, root)
    if isinstance(doc, dict):
        for loc in (("metadata",), ("template", "metadata")):
            meta: Any = doc
            for part in loc:
                meta = meta.get(part) if isinstance(meta, dict) else None
            if isinstance(meta, dict):
                server_set = [key for key in SERVER_SET_METADATA if key in meta]
                problems += [((*loc, key), "set by the API server; leave it out") for key in server_set]
    return compact.render(problems)


def raise_problems(problems: Sequence[tuple[FieldPath, str]], loaded: Loaded | None) -> None:
    """Raise ``SpecError`` with one located line per problem (none: return).

    For settings a target cannot carry: every target reports them this way.
    """
    if problems:
        raise SpecError(sorted(locate(loaded, path, message) for path, message in problems))


def locate(loaded: Loaded | None, path: FieldPath, message: str) -> Problem:
    """A problem at ``path`` in the loaded file; specs built in Python have no file.

    A path ending in ``[key]`` points at a mapping's key (an env name in the map form), not its value.
    """
    at_key = bool(path) and path[-1] == "[key]"
    where = list(path[:-1] if at_key else path)
    if loaded is not None:
        return loaded.problem(where, message, at_key=at_key) if at_key else loaded.problem(where, message)
    return Problem("<spec>", 1, 1, dotted(where), message)


# Compiled by ``re`` when a check first finds something.
_PART = r'\[([0-9]+)\]|\[("(?:[^"\\]|\\.)*")\]|\.?([^.\[]+)'


def parse_path(text: str) -> FieldPath:
    """``spec.trainer.env[0].name`` (or ``metadata.labels["a.b/c"]``) as a path."""
    out: list[str | int] = []
    for index, quoted, plain in re.findall(_PART, text):
        out.append(int(index) if index else json.loads(quoted) if quoted else plain)
    return tuple(out)


def from_lines(rule: str, lines: Sequence[str]) -> list[Finding]:
    """``path: message`` lines of a target's checks as findings of ``rule``."""
    found = []
    for line in lines:
        where, _, message = line.partition(": ")
        found.append(Finding(rule, parse_path(where), message))
    return found


def pod_value_errors(pod_spec: Any, prefix: compact.Loc, ref: str = POD_SPEC) -> list[str]:
    """Values in a pod spec (at ``prefix`` in its document) the API server would reject on pod creation.

    A custom resource's schema takes a pod template with any value (``imagePullPolicy:
    always``); the operator's pod creation then fails on every attempt, so we check them.
    ``ref``: another Kubernetes definition the value is (a TrainJob's env entry, its
    ``resourcesPerNode``).
    """
    if not isinstance(pod_spec, dict):
        return []
    return compact.render(pod_value_problems(pod_spec, ref), prefix)


def env_generation_problems(spec: ElasticSpec, generation: Generation) -> list[tuple[FieldPath, str]]:
    """Env of the training container that ``generation``'s engine sets itself (the v1 operator's
    ``PYTHONUNBUFFERED``): located at each name, in ``env`` and in pod_template's ``pytorch``
    container. What every engine sets (``PET_*``) the schema refuses already."""
    problems: list[tuple[FieldPath, str]] = []
    if isinstance(spec.env, dict):
        named: list[tuple[str, FieldPath]] = [(name, ("env", name, "[key]")) for name in spec.env]
    else:
        named = [(var.name, ("env", i, "name")) for i, var in enumerate(spec.env)]
    for i, container in enumerate(spec.pod_template.spec.get("containers") or []):
        if isinstance(container, dict) and container.get("name") == contract.TRAINING_CONTAINER:
            for j, var in enumerate(container.get("env") or []):
                if isinstance(var, dict) and isinstance(var.get("name"), str):
                    named.append((var["name"], ("pod_template", "spec", "containers", i, "env", j, "name")))
    for name, path in named:
        why = generation_env_problem(name, generation)
        if why is not None:
            problems.append((path, why))
    return problems
