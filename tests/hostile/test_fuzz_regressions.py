"""Defects bench/fuzz_spec.py found, minimized to a few lines each.

Every case must end as a located ``SpecError`` (one line per problem, line and column >= 1)
or as valid output, never as an uncaught exception or a ``CompileError``. Most were fixed
after they were reported (the fix commit is named); they stay as regression tests. Cases
still open are strict xfails naming the file at fault.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest
from support.specs import MINIMAL as BASE

from elastic_compile.compiler.pipeline import compile_text
from elastic_compile.core.errors import SpecError


def _rejected(text: str) -> list[str]:
    with pytest.raises(SpecError) as e:
        compile_text(text, "s.yaml", ["pytorchjob", "podtemplate"])
    problems = e.value.problems
    assert problems and all(p.line >= 1 and p.col >= 1 and p.path and p.message for p in problems)
    return [str(p) for p in problems]


@pytest.mark.parametrize(
    "text",
    [
        BASE + "max_restarts: 1" + "0" * 4300 + "\n",
        BASE + "env: {A: " + "9" * 4301 + "}\n",
        BASE + "x: -" + "1" * 5000 + "\n",
        BASE + "pod_template: {spec: {priority: " + "1" * 4301 + "}}\n",
    ],
    ids=["count", "env-value", "unknown-field", "pod-template"],
)
def test_integers_longer_than_4300_digits(text: str) -> None:
    # Was: ValueError from int() past Python's 4300-digit guard, exit 3 (fixed in 40301cc: the
    # loader rejects numbers over 100 characters). A string field could keep the text instead;
    # either outcome is fine, a crash is not.
    try:
        compiled = compile_text(text, "s.yaml")
    except SpecError:
        [line] = _rejected(text)
        assert line.startswith("s.yaml:4:")
        return
    assert compiled.spec.env == {"A": "9" * 4301}


@pytest.mark.parametrize(
    "text",
    [
        BASE + "x: &a [*a]\n",
        BASE + "env: &e {A: *e}\n",
        BASE + "x: &a [1, [2, *a]]\n",
        BASE + "x: &a {<<: *a}\n",
        BASE + "x: &a {b: {<<: *a}}\n",
    ],
    ids=["list", "map", "nested", "merge-self", "merge-nested"],
)
def test_recursive_alias(text: str) -> None:
    # Was: RecursionError, exit 3 (fixed in 001de2e; the self-merge in 40301cc, which ignores
    # the cycle, so only the unknown field x is reported).
    [line] = _rejected(text)
    assert "recursive alias" in line or "x: unknown field" in line


@pytest.mark.parametrize("field", ["monitor_interval", "shutdown_timeout", "rdzv: {join_timeout"])
def test_duration_beyond_float_range(field: str) -> None:
    number = "1" + "0" * 309
    text = BASE + (f"{field}: {number}\n" if "{" not in field else f"{field}: {number}}}\n")
    # Was: OverflowError in float(), exit 3 (fixed in 40301cc by the loader's 100-character cap).
    [line] = _rejected(text)
    assert line.startswith("s.yaml:4:")


def test_sidecar_with_an_empty_image() -> None:
    # Was: a CompileError blaming the template after the webhook check (fixed in 40301cc).
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


INT32_MAX = 2**31 - 1


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("backoff_limit", INT32_MAX + 1),
        ("ttl_seconds_after_finished", INT32_MAX + 1),
        ("active_deadline_seconds", INT32_MAX + 1),  # the schema bounds it to int32 too
        ("scheduling: {schedule_timeout_seconds", INT32_MAX + 1),
    ],
    ids=["backoff_limit", "ttl_seconds_after_finished", "active_deadline_seconds", "schedule_timeout_seconds"],
)
def test_run_policy_counts_beyond_the_crd_range(field: str, value: int) -> None:
    # Was: accepted, and the PyTorchJob failed the CRD's int32 check (fixed in 40301cc).
    body = f"{field}: {value}" + ("}" if "{" in field else "")
    [line] = _rejected(BASE + f"run_policy: {{{body}}}\n")
    assert line.startswith("s.yaml:4:")


def test_run_policy_counts_at_the_crd_range_compile() -> None:
    text = BASE + f"run_policy: {{backoff_limit: {INT32_MAX}, active_deadline_seconds: {INT32_MAX}}}\n"
    assert compile_text(text, "s.yaml").outputs[0].doc["spec"]["runPolicy"]["backoffLimit"] == INT32_MAX


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
    # Was: emitted as a JSON float, which the CRD's int-or-string rejects (fixed in 40301cc).
    try:
        compiled = compile_text(BASE + f"pod_template:\n  spec:\n    {pod}\n", "s.yaml")
    except SpecError as e:
        assert all(p.line == 6 for p in e.problems)  # rejecting, located, is a fix too
        return
    assert check_manifest(compiled.outputs[0].doc) == []


# Found by bench/fuzz_spec.py through a two-line lint warning: sidecar and init images are checked too.
@pytest.mark.parametrize("field", ["containers", "initContainers"])
def test_pod_template_image_with_whitespace(field: str) -> None:
    [line] = _rejected(BASE + f'pod_template:\n  spec:\n    {field}: [{{name: side, image: "busybox:1.36\\n"}}]\n')
    assert line.startswith("s.yaml:6:") and f"pod_template.spec.{field}[0].image" in line
