"""``elastic-compile doctor``: the known traps in manifests we did not write.

Input is any manifest stream (a file with several documents, ``kubectl kustomize`` output
on standard input); each PyTorchJob in it is checked against the webhook's rules, the
runtime traps and the rules hand-written jobs break (:mod:`elastic_compile.targets.doctor`,
``targets/<kind>/doctor.py``). Every finding is one located line with a stable code::

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

from elastic_compile.core.errors import Problem
from elastic_compile.core.loader import Loaded, load_stream, read_input
from elastic_compile.targets.checks import Finding


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
    Rule("DR007", "name-too-long", "<name>-worker-<index> must fit 63 characters, or the pods and services are "
         "never created"),
    Rule("DR008", "no-shm", "without a memory-backed /dev/shm, DataLoader workers and NCCL die with 'Bus error'"),
    Rule("DR009", "launcher-overrides", "a launcher flag beats the PET_* the operator injects: the pods disagree with "
         "the manifest"),
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
)  # fmt: skip
BY_NAME: Mapping[str, Rule] = {rule.name: rule for rule in RULES}


def _pytorchjob(job: Mapping[str, Any]) -> list[Finding]:
    from elastic_compile.targets.pytorchjob.doctor import findings

    return findings(job)


def _pytorchjob_schema(job: Mapping[str, Any]) -> list[Finding]:
    from elastic_compile.schema import compact
    from elastic_compile.targets.pytorchjob import API_VERSION, KIND, SCHEMA_FILE

    schema = compact.load(SCHEMA_FILE)
    root = schema.root(API_VERSION, KIND)
    if root is None:  # pragma: no cover - the shipped schema has this root
        return []
    body = {k: v for k, v in job.items() if k != "status"}
    return [Finding("schema", loc, message) for loc, message in schema.problems(body, root)]


#: (apiVersion, kind) -> the checks that read it.
CHECKERS: Mapping[tuple[str, str], tuple[Callable[[Mapping[str, Any]], list[Finding]], ...]] = {
    ("kubeflow.org/v1", "PyTorchJob"): (_pytorchjob_schema, _pytorchjob),
}


@dataclass(frozen=True)
class Report:
    """What doctor found in one input: located lines, and how many jobs it read."""

    problems: tuple[Problem, ...]
    jobs: int
    skipped: tuple[str, ...]  # kinds of the documents it does not check


def examine(loaded: Loaded) -> list[Problem]:
    """The findings of one document as located lines (``DRxxx name: message``); [] for kinds it does not check."""
    doc = loaded.data
    if not isinstance(doc, dict):
        return []
    checks = CHECKERS.get((doc.get("apiVersion"), doc.get("kind")))  # type: ignore[arg-type]
    out: list[Problem] = []
    for check in checks or ():
        for finding in check(doc):
            rule = BY_NAME[finding.rule]
            located = loaded.problem(finding.path, f"{rule.code} {rule.name}: {finding.message}")
            out.append(dataclasses.replace(located, given=None))
    return sorted(set(out), key=lambda p: (p.line, p.col, p.message))


def doctor_stream(raw: bytes | str, file: str) -> Report:
    """Check every document of a manifest stream; raises ``SpecError`` when it cannot be read."""
    docs = load_stream(raw, file, max_depth=160)
    problems: list[Problem] = []
    jobs = 0
    skipped: list[str] = []
    for loaded in docs:
        doc = loaded.data
        key = (doc.get("apiVersion"), doc.get("kind")) if isinstance(doc, dict) else None
        if key in CHECKERS:
            jobs += 1
            problems += examine(loaded)
        else:
            kind = doc.get("kind") if isinstance(doc, dict) else None
            skipped.append(str(kind) if isinstance(kind, str) else "?")
    return Report(tuple(problems), jobs, tuple(skipped))


def doctor_paths(paths: Sequence[str | Path]) -> list[Report]:
    """:func:`doctor_stream` for each path (``-``: standard input)."""
    reports = []
    for path in paths:
        raw, file = read_input(path)
        reports.append(doctor_stream(raw, file))
    return reports


def kinds() -> str:
    """The kinds doctor checks, for messages."""
    return " and ".join(sorted({kind for _v, kind in CHECKERS}))
