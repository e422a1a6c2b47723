"""``elastic-compile doctor``: the known traps in manifests we did not write.

Input is any manifest stream (a file with several documents, ``kubectl kustomize`` output
on standard input); each PyTorchJob and TrainJob in it (with the runtime it references, when
the stream holds it) is checked against the webhook's rules, the
runtime traps and the rules hand-written jobs break (:mod:`elastic_compile.targets.doctor`,
``targets/<kind>/doctor.py``), and with the rules every compile applies to a spec: the
API server's pod values (:mod:`elastic_compile.schema.podvalues`) and the lints on text
(EC107, EC112, EC113 in :mod:`elastic_compile.compiler.lint`). Every finding is one located
line with a stable code::

    job.yaml:12:17: spec.elasticPolicy.standalone: DR004 standalone: must not be true: ...

Codes (``DRxxx``) are product surface: never renumbered or reused (docs/adopting.md lists
them). The exit code is 1 when anything was found, 0 when nothing was, 2 for input that
cannot be read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elastic_compile.compiler import inputs, lint
from elastic_compile.core import safefs
from elastic_compile.core.errors import Problem, SpecError
from elastic_compile.core.loader import Loaded, load_stream
from elastic_compile.core.source import read_input
from elastic_compile.schema.podspec import octal_hint
from elastic_compile.targets.adopt import in_document
from elastic_compile.targets.checks import Finding, from_lines
from elastic_compile.targets.launcher import TORCHRUN_EXIT_CODES


@dataclass(frozen=True)
class Rule:
    """One doctor rule: its stable code, its name, and what goes wrong on the cluster."""

    code: str
    name: str
    why: str


RULES: tuple[Rule, ...] = (
    Rule("DR001", "webhook", "the training operator's validating webhook rejects the job: kubectl apply fails"),
    Rule("DR002", "schema", "a field the CRD does not know, or a value of the wrong type: the API server prunes "
         "or rejects it"),
    Rule("DR003", "master-with-elastic", "Master + elasticPolicy: PET_NNODES leaves the Master out and the rendezvous "
         "still points at worker-0 (kubeflow/trainer#2277)"),
    Rule("DR004", "standalone", 'the operator renders standalone as PET_STANDALONE="", which torchrun cannot parse'),
    Rule("DR005", "empty-rdzv-conf", "the operator's env builder panics on an empty rdzvConf"),
    Rule("DR006", "elastic-bounds", "Worker replicas outside [minReplicas, maxReplicas], or min above max"),
    Rule("DR007", "name-too-long", "the pods' names (<name>-worker-<index>, JobSet's <name>-node-0-<index>-xxxxx) must "
         "fit 63 characters, or the pods and services are never created"),
    Rule("DR008", "no-shm", "without a memory-backed /dev/shm, DataLoader workers and NCCL die with 'Bus error'"),
    Rule("DR009", "launcher-overrides", "a launcher flag beats the PET_* the engine injects with another value: the "
         "pods disagree with the manifest"),
    Rule("DR010", "nested-launcher", "a launcher inside a launcher: nproc_per_node² processes, outside the "
         "rendezvous"),
    Rule("DR011", "operator-env", "env the operator or torch elastic sets, written by hand: duplicated and overridden"),
    Rule("DR012", "regular-sidecar", "a regular sidecar keeps running, so the pod never completes and the job never "
         "succeeds"),
    Rule("DR013", "no-rendezvous", "several Workers without Master or elasticPolicy have nowhere to meet"),
    Rule("DR014", "no-max-restarts", "torchrun's default of 0 restarts fails an elastic job at its first blip"),
    Rule("DR015", "backoff-uncounted", "backoffLimit counts in-place restarts only; with ExitCode or Never it bounds "
         "nothing"),
    Rule("DR016", "restart-policy-unset", "the operator defaults restartPolicy to OnFailure, not the Never its CRD "
         "describes"),
    Rule("DR017", "pod-restart-policy", "the operator overwrites the pod template's restartPolicy"),
    Rule("DR018", "istio-sidecar", "an Istio sidecar breaks the rendezvous and keeps the pod from completing"),
    Rule("DR019", "host-network-dns", "hostNetwork pods resolve with the node's DNS unless dnsPolicy is "
         "ClusterFirstWithHostNet"),
    Rule("DR020", "no-replicas", "pytorchReplicaSpecs without a replica: the operator has nothing to run"),
    Rule("DR021", "trainer-webhook", "Trainer v2's webhooks or CEL rules reject the TrainJob"),
    Rule("DR022", "runtime-webhook", "Trainer v2's runtime webhook rejects the runtime, or the SDK skips it"),
    Rule("DR023", "no-launcher", "Trainer's runtime starts no launcher: the command runs once per pod, without "
         "MASTER_ADDR, RANK or WORLD_SIZE"),
    Rule("DR024", "jobset-ttl", "a JobSet TTL makes Trainer v2.3 rerun a failed job without end"),
    Rule("DR025", "rdzv-is-host", "is_host in the rdzvConf of several pods: every pod gets it, so all host the "
         "store or none does"),
    Rule("DR026", "torchrun-exit-codes", TORCHRUN_EXIT_CODES),
    Rule("DR027", "pod-value", "a pod value the API server rejects: the CRD takes it, then every pod creation fails "
         "and the job waits with no pod"),
    # What compile lints in every spec's text (EC107, EC112, EC113), under their names and reasons.
    *(Rule(code, lint.RULES[ec].name, lint.RULES[ec].why)
      for code, ec in zip(("DR028", "DR029", "DR030"), lint.MANIFEST_CODES, strict=True)),
)  # fmt: skip
BY_NAME: Mapping[str, Rule] = {rule.name: rule for rule in RULES}


Checker = Callable[[Mapping[str, Any], Sequence[Loaded]], list[Finding]]


def _pytorchjob(job: Mapping[str, Any], stream: Sequence[Loaded]) -> list[Finding]:
    from elastic_compile.targets.pytorchjob.doctor import findings

    return findings(job)


def _trainjob(job: Mapping[str, Any], stream: Sequence[Loaded]) -> list[Finding]:
    from elastic_compile.targets.trainjob.doctor import findings

    return findings(job, stream)


def _runtime(runtime: Mapping[str, Any], stream: Sequence[Loaded]) -> list[Finding]:
    from elastic_compile.targets.trainjob.checks import runtime_findings

    return runtime_findings(runtime)


def _pytorchjob_values(job: Mapping[str, Any], stream: Sequence[Loaded]) -> list[Finding]:
    from elastic_compile.targets.pytorchjob.checks import pod_errors

    return from_lines("pod-value", pod_errors(job))


def _trainer_values(doc: Mapping[str, Any], stream: Sequence[Loaded]) -> list[Finding]:
    from elastic_compile.targets.trainjob.checks import pod_errors

    return from_lines("pod-value", pod_errors(doc))


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
        return [Finding("schema", *octal_hint(body, problem)) for problem in schema.problems(body, root)]

    return check


_V1 = "kubeflow.org/v1"
_V2 = "trainer.kubeflow.org/v1alpha1"


def _checks(schema_file: str, api_version: str, kind: str, own: Checker, values: Checker) -> tuple[Checker, ...]:
    """A kind's checks: its CRD schema, its own rules, the API server's pod values, the text lints."""
    return (_schema(schema_file, api_version, kind), own, values, _text)


#: (apiVersion, kind) -> the checks that read it.
CHECKERS: Mapping[tuple[str, str], tuple[Checker, ...]] = {
    (_V1, "PyTorchJob"): _checks("pytorchjobs.kubeflow.org.json", _V1, "PyTorchJob", _pytorchjob, _pytorchjob_values),
    (_V2, "TrainJob"): _checks("trainjobs.trainer.kubeflow.org.json", _V2, "TrainJob", _trainjob, _trainer_values),
    (_V2, "TrainingRuntime"): _checks(
        "trainingruntimes.trainer.kubeflow.org.json", _V2, "TrainingRuntime", _runtime, _trainer_values
    ),
    (_V2, "ClusterTrainingRuntime"): _checks(
        "clustertrainingruntimes.trainer.kubeflow.org.json", _V2, "ClusterTrainingRuntime", _runtime, _trainer_values
    ),
}

#: The kinds that are jobs (the others are read with them).
JOB_KINDS = ("PyTorchJob", "TrainJob")


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
            rule = BY_NAME[finding.rule]
            document, path = in_document(finding.path)
            where = stream[document] if document is not None else loaded
            located = where.problem(path, f"{rule.code} {rule.name}: {finding.message}")
            out.append(dataclasses.replace(located, given=None, code=rule.code))
    return sorted(set(out), key=lambda p: (p.line, p.col, p.message))


# What a rule meets in a document of a shape its CRD schema refuses (a string for a list, ...).
_SHAPE_ERRORS = (TypeError, AttributeError, KeyError, IndexError, ValueError)


def _checkers(doc: Any) -> tuple[Checker, ...]:
    """The checks of a document's kind; () for a kind doctor does not check (or no mapping)."""
    if not isinstance(doc, dict):
        return ()
    api_version, kind = doc.get("apiVersion"), doc.get("kind")
    if not (isinstance(api_version, str) and isinstance(kind, str)):
        return ()  # a list or mapping there is not a kind (and not hashable)
    return CHECKERS.get((api_version, kind), ())


def _schema_findings(doc: Any) -> list[Finding]:
    """The CRD schema check's findings on ``doc`` ([] for a kind doctor does not check)."""
    checks = _checkers(doc)
    return checks[0](doc, ()) if checks else []


def doctor_stream(raw: bytes | str, file: str) -> Report:
    """Check every document of a manifest stream; raises ``SpecError`` when it cannot be read."""
    docs = load_stream(raw, file, max_depth=160)
    problems: list[Problem] = []
    jobs = 0
    skipped: list[str] = []
    for loaded in docs:
        doc = loaded.data
        kind = doc.get("kind") if isinstance(doc, dict) else None
        if _checkers(doc):
            jobs += 1 if kind in JOB_KINDS else 0
            problems += examine(loaded, docs)
        else:
            skipped.append(str(kind) if isinstance(kind, str) else "?")
    return Report(tuple(problems), jobs, tuple(skipped))


def doctor_paths(paths: Sequence[str | Path]) -> list[Report]:
    """:func:`doctor_stream` for each path (``-``: standard input).

    A path inside the working tree that a link leads out of is refused, as compiling refuses it.
    """
    reports = []
    for path in paths:
        refusal = inputs.refused(str(path), safefs.work_tree())
        if refusal is not None:
            raise SpecError([refusal])
        raw, file = read_input(path)
        reports.append(doctor_stream(raw, file))
    return reports


def kinds() -> str:
    """The kinds doctor checks, for messages."""
    return " or ".join(JOB_KINDS)
