"""Kubernetes' name rules are written once (core/names.py), and every user of them agrees.

Three copies of the DNS rules had drifted: one ended with ``$``, so ``doctor`` took the job
name ``"llama\\n"`` for a DNS-1035 label. These tests hold the rules to apimachinery's
examples and keep a fourth copy from appearing.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from elastic_compile import api
from elastic_compile.core import names
from elastic_compile.schema import podvalues

PACKAGE = Path(api.__file__).resolve().parent

# (rule, valid, invalid): apimachinery validation_test.go's cases, and a trailing newline.
RULES = [
    (names.is_dns1035_label, ["a", "ab-c", "a" * 63], ["1a", "a-", "A", "a.b", "a" * 64, "llama\n", ""]),
    (names.is_dns1123_label, ["a", "1a", "a" * 63], ["a-", "a.b", "A", "a" * 64, "ns\n", ""]),
    (names.is_dns1123_subdomain, ["a.b", "1.a-b.c", "a" * 253], ["a..b", ".a", "A.b", "a" * 254, "a.b\n"]),
    (names.is_port_name, ["http", "a1-b2", "p" * 15], ["1234", "a--b", "A", "p" * 16, "http\n"]),
]


@pytest.mark.parametrize(("rule", "valid", "invalid"), RULES, ids=[r[0].__name__ for r in RULES])
def test_each_rule_takes_what_kubernetes_takes(rule: object, valid: list[str], invalid: list[str]) -> None:
    assert callable(rule)
    assert [v for v in valid if not rule(v)] == []
    assert [v for v in invalid if rule(v)] == []


def test_no_pattern_lets_a_final_newline_through() -> None:
    for pattern in (names.DNS1035_LABEL, names.QUALIFIED_NAME, names.LABEL_VALUE, names.KUEUE_NAME):
        assert pattern.match("abc") and not pattern.match("abc\n"), pattern.pattern


def test_the_spec_refuses_a_name_with_a_final_newline() -> None:
    with pytest.raises(api.SpecError, match="name"):
        api.compile_text('name: "llama\\n"\nimage: x:1\ncommand: [python, t.py]\n', "pytorchjob")


@pytest.mark.parametrize(
    ("problem", "value"),
    [
        (podvalues.port_name_problem, "http\n"),
        (podvalues.resource_name_problem, "example.com/gpu\n"),
    ],
)
def test_pod_values_refuse_a_final_newline(problem: object, value: str) -> None:
    assert callable(problem)
    assert problem(value) is not None


def test_the_dns_rules_are_written_once() -> None:
    """A DNS label's character class appears in the package's Python only in core/names.py."""
    label = re.compile(re.escape("[-a-z0-9]*[a-z0-9]"))
    copies = sorted(
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if label.search(path.read_text()) and path != PACKAGE / "core" / "names.py"
    )
    assert copies == []
