"""Canonical output: the same data always gives the same bytes, and every reader agrees.

PyYAML decides whether a string needs quotes by asking its own YAML 1.1 resolver, so it
writes ``1e3`` and ``0o17`` bare, which YAML 1.2 readers (and sigs.k8s.io/yaml for some
forms) read as numbers. Our dumper also knows the YAML 1.2 core patterns, so any string
that either version would read as something else is quoted.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from elastic_compile.core.scalars import SourceFloat, SourceInt

# JSON leaves these raw with ensure_ascii=False, but YAML treats NEL, LS, PS as line
# breaks (folded to spaces inside quotes) and rejects C1 controls, BOM and surrogates.
_YAML_UNSAFE = re.compile("[\u007f-\u009f\u2028\u2029\ufeff\ufffe\uffff\ud800-\udfff]")

# One encoder for every value: json.dumps with options builds a new one per call.
_JSON = json.JSONEncoder(ensure_ascii=False, sort_keys=False, allow_nan=False)


def json_text(value: Any) -> str:
    """``value`` as single-line JSON that any YAML reader parses back to ``value``.

    What our templates print (their ``tojson`` and ``to_yaml`` filters): JSON is YAML
    whatever the indentation around it once the characters YAML folds or rejects are
    escaped.
    """
    text = _JSON.encode(value)
    if text.isascii() and "\x7f" not in text:  # the common case: nothing YAML folds or rejects
        return text
    return _YAML_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


# Kubernetes' conventional order for the top of an object; the rest keeps template order.
_TOP_KEYS = ("apiVersion", "kind", "metadata", "spec")


class _Dumper(yaml.SafeDumper):
    """Block style, indented lists, no aliases, no line folding."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)

    def ignore_aliases(self, data: Any) -> bool:
        return True


# Strings matching these must be quoted: YAML 1.2 core numbers that YAML 1.1 writes bare.
_Dumper.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?$"),
    list("-+.0123456789"),
)
_Dumper.add_implicit_resolver(
    "tag:yaml.org,2002:int",
    re.compile(r"^(?:0o[0-7]+|0x[0-9a-fA-F]+|[-+]?[0-9][0-9_]*)$"),
    list("-+0123456789"),
)


# YAML 1.1 treats NEL, LS and PS as line breaks, and PyYAML writes them raw in plain and
# single-quoted scalars, where readers fold them into spaces. Double quotes escape them.
_FOLDED_BREAKS = re.compile("[\x85\u2028\u2029]")


def _str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    # Multi-line strings read best as literal blocks; PyYAML falls back to quotes when a
    # literal block cannot represent the value exactly (trailing spaces, special characters).
    if _FOLDED_BREAKS.search(data):
        style: str | None = '"'
    else:
        style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _str)
_Dumper.add_representer(SourceInt, lambda d, v: d.represent_int(int(v)))
_Dumper.add_representer(SourceFloat, lambda d, v: d.represent_float(float(v)))


def plain(data: Any, *, top: bool = True) -> Any:
    """``data`` with Source numbers turned into plain ``int``/``float``; a document's top keys first."""
    if isinstance(data, Mapping):
        ordered = {k: plain(data[k], top=False) for k in _TOP_KEYS if top and k in data}
        ordered.update({k: plain(v, top=False) for k, v in data.items() if k not in ordered})
        return ordered
    if isinstance(data, Sequence) and not isinstance(data, str):
        return [plain(v, top=top) for v in data]
    if isinstance(data, bool) or data is None:
        return data
    if isinstance(data, int):
        return int(data)
    if isinstance(data, float):
        return float(data)
    return data


def to_yaml(docs: Sequence[Any]) -> str:
    """One or more documents as canonical YAML (``---`` between documents)."""
    return "---\n".join(_document(doc) for doc in docs)


def reference_yaml(docs: Sequence[Any]) -> str:
    """What :func:`to_yaml` writes, through PyYAML's own emitter (slower; the reference)."""
    return "---\n".join(_dump(plain(doc)) for doc in docs)


def _dump(data: Any) -> str:
    return yaml.dump(
        data, Dumper=_Dumper, sort_keys=False, default_flow_style=False, allow_unicode=True, width=2**31 - 1
    )


# ------------------------------------------------------------------ the fast emitter
#
# PyYAML's emitter is a general event machine: per document it spends milliseconds in
# Python on representing, serializing, analysing every scalar and choosing its style.
# Our documents have one shape (block mappings and indented block sequences of plain
# data), so the structure is written here directly, and each scalar's text is what
# PyYAML writes for it, computed once per distinct value and remembered: the emitter
# decides a scalar's style from its text alone (and from whether it is a key), never
# from where it stands. Strings of the common safe alphabet are decided here with
# PyYAML's own resolver; any other scalar is dumped through PyYAML in a one-item
# document and taken from there. A document outside that shape (a key that is not a
# string, a key PyYAML cannot write as a simple key, a type we do not know) goes
# through PyYAML whole. ``reference_yaml`` is the oracle the tests and the fuzzer
# compare with.


class _Unusual(Exception):
    """The document leaves the fast emitter's shape: PyYAML writes it whole."""


# Plain in block context whatever the position, when PyYAML's resolver reads it as a
# string: no indicator first, no space, no ": " or " #", ASCII, not a document marker.
_SAFE_PLAIN = re.compile(r"(?!---|\.\.\.)[-A-Za-z0-9_./=+(][-A-Za-z0-9_./=+:@()]*")
# PyYAML writes a key as a simple key only below 128 characters, counting its "!!str" tag.
_SIMPLE_KEY_CHARS = 122
_CACHE_SIZE = 50_000  # distinct scalars remembered (a batch of specs repeats most of them)
_values: dict[str, tuple[str, tuple[str, ...] | None, bool]] = {}
_keys: dict[str, str] = {}
# The commonest case whole: a string written on its key's (or dash's) line, as " text\n".
_lines: dict[str, str] = {}


def _resolves_to_str(text: str) -> bool:
    """True when PyYAML (and our YAML 1.2 additions) read ``text`` written plain as a string."""
    return not any(regexp.match(text) for _tag, regexp in _Dumper.yaml_implicit_resolvers.get(text[0], ()))


def _safe(text: str) -> bool:
    return _SAFE_PLAIN.fullmatch(text) is not None and text[-1] != ":" and text != "-"


def _scalar_value(data: str | float) -> tuple[str, tuple[str, ...] | None, bool]:
    """``(text, literal_lines, keep)`` for a scalar in value position.

    ``text`` is what follows ``key:`` or ``-`` (after one space); for a literal block it is
    the header (``|-``) and ``literal_lines`` are its lines without their indentation.
    ``keep`` marks a ``|+`` block: a document that ends with one gets PyYAML's ``...``.
    """
    if isinstance(data, str) and _safe(data):
        return (data if _resolves_to_str(data) else f"'{data}'"), None, False
    text = _dump([data])  # "- <scalar>\n"; a literal block's lines follow, indented by 2
    keep = text.endswith("\n...\n")
    if keep:
        text = text[: -len("...\n")]
    head, *lines = text[2:-1].split("\n")
    if not lines:
        return head, None, keep
    return head, tuple(line[2:] for line in lines), keep


def _value(data: str) -> tuple[str, tuple[str, ...] | None, bool]:
    found = _values.get(data)
    if found is None:
        found = _scalar_value(data)
        if len(_values) < _CACHE_SIZE:
            _values[data] = found
            if found[1] is None and not found[2] and len(_lines) < _CACHE_SIZE:
                _lines[data] = f" {found[0]}\n"
    return found


def _key(key: Any) -> str:
    """``key:`` as PyYAML writes it (a simple key), its colon included."""
    if type(key) is not str:
        raise _Unusual
    found = _keys.get(key)
    if found is None:
        if _safe(key) and len(key) <= _SIMPLE_KEY_CHARS:
            found = (key if _resolves_to_str(key) else f"'{key}'") + ":"
        else:
            text = _dump({key: None})
            if text.startswith("?") or not text.endswith(": null\n") or text.count("\n") != 1:
                raise _Unusual  # PyYAML writes it as a complex key ("? ...")
            found = text[: -len(" null\n")]
        if len(_keys) < _CACHE_SIZE:
            _keys[key] = found
    return found


class _Writer:
    """Block mappings and indented block sequences, written as PyYAML's emitter would.

    A collection's entries stand at its indent; the first one continues the parent's line
    after ``- `` (``inline``), and a mapping value that is a collection starts on the next
    line, two spaces further in.
    """

    def __init__(self) -> None:
        self.out: list[str] = []
        self.keep = False  # the last scalar written was a |+ block

    def mapping(self, data: Mapping[Any, Any], indent: int, top: bool, inline: bool) -> None:
        out = self.out
        pad = " " * indent
        keys: Any = data
        if top and any(k in data for k in _TOP_KEYS):
            keys = [k for k in _TOP_KEYS if k in data] + [k for k in data if k not in _TOP_KEYS]
        for k in keys:
            value = data[k]
            # The key's text (a str key only: PyYAML decides for others), then the value.
            key = _keys.get(k) if type(k) is str else None
            if key is None:
                key = _key(k)
            line = _lines.get(value) if type(value) is str else None
            if line is not None:  # the common case, whole: a string on the key's line
                out.append(key + line if inline else pad + key + line)
                self.keep = False
            else:
                out.append(key if inline else pad + key)
                self.item(value, indent, False, False)
            inline = False

    def sequence(self, data: Sequence[Any], indent: int, top: bool, inline: bool) -> None:
        out = self.out
        pad = " " * indent
        for value in data:
            line = _lines.get(value) if type(value) is str else None
            if line is not None:
                out.append("-" + line if inline else pad + "-" + line)
                self.keep = False
            else:
                out.append("-" if inline else pad + "-")
                self.item(value, indent, top, True)
            inline = False

    def item(self, data: Any, indent: int, top: bool, after_dash: bool) -> None:
        """One value after ``key:`` or ``-``, in a collection at ``indent``."""
        out = self.out
        kind = type(data)
        if kind is str:
            text, lines, keep = _value(data)
        elif kind is dict or (kind not in _NOT_MAPPINGS and isinstance(data, Mapping)):
            if not data:
                text, lines, keep = "{}", None, False
            else:
                out.append(" " if after_dash else "\n")
                self.mapping(data, indent + 2, top, after_dash)
                return
        elif kind is list or kind is tuple:
            if not data:
                text, lines, keep = "[]", None, False
            else:
                out.append(" " if after_dash else "\n")
                self.sequence(data, indent + 2, top, after_dash)
                return
        elif data is None:
            text, lines, keep = "null", None, False
        elif data is True or data is False:
            text, lines, keep = ("true" if data else "false"), None, False
        elif isinstance(data, int):
            text, lines, keep = str(int(data)), None, False
        elif isinstance(data, float):
            text, lines, keep = _scalar_value(float(data))
        else:
            raise _Unusual  # str subclasses, other sequences: PyYAML decides
        out.append(" ")
        out.append(text)
        out.append("\n")
        if lines is not None:
            pad = " " * (indent + 2)
            out.extend(f"{pad}{line}\n" if line else "\n" for line in lines)
        self.keep = keep


# Types that are never a Mapping: no ABC check for them.
_NOT_MAPPINGS: frozenset[type] = frozenset({list, tuple, int, float, bool, type(None)})


def _document(doc: Any) -> str:
    try:
        writer = _Writer()
        if isinstance(doc, Mapping) and doc:
            writer.mapping(doc, 0, True, False)
        elif (type(doc) is list or type(doc) is tuple) and doc:
            writer.sequence(doc, 0, True, False)
        else:
            raise _Unusual
        if writer.keep:
            writer.out.append("...\n")
        return "".join(writer.out)
    except _Unusual:
        return _dump(plain(doc))


def to_json(docs: Sequence[Any]) -> str:
    """One document as JSON, or several as a Kubernetes ``List``."""
    data = plain(docs[0]) if len(docs) == 1 else {"apiVersion": "v1", "kind": "List", "items": plain(list(docs))}
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"
