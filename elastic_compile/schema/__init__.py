"""The elastic.yaml spec (pydantic models) and its JSON Schema."""

from elastic_compile.schema.models import ElasticSpec, FieldProblems, NNodes

__all__ = ["ElasticSpec", "FieldProblems", "NNodes", "json_schema"]


def json_schema() -> dict[str, object]:
    """The JSON Schema (2020-12) of elastic.yaml, with descriptions and defaults."""
    schema = ElasticSpec.model_json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "elastic.yaml"
    return schema
