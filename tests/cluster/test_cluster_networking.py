"""Class 5 of issue 10: networking and scheduling semantics.

* hostNetwork: the pod gets the node's DNS unless dnsPolicy is ClusterFirstWithHostNet, and
  <job>-worker-0 (the c10d rendezvous) then does not resolve: the compiler sets it, and a
  dnsPolicy that cannot work is an error;
* the operator points the rendezvous at the port named pytorchjob-port: rdzv.port and a
  declared pytorchjob-port that disagree are one error, and a declared one alone is used;
* a single-node job has no elasticPolicy: rendezvous settings it ignores are EC115 warnings
  (never dropped silently), and rdzv.id is passed to elastic-launch;
* gang scheduling of an elastic range: minAvailable defaults to nnodes MIN;
* Kueue admits by the kueue.x-k8s.io/queue-name label (kueue.queue), and MultiKueue by
  runPolicy.managedBy.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cluster_helpers import BASE, compile_cli

HOST = "pod_template:\n  spec:\n    hostNetwork: true\n"


def test_host_network_gets_the_dns_policy_that_resolves_worker_0(tmp_path: Path) -> None:
    run = compile_cli(tmp_path, BASE + "nnodes: 2\n" + HOST)
    assert run.status == 0
    assert run.pod["hostNetwork"] is True and run.pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    explain = compile_cli(tmp_path, BASE + "nnodes: 2\n" + HOST, "--explain").out
    assert (
        "# dnsPolicy: ClusterFirstWithHostNet: with hostNetwork, ClusterFirst would give the pod the node's DNS"
        in explain
    )


@pytest.mark.parametrize("policy", ["ClusterFirst", "Default"])
def test_a_dns_policy_that_cannot_resolve_worker_0_is_an_error(tmp_path: Path, policy: str) -> None:
    run = compile_cli(tmp_path, BASE + "nnodes: 1:3\n" + HOST + f"    dnsPolicy: {policy}\n")
    assert run.status == 2
    [line] = run.errors
    assert line.startswith(f"s.yaml:8:16: pod_template.spec.dnsPolicy: with hostNetwork, dnsPolicy {policy} gives")
    assert "t-worker-0 (the rendezvous) does not resolve; use ClusterFirstWithHostNet" in line


@pytest.mark.parametrize(
    "extra",
    [
        "nnodes: 2\n" + HOST + "    dnsPolicy: ClusterFirstWithHostNet\n",
        "nnodes: 2\nrdzv: {host: 10.0.0.5}\n" + HOST + "    dnsPolicy: Default\n",
    ],
)
def test_dns_policies_that_work_with_host_network(tmp_path: Path, extra: str) -> None:
    run = compile_cli(tmp_path, BASE + extra)
    assert run.status == 0, run.err


PORT = (
    "pod_template:\n  spec:\n    containers:\n      - name: pytorch\n"
    "        ports: [{name: pytorchjob-port, containerPort: 29500}]\n"
)


def test_rdzv_port_and_a_declared_pytorchjob_port_that_disagree(tmp_path: Path) -> None:
    run = compile_cli(tmp_path, BASE + "nnodes: 2\nrdzv: {port: 29400}\n" + PORT)
    assert run.status == 2
    assert run.errors == [
        "s.yaml:10:56: pod_template.spec.containers[0].ports[0].containerPort: the operator points the rendezvous "
        "at the port named pytorchjob-port, and rdzv.port says 29400; give one of them (given: 29500)"
    ]


def test_a_declared_pytorchjob_port_alone_is_the_rendezvous_port(tmp_path: Path) -> None:
    run = compile_cli(tmp_path, BASE + "nnodes: 2\n" + PORT)
    assert run.status == 0, run.err
    assert run.job["spec"]["elasticPolicy"]["rdzvPort"] == 29500
    assert run.training["ports"] == [{"name": "pytorchjob-port", "containerPort": 29500}]  # not declared twice
    assert "rdzv.port: 29500" in compile_cli(tmp_path, BASE + "nnodes: 2\n" + PORT, "--explain").out
    agreeing = compile_cli(tmp_path, BASE + "nnodes: 2\nrdzv: {port: 29500}\n" + PORT)
    assert (agreeing.status, agreeing.err) == (0, "")


@pytest.mark.parametrize(("rdzv", "fields"), [("{host: etcd.example, backend: etcd}", ["host", "backend"]),
                                                ("{port: 29400}", ["port"]), ("{backend: c10d}", [])])  # fmt: skip
def test_rendezvous_settings_a_single_node_ignores_are_warnings(tmp_path: Path, rdzv: str, fields: list[str]) -> None:
    run = compile_cli(tmp_path, BASE + f"rdzv: {rdzv}\n")
    assert run.status == 0 and run.out
    assert [line.split(": ")[1] for line in run.errors] == [f"rdzv.{f}" for f in fields]
    assert all("warning EC115" in line and "is ignored with nnodes 1" in line for line in run.errors)
    strict = compile_cli(tmp_path, BASE + f"rdzv: {rdzv}\n", "--strict")
    assert strict.status == (2 if fields else 0)


def test_a_single_node_passes_rdzv_id_to_elastic_launch(tmp_path: Path) -> None:
    run = compile_cli(tmp_path, BASE + "rdzv: {id: exp-42}\n")
    assert (run.status, run.err) == (0, "")
    args = run.training["args"]
    assert args[args.index("--rdzv-id") + 1] == "exp-42"


def test_an_elastic_range_gangs_on_its_minimum(tmp_path: Path) -> None:
    run = compile_cli(tmp_path, BASE + "nnodes: 2:8\n")
    assert run.job["spec"]["runPolicy"]["schedulingPolicy"] == {"minAvailable": 2}
    explain = compile_cli(tmp_path, BASE + "nnodes: 2:8\n", "--explain").out
    assert "run_policy.scheduling.min_available: 2" in explain
    assert "# derived: nnodes MIN, 2: a gang of every replica (8) would keep a shrunk job pending" in explain
    queued = compile_cli(tmp_path, BASE + "nnodes: 2:8\nrun_policy: {scheduling: {queue: gpu-pool}}\n")
    assert queued.job["spec"]["runPolicy"]["schedulingPolicy"] == {"minAvailable": 2, "queue": "gpu-pool"}
    chosen = compile_cli(tmp_path, BASE + "nnodes: 2:8\nrun_policy: {scheduling: {min_available: 4}}\n")
    assert chosen.job["spec"]["runPolicy"]["schedulingPolicy"] == {"minAvailable": 4}


def test_a_fixed_size_keeps_the_operators_gang(tmp_path: Path) -> None:
    run = compile_cli(tmp_path, BASE + "nnodes: 4\n")
    assert "schedulingPolicy" not in run.job["spec"]["runPolicy"]


def test_kueue_admits_by_the_queue_name_label(tmp_path: Path) -> None:
    run = compile_cli(tmp_path, BASE + "nnodes: 2\nkueue: {queue: team-a, priority_class: high}\nlabels: {team: a}\n")
    assert (run.status, run.err) == (0, "")
    assert run.job["metadata"]["labels"] == {
        "team": "a",
        "kueue.x-k8s.io/queue-name": "team-a",
        "kueue.x-k8s.io/priority-class": "high",
    }
    assert "queue" not in run.job["spec"]["runPolicy"].get("schedulingPolicy", {})


@pytest.mark.parametrize(
    ("text", "where", "message"),
    [
        ("kueue: {queue: Team_A}\n", "kueue.queue", "a lower-case name of at most 63"),
        ("kueue: {queue: a}\nlabels: {kueue.x-k8s.io/queue-name: b}\n", 'labels["kueue.x-k8s.io/queue-name"]',
         "set by kueue; give it in one place"),
        ("run_policy: {managed_by: kueue.x-k8s.io/multikueue}\n", "run_policy.managed_by",
         "MultiKueue dispatches only jobs queued in Kueue: set kueue.queue"),
        ("run_policy: {managed_by: kueue}\n", "run_policy.managed_by", "must be one of"),
    ],
)  # fmt: skip
def test_kueue_mistakes_are_located(tmp_path: Path, text: str, where: str, message: str) -> None:
    run = compile_cli(tmp_path, BASE + text)
    assert run.status == 2
    assert any(f": {where}: " in line and message in line for line in run.errors), run.err


def test_multikueue_sets_managed_by(tmp_path: Path) -> None:
    run = compile_cli(tmp_path, BASE + "kueue: {queue: q}\nrun_policy: {managed_by: kueue.x-k8s.io/multikueue}\n")
    assert (run.status, run.err) == (0, "")
    assert run.job["spec"]["runPolicy"]["managedBy"] == "kueue.x-k8s.io/multikueue"


def test_a_trainjob_is_queued_by_the_same_labels(tmp_path: Path) -> None:
    run = compile_cli(tmp_path, BASE + "nnodes: 2\nkueue: {queue: team-a, priority_class: high}\n", "-t", "trainjob")
    assert (run.status, run.err) == (0, "")
    [job] = [d for d in run.docs if d["kind"] == "TrainJob"]
    assert job["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": "team-a", "kueue.x-k8s.io/priority-class": "high"}


def test_a_trainjob_has_no_managed_by_of_ours_and_a_derived_gang_is_no_error(tmp_path: Path) -> None:
    managed = "kueue: {queue: q}\nrun_policy: {managed_by: kueue.x-k8s.io/multikueue}\n"
    run = compile_cli(tmp_path, BASE + "nnodes: 2\n" + managed, "-t", "trainjob")
    assert run.status == 2
    assert any(": run_policy.managed_by: runPolicy.managedBy is the PyTorchJob's" in e for e in run.errors), run.err
    # An elastic range derives min_available for the PyTorchJob: under -t trainjob it is no error (issue 30).
    ranged = compile_cli(tmp_path, BASE + "nnodes: 2:8\n", "-t", "trainjob")
    assert (ranged.status, ranged.err) == (0, ""), ranged.err
