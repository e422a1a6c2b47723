"""Load elastic.yaml: YAML with line numbers, without YAML 1.1 surprises, within limits.

PyYAML's ``safe_load`` reads YAML 1.1: an unquoted ``nnodes: 1:4`` becomes the base-60
integer 64, ``on`` becomes ``True`` and ``0755`` becomes 493, and a duplicate key
silently wins (https://yaml.org/type/). We therefore compose the node tree ourselves with a
YAML 1.2 core-schema resolver and construct values from it:

* plain scalars resolve as YAML 1.2 core (``true``/``false``, decimal/``0o``/``0x``
  integers, floats with an optional exponent such as ``1e-4``, ``null``/``~``);
* forms only YAML 1.1 reads specially (``on``, ``no``, ``1:30``, ``0755``, ``1_000``)
  stay strings: a string field keeps exactly what was written, and a number or boolean
  field rejects it with a hint to write the value the user meant;
* duplicate keys, tags other than the standard scalar and collection tags (so no
  ``!!python/object``), documents over 1 MiB, nesting deeper than 64 levels and alias
  expansions beyond 20,000 values or 8 MiB of characters are located errors, never
  crashes or hangs.

The loaded value keeps its node tree so that later stages can point at the exact line
and column of any field path.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Container, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from functools import cached_property, partial
from itertools import accumulate
from pathlib import Path
from typing import Any, TypeVar

import yaml
import yaml.reader
from yaml.composer import Composer
from yaml.events import (
    AliasEvent,
    DocumentEndEvent,
    DocumentStartEvent,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
    StreamEndEvent,
)
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.parser import Parser
from yaml.reader import Reader
from yaml.resolver import BaseResolver
from yaml.scanner import Scanner

from elastic_compile.core.emit import json_text
from elastic_compile.core.errors import Problem, SpecError
from elastic_compile.core.scalars import SourceFloat, SourceInt
from elastic_compile.core.source import MAX_BYTES, read_input

MAX_DEPTH = 64  # a pod template with affinity terms nests about 12 levels
MAX_VALUES = 20_000  # bounds the nodes parsed and the values built (alias expansion, "billion laughs")
# Bounds the characters of the values built (keys and scalars, each alias counted again).
# Without aliases a document of MAX_BYTES holds at most MAX_BYTES characters; an alias
# repeats its anchor's text for free, so 19,000 aliases of one 50 KB string would stay
# under MAX_VALUES yet expand to ~950 million characters for later stages to copy.
MAX_EXPANDED_CHARS = 8 * 1024 * 1024
# An integer's characters, at most: Python refuses int() of more than 4300 digits, and no
# spec value needs 100. Every reader (the builder, libyaml's events, JSON) holds to it.
_MAX_NUMBER_CHARS = 100

_TAG = "tag:yaml.org,2002:"
_STR, _INT, _FLOAT, _BOOL, _NULL = (_TAG + t for t in ("str", "int", "float", "bool", "null"))
_MAP, _SEQ, _MERGE = _TAG + "map", _TAG + "seq", _TAG + "merge"
_ALLOWED_TAGS = {_STR, _INT, _FLOAT, _BOOL, _NULL, _MAP, _SEQ, _MERGE, "!"}

# YAML 1.2 core schema (https://yaml.org/spec/1.2.2/#1032-tag-resolution), except that
# decimal integers with a leading zero stay strings: YAML 1.1 reads 0755 as octal 493,
# YAML 1.2 as 755, and a user who wrote it most likely meant neither.
_NULL_RE = re.compile(r"^(?:~|null|Null|NULL|)$")
_BOOL_RE = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")
_INT_RE = re.compile(r"^(?:[-+]?(?:0|[1-9][0-9]*)|0o[0-7]+|0x[0-9a-fA-F]+)$")
_FLOAT_RE = re.compile(
    # a dot or an exponent is required, so that 0755 and 007 are never floats
    r"^(?:[-+]?(?:\.[0-9]+|[0-9]+\.[0-9]*)(?:[eE][-+]?[0-9]+)?|[-+]?[0-9]+[eE][-+]?[0-9]+"
    r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
)

# What YAML 1.1 (PyYAML, go-yaml v2 in older kubectl) would read as something other than
# the string: used only to explain errors ("quote it").
YAML11_SURPRISE = re.compile(
    r"^(?:y|Y|yes|Yes|YES|n|N|no|No|NO|on|On|ON|off|Off|OFF"
    r"|[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?"  # sexagesimal 1:30
    r"|[-+]?0[0-7_]+|[-+]?[0-9][0-9_]*_[0-9_]*|0b[01_]+)$"  # 0755, 1_000, 0b101
)


_SURROGATE = re.compile("[\ud800-\udfff]")


class _Resolver(BaseResolver):
    """Implicit tags for plain scalars: YAML 1.2 core, see the module docstring."""

    def resolve(self, kind: type[Node], value: str | None, implicit: Any) -> str:
        if kind is ScalarNode and value is not None:
            if not implicit[0]:  # quoted or a block scalar: a string (no path resolvers here)
                return _STR
            # A plain scalar's tag depends on its text alone, and specs and outputs repeat
            # the same few hundred texts: remember them.
            tag = _resolved.get(value)
            if tag is None:
                tag = str(super().resolve(kind, value, implicit))  # type: ignore[no-untyped-call]
                if len(value) <= _REMEMBER_CHARS and len(_resolved) < _REMEMBER_TEXTS:
                    _resolved[value] = tag
            return tag
        return str(super().resolve(kind, value, implicit))  # type: ignore[no-untyped-call]


_REMEMBER_CHARS, _REMEMBER_TEXTS = 64, 20_000
_resolved: dict[str, str] = {}


for _tag, _regexp, _first in (
    (_BOOL, _BOOL_RE, "tTfF"),
    (_NULL, _NULL_RE, "~nN\x00"),  # "\x00": PyYAML looks up the empty scalar under ""
    (_INT, _INT_RE, "-+0123456789"),
    (_FLOAT, _FLOAT_RE, "-+.0123456789"),
    (_MERGE, re.compile(r"^<<$"), "<"),
):
    _Resolver.add_implicit_resolver(_tag, _regexp, list(_first))
_Resolver.add_implicit_resolver(_NULL, _NULL_RE, [""])
_RESOLVER = _Resolver()


_T = TypeVar("_T")


class _Unusual(Exception):
    """Input a fast path leaves to the general one (which reads it, or says what is wrong)."""


class _LoadLimit(Exception):
    def __init__(self, message: str, node_or_mark: Any) -> None:
        super().__init__(message)
        self.mark = getattr(node_or_mark, "start_mark", node_or_mark)


def _too_many_values(limit: int) -> str:
    return f"the document expands to more than {limit} values (an alias bomb?)"


def _too_many_chars(limit: int) -> str:
    return f"the document expands to more than {limit} characters (an alias bomb?)"


def expansion_problem(expanded: tuple[int, int]) -> str | None:
    """Why a document of ``expanded`` (values, characters) is over the loader's bounds, or None.

    A spec merged with its bases (``extends:``) is held to the bounds of one document: each
    file is within them alone, but a chain of files that each expand near the bound would
    hand later stages several times what one spec may hold.
    """
    values, chars = expanded
    if values > MAX_VALUES:
        return _too_many_values(MAX_VALUES)
    if chars > MAX_EXPANDED_CHARS:
        return _too_many_chars(MAX_EXPANDED_CHARS)
    return None


class _Composer(Reader, Scanner, Parser, Composer, _Resolver):
    """PyYAML's pure-Python composer with a nesting limit (its recursion has none)."""

    def __init__(
        self, stream: str, max_depth: int = MAX_DEPTH, max_nodes: int = MAX_VALUES, max_chars: int = MAX_EXPANDED_CHARS
    ) -> None:
        Reader.__init__(self, stream)
        Scanner.__init__(self)
        Parser.__init__(self)
        Composer.__init__(self)
        _Resolver.__init__(self)
        self._depth = 0
        self._max_depth = max_depth
        self._nodes = 0
        self._max_nodes = max_nodes
        # The expanded document, counted while parsing: an alias adds its anchor's values
        # and characters again, so a bomb of aliases stops after a few hundred of them.
        self._values = 0
        self._chars = 0
        self._max_chars = max_chars
        self._sizes: dict[int, tuple[int, int]] = {}  # id(node) -> its expanded (values, characters)

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        self._depth += 1
        self._nodes += 1
        try:
            if self._nodes > self._max_nodes:
                # Checked while parsing: the pure-Python parser needs seconds for a dense
                # 1 MiB document, so stop long before it has built every node.
                event = self.peek_event()  # type: ignore[no-untyped-call]
                raise _LoadLimit(f"more than {self._max_nodes} values in the document", event.start_mark)
            if self._depth > self._max_depth:
                event = self.peek_event()  # type: ignore[no-untyped-call]
                raise _LoadLimit(f"nesting deeper than {self._max_depth} levels", event.start_mark)
            event = self.peek_event()  # type: ignore[no-untyped-call]
            values, chars = self._values, self._chars
            node: Node | None = super().compose_node(parent, index)
            if isinstance(event, AliasEvent):
                more_values, more_chars = self._sizes.get(id(node), (0, 0))
                self._values += more_values
                self._chars += more_chars
            else:
                self._values += 1
                if isinstance(node, ScalarNode):
                    self._chars += len(node.value)
                self._sizes[id(node)] = (self._values - values, self._chars - chars)
            if self._values > self._max_nodes:
                raise _LoadLimit(_too_many_values(self._max_nodes), event.start_mark)
            if self._chars > self._max_chars:
                raise _LoadLimit(_too_many_chars(self._max_chars), event.start_mark)
            return node
        finally:
            self._depth -= 1


try:  # libyaml's parser, about 8x faster than PyYAML's pure-Python one
    from yaml._yaml import CParser as _CParser

    LIBYAML = True
except ImportError:  # pragma: no cover - PyYAML built without libyaml (tests force this path)
    LIBYAML = False


class _Backend:
    """Whether to parse with libyaml (``pure_python()`` turns it off for tests and the fuzzer)."""

    libyaml = LIBYAML


class _LibComposer(_Composer):
    """The same composer and limits, reading its events from libyaml.

    Only the events come from C: the node tree, tags, limits and counts are the ones
    above, and libyaml's events carry the same marks. Its parser keeps its own stack (no
    recursion), so deep nesting reaches our depth limit as with the pure parser.
    """

    def __init__(
        self, stream: str, max_depth: int = MAX_DEPTH, max_nodes: int = MAX_VALUES, max_chars: int = MAX_EXPANDED_CHARS
    ) -> None:
        super().__init__("", max_depth, max_nodes, max_chars)
        events = _CParser(stream)
        self.check_event = events.check_event  # type: ignore[method-assign]
        self.peek_event = events.peek_event  # type: ignore[method-assign]
        self.get_event = events.get_event  # type: ignore[method-assign]

    def compose_scalar_node(self, anchor: Any) -> ScalarNode:
        node = super().compose_scalar_node(anchor)
        if node.style == "":  # libyaml's plain style; PyYAML's is None
            node.style = None
        return node


# Where libyaml and PyYAML read the same text differently, PyYAML decides (its messages are
# the ones users and the error tests know), so texts with these characters skip libyaml:
# a tab inside a plain scalar ("a\tb") is text to libyaml, as in YAML 1.2, and an error to
# PyYAML; libyaml takes "?" inside a plain scalar in a flow collection ([what?]) and ends a
# tag at a flow comma ([!!str, x]), PyYAML rejects both; and libyaml counts a byte-order
# mark after the first character as a column, PyYAML does not. Control characters too:
# PyYAML rejects them before parsing, libyaml only when it reaches them (after a limit,
# maybe). And a text that does not end with a line break: libyaml places the end of the
# stream on a line after the last one, so a value left empty there (`a:`) would be located
# on a line the file does not have. The differential tests and the fuzzer's oracle compare
# both parsers on the rest.
_PYYAML_ONLY = re.compile("[\t?!\ufeff]")


def _libyaml_reads(text: str) -> bool:
    """Whether libyaml parses ``text`` (else PyYAML's parser alone does: see ``_PYYAML_ONLY``)."""
    ends_a_line = not text or text[-1] == "\n"
    return (
        _Backend.libyaml
        and ends_a_line
        and _PYYAML_ONLY.search(text, 1 if text[:1] == "\ufeff" else 0) is None
        and Reader.NON_PRINTABLE.search(text) is None
    )


def _composers(text: str, max_depth: int, max_nodes: int, max_chars: int = MAX_EXPANDED_CHARS) -> Iterator[_Composer]:
    """libyaml first when it is there, then PyYAML's parser (see :func:`_compose`)."""
    if _libyaml_reads(text):
        with suppress(UnicodeEncodeError):  # lone surrogates (text given as str): libyaml takes UTF-8 only
            yield _LibComposer(text, max_depth, max_nodes, max_chars)
    yield _Composer(text, max_depth, max_nodes, max_chars)


def _compose(
    text: str, max_depth: int, max_nodes: int, read: Callable[[_Composer], _T], max_chars: int = MAX_EXPANDED_CHARS
) -> _T:
    """``read(composer)`` with libyaml's events, or PyYAML's where libyaml finds an error.

    libyaml and PyYAML accept the same YAML, but word their errors differently and report
    some at other places; our messages and the error tests are PyYAML's. So a document
    libyaml rejects is parsed again by PyYAML, which raises its own error for it (or
    accepts it: it also reads the \\u escapes of surrogate pairs that JSON writes). Limits
    (``_LoadLimit``) are ours and the same on both paths, so they are not retried.
    """
    composers = _composers(text, max_depth, max_nodes, max_chars)
    for composer in composers:
        if isinstance(composer, _LibComposer):
            try:
                return read(composer)
            except yaml.YAMLError:
                continue
        return read(composer)
    raise AssertionError("unreachable: the pure-Python composer is always last")  # pragma: no cover


def _single_node(text: str, max_depth: int, max_nodes: int, max_chars: int) -> Node | None:
    """The root node of one document (``_LoadLimit`` or ``YAMLError`` when there is none)."""
    return _compose(text, max_depth, max_nodes, lambda c: c.get_single_node(), max_chars)


@contextmanager
def pure_python() -> Iterator[None]:
    """Parse with PyYAML's pure-Python parser only, as where PyYAML has no libyaml.

    For the tests and the fuzzer, which hold both parsers to the same results; not
    thread-safe (it swaps a module global).
    """
    saved, _Backend.libyaml = _Backend.libyaml, False
    try:
        yield
    finally:
        _Backend.libyaml = saved


@dataclass(frozen=True, eq=False)
class Loaded:
    """A loaded YAML document: plain Python data plus the node tree it came from.

    A spec merged from its bases (:mod:`elastic_compile.core.extends`) has one node tree
    whose nodes come from several files: ``origins`` names the file of each node placed by
    the merge (keyed by ``id``, holding the node so that the id stays its own), and every
    other node is in the file of its parent. ``merged`` holds the ids of the nodes the merge
    built from values of more than one file, and ``chain`` the files, the spec first.

    The node tree locates problems (the line and column of a field path). A spec that
    compiles cleanly never needs it, so when the data came straight from libyaml's events
    the tree is composed on first use: ``tree`` is the root node, or what composes it.
    """

    file: str
    data: Any
    tree: Node | Callable[[], Node] = field(repr=False)
    origins: Mapping[int, tuple[Node, str]] = field(default_factory=dict)
    merged: frozenset[int] = frozenset()
    chain: tuple[str, ...] = ()
    #: The values and characters the document expands to (aliases counted again), with
    #: those of its bases once merged: what :data:`MAX_VALUES` and
    #: :data:`MAX_EXPANDED_CHARS` bound (see :func:`expansion_problem`).
    expanded: tuple[int, int] = (0, 0)

    @cached_property
    def root(self) -> Node:
        """The document's root node."""
        return self.tree if isinstance(self.tree, Node) else self.tree()

    def _walk(self, path: Sequence[str | int]) -> tuple[Node, Node | None, bool, str]:
        node: Node = self.root
        key_node: Node | None = None
        file = self.file
        for part in path:
            found = _child(node, part)
            if found is None:
                return node, key_node, False, file
            key_node, node = found
            if self.origins:
                origin = self.origins.get(id(node))
                file = origin[1] if origin is not None else file
        return node, key_node, True, file

    def locate(self, path: Sequence[str | int]) -> tuple[Node, Node | None, bool]:
        """Find the node for ``path``.

        Returns ``(node, key_node, exact)``: the deepest node reached, the key node of the
        last mapping step when there is one, and whether the whole path was found.
        """
        node, key_node, exact, _ = self._walk(path)
        return node, key_node, exact

    def source(self, path: Sequence[str | int]) -> tuple[str, Node] | None:
        """The file and node of the value at ``path``, or None when the path is not written anywhere."""
        node, _, exact, file = self._walk(path)
        return (file, node) if exact else None

    def problem(
        self, path: Sequence[str | int], message: str, *, given: str | None = None, at_key: bool = False
    ) -> Problem:
        """A ``Problem`` located at ``path`` (or at the deepest part of it that exists), in the file that wrote it."""
        node, key_node, exact, file = self._walk(path)
        if not exact and isinstance(node, ScalarNode):
            # The path goes on inside a value written as a scalar (function: "a.b:c" is
            # function.target): the scalar itself is at fault.
            exact, key_node = True, None
        mark_node = key_node if (at_key or not exact) and key_node is not None else node
        if exact and given is None and isinstance(node, ScalarNode) and node.value != "":
            given = node.value
        mark = mark_node.start_mark
        return Problem(file, mark.line + 1, mark.column + 1, dotted(path), message, given)


def dotted(path: Sequence[str | int]) -> str:
    """``("env", 0, "name")`` -> ``env[0].name``; the empty path is ``spec``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif not _PLAIN_KEY.match(part):
            # Keys such as app.kubernetes.io/name or "bad label" would make a dotted path ambiguous.
            out += "[" + json.dumps(part, ensure_ascii=False) + "]"
        else:
            out += f".{part}" if out else part
    return out or "spec"


_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_$-]+$")


def _pairs(node: MappingNode, seen: frozenset[int] = frozenset()) -> Iterator[tuple[Node, Node]]:
    """Key/value pairs of a mapping, own keys first, then merged ones (``<<``).

    ``seen`` stops a mapping that merges itself (``x: &a {<<: *a}``) from looping forever.
    """
    seen = seen | {id(node)}
    merges: list[Node] = []
    for key, value in node.value:
        if key.tag == _MERGE:
            merges.append(value)
        else:
            yield key, value
    for merged in merges:
        sources = merged.value if isinstance(merged, SequenceNode) else [merged]
        for source in sources:
            if isinstance(source, MappingNode) and id(source) not in seen:
                yield from _pairs(source, seen)


def mapping_pairs(node: MappingNode) -> dict[str, tuple[Node, Node]]:
    """Key -> (key node, value node) of a mapping, as its data was built: own keys, then merged (``<<``) ones."""
    pairs: dict[str, tuple[Node, Node]] = {}
    for key, value in _pairs(node):
        if isinstance(key, ScalarNode):
            pairs.setdefault(key.value, (key, value))
    return pairs


def _child(node: Node, part: str | int) -> tuple[Node | None, Node] | None:
    if isinstance(node, MappingNode):
        for key, value in _pairs(node):
            if isinstance(key, ScalarNode) and key.value == str(part):
                return key, value
        return None
    if isinstance(node, SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
        return None, node.value[part]
    return None


class _Builder:
    """Turns composed nodes into Python values, collecting every problem."""

    def __init__(self, file: str, max_values: int = MAX_VALUES, max_chars: int = MAX_EXPANDED_CHARS) -> None:
        self.file = file
        self.max_values = max_values
        self.max_chars = max_chars
        self.problems: list[Problem] = []
        self.count = 0
        self.chars = 0  # characters of every scalar and key built so far, aliases included
        self.active: set[int] = set()  # collections being built, to catch recursive aliases

    def _problem(self, node: Node, message: str, given: str | None = None) -> None:
        mark = node.start_mark
        self.problems.append(Problem(self.file, mark.line + 1, mark.column + 1, "yaml", message, given))

    def build(self, node: Node) -> Any:
        if id(node) in self.active:
            # &a [*a]: the alias points at a collection that contains it. PyYAML composes
            # this happily; building it would never end.
            self._problem(node, "a recursive alias (an anchor used inside itself) is not allowed")
            return None
        self.active.add(id(node))
        try:
            return self._build(node)
        finally:
            self.active.discard(id(node))

    def _build(self, node: Node) -> Any:
        self.count += 1
        if self.count > self.max_values:
            raise _LoadLimit(_too_many_values(self.max_values), node)
        if node.tag not in _ALLOWED_TAGS:
            tag = "!!" + node.tag[len(_TAG) :] if node.tag.startswith(_TAG) else node.tag
            self._problem(node, "YAML tags other than the standard ones are not allowed", tag)
            return None
        if isinstance(node, ScalarNode):
            return self._scalar(node)
        if isinstance(node, SequenceNode):
            return [self.build(item) for item in node.value]
        if isinstance(node, MappingNode):
            return self._mapping(node)
        raise TypeError(node)  # pragma: no cover - PyYAML has no other node kinds

    def _count_chars(self, node: Node, text: str) -> None:
        self.chars += len(text)
        if self.chars > self.max_chars:
            raise _LoadLimit(_too_many_chars(self.max_chars), node)

    def _scalar(self, node: ScalarNode) -> Any:
        text, tag = node.value, node.tag
        self._count_chars(node, text)
        if _SURROGATE.search(text):
            # JSON writes astral characters as \ud83d\ude00 pairs, which PyYAML decodes
            # into two lone surrogates; join them back, and reject a truly lone one.
            try:
                text = text.encode("utf-16", "surrogatepass").decode("utf-16")
            except UnicodeDecodeError:
                self._problem(node, "invalid \\u escape: a lone UTF-16 surrogate")
                return None
        if tag in (_STR, "!"):
            return text
        if tag == _NULL and _NULL_RE.match(text):
            return None
        if tag == _BOOL and _BOOL_RE.match(text):
            return text.lower() == "true"
        if tag == _INT and len(text) > _MAX_NUMBER_CHARS:
            self._problem(node, f"number too long (more than {_MAX_NUMBER_CHARS} characters)", text)
            return None
        if tag == _INT and re.match(r"^[-+]?[0-9]+$|^0o[0-7]+$|^0x[0-9a-fA-F]+$", text):
            return SourceInt(int(text, 0) if text[:2] in ("0o", "0x") else int(text, 10), text)
        if tag == _FLOAT and _FLOAT_RE.match(text):
            # Python's float() spells YAML's .inf/.nan without the dot
            return SourceFloat(float(re.sub(r"\.(?=(?:inf|Inf|INF|nan|NaN|NAN)$)", "", text)), text)
        self._problem(node, f"not a valid {tag.rsplit(':', 1)[-1]} value", text)
        return None

    def _mapping(self, node: MappingNode) -> dict[str, Any]:
        out: dict[str, Any] = {}
        first: dict[str, Node] = {}
        for key, value in node.value:
            if key.tag == _MERGE:
                continue
            if not isinstance(key, ScalarNode) or key.tag not in (_STR, "!"):
                given = key.value if isinstance(key, ScalarNode) else None
                self._problem(key, 'mapping keys must be strings; quote the key, e.g. "1"', given)
                continue
            if key.value in first:
                line = first[key.value].start_mark.line + 1
                self._problem(key, f"duplicate key (first defined at line {line})", key.value)
                continue
            first[key.value] = key
            self._count_chars(key, key.value)
            out[key.value] = self.build(value)
        for key, value in _pairs(node):
            if isinstance(key, ScalarNode) and key.value not in out and key.tag in (_STR, "!"):
                self._count_chars(key, key.value)
                out[key.value] = self.build(value)
        for key, value in node.value:
            if key.tag == _MERGE and not _mergeable(value):
                self._problem(value, "a merge key (<<) needs a mapping or a list of mappings")
        return out


def _mergeable(node: Node) -> bool:
    items = node.value if isinstance(node, SequenceNode) else [node]
    return all(isinstance(item, MappingNode) for item in items)


def _position(text: bytes, offset: int) -> tuple[int, int]:
    before = text[:offset]
    line = before.count(b"\n") + 1
    return line, offset - (before.rfind(b"\n") + 1) + 1


#: Kinds ``elastic-compile import`` reads (compiler/adopt.py IMPORTERS); named below the
#: compiler so that the loader and the schema can point a manifest given as a spec to it.
IMPORTABLE_KINDS = ("PyTorchJob", "TrainJob")
# A document's top-level kind, as kubectl and kustomize print it (block style, column 1).
_TOP_KIND = re.compile(r"^kind:[ \t]*([\"']?)([A-Za-z][A-Za-z0-9]{0,62})\1[ \t]*$", re.M)


def _stream_hint(text: str, file: str) -> str:
    """For a manifest stream (``kubectl kustomize`` output) given where one spec goes: what reads it."""
    kind = next((k for _q, k in _TOP_KIND.findall(text) if k in IMPORTABLE_KINDS), None)
    if kind is None:
        return ""
    source = "-" if file == "<stdin>" else file
    return f"; a stream of manifests with a {kind}: write a spec from it with: elastic-compile import {source}"


def _parse_problem(e: Exception, file: str, text: str) -> Problem:
    """One located problem for a limit hit or a PyYAML error (one document or a stream)."""
    if isinstance(e, _LoadLimit):
        return Problem(file, e.mark.line + 1, e.mark.column + 1, "yaml", str(e))
    if isinstance(e, yaml.reader.ReaderError):  # control characters; carries a position, not a mark
        line, col = _position(text[: e.position].encode(), len(text[: e.position].encode()))
        given = f"U+{e.character:04X}" if isinstance(e.character, int) else None
        return Problem(file, line, col, "yaml", "control characters are not allowed", given)
    if isinstance(e, yaml.MarkedYAMLError):
        mark = e.problem_mark or e.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        message = (e.problem or e.context or "invalid YAML").strip()
        if "expected a single document" in (e.context or ""):
            message = "expected one YAML document, found several (--- separators)" + _stream_hint(text, file)
        elif "'\\t'" in message:
            message += "; indent with spaces, not tabs"
        elif e.context and e.context_mark is not None and e.problem:
            # PyYAML's problem is where it noticed; the context names what was left open.
            where = f"line {e.context_mark.line + 1}, column {e.context_mark.column + 1}"
            message += f" ({e.context.strip()} at {where})"
        return Problem(file, line, col, "yaml", message)
    return Problem(file, 1, 1, "yaml", str(e).splitlines()[0])


def load_text(
    raw: bytes | str,
    file: str,
    *,
    max_bytes: int = MAX_BYTES,
    max_depth: int = MAX_DEPTH,
    max_values: int = MAX_VALUES,
    max_chars: int = MAX_EXPANDED_CHARS,
) -> Loaded:
    """Parse one YAML document from ``raw``; raise ``SpecError`` with every problem found.

    The limits default to those for user specs; the compiler raises them when it parses
    back what a custom template rendered (a pod template nests a few levels below the spec).
    """
    _check_size(raw, file, max_bytes)
    if isinstance(raw, bytes):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            line, col = _position(raw, e.start)
            raise SpecError(
                [
                    Problem(
                        file, line, col, "spec", "not valid UTF-8; save the file as UTF-8", f"byte 0x{raw[e.start]:02X}"
                    )
                ]
            ) from e
    else:
        text = raw
    # The fast readers (off with pure_python(), which the tests compare them with): the simplest
    # form line by line (printable ASCII only, which it checks itself), else libyaml's events.
    if _Backend.libyaml:
        with suppress(_Unusual):
            data, expanded = _block_lines(text, max_depth, max_values, max_chars)
            return Loaded(file, data, partial(_root, text, max_depth, max_values, max_chars), expanded=expanded)
    if _libyaml_reads(text):
        with suppress(_Unusual, yaml.YAMLError, UnicodeEncodeError):
            data, expanded = _event_data(text, max_depth, max_values, max_chars, source=True)
            return Loaded(file, data, partial(_root, text, max_depth, max_values, max_chars), expanded=expanded)
    try:
        root = _single_node(text, max_depth, max_values, max_chars)
    except (_LoadLimit, yaml.YAMLError) as e:
        raise SpecError([_parse_problem(e, file, text)]) from e
    if root is None:
        raise SpecError([Problem(file, 1, 1, "spec", "the file is empty; a spec needs at least name and image")])
    builder = _Builder(file, max_values, max_chars)
    try:
        data = builder.build(root)
    except _LoadLimit as e:
        raise SpecError([_parse_problem(e, file, text)]) from e
    if builder.problems:
        raise SpecError(sorted(builder.problems))
    return Loaded(file, data, root, expanded=(builder.count, builder.chars))


def _root(text: str, max_depth: int, max_values: int, max_chars: int) -> Node:
    """The node tree of a text whose data the fast path read: the same parser, so it is there."""
    root = _single_node(text, max_depth, max_values, max_chars)
    if root is None:  # pragma: no cover - the fast path read a document from this text
        raise RuntimeError("the document vanished")
    return root


def _check_size(raw: bytes | str, file: str, max_bytes: int) -> None:
    size = len(raw.encode() if isinstance(raw, str) else raw)
    if size > max_bytes:
        raise SpecError([Problem(file, 1, 1, "spec", f"the file is larger than {max_bytes} bytes")])


def load_output(
    text: str,
    file: str,
    *,
    max_bytes: int,
    max_depth: int,
    max_values: int,
    max_chars: int,
    printed: Container[str] = (),
) -> Any:
    """Our own rendered output (a built-in template's) as plain data; ``SpecError`` when it is not valid.

    Our templates print every value as JSON, so their output holds only plain strings,
    numbers, booleans and nulls under string keys, with numbers as plain ``int`` and
    ``float`` (source text is for what users write). It is read by the JSON decoder line by
    line (:func:`_json_lines`), else straight from libyaml's events; anything else (a tag,
    an anchor, a merge or duplicate key, a limit reached, a YAML error) is read again by
    :func:`load_text`, which says what is wrong. ``printed``: the texts ``json_text``
    printed for this output (the templates' filters), which a line may hold without being
    printed again to compare.
    """
    _check_size(text, file, max_bytes)
    with suppress(_Unusual, ValueError, RecursionError):
        return _json_lines(text, max_depth, max_values, max_chars, printed)
    if _Backend.libyaml:
        with suppress(_Unusual, yaml.YAMLError, UnicodeEncodeError):
            return _event_data(text, max_depth, max_values, max_chars, source=False)[0]
    from elastic_compile.core.emit import plain  # a custom template's way, and the rare one here

    limits = {"max_bytes": max_bytes, "max_depth": max_depth, "max_values": max_values, "max_chars": max_chars}
    return plain(load_text(text, file, **limits).data, top=False)


# A line of our templates' output: a plain key, and JSON or nothing (a block mapping follows).
_KEY_LINE = re.compile(r"( *)([A-Za-z][A-Za-z0-9_]*):(?: (.+))?")
# JSON that reads differently as YAML, or that the YAML path would refuse: a surrogate
# escape (JSON pairs them, YAML does not) or an escape outside the set json_text writes.
# (Searched once escaped backslashes are removed, so that every backslash left starts one.)
_NOT_JSON_TEXT = re.compile(r"\\(?:[^\"nrtbfu]|u[dD][89a-fA-F])")
_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACKETS = re.compile(r"[\[\]{}]")
_DEPTH = {"[": 1, "{": 1, "]": -1, "}": -1}


def _json_lines(text: str, max_depth: int, max_values: int, max_chars: int, printed: Container[str] = ()) -> Any:
    """Our built-in templates' output as data, read with the JSON decoder.

    Their text is a block mapping of plain keys whose values are what ``json_text``
    prints: one JSON value on the key's line. A line is taken only if it is exactly what
    ``json_text`` prints for the value it holds (or, in ``printed``, what it printed for
    the template), which YAML reads to the same value (the tests compare both readers);
    anything else (a comment, a quoted key, a null, other JSON spacing) raises
    ``_Unusual`` for the YAML reader. The limits hold as on the YAML path: no more values
    than characters (each takes one at least), and the nesting of the block mappings plus
    the deepest brackets outside strings is bounded.
    """
    if len(text) > max_chars or len(text) > max_values:
        raise _Unusual
    if "\\" in text and _NOT_JSON_TEXT.search(text.replace("\\\\", "")):
        raise _Unusual
    root: dict[str, Any] = {}
    stack: list[tuple[int, dict[str, Any]]] = [(0, root)]  # the open block mappings and their indentation
    waiting: str | None = None  # a key whose block mapping starts on the next line
    lines = text.split("\n")
    if lines.pop() != "":  # the document ends with a line break
        raise _Unusual
    for line in lines:
        match = _KEY_LINE.fullmatch(line)
        if match is None:
            raise _Unusual
        indent, key, value = len(match[1]), match[2], match[3]
        mapping = _block_mapping(stack, waiting, indent)
        waiting = None
        if key in mapping:
            raise _Unusual
        if value is None:
            waiting = key
            continue
        # The decoder's scanner itself: its decode() would also skip spaces around the
        # value, which json_text never writes (such a line is unusual either way).
        try:
            data, end = _JSON_SCAN(value, 0)
        except StopIteration:  # no JSON value starts there
            raise _Unusual from None
        if end != len(value):
            raise _Unusual
        if value not in printed and json_text(data) != value:
            raise _Unusual
        # A scalar inside the deepest collection sits in len(stack) + deepest collections;
        # the brackets (some perhaps inside strings) bound that depth, and nearly always do.
        deepest = value.count("[") + value.count("{")
        if len(stack) + deepest >= max_depth:
            deepest = max(accumulate(map(_DEPTH.__getitem__, _BRACKETS.findall(_STRINGS.sub("", value)))))
            if len(stack) + deepest >= max_depth:
                raise _Unusual
        mapping[key] = data
    if waiting is not None or not root:
        raise _Unusual
    return root


def _block_mapping(stack: list[tuple[int, dict[str, Any]]], waiting: str | None, indent: int) -> dict[str, Any]:
    """The block mapping a key at ``indent`` belongs to, for the line readers; ``_Unusual`` when none.

    ``stack``: the open mappings with their indentation, the root's (0, so never popped)
    first. ``waiting``: a key of the innermost one whose own mapping starts at this key,
    which must then be deeper (a key left empty is a null: the parsers read it).
    """
    if waiting is not None:
        if indent <= stack[-1][0]:
            raise _Unusual
        nested: dict[str, Any] = {}
        stack[-1][1][waiting] = nested
        stack.append((indent, nested))
        return nested
    while indent < stack[-1][0]:
        stack.pop()
    if indent != stack[-1][0]:
        raise _Unusual
    return stack[-1][1]


def _no_constant(name: str) -> Any:
    raise _Unusual  # NaN and Infinity: JSON's extensions, strings to YAML


def _number(read: Callable[[str], Any]) -> Callable[[str], Any]:
    def number(text: str) -> Any:
        if len(text) > _MAX_NUMBER_CHARS:  # what the YAML path refuses to read
            raise _Unusual
        return read(text)

    return number


_JSON_DECODER = json.JSONDecoder(parse_int=_number(int), parse_float=_number(float), parse_constant=_no_constant)
# The scanner decode() calls (set by JSONDecoder.__init__, not in the typeshed stubs).
_JSON_SCAN: Callable[[str, int], tuple[Any, int]] = getattr(_JSON_DECODER, "scan_once")  # noqa: B009


def _event_data(
    text: str, max_depth: int, max_values: int, max_chars: int, *, source: bool
) -> tuple[Any, tuple[int, int]]:
    """The data of a one-document ``text`` straight from libyaml's events (no node tree), and its size.

    For the common case only: within the depth and value limits, no anchors, aliases,
    tags or merge keys, string keys without duplicates, numbers that fit, and a text no
    longer than ``max_chars`` (without aliases the values' characters never outnumber
    the text's: escapes, folding and indentation only shorten, so the expanded-character
    bound holds). Anything else raises ``_Unusual``, and the composer and builder read
    the text (to apply the rule, or to say what is wrong). Numbers carry their source
    text when ``source`` (user specs). The size is ``Loaded.expanded`` as ``_Builder``
    counts it: the values built (keys not among them) and the characters of every key
    and scalar.
    """
    if len(text) > max_chars:
        raise _Unusual
    get: Callable[[], Any] = _CParser(text).get_event
    get()  # the stream's start
    if type(get()) is not DocumentStartEvent:
        raise _Unusual
    stack: list[list[Any]] = []  # each open collection, and a mapping's key waiting for its value
    values = keys = chars = 0
    while True:
        event = get()
        kind = type(event)
        item: Any
        if kind is MappingEndEvent or kind is SequenceEndEvent:
            item = stack.pop()[0]
        elif kind is ScalarEvent or kind is MappingStartEvent or kind is SequenceStartEvent:
            values += 1
            if values > max_values or len(stack) >= max_depth or event.anchor is not None or event.tag is not None:
                raise _Unusual
            if kind is MappingStartEvent:
                stack.append([{}, None])
                continue
            if kind is SequenceStartEvent:
                stack.append([[], None])
                continue
            value = event.value
            chars += len(value)
            # Quoted and block scalars are strings; a plain one's tag is remembered by text.
            item = _plain_scalar(value, source) if event.implicit[0] else value
        else:  # an alias
            raise _Unusual
        if not stack:  # the root: the document and the stream end here
            if type(get()) is DocumentEndEvent and type(get()) is StreamEndEvent:
                return item, (values - keys, chars)
            raise _Unusual
        top = stack[-1]
        container = top[0]
        if type(container) is list:
            container.append(item)
        elif top[1] is None:  # a key: a string, and not one the mapping has already
            if type(item) is not str or item in container or kind is not ScalarEvent:
                raise _Unusual
            keys += 1
            top[1] = item
        else:
            container[top[1]] = item
            top[1] = None


def _plain_scalar(value: str, source: bool) -> Any:
    """The value of a plain scalar (YAML 1.2 core, see ``_Resolver``), as the builder makes it.

    Numbers carry their source text when ``source`` (user specs). A merge key or a number
    longer than any reader takes raises ``_Unusual``: the composer and builder read those.
    """
    tag = _resolved.get(value) or _RESOLVER.resolve(ScalarNode, value, _PLAIN)
    if tag == _STR:
        return value
    if tag == _INT and len(value) <= _MAX_NUMBER_CHARS:
        number = int(value, 0) if value[:2] in ("0o", "0x") else int(value, 10)
        return SourceInt(number, value) if source else number
    if tag == _NULL:
        return None
    if tag == _BOOL:
        return value.lower() == "true"
    if tag == _FLOAT:
        real = float(_SPECIAL_FLOAT_DOT.sub("", value))
        return SourceFloat(real, value) if source else real
    raise _Unusual  # a merge key, a number too long


_PLAIN = (True, False)  # a plain scalar's ``implicit``, as the parsers give it
_SPECIAL_FLOAT_DOT = re.compile(r"\.(?=(?:inf|Inf|INF|nan|NaN|NAN)$)")

# ---------------------------------------------------------------- the simplest specs, line by line
#
# Most specs are a block mapping of plain keys whose values are plain words, one-line
# flow lists of words or one-line flow mappings of words, and nested block mappings of
# the same, with comments and blank lines. :func:`_block_lines` reads exactly that form,
# a line at a time, without a parser's events; any other line (a block list, a quoted or
# multi-line scalar, a word with a space or a character outside the narrow alphabets
# below, an anchor, a key left empty) raises ``_Unusual`` and the text goes to the
# parsers. The words are resolved by the same YAML 1.2 core rules (``_plain_scalar``); the
# differential tests and the fuzzer compare the result with PyYAML's pure-Python parser.

# Printable ASCII and line feeds are all a text of this form holds.
_NOT_PRINTABLE_ASCII = re.compile("[^\n\x20-\x7e]")
# A block mapping entry: indentation, a key (no indicator first), ":", and the rest.
_ENTRY = re.compile(r"( *)([A-Za-z0-9_][A-Za-z0-9_./-]*):( .*)?")
# A plain word in block context: ASCII, no space, no indicator first ("-" only before a
# word character), no ":" last (it would make the word a key).
_BLOCK_WORD = re.compile(r"(?:[A-Za-z0-9_./+]|-(?=[A-Za-z0-9_./+=@-]))(?:[A-Za-z0-9_./+=@:-]*[A-Za-z0-9_./+=@-])?")
# A plain word inside a flow collection: the same without ":" at all.
_FLOW_WORD = re.compile(r"(?:[A-Za-z0-9_./+]|-(?=[A-Za-z0-9_./+=@-]))[A-Za-z0-9_./+=@-]*")
# A flow mapping's entry: a word, ":", at least one space, a word.
_FLOW_ENTRY = re.compile(r" *([A-Za-z0-9_./+][A-Za-z0-9_./+=@-]*): +(" + _FLOW_WORD.pattern + ") *")


def _block_lines(text: str, max_depth: int, max_values: int, max_chars: int) -> tuple[Any, tuple[int, int]]:
    """The data of a spec in the simplest block form (see above), read line by line, and its size.

    The size is ``Loaded.expanded`` as ``_event_data`` counts it. Numbers carry their
    source text. Anything outside the form raises ``_Unusual``.
    """
    if len(text) > max_chars or max_depth < 3 or not text.endswith("\n") or _NOT_PRINTABLE_ASCII.search(text):
        raise _Unusual  # other line breaks (CR, NEL, LS, PS), also in a comment, go to the parsers
    root: dict[str, Any] = {}
    stack: list[tuple[int, dict[str, Any]]] = [(0, root)]  # the open block mappings and their indentation
    waiting: str | None = None  # a key whose block mapping starts on the next line
    values = 1  # the root mapping (keys are not counted, as in Loaded.expanded)
    keys = chars = 0
    lines = text.split("\n")
    if len(lines) > max_values:
        raise _Unusual  # a spec is tens of lines: the work here stays bounded by the values'
    for line in lines:
        match = _ENTRY.fullmatch(line)
        if match is None:
            body = line.lstrip(" ")
            if not body or body[0] == "#":
                continue  # a blank line or a comment
            raise _Unusual
        indent, key, rest = len(match[1]), match[2], match[3] or ""
        if waiting is not None and len(stack) >= max_depth - 2:
            raise _Unusual  # deep: the parsers say
        mapping = _block_mapping(stack, waiting, indent)
        waiting = None
        if key in mapping or (_resolved.get(key) != _STR and _plain_scalar(key, False) is not key):
            raise _Unusual  # a duplicate, or a key that is not a string (true:, 1:)
        keys += 1
        chars += len(key)
        if "#" in rest:
            rest, _, _ = rest.partition("#")
            if rest[-1] != " ":
                raise _Unusual  # "#" inside a word
        value = rest.strip(" ")
        values += 1
        if not value:
            waiting = key
            continue
        first = value[0]
        if first == "[" and value[-1] == "]":
            inner = value[1:-1]
            words = inner.split(",") if inner.strip(" ") else []
            if values + keys + len(words) > max_values:
                raise _Unusual  # bounded before the words are read: the parsers say what is wrong
            items = []
            for spaced in words:
                word = spaced.strip(" ")
                if _FLOW_WORD.fullmatch(word) is None:
                    raise _Unusual
                chars += len(word)
                items.append(_plain_scalar(word, True))
            values += len(items)
            mapping[key] = items
        elif first == "{" and value[-1] == "}":
            inner = value[1:-1]
            entries = inner.split(",") if inner.strip(" ") else []
            if values + keys + 2 * len(entries) > max_values:
                raise _Unusual
            flow: dict[str, Any] = {}
            for entry in entries:
                pair = _FLOW_ENTRY.fullmatch(entry)
                if pair is None:
                    raise _Unusual
                name, word = pair[1], pair[2]
                if name in flow or _plain_scalar(name, False) is not name:
                    raise _Unusual
                chars += len(name) + len(word)
                flow[name] = _plain_scalar(word, True)
            values += len(flow)
            keys += len(flow)
            mapping[key] = flow
        elif _BLOCK_WORD.fullmatch(value) is not None:
            chars += len(value)
            mapping[key] = _plain_scalar(value, True)
        else:
            raise _Unusual
        if values + keys > max_values:  # what _event_data counts against the bound
            raise _Unusual
    if waiting is not None or not root:
        raise _Unusual
    return root, (values, chars)


def _all_nodes(composer: _Composer) -> list[Node]:
    nodes: list[Node] = []
    while composer.check_node():
        node = composer.get_node()
        if node is not None:
            nodes.append(node)
    return nodes


def load_stream(raw: bytes | str, file: str, *, max_bytes: int = MAX_BYTES, max_depth: int = MAX_DEPTH) -> list[Loaded]:
    """Every document of a YAML stream (``---`` separated), each with its node tree.

    For manifests from elsewhere (a ``kubectl kustomize`` output given to ``run``,
    ``import`` or ``doctor``): the alias, depth, size and tag limits hold across the whole
    stream, and every problem is located. Empty documents are skipped.
    """
    if isinstance(raw, bytes):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            line, col = _position(raw, e.start)
            given = f"byte 0x{raw[e.start]:02X}"
            raise SpecError([Problem(file, line, col, "yaml", "not valid UTF-8; save the file as UTF-8", given)]) from e
    else:
        text = raw
    if len(text.encode()) > max_bytes:
        raise SpecError([Problem(file, 1, 1, "spec", f"the file is larger than {max_bytes} bytes")])
    builder = _Builder(file)
    try:
        roots = _compose(text, max_depth, MAX_VALUES, _all_nodes)
        docs = [Loaded(file, builder.build(node), node) for node in roots]
    except (_LoadLimit, yaml.YAMLError) as e:
        raise SpecError([_parse_problem(e, file, text)]) from e
    if builder.problems:
        raise SpecError(sorted(builder.problems))
    return docs


def load_documents(raw: bytes | str, file: str, *, max_bytes: int = MAX_BYTES, max_depth: int = MAX_DEPTH) -> list[Any]:
    """The data of every document of a YAML stream (see :func:`load_stream`)."""
    return [doc.data for doc in load_stream(raw, file, max_bytes=max_bytes, max_depth=max_depth)]


def load_file(path: str | Path) -> Loaded:
    """Read and parse ``path`` (``-`` reads standard input, reported as ``<stdin>``)."""
    raw, file = read_input(path)
    return load_text(raw, file)
