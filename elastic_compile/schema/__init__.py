"""The elastic.yaml spec (pydantic models) and its JSON Schema."""

from typing import Any

from elastic_compile.schema.models import ElasticSpec, FieldProblems, NNodes

__all__ = ["ElasticSpec", "FieldProblems", "NNodes", "json_schema"]


def json_schema() -> dict[str, Any]:
    """The JSON Schema (2020-12) of elastic.yaml, with descriptions and defaults.

    Adjustments to pydantic's output, so that editors agree with the compiler: the required
    fields (name, image) are required of a job that extends no base (``if``/``then``), and:
    plain string fields also accept numbers (the loader keeps the text a number was
    written as, so ``[--lr, 1e-4]`` is a valid argv), and optional fields drop their
    ``null`` branch (``anyOf [X, null]`` makes editors report "not valid under any of the
    given schemas" for any error inside X, as yaml-language-server does).
    """
    schema: dict[str, Any] = _adjust(ElasticSpec.model_json_schema(by_alias=True))
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "elastic.yaml"
    # A file that extends a base may take its name and image from it, and a base (no command
    # or function of its own) is a fragment: only a job that stands alone must have them.
    schema["if"] = {"anyOf": [{"required": ["command"]}, {"required": ["function"]}], "not": {"required": ["extends"]}}
    schema["then"] = {"required": schema.pop("required")}
    return schema


_NULL = {"type": "null"}
_CONSTRAINED = {"enum", "const", "pattern", "format", "minLength", "maxLength"}


def _adjust(node: Any) -> Any:
    if isinstance(node, list):
        return [_adjust(item) for item in node]
    if not isinstance(node, dict):
        return node
    node = {key: _adjust(value) for key, value in node.items()}
    branches = node.get("anyOf")
    if isinstance(branches, list) and _NULL in branches:
        rest = [b for b in branches if b != _NULL]
        del node["anyOf"]
        if node.get("default", 0) is None:
            del node["default"]
        node = {**rest[0], **node} if len(rest) == 1 else {**node, "anyOf": rest}
    if node.get("type") == "string" and not _CONSTRAINED & node.keys():
        node["type"] = ["string", "number"]
    return node
