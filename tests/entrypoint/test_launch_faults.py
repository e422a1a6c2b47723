"""The faults clusters produce, on real ``elastic-launch`` agents (issue 31): gloo, c10d on 127.0.0.1.

Two agents play two pods (``pod-a`` hosts the rendezvous store, ``pod-b`` holds global rank
1), each with its own termination log. A worker of one pod injects the fault
(``elastic_workers.fault``): an OOM kill, a preemption, an exit of its own, a crash at
teardown, a hang. Each test asserts every agent's exit code (what the operator's ExitCode
policy then does: 1-127 fails the job, 128 and above recreates the pod) and the report in
its termination log. A preemption, a crash at teardown and a hang, with what the operator
does next, are played by ``elastic-compile run`` in tests/localrun/test_run_faults.py.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import uuid
from pathlib import Path

import pytest
from launch_helpers import FAST, PYTHON, Agent, Launcher, free_port, wait_for

from elastic_compile import contract as c

pytestmark = pytest.mark.slow

# A C++ stack trace that torch's TCPStore client printed when its store's host had gone.
CPP_TRACE = "Exception raised from"


def pod_env(port: int, run_id: str, pod: str, ip: str) -> dict[str, str]:
    """What the operator and the downward API give one pod of a 2-node job."""
    return {
        c.PET_NNODES: "2",
        c.PET_NPROC_PER_NODE: "1",
        c.PET_RDZV_BACKEND: "c10d",
        c.PET_RDZV_ENDPOINT: f"127.0.0.1:{port}",
        c.PET_RDZV_ID: run_id,
        c.ENV_POD_NAME: pod,
        c.ENV_POD_IP: ip,
    }


def two_pods(
    launcher: Launcher, tmp_path: Path, kind: str, pod: str, *, max_restarts: int = 0, monitor_interval: str = "0.2"
) -> tuple[Agent, Agent, Path]:
    """Start pod-a (the store's host, global rank 0) and pod-b (global rank 1); ``pod`` injects ``kind``."""
    out = tmp_path / "out"
    out.mkdir()
    port, run_id = free_port(), f"faults-{uuid.uuid4().hex[:8]}"

    def args(name: str) -> list[str]:
        return [
            "--start-method",
            "fork",
            "--monitor-interval",
            monitor_interval,
            "--max-restarts",
            str(max_restarts),
            "--termination-log",
            str(tmp_path / f"{name}.term"),
            "--function",
            "elastic_workers:fault",
            "--",
            str(out),
            kind,
            pod,
        ]

    a = launcher.start(args("pod-a"), pod_env(port, run_id, "pod-a", "127.0.0.1"), name="pod-a")
    wait_for(lambda: _listening(port) or a.proc.poll() is not None, 60, "pod-a's rendezvous store")
    b = launcher.start(args("pod-b"), pod_env(port, run_id, "pod-b", "127.0.0.2"), name="pod-b")
    return a, b, out


def _listening(port: int) -> bool:
    import socket

    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def term(tmp_path: Path, name: str) -> str:
    path = tmp_path / f"{name}.term"
    return path.read_text() if path.exists() else ""


# ---------------------------------------------------------------------------- class 1: a peer's loss


# pod-b's fault: its exit code, how its report's first line ends, what pod-a's report quotes from it.
# An OOM kill and a preemption, with what the operator does next: tests/localrun/test_run_faults.py.
PEER_FAULTS = {
    "exit3": (3, ") exited with code 3", "global rank 1 exited with code 3"),
}


@pytest.mark.timeout(180)
@pytest.mark.parametrize("kind", list(PEER_FAULTS), ids=["own-exit"])
def test_a_survivor_of_a_peers_loss_exits_retryable_and_names_the_cause(
    launcher: Launcher, tmp_path: Path, kind: str
) -> None:
    """max_restarts 0: the survivor used to exit 1 (permanent) on "Connection closed by peer"."""
    b_code, b_line, b_published = PEER_FAULTS[kind]
    a, b, _out = two_pods(launcher, tmp_path, kind, "pod-b")
    assert b.wait(150) == b_code, b.stderr
    assert a.wait(60) == c.EXIT_PEER_LOST == 204, a.stderr
    b_first = term(tmp_path, "pod-b").partition("\n")[0]
    assert b_first.endswith(b_line), b_first
    assert b_first.startswith("elastic-launch: worker failed: global rank 1 (local rank 0, pid "), b_first
    a_term = term(tmp_path, "pod-a")
    assert a_term.startswith("elastic-launch: lost a peer: global rank 0 (local rank 0, pid "), a_term
    assert a_term.partition("\n")[0].endswith(
        "failed only because a process on another node went away (its OOM kill, preemption or node loss): "
        "no evidence against the code here"
    )
    assert f"other nodes' reports:\nnode 1: {b_published}\n" in a_term
    assert "Connection closed by peer" in a_term or "Connection reset by peer" in a_term


# ---------------------------------------------------------------------------- class 8: a clean end


@pytest.mark.timeout(180)
def test_a_clean_two_pod_run_ends_without_cpp_stack_traces(launcher: Launcher, tmp_path: Path) -> None:
    """torch's own 5 s monitor interval, as a compiled job polls: the agents notice their workers' end
    seconds apart, and the store's host used to exit while the other still closed the run (a 40-line
    C++ TCPStore trace from each clean run).
    """
    a, b, out = two_pods(launcher, tmp_path, "hold", "nobody", monitor_interval="5")
    (out / "release").write_text("")
    assert a.wait(150) == 0, a.stderr
    assert b.wait(60) == 0, b.stderr
    for agent in (a, b):
        assert CPP_TRACE not in agent.stderr, agent.stderr
        assert "failed to shutdown the rendezvous" not in agent.stderr, agent.stderr


# ---------------------------------------------------------------------------- class 3: SIGTERM in the exit barrier


@pytest.mark.timeout(180)
def test_sigterm_in_the_exit_barrier_ends_the_pod_at_once_succeeded(launcher: Launcher, tmp_path: Path) -> None:
    """pod-b's workers are done and it waits for pod-a, whose worker holds on; SIGTERM ends pod-b's wait.

    torch waits in one C++ store call (up to 300 s) where a Python signal handler cannot run;
    a pod exited 60 s after SIGTERM, past its grace period. No clock here: pod-a's worker is
    held until the test releases it, so pod-b can only have exited by leaving the barrier.
    """
    a, b, out = two_pods(launcher, tmp_path, "hold", "pod-a")
    waiting = "every local worker succeeded: waiting for the other nodes in the exit barrier"
    wait_for(lambda: waiting in b.stderr or b.proc.poll() is not None, 150, "pod-b in the exit barrier")
    assert (out / "pod-a.finished").exists() or a.proc.poll() is None  # pod-a's worker is held
    b.proc.send_signal(signal.SIGTERM)
    assert b.wait(60) == 0, b.stderr
    assert not (out / "release").exists() and a.proc.poll() is None  # pod-a still waits: no barrier held pod-b
    assert term(tmp_path, "pod-b") == (
        "elastic-launch: succeeded; every local worker succeeded; SIGTERM arrived while waiting in the exit barrier "
        "for the other nodes, which are not needed any more: left it"
    )
    (out / "release").write_text("")
    assert a.wait(60) == 0, a.stderr
    assert CPP_TRACE not in a.stderr, a.stderr


# ---------------------------------------------------------------------------- class 4: a full temp directory


def _unshare_tmpfs(directory: Path, size: str, fill: bool) -> tuple[str, ...]:
    """A command prefix: a private mount namespace with a ``size`` tmpfs at ``directory`` (full if ``fill``)."""
    script = f'mount -t tmpfs -o size={size} tmpfs "{directory}" && '
    if fill:
        script += f'(cat /dev/zero > "{directory}/ballast" 2>/dev/null; true) && '
    script += 'exec "$@"'
    namespace = ("unshare", "-Urm", "--propagation", "private", "sh", "-c", script, "sh")
    return (*namespace, PYTHON, "-m", "elastic_compile.entrypoint")


def _can_mount_tmpfs() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "-Urm", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"], capture_output=True, check=False
    )
    return probe.returncode == 0


needs_tmpfs = pytest.mark.skipif(not _can_mount_tmpfs(), reason="cannot mount a tmpfs in a user namespace here")


@needs_tmpfs
@pytest.mark.timeout(120)
def test_a_full_temp_directory_is_skipped_and_the_users_error_kept(launcher: Launcher, tmp_path: Path) -> None:
    """$TMPDIR is a full tmpfs: creating a directory there works, writing an error file does not."""
    full = tmp_path / "full"
    full.mkdir()
    agent = launcher.run(
        [*FAST, "--termination-log", str(tmp_path / "term"), "--function", "elastic_workers:raise_now", "--", "x"],
        env={"TMPDIR": str(full)},
        program=_unshare_tmpfs(full, "256k", fill=True),
        timeout=100,
    )
    assert agent.proc.returncode == 1, agent.stderr
    assert f"not writable: {full} (0 KiB free, less than the 1024 KiB needed)" in agent.stderr
    report = (tmp_path / "term").read_text()
    assert report.startswith("elastic-launch: worker failed: global rank 0 (local rank 0, pid ")
    assert report.endswith("ValueError: x")  # the user's error, from its error file in the next directory


@needs_tmpfs
@pytest.mark.timeout(120)
def test_an_error_file_a_full_disk_cut_short_is_classified_by_the_workers_exit(
    launcher: Launcher, tmp_path: Path
) -> None:
    """The worker fills the log directory's disk, then raises: its error.json stays empty (exit 203 before)."""
    logs = tmp_path / "logs"
    logs.mkdir()
    args = [*FAST, "--log-dir", str(logs), "--termination-log", str(tmp_path / "term")]
    agent = launcher.run(
        [*args, "--function", "elastic_workers:fill_and_raise", "--", str(logs)],
        program=_unshare_tmpfs(logs, "2m", fill=False),
        timeout=100,
    )
    assert agent.proc.returncode == 1, agent.stderr
    report = (tmp_path / "term").read_text()
    assert report.startswith("elastic-launch: worker failed: global rank 0 (local rank 0, pid "), report
    assert report.endswith(
        "could not be read (a full disk leaves it empty or cut short): classified by its exit code; its error is "
        "on its stderr above"
    )
    assert "RuntimeError: the disk is full" in agent.stderr  # the user's error, as the worker printed it
