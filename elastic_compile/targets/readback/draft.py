"""The spec being written from a manifest (:class:`Draft`), its notes, and paths into the input stream.

A path into the job's own document is a tuple of keys and indices. A path into another
document of the input (a TrainJob's runtime, read with the TrainJob) starts with a
:class:`StreamDocument`: an index whose type says it names a document, not a list entry.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from elastic_compile import contract_values as cv
from elastic_compile.core.loader import dotted
from elastic_compile.schema import ElasticSpec
from elastic_compile.schema.models import nested_model

Path = tuple[str | int, ...]
Severity = Literal["note", "warning"]


class StreamDocument(int):
    """The first element of a path into another document of the input stream: that document's index.

    An ``int``, so that a path stays a tuple of keys and indices for the code that walks
    it, but of its own type: no key or list index of a manifest is one, so a path cannot
    be mistaken for one into another document (the job's own document is a mapping: its
    paths never start with an index).
    """

    def __repr__(self) -> str:
        return f"StreamDocument({int(self)})"


def other_document(index: int, path: Path) -> Path:
    """A path into document ``index`` of the stream (a TrainJob's runtime, read with the TrainJob)."""
    return (StreamDocument(index), *path)


def in_document(path: Path) -> tuple[int | None, Path]:
    """``(document index or None for the job's own, the path inside it)``."""
    if path and isinstance(path[0], StreamDocument):
        return int(path[0]), path[1:]
    return None, path


def spec_default(*path: str) -> Any:
    """The schema's default for the spec field at ``path`` (``("rdzv", "join_timeout")``)."""
    model: Any = ElasticSpec
    for part in path[:-1]:
        model = nested_model(model.model_fields[part].annotation)
    return model.model_fields[path[-1]].get_default(call_default_factory=True)


def shutdown_seconds(draft: Draft) -> int:
    """The imported shutdown_timeout in whole seconds, for the pod's grace period.

    The draft keeps the text the job gave (``--shutdown-timeout 15m`` is elastic-launch's
    duration, as in a spec); one that is not a duration is the schema's problem, located at
    its word, so the grace period is computed from the default meanwhile.
    """
    value = draft.get("shutdown_timeout")
    if value is None or isinstance(value, bool):
        return int(spec_default("shutdown_timeout"))
    try:
        return cv.whole_seconds(value if isinstance(value, int | float) else cv.parse_duration(str(value)))
    except ValueError:
        return int(spec_default("shutdown_timeout"))


@dataclass(frozen=True)
class Note:
    """Something the import changed (``note``) or could not carry (``warning``), at a manifest path.

    ``key`` is the spec's top-level field the note is about: the written spec carries the
    message as a comment above it (None: stderr only).
    """

    path: Path
    message: str
    severity: Severity = "note"
    key: str | None = None


@dataclass
class Draft:
    """The spec being written from a manifest: values, where each came from, and notes."""

    values: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, Path] = field(default_factory=dict)  # dotted spec path -> manifest path
    notes: list[Note] = field(default_factory=list)
    errors: list[tuple[Path, str, str | None]] = field(default_factory=list)  # (path, message, given)
    #: Paths of a pod template put together from several places (a TrainJob's trainer, its
    #: patches, its runtime): prefix in the template -> where that part is in the input.
    aliases: dict[Path, Path] = field(default_factory=dict)

    def real(self, path: Path) -> Path:
        """``path`` in the input: the longest alias prefix replaced (unchanged without one)."""
        best = max((p for p in self.aliases if path[: len(p)] == p), key=len, default=None)
        return path if best is None else (*self.aliases[best], *path[len(best) :])

    def set(self, path: Sequence[str], value: Any, source: Path | None) -> None:
        """Write ``value`` at the spec ``path``, remembering where it came from."""
        node = self.values
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value
        if source is not None:
            self.sources[dotted(path)] = source

    def set_unless_default(self, path: Sequence[str], value: Any, source: Path | None) -> None:
        """:meth:`set`, unless ``value`` is the schema's default (a clean spec omits those)."""
        default = spec_default(*path)
        # str(): nnodes' default is an NNodes object whose text is "1"; 5 and 5.0 are equal too.
        if value != default and str(value) != str(default):
            self.set(path, value, source)

    def get(self, *path: str) -> Any:
        node: Any = self.values
        for part in path:
            if not isinstance(node, dict) or part not in node:
                return None
            node = node[part]
        return node

    def source(self, spec_path: Sequence[str | int], manifest: Path) -> None:
        self.sources[dotted(spec_path)] = manifest

    def note(self, path: Path, message: str, key: str | None = None) -> None:
        self.notes.append(Note(path, message, "note", key))

    def warn(self, path: Path, message: str, key: str | None = None) -> None:
        self.notes.append(Note(path, message, "warning", key))

    def fail(self, path: Path, message: str, given: str | None = None) -> None:
        self.errors.append((path, message, given))


# --------------------------------------------------------------------------- the spec text


def spec_order(values: Mapping[str, Any]) -> dict[str, Any]:
    """The spec's fields in the schema's order (nested models too), as ``elastic-compile --explain`` lists them."""
    return _ordered(values, ElasticSpec)


def _ordered(values: Mapping[str, Any], model: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        key = info.alias or name
        if key in values:
            value = values[key]
            sub = nested_model(info.annotation)
            out[key] = (
                _ordered(value, sub) if sub is not None and isinstance(value, dict) and key != "function" else value
            )
    for key, value in values.items():
        out.setdefault(key, value)
    return out
