"""The operator's restart rules, played by ``run`` with real pods (training-operator v1.9.4
pkg/controller.v1/common/pod.go).

Single-pod jobs whose command fails at once keep these fast: each pod start costs the
agent's torch import (about 2 s here), nothing more.
"""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from run_helpers import run, spec

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("torch_installed")]

FAIL = ["python", "-c", "print('attempt'); raise SystemExit(1)"]


def _job(tmp_path: Path, marker: str, name: str, command: list[str], extra: str = "") -> Path:
    path = tmp_path / f"{name}.yaml"
    body = f"command: {json.dumps(command)}\nmax_restarts: 0\nmonitor_interval: 0.2\n{extra}"
    path.write_text(spec(name, marker, body))
    return path


def _attempts(out: str, pod: str) -> int:
    return out.splitlines().count(f"[{pod}] attempt")


@pytest.mark.parametrize(
    ("policy", "reason"),
    [
        ("ExitCode", "exit code 1 is permanent under restartPolicy ExitCode (1-127)"),
        ("Never", "restartPolicy Never: a failed pod fails the job"),
    ],
)
def test_user_error_fails_the_job_without_restart(tmp_path: Path, marker: str, policy: str, reason: str) -> None:
    path = _job(tmp_path, marker, "usererr", FAIL, f"restart_policy: {policy}\nrun_policy: {{backoff_limit: 3}}\n")
    result = run([str(path)], timeout=120)
    assert result.code == 1, result.report  # the failing pod's exit code
    assert _attempts(result.out, "usererr-worker-0") == 1, result.report
    assert "started again" not in result.err, result.report
    assert f"job failed: usererr-worker-0 failed: {reason}" in result.err, result.report
    summary = r"job usererr Failed after [0-9.]+s: 1 pod\(s\) \(usererr-worker-0 Failed\), 0 restart\(s\); exit 1$"
    assert re.search(summary, result.summary), result.report


def test_on_failure_restarts_in_place_until_backoff_limit(tmp_path: Path, marker: str) -> None:
    path = _job(tmp_path, marker, "crashloop", FAIL, "restart_policy: OnFailure\nrun_policy: {backoff_limit: 2}\n")
    result = run([str(path)], timeout=120)
    assert result.code == 1, result.report
    # The operator fails the job once restarts >= backoffLimit: the first restart runs, the
    # second reaches the limit (core/job.go PastBackoffLimit).
    assert _attempts(result.out, "crashloop-worker-0") == 2, result.report
    assert "crashloop-worker-0 restarts in place in 1s (restartPolicy OnFailure; restart 1)" in result.err
    assert "backoffLimit 2 reached: the kubelet's restart count is now 2" in result.err, result.report
    assert re.search(r"\(crashloop-worker-0 Failed\), 2 restart\(s\); exit 1$", result.summary), result.report


def test_exit_code_policy_recreates_a_pod_that_exits_retryable(tmp_path: Path, marker: str) -> None:
    flag = tmp_path / "first-attempt-done"
    # The first attempt's worker dies of SIGTERM: elastic-launch exits 143, which ExitCode retries.
    code = (
        "import os, pathlib, signal\n"
        f"flag = pathlib.Path({str(flag)!r})\n"
        "first = not flag.exists()\n"
        "flag.touch()\n"
        "print('attempt', flush=True)\n"
        "if first:\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
    )
    path = _job(tmp_path, marker, "preempted", ["python", "-c", code], "restart_policy: ExitCode\n")
    result = run([str(path)], timeout=120)
    assert result.code == 0, result.report
    assert _attempts(result.out, "preempted-worker-0") == 2, result.report
    assert "preempted-worker-0 exited with code 143" in result.err, result.report
    assert "exit code 143 is retryable (>= 128): the operator recreates the pod" in result.err, result.report
    assert re.search(r"\(preempted-worker-0 Succeeded\), 1 restart\(s\); exit 0$", result.summary), result.report


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port something else listens on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        s.listen()
        yield int(s.getsockname()[1])


def test_busy_rendezvous_port_is_replaced_by_a_free_one(tmp_path: Path, marker: str, busy_port: int) -> None:
    path = _job(
        tmp_path, marker, "twopods", ["python", "-c", "print('hello')"], f"nnodes: 2\nrdzv: {{port: {busy_port}}}\n"
    )
    # In the pods' private network nothing else listens; in this machine's (--host-network) the port moves.
    result = run([str(path)], timeout=120)
    assert result.code == 0, result.report
    assert "is in use on this machine" not in result.err and f"PET_RDZV_ENDPOINT=127.0.0.1:{busy_port}" in result.err
    result = run([str(path), "--host-network"], timeout=120)
    assert result.code == 0, result.report
    found = re.search(rf"rendezvous port {busy_port} is in use on this machine; using (\d+)", result.err)
    assert found, result.report
    assert f"PET_RDZV_ENDPOINT=127.0.0.1:{found.group(1)}" in result.err, result.report
    assert sorted(line for line in result.out.splitlines() if "hello" in line) == [
        "[twopods-worker-0] hello",
        "[twopods-worker-1] hello",
    ], result.report
    assert "(twopods-worker-0 Succeeded, twopods-worker-1 Succeeded)" in result.summary, result.report
