"""Canonical output: the same data always gives the same bytes, and every reader agrees.

YAML is written by PyYAML over libyaml's emitter (PyYAML's own pure-Python emitter where
libyaml is absent: the same bytes, which a test holds them to), in libyaml's layout: block
style, a list inside a mapping at the mapping's indentation, as ``kubectl get -o yaml`` writes.

PyYAML decides whether a string needs quotes by asking its own YAML 1.1 resolver, so it
writes ``1e3`` and ``0o17`` bare, which YAML 1.2 readers (and sigs.k8s.io/yaml for some
forms) read as numbers. Our dumper also knows the YAML 1.2 core patterns, so any string
that either version would read as something else is quoted.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from yaml.emitter import Emitter, ScalarAnalysis
from yaml.events import ScalarEvent, StreamEndEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.representer import SafeRepresenter
from yaml.resolver import Resolver
from yaml.serializer import Serializer

from elastic_compile.core.loader import PlainResolver
from elastic_compile.core.scalars import SourceFloat, SourceInt

# JSON leaves these raw with ensure_ascii=False, but YAML treats NEL, LS, PS as line
# breaks (folded to spaces inside quotes) and rejects C1 controls, BOM and surrogates.
# The patterns of non-ASCII text are compiled by ``re`` when a text first needs them: most
# compiles have none, and a class of wide ranges costs a cold start up to 4 M instructions.
_YAML_UNSAFE = "[\u007f-\u009f\u2028\u2029\ufeff\ufffe\uffff\ud800-\udfff]"

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
    return re.sub(_YAML_UNSAFE, lambda m: f"\\u{ord(m.group()):04x}", text)


# Kubernetes' conventional order for the top of an object; the rest keeps template order.
_TOP_KEYS = ("apiVersion", "kind", "metadata", "spec")


class _Resolver(PlainResolver, Resolver):
    """PyYAML's YAML 1.1 resolver, and the YAML 1.2 core numbers: a string either reads otherwise is quoted."""


_STR_TAG, _SEQ_TAG, _MAP_TAG = (f"tag:yaml.org,2002:{kind}" for kind in ("str", "seq", "map"))
_PLAIN_TAGS: dict[type, str] = {
    int: "tag:yaml.org,2002:int",
    bool: "tag:yaml.org,2002:bool",
    type(None): "tag:yaml.org,2002:null",
}


_Resolver.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?$"),
    list("-+.0123456789"),
)
_Resolver.add_implicit_resolver(
    "tag:yaml.org,2002:int",
    re.compile(r"^(?:0o[0-7]+|0x[0-9a-fA-F]+|[-+]?[0-9][0-9_]*)$"),
    list("-+0123456789"),
)


class _Representer(SafeRepresenter):
    """Plain data as nodes: no aliases (every value is written where it stands), multi-line strings as blocks."""

    def ignore_aliases(self, data: Any) -> bool:
        return True

    def represent_data(self, data: Any) -> Node:
        # Mappings and lists straight to their nodes, in block style (nearly every value of
        # a manifest): without aliases, the general dispatch only adds its bookkeeping.
        # The nodes' arguments are positional: (tag, value, start_mark, end_mark, style or
        # flow_style); keywords would cost a dictionary for each of the manifest's nodes.
        kind = type(data)
        if kind is str:
            if data.isascii() and "\n" not in data:  # nearly every string: plain, or quoted by the emitter
                return ScalarNode(_STR_TAG, data)
            return _str(self, data)
        if kind is int or kind is bool or data is None:  # as SafeRepresenter writes them
            text = "null" if data is None else ("true" if data else "false") if kind is bool else str(data)
            return ScalarNode(_PLAIN_TAGS[kind], text)
        represent = self.represent_data
        if kind is dict or isinstance(data, Mapping):
            return MappingNode(_MAP_TAG, [(represent(k), represent(v)) for k, v in data.items()], None, None, False)
        if kind is list or kind is tuple:
            return SequenceNode(_SEQ_TAG, [represent(v) for v in data], None, None, False)
        node: Node = super().represent_data(data)
        return node


# YAML 1.1 treats NEL, LS and PS as line breaks, and PyYAML writes them raw in plain and
# single-quoted scalars, where readers fold them into spaces. Double quotes escape them.
_FOLDED_BREAKS = "[\x85\u2028\u2029]"


def _str(representer: SafeRepresenter, data: str) -> ScalarNode:
    # Multi-line strings read best as literal blocks; the emitter falls back to quotes when a
    # literal block cannot represent the value exactly (trailing spaces, special characters).
    style: str | None = None
    if "\n" in data:
        style = "|"
    if not data.isascii() and re.search(_FOLDED_BREAKS, data):
        style = '"'
    return ScalarNode(_STR_TAG, data, style=style)


_Representer.add_representer(str, _str)
_Representer.add_representer(SourceInt, lambda r, v: r.represent_int(int(v)))
_Representer.add_representer(SourceFloat, lambda r, v: r.represent_float(float(v)))


class PurePythonDumper(Emitter, Serializer, _Representer, _Resolver):
    """The dumper with PyYAML's pure-Python emitter, where libyaml is absent: it writes what libyaml writes.

    The two emitters differ in three rules, and libyaml's are kept (the tests compare both
    on generated data): libyaml prints only characters of the Basic Multilingual Plane, so a
    string with an emoji is double-quoted and escaped; a key is written as a simple key
    (``key:``) up to 128 bytes of UTF-8 on one line (a carriage return breaks it), where
    PyYAML stops below 128 characters (and reads on over a carriage return); and a
    document whose last block scalar is a ``|+`` one ends with ``...``, where PyYAML writes
    it only when nothing follows that block.
    """

    def __init__(self, stream: Any) -> None:
        Emitter.__init__(self, stream, width=_NO_FOLDING, allow_unicode=True)
        Serializer.__init__(self)
        _Representer.__init__(self, default_flow_style=False, sort_keys=False)
        _Resolver.__init__(self)
        self.kept_block = False

    def write_literal(self, text: str) -> None:
        super().write_literal(text)
        self.kept_block = self.open_ended  # a |+ block: until the next block scalar, in libyaml

    def expect_document_start(self, first: bool = False) -> None:
        if self.kept_block and isinstance(self.event, StreamEndEvent):
            self.open_ended = True
        super().expect_document_start(first)

    def analyze_scalar(self, scalar: str) -> ScalarAnalysis:
        analysis = super().analyze_scalar(scalar)
        if not scalar.isascii() and re.search(_ASTRAL, scalar):
            analysis.allow_flow_plain = analysis.allow_block_plain = False
            analysis.allow_single_quoted = analysis.allow_block = False
        return analysis

    def check_simple_key(self) -> bool:
        if isinstance(self.event, ScalarEvent):  # no anchors (ignore_aliases), and a string needs no tag
            if self.analysis is None:
                self.analysis = self.analyze_scalar(self.event.value)
            # libyaml also takes a carriage return for a line break, PyYAML does not.
            multiline = self.analysis.multiline or "\r" in self.analysis.scalar
            return not multiline and len(self.analysis.scalar.encode()) <= _SIMPLE_KEY_BYTES
        return bool(super().check_simple_key())


# Characters outside the Basic Multilingual Plane, which libyaml's emitter escapes.
_ASTRAL = "[\U00010000-\U0010ffff]"
# libyaml's longest simple key (yaml_emitter_check_simple_key).
_SIMPLE_KEY_BYTES = 128


# No line is folded (a value reads in a diff as written), and text stays text (allow_unicode).
_NO_FOLDING = 2**31 - 1


try:
    from yaml._yaml import CEmitter

    class _LibyamlDumper(CEmitter, _Representer, _Resolver):
        """The dumper with libyaml's emitter."""

        def __init__(self, stream: Any) -> None:
            CEmitter.__init__(self, stream, width=_NO_FOLDING, allow_unicode=True)
            _Representer.__init__(self, default_flow_style=False, sort_keys=False)
            _Resolver.__init__(self)

    _Dumper: type[Any] = _LibyamlDumper
except ImportError:  # pragma: no cover - PyYAML built without libyaml
    _Dumper = PurePythonDumper


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


def to_yaml(docs: Sequence[Any], dumper: type[Any] | None = None) -> str:
    """One or more documents as canonical YAML (``---`` between documents), each object's top keys first.

    ``dumper``: :class:`PurePythonDumper` to write without libyaml (the tests compare both).
    """
    return "---\n".join(_dump(_top_first(doc), dumper or _Dumper) for doc in docs)


def _top_first(doc: Any) -> Any:
    """``doc`` with Kubernetes' top keys first (what :func:`plain` orders; the dumper writes Source numbers)."""
    if isinstance(doc, Mapping):
        ordered = {k: doc[k] for k in _TOP_KEYS if k in doc}
        ordered.update((k, v) for k, v in doc.items() if k not in ordered)
        return ordered
    if isinstance(doc, Sequence) and not isinstance(doc, str):
        return [_top_first(item) for item in doc]
    return doc


def _dump(data: Any, dumper: type[Any]) -> str:
    stream = io.StringIO()
    writer = dumper(stream)
    writer.open()
    writer.represent(data)
    writer.close()
    return stream.getvalue()


def to_json(docs: Sequence[Any]) -> str:
    """One document as JSON, or several as a Kubernetes ``List``."""
    data = plain(docs[0]) if len(docs) == 1 else {"apiVersion": "v1", "kind": "List", "items": plain(list(docs))}
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"
