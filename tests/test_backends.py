"""PyYAML over libyaml and PyYAML alone give the same results.

YAML is composed by libyaml when PyYAML has it, else by PyYAML's pure-Python parser
(``loader.pure_python()`` forces that here), and written by libyaml's emitter, else by
PyYAML's (``emit.PurePythonDumper``). The error catalogue and the goldens must come out
byte for byte the same either way, the node trees (tags, values, styles, marks) the two
parsers build must be equal, and both emitters must write the same bytes.
``bench/fuzz_spec.py`` holds both pairs to the same rule on every generated case.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from elastic_compile.compiler.cli import main
from elastic_compile.compiler.output import stream_text
from elastic_compile.compiler.pipeline import compile_path
from elastic_compile.core import emit, loader
from elastic_compile.core.errors import SpecError

REPO = Path(__file__).resolve().parent.parent
ERRORS = REPO / "tests" / "errors"
GOLDEN = REPO / "tests" / "golden"
ERROR_CASES = sorted(p.stem for p in ERRORS.glob("*.yaml"))
GOLDEN_CASES = sorted(p.name for p in GOLDEN.iterdir() if (p / "elastic.yaml").is_file())
YAML_FILES = sorted(
    str(p.relative_to(REPO))
    for p in [*ERRORS.glob("*.yaml"), *GOLDEN.glob("*/*.yaml"), *(REPO / "examples").glob("*.yaml")]
)

needs_libyaml = pytest.mark.skipif(not loader.LIBYAML, reason="PyYAML was built without libyaml")


# --------------------------------------------------------------------------- without libyaml


@pytest.mark.parametrize("case", ERROR_CASES)
def test_error_catalogue_without_libyaml(
    case: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(REPO)
    with loader.pure_python():
        code = main([f"tests/errors/{case}.yaml"])
    _, err = capsys.readouterr()
    assert code == 2
    assert err == (ERRORS / f"{case}.stderr").read_text(encoding="utf-8")


@pytest.mark.parametrize("target", ["pytorchjob", "podtemplate"])
@pytest.mark.parametrize("case", GOLDEN_CASES)
def test_goldens_without_libyaml(case: str, target: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(GOLDEN / case)
    with loader.pure_python():
        compiled = compile_path("elastic.yaml", (target,))
    expected = (GOLDEN / case / f"{target}.yaml").read_text(encoding="utf-8")
    assert stream_text([compiled], "yaml") == expected
    assert emit.to_yaml([o.doc for o in compiled.outputs], emit.PurePythonDumper) == expected


def test_pure_python_is_restored() -> None:
    with pytest.raises(SpecError), loader.pure_python():
        assert not loader._Backend.libyaml
        loader.load_text("a: [", "x.yaml")
    assert loader._Backend.libyaml is loader.LIBYAML


# --------------------------------------------------------------------------- the two parsers agree


def _tree(node: Any) -> Any:
    mark = (node.start_mark.line, node.start_mark.column)
    if isinstance(node.value, str):
        style = node.style or None  # plain: libyaml's "", PyYAML's None
        return (node.tag, node.value, style, mark, (node.end_mark.line, node.end_mark.column))
    if node.value and isinstance(node.value[0], tuple):
        return (node.tag, mark, [(_tree(k), _tree(v)) for k, v in node.value])
    return (node.tag, mark, [_tree(item) for item in node.value])


def _typed(data: Any) -> Any:
    """``data`` with every scalar's type and source text, so that 1e-4 read as a string or a float differ."""
    if isinstance(data, dict):
        return ("map", [(k, _typed(v)) for k, v in data.items()])
    if isinstance(data, list):
        return ("seq", [_typed(v) for v in data])
    return (type(data).__name__, repr(data), getattr(data, "text", None))


def _both(text: str | bytes) -> tuple[Any, Any]:
    """libyaml's and PyYAML's pure-Python parser's reading: data (types, source texts), size, tree."""

    def outcome() -> Any:
        try:
            loaded = loader.load_text(text, "f.yaml")
        except SpecError as e:
            return [str(p) for p in e.problems]
        return _typed(loaded.data), loaded.expanded, _tree(loaded.root)

    fast = outcome()
    with loader.pure_python():
        return fast, outcome()


# Forms where the two parsers could part: styles, escapes, marks after multi-byte
# characters, a leading byte-order mark, CRLF, anchors and merges, flow collections,
# comments, document markers, and the characters that send a text to PyYAML alone.
SNIPPETS = [
    "a: b\n",
    "\ufeffname: x\nimage: é:1\n",
    "name: x\r\nimage: y\r\n",
    "a: \"é\\u00e9\\x41\\ud83d\\ude00\"\nb: 'it''s'\n",
    "a: |\n  one\n   two\n\n  three\nb: >-\n  folded\n  text\nc: |+\n  kept\n\n",
    "base: &b {x: 1, y: [2, 3]}\nother:\n  <<: *b\n  y: 4\nlist: [*b, *b]\n",
    "a: [1, 2, {b: c}, [d, e]]\nf: {g: h, 'i': \"j\"}\n",
    "# comment\n---\na: 1 # trailing\n...\n",
    "a: ~\nb: null\nc: true\nd: 0o17\ne: 0x1F\nf: 1e-4\ng: .inf\nh: 0755\ni: 1:30\nj: on\n",
    "ключ: значение\n日本: 語\nemoji: 😀 ok\n",
    "a:\n- 1\n- - 2\n  - 3\n-\n",
    "a: b\tc\n",
    "cmd: [python, what?]\n",
    "a: [!!str, x]\n",
    "a: b\ufeffc\n",
    "a: x\x07\n",
    "a: [\n",
    "a: 1\na: 2\n",
    "- a\nb: c\n",
    "a: &x [*x]\n",
    # Values the builder does not build where they stand, nested past the bound (found by bench/fuzz_spec.py).
    "a: 1\na: " + "[" * 70 + "]" * 70 + "\n",
    "a: {<<: {b: " + "[" * 70 + "]" * 70 + "}}\n",
    "1: " + "[" * 70 + "]" * 70 + "\n",
    "",
    "   \n# only a comment\n",
    # No line break at the end (found by bench/fuzz_spec.py): marks at the end of the stream.
    "%YAML 1.2\n---\n# a comment",
    "a:",
    "a: 1\n# c",
    "- a\n-",
]


# Simple block forms, and their near misses.
LINE_SNIPPETS = [
    "name: x\nimage: ghcr.io/a/b:1.0-c\ncommand: [python, -m, a.b, --lr, 1e-4, 0x1F, 0o17, 0755, .inf, -1, +2]\n",
    "a: {cpu: 64, memory: 480Gi, nvidia.com/gpu: 8}\nb: {}\nc: []\nd: [ ]\ne: { }\n",
    "# head\n\na: 1 # one\n  # indented comment\nb:   [x , y]   # c\nc: true\nd: null\ne: False\nf: 1:30\ng: on\n",
    "a:\n  b:\n    c: 1\n  d: 2\ne: 3\n",
    "a:\n    b: 1\n    c:\n      d: 2\n",
    "a: b#c\n",
    "a: b #c\n",
    "a:# b\n",
    "a: # empty, then a block mapping\n  b: 1\n",
    "a:\nb: 1\n",
    "a:\n",
    "a: -\n",
    "a: -x\n",
    "a: x:\n",
    "a: x:y\n",
    "a: {b:c}\n",
    "a: {b: c:d}\n",
    "a: [b, c:d]\n",
    "a: [b,]\n",
    "a: [b,, c]\n",
    "a: [b, [c]]\n",
    "a: {b: 1, b: 2}\n",
    "a: 1\na: 2\n",
    "true: 1\n",
    "1: a\n",
    "null: a\n",
    "a: {1: b}\n",
    "a: {true: b}\n",
    "a:\n  b: 1\n c: 2\n",
    "a: 1\n  b: 2\n",
    "a: b\n  c\n",
    "  a: 1\n",
    "a: ...\nb: ---\nc: [..., ---]\n",
    "---\na: 1\n",
    "a: 1\n...\n",
    "a: ~\n",
    "a: 'x'\nb: \"y\"\n",
    "a: x y\n",
    "a: @x\n",
    "a: x@y=z\n",
    "a: =\n",
    "a: =x\n",
    "a: 9" + "9" * 100 + "\n",
    "a: [9" + "9" * 100 + "]\n",
    "a-b.c/d: 1\nA_B: 2\n_c: 3\n",
    "- a\n",
    "a:\n- b\n",
    "a: é\n",
    "a: [b, c]\r\n",
    "# only a comment\n",
    # Line breaks of YAML 1.1 other than LF, in a comment too (found by bench/fuzz_spec.py).
    "# a\x85b: 1\nc: 2\n",
    "# a\u2028b: 1\nc: 2\n",
    "# a\rb: 1\nc: 2\n",
    "a: 1 # \u2029b: 2\n",
    # Characters that send a text to PyYAML alone, in a comment or a value.
    "a: b # what? !!str\n# \tc\n",
    "a: what?\n",
    "a: [b, what?]\n",
    "a: !x\n",
]


@pytest.mark.parametrize("text", SNIPPETS + LINE_SNIPPETS)
def test_parsers_agree_on_snippets(text: str) -> None:
    fast, slow = _both(text)
    assert fast == slow


@pytest.mark.parametrize("path", YAML_FILES)
def test_parsers_agree_on_the_repository(path: str) -> None:
    fast, slow = _both((REPO / path).read_bytes())
    assert fast == slow


@needs_libyaml
@pytest.mark.parametrize(
    ("text", "libyaml"),
    [
        ("a: b\n", True),
        ("\ufeffa: b\n", True),
        ("a: b\tc\n", False),
        ("a: [what?]\n", False),
        ("a: !!str x\n", False),
        ("a: b\ufeffc\n", False),
        ("a: b", False),
        ("", True),
    ],
)
def test_libyaml_reads_what_it_reads_like_pyyaml(text: str, libyaml: bool) -> None:
    assert loader._libyaml_reads(text) is libyaml


@needs_libyaml
def test_libyaml_keeps_the_limits() -> None:
    deep = "a: " + "[" * (loader.MAX_DEPTH + 5) + "]" * (loader.MAX_DEPTH + 5) + "\n"
    with pytest.raises(SpecError, match="nesting deeper than 64 levels"):
        loader.load_text(deep, "deep.yaml")
    wide = "a: [" + ", ".join(["1"] * (loader.MAX_VALUES + 10)) + "]\n"
    with pytest.raises(SpecError, match=f"more than {loader.MAX_VALUES} values"):
        loader.load_text(wide, "wide.yaml")


@needs_libyaml
def test_libyaml_composes_only_texts_too_short_to_pass_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """libyaml composes a whole text before the bounds are checked: a longer one is composed from its events.

    PyYAML's composer, over libyaml's events, stops where a bound is passed, with the
    message and place the pure-Python parser gives; PyYAML's own parser is not needed.
    """
    composed: list[str] = []
    events: list[str] = []
    real, real_events = loader._CComposer, loader._CEventComposer
    monkeypatch.setattr(loader, "_CComposer", lambda text, *bounds: composed.append(text) or real(text, *bounds))
    monkeypatch.setattr(
        loader, "_CEventComposer", lambda text, *bounds: events.append(text) or real_events(text, *bounds)
    )
    pure = loader._Composer
    monkeypatch.setattr(loader, "_Composer", lambda *args: pytest.fail("composed by PyYAML's parser"))
    short = "a: [" + "1," * 4000 + "]\n"
    assert len(loader.load_text(short, "short.yaml").data["a"]) == 4000 and composed == [short]
    long = "a: [" + "1," * 9000 + "]\n"
    assert len(loader.load_text(long, "long.yaml").data["a"]) == 9000 and events == [long]
    wide = "a: [" + "1," * 30_000 + "]\n"
    with pytest.raises(SpecError) as fast:
        loader.load_text(wide, "wide.yaml")
    assert composed == [short] and events == [long, wide]
    monkeypatch.setattr(loader, "_Composer", pure)
    with pytest.raises(SpecError) as slow, loader.pure_python():
        loader.load_text(wide, "wide.yaml")
    assert [str(p) for p in fast.value.problems] == [str(p) for p in slow.value.problems]
    assert f"more than {loader.MAX_VALUES} values in the document" in str(fast.value.problems[0])


@pytest.fixture
def events_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every text libyaml reads is composed from its events, as a text too long for its composer is."""
    if not loader.LIBYAML:
        pytest.skip("PyYAML was built without libyaml")
    monkeypatch.setattr(loader, "_CComposer", loader._CEventComposer)


@pytest.mark.parametrize("text", SNIPPETS + LINE_SNIPPETS)
def test_libyaml_events_agree_on_snippets(text: str, events_only: None) -> None:
    fast, slow = _both(text)
    assert fast == slow


@pytest.mark.parametrize("path", YAML_FILES)
def test_libyaml_events_agree_on_the_repository(path: str, events_only: None) -> None:
    fast, slow = _both((REPO / path).read_bytes())
    assert fast == slow


@pytest.mark.parametrize("case", ERROR_CASES)
def test_error_catalogue_from_libyaml_events(
    case: str, events_only: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(REPO)
    assert main([f"tests/errors/{case}.yaml"]) == 2
    assert capsys.readouterr().err == (ERRORS / f"{case}.stderr").read_text(encoding="utf-8")


@needs_libyaml
def test_a_long_stream_is_read_from_libyaml_events() -> None:
    """A manifest stream longer than libyaml's composer takes (100 documents) reads as PyYAML reads it."""
    text = "".join(
        f"---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c{i}}}\ndata: {{k: v}}\n" for i in range(2000)
    )
    fast = [(d.data, _tree(d.root)) for d in loader.load_stream(text, "s.yaml")]
    with loader.pure_python():
        slow = [(d.data, _tree(d.root)) for d in loader.load_stream(text, "s.yaml")]
    assert len(fast) == 2000 and fast == slow


# --------------------------------------------------------------------------- the two emitters agree

_TEXT = st.lists(
    st.sampled_from(
        [
            *"abcXZ09 -_./:#'\"!&*|>%@`,[]{}?=+~<\n\t\r\\",
            *("\x85", "\u2028", "é", "\ufeff", "\x00", "😀"),
            *("---", "...", "yes", "null", "1e3", "0x1F", "1:30", ".inf", "2001-12-14", "<<", "="),
        ]
    ),
    max_size=12,
).map("".join)
_SCALARS = st.one_of(
    _TEXT,
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=130),
)
_DOCS = st.recursive(
    _SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(
            st.one_of(_TEXT, st.sampled_from(["apiVersion", "kind", "metadata", "spec"])), children, max_size=4
        ),
    ),
    max_leaves=25,
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(st.dictionaries(_TEXT, _DOCS, min_size=1, max_size=4), st.lists(_DOCS, min_size=1, max_size=4)),
        min_size=1,
        max_size=3,
    )
)
def test_the_emitters_write_the_same(docs: list[Any]) -> None:
    assert emit.to_yaml(docs) == emit.to_yaml(docs, emit.PurePythonDumper)


@pytest.mark.parametrize(
    "value",
    [
        "",
        "-",
        "-x",
        "a:",
        "a: b",
        "a #b",
        "x" * 130,
        "é" * 64,
        "é" * 65,
        "line\n",
        "keep\n\n",
        "\nlead",
        " lead",
        "tab\tin",
        "cr\rin",
        "nel\x85",
        "ok\u2028",
        "emoji 😀",
        "8",
        "1e3",
        "0o17",
        "yes",
        "=",
        "<<",
        "2001-12-14",
        "é",
        -0.0,
        math.inf,
        math.nan,
        1e16,
        10**30,
    ],
)
def test_the_emitters_write_each_scalar_the_same(value: Any) -> None:
    """Where the emitters' own rules part (astral characters, long and multi-line keys, |+ blocks), libyaml's hold."""
    docs = [{"k": value, "l": [value, {"m": value}], "n": {"o": [[value]]}}]
    assert emit.to_yaml(docs) == emit.to_yaml(docs, emit.PurePythonDumper)
    if isinstance(value, str):
        keyed = [{value: 1}, {"a": {value: [value]}}, {value: "keep\n\n", "z": 1}]
        assert emit.to_yaml(keyed) == emit.to_yaml(keyed, emit.PurePythonDumper)
