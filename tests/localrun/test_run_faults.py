"""Faults under the operator's ExitCode policy, played by ``elastic-compile run`` (issue 31).

Two pods run ``elastic_workers.fault`` (tests/entrypoint) in function mode; one worker of
``faults-worker-1`` injects the fault once (a file in the test's directory remembers it
across restarts and recreated pods). Each test asserts every pod's exit codes, what the
operator did (recreate or fail), how the job ended, and the report the pod printed.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from run_helpers import ROOT, Result, run, spec

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("torch_installed")]

WORKERS = ROOT / "tests" / "entrypoint"  # elastic_workers.py: the pods' working directory

JOB = """\
function: {{target: "elastic_workers:fault", args: ["{out}", {kind}, faults-worker-1]}}
nnodes: 2
nproc_per_node: 1
start_method: fork
monitor_interval: 0.2
max_restarts: {restarts}
rdzv: {{join_timeout: 120}}
{extra}"""


def faults_job(tmp_path: Path, marker: str, kind: str, restarts: int, extra: str = "") -> Result:
    out = tmp_path / "out"
    out.mkdir()
    path = tmp_path / "faults.yaml"
    path.write_text(spec("faults", marker, JOB.format(out=out, kind=kind, restarts=restarts, extra=extra)))
    return run([str(path), "--workdir", str(WORKERS)], timeout=400)


def exits(result: Result, pod: str) -> list[int]:
    """The exit codes of ``pod``'s processes, in order (each recreation is a new process)."""
    return [int(code) for code in re.findall(rf"\] {pod} exited with code (\d+)", result.err)]


# ---------------------------------------------------------------------------- class 1: a peer's loss


# The fault, max_restarts, then each pod's first exit code ([0]: it only exited at the end).
PEER_CASES = {
    # No restart anywhere: the killed pod exits 137, the survivor 204; both are recreated and train again.
    "oom-kill-restarts-0": ("sigkill", 0, [137], [204]),
    # The OOM-killed worker restarts in place, the survivor follows into the new round: no pod exits.
    "oom-kill-restarts-1": ("sigkill", 1, [0], [0]),
    # worker-1 is preempted (143, recreated); the survivor spends its restart and meets the new pod.
    "preemption-restarts-1": ("preempt", 1, [143], [0]),
    # No restart anywhere: both pods exit retryable and are recreated; the job trains again.
    "preemption-restarts-0": ("preempt", 0, [143], [204]),
}


# What the survivor quotes from the faulty node's own report.
REPORTED = {"preempt": "received SIGTERM: its pod is being deleted or preempted", "sigkill": "was killed by SIGKILL"}


@pytest.mark.timeout(420)
@pytest.mark.parametrize("case", list(PEER_CASES))
def test_a_peers_loss_never_fails_the_job(tmp_path: Path, marker: str, case: str) -> None:
    kind, restarts, worker_1, worker_0 = PEER_CASES[case]
    result = faults_job(tmp_path, marker, kind, restarts)
    assert result.code == 0, result.report
    assert (tmp_path / "out" / "fault-done").exists(), result.report
    # The first exits are the fault's; after a recreation, a pod may meet the old store once more (202).
    assert exits(result, "faults-worker-1")[:1] == worker_1[:1], result.report
    assert exits(result, "faults-worker-0")[:1] == worker_0[:1], result.report
    codes = exits(result, "faults-worker-1") + exits(result, "faults-worker-0")
    assert all(code == 0 or code >= 128 for code in codes), result.report  # nothing permanent: ExitCode retries
    assert 0 in codes, result.report
    if 204 in worker_0:
        assert "[faults-worker-0] elastic-launch: lost a peer: global rank" in result.out, result.report
        assert re.search(rf"\[faults-worker-0\] node [01]: (global rank [01] )?{REPORTED[kind]}", result.out), (
            result.report
        )
    assert re.search(r"job faults Succeeded after [0-9.]+s: 2 pod\(s\) ", result.summary), result.report


# ---------------------------------------------------------------------------- class 2: a crash at teardown


@pytest.mark.timeout(300)
def test_a_crash_at_teardown_ends_the_job_succeeded_without_recreation(tmp_path: Path, marker: str) -> None:
    """The issue's case: 57 recreations in 200 s, the host pod held 300 s in the exit barrier."""
    result = faults_job(tmp_path, marker, "teardown", 1)
    assert result.code == 0, result.report
    assert (tmp_path / "out" / "fault-done").exists(), result.report
    assert exits(result, "faults-worker-1") == [0] and exits(result, "faults-worker-0") == [0], result.report
    assert "recreates the pod" not in result.err and "started again" not in result.err, result.report
    assert re.search(
        r"\[faults-worker-1\] elastic-launch: succeeded; global rank 1 \(local rank 0, pid \d+\) was killed by "
        r"SIGSEGV, after every other node's workers had succeeded: taken as a crash at teardown",
        result.out,
    ), result.report
    assert "Exception raised from" not in result.out, result.report  # no C++ TCPStore trace at the end
    assert re.search(
        r"\(faults-worker-0 Succeeded, faults-worker-1 Succeeded\), 0 restart\(s\); exit 0$", result.summary
    ), result.report


# ---------------------------------------------------------------------------- class 5: a hang


@pytest.mark.timeout(300)
def test_a_hung_worker_fails_the_job_permanently(tmp_path: Path, marker: str) -> None:
    result = faults_job(tmp_path, marker, "hang", 0, extra="hang_timeout: 2\n")
    assert result.code == 124, result.report
    assert exits(result, "faults-worker-1") == [124], result.report
    # A peer's loss (204), or deleted with the failed job first (SIGTERM: 143); never called hung itself,
    # though its worker, waiting for the hung one in all_reduce, stopped renewing its heartbeat too.
    assert set(exits(result, "faults-worker-0")) <= {204, 143}, result.report
    assert "[faults-worker-0] elastic-launch: worker hung" not in result.out, result.report
    assert "[faults-worker-1] elastic-launch: worker hung: global rank" in result.out, result.report
    assert "[faults-worker-1] Fatal Python error: Aborted" in result.out, result.report  # faulthandler's stacks
    stack = r"\[faults-worker-1\]   File .*elastic_workers\.py\", line \d+ in fault"
    assert re.search(stack, result.out), result.report
    assert "job failed: faults-worker-1 failed: exit code 124 is permanent under restartPolicy ExitCode" in result.err
