"""Exit codes, failure reports and the pieces of a launch, with torch's real types (no processes)."""

from __future__ import annotations

import json
import math
import os
import pickle
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
import torch.distributed as dist
from hypothesis import given
from hypothesis import strategies as st
from torch.distributed.elastic.multiprocessing import SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure, record
from torch.distributed.elastic.rendezvous import (
    RendezvousClosedError,
    RendezvousConnectionError,
    RendezvousStateError,
    RendezvousTimeoutError,
)

from elastic_compile import contract as c
from elastic_compile.entrypoint import LaunchSettings, resolve_settings
from elastic_compile.entrypoint.agent import AgentRecord, HungWorker
from elastic_compile.entrypoint.launch import (
    apply_environment,
    build_launch_config,
    classify,
    entrypoint_and_args,
    finish,
    write_result,
)
from elastic_compile.entrypoint.report import (
    TERMINATION_LOG_LIMIT,
    fit_termination_message,
    worker_exit_code,
    worker_failure,
    write_termination_log,
)
from elastic_compile.entrypoint.worker import call_function, load_function

# ------------------------------------------------------------------------- exit codes


@pytest.mark.parametrize(
    ("exitcode", "expected"),
    [
        *[(1, 1), (3, 3), (127, 127), (-9, 137), (-15, 143), (-6, 134), (128, 1), (255, 1), (0, 1)],
        # 128 + N for a real signal N is a shell's report of it: retryable, like the signal itself.
        *[(137, 137), (143, 143), (130, 130), (128 + 64, 128 + 64), (128 + 65, 1)],
    ],
)
def test_worker_exit_code(exitcode: int, expected: int) -> None:
    assert worker_exit_code(exitcode) == expected


def test_shell_reported_signal_is_named() -> None:
    outcome = worker_failure(1, local_rank=1, exitcode=137, pid=7, error_file=None, message="To enable ...")
    assert outcome.exit_code == 137
    assert outcome.headline.endswith("exited with code 137: SIGKILL, as a shell reports it")
    assert outcome.details == ""  # killed: no advice about @record


def test_contract_exit_codes_sit_on_the_right_side_of_the_operator_split() -> None:
    # training-operator v1.9.4 IsRetryableExitCode: 1-127 permanent, >= 128 retryable.
    assert 1 <= c.EXIT_USER_FAILURE <= 127 and 1 <= c.EXIT_USAGE <= 127
    assert min(c.EXIT_RENDEZVOUS_TIMEOUT, c.EXIT_RENDEZVOUS_ERROR, c.EXIT_AGENT_ERROR) >= 128
    assert max(c.EXIT_RENDEZVOUS_TIMEOUT, c.EXIT_RENDEZVOUS_ERROR, c.EXIT_AGENT_ERROR) <= 255


# ------------------------------------------------------------------------- termination log


def test_short_message_is_kept() -> None:
    assert fit_termination_message("a\nb") == "a\nb"


def test_long_message_keeps_head_and_tail() -> None:
    text = "headline\n" + "".join(f"  frame {i}\n" for i in range(2000)) + "ValueError: the cause"
    fitted = fit_termination_message(text)
    assert len(fitted.encode()) <= TERMINATION_LOG_LIMIT
    assert fitted.startswith("headline\n[...]\n") and fitted.endswith("ValueError: the cause")


@given(st.text(min_size=0, max_size=3000))
def test_fitted_message_is_valid_utf8_within_the_limit(text: str) -> None:
    # 3000 characters of up to 4 bytes each exceed the limit often enough.
    fitted = fit_termination_message(text)
    assert len(fitted.encode()) <= TERMINATION_LOG_LIMIT
    if len(text.encode()) <= TERMINATION_LOG_LIMIT:
        assert fitted == text


def test_termination_log_default_path_is_written_only_if_it_exists(tmp_path: Path) -> None:
    path = tmp_path / "termination-log"
    assert not write_termination_log(str(path), "x", create=False)
    assert not path.exists()
    path.write_text("")
    assert write_termination_log(str(path), "é" * 5000, create=False)
    assert len(path.read_bytes()) <= TERMINATION_LOG_LIMIT


def test_termination_log_problems_are_skipped_quietly(tmp_path: Path) -> None:
    assert write_termination_log(str(tmp_path / "t"), "x", create=True)
    assert not write_termination_log(str(tmp_path / "missing" / "t"), "x", create=True)
    assert not write_termination_log(str(tmp_path), "x", create=True)  # a directory
    assert not write_termination_log(None, "x", create=True)


# ------------------------------------------------------------------------- worker failures


def raising(message: str) -> None:
    raise ValueError(message)


def real_error_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An error file written by torch's own @record, as a worker writes it."""
    error_file = tmp_path / "error.json"
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(error_file))
    with pytest.raises(ValueError, match="lr must be positive"):
        record(raising)("lr must be positive")
    monkeypatch.delenv("TORCHELASTIC_ERROR_FILE")
    return error_file


def test_worker_failure_from_a_record_error_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    error_file = real_error_file(tmp_path, monkeypatch)
    failure = ProcessFailure(local_rank=1, pid=4242, exitcode=1, error_file=str(error_file))
    outcome = classify(ChildFailedError("train", {3: failure}), settings())
    assert outcome.exit_code == 1
    assert outcome.headline == "worker failed: global rank 3 (local rank 1, pid 4242) exited with code 1"
    assert outcome.details.startswith(f"error file: {error_file}\nTraceback (most recent call last):")
    assert "raise ValueError(message)" in outcome.details
    assert outcome.details.endswith("ValueError: lr must be positive")
    assert outcome.details.count("ValueError: lr must be positive") == 1


def test_root_cause_is_the_first_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = ProcessFailure(local_rank=0, pid=1, exitcode=1, error_file=str(real_error_file(tmp_path, monkeypatch)))
    later = ProcessFailure(local_rank=1, pid=2, exitcode=-15, error_file="/nonexistent")
    later.timestamp = first.timestamp + 5
    outcome = classify(ChildFailedError("train", {0: first, 1: later}), settings())
    assert outcome.exit_code == 1 and "global rank 0" in outcome.headline
    assert outcome.headline.endswith("(first of 2 failed local workers)")


def test_a_worker_killed_at_once_with_its_peers_failing_is_the_root_cause() -> None:
    """The OOM killer's SIGKILL on rank 1; in the same poll, rank 0's connection reset and the SIGTERM on rank 2."""
    peer = ProcessFailure(local_rank=0, pid=1, exitcode=1, error_file="/nonexistent")
    killed = ProcessFailure(local_rank=1, pid=2, exitcode=-9, error_file="/nonexistent")
    stopped = ProcessFailure(local_rank=2, pid=3, exitcode=-15, error_file="/nonexistent")
    killed.timestamp = peer.timestamp + 1  # the same poll, across a second's boundary
    stopped.timestamp = peer.timestamp
    outcome = classify(ChildFailedError("train", {0: peer, 1: killed, 2: stopped}), settings())
    assert outcome.exit_code == 137 and "global rank 1" in outcome.headline
    assert "the one killed by a signal" in outcome.headline
    # The agent's SIGTERM on the others (recorded after the failure it saw) never hides a worker's own failure.
    outcome = classify(ChildFailedError("train", {0: peer, 2: stopped}), settings())
    assert outcome.exit_code == 1 and "global rank 0" in outcome.headline
    assert outcome.headline.endswith("(first of 2 failed local workers)")
    # Without a signal death, the first torch recorded among those seen at once (its order, not the rank).
    other = ProcessFailure(local_rank=1, pid=2, exitcode=3, error_file="/nonexistent")
    other.timestamp = peer.timestamp
    outcome = classify(ChildFailedError("train", {1: other, 0: peer}), settings())
    assert outcome.exit_code == 3 and "global rank 1" in outcome.headline


def failed(rank: int, exitcode: int, timestamp: int, error_file: str = "/nonexistent") -> ProcessFailure:
    """A ProcessFailure as torch records it, at ``timestamp`` when it has no error file."""
    failure = ProcessFailure(local_rank=rank, pid=100 + rank, exitcode=exitcode, error_file=error_file)
    if failure.error_file == "<N/A>":  # torch stamps these with the poll's int(time.time())
        failure.timestamp = timestamp
    return failure


def test_a_peer_the_nccl_watchdog_aborts_is_not_the_root_cause() -> None:
    """Rank 3 raised (exit 1); its NCCL peers' watchdog saw the remote process exit and called abort (-6).

    torch records them in one poll, rank 3 first. SIGABRT is not the kernel's: reporting
    rank 0's 134 would have the operator retry a deterministic error.
    """
    now = 1_700_000_000
    outcome = classify(ChildFailedError("train", {3: failed(3, 1, now), 0: failed(0, -6, now)}), settings())
    assert outcome.exit_code == 1 and "global rank 3" in outcome.headline
    # The same peers when a worker's own crash came first: the kernel's SIGSEGV is the cause.
    outcome = classify(ChildFailedError("train", {3: failed(3, -11, now), 0: failed(0, -6, now)}), settings())
    assert outcome.exit_code == 139 and "global rank 3" in outcome.headline


@pytest.mark.parametrize("stopped", [143, 1], ids=["shell-trap-143", "sigterm-handler-exit-1"])
def test_a_worker_stopped_by_the_agent_with_an_exit_code_is_not_the_root_cause(stopped: int) -> None:
    """Rank 3 failed with code 2; the agent's SIGTERM made rank 0 exit ``stopped``, recorded after it, same second.

    A wrapper that traps SIGTERM (``trap 'kill $pid; wait $pid' TERM``) exits 143; a
    training loop that raises on SIGTERM (Lightning's SIGTERMException) exits 1. Neither
    is the cause, and the lower rank must not make it one.
    """
    now = 1_700_000_000
    outcome = classify(ChildFailedError("train", {3: failed(3, 2, now), 0: failed(0, stopped, now)}), settings())
    assert outcome.exit_code == 2 and "global rank 3" in outcome.headline


@pytest.mark.parametrize("ended", [-15, 143, -2])
def test_a_worker_that_ended_by_sigterm_before_the_agent_sent_any_is_the_root_cause(ended: int) -> None:
    """Recorded first, rank 1's SIGTERM was not the agent's (it sends it after a failure): its peer's reset follows."""
    now = 1_700_000_000
    outcome = classify(ChildFailedError("train", {1: failed(1, ended, now), 0: failed(0, 1, now)}), settings())
    assert outcome.exit_code == 128 + abs(ended) % 128 and "global rank 1" in outcome.headline
    # Recorded after another failure, it is the agent's: the first failure stays the report.
    outcome = classify(ChildFailedError("train", {0: failed(0, 1, now), 1: failed(1, ended, now)}), settings())
    assert outcome.exit_code == 1 and "global rank 0" in outcome.headline


def test_an_error_file_without_a_stamp_does_not_hide_an_oom_kill(tmp_path: Path) -> None:
    """An error file written by other code than @record, with no timestamp: torch reads it as 0 (unknown)."""
    error_file = tmp_path / "error.json"
    error_file.write_text(json.dumps({"message": "RuntimeError: Connection reset by peer"}))
    peer = failed(0, 1, 0, error_file=str(error_file))
    assert peer.timestamp == 0  # torch's _get_error_data: int(error_file_data.get("timestamp", 0))
    outcome = classify(ChildFailedError("train", {0: peer, 1: failed(1, -9, 1_700_000_000)}), settings())
    assert outcome.exit_code == 137 and "global rank 1" in outcome.headline


def test_an_oom_kill_is_the_root_cause_when_its_peers_recorded_their_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rank 0 uses @record: its error file is stamped when it raised, the killed rank 1 at the poll seconds later."""
    peer = failed(0, 1, 0, error_file=str(real_error_file(tmp_path, monkeypatch)))
    poll = peer.timestamp + 4  # the agent polls every monitor_interval (5 s in a compiled job)
    for killed in (-9, 137):  # SIGKILL, directly or behind `sh -c` (a shell reports 128 + 9)
        outcome = classify(ChildFailedError("train", {0: peer, 1: failed(1, killed, poll)}), settings())
        assert outcome.exit_code == 137 and "global rank 1" in outcome.headline
        assert "the one killed by a signal" in outcome.headline
    # The agent's own SIGKILL, 30 s after its SIGTERM on a worker that ignored it, comes later.
    outcome = classify(ChildFailedError("train", {0: peer, 1: failed(1, -9, poll + 30)}), settings())
    assert outcome.exit_code == 1 and "global rank 0" in outcome.headline


def test_worker_killed_by_signal() -> None:
    failure = ProcessFailure(local_rank=0, pid=7, exitcode=-9, error_file="/nonexistent")
    outcome = classify(ChildFailedError("train", {0: failure}), settings())
    assert outcome.exit_code == 137
    assert outcome.headline.endswith("was killed by SIGKILL")
    assert outcome.details == "Signal 9 (SIGKILL) received by PID 7"


def test_script_without_record_gets_advice() -> None:
    outcome = worker_failure(0, local_rank=0, exitcode=2, pid=7, error_file=None, message="To enable ...")
    assert outcome.exit_code == 2 and "wrap the script's main function in" in outcome.details


# ------------------------------------------------------------------------- agent failures


def settings(*argv: str, env: dict[str, str] | None = None) -> LaunchSettings:
    base = ["--nnodes", "2", "--rdzv-endpoint", "train-worker-0:23456", "--rdzv-id", "ns.job", "--join-timeout", "7"]
    return resolve_settings([*base, *argv, "--", "true"], env or {})


def connection_error() -> RendezvousConnectionError:
    try:
        try:
            raise dist.DistNetworkError("Connection refused")
        except dist.DistNetworkError as inner:
            raise RendezvousConnectionError("The connection to the C10d store has failed.") from inner
    except RendezvousConnectionError as e:
        return e


@pytest.mark.parametrize(
    ("exc", "code", "headline"),
    [
        (
            RendezvousTimeoutError(),
            201,
            "rendezvous timeout: fewer than 2 node(s) joined within join_timeout=7s (nnodes 2; backend c10d, "
            "endpoint train-worker-0:23456, run id ns.job); check that the other pods run and can reach "
            "train-worker-0:23456",
        ),
        (
            RendezvousClosedError(),
            202,
            "rendezvous closed (backend c10d, endpoint train-worker-0:23456, run id ns.job)",
        ),
        (
            connection_error(),
            202,
            "rendezvous error (backend c10d, endpoint train-worker-0:23456, run id ns.job): "
            "RendezvousConnectionError: The connection to the C10d store has failed.",
        ),
        (RendezvousStateError("corrupt"), 202, "rendezvous error ("),
        (dist.DistStoreError("wait timeout after 60000ms"), 202, "rendezvous error ("),
        (SignalException("got signal", sigval=signal.SIGTERM), 143, "received SIGTERM: stopped the workers"),
        (SignalException("got signal", sigval=signal.SIGINT), 130, "received SIGINT"),
        (KeyError("surprise"), 203, "agent error: KeyError: 'surprise'"),
    ],
    ids=["timeout", "closed", "connection", "state", "store", "sigterm", "sigint", "agent"],
)
def test_agent_exceptions_map_to_exit_codes(exc: BaseException, code: int, headline: str) -> None:
    outcome = classify(exc, settings(), AgentRecord(starts=1, running=True))
    assert outcome.exit_code == code
    assert outcome.headline.startswith(headline)


def test_a_signal_during_the_rendezvous_says_no_worker_was_running() -> None:
    sigterm = SignalException("got signal", sigval=signal.SIGTERM)
    outcome = classify(sigterm, settings(), AgentRecord(starts=0))
    assert outcome.exit_code == 143
    assert outcome.headline.startswith("received SIGTERM during the rendezvous (backend c10d")
    assert outcome.headline.endswith("no worker was running")
    outcome = classify(sigterm, settings(), AgentRecord(starts=1, running=False))
    assert outcome.headline.startswith("received SIGTERM during a new rendezvous round, after a failure (backend")


def test_a_signal_in_the_exit_barrier_after_every_worker_succeeded_is_a_success() -> None:
    """The pod's work is done; SIGTERM only ends its wait for the others (issue 31, class 6)."""
    seen = AgentRecord(starts=1, succeeded=True, barrier_signal=signal.SIGTERM)
    outcome = classify(SignalException("got signal", sigval=signal.SIGTERM), settings(), seen)
    assert outcome.exit_code == 0
    assert outcome.headline == (
        "succeeded; every local worker succeeded; SIGTERM arrived while waiting in the exit barrier for the "
        "other nodes, which are not needed any more: left it"
    )


def test_connection_error_names_its_cause() -> None:
    assert classify(connection_error(), settings()).details == "caused by DistNetworkError: Connection refused"


def test_agent_traceback_only_with_debug() -> None:
    try:
        raise KeyError("surprise")
    except KeyError as e:
        exc = e
    assert classify(exc, settings()).details == "run with --debug or ELASTIC_LAUNCH_DEBUG=1 for the traceback"
    debug = classify(exc, settings("--debug")).details
    assert debug.startswith("Traceback (most recent call last):") and "KeyError: 'surprise'" in debug


# ------------------------------------------------------------------------- results


def function_settings(tmp_path: Path) -> LaunchSettings:
    return resolve_settings(["--function", "elastic_workers:allreduce", "--result", str(tmp_path / "r.json")], {})


@pytest.mark.parametrize("value", [{"loss": 0.25, "steps": [1, 2]}, "done", None, 3])
def test_rank0_result_is_written_as_json(tmp_path: Path, value: Any) -> None:
    assert write_result(function_settings(tmp_path), {0: value, 1: "ignored"}).exit_code == 0
    assert json.loads((tmp_path / "r.json").read_text()) == value
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # no temp file left


def test_no_rank0_here_writes_nothing(tmp_path: Path) -> None:
    assert write_result(function_settings(tmp_path), {2: "x", 3: "y"}).exit_code == 0
    assert not (tmp_path / "r.json").exists()


@pytest.mark.parametrize("value", [{1, 2}, object(), math.nan], ids=["set", "object", "nan"])
def test_unserializable_result_is_a_user_failure(tmp_path: Path, value: Any) -> None:
    outcome = write_result(function_settings(tmp_path), {0: value})
    assert outcome.exit_code == c.EXIT_USER_FAILURE
    assert outcome.headline.startswith(
        f"--result: the rank-0 return value ({type(value).__name__}) is not JSON-serializable"
    )
    assert not (tmp_path / "r.json").exists()


# ------------------------------------------------------------------------- launch pieces


def test_environment_additions_respect_the_user() -> None:
    env: dict[str, str] = {}
    notes = apply_environment(settings(), 2, env)
    assert env == {c.ENV_DISABLE_SHARED_STORE: "1", "OMP_NUM_THREADS": "1"}
    assert len(notes) == 2 and notes[1] == "OMP_NUM_THREADS=1 for each of 2 workers (not set; set it to tune)"
    user = {c.ENV_DISABLE_SHARED_STORE: "0", "OMP_NUM_THREADS": "8"}
    apply_environment(settings(), 2, user)
    assert user == {c.ENV_DISABLE_SHARED_STORE: "0", "OMP_NUM_THREADS": "8"}
    single: dict[str, str] = {}
    apply_environment(settings(), 1, single)
    assert "OMP_NUM_THREADS" not in single


def test_launch_config_sets_every_field_explicitly(tmp_path: Path) -> None:
    s = settings(
        "--log-dir", str(tmp_path), "--max-restarts", "2", "--shutdown-timeout", "4", env={c.ENV_POD_IP: "10.1.2.3"}
    )
    config = build_launch_config(s, 3)
    assert (config.min_nodes, config.max_nodes, config.nproc_per_node) == (2, 2, 3)
    assert (config.rdzv_backend, config.rdzv_endpoint, config.run_id) == ("c10d", "train-worker-0:23456", "ns.job")
    assert (config.max_restarts, config.monitor_interval, config.start_method) == (2, 5.0, "spawn")
    assert (config.local_addr, config.shutdown_timeout) == ("10.1.2.3", 4)
    # LaunchConfig injects "timeout"; we make it equal join_timeout (c10d ignores it).
    assert config.rdzv_configs == {
        "join_timeout": 7,
        "last_call_timeout": 30,
        "close_timeout": 30,
        "heartbeat_timeout": 5,
        "read_timeout": 60,
        "timeout": 7,
    }
    assert config.logs_specs is not None and config.logs_specs.root_log_dir == str(tmp_path)


def test_entrypoints_for_both_modes() -> None:
    entry, args = entrypoint_and_args(resolve_settings(["--function", "elastic_workers:allreduce", "--", "a"], {}))
    assert (entry, args) == (call_function, ["elastic_workers:allreduce", "a"])
    entry, args = entrypoint_and_args(resolve_settings(["--", "python", "t.py", "b"], {}))
    assert (entry, args) == (sys.executable, ["t.py", "b"])


def test_trampoline_pickles_by_reference() -> None:
    # spawn and forkserver pickle the entrypoint (torch/distributed/elastic/multiprocessing/api.py).
    assert pickle.loads(pickle.dumps(call_function)) is call_function


def test_load_function() -> None:
    assert load_function("os.path:join") is os.path.join
    assert load_function("collections:OrderedDict.fromkeys")(["a"]) == {"a": None}
    with pytest.raises(TypeError, match=r"^os:sep is a str, not a function$"):
        load_function("os:sep")


# ------------------------------------------------------------------------- a peer's loss, hangs, teardown

GLOO_PEER_GONE = (
    "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
    "[127.0.0.1]:2740. This is typically caused by a remote worker crashing."
)


def error_file_of(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exc: BaseException, name: str) -> str:
    """The error file torch's @record writes for ``exc``, as a worker's."""
    path = tmp_path / f"{name}.json"
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(path))

    def fail() -> None:
        raise exc

    with pytest.raises(type(exc)):
        record(fail)()
    monkeypatch.delenv("TORCHELASTIC_ERROR_FILE")
    return str(path)


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (RuntimeError(GLOO_PEER_GONE), c.EXIT_PEER_LOST),
        (RuntimeError("Read error [127.0.0.1]:4021: Connection reset by peer"), c.EXIT_PEER_LOST),
        (dist.DistNetworkError("Failed to recv, got 0 bytes. Connection was likely closed."), c.EXIT_PEER_LOST),
        (dist.DistBackendError("NCCL error: ncclRemoteError: A call failed possibly due to a network error"), 204),
        # Not evidence of a lost peer: a wait that timed out, a refused connection, the code's own error.
        (dist.DistStoreError("wait timeout after 30000ms, keys: /x"), 1),
        (RuntimeError("Connection refused"), 1),
        (ValueError("Connection closed by peer, said the user"), 1),
    ],
    ids=["gloo-closed", "gloo-reset", "store-connection", "nccl-remote", "store-timeout", "refused", "user-text"],
)
def test_only_a_peers_loss_gets_the_retryable_peer_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exc: BaseException, code: int
) -> None:
    failure = ProcessFailure(local_rank=0, pid=7, exitcode=1, error_file=error_file_of(tmp_path, monkeypatch, exc, "e"))
    outcome = classify(ChildFailedError("train", {0: failure}), settings(), AgentRecord(starts=1))
    assert outcome.exit_code == code
    assert outcome.headline.startswith("lost a peer: global rank 0") == (code == c.EXIT_PEER_LOST)


def test_a_lost_peer_report_names_what_the_other_nodes_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    error_file = error_file_of(tmp_path, monkeypatch, RuntimeError(GLOO_PEER_GONE), "e")
    failure = ProcessFailure(local_rank=0, pid=7, exitcode=1, error_file=error_file)
    seen = AgentRecord(starts=1, peer_reports={1: "global rank 1 exited with code 2"})
    outcome = classify(ChildFailedError("train", {0: failure}), settings(), seen)
    assert outcome.exit_code == 204
    assert outcome.details.startswith(f"error file: {error_file}\nother nodes' reports:\nnode 1: global rank 1 exited")
    alone = classify(ChildFailedError("train", {0: failure}), settings(), AgentRecord(starts=1)).details
    assert "no other node reported a failure (its agent or node died with it)" in alone


def test_a_local_workers_own_exit_beats_its_peers_lost_connection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rank 1's sys.exit(2) on this node; rank 0 then fails on the closed connection, recorded first."""
    peer = failed(0, 1, 0, error_file=error_file_of(tmp_path, monkeypatch, RuntimeError(GLOO_PEER_GONE), "e"))
    now = peer.timestamp  # the second it raised; the agent's poll found the others in the same second
    outcome = classify(ChildFailedError("train", {0: peer, 1: failed(1, 2, now)}), settings(), AgentRecord(starts=1))
    assert outcome.exit_code == 2 and "global rank 1" in outcome.headline
    # Next to the agent's SIGTERM on a third worker the lost peer is still the cause.
    outcome = classify(ChildFailedError("train", {0: peer, 2: failed(2, -15, now)}), settings(), AgentRecord(starts=1))
    assert outcome.exit_code == 204 and "global rank 0" in outcome.headline


def test_a_hung_worker_exits_124_permanent() -> None:
    failure = failed(3, -6, 1_700_000_000)
    seen = AgentRecord(starts=1, hung={failure.pid: HungWorker(3, 3, failure.pid, 42.0, 0.0)})
    outcome = classify(ChildFailedError("train", {3: failure}), settings(), seen)
    assert outcome.exit_code == c.EXIT_HUNG == 124
    assert outcome.headline == (
        f"worker hung: global rank 3 (local rank 3, pid {failure.pid}) did not renew its heartbeat for 42s "
        "(--hang-timeout); the watchdog stopped it"
    )


def test_an_unreadable_error_file_keeps_the_workers_exit_and_says_why() -> None:
    failure = failed(0, 1, 1_700_000_000)
    seen = AgentRecord(starts=1, unreadable_error_files={0: "/tmp/x/attempt_0/0/error.json"})
    outcome = classify(ChildFailedError("train", {0: failure}), settings(), seen)
    assert outcome.exit_code == 1
    assert outcome.details == (
        "its error file /tmp/x/attempt_0/0/error.json could not be read (a full disk leaves it empty or cut short): "
        "classified by its exit code; its error is on its stderr above"
    )


def test_a_crash_at_teardown_after_every_other_node_finished_is_a_success_with_a_report(tmp_path: Path) -> None:
    crashed = failed(1, -11, 1_700_000_000)
    seen = AgentRecord(starts=1, succeeded=True, teardown={1: crashed}, ranks=(0, 1))
    outcome = finish(function_settings(tmp_path), seen, {0: {"loss": 0.5}, 1: None})
    assert outcome.exit_code == 0
    assert outcome.headline == (
        f"succeeded; global rank 1 (local rank 1, pid {crashed.pid}) was killed by SIGSEGV, after every other "
        "node's workers had succeeded: taken as a crash at teardown of a job that trained to the end"
    )
    assert json.loads((tmp_path / "r.json").read_text()) == {"loss": 0.5}
    # Rank 0 itself crashed: its value is lost, and --result says so instead of writing null.
    (tmp_path / "r.json").unlink()
    seen = AgentRecord(starts=1, succeeded=True, teardown={0: failed(0, -11, 1_700_000_000)}, ranks=(0, 1))
    outcome = finish(function_settings(tmp_path), seen, {0: None, 1: None})
    assert outcome.exit_code == 0 and not (tmp_path / "r.json").exists()
    assert outcome.details == "--result not written: global rank 0 ran here but its return value was lost with it"


def test_a_huge_exception_keeps_its_type_and_place_in_the_termination_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 200 KB message: the head keeps where it was raised and how it starts, the tail how it ends."""
    exc = RuntimeError("start " + "x" * 200_000 + " end")
    failure = ProcessFailure(local_rank=0, pid=7, exitcode=1, error_file=error_file_of(tmp_path, monkeypatch, exc, "e"))
    outcome = classify(ChildFailedError("train", {0: failure}), settings(), AgentRecord(starts=1))
    fitted = fit_termination_message(outcome.text)
    assert len(fitted.encode()) <= TERMINATION_LOG_LIMIT
    head, _, tail = fitted.partition("\n[...]\n")
    lines = head.split("\n")
    assert lines[0] == "worker failed: global rank 0 (local rank 0, pid 7) exited with code 1"
    assert lines[1].startswith('File "') and lines[1].endswith(", in fail")
    assert lines[2].startswith("RuntimeError: start xxx")
    assert tail.endswith("x end")


def test_an_unpicklable_return_value_fails_under_record_with_its_type(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch pickles the value to the agent after record returned: it used to fail with no error file."""
    error_file = tmp_path / "error.json"
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(error_file))
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGINT)}
    try:  # the trampoline resets them, as a worker's
        with pytest.raises(TypeError, match="returned a lock, which cannot be sent to the agent"):
            call_function("elastic_workers:return_unpicklable")
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
    message = json.loads(error_file.read_text())["message"]["message"]
    assert message == (
        "TypeError: elastic_workers:return_unpicklable returned a lock, which cannot be sent to the agent "
        "(TypeError: cannot pickle '_thread.lock' object); return plain data (numbers, strings, lists, dicts) or None"
    )
