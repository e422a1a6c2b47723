"""Losing a node mid-run, and Ctrl-C: real pods, real torch elastic, nothing left behind."""

from __future__ import annotations

import re
import signal
from pathlib import Path

import pytest
from run_helpers import TRAIN, Running, processes_with, run, spec

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("torch_installed")]

# A 1:2 job whose rendezvous notices a lost node quickly: the dead agent's heartbeat
# expires after keep_alive_interval x keep_alive_max_attempt (3) = 3 s instead of torch's
# 15 s, and the survivor stops waiting for a second node after last_call_timeout = 2 s
# (torch/distributed/elastic/agent/server/api.py). max_restarts >= 1: the survivor spends one restart.
SHRINK = """\
command: [python, {train}, --steps, "48", --step-seconds, "0.3"]
nnodes: "1:2"
nproc_per_node: 1
rdzv:
  last_call_timeout: 2
  conf: {{keep_alive_interval: "1"}}
monitor_interval: 0.5
max_restarts: 3
"""


def test_killed_pod_leaves_the_survivor_training_at_world_size_1(tmp_path: Path, marker: str) -> None:
    path = tmp_path / "shrink.yaml"
    path.write_text(spec("shrink", marker, SHRINK.format(train=TRAIN)))
    # Lose worker-1 as soon as training runs at world size 2 (rank 0 prints its first step),
    # however long the machine takes to get there: no clock in the test.
    result = run([str(path), "--kill", "shrink-worker-1@/world_size 2 restart 0/"], timeout=270)
    assert result.code == 0, result.report
    lines = result.out.splitlines()
    before = [i for i, line in enumerate(lines) if re.search(r"step \d+ loss \S+ world_size 2 restart 0$", line)]
    after = [i for i, line in enumerate(lines) if re.search(r"step \d+ loss \S+ world_size 1 restart 1$", line)]
    assert before and after and max(before) < min(after), result.report  # killed mid-run, then smaller
    assert "[shrink-worker-0] done world_size 1" in lines, result.report
    assert not any(line.startswith("[shrink-worker-1] step") for line in lines), result.report  # worker-0 is rank 0
    assert "shrink-worker-1 lost (--kill): SIGKILL to every process of the pod" in result.err, result.report
    assert "shrink-worker-1 started again" not in result.err, result.report  # a lost pod is not restarted
    assert re.search(
        r"job shrink Succeeded after [0-9.]+s: 2 pod\(s\) \(shrink-worker-0 Succeeded, shrink-worker-1 Lost\)",
        result.summary,
    ), result.report


def test_losing_the_store_host_fails_the_job_as_nothing_brings_it_back(tmp_path: Path, marker: str) -> None:
    """worker-0 hosts the c10d store: on a cluster the others lose it and wait for worker-0's name.

    Locally every pod is 127.0.0.1, so a recreated survivor used to host a new store itself and
    the job carried on: more than a cluster does (issue 31, class 7).
    """
    path = tmp_path / "shrink.yaml"
    path.write_text(spec("shrink", marker, SHRINK.format(train=TRAIN)))
    result = run([str(path), "--kill", "shrink-worker-0@/world_size 2 restart 0/"], timeout=270)
    assert result.code == 137, result.report
    assert (
        "job failed: shrink-worker-0 was lost, and its agent hosted the rendezvous store: on a cluster the other "
        "pods lose the store and then wait for shrink-worker-0's name to resolve again, until the operator recreates "
        "it on another node (minutes); nothing brings it back here"
    ) in result.err, result.report
    assert "shrink-worker-1 started again" not in result.err, result.report
    assert re.search(r"job shrink Failed after [0-9.]+s: .*; exit 137$", result.summary), result.report


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_ctrl_c_or_sigterm_deletes_every_pod_and_leaves_nothing(
    tmp_path: Path, marker: str, sig: signal.Signals, code: int
) -> None:
    path = tmp_path / "forever.yaml"
    body = f"command: [python, {TRAIN}, --steps, '100000', --step-seconds, '0.1']\nnnodes: 2\nmonitor_interval: 0.5\n"
    path.write_text(spec("forever", marker, body))
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    running = Running.start([str(path)], tmpdir=tmpdir)
    try:
        assert running.wait_for("world_size 2", timeout=90), "".join(running.out + running.err)
        assert processes_with(marker), "the pods should be running"
        running.proc.send_signal(sig)
        result = running.finish(timeout=90)
    finally:
        if running.proc.poll() is None:
            running.proc.kill()
    assert result.code == code, result.report
    assert processes_with(marker) == [], result.report  # agents, workers: all gone when run returns
    assert sorted(tmpdir.iterdir()) == [], result.report  # and their files: the pods' TMPDIRs were run's
    assert f"job interrupted: {sig.name}: every pod deleted" in result.err, result.report
    for pod in ("forever-worker-0", "forever-worker-1"):
        assert f"deleting {pod} (the job is deleted): SIGTERM, SIGKILL after 45s" in result.err, result.report
    assert re.search(rf"job forever Interrupted after [0-9.]+s: .*; exit {code}$", result.summary), result.report
