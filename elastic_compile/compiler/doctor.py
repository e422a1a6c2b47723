"""``elastic-compile doctor``: the known traps in manifests we did not write.

Input is any manifest stream (a file with several documents, ``kubectl kustomize`` output
on standard input); each PyTorchJob and TrainJob in it (with the runtime it references, when
the stream holds it) is checked against the webhook's rules, the
runtime traps and the rules hand-written jobs break (:mod:`elastic_compile.targets.traps`,
``targets/<kind>/traps.py``), and with the rules every compile applies to a spec: the
API server's pod values (:mod:`elastic_compile.schema.podvalues`) and the lints on text
(EC107, EC112, EC113 in :mod:`elastic_compile.compiler.lint`). Every finding is one located
line with a stable code::

    job.yaml:12:17: spec.elasticPolicy.standalone: DR004 standalone: must not be true: ...

Codes (``DRxxx``) are product surface: never renumbered or reused (docs/adopting.md lists
them). The exit code is 1 when anything was found, 0 when nothing was, 2 for input that
cannot be read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from elastic_compile import targets as registry
from elastic_compile.compiler import lint
from elastic_compile.core.errors import Problem, SpecError
from elastic_compile.core.loader import Loaded, load_stream
from elastic_compile.core.source import read_input
from elastic_compile.schema.podspec import octal_hint
from elastic_compile.targets import Checker, traps
from elastic_compile.targets.checks import DoctorRule, Finding
from elastic_compile.targets.readback.draft import in_document

#: The rules of doctor itself: what it checks in every kind it reads, whatever the target.
OWN_RULES: tuple[DoctorRule, ...] = (
    DoctorRule("DR002", "schema", "a field the CRD does not know, or a value of the wrong type: the API server "
               "prunes or rejects it"),
    DoctorRule("DR027", "pod-value", "a pod value the API server rejects: the CRD takes it, then every pod creation "
               "fails and the job waits with no pod"),
    # What compile lints in every spec's text (EC107, EC112, EC113), under their names and reasons.
    *(DoctorRule(code, lint.RULES[ec].name, lint.RULES[ec].why)
      for code, ec in zip(("DR028", "DR029", "DR030"), lint.MANIFEST_CODES, strict=True)),
)  # fmt: skip


def rules() -> tuple[DoctorRule, ...]:
    """Every doctor rule, by code: doctor's own, the pod traps every target shares, each target's.

    Raises ``ValueError`` when two rules share a code or a name (a target's mistake).
    """
    return _rules(registry.names())


@cache
def _rules(names: tuple[str, ...]) -> tuple[DoctorRule, ...]:
    every = [*OWN_RULES, *traps.RULES, *(rule for name in names for rule in registry.get(name).doctor_rules)]
    for key in ("code", "name"):
        seen: dict[str, DoctorRule] = {}
        for rule in every:
            first = seen.setdefault(getattr(rule, key), rule)
            if first is not rule and first != rule:
                raise ValueError(f"doctor rules {first.code} {first.name} and {rule.code} {rule.name}: the same {key}")
    return tuple(sorted(set(every), key=lambda rule: rule.code))


def _by_name() -> Mapping[str, DoctorRule]:
    return {rule.name: rule for rule in rules()}


def _text(doc: Mapping[str, Any], stream: Sequence[Loaded]) -> list[Finding]:
    """Secrets written as literals, invisible characters and values hard to review (never printed)."""
    return [Finding(lint.RULES[found.code].name, found.path, found.message) for found in lint.manifest_lints(doc)]


def _schema(schema_file: str, api_version: str, kind: str) -> Checker:
    """The CRD schema's problems with a document of ``kind`` (its status left out: the cluster's)."""

    def check(doc: Mapping[str, Any], stream: Sequence[Loaded]) -> list[Finding]:
        from elastic_compile.schema import compact

        schema = compact.load(schema_file)
        root = schema.root(api_version, kind)
        if root is None:  # pragma: no cover - the shipped schemas have these roots
            return []
        body = {k: v for k, v in doc.items() if k != "status"}
        decoded = (api_version, kind) in compact.WEBHOOK_DECODED
        return [Finding("schema", *octal_hint(body, p)) for p in schema.problems(body, root, decoded=decoded)]

    return check


@dataclass(frozen=True)
class _Kind:
    """A kind doctor checks: its CRD schema's check (None: none shipped), its other checks, whether it is a job."""

    schema: Checker | None
    others: tuple[Checker, ...]
    job: bool

    @property
    def checks(self) -> tuple[Checker, ...]:
        return self.others if self.schema is None else (self.schema, *self.others)


def _kinds() -> Mapping[tuple[str, str], _Kind]:
    """(apiVersion, kind) -> its checks: the CRD schema, the target's rules, the pod values, the text lints."""
    return _kinds_of(registry.names())


@cache
def _kinds_of(names: tuple[str, ...]) -> Mapping[tuple[str, str], _Kind]:
    found: dict[tuple[str, str], _Kind] = {}
    for name in names:
        for e in registry.get(name).examined():
            schema = _schema(e.schema_file, e.api_version, e.kind) if e.schema_file is not None else None
            found.setdefault((e.api_version, e.kind), _Kind(schema, (e.rules, e.values, _text), e.job))
    return found


@dataclass(frozen=True)
class Report:
    """What doctor found in one input: located lines, and how many jobs it read."""

    problems: tuple[Problem, ...]
    jobs: int
    skipped: tuple[str, ...]  # kinds of the documents it does not check


def examine(loaded: Loaded, stream: Sequence[Loaded] = ()) -> list[Problem]:
    """The findings of one document as located lines (``DRxxx name: message``); [] for kinds it does not check.

    ``stream``: every document of the input (a TrainJob is read with its runtime).
    """
    doc = loaded.data
    checks = _checkers(doc)
    out: list[Problem] = []
    by_name = _by_name()
    for check in checks:
        try:
            findings = check(doc, stream or (loaded,))
        except _SHAPE_ERRORS:
            # The rules read the shapes the CRD schemas give; a document of another shape (this
            # one, or the runtime it reads) is the schema check's finding, already made.
            if not any(_schema_findings(other.data) for other in (loaded, *stream)):
                raise  # a well-formed stream: a bug of ours, not the manifest's
            continue
        for finding in findings:
            rule = by_name[finding.rule]
            document, path = in_document(finding.path)
            where = stream[document] if document is not None else loaded
            located = where.problem(path, f"{rule.code} {rule.name}: {finding.message}")
            out.append(located._replace(given=None, code=rule.code))
    return sorted(set(out), key=lambda p: (p.line, p.col, p.message))


# What a rule meets in a document of a shape its CRD schema refuses (a string for a list, ...).
_SHAPE_ERRORS = (TypeError, AttributeError, KeyError, IndexError, ValueError)


def _kind(doc: Any) -> _Kind | None:
    """What doctor knows of a document's kind; None for a kind it does not check (or no mapping)."""
    if not isinstance(doc, dict):
        return None
    api_version, kind = doc.get("apiVersion"), doc.get("kind")
    if not (isinstance(api_version, str) and isinstance(kind, str)):
        return None  # a list or mapping there is not a kind (and not hashable)
    return _kinds().get((api_version, kind))


def _checkers(doc: Any) -> tuple[Checker, ...]:
    """The checks of a document's kind; () for a kind doctor does not check (or no mapping)."""
    found = _kind(doc)
    return found.checks if found is not None else ()


def _schema_findings(doc: Any) -> list[Finding]:
    """The CRD schema check's findings on ``doc`` ([] for a kind doctor does not check, or without a schema)."""
    found = _kind(doc)
    return found.schema(doc, ()) if found is not None and found.schema is not None else []


def doctor_stream(raw: bytes | str, file: str) -> Report:
    """Check every document of a manifest stream; raises ``SpecError`` when it cannot be read."""
    docs = load_stream(raw, file, max_depth=160)
    problems: list[Problem] = []
    jobs = 0
    skipped: list[str] = []
    for loaded in docs:
        doc = loaded.data
        kind = doc.get("kind") if isinstance(doc, dict) else None
        known = _kind(doc)
        if known is not None:
            jobs += 1 if known.job else 0
            problems += examine(loaded, docs)
        else:
            skipped.append(str(kind) if isinstance(kind, str) else "?")
    spec = next((d for d in docs if isinstance(d.data, dict) and not {"kind", "apiVersion"} & d.data.keys()), None)
    if jobs == 0 and spec is not None:
        # An elastic.yaml (no kind, no apiVersion): "nothing to check" and exit 0 would read as a pass.
        message = (
            "an elastic.yaml spec, not a manifest: doctor checks jobs written by hand; compile the spec "
            f"(elastic-compile {file}), or check what it compiles to "
            f"(elastic-compile {file} | elastic-compile doctor -)"
        )
        raise SpecError([spec.problem((), message)])
    return Report(tuple(problems), jobs, tuple(skipped))


def doctor_paths(paths: Sequence[str | Path]) -> list[Report]:
    """:func:`doctor_stream` for each path (``-``: standard input).

    A path inside the working tree that a link leads out of is refused, as compiling refuses it.
    """
    reports = []
    for path in paths:
        raw, file = read_input(path)  # refuses a link out of the working tree, as compiling does
        reports.append(doctor_stream(raw, file))
    return reports


def kinds() -> str:
    """The job kinds doctor checks, for messages."""
    return " or ".join(dict.fromkeys(kind for (_api, kind), known in _kinds().items() if known.job))
