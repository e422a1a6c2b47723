"""Loaded YAML -> ElasticSpec, with every pydantic error turned into a located line."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ValidationError
from yaml.nodes import MappingNode, ScalarNode, SequenceNode

from elastic_compile.core import kinds
from elastic_compile.core.errors import Problem, SpecError
from elastic_compile.core.loader import YAML11_SURPRISE, Loaded
from elastic_compile.schema import ElasticSpec, FieldProblems
from elastic_compile.schema.models import FRAGMENT, TARGETS, nested_model

# Tags of the discriminated unions in the schema: not part of a field path.
_UNION_TAGS = {"map", "list"}

_TYPE_MESSAGES = {
    "int_type": "expected a whole number",
    "int_from_float": "expected a whole number",
    "float_type": "expected a number",
    "bool_type": "expected true or false",
    "string_type": "expected a string",
    "dict_type": "expected a mapping",
    "model_type": "expected a mapping",
    "model_attributes_type": "expected a mapping",
    "list_type": "expected a list",
    "missing": "required field is missing",
    "extra_forbidden": "unknown field",
    "none_required": "expected nothing here",
}


def _kind_of(node: Any) -> str | None:
    if isinstance(node, MappingNode):
        return "a mapping"
    if isinstance(node, SequenceNode):
        return "a list"
    return None


def _model_at(path: Sequence[str | int]) -> type[BaseModel] | None:
    """The pydantic model that owns the fields at ``path`` (for did-you-mean)."""
    model: type[BaseModel] = ElasticSpec
    for part in path:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(part)
        if field is None:
            return None
        found = nested_model(field.annotation)
        if found is None:
            return None
        model = found
    return model


def _find_field(model: type[BaseModel], name: str, prefix: tuple[str, ...]) -> str | None:
    """The dotted path of a field called ``name`` anywhere under ``model`` (breadth first)."""
    nested: list[tuple[type[BaseModel], tuple[str, ...]]] = []
    for field_name, field in model.model_fields.items():
        if field_name == name and prefix:
            return ".".join((*prefix, name))
        sub = nested_model(field.annotation)
        if sub is not None:
            nested.append((sub, (*prefix, field_name)))
    for sub, sub_prefix in nested:
        found = _find_field(sub, name, sub_prefix)
        if found:
            return found
    return None


def _did_you_mean(path: Sequence[str | int]) -> str:
    model = _model_at(path[:-1])
    if model is None or not isinstance(path[-1], str):
        return ""
    names = [f.alias or n for n, f in model.model_fields.items()]
    # The exact name one level off (join_timeout at the top, for rdzv.join_timeout) is a
    # better guess than a fuzzy match at this level (shutdown_timeout).
    elsewhere = _find_field(ElasticSpec, path[-1], ())
    if elsewhere:
        return f"; did you mean {elsewhere}?"
    import difflib  # a misspelling's suggestion only

    close = difflib.get_close_matches(path[-1], names, n=1, cutoff=0.6)
    if close:
        return f"; did you mean {close[0]}?"
    return f"; expected one of: {', '.join(sorted(names))}" if len(names) <= 12 else ""


def _message(err: Any, loaded: Loaded, path: list[str | int]) -> str:
    kind = err["type"]
    if kind == "extra_forbidden":
        return "unknown field" + _did_you_mean(path)
    if kind == "literal_error":
        expected = err["ctx"]["expected"]
        given = err.get("input")
        options = re.findall(r"'([^']*)'", expected)
        close = [o for o in options if isinstance(given, str) and o.lower() == given.strip().lower()]
        import difflib  # a misspelling's suggestion only

        close = close or difflib.get_close_matches(str(given), options, n=1, cutoff=0.6)
        return f"must be one of {expected}" + (f"; did you mean {close[0]}?" if close else "")
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        ops = {"greater_than_equal": ">=", "greater_than": ">", "less_than_equal": "<=", "less_than": "<"}
        bound = next(v for k, v in err["ctx"].items() if k in ("ge", "gt", "le", "lt"))
        return f"must be {ops[kind]} {bound}"
    if kind == "value_error":
        text = str(err["ctx"]["error"])
        node, _, exact = loaded.locate(path)
        if exact and isinstance(node, ScalarNode) and "quote it: " in text:
            text = re.sub(r'quote it: ".*"$', f'quote it: "{node.value}"', text)
        return text
    message: str = _TYPE_MESSAGES.get(kind, err["msg"])
    node, _, exact = loaded.locate(path)
    if not (exact and isinstance(node, ScalarNode)):
        return message
    if not node.style and re.match(YAML11_SURPRISE, node.value):  # plain: PyYAML's style None, libyaml's ""
        message += f"; YAML 1.1 readers give {node.value} another meaning, so write the value you mean"
    elif kind == "string_type":
        message += f'; quote it: "{node.value}"'
    elif node.style in ('"', "'") and kind in ("int_type", "float_type", "bool_type", "int_from_float"):
        message += ", not a quoted string; remove the quotes"
    return message


def _not_a_mapping(loaded: Loaded) -> Problem:
    kind = _kind_of(loaded.root) or "a single value"
    return loaded.problem([], f"expected a mapping of fields at the top level, not {kind}", given=None)


def validate(loaded: Loaded, targets: Sequence[str] | None = None) -> ElasticSpec:
    """Validate loaded data as an ElasticSpec; raise ``SpecError`` with every problem.

    ``targets``: the target names the compile asks for (``-t``), when it names any: a setting a
    chosen target refuses outright is left to that target to report (:data:`~.models.TARGETS`).
    """
    if not isinstance(loaded.data, dict):
        raise SpecError([_not_a_mapping(loaded)])
    manifest = _manifest_problem(loaded)
    if manifest is not None:
        raise SpecError([manifest])
    try:
        return ElasticSpec.model_validate(loaded.data, context={TARGETS: tuple(targets)} if targets else None)
    except ValidationError as e:
        raise SpecError(sorted(_problems(e, loaded))) from e


def _manifest_problem(loaded: Loaded) -> Problem | None:
    """One clear line for a Kubernetes manifest given where a spec goes (instead of "apiVersion: unknown field")."""
    data = loaded.data
    if not ("apiVersion" in data and "kind" in data) or "name" in data:
        return None
    kind = data.get("kind")
    shown = kind if isinstance(kind, str) and kind.isprintable() and len(kind) <= 63 else "Kubernetes"
    if isinstance(kind, str) and kind in kinds.importable():
        file = loaded.file if loaded.file != "<stdin>" else "-"
        message = f"a {shown} manifest, not an elastic.yaml spec; write one from it with: elastic-compile import {file}"
    else:
        message = f"a {shown} manifest, not an elastic.yaml spec (which has name, image and command)"
    return loaded.problem(["apiVersion"], message, at_key=True)._replace(given=None)


def fragment_problems(loaded: Loaded) -> list[Problem]:
    """The problems of a base's own values (``extends:``), located in the base.

    Each value is checked as it would be in a spec, but nothing is required and no check
    spans several fields: a base is a fragment that the specs extending it complete, and
    each of them is validated whole once merged.
    """
    if not isinstance(loaded.data, dict):
        return [_not_a_mapping(loaded)]
    try:
        ElasticSpec.model_validate(loaded.data, context={FRAGMENT: True})
    except ValidationError as e:
        return sorted(_problems(e, loaded, fragment=True))
    return []


def _problems(error: ValidationError, loaded: Loaded, *, fragment: bool = False) -> list[Problem]:
    problems: list[Problem] = []
    for err in error.errors():
        if fragment and err["type"] == "missing":
            continue
        path: list[str | int] = [p for p in err["loc"] if p not in _UNION_TAGS]
        if path and path[-1] == "[key]":
            path = path[:-1]
            at_key = True
        else:
            at_key = err["type"] == "extra_forbidden"
        inner = err.get("ctx", {}).get("error")
        if isinstance(inner, FieldProblems):
            for sub, message in inner.problems:
                problems.append(_field_problem(loaded, [*path, *sub], message))
            continue
        message = _message(err, loaded, path)
        if at_key:
            problems.append(loaded.problem(path, message, given=str(path[-1]), at_key=True))
            continue
        node, _, exact = loaded.locate(path)
        kind = _kind_of(node) if exact and err["type"] != "missing" else None
        if exact and isinstance(node, ScalarNode) and node.style in ('"', "'"):
            kind = f"{node.style}{node.value}{node.style}"  # show the quotes the user wrote
        problems.append(loaded.problem(path, message, given=kind))
    return problems


def _field_problem(loaded: Loaded, path: list[str | int], message: str) -> Problem:
    """A model-level problem: ``[key]`` at the end of its path points at a mapping key."""
    if path and path[-1] == "[key]":
        return loaded.problem(path[:-1], message, given=str(path[-2]), at_key=True)
    if message.startswith("unknown field"):
        return loaded.problem(path, message, given=str(path[-1]), at_key=True)
    return loaded.problem(path, message)
