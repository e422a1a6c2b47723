"""Run ``elastic_launch`` with resolved settings and turn its end into an exit code.

This module imports torch at import time; the CLI imports it only after the options and
the environment have been validated (:mod:`elastic_compile.entrypoint.settings`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import sys
import tempfile
import traceback
from collections.abc import Callable, Mapping, MutableMapping
from types import FrameType
from typing import Any

import torch.distributed as dist
from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure, record
from torch.distributed.elastic.rendezvous import (
    RendezvousClosedError,
    RendezvousError,
    RendezvousTimeoutError,
)
from torch.distributed.launcher.api import LaunchConfig, elastic_launch

from elastic_compile import contract as c
from elastic_compile.entrypoint import failures as fl
from elastic_compile.entrypoint import reaper, report
from elastic_compile.entrypoint.agent import AgentOptions, AgentRecord, installed
from elastic_compile.entrypoint.report import Outcome, say
from elastic_compile.entrypoint.resources import probe_accelerators, resolve_nproc
from elastic_compile.entrypoint.settings import (
    BACKEND_DEFAULT_PORTS,
    LaunchSettings,
    UsageError,
    check_result_target,
    parse_endpoint,
)
from elastic_compile.entrypoint.worker import call_function

# The signals torch's PContext turns into SignalException (LaunchConfig's default).
SIGNALS_TO_HANDLE = "SIGTERM,SIGINT,SIGHUP,SIGQUIT"


# The LaunchConfig fields elastic-launch sets that older torch releases lack, and the release
# that added each (docs/install.md). Without them every launch died on a TypeError inside the
# agent: exit 203, retryable, so the operator's ExitCode policy recreated the pods forever.
NEWER_LAUNCH_CONFIG_FIELDS = (("signals_to_handle", "2.11"), ("shutdown_timeout", "2.12"))
OLDEST_TORCH = "2.12"


def torch_too_old() -> str | None:
    """Why this torch cannot run elastic-launch (a LaunchConfig field it sets is missing), or None."""
    fields = {f.name for f in dataclasses.fields(LaunchConfig)}
    missing = [f"{name} (torch {since})" for name, since in NEWER_LAUNCH_CONFIG_FIELDS if name not in fields]
    if not missing:
        return None
    import torch

    return (
        f"torch {torch.__version__} is too old: its LaunchConfig has no {', '.join(missing)}; "
        f"elastic-launch needs torch {OLDEST_TORCH} or newer in the image"
    )


def apply_environment(settings: LaunchSettings, nproc: int, environ: MutableMapping[str, str]) -> list[str]:
    """Set what the agent and its workers need in ``environ``; returns notes to log.

    Nothing the user set is overwritten.
    """
    notes: list[str] = []
    # Without it the rank-0 agent's TCPStore is shared across attempts and restarts and
    # scale-up fail (pytorch#135712; measured: 4/12 vs 6/6 restarts succeeded, docs/elastic-launch.md).
    # Read by the rendezvous handler when elastic_launch creates it, so set it before.
    user_value = environ.get(c.ENV_DISABLE_SHARED_STORE)
    if user_value is None:
        environ[c.ENV_DISABLE_SHARED_STORE] = "1"
        notes.append(f"{c.ENV_DISABLE_SHARED_STORE}=1: each attempt gets its own store (restarts, scale-up)")
    else:
        notes.append(f"{c.ENV_DISABLE_SHARED_STORE}={user_value} kept from the environment")
    # torchrun does this, elastic_launch does not (torch/distributed/run.py): N workers each
    # starting one OpenMP thread per CPU oversubscribe the container N times.
    if nproc > 1 and "OMP_NUM_THREADS" not in environ:
        environ["OMP_NUM_THREADS"] = "1"
        notes.append(f"OMP_NUM_THREADS=1 for each of {nproc} workers (not set; set it to tune)")
    return notes


def build_launch_config(settings: LaunchSettings, nproc: int) -> LaunchConfig:
    """The ``LaunchConfig``, every field that matters set explicitly.

    LaunchConfig's defaults (etcd, 3 restarts, 0.1 s polling) are torchrun's opposites
    (torch/distributed/launcher/api.py), so none of them is left to chance.
    """
    return LaunchConfig(
        min_nodes=settings.min_nodes,
        max_nodes=settings.max_nodes,
        nproc_per_node=nproc,
        logs_specs=DefaultLogsSpecs(log_dir=settings.log_dir),
        run_id=settings.run_id,
        rdzv_endpoint=settings.rdzv_endpoint,
        rdzv_backend=settings.rdzv_backend,
        rdzv_configs=dict(settings.rdzv_configs),
        # LaunchConfig always adds a "timeout" key (900 s unless given). c10d and etcd-v2
        # ignore it, the legacy etcd backend reads it as its join timeout: make it agree
        # with join_timeout everywhere instead of showing a stray 900 in torch's log.
        rdzv_timeout=settings.join_timeout,
        max_restarts=settings.max_restarts,
        monitor_interval=settings.monitor_interval,
        start_method=settings.start_method,
        local_addr=settings.local_addr,
        signals_to_handle=SIGNALS_TO_HANDLE,
        shutdown_timeout=settings.shutdown_timeout,
    )


def entrypoint_and_args(settings: LaunchSettings) -> tuple[Callable[..., Any] | str, list[str]]:
    """Function mode: the trampoline and ``[target, *args]``; script mode: the command."""
    if settings.function is not None:
        return call_function, [settings.function, *settings.command]
    return settings.command[0], list(settings.command[1:])


def _raise_signal_exception(signum: int, _frame: FrameType | None) -> None:
    sig = signal.Signals(signum)
    raise SignalException(f"Process {os.getpid()} got signal: {sig.name}", sigval=sig)


def install_signal_handlers() -> None:
    """Turn termination signals into ``SignalException`` from the start.

    torch installs the same handlers, but only when it starts the workers (PContext.start,
    torch/distributed/elastic/multiprocessing/api.py): a SIGTERM during the rendezvous would otherwise kill the agent
    with the default action instead of ending in our 128+N exit code and report.
    """
    for name in SIGNALS_TO_HANDLE.split(","):
        signal.signal(getattr(signal, name), _raise_signal_exception)


def _launch_agent(
    config: LaunchConfig,
    entrypoint: Callable[..., Any] | str,
    args: list[str],
    seen: AgentRecord,
    settings: LaunchSettings,
) -> Any:
    options = AgentOptions(
        monitor_interval=settings.monitor_interval,
        hang_timeout=settings.hang_timeout,
        heartbeat_dir=os.path.join(settings.log_dir or tempfile.gettempdir(), "heartbeat"),
        rdzv_port=endpoint_port(settings),
        exit_code=lambda failures, rec: failure_exit_code(failures, rec, settings.monitor_interval),
    )
    with installed(seen, options):
        return elastic_launch(config, entrypoint)(*args)


def endpoint_port(settings: LaunchSettings) -> int | None:
    """The rendezvous endpoint's port (None for an etcd backend, whose store is not an agent's)."""
    if settings.rdzv_backend != "c10d":
        return None
    _host, port = parse_endpoint(settings.rdzv_endpoint, "endpoint", BACKEND_DEFAULT_PORTS["c10d"])
    return port or None


def failure_exit_code(failures: Mapping[int, Any], record: AgentRecord, monitor_interval: float) -> int:
    """The exit code of a launch whose workers failed for good (the report is :func:`worker_outcome`'s)."""
    rank, _killed = fl.root_failure(failures, monitor_interval)
    failure = failures[rank]
    if failure.pid in record.hung:
        return c.EXIT_HUNG
    if fl.is_peer_loss(failure):
        return c.EXIT_PEER_LOST
    return report.worker_exit_code(failure.exitcode)


def worker_outcome(failures: Mapping[int, ProcessFailure], record: AgentRecord, monitor_interval: float) -> Outcome:
    """The exit code and report for local workers that failed for good (torch's ``ChildFailedError``)."""
    rank, killed = fl.root_failure(failures, monitor_interval)
    failure = failures[rank]
    error_file = None if failure.error_file == fl.NO_ERROR_FILE else failure.error_file
    outcome = report.worker_failure(
        rank,
        local_rank=failure.local_rank,
        exitcode=failure.exitcode,
        pid=failure.pid,
        error_file=error_file,
        message=failure.message,
    )
    code = failure_exit_code(failures, record, monitor_interval)
    hung = record.hung.get(failure.pid)
    headline, details = outcome.headline, outcome.details
    if hung is not None:
        headline = (
            f"worker hung: global rank {rank} (local rank {failure.local_rank}, pid {failure.pid}) did not renew "
            f"its heartbeat for {hung.silent_for:.0f}s ({c.OPT_HANG_TIMEOUT}); the watchdog stopped it"
        )
        details = "its Python stacks (faulthandler, on SIGABRT) are on the worker's stderr above"
    elif code == c.EXIT_PEER_LOST:
        headline = (
            f"lost a peer: global rank {rank} (local rank {failure.local_rank}, pid {failure.pid}) failed only "
            "because a process on another node went away (its OOM kill, preemption or node loss): no evidence "
            "against the code here"
        )
        reports = [f"node {node}: {text}" for node, text in sorted(record.peer_reports.items())]
        seen = "\n".join(reports) if reports else "no other node reported a failure (its agent or node died with it)"
        details = f"other nodes' reports:\n{seen}\n{outcome.details}"
    unreadable = record.unreadable_error_files.get(failure.local_rank)
    if error_file:
        details = f"error file: {error_file}\n{details}"
    elif unreadable is not None and hung is None:
        # Not "wrap main in record": it did, and writing the file failed (ENOSPC).
        details = (
            f"its error file {unreadable} could not be read (a full disk leaves it empty or cut short): "
            "classified by its exit code; its error is on its stderr above"
        )
    others = len(failures) - 1
    if others:
        why = (
            f"of {others + 1} failed local workers seen at once, the one killed by a signal: the others' "
            "errors follow from losing it"
            if killed
            else f"first of {others + 1} failed local workers"
        )
        headline = f"{headline} ({why})"
    return Outcome(code, headline, details)


def classify(exc: BaseException, settings: LaunchSettings, record: AgentRecord | None = None) -> Outcome:
    """Map an exception out of ``elastic_launch`` to an exit code and a report."""
    record = record if record is not None else AgentRecord()
    if isinstance(exc, UsageError):  # --nproc-per-node gpu without a GPU
        return Outcome(c.EXIT_USAGE, f"error: {exc}")
    where = f"backend {settings.rdzv_backend}, endpoint {settings.rdzv_endpoint}, run id {settings.run_id}"
    if isinstance(exc, ChildFailedError):
        return worker_outcome(exc.failures, record, settings.monitor_interval)
    if isinstance(exc, SignalException):
        name = exc.sigval.name
        if record.barrier_signal is not None and record.succeeded:
            return success_outcome(
                record,
                f"every local worker succeeded; {name} arrived while waiting in the exit barrier for the other "
                "nodes, which are not needed any more: left it",
            )
        if not record.running:
            when = "the rendezvous" if record.starts == 0 else "a new rendezvous round, after a failure"
            return Outcome(
                c.EXIT_SIGNAL_BASE + int(exc.sigval),
                f"received {name} during {when} ({where}): no worker was running",
            )
        return Outcome(
            c.EXIT_SIGNAL_BASE + int(exc.sigval),
            f"received {name}: stopped the workers ({name}, then SIGKILL "
            f"for any still running after {settings.shutdown_timeout}s)",
        )
    if isinstance(exc, RendezvousTimeoutError):
        # torch raises it with an empty message (dynamic_rendezvous.py): say what timed out.
        return Outcome(
            c.EXIT_RENDEZVOUS_TIMEOUT,
            f"rendezvous timeout: fewer than {settings.min_nodes} node(s) joined within "
            f"join_timeout={settings.join_timeout}s (nnodes {settings.nnodes}; {where}); check that "
            f"the other pods run and can reach {settings.rdzv_endpoint}",
        )
    if isinstance(exc, RendezvousClosedError):
        return Outcome(
            c.EXIT_RENDEZVOUS_ERROR,
            f"rendezvous closed ({where}): an agent of this run ended for good (its job succeeded or failed), "
            "and it closed the run; a retry can join once the store at the endpoint is replaced",
        )
    if isinstance(exc, (RendezvousError, dist.DistNetworkError, dist.DistStoreError)):
        cause = exc.__cause__
        detail = f"\ncaused by {type(cause).__name__}: {cause}" if cause is not None else ""
        return Outcome(
            c.EXIT_RENDEZVOUS_ERROR,
            f"rendezvous error ({where}): {type(exc).__name__}: {exc}".rstrip(": "),
            detail.strip("\n"),
        )
    details = (
        "".join(traceback.format_exception(exc))
        if settings.debug
        else f"run with {c.OPT_DEBUG} or {c.ENV_DEBUG}=1 for the traceback"
    )
    return Outcome(c.EXIT_AGENT_ERROR, f"agent error: {type(exc).__name__}: {exc}", details)


def success_outcome(record: AgentRecord, why: str = "") -> Outcome:
    """Exit 0, with what the report should still say (a crash at teardown, an early exit barrier)."""
    notes = [why] if why else []
    if record.teardown:
        rank, _killed = fl.root_failure(record.teardown, 0)
        failure = record.teardown[rank]
        notes.append(
            f"global rank {rank} (local rank {failure.local_rank}, pid {failure.pid}) {fl.describe_end(failure)}, "
            "after every other node's workers had succeeded: taken as a crash at teardown of a job that trained "
            "to the end"
        )
    if record.barrier_left:
        notes.append(f"left the exit barrier before every node arrived: {record.barrier_left}")
    if not notes:
        return Outcome(0)
    return Outcome(0, "succeeded; " + notes[0], "\n".join(notes[1:]))


def write_result(settings: LaunchSettings, results: dict[int, Any]) -> Outcome:
    """Write the rank-0 return value as JSON if this agent ran rank 0 and ``--result`` is set."""
    if settings.result_path is None or 0 not in results:
        return Outcome(0)
    try:
        # allow_nan=False: NaN and Infinity are not JSON; a reader would choke on them later.
        text = json.dumps(results[0], allow_nan=False)
    except (TypeError, ValueError) as e:
        return Outcome(
            c.EXIT_USER_FAILURE,
            f"{c.OPT_RESULT}: the rank-0 return value ({type(results[0]).__name__}) is not JSON-serializable: {e}",
        )
    try:
        # Checked at start too; a worker may have put a link there since.
        check_result_target(settings.result_path)
    except UsageError as e:
        return Outcome(c.EXIT_USAGE, f"error: {e}")
    directory = os.path.dirname(os.path.abspath(settings.result_path))
    tmp = None
    try:
        # Write then rename in the same directory: a reader never sees half a file, and a
        # rename replaces the directory entry, never what a link would point at. mkstemp
        # creates with O_EXCL (no link followed) and mode 0600: give the file the umask's mode.
        fd, tmp = tempfile.mkstemp(prefix=".result-", dir=directory)
        os.fchmod(fd, 0o666 & ~current_umask())
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text + "\n")
        os.replace(tmp, settings.result_path)
    except OSError as e:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        return Outcome(c.EXIT_AGENT_ERROR, f"{c.OPT_RESULT} {settings.result_path}: {e}")
    return Outcome(0)


def current_umask() -> int:
    """This process's umask, read without changing it (Linux ``/proc``), else the usual 022."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o022


def emit(outcome: Outcome, settings: LaunchSettings) -> None:
    """Report an outcome that has something to say on stderr and in the termination log."""
    if outcome.exit_code == 0 and not outcome.headline:
        return
    say(outcome.headline)
    if outcome.details:
        print(outcome.details, file=sys.stderr, flush=True)
    if outcome.exit_code != c.EXIT_USAGE:  # a usage error stays one line
        say(f"exit {outcome.exit_code} ({report.exit_code_meaning(outcome.exit_code)})")
    report.write_termination_log(
        settings.termination_log, f"{c.LAUNCHER}: {outcome.text}", create=settings.termination_log_create
    )


def finish(settings: LaunchSettings, seen: AgentRecord, results: dict[int, Any], why: str = "") -> Outcome:
    """A successful launch's outcome: the result written, and what the report should say."""
    # A worker that crashed at teardown returned nothing (the agent filled in None for it).
    results = {rank: value for rank, value in results.items() if rank not in seen.teardown}
    written = write_result(settings, results)
    if written.exit_code != 0:
        return written
    outcome = success_outcome(seen, why)
    if settings.result_path is not None and 0 in seen.ranks and 0 not in results:
        lost = f"{c.OPT_RESULT} not written: global rank 0 ran here but its return value was lost with it"
        outcome = Outcome(0, outcome.headline or f"succeeded; {lost}", f"{outcome.details}\n{lost}".strip("\n"))
    return outcome


def _launch(settings: LaunchSettings, seen: AgentRecord) -> Outcome:
    nproc, counted = resolve_nproc(settings.nproc_per_node, probe_accelerators)
    if isinstance(settings.nproc_per_node, str):
        say(f"{c.OPT_NPROC_PER_NODE} {settings.nproc_per_node}: {nproc} worker(s), from the {counted}")
    for note in apply_environment(settings, nproc, os.environ):
        say(note)
    config = build_launch_config(settings, nproc)
    entrypoint, args = entrypoint_and_args(settings)
    say(
        f"run id {settings.run_id}: nnodes {settings.nnodes}, {nproc} worker(s) per node, "
        f"{settings.rdzv_backend} rendezvous at {settings.rdzv_endpoint}, "
        f"max_restarts {settings.max_restarts}"
        + (f", hang timeout {settings.hang_timeout}s (${c.ENV_HEARTBEAT_FILE})" if settings.hang_timeout else "")
    )
    # With TORCHELASTIC_ERROR_FILE set (a launcher above us asked for it), torch's record
    # copies the root cause there; without it, record would only log that it has nowhere
    # to copy to.
    launch = record(_launch_agent) if os.environ.get("TORCHELASTIC_ERROR_FILE") else _launch_agent
    results = launch(config, entrypoint, args, seen, settings)
    return finish(settings, seen, results or {})


def run_launch(settings: LaunchSettings) -> int:
    """Resolve the worker count, prepare the environment, launch, report; returns the exit code.

    Must run on the main thread: torch installs signal handlers there, and without them
    a SIGTERM orphans the workers (torch/distributed/elastic/multiprocessing/api.py).
    """
    too_old = torch_too_old()
    if too_old is not None:  # permanent: a retry runs the same image
        outcome = Outcome(c.EXIT_USAGE, f"error: {too_old}")
        emit(outcome, settings)
        return outcome.exit_code
    install_signal_handlers()
    subreaper = reaper.become_subreaper()
    seen = AgentRecord()
    try:
        outcome = _launch(settings, seen)
    except Exception as e:  # every way out becomes an exit code and a report
        outcome = classify(e, settings, seen)
        if outcome.exit_code == 0:  # a signal in the exit barrier after every worker succeeded
            outcome = finish(settings, seen, seen.return_values, outcome.headline.removeprefix("succeeded; "))
    emit(outcome, settings)
    sweep_leftovers(settings, subreaper)
    return outcome.exit_code


def sweep_leftovers(settings: LaunchSettings, subreaper: bool) -> None:
    """Stop what the workers left running (detached children), then say what it was.

    Termination signals are ignored meanwhile: the exit code is decided, the sweep is
    bounded, and a second SIGTERM must not abandon it halfway.
    """
    previous = {name: signal.signal(getattr(signal, name), signal.SIG_IGN) for name in SIGNALS_TO_HANDLE.split(",")}
    try:
        left = reaper.sweep(grace=min(reaper.SWEEP_GRACE_SECONDS, max(settings.shutdown_timeout, 1)))
    finally:
        for name, handler in previous.items():
            signal.signal(getattr(signal, name), handler)
    if left:
        how = "" if subreaper else " (not a subreaper here: detached ones may have escaped)"
        say(f"stopped {len(left)} process(es) the workers left running{how}: {', '.join(left)}")
