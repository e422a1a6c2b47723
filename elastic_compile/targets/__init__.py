"""Output targets: one unit per engine, behind one small interface.

A target turns a validated spec into the documents its engine takes (a PyTorchJob, a
PodTemplate, a Flyte TaskSpec, ...): it says which templates to render with which
context (its *plan*), which settings it cannot carry (located errors), and what each
rendered document must be (its *checks*). The pipeline (:mod:`elastic_compile.compiler.pipeline`)
only calls these; it renders, parses back and emits.

Each target is a subpackage ``elastic_compile.targets.<name>`` whose ``TARGET`` is a
:class:`Target`; adding one adds a folder, a template and its tests. Targets are imported
only when asked for, so ``-t pytorchjob`` never imports Flyte's code.

What targets share lives beside them: :mod:`.pod` (the training pod every Kubernetes
target runs) and :mod:`.launcher` (the ``elastic-launch`` command in it).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from elastic_compile.core.loader import Loaded
    from elastic_compile.schema import ElasticSpec


@dataclass(frozen=True)
class Document:
    """One document a target renders: its template, its file in ``-o`` bases, and what it prints.

    ``api_version`` and ``kind`` are None for documents that are not Kubernetes objects
    (the Flyte TaskSpec): those are written to ``-o`` but are not kustomize resources.
    """

    template: str
    filename: str
    api_version: str | None
    kind: str | None
    context: Mapping[str, Any]


class Target:
    """One kind of output. Subclasses set the class attributes and :meth:`documents`."""

    #: The ``-t`` name (the subpackage's name).
    name: ClassVar[str]
    #: One line for ``--help``.
    summary: ClassVar[str]
    #: Position in ``-t all`` output (lower first).
    order: ClassVar[int]

    def in_all(self, spec: ElasticSpec) -> bool:
        """Whether ``-t all`` includes this target for ``spec`` (an explicit ``-t`` always does)."""
        return True

    def documents(self, spec: ElasticSpec, loaded: Loaded | None) -> list[Document]:
        """The documents to render for ``spec``.

        Raises ``SpecError`` (located through ``loaded`` when given) for settings this
        target cannot carry: a setting is never dropped silently.
        """
        raise NotImplementedError

    def check(self, doc: dict[str, Any], document: Document, spec: ElasticSpec) -> list[str]:
        """What is wrong with one rendered, parsed-back document (empty when it is fine).

        Custom ``--templates`` are held to these rules too, so they must not rely on the
        built-in template's shape.
        """
        return []


@cache
def names() -> tuple[str, ...]:
    """Every target's ``-t`` name, in ``-t all`` order."""
    found = [m.name for m in pkgutil.iter_modules(__path__) if m.ispkg]
    return tuple(sorted(found, key=lambda name: (get(name).order, name)))


@cache
def get(name: str) -> Target:
    """The target called ``name`` (imports its subpackage); ``KeyError`` when there is none."""
    if name not in {m.name for m in pkgutil.iter_modules(__path__) if m.ispkg}:
        raise KeyError(name)
    target = importlib.import_module(f"{__name__}.{name}").TARGET
    if not isinstance(target, Target) or target.name != name:
        raise TypeError(f"{__name__}.{name}.TARGET must be a Target named {name!r}")
    return target
