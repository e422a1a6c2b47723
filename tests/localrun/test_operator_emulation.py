"""What ``kubeflow.pods`` gives a pod beyond the operator's env: the kubelet's $(VAR) expansion and local addresses."""

from __future__ import annotations

from typing import Any

import pytest

from elastic_compile.localrun.kubeflow import expand, pods


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("$(A)", "1"),
        ("x$(A)y$(B)z", "x1y2z"),
        ("$$(A)", "$(A)"),  # $$ escapes
        ("$$$(A)", "$1"),
        ("$(MISSING)", "$(MISSING)"),  # unknown: kept as written
        ("$(A", "$(A"),  # unclosed: kept
        ("$A", "$A"),  # only $(...) is a reference
        ("cost: 5$", "cost: 5$"),
        ("$()", "$()"),
    ],
)
def test_expand_follows_kubernetes(text: str, expected: str) -> None:
    assert expand(text, {"A": "1", "B": "2"}) == expected


def _job(env: list[dict[str, Any]], args: list[str], replicas: dict[str, Any] | None = None) -> dict[str, Any]:
    template = {
        "spec": {"containers": [{"name": "pytorch", "image": "i:1", "command": ["run"], "args": args, "env": env}]}
    }
    specs = replicas or {"Worker": {"replicas": 2, "template": template}}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "j"},
            "spec": {"elasticPolicy": {"minReplicas": 1, "maxReplicas": 2}, "pytorchReplicaSpecs": specs}}  # fmt: skip


def test_env_values_see_earlier_entries_and_args_see_all() -> None:
    env = [
        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "OUT", "value": "/out/$(POD)/$(LATER)"},  # LATER is defined after: not expanded
        {"name": "LATER", "value": "x"},
        {"name": "EMPTY"},  # no value at all is "" in Kubernetes
    ]
    first = pods(_job(env, ["--out", "$(OUT)", "--nodes", "$(PET_NNODES)", "--literal", "$$(POD)"]))[0]
    assert first.env["OUT"] == "/out/j-worker-0/$(LATER)"
    assert first.env["EMPTY"] == ""
    assert first.argv == ("run", "--out", "/out/j-worker-0/$(LATER)", "--nodes", "1:2", "--literal", "$(POD)")
    assert first.unresolved == ()


def test_master_address_is_local_and_job_role_is_set() -> None:
    template = {"spec": {"containers": [{"name": "pytorch", "image": "i:1", "command": ["run"]}]}}
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "m"},
           "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": template},
                                            "Worker": {"replicas": 1, "template": template}}}}  # fmt: skip
    master, worker = pods(job)
    assert worker.env["MASTER_ADDR"] == worker.env["PET_MASTER_ADDR"] == "127.0.0.1"
    assert pods(job, local=False)[1].env["MASTER_ADDR"] == "m-master-0"
    assert master.labels["training.kubeflow.org/job-role"] == "master"
    assert "training.kubeflow.org/job-role" not in worker.labels


def test_secret_refs_from_lookup() -> None:
    env = [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
           {"name": "URL", "value": "https://$(TOKEN)@host"}]  # fmt: skip
    with_lookup = pods(_job(env, []), lookup={"TOKEN": "t0k"})[0]
    assert (with_lookup.env["URL"], with_lookup.looked_up, with_lookup.unresolved) == (
        "https://t0k@host",
        ("TOKEN",),
        (),
    )
    without = pods(_job(env, []))[0]
    assert ("TOKEN" in without.env, without.unresolved) == (False, ("TOKEN",))
    assert without.env["URL"] == "https://$(TOKEN)@host"


def test_standalone_is_rendered_as_the_operator_does() -> None:
    job = _job([], [])
    job["spec"]["elasticPolicy"]["standalone"] = True
    assert pods(job)[0].env["PET_STANDALONE"] == ""
