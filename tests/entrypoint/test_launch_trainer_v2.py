"""Kubeflow Trainer v2: real agents with exactly the env a TrainJob pod gets, and ``--rdzv-at-master``.

Trainer v2.3's torch plugin gives container ``node`` PET_NNODES (a plain integer),
PET_NPROC_PER_NODE, PET_NODE_RANK, PET_MASTER_ADDR and PET_MASTER_PORT, and no PET_RDZV_*
(Trainer v2.3.0 pkg/runtime/framework/plugins/torch/torch.go); the compiled TrainJob adds the downward-API entries of
``contract.TRAINJOB_DOWNWARD_ENV`` and passes ``--rdzv-at-master --max-restarts N``. Here the
master address is 127.0.0.1, as every pod is this machine.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from launch_helpers import FAST, Launcher, free_port

from elastic_compile import contract as c

pytestmark = pytest.mark.slow


def trainjob_pod_env(job: str, port: int, rank: int, *, nnodes: int, nproc: int) -> dict[str, str]:
    """Pod ``rank`` of TrainJob ``job``: the plugin's five variables, then the compiler's downward API."""
    return {
        c.PET_NNODES: str(nnodes),
        c.PET_NPROC_PER_NODE: str(nproc),
        c.PET_NODE_RANK: str(rank),
        c.PET_MASTER_ADDR: "127.0.0.1",
        c.PET_MASTER_PORT: str(port),
        c.ENV_NAMESPACE: "default",
        c.ENV_JOB_NAME: job,
        c.ENV_POD_NAME: f"{job}-node-0-{rank}",
        c.ENV_POD_IP: "127.0.0.1",
    }


def read_ranks(out: Path) -> list[dict[str, Any]]:
    return sorted((json.loads(p.read_text()) for p in out.glob("allreduce.rank*.json")), key=lambda d: d["rank"])


@pytest.mark.timeout(240)
def test_two_trainjob_pods_restart_a_failed_worker_in_place(launcher: Launcher, tmp_path: Path) -> None:
    # Global rank 1 raises on attempt 0; with --max-restarts 1 both agents run a second round
    # in place (same processes, same store on node 0) and the job succeeds at world size 4.
    out, port, job = tmp_path / "out", free_port(), f"tj-{uuid.uuid4().hex[:6]}"
    out.mkdir()
    args = [*FAST, c.OPT_RDZV_AT_MASTER, "--max-restarts", "1", "--read-timeout", "120"]
    args += ["--function", "elastic_workers:fail_first_attempt", "--", str(out)]
    # Pod 1 starts first: a client waits for node 0's store (up to read_timeout), it does not host.
    agents = [
        launcher.start(args, trainjob_pod_env(job, port, rank, nnodes=2, nproc=2), name=f"node-{rank}")
        for rank in (1, 0)
    ]
    for agent in agents:
        assert agent.wait(200) == 0, agent.stderr
    ranks = read_ranks(out)
    assert [(r["rank"], r["world_size"], r["sum"]) for r in ranks] == [(i, 4, 10.0) for i in range(4)]
    # The second round is a restart in place: the failing agent spent its one restart (the
    # healthy one may restart for free when it sees the other waiting, torch/distributed/elastic/agent/server/api.py, or
    # spend its own when its workers hit the dead peer first).
    assert {r["restart_count"] for r in ranks} <= {0, 1} and ranks[1]["restart_count"] == 1
    node1, node0 = agents
    assert f"run id default.{job}: nnodes 2, 2 worker(s) per node, c10d rendezvous at 127.0.0.1:{port}" in node0.stderr
    assert "ValueError" not in node0.stderr and "injected failure on attempt 0" in node0.stderr + node1.stderr


@pytest.mark.timeout(120)
def test_trainjob_pod_without_the_flag_is_a_usage_error_with_the_fix(launcher: Launcher) -> None:
    env = trainjob_pod_env("tj", free_port(), 0, nnodes=2, nproc=1)
    agent = launcher.run(["--", "true"], env, timeout=60)
    assert agent.proc.returncode == c.EXIT_USAGE
    assert "pass --rdzv-at-master" in agent.stderr
