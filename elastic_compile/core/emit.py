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
    parts = [
        yaml.dump(
            plain(doc),
            Dumper=_Dumper,
            sort_keys=False,
            default_flow_style=False,
            allow_unicode=True,
            width=2**31 - 1,
        )
        for doc in docs
    ]
    return "---\n".join(parts)


def to_json(docs: Sequence[Any]) -> str:
    """One document as JSON, or several as a Kubernetes ``List``."""
    data = plain(docs[0]) if len(docs) == 1 else {"apiVersion": "v1", "kind": "List", "items": plain(list(docs))}
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"
