"""Our re-implementation of Trainer's webhook and CEL rules, held against the real ones.

``tests/test_trainjob_target.py`` breaks a valid TrainJob and TrainingRuntime one rule at a
time (``JOB_BREAKS``, ``RUNTIME_BREAKS``) and asserts our checks refuse each. Here each broken
object goes to the real API server as a server-side dry run (schema, CEL, Trainer's webhooks).
Every rule is either one the server enforces too (``SERVER_REFUSES``) or a deliberate
strictness of ours (``STRICTER``, each with what the real engines do instead, as seen here and
listed in docs/trainer-v2.md, read from there). A rule in neither fails the test, so a new rule
must be judged against the server.
"""

from __future__ import annotations

import copy
import time

import pytest
import refusals
import test_trainjob_target as rules
from kube_helpers import REPO, ApplyError, Cluster, apply

#: Rules the real server enforces too (the dry run is refused).
SERVER_REFUSES = frozenset({
    "reserved env", "manager without domain", "manager twice", "env on node", "nproc keyword", "deadline",
    "runtime kind", "two replicas", "no node container", "two frameworks", "inject into node",
})  # fmt: skip

#: Rules where we refuse what the server accepts: the table of docs/trainer-v2.md's "Checks", which
#: says what the real engines then do with each (its ids are the cases' names, dashed).
STRICTER = frozenset(
    rule.replace("-", " ") for rule in refusals.documented_strictness(REPO / "docs" / "trainer-v2.md", "## Checks")
)


def test_every_rule_is_judged() -> None:
    judged = SERVER_REFUSES | set(STRICTER)
    assert judged == set(rules.JOB_BREAKS) | set(rules.RUNTIME_BREAKS)
    assert not SERVER_REFUSES & set(STRICTER)


def _verdict(cluster: Cluster, namespace: str, doc: dict[str, object]) -> str | None:
    try:
        apply(cluster, doc, namespace=namespace, dry_run=True)
    except ApplyError as e:
        return str(e)
    return None


def _accepted_once_seen(cluster: Cluster, namespace: str, job: dict[str, object], polls: int = 50) -> None:
    """Wait until the unbroken job passes: Trainer's webhook looks its runtime up in the manager's
    informer cache, which sees a runtime created just before a moment later (under load, seconds)."""
    refused: str | None = None
    for _ in range(polls):
        refused = _verdict(cluster, namespace, copy.deepcopy(job))
        if refused is None:
            return
        time.sleep(0.2)
    raise AssertionError(f"the unbroken job is refused: {refused}")


def _assert_judged(case: str, refused: str | None) -> None:
    """The server's verdict on a broken object (its refusal, or None) is the one the tables give ``case``."""
    if case in SERVER_REFUSES:
        assert refused is not None, f"{case}: the server accepts it; add it to docs/trainer-v2.md's table"
    else:
        assert refused is None, f"{case}: the server refuses it too ({refused}); move it to SERVER_REFUSES"


@pytest.mark.parametrize("case", sorted(rules.JOB_BREAKS))
def test_trainjob_rule_on_the_server(cluster: Cluster, dry_namespace: str, case: str) -> None:
    runtime, job = rules._golden("trainjob-sidecar-runtime")
    apply(cluster, runtime, namespace=dry_namespace)
    _accepted_once_seen(cluster, dry_namespace, job)
    rules.JOB_BREAKS[case][0](job)
    _assert_judged(case, _verdict(cluster, dry_namespace, job))


@pytest.mark.parametrize("case", sorted(rules.RUNTIME_BREAKS))
def test_runtime_rule_on_the_server(cluster: Cluster, dry_namespace: str, case: str) -> None:
    runtime, _ = rules._golden("trainjob-sidecar-runtime")
    assert _verdict(cluster, dry_namespace, copy.deepcopy(runtime)) is None
    rules.RUNTIME_BREAKS[case][0](runtime)
    _assert_judged(case, _verdict(cluster, dry_namespace, runtime))
