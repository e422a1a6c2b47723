"""Template rules: every printed value goes through tojson or to_yaml, and StrictUndefined holds."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from elastic_compile.compiler.render import BUILTIN_TEMPLATES, json_text, render
from elastic_compile.core.errors import CompileError

PRINT = re.compile(r"\{\{(.*?)\}\}", re.S)
TEMPLATES = sorted(BUILTIN_TEMPLATES.glob("*.j2"))


def test_there_are_templates() -> None:
    assert {p.name for p in TEMPLATES} >= {"pytorchjob.yaml.j2", "podtemplate.yaml.j2"}


@pytest.mark.parametrize("path", TEMPLATES, ids=lambda p: p.name)
def test_every_print_goes_through_a_value_filter(path: Path) -> None:
    for expression in PRINT.findall(path.read_text()):
        filters = [f.strip().split("(")[0] for f in expression.split("|")[1:]]
        assert filters and filters[-1] in ("tojson", "to_yaml"), f"{path.name}: bare {{{{{expression}}}}}"


def test_bare_print_detector_catches_one(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml.j2").write_text("name: {{ plan.name }}\n")
    expressions = PRINT.findall((tmp_path / "bad.yaml.j2").read_text())
    assert [e for e in expressions if "|" not in e] == [" plan.name "]


def test_undefined_names_fail(tmp_path: Path) -> None:
    (tmp_path / "pytorchjob.yaml.j2").write_text("name: {{ plan.nmae | tojson }}\n")
    with pytest.raises(CompileError, match=r"pytorchjob.yaml.j2.*undefined"):
        render("pytorchjob.yaml.j2", tmp_path, plan=object())


@pytest.mark.parametrize("value", ["a: b", "true", "\u2028", "\x85", "\ufeff", "{{ x }}", "\U0001f600", 1.5, None])
def test_json_text_is_single_line_yaml(value: object) -> None:
    text = json_text(value)
    assert "\n" not in text and "\u2028" not in text and "\x85" not in text
