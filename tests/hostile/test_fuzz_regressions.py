"""Defects bench/fuzz_spec.py found, minimized to a few lines each.

Every case must end as a located ``SpecError`` (one line per problem, line and column >= 1)
and never as an uncaught exception or a ``CompileError``. Cases whose fix belongs in a file
this suite does not own are strict xfails naming that file; they turn red once fixed, and
then the marker goes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

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


INT32_MAX, INT64_MAX = 2**31 - 1, 2**63 - 1


@pytest.mark.xfail(
    strict=True,
    reason="bug: schema/models.py RunPolicy/Scheduling bound these counts below (ge) but not above: a value past "
    "the CRD's int32 (int64 for activeDeadlineSeconds) is accepted and the emitted PyTorchJob fails the CRD "
    "schema ('out of range for int32'); add le=2**31-1 (2**63-1) so the error is located in the spec",
)
@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("backoff_limit", INT32_MAX + 1),
        ("ttl_seconds_after_finished", INT32_MAX + 1),
        ("active_deadline_seconds", INT64_MAX + 1),
        ("scheduling: {schedule_timeout_seconds", INT32_MAX + 1),
    ],
    ids=["backoff_limit", "ttl_seconds_after_finished", "active_deadline_seconds", "schedule_timeout_seconds"],
)
def test_run_policy_counts_beyond_the_crd_range(field: str, value: int) -> None:
    body = f"{field}: {value}" + ("}" if "{" in field else "")
    [line] = _rejected(BASE + f"run_policy: {{{body}}}\n")
    assert line.startswith("s.yaml:4:")


def test_run_policy_counts_at_the_crd_range_compile() -> None:
    text = BASE + f"run_policy: {{backoff_limit: {INT32_MAX}, active_deadline_seconds: {INT64_MAX}}}\n"
    assert compile_text(text, "s.yaml").outputs[0].doc["spec"]["runPolicy"]["backoffLimit"] == INT32_MAX


@pytest.mark.xfail(
    strict=True,
    reason="bug: schema/models.py pod_template validation types Quantity as string|number, so a float such as "
    "sizeLimit: 0.5 or cpu: 1e3 in pod_template passes and is emitted as a JSON float; the PyTorchJob CRD "
    "marks quantities x-kubernetes-int-or-string and rejects it. Emit the source text as a string (as the "
    "top-level resources do) or reject non-integer numbers with 'quote it'",
)
@pytest.mark.parametrize(
    "pod",
    [
        "volumes: [{name: data, emptyDir: {sizeLimit: 0.5}}]",
        "containers: [{name: side, image: a:1, resources: {limits: {cpu: 0.5}}}]",
        "containers: [{name: side, image: a:1, resources: {requests: {memory: 1e9}}}]",
    ],
    ids=["emptyDir-sizeLimit", "sidecar-cpu", "sidecar-memory-exponent"],
)
def test_float_quantities_in_the_pod_template(
    check_manifest: Callable[[Mapping[str, Any]], list[str]], pod: str
) -> None:
    try:
        compiled = compile_text(BASE + f"pod_template:\n  spec:\n    {pod}\n", "s.yaml")
    except SpecError as e:
        assert all(p.line == 6 for p in e.problems)  # rejecting, located, is a fix too
        return
    assert check_manifest(compiled.outputs[0].doc) == []
