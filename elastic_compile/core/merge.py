"""Merge a YAML document onto its base, data and node tree at once (the rules of ``extends:``).

The rules (docs/many-jobs.md has the table as users read it):

* mappings merge key by key, deeply; where both files set a key, the extending file's
  value wins;
* ``key: null`` in the extending file removes the key (an inherited value, or nothing);
* a list merges by key when the caller's :data:`Rules` name its keys at that path (the spec
  names ``env`` and Kubernetes' strategic-merge keys of ``pod_template.spec``): an entry
  whose key matches an inherited entry merges into it (or replaces it, or keeps only the
  keys it writes: :class:`ListRule`), ``$patch: delete`` in an entry removes the inherited
  one, ``{$patch: replace}`` as an element makes the list replace the inherited one, and
  other entries are appended in their order; every other list is replaced;
* ``$patch: replace`` in a mapping makes it replace the inherited mapping, and so does the
  rule :data:`WHOLE` at its path (a value that is one thing, however it is written).

The directives and nulls are consumed: they never reach the merged document. The merge
never changes its inputs (a base shared by 500 specs is loaded once), and builds new nodes
only for the mappings and lists both files write, so every other value keeps the node,
and so the file, line and column, it was written at (:class:`~elastic_compile.core.loader.Loaded`).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, Final, Literal, NamedTuple

from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from elastic_compile.core.errors import Problem
from elastic_compile.core.loader import Loaded, mapping_pairs

#: The strategic-merge directive key, as Kubernetes and kustomize spell it.
PATCH: Final = "$patch"
#: A list element in a rule path ("pod_template", "spec", "containers", ITEM, "env").
ITEM: Final = "[]"

_MAP: Final = "tag:yaml.org,2002:map"
_SEQ: Final = "tag:yaml.org,2002:seq"
_STR: Final = "tag:yaml.org,2002:str"

Path = tuple[str | int, ...]


class ListRule(NamedTuple):
    """How a list at one path merges: by the values of ``keys`` in its entries.

    ``entry`` says what an entry does to the inherited entry with the same keys: ``merge``
    it deeply, ``replace`` it whole, or ``retain`` (merge, then keep only the keys the new
    entry writes: Kubernetes' ``retainKeys``, so a volume that changes its source loses the
    old one). With ``required``, an entry without the keys matches nothing and is appended
    (Kubernetes' merge keys, which the schema requires); without, a missing key counts as
    null (tolerations). ``map_value``: a mapping
    here is this list written as ``KEY: value`` pairs (``env``'s map form), so the two forms
    merge with each other.
    """

    keys: tuple[str, ...]
    entry: Literal["merge", "replace", "retain"] = "merge"
    required: bool = True
    map_value: str | None = None


#: The rule of a value that is one thing however it is written (``accelerator``: a device and its
#: partition): the extending file's value replaces the inherited one whole, a mapping too.
WHOLE: Final = ListRule(())

#: The rule for a path (mapping keys and :data:`ITEM`), or None: the list is replaced.
Rules = Callable[[tuple[str, ...]], "ListRule | None"]


def _no_rules(path: tuple[str, ...]) -> ListRule | None:
    return None


class _Value(NamedTuple):
    """One side of a merge: the data, its node, and the file the node is in."""

    data: Any
    node: Node
    file: str


class _Where(NamedTuple):
    """Where a merge is: the rule path (list items as :data:`ITEM`) and the path in the extending file."""

    rule: tuple[str, ...]
    at: Path

    def key(self, key: str) -> _Where:
        return _Where((*self.rule, key), (*self.at, key))

    def item(self, index: int) -> _Where:
        return _Where((*self.rule, ITEM), (*self.at, index))


class _Merger:
    """One merge of ``over`` onto ``base``; collects the problems of ``over``'s directives."""

    def __init__(self, base: Loaded | None, over: Loaded, rules: Rules) -> None:
        self.over, self.rules = over, rules
        self.origins: dict[int, tuple[Node, str]] = dict(base.origins) if base is not None else {}
        self.merged: set[int] = set(base.merged) if base is not None else set()
        self.problems: list[Problem] = []

    # ------------------------------------------------------------------ bookkeeping

    def _file(self, node: Node, parent: str) -> str:
        """The file of a base node: its own origin, else its parent's file."""
        origin = self.origins.get(id(node))
        return origin[1] if origin is not None else parent

    def _place(self, node: Node, file: str) -> Node:
        self.origins[id(node)] = (node, file)  # the node too, so that its id is never reused
        return node

    def _problem(self, at: Path, message: str) -> None:
        self.problems.append(self.over.problem(at, message))

    def _over(self, data: Any, node: Node) -> _Value:
        return _Value(data, node, self.over.file)

    # ------------------------------------------------------------------ directives

    def _map_directive(self, value: Any, at: Path) -> bool:
        """True for ``$patch: replace`` in a mapping; any other value there is reported."""
        if value == "replace":
            return True
        self._problem(at, "expected replace here ($patch: delete removes an entry of a list merged by key)")
        return False

    def _list_directive(self, item: Any, at: Path) -> str | None:
        """``delete`` or ``replace`` when ``item`` is a list entry carrying that directive (a bad one is reported)."""
        if not isinstance(item, dict) or PATCH not in item:
            return None
        value = item[PATCH]
        if value == "delete" or (value == "replace" and len(item) == 1):
            return str(value)
        self._problem(
            (*at, PATCH), "expected delete (in an entry, beside its keys) or replace (alone: {$patch: replace})"
        )
        return "invalid"

    # ------------------------------------------------------------------ the extending file alone

    def strip(self, over: _Value, where: _Where) -> tuple[Any, Node]:
        """``over`` with its nulls and directives consumed (nothing inherited here)."""
        data, node = over.data, over.node
        if isinstance(data, dict) and isinstance(node, MappingNode):
            pairs = mapping_pairs(node)
            out: dict[str, Any] = {}
            kept: list[tuple[Node, Node]] = []
            for key, value in data.items():
                if value is None or (key == PATCH and self._map_directive(value, (*where.at, key))):
                    continue
                key_node, value_node = pairs[key]
                out[key], new_node = self.strip(self._over(value, value_node), where.key(key))
                kept.append((key_node, new_node))
            if len(out) == len(data) and all(out[k] is data[k] for k in out):
                return data, node
            return out, MappingNode(_MAP, kept, node.start_mark, node.end_mark, node.flow_style)
        if isinstance(data, list) and isinstance(node, SequenceNode):
            rule = self.rules(where.rule)
            keyed = rule is not None and rule is not WHOLE
            items: list[Any] = []
            nodes: list[Node] = []
            for index, (item, item_node) in enumerate(zip(data, node.value, strict=True)):
                directive = self._list_directive(item, (*where.at, index)) if keyed else None
                if directive in ("delete", "replace"):
                    continue  # nothing inherited to delete or replace
                if directive is not None:
                    item = {k: v for k, v in item.items() if k != PATCH}  # noqa: PLW2901 - reported, consumed
                new, new_node = self.strip(self._over(item, item_node), where.item(index))
                items.append(new)
                nodes.append(new_node)
            if len(items) == len(data) and all(a is b for a, b in zip(items, data, strict=True)):
                return data, node
            return items, SequenceNode(_SEQ, nodes, node.start_mark, node.end_mark, node.flow_style)
        return data, node

    # ------------------------------------------------------------------ both files

    def value(self, base: _Value, over: _Value, where: _Where) -> tuple[Any, Node]:
        """``over`` merged onto ``base``."""
        rule = self.rules(where.rule)
        if rule is WHOLE:
            return self.strip(over, where)
        if isinstance(over.data, dict) and isinstance(over.node, MappingNode):
            if over.data.get(PATCH) == "replace":
                return self.strip(over, where)
            if isinstance(base.data, dict) and isinstance(base.node, MappingNode):
                return self.mapping(base, over, where)
        if rule is not None:
            if rule.map_value is not None:
                base = self._as_list(rule, base, deleting=False)
                over = self._as_list(rule, over, deleting=True)
            if isinstance(base.data, list) and isinstance(over.data, list):
                return self.sequence(rule, base, over, where)
        return self.strip(over, where)

    def _as_list(self, rule: ListRule, value: _Value, *, deleting: bool) -> _Value:
        """A mapping in the map form of a keyed list (``env: {NAME: value}``) as that list.

        Each entry's nodes are the ones written: ``name`` is the key node, ``value`` the
        value node, so errors and ``--explain`` still point at the line. In the extending
        file (``deleting``), ``NAME: null`` becomes a ``$patch: delete`` entry.
        """
        if not (isinstance(value.data, dict) and isinstance(value.node, MappingNode) and rule.map_value):
            return value
        items: list[Any] = []
        nodes: list[Node] = []
        for key, (key_node, value_node) in mapping_pairs(value.node).items():
            if key not in value.data:
                continue
            field, text = (
                (PATCH, "delete") if value.data[key] is None and deleting else (rule.map_value, value.data[key])
            )
            items.append({rule.keys[0]: key, field: text})
            label = ScalarNode(_STR, rule.keys[0], key_node.start_mark, key_node.end_mark)
            field_node = ScalarNode(_STR, field, value_node.start_mark, value_node.end_mark)
            pairs: list[tuple[Node, Node]] = [(label, key_node), (field_node, value_node)]
            entry = MappingNode(_MAP, pairs, key_node.start_mark, value_node.end_mark)
            nodes.append(self._place(entry, self._file(value_node, value.file)))
        return _Value(items, SequenceNode(_SEQ, nodes, value.node.start_mark, value.node.end_mark), value.file)

    def mapping(self, base: _Value, over: _Value, where: _Where, only: set[str] | None = None) -> tuple[Any, Node]:
        """Two mappings merged key by key; ``only``: keep just these keys (``retain``)."""
        if not (isinstance(base.node, MappingNode) and isinstance(over.node, MappingNode)):
            raise TypeError("a mapping without its node")  # pragma: no cover - the loader builds them together
        base_pairs, over_pairs = mapping_pairs(base.node), mapping_pairs(over.node)
        out: dict[str, Any] = {}
        pairs: list[tuple[Node, Node]] = []
        for key, value in base.data.items():
            if only is not None and key not in only:
                continue
            key_node, value_node = base_pairs[key]
            inherited = _Value(value, value_node, self._file(value_node, base.file))
            if key not in over.data:
                out[key] = value
                pairs.append((key_node, self._place(value_node, inherited.file)))
            elif over.data[key] is not None:
                over_key, over_value = over_pairs[key]
                out[key], new_node = self.value(inherited, self._over(over.data[key], over_value), where.key(key))
                pairs.append((over_key, self._place(new_node, self.over.file)))
        for key, value in over.data.items():
            if key in base.data or value is None or (key == PATCH and self._map_directive(value, (*where.at, key))):
                continue
            over_key, over_value = over_pairs[key]
            out[key], new_node = self.strip(self._over(value, over_value), where.key(key))
            pairs.append((over_key, self._place(new_node, self.over.file)))
        node = MappingNode(_MAP, pairs, over.node.start_mark, over.node.end_mark, over.node.flow_style)
        self.merged.add(id(node))
        return out, node

    def sequence(self, rule: ListRule, base: _Value, over: _Value, where: _Where) -> tuple[Any, Node]:
        """Two lists merged by ``rule``'s keys."""
        if not (isinstance(base.node, SequenceNode) and isinstance(over.node, SequenceNode)):
            raise TypeError("a list without its node")  # pragma: no cover - the loader builds them together
        directives = [self._list_directive(item, (*where.at, i)) for i, item in enumerate(over.data)]
        if "replace" in directives:
            return self.strip(over, where)
        entries: list[_Value | None] = []
        index: dict[Hashable, int] = {}
        for item, item_node in zip(base.data, base.node.value, strict=True):
            key = _identity(rule, item)
            if key is not None:
                index.setdefault(key, len(entries))
            entries.append(_Value(item, item_node, self._file(item_node, base.file)))
        matched: set[Hashable] = set()
        for i, (item, item_node) in enumerate(zip(over.data, over.node.value, strict=True)):
            key = _identity(rule, item)  # None: appended (the schema reports a key it requires)
            if directives[i] is not None:
                item = {k: v for k, v in item.items() if k != PATCH}  # noqa: PLW2901 - the directive is consumed
            position = index.get(key) if key is not None and key not in matched else None
            inherited = entries[position] if position is not None else None
            if position is not None:
                matched.add(key)
            if directives[i] == "delete":
                if position is not None:
                    entries[position] = None
                continue
            if inherited is not None and position is not None:
                data, node = self._entry(rule, inherited, self._over(item, item_node), where.item(i))
                entries[position] = self._over(data, node)
                continue
            data, node = self.strip(self._over(item, item_node), where.item(i))
            entries.append(self._over(data, node))
        kept = [e for e in entries if e is not None]
        nodes = [self._place(e.node, e.file) for e in kept]
        node = SequenceNode(_SEQ, nodes, over.node.start_mark, over.node.end_mark, over.node.flow_style)
        self.merged.add(id(node))
        return [e.data for e in kept], node

    def _entry(self, rule: ListRule, inherited: _Value, item: _Value, where: _Where) -> tuple[Any, Node]:
        """An entry of a keyed list onto the inherited entry with the same keys."""
        mappings = isinstance(inherited.node, MappingNode) and isinstance(item.node, MappingNode)
        if rule.entry == "replace" or not mappings or not isinstance(inherited.data, dict):
            return self.strip(item, where)
        only = None
        if rule.entry == "retain":
            only = {k for k, v in item.data.items() if v is not None} | set(rule.keys)
        return self.mapping(inherited, item, where, only)


def _identity(rule: ListRule, item: Any) -> Hashable | None:
    """The values of the rule's keys in ``item``; None when it has none to match by."""
    if not isinstance(item, dict):
        return None
    values = tuple(item.get(key) for key in rule.keys)
    if rule.required and any(v is None for v in values):
        return None
    if not all(v is None or isinstance(v, (str, int, float)) for v in values):
        return None  # a list or mapping where a key belongs: the schema reports it
    return values


def merge(base: Loaded, over: Loaded, rules: Rules = _no_rules) -> tuple[Loaded, list[Problem]]:
    """``over`` (one file) merged onto ``base`` (a file, or a merge already); the problems of ``over``'s directives."""
    merger = _Merger(base, over, rules)
    data, root = merger.value(
        _Value(base.data, base.root, base.file), merger._over(over.data, over.root), _Where((), ())
    )
    chain = (over.file, *(base.chain or (base.file,)))
    # The merge repeats no value of either file: both files' expansions bound what it holds.
    expanded = (base.expanded[0] + over.expanded[0], base.expanded[1] + over.expanded[1])
    merged = Loaded(
        over.file, data, root, origins=merger.origins, merged=frozenset(merger.merged), chain=chain, expanded=expanded
    )
    return merged, merger.problems


def strip(loaded: Loaded, rules: Rules = _no_rules) -> tuple[Loaded, list[Problem]]:
    """What one extending file itself sets: its nulls and directives consumed, nothing inherited."""
    merger = _Merger(None, loaded, rules)
    data, root = merger.strip(merger._over(loaded.data, loaded.root), _Where((), ()))
    return Loaded(loaded.file, data, root, chain=loaded.chain, expanded=loaded.expanded), merger.problems


__all__ = ["ITEM", "PATCH", "WHOLE", "ListRule", "Rules", "merge", "strip"]
