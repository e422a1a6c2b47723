"""``elastic-compile import``: a job we did not write, as elastic.yaml.

Input is a manifest stream (a PyTorchJob, several, or ``kubectl kustomize`` output) or a
torchrun command line. Each target that can be read back has a ``readback`` module beside
it (:mod:`elastic_compile.targets.pytorchjob.readback`), over what they share
(:mod:`elastic_compile.targets.readback`); this module loads the input with the
project's loader (its limits, its located errors), hands each document to its target,
writes the spec (only non-default values, a comment where a value was changed), and
proves it: the spec text is validated and compiled like any other, and a value it cannot
take is an error located in the manifest, not in a file the user has not seen yet.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from elastic_compile import targets as registry
from elastic_compile.compiler.pipeline import compile_spec
from elastic_compile.core.emit import to_yaml
from elastic_compile.core.errors import Problem, SpecError
from elastic_compile.core.loader import Loaded, load_stream, load_text
from elastic_compile.core.source import read_input
from elastic_compile.schema import ElasticSpec
from elastic_compile.schema.validate import validate
from elastic_compile.targets import Reader, Target, network
from elastic_compile.targets.readback.command_line import Launch, read_launch
from elastic_compile.targets.readback.draft import Draft, Note, in_document, spec_order
from elastic_compile.targets.readback.launch_settings import Injected, apply_launch

#: Manifests go deeper than specs: a pod template inside a replica inside a job.
MANIFEST_DEPTH = 160


@dataclass(frozen=True)
class Importer:
    """One kind that can be read back: the target that reads it, and how."""

    target: Target
    reader: Reader


def importers() -> tuple[Importer, ...]:
    """Every kind some registered target reads back, in the targets' order."""
    return tuple(Importer(target, reader) for target in registry.every() for reader in target.readers())


def importer_for(doc: Any) -> Importer | None:
    """The importer of a document's apiVersion and kind, or None."""
    if not isinstance(doc, dict):
        return None
    key = (doc.get("apiVersion"), doc.get("kind"))
    return next((i for i in importers() if key == (i.reader.api_version, i.reader.kind)), None)


@dataclass(frozen=True)
class Imported:
    """One imported job: the spec text, the validated spec, and what the import changed or dropped."""

    text: str
    spec: ElasticSpec
    notes: tuple[Problem, ...]


def import_path(path: str | Path, *, entrypoint: Sequence[str] | None = None) -> list[Imported]:
    """Import every job of the manifest stream at ``path`` (``-``: standard input).

    ``entrypoint``: the image's ENTRYPOINT, for a training container without command. A path
    inside the working tree that a link leads out of is refused, as compiling refuses it.
    """
    raw, file = read_input(path)  # refuses a link out of the working tree, as compiling does
    return import_stream(raw, file, entrypoint=entrypoint)


def import_stream(raw: bytes | str, file: str, *, entrypoint: Sequence[str] | None = None) -> list[Imported]:
    """Import every job of a manifest stream; raises ``SpecError`` with every located problem."""
    docs = load_stream(raw, file, max_depth=MANIFEST_DEPTH)
    problems: list[Problem] = []
    imported: list[Imported] = []
    skipped: list[Problem] = []
    for loaded in docs:
        found = importer_for(loaded.data)
        if found is None and _companion(loaded.data):
            continue
        if found is None:
            kind = loaded.data.get("kind") if isinstance(loaded.data, dict) else None
            what = f"kind {kind}" if isinstance(kind, str) else "not a Kubernetes object"
            note = _located(loaded, (), f"note: skipped ({what}): import reads {_kinds()}")
            skipped.append(note._replace(severity="note"))
            continue
        try:
            imported.append(_import_one(loaded, found, docs, entrypoint))
        except SpecError as e:
            problems += e.problems
    if problems:
        raise SpecError(problems)
    if not imported:
        where = docs[0] if docs else None
        message = f"nothing to import: no {_kinds()} in the input"
        if where is None:
            raise SpecError([Problem(file, 1, 1, "spec", message)])
        raise SpecError([_located(where, ("kind",), message)])
    if skipped:
        imported[0] = dataclasses.replace(imported[0], notes=(*skipped, *imported[0].notes))
    return imported


def _kinds() -> str:
    return " or ".join(f"{i.reader.kind} ({i.reader.api_version})" for i in importers())


def _companion(doc: Any) -> bool:
    if not isinstance(doc, dict):
        return False
    if (doc.get("apiVersion"), doc.get("kind")) == (network.API_VERSION, network.KIND):
        # The compiler's NetworkPolicy (it selects the label of ours the pods carry): network_policy: true.
        selector = (doc.get("spec") or {}).get("podSelector") if isinstance(doc.get("spec"), dict) else None
        return isinstance(selector, dict) and network.POD_LABEL in (selector.get("matchLabels") or {})
    key = (doc.get("apiVersion"), doc.get("kind"))
    return any(key in i.reader.companions for i in importers())


def _import_one(
    loaded: Loaded, importer: Importer, stream: Sequence[Loaded], entrypoint: Sequence[str] | None
) -> Imported:
    draft = importer.reader.read(loaded, stream, entrypoint)
    label = f"{importer.reader.kind} {_name(loaded.data)}"

    def locate(path: tuple[str | int, ...], message: str, given: str | None = None) -> Problem:
        real = draft.real(path)
        document, where = in_document(real)
        return _located(stream[document] if document is not None else loaded, where, message, given)

    return _finish(draft, f"{loaded.file} ({label})", locate, importer.target.name)


def _name(doc: Any) -> str:
    meta = doc.get("metadata") if isinstance(doc, dict) else None
    name = meta.get("name") if isinstance(meta, dict) else None
    return str(name) if name is not None else "?"


def _located(loaded: Loaded, path: Sequence[str | int], message: str, given: str | None = None) -> Problem:
    problem = loaded.problem(path, message)
    return problem._replace(given=given)


def _finish(draft: Draft, origin: str, locate: Callable[..., Problem], target: str | None = None) -> Imported:
    """Validate and compile the draft; errors are located where the value came from.

    ``target``: the target that read it, which must compile it back; None: the spec's own
    (a torchrun command line gives none).
    """
    if draft.errors:
        raise SpecError([locate(p, f"cannot import: {m}", g) for p, m, g in draft.errors])
    text = render_spec(draft, origin)
    loaded = load_text(text, "<imported spec>")
    try:
        names = (target,) if target is not None else None
        spec = validate(loaded, names)
        compile_spec(spec, names, loaded=loaded)
    except SpecError as e:
        raise SpecError([_back(draft, p, locate) for p in e.problems]) from e
    # The severity is in the text (as the lines have always read) and in the field (--message-format json).
    notes = tuple(
        locate(n.path, f"{n.severity}: {n.message}")._replace(severity=n.severity)
        for n in sorted(draft.notes, key=lambda n: n.severity != "note")
    )
    return Imported(text, spec, notes)


def _back(draft: Draft, problem: Problem, locate: Callable[..., Problem]) -> Problem:
    """A problem of the written spec, located at the manifest value it came from."""
    best = ""
    for key in draft.sources:
        if (problem.path == key or problem.path.startswith((key + ".", key + "["))) and len(key) > len(best):
            best = key
    where = draft.sources.get(best, ())
    return locate(where, f"cannot import: {problem.path}: {problem.message}", problem.given)


# --------------------------------------------------------------------------- the spec text


def render_spec(draft: Draft, origin: str) -> str:
    """The spec as YAML: the schema's field order, each changed value with its reason as a comment above it."""
    values = spec_order(draft.values)
    by_key: dict[str, list[Note]] = {}
    header: list[Note] = []
    for note in draft.notes:
        if note.key is not None and note.key in values:
            by_key.setdefault(note.key, []).append(note)
        elif note.key is not None or note.severity == "warning":
            # Every setting not carried is said in the spec, not only on stderr.
            header.append(note)
    lines = [_comment(f"Imported from {origin} by elastic-compile import.")]
    if header:
        lines.append(_comment("Defaults that now apply, and what was not carried:"))
        lines += [_comment(f"- {_what(n)}") for n in header]
    for key, value in values.items():
        lines += [_comment(_what(n)) for n in by_key.get(key, [])]
        lines.append(to_yaml([{key: value}]).rstrip("\n"))
    return "\n".join(lines) + "\n"


def _what(note: Note) -> str:
    return f"not carried: {note.message}" if note.severity == "warning" else note.message


_UNSAFE = re.compile(r"[^\x20-\x7e\u00a0-\ud7ff\ue000-\ufffc]")


def _comment(text: str) -> str:
    """One comment line: user text in it cannot end the comment or hide characters."""
    return "# " + _UNSAFE.sub(lambda m: m[0].encode("unicode_escape").decode("ascii"), text)


# --------------------------------------------------------------------------- torchrun


def import_torchrun(argv: Sequence[str], *, image: str | None, name: str | None = None) -> Imported:
    """The spec for a torchrun command line (``torchrun ...`` or ``python -m torch.distributed.run ...``).

    The command line holds no image, so ``image`` is required; ``name`` defaults to the
    script's name.
    """
    words = list(argv)
    file = "<torchrun>"

    def at(i: int) -> tuple[str | int, ...]:
        return ("argv", i)

    def locate(path: tuple[str | int, ...], message: str, given: str | None = None) -> Problem:
        index = path[1] if len(path) > 1 and isinstance(path[1], int) else 0
        col = 1 + sum(len(w) + 1 for w in words[:index])
        return Problem(file, 1, col, f"argv[{index}]" if words else "argv", message, given)

    draft = Draft()
    if not words:
        raise SpecError([locate((), "give the torchrun command line after --")])
    launch: Launch = read_launch(words, at, draft)
    if launch.launcher is None and not draft.errors:
        draft.fail(at(0), "not a torchrun command line (torchrun ... or python -m torch.distributed.run ...)")
    nnodes = launch.settings.get("nnodes")
    nodes = _nodes(draft, nnodes, at)
    launch.settings.pop("nnodes", None)
    apply_launch(draft, launch, at, Injected(), nodes)
    if image is None:
        draft.fail(at(0), "a command line has no image: give --image IMAGE")
    else:
        draft.set(("image",), image, None)
    script = next((w for w in launch.program[1:] if not w.startswith("-")), None) if launch.program else None
    derived = re.sub(r"[^a-z0-9-]+", "-", PurePosixPath(script or "train").stem.lower()).strip("-") or "train"
    if not derived[0].isalpha():
        derived = "job-" + derived
    draft.set(("name",), name or derived[:40], None)
    if name is None:
        draft.note(at(launch.program_at or 0), f"name {derived[:40]} from the script's name (--name to choose)")
    for key, value in launch.env:
        draft.values.setdefault("env", {})[key] = value
    if launch.working_dir is not None:
        draft.set(
            ("pod_template", "spec"), {"containers": [{"name": "pytorch", "workingDir": launch.working_dir}]}, None
        )
    return _finish(draft, "a torchrun command line", locate)


def _nodes(draft: Draft, nnodes: tuple[Any, int] | None, at: Callable[[int], tuple[str | int, ...]]) -> int:
    """``--nnodes`` onto the spec (the command line is the topology here); the most nodes."""
    if nnodes is None:
        return 1
    text = str(nnodes[0])
    m = re.fullmatch(r"([0-9]+)(?::([0-9]+))?", text)
    if m is None:
        draft.fail(at(nnodes[1]), "--nnodes: expected N or MIN:MAX", text)
        return 1
    lo, hi = int(m[1]), int(m[2] or m[1])
    draft.set_unless_default(("nnodes",), hi if lo == hi else f"{lo}:{hi}", at(nnodes[1]))
    return hi
