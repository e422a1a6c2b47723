"""Output targets: one unit per engine, behind one small interface.

A target turns a validated spec into the documents its engine takes (a PyTorchJob, a
PodTemplate, a Flyte TaskSpec, ...), and owns everything else it knows about that engine:

* its *plan* and documents (:meth:`Target.documents`): which templates to render with
  which context, and which settings it cannot carry (located errors);
* its *checks* (:meth:`Target.check`): what each rendered document must be;
* the lint rules about its engine that concern its output (:meth:`Target.lint_codes`);
* the kinds it reads back into a spec (:meth:`Target.readers`, ``elastic-compile import``);
* the kinds ``elastic-compile doctor`` checks with its rules (:meth:`Target.examined`,
  :attr:`Target.doctor_rules`);
* what ``--explain`` says of its layout (:meth:`Target.explain`);
* what kustomize must be told about its kinds in an ``-o`` base (:meth:`Target.kustomize`).

The pipeline (:mod:`elastic_compile.compiler.pipeline`), the lints, ``import`` and ``doctor``
iterate the registered targets; none of them names one. Targets are imported only when
asked for, so ``-t pytorchjob`` never imports Flyte's code.

Registration, as torchx registers its schedulers: the built-in targets are
:data:`BUILTIN`; an installed distribution adds one through the entry point group
:data:`ENTRY_POINT_GROUP` (``mine = "my_package.mine:TARGET"``, the name being the ``-t``
name), and code that runs before compiling (a notebook, a test, a platform's wrapper) calls
:func:`register`. docs/architecture.md has an example.

What targets share lives beside them: :mod:`.pod` (the training pod every Kubernetes
target runs), :mod:`.launcher` (the ``elastic-launch`` command in it), :mod:`.worker` (the
worker plan lints and ``--explain`` describe), :mod:`.checks` and :mod:`.traps` (rules on
documents), :mod:`.readback` (reading a job back into a spec).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Collection, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Final, NamedTuple

from elastic_compile.core import kinds

if TYPE_CHECKING:
    from elastic_compile.core.engine_env import Generation
    from elastic_compile.core.loader import Loaded
    from elastic_compile.schema import ElasticSpec
    from elastic_compile.targets.checks import DoctorRule, Finding
    from elastic_compile.targets.kustomize_kinds import Kustomize
    from elastic_compile.targets.readback.draft import Draft

#: The templates of the built-in targets (``elastic_compile/templates``).
BUILTIN_TEMPLATES: Final = Path(__file__).resolve().parent.parent / "templates"


class Document(NamedTuple):
    """One document a target renders: its template, its file in ``-o`` bases, and what it prints.

    ``api_version`` and ``kind`` are None for documents that are not Kubernetes objects
    (the Flyte TaskSpec): those are written to ``-o`` but are not kustomize resources.
    """

    template: str
    filename: str
    api_version: str | None
    kind: str | None
    context: Mapping[str, Any]


#: Reads one document of a manifest stream back into a spec: the document, every document
#: of its stream (a TrainJob's runtime may be there), and the image's entrypoint when the
#: user gave it (``import --entrypoint``).
ReadFunction = Callable[["Loaded", Sequence["Loaded"], "Sequence[str] | None"], "Draft"]


class Reader(NamedTuple):
    """A kind a target reads back into a spec (``elastic-compile import``)."""

    api_version: str
    kind: str
    read: ReadFunction
    #: Kinds a stream may hold beside the job, read by this reader (a TrainJob's runtime).
    companions: tuple[tuple[str, str], ...] = ()


#: One of doctor's checks of a document: the document, and every document of its stream.
Checker = Callable[[Mapping[str, Any], Sequence["Loaded"]], list["Finding"]]


class Examined(NamedTuple):
    """A kind ``elastic-compile doctor`` checks: its CRD schema, the target's rules, the pod values.

    ``doctor`` adds what it applies to every kind (the schema check, the lints on text).
    """

    api_version: str
    kind: str
    #: The compact schema of the kind (a file of elastic_compile/schema/compact/); None when
    #: the package ships none (a target from elsewhere): its rules read the shapes they need.
    schema_file: str | None
    #: The target's own traps for this kind (findings named by :attr:`Target.doctor_rules`
    #: or by the rules every Kubernetes target shares, :data:`.traps.RULES`).
    rules: Checker
    #: The values the API server would reject on pod creation.
    values: Checker
    #: A job (counted in doctor's summary), or a document read with one (a runtime).
    job: bool = True


class Target:
    """One kind of output. Subclasses set the class attributes and :meth:`documents`."""

    #: The ``-t`` name.
    name: ClassVar[str]
    #: One line for ``--help``.
    summary: ClassVar[str]
    #: Position in ``-t all`` output (lower first).
    order: ClassVar[int]
    #: Where the templates its documents name are; ``--templates DIR`` overrides them by name.
    templates: ClassVar[Path] = BUILTIN_TEMPLATES
    #: The generation of Kubeflow whose engine runs its output (the PodTemplate is the v1
    #: job's Worker pod; the Flyte plugins submit a PyTorchJob); None for another engine.
    generation: ClassVar[Generation | None] = None
    #: Whether its pods get ``accelerator``'s nodeSelector (the Flyte targets carry
    #: gpuAccelerator instead), so that ``--explain`` describes the placement.
    places_accelerator: ClassVar[bool] = False
    #: The doctor rules of its own (codes are product surface: unique across every target).
    doctor_rules: ClassVar[tuple[DoctorRule, ...]] = ()
    #: The API server's resource (its plural, in the object's path) of each ``(apiVersion,
    #: kind)`` its documents hold: what ``elastic-compile apply`` sends. Empty: no Kubernetes objects.
    resources: ClassVar[Mapping[tuple[str, str], str]] = {}
    #: The last name of a field path in its objects -> the spec field that writes it, beyond the
    #: pod's own (image, env, ...): where ``apply`` locates a refusal of the server.
    spec_fields: ClassVar[Mapping[str, tuple[str, ...]]] = {}
    #: Spec settings (dotted paths; a section covers its fields) that its output never carries,
    #: each with what its engine does instead: ``--explain`` shows them as null with that reason
    #: when no other target of the compile carries them.
    unused_settings: ClassVar[Mapping[str, str]] = {}

    def default_settings(self, spec: ElasticSpec) -> Mapping[str, tuple[Any, str]]:
        """Spec settings left at their default whose effect in this target's output is not what the
        spec's description says: dotted path -> (the value that applies, None when the cluster's
        objects decide; why). ``--explain`` shows them so when every other target of the compile
        says the same or never carries the setting (:attr:`unused_settings`)."""
        return {}

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

    def lint_codes(self, chosen: Collection[Target]) -> frozenset[str]:
        """The lint rules about an engine's own behaviour that concern this target's output.

        Such rules (``lint.RULES[code].scoped``) fire only when a target of the compile
        claims them; ``chosen`` is every target of the compile (this one included).
        """
        return frozenset()

    def readers(self) -> tuple[Reader, ...]:
        """The kinds this target reads back into a spec (``elastic-compile import``)."""
        return ()

    def examined(self) -> tuple[Examined, ...]:
        """The kinds ``elastic-compile doctor`` checks with this target's rules."""
        return ()

    def kustomize(self) -> Kustomize | None:
        """What kustomize must know about the custom kinds it emits (merge keys, references); None: nothing."""
        return None

    def admission_needs(self, doc: Mapping[str, Any]) -> tuple[str, str, str] | None:
        """The object (apiVersion, kind, name, in the same namespace) that must exist before the
        server admits ``doc``, even in a dry run; None: nothing. ``apply`` sends that one first."""
        return None

    def explain(self, document: Document, spec: ElasticSpec) -> list[str] | None:
        """``--explain``'s lines on the layout of one of its documents; None: the worker plan's layout.

        The first document of a compile with lines of its own is explained; without one,
        ``--explain`` describes the worker plan (:mod:`.worker`).
        """
        return None


#: The built-in targets: their ``-t`` names and modules (each module's ``TARGET``).
BUILTIN: Final[Mapping[str, str]] = {
    "pytorchjob": "elastic_compile.targets.pytorchjob",
    "trainjob": "elastic_compile.targets.trainjob",
    "podtemplate": "elastic_compile.targets.podtemplate",
    "flyte": "elastic_compile.targets.flyte",
    "flyte2": "elastic_compile.targets.flyte2",
}
#: The entry point group of targets from other distributions: ``<-t name> = "<module>:<attribute>"``.
ENTRY_POINT_GROUP: Final = "elastic_compile.targets"

# Targets given to register(), by name.
_registered: dict[str, Target] = {}


def register(target: Target) -> None:
    """Add ``target`` to the registry of this process (replacing one of the same name given before).

    For code that runs before compiling: a notebook, a test, a platform's own wrapper. A
    target in an installed distribution registers through :data:`ENTRY_POINT_GROUP`
    instead, so that the ``elastic-compile`` command finds it too. A built-in name cannot
    be taken.
    """
    _valid(target, getattr(target, "name", None))
    if target.name in BUILTIN:
        raise ValueError(f"{target.name} is a built-in target")
    _registered[target.name] = target
    names.cache_clear()
    get.cache_clear()


def unregister(name: str) -> None:
    """Remove a target given to :func:`register` (tests); nothing for another name."""
    if _registered.pop(name, None) is not None:
        names.cache_clear()
        get.cache_clear()


@cache
def _entry_points() -> Mapping[str, Any]:
    """The installed targets of other distributions, by name (the built-in names are kept)."""
    from importlib.metadata import entry_points

    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name not in BUILTIN}


def _known() -> set[str]:
    return {*BUILTIN, *_entry_points(), *_registered}


def exists(name: str) -> bool:
    """Whether some target is called ``name``, importing nothing for a built-in or registered name.

    Only a name neither built in nor registered reads the installed distributions' entry
    points: that scan (every distribution's metadata) is most of what ``-t`` would otherwise
    cost a one-spec compile.
    """
    return name in BUILTIN or name in _registered or name in _entry_points()


@cache
def names() -> tuple[str, ...]:
    """Every target's ``-t`` name, in ``-t all`` order (imports each target's module, which is light)."""
    return tuple(sorted(_known(), key=lambda name: (get(name).order, name)))


@cache
def get(name: str) -> Target:
    """The target called ``name`` (imports its module); ``KeyError`` when there is none."""
    if name in _registered:
        return _registered[name]
    if name in BUILTIN:
        target = importlib.import_module(BUILTIN[name]).TARGET
    elif name in _entry_points():
        target = _entry_points()[name].load()
    else:
        raise KeyError(name)
    _valid(target, name)
    return target  # type: ignore[no-any-return]


def _valid(target: Any, name: Any) -> None:
    if not isinstance(target, Target) or not isinstance(name, str) or target.name != name:
        raise TypeError(f"target {name!r}: expected a Target named {name!r}, got {target!r}")


def every() -> tuple[Target, ...]:
    """Every registered target, in ``-t all`` order."""
    return tuple(get(name) for name in names())


def resources() -> dict[tuple[str, str], str]:
    """Every target's :attr:`Target.resources`: ``(apiVersion, kind)`` -> the resource's plural."""
    return {key: plural for target in every() for key, plural in target.resources.items()}


def spec_fields() -> dict[str, tuple[str, ...]]:
    """Every target's :attr:`Target.spec_fields`."""
    return {name: path for target in every() for name, path in target.spec_fields.items()}


def admission_needs(doc: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """What some target says ``doc`` needs on the server before it is admitted (:meth:`Target.admission_needs`)."""
    return next((need for target in every() if (need := target.admission_needs(doc)) is not None), None)


def importable_kinds() -> tuple[str, ...]:
    """The kinds some target reads back (``elastic-compile import``), for messages."""
    return tuple(dict.fromkeys(reader.kind for target in every() for reader in target.readers()))


# The loader and the schema sit below the targets: they learn from here which kinds
# `import` reads, to point a manifest given as a spec to it.
kinds.set_importable(importable_kinds)
