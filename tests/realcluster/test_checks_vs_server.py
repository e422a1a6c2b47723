"""Our re-implementation of Trainer's webhook and CEL rules, held against the real ones.

``tests/test_trainjob_target.py`` breaks a valid TrainJob and TrainingRuntime one rule at a
time (``JOB_BREAKS``, ``RUNTIME_BREAKS``) and asserts our checks refuse each. Here each broken
object goes to the real API server as a server-side dry run (schema, CEL, Trainer's webhooks).
Every rule is either one the server enforces too (``SERVER_REFUSES``) or a deliberate
strictness of ours (``STRICTER``, each with what the real engines do instead, as seen here and
listed in docs/trainer-v2.md). A rule in neither table fails the test, so a new rule must be
judged against the server.
"""

from __future__ import annotations

import copy

import pytest
import test_trainjob_target as rules
from kube_helpers import ApplyError, Cluster, apply

#: Rules the real server enforces too (the dry run is refused).
SERVER_REFUSES = frozenset({
    "reserved env", "manager without domain", "manager twice", "env on node", "nproc keyword", "deadline",
    "runtime kind", "two replicas", "no node container", "two frameworks", "inject into node",
})  # fmt: skip

#: Rules where we refuse what the server accepts: what the real engines then do.
STRICTER = {
    "env reference": "accepted; the plugin appends PET_* after trainer.env, so $(PET_...) stays unexpanded",
    "long name": "accepted; JobSet's pod names then pass 63 characters and the Job's pods cannot be created",
    "new container": "accepted; Trainer adds the container to the JobSet, whose Job then needs all of a container",
    "unknown job": "accepted; Trainer adds a replicated job of that name, whose Job then has no image",
    "no trainer": "accepted; the torch plugin then injects no PET_* variables",
    "zero nodes": "accepted; the JobSet runs no pod and completes successfully at once",
    "no framework label": "accepted; the Kubeflow SDK lists runtimes by this label",
    "regular sidecar": "accepted; a regular sidecar keeps the pod Running after training, the job never completes",
    "subdomain": "accepted; PET_MASTER_ADDR still ends in .<TrainJob name>, which no longer resolves",
    "ttl": "accepted; a JobSet TTL makes Trainer v2.3 recreate a failed job without end (kubeflow/trainer#3779)",
}


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


def _assert_judged(case: str, refused: str | None) -> None:
    """The server's verdict on a broken object (its refusal, or None) is the one the tables give ``case``."""
    if case in SERVER_REFUSES:
        assert refused is not None, f"{case}: the server accepts it; move it to STRICTER with what then happens"
    else:
        assert refused is None, f"{case}: the server refuses it too ({refused}); move it to SERVER_REFUSES"


@pytest.mark.parametrize("case", sorted(rules.JOB_BREAKS))
def test_trainjob_rule_on_the_server(cluster: Cluster, dry_namespace: str, case: str) -> None:
    runtime, job = rules._golden("trainjob-sidecar-runtime")
    apply(cluster, runtime, namespace=dry_namespace)
    assert _verdict(cluster, dry_namespace, copy.deepcopy(job)) is None  # the unbroken job passes
    rules.JOB_BREAKS[case][0](job)
    _assert_judged(case, _verdict(cluster, dry_namespace, job))


@pytest.mark.parametrize("case", sorted(rules.RUNTIME_BREAKS))
def test_runtime_rule_on_the_server(cluster: Cluster, dry_namespace: str, case: str) -> None:
    runtime, _ = rules._golden("trainjob-sidecar-runtime")
    assert _verdict(cluster, dry_namespace, copy.deepcopy(runtime)) is None
    rules.RUNTIME_BREAKS[case][0](runtime)
    _assert_judged(case, _verdict(cluster, dry_namespace, runtime))
