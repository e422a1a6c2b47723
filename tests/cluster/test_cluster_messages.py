"""Class 8 of issue 10: messages that are true.

The operator sets MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK only beside a Master replica,
which elastic-compile never emits (training-operator v1.9.4 pkg/controller.v1/pytorch/master.go); torch elastic sets
them for
every worker. So on the training container they are dead values (rejected, saying why), and
on a sidecar they are the user's own. Lint warnings come in file order, like errors, and
EC108 says what the namespace that fired really costs.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cluster_helpers import BASE, compile_cli

TORCH_SETS = "torch elastic sets it for every worker process and replaces this value"


@pytest.mark.parametrize("name", ["MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK"])
def test_worker_env_on_the_training_container_is_rejected_for_the_true_reason(tmp_path: Path, name: str) -> None:
    run = compile_cli(tmp_path, BASE + f"env: {{{name}: '1'}}\n")
    assert run.status == 2 and run.out == ""
    assert run.errors == [
        f"s.yaml:4:7: env.{name}: {TORCH_SETS}, so it never reaches your code (set topology through nnodes, "
        f"nproc_per_node and rdzv instead) (given: {name})"
    ]
    assert "operator" not in run.err  # the operator does not set it in our layouts


def test_worker_env_in_the_pod_template_training_container_too(tmp_path: Path) -> None:
    text = (
        BASE
        + "pod_template:\n  spec:\n    containers:\n      - name: pytorch\n        env: [{name: RANK, value: '0'}]\n"
    )
    run = compile_cli(tmp_path, text)
    assert run.status == 2
    assert run.errors == [
        f"s.yaml:8:22: pod_template.spec.containers[0].env[0].name: {TORCH_SETS}, so it never reaches your code "
        "(set topology through nnodes, nproc_per_node and rdzv instead) (given: RANK)"
    ]


def test_engine_env_keeps_its_own_reason(tmp_path: Path) -> None:
    # PET_NNODES: both engines set it (tests/engines/test_engine_env.py has the per-generation rules).
    run = compile_cli(tmp_path, BASE + "env: {PET_NNODES: '2'}\n")
    assert run.status == 2
    assert len(run.errors) == 1
    assert "the training operator v1 sets it (every pod) and Trainer v2's torch plugin sets it" in run.errors[0]
    run = compile_cli(tmp_path, BASE + "env: {PYTHONUNBUFFERED: '0'}\n")
    assert run.status == 2
    assert "the training operator v1 appends PYTHONUNBUFFERED=1 to every container after yours" in run.errors[0]


def test_worker_env_on_a_sidecar_is_the_sidecars_own(tmp_path: Path) -> None:
    text = (
        BASE + "pod_template:\n  spec:\n    containers:\n      - name: metrics\n        image: ghcr.io/x/m:1\n"
        "        env: [{name: MASTER_ADDR, value: prometheus}, {name: RANK, value: '3'}]\n"
    )
    run = compile_cli(tmp_path, text)
    assert run.status == 0, run.err
    sidecars = [c for c in run.pod.get("initContainers", []) + run.pod["containers"] if c["name"] == "metrics"]
    assert sidecars[0]["env"] == [{"name": "MASTER_ADDR", "value": "prometheus"}, {"name": "RANK", "value": "3"}]


def test_lint_warnings_come_in_file_order(tmp_path: Path) -> None:
    # EC105 (line 2) is a later rule than EC101 (line 5), but comes first in the file.
    text = BASE.replace("y:1.0", "y:latest") + "resources: {requests: {gpu: 8}}\nnproc_per_node: 4\n"
    run = compile_cli(tmp_path, text)
    assert run.status == 0
    positions = [tuple(int(x) for x in line.split(":")[1:3]) for line in run.errors]
    assert [line.split(": ")[2].split()[1] for line in run.errors] == ["EC105", "EC101"]
    assert positions == sorted(positions)


@pytest.mark.parametrize(
    ("field", "says", "never"),
    [
        ("hostNetwork", "port 23456 (the rendezvous) must be free on every node", "IPC"),
        ("hostIPC", "System V IPC and POSIX message queues", "port"),
        ("hostPID", "see, and can signal, every process on the node", "port"),
    ],
)
def test_ec108_says_what_the_namespace_that_fired_costs(tmp_path: Path, field: str, says: str, never: str) -> None:
    run = compile_cli(tmp_path, BASE + f"pod_template:\n  spec:\n    {field}: true\n")
    assert run.status == 0
    [line] = [e for e in run.errors if "EC108" in e]
    assert says in line and never not in line, line


def test_ec108_names_the_port_in_use(tmp_path: Path) -> None:
    run = compile_cli(
        tmp_path, BASE + "nnodes: 2\nrdzv: {port: 29400}\npod_template:\n  spec:\n    hostNetwork: true\n"
    )
    [line] = [e for e in run.errors if "EC108" in e]
    assert "port 29400 (the rendezvous)" in line
