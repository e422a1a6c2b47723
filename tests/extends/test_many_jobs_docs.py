"""docs/many-jobs.md and the README's "Many jobs" section cannot drift from the code and the example."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from elastic_compile.core.loader import load_file, load_text
from elastic_compile.core.merge import ITEM
from elastic_compile.schema import compact
from elastic_compile.schema.extends import spec_rule

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "many-jobs.md"
EXAMPLE = ROOT / "examples" / "many-jobs"


def test_the_explain_excerpt_is_real_output() -> None:
    text = DOC.read_text()
    block = text.split("$ elastic-compile teams/nlp/llm-finetune.elastic.yaml --explain\n", 1)[1].split("```", 1)[0]
    out = subprocess.run(
        [sys.executable, "-m", "elastic_compile.compiler.cli", "teams/nlp/llm-finetune.elastic.yaml", "--explain"],
        cwd=EXAMPLE,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    shown = [line for line in block.splitlines() if line != "..."]
    assert len(shown) > 10
    assert [line for line in shown if line not in out] == []


@pytest.mark.parametrize("page", [ROOT / "README.md", DOC])
def test_the_layout_shown_is_the_example(page: Path) -> None:
    text = page.read_text()
    named = set(re.findall(r"\b((?:platform|teams)/[\w/.-]+\.elastic\.yaml)", text))
    assert named, page
    assert sorted(p for p in named if not (EXAMPLE / p).is_file()) == []


def _merged_lists(
    definition: str, prefix: tuple[str, ...], seen: frozenset[str] = frozenset()
) -> list[tuple[str, ...]]:
    """Every path below ``definition`` that Kubernetes merges by key (from the file the rules read)."""
    definitions = compact.merge_keys()
    paths = []
    for name, prop in definitions.get(definition, {}).get("properties", {}).items():
        path = (*prefix, name)
        if "x-kubernetes-patch-merge-key" in prop and prop.get("type") == "array":  # not LabelSelectorRequirement.key
            paths.append(path)
        ref = (prop.get("items") or prop).get("$ref", "").rsplit("/", 1)[-1]
        if ref and ref not in seen:
            below = (*path, ITEM) if "items" in prop else path
            paths += _merged_lists(ref, below, seen | {definition})
    return paths


def test_the_merge_table_names_every_list_merged_by_key() -> None:
    table = DOC.read_text().split("### The merge rules", 1)[1].split("\n\n", 2)[1]
    paths = _merged_lists("io.k8s.api.core.v1.PodSpec", ("pod_template", "spec"))
    assert ("pod_template", "spec", "containers", ITEM, "volumeMounts") in paths
    for path in paths:
        rule = spec_rule(path)
        assert rule is not None, path
        assert f"`{path[-1]}`" in table, path
        assert f"`{rule.keys[0]}`" in table, path
    for path in [("env",), ("pod_template", "spec", "tolerations")]:
        rule = spec_rule(path)
        assert rule is not None and all(f"`{key}`" in table for key in rule.keys), path


@pytest.fixture(scope="module")
def validator() -> Any:
    jsonschema = pytest.importorskip("jsonschema", reason="install the test extra: pip install -e '.[test]'")
    schema = json.loads((ROOT / "elastic.schema.json").read_text())
    return jsonschema.Draft202012Validator(schema)


@pytest.mark.parametrize("path", sorted(EXAMPLE.rglob("*.elastic.yaml")), ids=lambda p: str(p.relative_to(EXAMPLE)))
def test_the_example_passes_the_published_schema(path: Path, validator: Any) -> None:
    # Bases without a name, jobs without an image, x- keys and $patch directives: what editors see.
    assert [e.message for e in validator.iter_errors(load_file(path).data)] == []


@pytest.mark.parametrize(
    ("text", "missing"),
    [
        ("image: reg/t:1\ncommand: [x]\n", True),  # a job on its own needs its name
        ("extends: _base.elastic.yaml\ncommand: [x]\n", False),  # name and image may come from the base
        ("image: reg/t:1\nx-anchors: {a: 1}\nresources: {x-note: n, requests: {cpu: 1}}\n", False),  # a base
    ],
)
def test_the_schema_requires_a_name_only_of_a_job_that_stands_alone(text: str, missing: bool, validator: Any) -> None:
    errors = [e.message for e in validator.iter_errors(load_text(text, "<test>").data)]
    assert errors == (["'name' is a required property"] if missing else [])
