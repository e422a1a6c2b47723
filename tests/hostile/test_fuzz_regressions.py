"""Defects bench/fuzz_spec.py found, minimized to a few lines each.

Every case must end as a located ``SpecError`` (one line per problem, line and column >= 1)
and never as an uncaught exception or a ``CompileError``. Cases whose fix belongs in a file
this suite does not own are strict xfails naming that file; they turn red once fixed, and
then the marker goes.
"""

from __future__ import annotations

import pytest

from elastic_compile.compiler.errors import SpecError
from elastic_compile.compiler.pipeline import compile_text

BASE = "name: t\nimage: x:1\ncommand: [python, t.py]\n"


def _rejected(text: str) -> list[str]:
    with pytest.raises(SpecError) as e:
        compile_text(text, "s.yaml", ["pytorchjob", "podtemplate"])
    problems = e.value.problems
    assert problems and all(p.line >= 1 and p.col >= 1 and p.path and p.message for p in problems)
    return [str(p) for p in problems]


LOADER_HUGE_INT = (
    "bug: compiler/loader.py _Builder._scalar calls int(text, 10) on a plain scalar of more than 4300 digits; "
    "Python's int max-str-digits guard raises ValueError, which escapes as exit 3 'internal error'. Keep such "
    "numbers as text (string fields want the text anyway) or report a located 'number too long' problem"
)


@pytest.mark.xfail(strict=True, reason=LOADER_HUGE_INT)
@pytest.mark.parametrize(
    "text",
    [
        BASE + "max_restarts: 1" + "0" * 4300 + "\n",
        BASE + "env: {A: " + "9" * 4301 + "}\n",  # a string field: the text should simply be kept
        BASE + "x: -" + "1" * 5000 + "\n",
        BASE + "pod_template: {spec: {priority: " + "1" * 4301 + "}}\n",
    ],
    ids=["count", "env-value", "unknown-field", "pod-template"],
)
def test_integers_longer_than_4300_digits(text: str) -> None:
    if "env:" in text:
        assert compile_text(text, "s.yaml").spec.env == {"A": "9" * 4301}  # a string field keeps the text
    else:
        _rejected(text)


MERGE_CYCLE = (
    "bug: compiler/loader.py _pairs() expands merge keys (<<) recursively with no cycle check: a mapping that "
    "merges itself (x: &a {<<: *a}) recurses until RecursionError, exit 3 'internal error'; _Builder.active "
    "catches recursive aliases in values but not in merge sources"
)


@pytest.mark.parametrize(
    "text",
    [
        BASE + "x: &a [*a]\n",
        BASE + "env: &e {A: *e}\n",
        BASE + "x: &a [1, [2, *a]]\n",
        pytest.param(BASE + "x: &a {<<: *a}\n", marks=pytest.mark.xfail(strict=True, reason=MERGE_CYCLE)),
        BASE + "x: &a {b: {<<: *a}}\n",
    ],
    ids=["list", "map", "nested", "merge-self", "merge-nested"],
)
def test_recursive_alias(text: str) -> None:
    [line] = _rejected(text)
    assert "alias" in line


@pytest.mark.xfail(
    strict=True,
    reason="bug: schema/models.py parse_duration does float(value) on an int above ~1.8e308 and raises "
    "OverflowError, which pydantic does not turn into a validation error: exit 3 'internal error'. Catch it "
    "and say 'must be a finite number of seconds' like .inf",
)
@pytest.mark.parametrize("field", ["monitor_interval", "shutdown_timeout", "rdzv: {join_timeout"])
def test_duration_beyond_float_range(field: str) -> None:
    number = "1" + "0" * 309
    text = BASE + (f"{field}: {number}\n" if "{" not in field else f"{field}: {number}}}\n")
    [line] = _rejected(text)
    assert "seconds" in line


@pytest.mark.xfail(
    strict=True,
    reason="bug: schema/models.py PodTemplate._spec_shape requires a sidecar to have an 'image' key but accepts "
    "image: ''; the webhook check then fails after rendering, so the user gets a CompileError blaming "
    "'template pytorchjob.yaml.j2' instead of a located problem at pod_template.spec.containers[0].image",
)
def test_sidecar_with_an_empty_image() -> None:
    [line] = _rejected(BASE + "pod_template:\n  spec:\n    containers: [{name: sidecar, image: ''}]\n")
    assert line.startswith("s.yaml:6:") and "pod_template.spec.containers[0]" in line


def test_sidecar_without_an_image_is_located() -> None:
    [line] = _rejected(BASE + "pod_template:\n  spec:\n    containers: [{name: sidecar}]\n")
    assert line.startswith("s.yaml:6:") and "pod_template.spec.containers[0]" in line


@pytest.mark.parametrize(
    "text",
    [
        BASE + "x: &a [lol]\ny: [*a, *a]\n",  # aliases that are fine: an unknown field, located
        BASE + "env: {<<: [{A: '1'}, {B: '2'}]}\n",
        BASE + "max_restarts: " + "9" * 4299 + "\n",  # just under Python's limit: 'must be <= 1000'
        BASE + "monitor_interval: " + "9" * 308 + "\n",  # just under float's range: a range error
    ],
    ids=["plain-aliases", "merge-list", "4299-digits", "308-digits"],
)
def test_neighbours_of_the_defects_stay_located(text: str) -> None:
    if "<<" in text:
        assert compile_text(text, "s.yaml").spec.env == {"A": "1", "B": "2"}
        return
    _rejected(text)
