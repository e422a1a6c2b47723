"""Real ``elastic-launch`` processes: torch 2.13 CPU, gloo, c10d on 127.0.0.1.

bench/torch_compat.py runs this file against other torch releases (``EC_TEST_PYTHON``).

Each test starts agents as separate processes (as separate pods would be), with tiny world
sizes and ``fork`` where the behaviour allows, every wait bounded by a timeout.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from launch_helpers import FAST, MARKER_ENV, WORKERS_SCRIPT, Launcher, free_port, marked_pids, wait_for

from elastic_compile import contract as c

pytestmark = pytest.mark.slow


def read_ranks(out: Path, name: str) -> list[dict[str, Any]]:
    """The per-rank JSON files a worker function wrote, ordered by rank."""
    files = sorted(out.glob(f"{name}.rank*.json"))
    return sorted((json.loads(f.read_text()) for f in files), key=lambda d: int(d.get("rank", 0)))


def out_dir(tmp_path: Path) -> Path:
    out = tmp_path / "out"
    out.mkdir()
    return out


def pod_env(port: int, run_id: str, *, nnodes: str, nproc: int, pod: str, ip: str) -> dict[str, str]:
    """What the operator and the compiler's downward-API entries put into one pod."""
    return {
        c.PET_NNODES: nnodes,
        c.PET_NPROC_PER_NODE: str(nproc),
        c.PET_RDZV_BACKEND: "c10d",
        c.PET_RDZV_ENDPOINT: f"127.0.0.1:{port}",
        c.PET_RDZV_ID: run_id,
        c.ENV_POD_NAME: pod,
        c.ENV_POD_IP: ip,
    }


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


# ---------------------------------------------------------------------------- (a)


@pytest.mark.timeout(120)
def test_function_mode_allreduce_and_rank0_result(launcher: Launcher, tmp_path: Path) -> None:
    out, result = out_dir(tmp_path), tmp_path / "result.json"
    agent = launcher.run(
        [
            *FAST,
            "--nproc-per-node",
            "2",
            "--function",
            "elastic_workers:allreduce",
            "--result",
            str(result),
            "--",
            str(out),
            "two words",
            "--lr",
        ],
        timeout=90,
    )
    assert agent.proc.returncode == 0, agent.stderr
    ranks = read_ranks(out, "allreduce")
    assert [(r["rank"], r["world_size"], r["sum"]) for r in ranks] == [(0, 2, 3.0), (1, 2, 3.0)]
    # Our environment additions reached the workers (pytorch#135712; OMP_NUM_THREADS as torchrun sets it).
    assert {r["omp_num_threads"] for r in ranks} == {"1"}
    assert {r["shared_store"] for r in ranks} == {"False"}
    written = json.loads(result.read_text())
    assert written == ranks[0]
    assert written["extra"] == ["two words", "--lr"]  # words after -- reach the function untouched


@pytest.mark.timeout(120)
def test_script_mode_allreduce(launcher: Launcher, tmp_path: Path) -> None:
    out = out_dir(tmp_path)
    agent = launcher.run(
        [
            "--monitor-interval",
            "0.2",
            "--nproc-per-node",
            "2",
            "--",
            "python",
            str(WORKERS_SCRIPT),
            "allreduce",
            str(out),
            "x",
        ],
        timeout=90,
    )
    assert agent.proc.returncode == 0, agent.stderr
    ranks = read_ranks(out, "allreduce")
    assert [(r["rank"], r["world_size"], r["sum"], r["extra"]) for r in ranks] == [
        (0, 2, 3.0, ["x"]),
        (1, 2, 3.0, ["x"]),
    ]


# ---------------------------------------------------------------------------- (b)


@pytest.mark.timeout(150)
def test_two_agents_ddp_gradients_identical(launcher: Launcher, tmp_path: Path) -> None:
    out, port, run_id = out_dir(tmp_path), free_port(), f"ddp-{uuid.uuid4().hex[:8]}"
    args = [*FAST, "--function", "elastic_workers:ddp_step", "--", str(out)]
    # On one machine every "pod" is 127.0.0.1, like the endpoint, so no pod IP names the host
    # and torch's heuristic lets each try to host. B starts once A's store listens, so A
    # hosts and B falls back to client, deterministically. The IPs differ so that the node
    # order (by local_addr) and MASTER_ADDR are those of two machines.
    a = launcher.start(args, pod_env(port, run_id, nnodes="2", nproc=2, pod="pod-a", ip="127.0.0.1"), name="a")
    wait_for(lambda: port_open(port) or a.proc.poll() is not None, 60, "agent A's rendezvous store")
    b = launcher.start(args, pod_env(port, run_id, nnodes="2", nproc=2, pod="pod-b", ip="127.0.0.2"), name="b")
    assert a.wait(120) == 0, a.stderr
    assert b.wait(30) == 0, b.stderr

    ranks = read_ranks(out, "ddp")
    assert [r["rank"] for r in ranks] == [0, 1, 2, 3]
    assert {r["world_size"] for r in ranks} == {4}
    reference = ranks[0]["ddp"]
    for r in ranks[1:]:
        assert r["ddp"] == reference, f"rank {r['rank']} averaged gradients differ from rank 0's"
    # And they are the average of the four ranks' local gradients (the data differ by rank).
    assert ranks[0]["local"] != ranks[1]["local"]
    for i, tensor in enumerate(reference):
        for j, value in enumerate(tensor):
            mean = sum(r["local"][i][j] for r in ranks) / 4
            assert value == pytest.approx(mean, abs=1e-6)


# ---------------------------------------------------------------------------- (c)


@pytest.mark.timeout(240)
def test_restart_after_first_attempt_failure_5_of_5(
    launcher: Launcher, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs, ok, seconds = 5, 0, []
    failures = []
    for i in range(runs):
        out = tmp_path / f"run{i}"
        out.mkdir()
        agent = launcher.run(
            [
                *FAST,
                "--nproc-per-node",
                "2",
                "--max-restarts",
                "1",
                "--function",
                "elastic_workers:fail_first_attempt",
                "--",
                str(out),
            ],
            timeout=60,
            name=f"run{i}",
        )
        seconds.append(agent.seconds)
        ranks = read_ranks(out, "allreduce")
        good = agent.proc.returncode == 0 and [(r["sum"], r["restart_count"]) for r in ranks] == [(3.0, 1)] * 2
        ok += good
        if not good:
            failures.append(f"run {i}: exit {agent.proc.returncode}\n{agent.stderr[-2000:]}")
        # The injected failure really happened and was reported before the restart.
        assert "injected failure on attempt 0" in agent.stderr
    with capsys.disabled():
        print(f"\nrestart loop: {ok}/{runs} succeeded, seconds per run {[round(s, 1) for s in seconds]}")
    assert ok == runs, "\n\n".join(failures)


# ---------------------------------------------------------------------------- (d)


@pytest.mark.timeout(180)
def test_scale_up_second_agent_joins_running_job(
    launcher: Launcher, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, port, run_id = out_dir(tmp_path), free_port(), f"grow-{uuid.uuid4().hex[:8]}"
    opts = [*FAST, "--last-call-timeout", "2", "--function", "elastic_workers:grow", "--"]
    a = launcher.start(
        [*opts, str(out), "A", "5", "100"], pod_env(port, run_id, nnodes="1:2", nproc=1, pod="pod-a", ip="127.0.0.1")
    )
    log_a, log_b = out / "A.log", out / "B.log"
    # A proceeds alone once last_call_timeout (2 s) has passed with min_nodes (1) present.
    wait_for(lambda: log_a.exists() or a.proc.poll() is not None, 90, "agent A training alone")
    assert "world=1" in log_a.read_text(), a.stderr
    joined = time.monotonic()
    b = launcher.start(
        [*opts, str(out), "B", "5", "100"], pod_env(port, run_id, nnodes="1:2", nproc=1, pod="pod-b", ip="127.0.0.2")
    )
    wait_for(lambda: "world=2" in log_a.read_text() or a.proc.poll() is not None, 90, "world size 2")
    rejoin = time.monotonic() - joined
    assert a.wait(60) == 0, a.stderr
    assert b.wait(30) == 0, b.stderr

    lines_a = log_a.read_text().splitlines()
    worlds_a = [line.split()[1] for line in lines_a]
    first_two = worlds_a.index("world=2")
    assert set(worlds_a[:first_two]) == {"world=1"} and set(worlds_a[first_two:]) == {"world=2"}
    assert len(worlds_a) - first_two >= 5
    assert {line.split()[1] for line in log_b.read_text().splitlines()} == {"world=2"}
    # A membership change is not a restart (torch/distributed/elastic/agent/server/api.py).
    assert {line.split()[0] for line in lines_a} == {"restart=0"}
    with capsys.disabled():
        print(f"\nscale-up: second agent start -> world size 2 on agent A in {rejoin:.1f}s")


# ---------------------------------------------------------------------------- (e)


@pytest.mark.timeout(90)
def test_rendezvous_timeout_exits_201(launcher: Launcher, tmp_path: Path) -> None:
    port, term = free_port(), tmp_path / "termination-log"
    endpoint = f"127.0.0.1:{port}"
    agent = launcher.run(
        [
            *FAST,
            "--nnodes",
            "2",
            "--rdzv-endpoint",
            endpoint,
            "--rdzv-id",
            "lonely",
            "--join-timeout",
            "5",
            "--termination-log",
            str(term),
            "--",
            "true",
        ],
        timeout=60,
    )
    assert agent.proc.returncode == c.EXIT_RENDEZVOUS_TIMEOUT, agent.stderr
    assert "rendezvous timeout" in agent.stderr
    assert endpoint in agent.stderr and "join_timeout=5s" in agent.stderr and "nnodes 2" in agent.stderr
    assert "rendezvous timeout" in term.read_text()


# ---------------------------------------------------------------------------- (f)


@pytest.mark.timeout(120)
def test_user_exception_root_cause_in_stderr_and_termination_log(launcher: Launcher, tmp_path: Path) -> None:
    term, token = tmp_path / "termination-log", f"bad learning rate {uuid.uuid4().hex[:6]}"
    agent_error_file = tmp_path / "agent-error.json"  # set by a launcher above us, if any
    agent = launcher.run(
        [
            *FAST,
            "--nproc-per-node",
            "2",
            "--termination-log",
            str(term),
            "--function",
            "elastic_workers:raise_error",
            "--",
            token,
        ],
        env={"TORCHELASTIC_ERROR_FILE": str(agent_error_file)},
        timeout=90,
    )
    assert 1 <= agent.proc.returncode <= 127
    assert agent.proc.returncode == c.EXIT_USER_FAILURE
    summary = term.read_text()
    for text in (agent.stderr, summary):
        assert f"ValueError: {token}" in text
        assert "Traceback (most recent call last)" in text
        assert "raise ValueError(message)" in text  # the failing line of the user's code
        assert "global rank 1 (local rank 1" in text
    assert len(summary.encode()) <= 4096
    # torch's record copied the worker's root cause to the agent's error file.
    root_cause = json.loads(agent_error_file.read_text())["message"]
    assert root_cause["message"] == f"ValueError: {token}" and root_cause["errorCode"] == 1


@pytest.mark.timeout(150)
@pytest.mark.parametrize(
    ("worker_args", "expected"),
    [
        (["exit_with", "3"], 3),  # a code in 1-127 is kept: permanent
        (["exit_with", "-9"], 128 + 9),  # killed by SIGKILL (OOM killer): retryable
        (["raise_error", "from a script"], 1),
    ],
    ids=["exit-3", "sigkill", "script-exception"],
)
def test_script_failures_map_to_exit_codes(
    launcher: Launcher, tmp_path: Path, worker_args: list[str], expected: int
) -> None:
    term = tmp_path / "termination-log"
    agent = launcher.run(
        [
            "--monitor-interval",
            "0.2",
            "--nproc-per-node",
            "2",
            "--termination-log",
            str(term),
            "--",
            "python",
            str(WORKERS_SCRIPT),
            *worker_args,
        ],
        timeout=120,
    )
    assert agent.proc.returncode == expected, agent.stderr
    summary = term.read_text()
    assert "global rank 1" in summary
    if worker_args[0] == "raise_error":
        # The script's own @record wrote the error file the agent reports from.
        assert "ValueError: from a script" in summary and "Traceback" in summary


@pytest.mark.timeout(150)
def test_a_worker_that_exits_143_when_the_agent_stops_it_is_not_the_root_cause(
    launcher: Launcher, tmp_path: Path
) -> None:
    """Rank 1 exits 2; torch records it, SIGTERMs rank 0, whose trap exits 143, and records that after it.

    Rank 0 is the lower rank and 143 would be retried: the report is rank 1's permanent 2.
    """
    term = tmp_path / "termination-log"
    args = ["--monitor-interval", "0.2", "--nproc-per-node", "2", "--termination-log", str(term)]
    agent = launcher.run(
        [*args, "--", "python", str(WORKERS_SCRIPT), "fail_after_a_trap", str(out_dir(tmp_path)), "2"], timeout=120
    )
    assert agent.proc.returncode == 2, agent.stderr
    assert "global rank 1" in term.read_text()


# ---------------------------------------------------------------------------- (g)


def _started(marker_dir: Path, n: int) -> bool:
    return len(list(marker_dir.glob("started.*"))) == n


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["function-fork", "script-ignores-sigterm"])
def test_sigterm_exits_143_and_leaves_no_worker(launcher: Launcher, tmp_path: Path, mode: str) -> None:
    markers = out_dir(tmp_path)
    if mode == "function-fork":
        args = [
            *FAST,
            "--nproc-per-node",
            "2",
            "--function",
            "elastic_workers:sleep_forever",
            "--",
            str(markers),
        ]
    else:
        # Workers deaf to SIGTERM: the agent must SIGKILL them after --shutdown-timeout.
        args = ["--monitor-interval", "0.2", "--nproc-per-node", "2", "--shutdown-timeout", "2"]
        args += ["--", "python", str(WORKERS_SCRIPT), "sleep_forever", str(markers), "yes"]
    agent = launcher.start(args)
    wait_for(lambda: _started(markers, 2) or agent.proc.poll() is not None, 90, "2 workers started")
    assert agent.proc.poll() is None, agent.stderr
    workers = [int(p.read_text()) for p in markers.glob("started.*")]
    assert all(pid in marked_pids(agent.marker) for pid in workers)  # the scan does see them

    sent = time.monotonic()
    agent.proc.send_signal(signal.SIGTERM)
    assert agent.wait(60) == 128 + signal.SIGTERM, agent.stderr
    took = time.monotonic() - sent
    assert marked_pids(agent.marker) == [], "worker processes outlived the agent"
    assert "received SIGTERM" in agent.stderr
    if mode == "script-ignores-sigterm":
        assert took >= 2, f"workers ignoring SIGTERM were killed after {took:.1f}s, before the 2s grace"


@pytest.mark.timeout(90)
def test_sigterm_during_rendezvous_exits_143(launcher: Launcher) -> None:
    # No workers yet: torch's own handlers are not installed before the workers start
    # (torch/distributed/elastic/multiprocessing/api.py); ours must turn the signal into 143 anyway.
    port = free_port()
    agent = launcher.start(
        ["--nnodes", "2", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "waiting", "--", "true"]
    )
    wait_for(lambda: "run id waiting" in agent.stderr or agent.proc.poll() is not None, 60, "rendezvous")
    time.sleep(0.5)
    agent.proc.send_signal(signal.SIGTERM)
    assert agent.wait(30) == 128 + signal.SIGTERM, agent.stderr
    assert marked_pids(agent.marker) == []


def test_process_scan_sees_a_marked_child() -> None:
    # Guards the SIGTERM tests: marked_pids must find a process that carries the marker.
    marker = uuid.uuid4().hex
    env = {**os.environ, MARKER_ENV: marker}
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], env=env)
    try:
        wait_for(lambda: child.pid in marked_pids(marker), 10, "the child in /proc")
    finally:
        child.kill()
        child.wait()
    assert child.pid not in marked_pids(marker)
