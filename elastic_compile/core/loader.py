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
import operator
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final, TypeVar

import yaml
import yaml.reader
from yaml.composer import Composer
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.parser import Parser
from yaml.reader import Reader
from yaml.resolver import BaseResolver
from yaml.scanner import Scanner

from elastic_compile.core import kinds
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
# A stream of manifests (``kubectl kustomize`` output given to doctor, import or run) holds each
# document to the bounds above, and all of them together to these: 440 compiled PyTorchJobs
# (examples/cpu-ddp.yaml, 935 KB) are 39,000 values; without this, a stream of small alias
# bombs would multiply the bounds of one document by its number of documents.
MAX_STREAM_VALUES = 100_000
MAX_STREAM_EXPANDED_CHARS = 2 * MAX_EXPANDED_CHARS
# Documents in one stream (empty ones too): within the 1 MiB a stream may hold, a real object
# takes a hundred bytes at least; 100,000 empty mappings otherwise cost about 3 s of CPU to reach
# the value bound, each document being composed and built in Python.
MAX_STREAM_DOCUMENTS = 10_000
# An integer's characters, at most: Python refuses int() of more than 4300 digits, and no
# spec value needs 100. Every reader (the builder, libyaml's events, JSON) holds to it.
_MAX_NUMBER_CHARS = 100

_TAG = "tag:yaml.org,2002:"
_STR, _INT, _FLOAT, _BOOL, _NULL = (_TAG + t for t in ("str", "int", "float", "bool", "null"))
_MAP, _SEQ, _MERGE = _TAG + "map", _TAG + "seq", _TAG + "merge"
_ALLOWED_TAGS = {_STR, _INT, _FLOAT, _BOOL, _NULL, _MAP, _SEQ, _MERGE, "!"}
_KEY_TAGS = (_STR, "!")  # a mapping key must be a string

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
# the string: used only to explain errors ("quote it"), so a pattern that ``re`` compiles
# when an error first needs it (not at import: with _TOP_KIND below, 3 M instructions of every
# cold compile).
YAML11_SURPRISE = (
    r"^(?:y|Y|yes|Yes|YES|n|N|no|No|NO|on|On|ON|off|Off|OFF"
    r"|[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?"  # sexagesimal 1:30
    r"|[-+]?0[0-7_]+|[-+]?[0-9][0-9_]*_[0-9_]*|0b[01_]+)$"  # 0755, 1_000, 0b101
)


# Compiled by ``re`` when a non-ASCII scalar first needs it (most specs have none).
_SURROGATE = "[\ud800-\udfff]"


class PlainResolver(BaseResolver):
    """A node's tag from its kind and, for a plain scalar, its text alone: no path resolvers.

    So the composers' and serializers' calls to follow the path (``descend_resolver``,
    ``ascend_resolver``) do nothing, and a plain scalar's tag is looked up by its first
    character among the class's implicit resolvers. The loader's YAML 1.2 resolver and the
    emitter's (core/emit.py) are this one with their own tables.
    """

    def resolve(self, kind: type[Node], value: str | None, implicit: Any) -> str:
        if kind is ScalarNode:
            if implicit[0]:  # plain (quoted and block scalars are strings)
                for tag, regexp in self.yaml_implicit_resolvers.get((value or "")[:1], ()):
                    if regexp.match(value):
                        return str(tag)
            return _STR
        return _SEQ if kind is SequenceNode else _MAP

    # libyaml's composer and serializer call both for every node: builtins that take the
    # same arguments and do nothing, which cost no Python frame as a method would.
    descend_resolver = staticmethod(operator.is_)  # type: ignore[assignment]
    ascend_resolver = staticmethod(tuple)  # type: ignore[assignment]


class _Resolver(PlainResolver):
    """Implicit tags for plain scalars: YAML 1.2 core, see the module docstring."""


for _tag, _regexp, _first in (
    (_BOOL, _BOOL_RE, "tTfF"),
    (_NULL, _NULL_RE, "~nN\x00"),  # "\x00": PyYAML looks up the empty scalar under ""
    (_INT, _INT_RE, "-+0123456789"),
    (_FLOAT, _FLOAT_RE, "-+.0123456789"),
    (_MERGE, re.compile(r"^<<$"), "<"),
):
    _Resolver.add_implicit_resolver(_tag, _regexp, list(_first))
_Resolver.add_implicit_resolver(_NULL, _NULL_RE, [""])


_T = TypeVar("_T")


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


class _Bounded(Composer):
    """PyYAML's composer, checking every bound as it composes (its recursion has no nesting limit).

    It composes from the parser's events: PyYAML's own parser (:class:`_Composer`) or
    libyaml's (:class:`_CEventComposer`).
    """

    unchecked_depth = None  # every bound is checked while composing
    peek_event: Callable[[], Any]  # the parser's, beside it in the class (an annotation: nothing is shadowed)

    def __init__(self, max_depth: int, max_nodes: int, max_chars: int) -> None:
        Composer.__init__(self)
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

    def compose_document(self) -> Node | None:
        # The bounds hold for each document of a stream (the builder bounds the stream's total).
        self._nodes = self._values = self._chars = 0
        self._sizes = {}  # anchors do not outlive their document
        node: Node | None = super().compose_document()
        return node

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        self._depth += 1
        self._nodes += 1
        try:
            if self._nodes > self._max_nodes:
                # Checked while parsing: the pure-Python parser needs seconds for a dense
                # 1 MiB document, so stop long before it has built every node.
                event = self.peek_event()
                raise _LoadLimit(f"more than {self._max_nodes} values in the document", event.start_mark)
            if self._depth > self._max_depth:
                event = self.peek_event()
                raise _LoadLimit(f"nesting deeper than {self._max_depth} levels", event.start_mark)
            event = self.peek_event()
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


class _Composer(Reader, Scanner, Parser, _Bounded, _Resolver):
    """PyYAML's pure-Python parser under the bounded composer."""

    def __init__(
        self, stream: str, max_depth: int = MAX_DEPTH, max_nodes: int = MAX_VALUES, max_chars: int = MAX_EXPANDED_CHARS
    ) -> None:
        Reader.__init__(self, stream)
        Scanner.__init__(self)
        Parser.__init__(self)
        _Bounded.__init__(self, max_depth, max_nodes, max_chars)
        _Resolver.__init__(self)


try:  # libyaml, through PyYAML's CParser: the node tree composed in C, about 10x faster than in Python
    from yaml._yaml import CParser as _CParser
    from yaml._yaml import get_version as _libyaml_version

    # libyaml bounds nesting itself (1,000 levels) from 0.2.6 on, and its composer recurses in
    # C: an older one would crash on a deeply nested document before our bound is checked.
    LIBYAML = _libyaml_version() >= (0, 2, 6)
except ImportError:  # pragma: no cover - PyYAML built without libyaml (tests force this path)
    LIBYAML = False


class _Backend:
    """Whether to parse with libyaml (``pure_python()`` turns it off for tests and the fuzzer)."""

    libyaml = LIBYAML


if LIBYAML:

    class _CComposer(_CParser, _Resolver):
        """libyaml's parser and composer with our resolver: the node tree and its marks, built in C.

        A plain scalar's style is "" here, None from PyYAML's composer: both mean plain.

        It has no hooks for our bounds, so :func:`_measure` holds each tree to them once
        composed (libyaml's own nesting bound keeps the composing itself safe).
        """

        def __init__(self, stream: str, max_depth: int, max_nodes: int, max_chars: int) -> None:
            _CParser.__init__(self, stream)
            _Resolver.__init__(self)
            self._bounds = max_depth, max_nodes, max_chars
            # Without an anchor nothing expands, and (the text being short: see _compose) no
            # bound but the nesting can be passed, which the builder checks as it goes.
            self.measured = "&" in stream or len(stream) > max_chars
            self.unchecked_depth = None if self.measured else max_depth

        def get_node(self) -> Node | None:
            node = super().get_node()
            return _measure(node, *self._bounds) if self.measured else node

        def get_single_node(self) -> Node | None:
            node = super().get_single_node()
            return _measure(node, *self._bounds) if self.measured else node

    class _CEventComposer(_Bounded, _CParser, _Resolver):
        """libyaml's parser (its events, made in C) under the bounded composer.

        For texts too long to be composed whole in C before a bound is checked: PyYAML's
        pure-Python scanner and parser cost about ten times as much a value (a hostile stream
        of 100,000 values took 20 s), and the bounds still stop the composing where they are passed.
        """

        def __init__(self, stream: str, max_depth: int, max_nodes: int, max_chars: int) -> None:
            _CParser.__init__(self, stream)
            _Bounded.__init__(self, max_depth, max_nodes, max_chars)
            _Resolver.__init__(self)


# Where libyaml and PyYAML read the same text differently, PyYAML decides (its messages are
# the ones users and the error tests know), so texts with these characters skip libyaml:
# a tab inside a plain scalar ("a\tb") is text to libyaml, as in YAML 1.2, and an error to
# PyYAML; libyaml takes "?" inside a plain scalar in a flow collection ([what?]) and ends a
# tag at a flow comma ([!!str, x]), PyYAML rejects both; and libyaml counts a byte-order
# mark after the first character as a column, PyYAML does not. Control characters too:
# PyYAML rejects them before parsing, libyaml only when it reaches them. And a text that
# does not end with a line break: libyaml places the end of the stream on a line after the
# last one, so a value left empty there (`a:`) would be located on a line the file does not
# have. The differential tests and the fuzzer's oracle compare both parsers on the rest.
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


class _Beyond(Exception):
    """A tree libyaml composed is beyond a bound: PyYAML's composer finds where (see :func:`_compose`)."""


def _measure(root: Node | None, max_depth: int, max_values: int, max_chars: int) -> Node | None:
    """``root``, a tree libyaml composed, held to the bounds ``_Composer`` checks while composing.

    ``_Beyond`` when it is beyond one, counted as the composer counts: every node in
    document order, keys included, an alias adding again what its anchor expanded to, the
    characters of every scalar, and the nesting as written. So libyaml's path accepts what
    PyYAML's does.
    """
    if root is None:
        return None
    sizes: dict[int, tuple[int, int]] = {}  # id(node) -> its expanded (values, characters)
    values = chars = 0

    def walk(node: Node, depth: int) -> None:
        nonlocal values, chars
        if depth > max_depth:
            raise _Beyond
        key = id(node)
        if key in sizes:  # an alias (or one inside its own anchor, which adds nothing yet)
            more_values, more_chars = sizes[key]
            values += more_values
            chars += more_chars
        else:
            sizes[key] = (0, 0)
            before = values, chars
            if isinstance(node, ScalarNode):
                chars += len(node.value)
            elif isinstance(node, SequenceNode):
                for item in node.value:
                    walk(item, depth + 1)
            else:
                for pair in node.value:
                    walk(pair[0], depth + 1)
                    walk(pair[1], depth + 1)
            values += 1
            sizes[key] = (values - before[0], chars - before[1])
        if values > max_values or chars > max_chars:
            raise _Beyond

    walk(root, 1)
    return root


def _compose(
    text: str, max_depth: int, max_nodes: int, read: Callable[[Any], _T], max_chars: int = MAX_EXPANDED_CHARS
) -> _T:
    """``read(composer)`` with libyaml's parser, or PyYAML's where libyaml finds an error or a bound is passed.

    libyaml and PyYAML accept the same YAML, but word their errors differently and report
    some at other places; our messages and the error tests are PyYAML's. So a document
    libyaml rejects is composed again by PyYAML, which raises its own error for it (or
    accepts it: it also reads the \\u escapes of surrogate pairs that JSON writes). So is
    one that libyaml composed whole beyond a bound: PyYAML's composer stops where the bound
    is passed and says where, which a tree composed in C cannot show (an alias is the very
    node it names there).

    libyaml composes a whole text before any bound is checked, so it composes only texts
    too short to hold more than ``max_nodes`` nodes: each takes a character at least, or
    two share one indicator (``a:``, ``[:]``). A longer one is composed by PyYAML's
    composer from libyaml's events, which stops at a bound as the pure-Python one does.
    """
    if _libyaml_reads(text):
        composer = _CComposer if 2 * len(text) < max_nodes else _CEventComposer
        try:
            return read(composer(text, max_depth, max_nodes, max_chars))
        except (yaml.YAMLError, _Beyond, UnicodeEncodeError):  # a lone surrogate: libyaml takes UTF-8 only
            pass
    return read(_Composer(text, max_depth, max_nodes, max_chars))


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


class Loaded:
    """A loaded YAML document: plain Python data plus the node tree it came from.

    A spec merged from its bases (:mod:`elastic_compile.core.extends`) has one node tree
    whose nodes come from several files: ``origins`` names the file of each node placed by
    the merge (keyed by ``id``, holding the node so that the id stays its own), and every
    other node is in the file of its parent. ``merged`` holds the ids of the nodes the merge
    built from values of more than one file, and ``chain`` the files, the spec first.

    The node tree locates problems (the line and column of a field path).
    """

    # A plain class (compared by identity), not a dataclass: the decorator compiles each
    # generated method from text, about 3.5 M instructions at every start. Final: set once.
    __slots__ = ("chain", "data", "expanded", "file", "merged", "origins", "tree")

    def __init__(
        self,
        file: str,
        data: Any,
        tree: Node,
        *,
        origins: Mapping[int, tuple[Node, str]] | None = None,
        merged: frozenset[int] = frozenset(),
        chain: tuple[str, ...] = (),
        expanded: tuple[int, int] = (0, 0),
    ) -> None:
        self.file: Final = file
        self.data: Final = data
        self.tree: Final = tree
        self.origins: Final[Mapping[int, tuple[Node, str]]] = origins if origins is not None else {}
        self.merged: Final = merged
        self.chain: Final = chain
        #: The values and characters the document expands to (aliases counted again), with
        #: those of its bases once merged: what :data:`MAX_VALUES` and
        #: :data:`MAX_EXPANDED_CHARS` bound (see :func:`expansion_problem`).
        self.expanded: Final = expanded

    @property
    def root(self) -> Node:
        """The document's root node."""
        return self.tree

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
    """Turns composed nodes into Python values, collecting every problem.

    ``max_depth``: for a tree libyaml composed that :func:`_measure` did not hold to the
    bounds (one without anchors, so none but the nesting can be passed: see
    :func:`_compose`), the nesting it may reach; ``_Beyond`` past it, and wherever a value
    is not built where it stands (a merge, a duplicate or refused key), which PyYAML's
    composer then reads.
    """

    def __init__(
        self,
        file: str,
        max_values: int = MAX_VALUES,
        max_chars: int = MAX_EXPANDED_CHARS,
        *,
        source: bool = True,
        max_depth: int | None = None,
    ) -> None:
        self.file = file
        self.source = source  # numbers keep the text they were written as (SourceInt, SourceFloat)
        self.max_values = max_values
        self.max_chars = max_chars
        self.max_depth = max_depth
        self.problems: list[Problem] = []
        self.count = 0
        self.chars = 0  # characters of every scalar and key built so far, aliases included
        # Those of the documents of a stream before this one (see start_document).
        self.stream_count = self.stream_chars = 0
        # What this document may reach: its own bound, or less where the stream's total is near.
        self.value_limit, self.char_limit = max_values, max_chars
        self.active: set[int] = set()  # collections being built, to catch recursive aliases

    def _problem(self, node: Node, message: str, given: str | None = None) -> None:
        mark = node.start_mark
        self.problems.append(Problem(self.file, mark.line + 1, mark.column + 1, "yaml", message, given))

    def start_document(self) -> None:
        """Bound the next document of a stream on its own, and the stream by its total."""
        self.stream_count += self.count
        self.stream_chars += self.chars
        self.count = self.chars = 0
        self.value_limit = min(self.max_values, MAX_STREAM_VALUES - self.stream_count)
        self.char_limit = min(self.max_chars, MAX_STREAM_EXPANDED_CHARS - self.stream_chars)

    def build(self, node: Node, depth: int = 1) -> Any:
        """The value of ``node``, at ``depth`` in the document (the root's is 1)."""
        kind = type(node)
        if kind is not ScalarNode and id(node) in self.active:
            # &a [*a]: the alias points at a collection that contains it. PyYAML composes
            # this happily; building it would never end.
            self._problem(node, "a recursive alias (an anchor used inside itself) is not allowed")
            return None
        self.count += 1
        if self.count > self.value_limit:  # one comparison per value: the stream's total is in the limit
            if self.count > self.max_values:
                raise _LoadLimit(_too_many_values(self.max_values), node)
            raise _LoadLimit(f"the stream expands to more than {MAX_STREAM_VALUES} values", node)
        if self.max_depth is not None and depth > self.max_depth:
            raise _Beyond
        tag = node.tag
        if tag not in _ALLOWED_TAGS:
            tag = "!!" + tag[len(_TAG) :] if tag.startswith(_TAG) else tag
            self._problem(node, "YAML tags other than the standard ones are not allowed", tag)
            return None
        if kind is ScalarNode:
            text = node.value
            self._count_chars(node, text)
            if tag == _STR and text.isascii():  # most values: nothing to decode or convert
                return text
            return self._scalar(node)  # type: ignore[arg-type]
        self.active.add(id(node))
        try:
            if kind is SequenceNode:
                return [self.build(item, depth + 1) for item in node.value]
            return self._mapping(node, depth)  # type: ignore[arg-type]
        finally:
            self.active.discard(id(node))

    def _count_chars(self, node: Node, text: str) -> None:
        self.chars += len(text)
        if self.chars > self.char_limit:
            if self.chars > self.max_chars:
                raise _LoadLimit(_too_many_chars(self.max_chars), node)
            raise _LoadLimit(f"the stream expands to more than {MAX_STREAM_EXPANDED_CHARS} characters", node)

    def _scalar(self, node: ScalarNode) -> Any:
        """A scalar's value, its characters counted already (:meth:`build`)."""
        text, tag = node.value, node.tag
        if not text.isascii() and re.search(_SURROGATE, text):
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
        if tag == _INT and _INT_TEXT.match(text):
            number = int(text, 0) if text[:2] in ("0o", "0x") else int(text, 10)
            return SourceInt(number, text) if self.source else number
        if tag == _FLOAT and _FLOAT_RE.match(text):
            # Python's float() spells YAML's .inf/.nan without the dot
            real = float(_SPECIAL_FLOAT_DOT.sub("", text))
            return SourceFloat(real, text) if self.source else real
        self._problem(node, f"not a valid {tag.rsplit(':', 1)[-1]} value", text)
        return None

    def _mapping(self, node: MappingNode, depth: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        first: dict[str, Node] = {}
        merges = False
        for key, value in node.value:
            name = key.value
            if type(key) is ScalarNode and key.tag in _KEY_TAGS and name not in first:  # nearly every key
                first[name] = key
                self._count_chars(key, name)
                out[name] = self.build(value, depth + 1)
                continue
            skipped = key.tag == _MERGE or not isinstance(key, ScalarNode) or key.tag not in (_STR, "!")
            if self.max_depth is not None and (skipped or key.value in first):
                # A value this walk does not build where it stands (merged, or under a key
                # that is refused) would go unchecked for nesting: the composer checks it.
                raise _Beyond
            if key.tag == _MERGE:
                merges = True
                continue
            if not isinstance(key, ScalarNode) or key.tag not in (_STR, "!"):
                given = key.value if isinstance(key, ScalarNode) else None
                self._problem(key, 'mapping keys must be strings; quote the key, e.g. "1"', given)
                continue
            if key.value in first:
                line = first[key.value].start_mark.line + 1
                self._problem(key, f"duplicate key (first defined at line {line})", key.value)
        if not merges:
            return out
        for key, value in _pairs(node):
            if isinstance(key, ScalarNode) and key.value not in out and key.tag in (_STR, "!"):
                self._count_chars(key, key.value)
                out[key.value] = self.build(value, depth + 1)
        for key, value in node.value:
            if key.tag == _MERGE and not _mergeable(value):
                self._problem(value, "a merge key (<<) needs a mapping or a list of mappings")
        return out


# What an !!int may hold (an explicit tag may name any text), and the dot Python's float() does without.
_INT_TEXT = re.compile(r"^[-+]?[0-9]+$|^0o[0-7]+$|^0x[0-9a-fA-F]+$")
_SPECIAL_FLOAT_DOT = re.compile(r"\.(?=(?:inf|Inf|INF|nan|NaN|NAN)$)")


def _mergeable(node: Node) -> bool:
    items = node.value if isinstance(node, SequenceNode) else [node]
    return all(isinstance(item, MappingNode) for item in items)


def _position(text: bytes, offset: int) -> tuple[int, int]:
    before = text[:offset]
    line = before.count(b"\n") + 1
    return line, offset - (before.rfind(b"\n") + 1) + 1


# A document's top-level kind, as kubectl and kustomize print it (block style, column 1): a
# pattern compiled when an error needs it, as YAML11_SURPRISE.
_TOP_KIND = r"(?m)^kind:[ \t]*([\"']?)([A-Za-z][A-Za-z0-9]{0,62})\1[ \t]*$"


def _stream_hint(text: str, file: str) -> str:
    """For a manifest stream (``kubectl kustomize`` output) given where one spec goes: what reads it."""
    readable = kinds.importable()
    kind = next((k for _q, k in re.findall(_TOP_KIND, text) if k in readable), None)
    if kind is None:
        return ""
    source = "-" if file == "<stdin>" else file
    return f"; a stream of manifests with a {kind}: write a spec from it with: elastic-compile import {source}"


def _indentation_message(e: yaml.MarkedYAMLError, text: str) -> str | None:
    """PyYAML's words for a line indented wrong, said plainly; None for other errors.

    ``expected <block end>, but found ...`` is a line that lines up with no key or list item
    of the block it follows; ``mapping values are not allowed here`` on a ``key:`` indented
    deeper than the line above is a key read as more of that line's value.
    """
    mark = e.problem_mark
    if mark is None:
        return None
    problem = e.problem or ""
    if problem.startswith("expected <block end>") and e.context_mark is not None:
        block = "list" if "collection" in (e.context or "") else "mapping"
        return (
            f"bad indentation: this line starts in column {mark.column + 1}, which lines up with no "
            f"{'item' if block == 'list' else 'key'} of the {block} that starts at line {e.context_mark.line + 1} "
            f"(column {e.context_mark.column + 1}); indent it as the entries it belongs with"
        )
    if problem == "mapping values are not allowed here":
        lines = text.splitlines()
        line = lines[mark.line] if mark.line < len(lines) else ""
        above = next((lines[i] for i in range(mark.line - 1, -1, -1) if lines[i].strip()), None)
        indent = len(line) - len(line.lstrip(" "))
        if above is not None and ": " not in line[: mark.column] and indent > len(above) - len(above.lstrip(" ")):
            return (
                "bad indentation: this line is indented deeper than the line above, so YAML reads it as more of "
                "that line's value and finds a ':' in it; indent it as the keys it belongs with"
            )
        return (
            "a ': ' inside a value that is not quoted; quote the value, or indent the line as the keys it belongs with"
        )
    return None


#: What closes each flow collection, and what the spec calls it.
_FLOW = {"[": ("]", "list"), "{": ("}", "mapping")}
_FLOW_PROBLEM = r"^expected (?:',' or '[\]}]'|the node content), but (?:got|found) (.+)$"  # an error's only


def _open_flow(text: str, mark: yaml.Mark) -> tuple[str, yaml.Mark] | None:
    """The innermost ``[`` or ``{`` still open where PyYAML stopped (at ``mark``), and its mark.

    PyYAML's own scanner reads the tokens up to there (linear in the text, which the loader has
    already bounded): flow starts and ends, nothing constructed.
    """
    stack: list[tuple[str, yaml.Mark]] = []
    try:
        for token in yaml.scan(text, Loader=yaml.SafeLoader):
            if token.start_mark.index >= mark.index:
                break
            if isinstance(token, (yaml.FlowSequenceStartToken, yaml.FlowMappingStartToken)):
                stack.append(("[" if isinstance(token, yaml.FlowSequenceStartToken) else "{", token.start_mark))
            elif isinstance(token, (yaml.FlowSequenceEndToken, yaml.FlowMappingEndToken)) and stack:
                stack.pop()
    except yaml.YAMLError:
        pass  # the error being explained, or one before it: the brackets seen so far are what counts
    return stack[-1] if stack else None


def _flow_message(e: yaml.MarkedYAMLError, text: str) -> tuple[str, yaml.Mark] | None:
    """PyYAML's words for a flow collection (``[a, b]``, ``{k: v}``) gone wrong, said plainly, and where
    to point: the bracket that is never closed, or the place in its line; None for other errors."""
    mark = e.problem_mark
    found = re.match(_FLOW_PROBLEM, e.problem or "")
    if mark is None or found is None:
        return None
    opened = _open_flow(text, mark)
    if opened is None:
        return None
    bracket, start = opened
    close, what = _FLOW[bracket]
    got = {"'<scalar>'": "a value"}.get(found.group(1), found.group(1))  # PyYAML's token name, in words
    if got == "'<stream end>'" or mark.line > start.line:
        upto = (
            "the end of the file"
            if got == "'<stream end>'"
            else f"line {mark.line + 1} ({got} at column {mark.column + 1})"
        )
        return (
            f"this '{bracket}' starts a {what} that is never closed: YAML reads on to {upto}, where it gives up; "
            f"end the {what} with '{close}' on the line it belongs to, or write it in block style, one entry a line",
            start,
        )
    if (e.problem or "").startswith("expected the node content"):
        return (
            f"an empty entry in the {what} that '{bracket}' starts at column {start.column + 1} (found {got}); "
            "remove the extra comma, or write the entry",
            mark,
        )
    return (
        f"expected ',' or '{close}' in the {what} that '{bracket}' starts at column {start.column + 1}, found {got}; "
        f"separate the entries with ', ', end the {what} with '{close}', and quote an entry holding , [ ] {{ }}",
        mark,
    )


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
        elif (plain := _indentation_message(e, text)) is not None:
            message = plain
        elif (flow := _flow_message(e, text)) is not None:
            message, at = flow
            line, col = at.line + 1, at.column + 1
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
    source: bool = True,
) -> Loaded:
    """Parse one YAML document from ``raw``; raise ``SpecError`` with every problem found.

    The limits default to those for user specs; the compiler raises them when it parses
    back what a template rendered (a pod template nests a few levels below the spec), and
    asks for plain ``int`` and ``float`` there (``source=False``): source text is for what
    users write.
    """
    text = _decoded(raw, file, max_bytes)

    def read(composer: Any) -> tuple[Node | None, _Builder, Any]:
        root: Node | None = composer.get_single_node()
        builder = _Builder(file, max_values, max_chars, source=source, max_depth=composer.unchecked_depth)
        return root, builder, None if root is None else builder.build(root)

    try:
        root, builder, data = _compose(text, max_depth, max_values, read, max_chars)
    except (_LoadLimit, yaml.YAMLError) as e:
        raise SpecError([_parse_problem(e, file, text)]) from e
    if root is None:
        raise SpecError([Problem(file, 1, 1, "spec", "the file is empty; a spec needs at least name and image")])
    if builder.problems:
        raise SpecError(sorted(builder.problems))
    return Loaded(file, data, root, expanded=(builder.count, builder.chars))


def _decoded(raw: bytes | str, file: str, max_bytes: int, what: str = "spec") -> str:
    """``raw`` as text, at most ``max_bytes`` of UTF-8 (``SpecError`` at the field path ``what`` otherwise)."""
    if len(raw.encode() if isinstance(raw, str) else raw) > max_bytes:
        raise SpecError([Problem(file, 1, 1, "spec", f"the file is larger than {max_bytes} bytes")])
    if isinstance(raw, str):
        return raw
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line, col = _position(raw, e.start)
        given = f"byte 0x{raw[e.start]:02X}"
        raise SpecError([Problem(file, line, col, what, "not valid UTF-8; save the file as UTF-8", given)]) from e


def load_stream(raw: bytes | str, file: str, *, max_bytes: int = MAX_BYTES, max_depth: int = MAX_DEPTH) -> list[Loaded]:
    """Every document of a YAML stream (``---`` separated), each with its node tree.

    For manifests from elsewhere (a ``kubectl kustomize`` output given to ``run``,
    ``import`` or ``doctor``): the alias, depth and tag limits hold for each document, the
    stream's size, its documents and its total values and characters (:data:`MAX_STREAM_DOCUMENTS`,
    :data:`MAX_STREAM_VALUES`, :data:`MAX_STREAM_EXPANDED_CHARS`) for the whole stream; every problem is located.
    Empty documents are skipped.
    """
    text = _decoded(raw, file, max_bytes, "yaml")

    def read(composer: Any) -> tuple[list[Loaded], _Builder]:
        # One for the stream: each document is bounded alone, the stream by its total.
        builder = _Builder(file, max_depth=composer.unchecked_depth)
        docs = []
        count = 0
        while composer.check_node():
            count += 1
            if count > MAX_STREAM_DOCUMENTS:
                raise _LoadLimit(f"the stream holds more than {MAX_STREAM_DOCUMENTS} documents", composer.peek_event())
            node = composer.get_node()
            if node is not None:
                builder.start_document()
                docs.append(Loaded(file, builder.build(node), node))
        return docs, builder

    try:
        docs, builder = _compose(text, max_depth, MAX_VALUES, read)
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
