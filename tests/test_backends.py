"""Both YAML parsers and both emitters give the same results.

Specs are parsed by libyaml's events when PyYAML has it, else by PyYAML's pure-Python
parser (``loader.pure_python()`` forces that here); output is written by our fast emitter,
whose reference is PyYAML's own (``emit.reference_yaml``). The error catalogue and the
goldens must come out byte for byte the same either way, and the node trees (tags, values,
styles, marks) the two parsers build must be equal. ``bench/fuzz_spec.py`` holds both pairs
to the same rule on every generated case.
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
        text = stream_text([compile_path("elastic.yaml", (target,))], "yaml")
    assert text == (GOLDEN / case / f"{target}.yaml").read_text(encoding="utf-8")


def test_pure_python_is_restored() -> None:
    with pytest.raises(SpecError), loader.pure_python():
        assert not loader._Backend.libyaml
        loader.load_text("a: [", "x.yaml")
    assert loader._Backend.libyaml is loader.LIBYAML


# --------------------------------------------------------------------------- the two parsers agree


def _tree(node: Any) -> Any:
    mark = (node.start_mark.line, node.start_mark.column)
    if isinstance(node.value, str):
        return (node.tag, node.value, node.style, mark, (node.end_mark.line, node.end_mark.column))
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
    """The fast readers' and PyYAML's pure-Python parser's reading: data (types, source texts), size, tree."""

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
    "",
    "   \n# only a comment\n",
    # No line break at the end (found by bench/fuzz_spec.py): marks at the end of the stream.
    "%YAML 1.2\n---\n# a comment",
    "a:",
    "a: 1\n# c",
    "- a\n-",
]


# The form the line reader takes, and the near misses it must leave to the parsers.
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
    # Characters that send a text to PyYAML alone, in a comment (the line reader takes it) or a value.
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
    first = next(loader._composers(text, loader.MAX_DEPTH, loader.MAX_VALUES))
    assert isinstance(first, loader._LibComposer) is libyaml


@needs_libyaml
def test_libyaml_keeps_the_limits() -> None:
    deep = "a: " + "[" * (loader.MAX_DEPTH + 5) + "]" * (loader.MAX_DEPTH + 5) + "\n"
    with pytest.raises(SpecError, match="nesting deeper than 64 levels"):
        loader.load_text(deep, "deep.yaml")
    wide = "a: [" + ", ".join(["1"] * (loader.MAX_VALUES + 10)) + "]\n"
    with pytest.raises(SpecError, match=f"more than {loader.MAX_VALUES} values"):
        loader.load_text(wide, "wide.yaml")


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
def test_fast_emitter_writes_what_pyyaml_writes(docs: list[Any]) -> None:
    assert emit.to_yaml(docs) == emit.reference_yaml(docs)


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
        "line\n",
        "keep\n\n",
        "\nlead",
        " lead",
        "tab\tin",
        "nel\x85",
        "ok\u2028",
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
def test_fast_emitter_scalars(value: Any) -> None:
    docs = [{"k": value, "l": [value, {"m": value}], "n": {"o": [[value]]}}]
    assert emit.to_yaml(docs) == emit.reference_yaml(docs)
    if isinstance(value, str):
        keyed = [{value: 1}, {"a": {value: [value]}}]
        assert emit.to_yaml(keyed) == emit.reference_yaml(keyed)


# --------------------------------------------------------------------------- our own output, read fast

OUTPUTS = [
    'a: "x"\nb: [1, -2, 0x1F, 0o17, 1.5, .inf, -.inf, true, False, null, ~, ""]\nc: {d: {e: []}, f: {}}\n',
    "a: |\n  two\n  lines\nb: 'single'\n",
    "- 1\n- a\n",
    "a: 1\na: 2\n",  # duplicate key: the builder says so
    "a: !!str 1\n",  # tag
    "a: &x 1\nb: *x\n",  # anchor and alias
    "a: {<<: {b: 1}}\n",  # merge key
    "1: a\n",  # a key that is not a string
    "a: [\n",  # not YAML
    "",  # empty
    "a: 1\n---\nb: 2\n",  # two documents
    "a: " + "9" * 101 + "\n",  # a number too long
    # What our templates print: plain keys, block mappings, one JSON value a line.
    'apiVersion: "v1"\nspec:\n  a: {"b": [1, 2.5, true, null, "\u00e9\\n", {}]}\n  c:\n    d: []\ne: -1\n',
    'a: {"b":1}\n',  # JSON spaced otherwise than json_text: the YAML path reads it
    'a: "\\/"\n',  # an escape JSON has and json_text never writes
    'a: "\\ud83d\\ude00"\n',  # a surrogate pair: JSON joins it, YAML does not
    'a: "\\\\ud83d"\n',  # an escaped backslash before "ud83d": plain text
    "a: NaN\nb: Infinity\n",  # JSON's extensions are strings in YAML
    "a: 1E5\nb: 1.50\n",  # numbers json_text writes otherwise
    "a: [" + "9" * 101 + "]\n",  # a number too long, in JSON
    "a:\nb: 1\n",  # a null
    "a:\n  b: 1\n c: 2\n",  # an indentation no mapping has
    "a: 1\n  b: 2\n",  # deeper without a key to hold it
    'a: "x"  # a comment\n',
    'a: "x"\n\nb: 1\n',  # a blank line
    "a: 1",  # no final line break
    '"a": 1\n',  # a quoted key
    "a: 1\r\nb: 2\r\n",  # CRLF
]


@pytest.mark.parametrize("text", OUTPUTS)
def test_output_reads_like_a_spec(text: str) -> None:
    limits = {"max_bytes": 10**6, "max_depth": 64, "max_values": 1000, "max_chars": 10**6}

    def outcome(read: Any) -> Any:
        try:
            data = read()
        except SpecError as e:
            return [str(p) for p in e.problems]
        return data, [type(v).__name__ for v in (data.values() if isinstance(data, dict) else data)]

    fast = outcome(lambda: loader.load_output(text, "out", **limits))
    slow = outcome(lambda: emit.plain(loader.load_text(text, "out", **limits).data, top=False))
    assert repr(fast) == repr(slow)


@pytest.mark.parametrize("depth", range(60, 67))
@pytest.mark.parametrize("outer", [1, 2])
def test_output_depth_bound_is_the_yaml_paths(depth: int, outer: int) -> None:
    """Nesting around the limit (block mappings, then brackets, some of them inside strings)."""
    inner = "[" * depth + '"[{"' + "]" * depth
    text = "".join(f"{'  ' * i}k{i}:\n" for i in range(outer - 1)) + f"{'  ' * (outer - 1)}a: {inner}\n"
    limits = {"max_bytes": 10**6, "max_depth": 64, "max_values": 1000, "max_chars": 10**6}

    def outcome(read: Any) -> Any:
        try:
            return read()
        except SpecError as e:
            return [str(p) for p in e.problems]

    fast = outcome(lambda: loader.load_output(text, "out", **limits))
    assert fast == outcome(lambda: emit.plain(loader.load_text(text, "out", **limits).data, top=False))


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


@given(st.dictionaries(st.from_regex(r"[a-z][a-zA-Z0-9_]{0,6}", fullmatch=True), JSON_VALUES, min_size=1, max_size=4))
@settings(max_examples=300, deadline=None)
def test_json_lines_read_what_yaml_reads(values: dict[str, Any]) -> None:
    """``key: json_text(value)`` lines, in a nested block mapping too: both readers give the same data."""
    text = "".join(f"{k}: {emit.json_text(v)}\n" for k, v in values.items())
    text += "nested:\n" + "".join(f"  {k}: {emit.json_text(v)}\n" for k, v in values.items())
    limits = {"max_bytes": 10**6, "max_depth": 64, "max_values": 10**5, "max_chars": 10**6}
    try:
        slow = emit.plain(loader.load_text(text, "out", **limits).data, top=False)
    except SpecError:  # YAML refuses it (a lone surrogate, a number too long): so must the fast path
        with pytest.raises(SpecError):
            loader.load_output(text, "out", **limits)
        return
    fast = loader.load_output(text, "out", **limits)
    assert repr(fast) == repr(slow)


# Each golden for the targets it has an expected output for, the Flyte 2 example, and a
# Flyte 1 task (the golden specs have no flyte: section).
BUILTIN_OUTPUTS = [
    *(
        (GOLDEN / case / "elastic.yaml", target)
        for case in GOLDEN_CASES
        for target in ("pytorchjob", "trainjob", "podtemplate")
        if (GOLDEN / case / f"{target}.yaml").is_file()
    ),
    (REPO / "examples" / "flyte2" / "elastic.yaml", "flyte2"),
    (REPO / "examples" / "ddp-2x8-gpu.yaml", "flyte"),
]


@pytest.mark.parametrize(("path", "target"), BUILTIN_OUTPUTS, ids=lambda v: v.parent.name if isinstance(v, Path) else v)
def test_builtin_output_is_read_as_json_lines(
    path: Path, target: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Every built-in template's output takes the JSON path, and reads as the YAML reader reads it."""
    read: list[tuple[str, Any]] = []
    real = loader._json_lines

    def spy(text: str, *limits: Any) -> Any:
        data = real(text, *limits)
        read.append((text, data))
        return data

    monkeypatch.setattr(loader, "_json_lines", spy)
    # What the templates' filters printed is not printed again to compare: only the few
    # scalars a template writes itself (apiVersion: "kubeflow.org/v1").
    printed_again: list[Any] = []
    monkeypatch.setattr(loader, "json_text", lambda value: printed_again.append(value) or emit.json_text(value))
    if target == "flyte":
        spec = tmp_path / "elastic.yaml"
        spec.write_text(
            path.read_text(encoding="utf-8") + "flyte: {project: p, domain: d, version: v1}\n", encoding="utf-8"
        )
        path = spec
    compile_path(path, [target])
    monkeypatch.undo()
    assert not [v for v in printed_again if isinstance(v, (dict, list))]
    assert read, "no output took the JSON path"
    for text, data in read:
        slow = emit.plain(loader.load_text(text, "out", max_chars=10**7, max_values=10**6).data, top=False)
        assert repr(data) == repr(slow)
        if loader.LIBYAML:
            assert repr(loader._event_data(text, 160, 200_000, 10**7, source=False)[0]) == repr(data)


@pytest.mark.parametrize("read", ["spec", "output"])
def test_the_fast_path_keeps_the_expanded_character_bound(read: str) -> None:
    """Without aliases the data has no more characters than the text: a longer text is left to the counting path."""
    text = "k: " + "x" * 60 + "\n"
    limits = {"max_bytes": 10**6, "max_depth": 64, "max_values": 1000}
    assert loader.load_text(text, "s", **limits, max_chars=61).data == {"k": "x" * 60}
    with pytest.raises(SpecError, match="expands to more than 60 characters"):
        if read == "spec":
            loader.load_text(text, "s", **limits, max_chars=60)
        else:
            loader.load_output(text, "s", **limits, max_chars=60)


def test_spec_nodes_are_composed_only_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    composed: list[str] = []
    real = loader._single_node
    monkeypatch.setattr(loader, "_single_node", lambda text, *limits: composed.append(text) or real(text, *limits))
    text = (REPO / "examples" / "ddp-2x8-gpu.yaml").read_text(encoding="utf-8")
    loaded = loader.load_text(text, "spec.yaml")
    assert composed == ([] if loader.LIBYAML else [text])
    assert loaded.problem(["nnodes"], "m").line == 7 and loaded.root is loaded.root
    assert len(composed) == 1


EXPANDED_TEXTS = [
    *sorted(p.read_text(encoding="utf-8") for p in (REPO / "examples").rglob("*.yaml")),
    'a: "x"\nb: [1, "two", {c: ""}]\nd: {}\ne: |\n  block\n',
    "- 1\n- [a, b]\n",
]


@pytest.mark.parametrize("text", EXPANDED_TEXTS)
def test_the_fast_path_counts_what_the_builder_counts(text: str) -> None:
    """``Loaded.expanded`` (extends' bound on a merged spec) is the same whichever path read the data."""
    try:
        fast = loader.load_text(text, "s.yaml")
    except SpecError:
        return  # an example that is not one spec (a stream, a fragment): nothing read fast
    with loader.pure_python():
        slow = loader.load_text(text, "s.yaml")
    assert fast.data == slow.data
    assert fast.expanded == slow.expanded != (0, 0)


# --------------------------------------------------------------------------- simple specs, read line by line


# Words and keys of the form, and near misses the reader must leave to the parsers.
_GOOD_WORDS = ["a", "x1", "-m", "--lr", "1e-4", "0x1F", "0755", "1:30", ".inf", "true", "Null", "ghcr.io/a:1", "480Gi",
               "nvidia.com/gpu", "-1", "+2", "...", "a:b"]  # fmt: skip
_BAD_WORDS = ["~", "-", "b:", "@x", "=", "x#y", "", "'q'", "a b", "9" * 101, "é", "<<", "a,", "[", "}"]
_GOOD_KEYS = ["a", "name", "x.y/z", "k-", "_k", "B2"]
_BAD_KEYS = ["1", "true", "a b", "<<", "-k", "a:", ""]
_SPACES = st.sampled_from(["", " ", "  "])


@st.composite
def _line_specs(draw: st.DrawFn) -> str:
    """A spec of the line reader's form; one time in two, one word, key or line of it turned into a near miss."""
    good_word, good_key = st.sampled_from(_GOOD_WORDS), st.sampled_from(_GOOD_KEYS)
    lines: list[str] = []
    indent = 0
    for i in range(draw(st.integers(1, 8))):
        key, kind = f"{draw(good_key)}{i}", draw(st.sampled_from(["word", "list", "map", "nest", "other"]))
        pad = " " * indent
        if kind == "word":
            lines.append(f"{pad}{key}:{draw(_SPACES)} {draw(good_word)}{draw(st.sampled_from(['', '  ', ' # c']))}")
        elif kind == "list":
            words = draw(st.lists(good_word, max_size=4))
            lines.append(f"{pad}{key}: [{draw(_SPACES)}{(',' + draw(_SPACES)).join(words)}{draw(_SPACES)}]")
        elif kind == "map":
            entries = [f"{draw(good_key)}{j}: {draw(_SPACES)}{draw(good_word)}" for j in range(draw(st.integers(0, 3)))]
            lines.append(f"{pad}{key}: {{{draw(_SPACES)}{', '.join(entries)}}}")
        elif kind == "nest":
            lines.append(f"{pad}{key}:{draw(st.sampled_from(['', ' ', ' # c']))}")
            indent += draw(st.sampled_from([1, 2, 4]))
            lines.append(f"{' ' * indent}{draw(good_key)}: {draw(good_word)}")
        else:
            lines.append(draw(st.sampled_from([" " * draw(st.integers(0, 6)) + "# note", "", "   "])))
            indent = draw(st.sampled_from([0, indent]))
    if draw(st.booleans()):
        at = draw(st.integers(0, len(lines) - 1))
        line = lines[at]
        mutation = draw(st.sampled_from(["word", "key", "suffix", "indent", "line", "duplicate"]))
        if mutation == "word":
            found = [w for w in _GOOD_WORDS if w in line]
            if found:
                line = line.replace(draw(st.sampled_from(found)), draw(st.sampled_from(_BAD_WORDS)), 1)
        elif mutation == "key":
            line = line.replace(line.strip(" ").partition(":")[0], draw(st.sampled_from(_BAD_KEYS)), 1)
        elif mutation == "suffix":
            line += draw(st.sampled_from(["#c", ",", ":", " x", "]", ":x"]))
        elif mutation == "indent":
            line = " " * draw(st.integers(1, 3)) + line
        elif mutation == "line":
            line = draw(st.sampled_from(["- a", "---", "...", "%YAML 1.2", "a", "  b", "? a", "a: |", "a: &x 1"]))
        else:
            lines.insert(at, line)
        lines[at] = line
    return "\n".join(lines) + "\n"


@settings(max_examples=400, deadline=None)
@given(_line_specs())
def test_line_reader_agrees_with_pyyaml(text: str) -> None:
    """Texts built from the line reader's form and its near misses: the data, its size and the tree agree."""
    fast, slow = _both(text)
    assert fast == slow


@needs_libyaml
@pytest.mark.parametrize("path", sorted((REPO / "examples").glob("*2x8-gpu.yaml")), ids=lambda p: p.name)
def test_examples_take_the_line_reader(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The examples (what the benchmark compiles) are read line by line, not through a parser's events."""
    read: list[Any] = []
    real = loader._block_lines

    def spy(*args: Any) -> Any:
        read.append(real(*args))
        return read[-1]

    monkeypatch.setattr(loader, "_block_lines", spy)
    loaded = loader.load_text(path.read_bytes(), path.name)
    monkeypatch.undo()
    assert [data for data, _size in read] == [loaded.data]
    fast, slow = _both(path.read_text(encoding="utf-8"))
    assert fast == slow


def test_the_emitters_memory_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """The scalars and keys the fast emitter remembers stop at its bound; what it writes past it does not change."""
    saved = (dict(emit._values), dict(emit._keys), dict(emit._lines))
    monkeypatch.setattr(emit, "_CACHE_SIZE", 10)
    try:
        for cache in (emit._values, emit._keys, emit._lines):
            cache.clear()
        docs = [{f"key{i}": [f"word{i}", {f"k{i}": f"v{i}"}] for i in range(40)}]
        assert emit.to_yaml(docs) == emit.reference_yaml(docs)
        assert emit.to_yaml(docs) == emit.reference_yaml(docs)  # remembered and not
        assert (len(emit._values), len(emit._keys), len(emit._lines)) == (10, 10, 10)
    finally:
        for cache, old in zip((emit._values, emit._keys, emit._lines), saved, strict=True):
            cache.clear()
            cache.update(old)


@pytest.mark.parametrize(
    "text",
    [
        "x: [" + "0," * (loader.MAX_VALUES + 5) + "0]\n",
        "x: {" + ", ".join(f"k{i}: 0" for i in range(loader.MAX_VALUES // 2 + 5)) + "}\n",
        "#\n" * (loader.MAX_VALUES + 5) + "a: 1\n",
    ],
    ids=["wide-list", "wide-map", "many-lines"],
)
def test_the_line_reader_bounds_its_work_first(text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the values a document may hold, the line reader stops before reading the words or lines."""
    read: list[str] = []

    class Counting:
        def __init__(self, pattern: Any) -> None:
            self.pattern = pattern

        def fullmatch(self, text: str) -> Any:
            read.append(text)
            return self.pattern.fullmatch(text)

    for name in ("_ENTRY", "_FLOW_WORD", "_FLOW_ENTRY"):
        monkeypatch.setattr(loader, name, Counting(getattr(loader, name)))
    with pytest.raises(loader._Unusual):
        loader._block_lines(text, loader.MAX_DEPTH, loader.MAX_VALUES, loader.MAX_EXPANDED_CHARS)
    assert len(read) <= 1
