"""Any string a user puts in a value field comes back identical after compile and parse.

This is the property Helm and SkyPilot broke (values such as ``true`` or ``1e3`` became
booleans and numbers; ``a: b`` or ``{{ x }}`` broke or injected YAML). The spec is written
two ways a user might (JSON-style flow and PyYAML's block style) and the output is read
back by PyYAML's YAML 1.1 reader and by our own YAML 1.2 loader.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from elastic_compile import contract
from elastic_compile.compiler.output import stream_text
from elastic_compile.compiler.pipeline import compile_text
from elastic_compile.core.emit import plain, to_yaml
from elastic_compile.core.errors import SpecError
from elastic_compile.core.loader import load_text
from elastic_compile.schema.models import _is_image

TRICKY = [
    "true", "no", "on", "off", "yes", "Y", "null", "~", "1e3", "1e-4", "0o17", "0x1F", "0755", "1:30", "1_000",
    ".inf", "-.nan", "a: b", "#x", "x #y", "{{ x }}", "{% if %}", "- a", "[a]", "{a: b}", "&a", "*a", "!tag", "|",
    ">", "'", '"', "\\", "%", "@", "`", "line1\nline2", "trailing\n", "\n\nlead", " lead", "trail ", "tab\there",
    "\u00e9t\u00e9", "\u65e5\u672c", "\U0001f600", "\u2028", "\u0085", "\x07", "\r\n", "---", "...", "=", "<<",
]  # fmt: skip

# Values the schema accepts in each field (it rejects the rest with a located error).
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?\Z")

text_values = st.text(st.characters(exclude_categories=("Cs",)), max_size=40) | st.sampled_from(TRICKY)


def _spec(value: str) -> dict[str, Any]:
    image = value if _is_image(value) else "x:1"
    label = value if len(value) <= 63 and _LABEL_VALUE.match(value) else "ok"
    return {
        "name": "roundtrip",
        "image": image,
        "command": ["python", value, "--flag", value],
        "labels": {"team": label},
        "annotations": {"note": value},
        "env": {"VALUE": value},
        "pod_template": {"metadata": {"labels": {"l": label}, "annotations": {"a": value}}},
    }


def _outputs(spec_text: str) -> list[dict[str, Any]]:
    compiled = compile_text(spec_text, "spec.yaml", ["pytorchjob", "podtemplate"])
    text = stream_text([compiled], "yaml")
    pyyaml_docs = list(yaml.safe_load_all(text))
    ours = [plain(load_text(part, "out.yaml", max_depth=200).data) for part in text.split("---\n")]
    assert pyyaml_docs == ours, "PyYAML (YAML 1.1) and our YAML 1.2 loader read the output differently"
    return pyyaml_docs


def _check(doc: dict[str, Any], spec: dict[str, Any]) -> None:
    template = (
        doc["spec"]["pytorchReplicaSpecs"]["Worker"]["template"] if doc["kind"] == "PyTorchJob" else doc["template"]
    )
    container = template["spec"]["containers"][0]
    assert container["image"] == spec["image"]
    assert container["args"][-4:] == spec["command"]
    # After the compiler's downward-API entries, which come first.
    assert container["env"][len(contract.DOWNWARD_ENV)] == {"name": "VALUE", "value": spec["env"]["VALUE"]}
    assert doc["metadata"]["labels"] == spec["labels"]
    assert doc["metadata"]["annotations"] == spec["annotations"]
    assert template["metadata"]["labels"] == spec["pod_template"]["metadata"]["labels"]
    assert template["metadata"]["annotations"]["a"] == spec["pod_template"]["metadata"]["annotations"]["a"]


@pytest.mark.parametrize("value", TRICKY)
def test_tricky_values_round_trip(value: str) -> None:
    spec = _spec(value)
    for text in (json.dumps(spec), to_yaml([spec])):
        for doc in _outputs(text):
            _check(doc, spec)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=text_values, style=st.sampled_from(["json", "ascii", "block"]))
@example(value="1e3", style="block")
@example(value="a: b\n#x", style="block")
def test_any_string_round_trips(value: str, style: str) -> None:
    # Written raw, NEL/LS/PS are line breaks to any YAML 1.1 reader: not a value to keep.
    assume(not (style == "json" and any(c in value for c in "\x85\u2028\u2029")))
    spec = _spec(value)
    # Block style comes from our own emitter: PyYAML's safe_dump writes NEL raw and loses it.
    text = json.dumps(spec, ensure_ascii=style == "ascii") if style != "block" else to_yaml([spec])
    try:
        docs = _outputs(text)
    except SpecError as e:
        # A rejection must be a located problem about that value, never a crash.
        assert all(p.line >= 1 for p in e.problems), e
        return
    for doc in docs:
        _check(doc, spec)
