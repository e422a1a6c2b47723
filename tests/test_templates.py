"""Template rules: every printed value goes through tojson or to_yaml, and StrictUndefined holds."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from elastic_compile import api, targets
from elastic_compile.compiler.render import BUILTIN_TEMPLATES, json_text, render
from elastic_compile.core.errors import CompileError, SpecError

PRINT = re.compile(r"\{\{(.*?)\}\}", re.S)
TEMPLATES = sorted(BUILTIN_TEMPLATES.glob("*.j2"))
ROOT = Path(__file__).resolve().parents[1]
load = api.load


def _bare_prints(text: str) -> list[str]:
    """The prints of a template whose value does not end in tojson or to_yaml (the rule of every template)."""
    bare = []
    for expression in PRINT.findall(text):
        filters = [f.strip().split("(")[0] for f in expression.split("|")[1:]]
        if not (filters and filters[-1] in ("tojson", "to_yaml")):
            bare.append(expression.strip())
    return bare


def test_every_template_a_target_renders_is_checked() -> None:
    """The rule below runs on every template a built-in target names, for specs that use each target."""
    specs = [ROOT / "examples" / "ddp-2x8-gpu.yaml", *sorted((ROOT / "tests" / "golden").glob("*/elastic.yaml"))]
    named: set[str] = set()
    for path in specs:
        spec = load(path)
        for name in targets.BUILTIN:
            target = targets.get(name)
            try:
                named |= {d.template for d in target.documents(spec, None)}
            except SpecError:
                continue  # a setting this target cannot carry
    assert named and named <= {p.name for p in TEMPLATES}, named - {p.name for p in TEMPLATES}


@pytest.mark.parametrize("path", TEMPLATES, ids=lambda p: p.name)
def test_every_print_goes_through_a_value_filter(path: Path) -> None:
    assert _bare_prints(path.read_text()) == [], path.name


def test_the_rule_finds_a_bare_print_and_a_filter_after_tojson() -> None:
    text = (
        "a: {{ plan.name }}\nb: {{ plan.name | tojson | upper }}\nc: {{ plan.name | tojson }}\nd: {{ x | to_yaml }}\n"
    )
    assert _bare_prints(text) == ["plan.name", "plan.name | tojson | upper"]


def test_undefined_names_fail(tmp_path: Path) -> None:
    (tmp_path / "pytorchjob.yaml.j2").write_text("name: {{ plan.nmae | tojson }}\n")
    with pytest.raises(CompileError, match=r"pytorchjob.yaml.j2.*undefined"):
        render("pytorchjob.yaml.j2", tmp_path, plan=object())


@pytest.mark.parametrize("value", ["a: b", "true", "\u2028", "\x85", "\ufeff", "{{ x }}", "\U0001f600", 1.5, None])
def test_json_text_is_single_line_yaml(value: object) -> None:
    text = json_text(value)
    assert "\n" not in text and "\u2028" not in text and "\x85" not in text
