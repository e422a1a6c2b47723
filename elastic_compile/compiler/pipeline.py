"""The compile path, left to right: load -> validate -> plan -> render -> parse back -> check.

Each output kind is a target (:mod:`elastic_compile.targets`): it plans its documents and
checks them; this module renders them and holds the result. Emitting (YAML or JSON text,
files) is the CLI's job; everything here returns data.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import Any, Final, NamedTuple

from elastic_compile import targets as registry
from elastic_compile.compiler.render import custom_template, render
from elastic_compile.core import extends
from elastic_compile.core.errors import CompileError, Problem, SpecError, UnknownTargetError
from elastic_compile.core.loader import Loaded, load_text
from elastic_compile.schema import ElasticSpec
from elastic_compile.schema.extends import load_spec, resolver, unique_problems
from elastic_compile.schema.validate import validate
from elastic_compile.targets import Document, Target
from elastic_compile.targets.worker import Plan, spec_to_plan

#: ``-t all``: every target whose ``in_all`` accepts the spec.
ALL = "all"


class Output(NamedTuple):
    """One rendered, parsed-back and checked document."""

    target: Target
    document: Document
    doc: dict[str, Any]
    #: The custom template (``--templates``) that rendered it; None for a built-in one.
    template: Path | None = None

    @property
    def filename(self) -> str:
        """Its file name in a ``-o`` base."""
        return self.document.filename

    @property
    def is_resource(self) -> bool:
        """A Kubernetes object (a kustomize resource); False for the Flyte TaskSpec."""
        return self.document.api_version is not None


class Compiled:
    """Everything one spec compiled to: the spec, and each document rendered, parsed back and checked.

    :attr:`documents` and :attr:`files` give the documents as plain data (dicts, lists,
    strings, numbers, booleans), :meth:`text` as ``elastic-compile`` prints them, and
    :meth:`warnings` the lint lines it prints on stderr. ``plan`` is the worker plan
    (layout, pod template, launcher command) that lints and ``--explain`` describe, whatever
    the targets.
    """

    # A plain class, not a dataclass: the decorator compiles each generated method from
    # text, about 3.5 M instructions at every start. Final: set once.
    def __init__(
        self, loaded: Loaded | None, spec: ElasticSpec, outputs: tuple[Output, ...], known_plan: Plan | None = None
    ) -> None:
        self.loaded: Final = loaded
        self.spec: Final = spec
        self.outputs: Final = outputs
        #: The plan when a target made it while compiling (the PyTorchJob's, the PodTemplate's);
        #: None: ``plan`` makes it when first asked (a TrainJob or Flyte compile needs none).
        self.known_plan: Final = known_plan

    @cached_property
    def plan(self) -> Plan:
        """The worker plan of ``spec``."""
        return self.known_plan if self.known_plan is not None else spec_to_plan(self.spec)

    @property
    def documents(self) -> list[dict[str, Any]]:
        """Every document, in output order, as plain data (a copy: changing it changes nothing here)."""
        return [copy.deepcopy(o.doc) for o in self.outputs]

    @property
    def files(self) -> dict[str, dict[str, Any]]:
        """Every document by its file name in an ``-o`` base (``pytorchjob.yaml``), as plain data (a copy)."""
        return {o.filename: copy.deepcopy(o.doc) for o in self.outputs}

    def text(self, fmt: str = "yaml") -> str:
        """The documents as ``elastic-compile`` prints them: one YAML stream, or JSON (``fmt="json"``)."""
        from elastic_compile.compiler.output import stream_text

        if fmt not in ("yaml", "json"):
            raise ValueError(f"unknown format {fmt!r}; valid formats: yaml, json")
        return stream_text([self], fmt)

    def warnings(self, ignore: Sequence[str] = ()) -> list[str]:
        """The lint warnings ``elastic-compile`` prints for this spec, one located line each.

        ``ignore``: codes to silence, as ``--ignore`` does (the spec's ``lint:`` map always
        does). Raises ``SpecError`` for an unknown code, here or in the spec.
        """
        from elastic_compile.compiler import lint

        return [str(problem) for problem in lint.problems(self, ignore)]


def target_names(targets: str | Sequence[str] | None) -> tuple[str, ...] | None:
    """``targets`` as a tuple of names: one name (``"trainjob"``, ``"all"``), several, or None (the spec's own).

    Raises :class:`UnknownTargetError`, which lists the valid names, for a name no
    registered target has (``all`` only alone).
    """
    if targets is None:
        return None
    names = (targets,) if isinstance(targets, str) else tuple(targets)
    for name in names:
        if not (isinstance(name, str) and registry.exists(name)) and not (name == ALL and len(names) == 1):
            raise UnknownTargetError(name, [*registry.names(), ALL])
    if not names:
        raise UnknownTargetError("", [*registry.names(), ALL])
    return names


def resolve_targets(spec: ElasticSpec, names: str | Sequence[str] | None) -> tuple[Target, ...]:
    """The targets ``names`` asks for (see :func:`target_names`).

    None means the spec's own ``target`` (what a plain ``elastic-compile SPEC`` emits);
    ``all`` expands to those whose ``in_all`` takes ``spec``.
    """
    chosen = target_names(names) or (spec.target,)
    if chosen == (ALL,):
        return tuple(t for t in registry.every() if t.in_all(spec))
    return tuple(registry.get(n) for n in chosen)


def render_document(target: Target, document: Document, spec: ElasticSpec, template_dir: Path | None) -> Output:
    """Render one document, parse it back and run the target's checks on it."""
    doc = render(document.template, template_dir, package_templates=target.templates, **document.context)
    custom = custom_template(template_dir, document.template) if template_dir is not None else None
    problems = target.check(doc, document, spec)
    if problems:
        raise CompileError(f"template {custom or document.template}", "; ".join(problems))
    return Output(target, document, doc, custom)


def _once(planned: Sequence[tuple[Target, Document]]) -> list[tuple[Target, Document]]:
    """Each document once: targets that share one (the bundled launcher's ConfigMap) emit it alike.

    Two different documents for one file would overwrite each other in ``-o``: a defect of ours.
    """
    kept: dict[str, tuple[Target, Document]] = {}
    for target, document in planned:
        first = kept.setdefault(document.filename, (target, document))
        if first[1] != document:
            raise CompileError(
                f"targets {first[0].name} and {target.name}", f"two different documents for {document.filename}"
            )
    return list(kept.values())


def compile_spec(
    spec: ElasticSpec,
    targets: str | Sequence[str] | None = None,
    template_dir: Path | None = None,
    loaded: Loaded | None = None,
) -> Compiled:
    """Compile a validated spec for ``targets`` (a name, names, ``all``, or None: the spec's ``target``).

    Raises ``SpecError`` (located through ``loaded``) when a target cannot carry a
    setting, and ``CompileError`` when a template fails or renders something wrong.
    """
    chosen = resolve_targets(spec, targets)
    problems: list[Problem] = []
    planned: list[tuple[Target, Document]] = []
    for target in chosen:
        try:
            planned += [(target, d) for d in target.documents(spec, loaded)]
        except SpecError as e:
            problems += e.problems  # every target's problems in one run
    if problems:
        raise SpecError(sorted(set(problems)))
    outputs = tuple(render_document(t, d, spec, template_dir) for t, d in _once(planned))
    # The worker plan a target rendered (the PyTorchJob's, the PodTemplate's), for lints and --explain.
    known = next((p for _, d in planned if isinstance(p := d.context.get("plan"), Plan)), None)
    return Compiled(loaded, spec, outputs, known)


def compile_path(
    path: str | Path,
    targets: str | Sequence[str] | None = None,
    template_dir: Path | None = None,
    bases: extends.Resolver | None = None,
) -> Compiled:
    """Compile the spec file at ``path`` (``-`` for stdin). Raises ``SpecError`` on bad input.

    ``bases``: the run's :func:`resolver`, so that bases shared by several specs are read once.
    """
    loaded, spec = load_spec(path, bases, target_names(targets))
    return compile_spec(spec, targets, template_dir, loaded)


def compile_text(
    text: str | bytes,
    file: str = "<string>",
    targets: str | Sequence[str] | None = None,
    template_dir: Path | None = None,
) -> Compiled:
    """Compile spec text (used by tests and the fuzzer)."""
    loaded = load_text(text, file)
    extends.refuse(loaded)
    return compile_spec(validate(loaded, target_names(targets)), targets, template_dir, loaded)


__all__ = [
    "ALL",
    "Compiled",
    "Output",
    "UnknownTargetError",
    "compile_path",
    "compile_spec",
    "compile_text",
    "load_spec",
    "render_document",
    "resolve_targets",
    "resolver",
    "target_names",
    "unique_problems",
]
