"""The loader: YAML 1.2 meanings, no silent YAML 1.1 reinterpretation, and limits under attack."""

from __future__ import annotations

import resource
import sys
from typing import Any

import pytest
from support.specs import MINIMAL as BASE

from elastic_compile.compiler.pipeline import compile_text
from elastic_compile.core.errors import SpecError
from elastic_compile.core.loader import MAX_EXPANDED_CHARS, load_text
from elastic_compile.core.source import MAX_BYTES


def _problems(text: str | bytes) -> list[str]:
    with pytest.raises(SpecError) as e:
        compile_text(text, "s.yaml")
    return [str(p) for p in e.value.problems]


@pytest.mark.parametrize(
    ("written", "meaning"),
    [("1:4", (1, 4)), ('"1:4"', (1, 4)), ("2", (2, 2)), ("'3'", (3, 3)), ("1 : 2", None)],
)
def test_nnodes_range_never_base60(written: str, meaning: tuple[int, int] | None) -> None:
    if meaning is None:
        assert _problems(BASE + f"nnodes: {written}\n")
        return
    spec = compile_text(BASE + f"nnodes: {written}\n", "s.yaml").spec
    assert (spec.nnodes.min, spec.nnodes.max) == meaning


@pytest.mark.parametrize(
    ("field", "written", "fragment"),
    [
        ("max_restarts", "0755", "YAML 1.1 readers give 0755 another meaning"),
        ("max_restarts", "1_000", "YAML 1.1 readers give 1_000 another meaning"),
        ("max_restarts", "1:30", "YAML 1.1 readers give 1:30 another meaning"),
        ("istio_sidecar", "yes", "YAML 1.1 readers give yes another meaning"),
        ("istio_sidecar", "on", "YAML 1.1 readers give on another meaning"),
        ("istio_sidecar", "No", "YAML 1.1 readers give No another meaning"),
        ("monitor_interval", "1:30", "base-60"),
        ("shutdown_timeout", "0:30", "base-60"),
        ("shared_memory", "yes", "YAML 1.1 reads yes as a boolean, so write true or false"),
        ("nproc_per_node", "0o17", None),
    ],
)
def test_yaml11_lookalikes_in_numbers_and_bools_are_errors(field: str, written: str, fragment: str | None) -> None:
    if fragment is None:  # 0o17 is YAML 1.2 octal: 15, and YAML 1.1 would read a string
        assert compile_text(BASE + f"{field}: {written}\n", "s.yaml").spec.nproc_per_node == 15
        return
    [line] = _problems(BASE + f"{field}: {written}\n")
    assert line.startswith(f"s.yaml:4:{len(field) + 3}: {field}: ")
    assert fragment in line and line.endswith(f"(given: {written})")


@pytest.mark.parametrize("written", ["on", "no", "0755", "1:30", "1e-4", "1.10", "1_000", "0x1F", ".inf", "~x"])
def test_yaml11_lookalikes_in_strings_keep_the_text(written: str) -> None:
    compiled = compile_text(BASE.replace("t.py]", f"t.py, {written}]") + f"env: {{V: {written}}}\n", "s.yaml")
    assert compiled.spec.command == ["python", "t.py", written]
    assert compiled.spec.env == {"V": written}


@pytest.mark.parametrize("written", ["true", "null", "~", "False"])
def test_booleans_and_nulls_in_strings_must_be_quoted(written: str) -> None:
    [line] = _problems(BASE + f"env: {{V: {written}}}\n")
    assert "must be a string; quote it" in line


def test_quantities_keep_what_was_written() -> None:
    spec = compile_text(BASE + "resources: {requests: {cpu: 1e3, memory: 0.5Gi}, limits: {cpu: 2000}}\n", "s").spec
    assert spec.resources.requests == {"cpu": "1e3", "memory": "0.5Gi"}


def _counted_rss(text: str | bytes) -> tuple[list[str], int, int]:
    """The problems, the Python-level calls the loader made (work, not seconds) and peak RSS growth."""
    calls = 0

    def count(_frame: Any, event: str, _arg: Any) -> None:
        nonlocal calls
        if event in ("call", "c_call"):
            calls += 1

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(SpecError) as e:
        sys.setprofile(count)
        try:
            load_text(text, "s.yaml")
        finally:
            sys.setprofile(None)
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    return [str(p) for p in e.value.problems], calls, grown_kib


LAUGHS = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True)
)


# One 50,000-character string aliased 19,000 times: 126 KB on disk, under the 20,000-value
# cap, ~950 million characters once expanded (issue 18: minutes and gigabytes before).
AMPLIFIED = "b: &b " + "x" * 50_000 + "\nx: [" + ", ".join(["*b"] * 19_000) + "]\n"
# Aliases of a mapping and of a list count their whole contents again, keys included.
AMPLIFIED_MAP = "m: &m\n  ? " + "k" * 40_000 + "\n  : v\nx: [" + ", ".join(["*m"] * 300) + "]\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("x: " + "a" * (MAX_BYTES + 1), "larger than 1048576 bytes"),
        (AMPLIFIED, "expands to more than 8388608 characters"),
        (AMPLIFIED_MAP, "expands to more than 8388608 characters"),
        (LAUGHS, "expands to more than 20000 values"),
        ("[" * 10_000 + "]" * 10_000, "nesting deeper than 64 levels"),
        ("a:\n" + "".join("  " * i + "- \n" for i in range(1, 200)), "nesting deeper than 64 levels"),
        ("x: !!python/object/apply:os.system [echo hi]", "YAML tags other than the standard ones"),
        ("x: !custom 1", "YAML tags other than the standard ones"),
        ("x: &a [1, *a]", "a recursive alias"),
    ],
    ids=[
        "over-1MiB",
        "amplified-alias",
        "amplified-map-keys",
        "billion-laughs",
        "deep-flow",
        "deep-block",
        "python-tag",
        "custom-tag",
        "recursive-alias",
    ],
)
def test_hostile_documents_are_rejected_fast_and_small(text: str, message: str) -> None:
    problems, calls, grown_kib = _counted_rss(text)
    assert len(problems) == 1 and message in problems[0], problems
    assert problems[0].startswith("s.yaml:")
    # A few hundred thousand calls at most (the 20,000-value cap); an unbounded document
    # would make tens of millions.
    assert calls < 1_000_000, f"the loader made {calls} calls"
    assert grown_kib < 200 * 1024, f"peak RSS grew by {grown_kib} KiB"


def test_duplicate_keys_name_the_first() -> None:
    [line] = _problems(BASE + "nnodes: 2\nnnodes: 3\n")
    assert line == "s.yaml:5:1: yaml: duplicate key (first defined at line 4) (given: nnodes)"


def test_merge_keys_and_anchors_work() -> None:
    text = BASE + "x_env: &e {A: '1'}\n"
    assert _problems(text)  # unknown field, but it loaded
    spec = compile_text(BASE + "env: {<<: {A: '1'}, B: '2'}\n", "s").spec
    assert spec.env == {"B": "2", "A": "1"}


def test_expanded_characters_are_bounded_exactly() -> None:
    """MAX_EXPANDED_CHARS is the bound: a document expanding to it loads, one character more does not."""
    # "k: [*b, *b, ...]": the keys "b", "k" and the string itself, then each alias again.
    anchor = 100_000
    aliases = (MAX_EXPANDED_CHARS - 2 - anchor) // anchor
    exact = MAX_EXPANDED_CHARS - 2 - anchor * (aliases + 1)
    fits = "b: &b " + "x" * anchor + "\nk: [" + ", ".join(["*b"] * aliases) + ", " + "y" * exact + "]\n"
    assert len(fits) < MAX_BYTES
    assert len(load_text(fits, "s.yaml").data["k"]) == aliases + 1
    problems, calls, _ = _counted_rss(fits.replace("y" * exact, "y" * (exact + 1)))
    message = "yaml: the document expands to more than 8388608 characters (an alias bomb?)"
    assert problems == [f"s.yaml:2:{aliases * 4 + 5}: {message}"]
    assert calls < 1_000_000
