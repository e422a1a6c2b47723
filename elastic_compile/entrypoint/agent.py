"""The torch elastic agent elastic-launch runs: torch's ``LocalElasticAgent``, with hooks for a cluster's faults.

``elastic_launch`` builds its agent inside ``launch_agent`` (torch/distributed/launcher/api.py)
from the module's name ``LocalElasticAgent``; :func:`installed` puts a subclass under that
name for the duration of one launch. The subclass keeps torch's loop (rendezvous, start,
monitor, restart) and changes what a cluster's faults exposed (measured with torch 2.13 on
2-pod jobs, docs/elastic-launch.md "Faults"):

* **The exit barrier** (:meth:`_exit_barrier`). torch waits for the other agents in one
  blocking C++ store call of up to 300 s, during which a SIGTERM is handled only when the
  call returns (a pod exited 60 s after SIGTERM, past its grace period). Here the wait
  polls the store, so a signal ends it at once. It is also left early when waiting is
  pointless: the run was closed, another node restarted its workers or reported a failure.
  After it, every agent closes the rendezvous and waits (a few seconds at most) until every
  agent has closed it, so that the agent hosting the store does not exit while the others
  still use it (each used to print a C++ TCPStore stack trace at the end of a clean run).
* **A failure after every other node finished** (:meth:`_after_failure`). A worker that
  crashes at teardown (after ``destroy_process_group``, common with NCCL and CUDA) failed a
  job that trained to the end; torch restarted it into a rendezvous nobody else would join
  (201 after ``join_timeout``) while the other nodes waited 300 s in the exit barrier, and
  under the ExitCode policy the pod was recreated into a closed run again and again. When
  every other node's workers succeeded (they all reached the exit barrier), the failure is
  taken as this node's end: the agent joins the barrier and succeeds, with the failure in
  its report.
* **Failure reports between nodes.** A node whose workers failed writes one line about it
  to the rendezvous store; a node whose workers failed only because a peer went away
  (:func:`.failures.is_peer_loss`) reads them, to name the real cause.
* **The rendezvous is closed only by a final end** (:class:`_Handler`). torch closes it
  whenever an agent ends by success or failure; a pod that exits with a retryable code is
  recreated by the operator and must be able to rejoin the same run.
* **Error files that cannot be read** (:meth:`_discard_unreadable_error_files`): a worker that
  raised in a full temp directory leaves an empty ``error.json``, on which torch's agent
  failed (JSONDecodeError, exit 203) and the user's error was lost.
* **A hang watchdog** (``--hang-timeout``, :meth:`_watch_heartbeats`): each worker gets a
  heartbeat file to renew; the one silent first, across nodes, is stopped once its silence
  exceeds the timeout (SIGABRT, which makes ``faulthandler`` print its Python stacks, then
  SIGKILL). Its peers, silent because they wait for it in a collective, are not.

Store operations on the way out of a signal are bounded (:func:`_bounded`): a store whose host
vanished would otherwise hold the pod past its grace period.

Every hook overrides a method of ``LocalElasticAgent`` or ``SimpleElasticAgent`` that torch
has had since 2.0 (``_invoke_run``, ``_monitor_workers``, ``_exit_barrier``,
``_setup_local_watchdog``, ``_start_workers``, ``_stop_workers``); the tests run the real agent
with real processes.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import torch.distributed.launcher.api as launcher_api
from torch._C._distributed_c10d import Store
from torch.distributed.elastic.agent.server.api import (
    DEFAULT_ROLE,
    RunResult,
    Worker,
    WorkerGroup,
    WorkerSpec,
    WorkerState,
)
from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent
from torch.distributed.elastic.multiprocessing import SignalException
from torch.distributed.elastic.rendezvous import RendezvousHandler, RendezvousInfo

from elastic_compile import contract as c
from elastic_compile.entrypoint import failures as fl
from elastic_compile.entrypoint.report import say

#: Store keys (under the round's prefix, so each rendezvous round has its own): the count of
#: agents whose workers succeeded, the flag the last of them sets, the count of agents that
#: closed the rendezvous afterwards, and each failed agent's one-line report.
ARRIVED_KEY: Final = "elastic-launch/exit/arrived"
ALL_ARRIVED_KEY: Final = "elastic-launch/exit/all-arrived"
DEPARTED_KEY: Final = "elastic-launch/exit/departed"
FAILURE_KEY: Final = "elastic-launch/failure/"
#: The report of a node whose workers failed only because of another's loss.
LOST_PEER: Final = "lost a peer"
#: When a node's silent worker last renewed its heartbeat (seconds since the epoch), by group rank.
SILENT_KEY: Final = "elastic-launch/silent/"
#: How long a node with a silent worker waits, beyond a monitor interval, for other nodes' notes.
SILENT_SETTLE_SECONDS: Final = 1.0

#: How often a wait on the store looks again. A store check is one round trip (100 took
#: 10 ms here); the wait itself sleeps in Python, where a signal handler runs at once.
POLL_SECONDS: Final = 0.25
#: How often the exit barrier asks the rendezvous whether waiting is still worth it (a
#: state read on the store, heavier than a key check).
BARRIER_CHECK_SECONDS: Final = 1.0
#: After the exit barrier, how long an agent waits for the others to close the rendezvous.
#: Closing is one compare-and-set; this only covers an agent that died in between.
DEPART_WAIT_SECONDS: Final = 10.0
#: After a local failure, how long to wait for the other nodes to reach the exit barrier or
#: report a failure, in monitor intervals plus a margin: their agents notice their workers'
#: end within one interval of it (the margin covers stopping workers and a slow store).
SETTLE_INTERVALS: Final = 2
SETTLE_MARGIN_SECONDS: Final = 5.0
#: How long a peer's failure report may take to arrive, beyond one monitor interval.
REPORT_MARGIN_SECONDS: Final = 2.0
#: A hung worker gets SIGABRT (faulthandler prints its stacks), then SIGKILL after this long.
HANG_KILL_GRACE_SECONDS: Final = 5.0
#: How long a store operation on the way out of a signal may take before it is abandoned.
SIGNAL_STORE_SECONDS: Final = 2.0
#: A published failure report is cut to this many characters (it is one line in a store).
REPORT_CHARS: Final = 400


@dataclass
class HungWorker:
    """A worker the watchdog stopped: whose heartbeat went silent, and for how long."""

    global_rank: int
    local_rank: int
    pid: int
    silent_for: float
    signalled_at: float


@dataclass
class AgentRecord:
    """What the agent saw, for the report and the exit code (:mod:`.launch` reads it)."""

    #: Times the worker group was started (0: the rendezvous never completed).
    starts: int = 0
    #: Whether workers run now (False between a failure and the next start, or before the first).
    running: bool = False
    #: Every local worker succeeded, or failed only after every other node had finished.
    succeeded: bool = False
    return_values: dict[int, Any] = field(default_factory=dict)
    #: The local failures that came after every other node had finished (taken as a success).
    teardown: dict[int, Any] = field(default_factory=dict)
    #: Why the exit barrier was left before every agent arrived ("": it was not).
    barrier_left: str = ""
    #: The signal that ended the agent while it waited in the exit barrier.
    barrier_signal: signal.Signals | None = None
    #: What other nodes reported about their failures in the round this node lost a peer in.
    peer_reports: dict[int, str] = field(default_factory=dict)
    hung: dict[int, HungWorker] = field(default_factory=dict)
    #: A worker here went silent too, but another node's went silent first (said once).
    hang_deferred: bool = False
    #: When this node wrote that its worker is silent (monotonic), in this start.
    silent_since: float | None = None
    #: Error files that could not be read (a full disk leaves them empty) and were set aside, by local rank.
    unreadable_error_files: dict[int, str] = field(default_factory=dict)
    #: Whether this agent's end is final (success, or a permanent failure): only then it
    #: closes the rendezvous. A pod that exits retryable is recreated and must find it open.
    close_run: bool = False
    #: The global ranks this agent ran in its last round.
    ranks: tuple[int, ...] = ()


@dataclass(frozen=True)
class AgentOptions:
    """What the agent needs from the launcher's settings."""

    monitor_interval: float
    hang_timeout: int | None  # seconds; None: no watchdog
    heartbeat_dir: str  # where the workers' heartbeat files go (under the log directory)
    rdzv_port: int | None  # the rendezvous store's port, to tell whether this process hosts it
    #: The exit code an unconverted final failure will get (:func:`.launch.failure_exit_code`).
    exit_code: Callable[[Mapping[int, Any], AgentRecord], int]


class _Handler(RendezvousHandler):
    """torch's rendezvous handler, whose ``shutdown`` runs once and closes the run only on a final end.

    ``launch_agent`` calls ``shutdown`` when the agent ends by anything but a signal, which
    closes the run for every later joiner (``RendezvousClosedError``). After a retryable
    end the operator recreates the pod to rejoin; so the run is closed only when
    :attr:`AgentRecord.close_run` says so; otherwise only the keep-alive heartbeats stop.
    """

    def __init__(self, inner: RendezvousHandler, record: AgentRecord) -> None:
        self._inner = inner
        self._record = record
        self._shut: bool | None = None

    def get_backend(self) -> str:
        return self._inner.get_backend()

    @property
    def use_agent_store(self) -> bool:
        return bool(self._inner.use_agent_store)

    def next_rendezvous(self) -> RendezvousInfo:
        return self._inner.next_rendezvous()

    def is_closed(self) -> bool:
        return self._inner.is_closed()

    def set_closed(self) -> None:
        self._inner.set_closed()  # type: ignore[no-untyped-call]

    def num_nodes_waiting(self) -> int:
        return self._inner.num_nodes_waiting()

    def get_run_id(self) -> str:
        return self._inner.get_run_id()

    def shutdown(self) -> bool:
        if self._shut is None:
            if self._record.close_run:
                self._shut = self._inner.shutdown()
            else:
                # DynamicRendezvousHandler's keep-alive thread; other handlers have none.
                stop = getattr(self._inner, "_stop_heartbeats", None)
                if callable(stop):
                    stop()
                self._shut = True
        return self._shut

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _store_int(store: Store, key: str) -> int:
    """The counter ``key`` (0 when absent) without changing it."""
    return int(store.add(key, 0))


def _published(store: Store, group_world_size: int, skip: int) -> dict[int, str]:
    """The failure reports other nodes wrote in this round, by group rank."""
    found: dict[int, str] = {}
    for rank in range(group_world_size):
        key = f"{FAILURE_KEY}{rank}"
        if rank != skip and store.check([key]):
            found[rank] = store.get(key).decode(errors="replace")
    return found


def agent_class(record: AgentRecord, options: AgentOptions) -> type[LocalElasticAgent]:
    """A ``LocalElasticAgent`` subclass that reports to ``record`` (module docstring)."""

    class ElasticLaunchAgent(LocalElasticAgent):
        def __init__(self, spec: WorkerSpec, *args: Any, **kwargs: Any) -> None:
            # The same WorkerSpec object is the one launch_agent shuts the handler down through.
            spec.rdzv_handler = _Handler(spec.rdzv_handler, record)
            super().__init__(spec, *args, **kwargs)

        # ------------------------------------------------------------- starting

        def _start_workers(self, worker_group: WorkerGroup) -> dict[int, Any]:
            record.starts += 1
            record.ranks = tuple(w.global_rank for w in worker_group.workers)
            record.hung.clear()
            record.hang_deferred = False
            record.silent_since = None
            started: dict[int, Any] = super()._start_workers(worker_group)
            record.running = True
            # One line per rendezvous round: an elastic job's size is visible in every pod's log
            # (and `elastic-compile run` reports it as it changes).
            workers = worker_group.workers
            world = workers[0].world_size if workers else 0
            say(
                f"{c.WORLD_SIZE_WORDS}{world}: node rank {worker_group.group_rank} "
                f"of {worker_group.group_world_size} node(s), start {record.starts}"
            )
            return started

        def _stop_workers(self, worker_group: WorkerGroup) -> None:
            super()._stop_workers(worker_group)
            record.running = False

        def _setup_local_watchdog(self, envs: dict[int, dict[str, str]]) -> None:
            super()._setup_local_watchdog(envs)
            if options.hang_timeout is None:
                return
            # A directory per start: a restarted worker must not inherit a stale heartbeat.
            directory = Path(options.heartbeat_dir) / str(record.starts)
            directory.mkdir(parents=True, exist_ok=True)
            for local_rank, env in envs.items():
                env[c.ENV_HEARTBEAT_FILE] = str(directory / str(local_rank))

        def _invoke_run(self, role: str = DEFAULT_ROLE) -> RunResult:
            try:
                result: RunResult = super()._invoke_run(role)
                return result
            except SignalException as e:
                if record.starts and record.barrier_signal is None:
                    # Before its workers stop and its peers' collectives break: the others' reports name it.
                    self._publish_quietly(f"received {e.sigval.name}: its pod is being deleted or preempted")
                raise

        def _publish_quietly(self, text: str) -> None:
            group = self._worker_group
            store: Store | None = getattr(group, "store", None)
            if store is not None and (group.group_world_size or 1) > 1:
                _bounded(lambda: self._publish(store, group.group_rank or 0, text))

        # ------------------------------------------------------------- monitoring

        def _monitor_workers(self, worker_group: WorkerGroup) -> RunResult:
            self._discard_unreadable_error_files()
            try:
                result: RunResult = super()._monitor_workers(worker_group)
            except ValueError:  # such a file, written between that look and torch's poll
                self._discard_unreadable_error_files()
                result = super()._monitor_workers(worker_group)
            if result.state == WorkerState.SUCCEEDED:
                record.succeeded = True
                record.return_values = dict(result.return_values)
            elif result.state in (WorkerState.FAILED, WorkerState.UNHEALTHY) and result.failures:
                result = self._after_failure(worker_group, result)
            elif result.state == WorkerState.HEALTHY and options.hang_timeout is not None:
                self._watch_heartbeats(worker_group, options.hang_timeout)
            return result

        def _discard_unreadable_error_files(self) -> None:
            """Set aside the error file of an exited worker that is not JSON, before torch reads it.

            torch's ``ProcessFailure`` raises on such a file inside the agent's monitor
            (exit 203, the user's error lost). Without it the failure is classified by the
            worker's exit code, as for a worker that wrote none.
            """
            pcontext = self._pcontext
            if pcontext is None:
                return
            for local_rank, pid in pcontext.pids().items():
                path = pcontext.error_files.get(local_rank)
                if not path or _running(pid) or not os.path.isfile(path):
                    continue
                try:
                    with open(path, encoding="utf-8") as f:
                        json.load(f)
                except (OSError, ValueError):
                    with contextlib.suppress(OSError):
                        os.replace(path, path + ".unreadable")
                    record.unreadable_error_files[local_rank] = path

        def _after_failure(self, worker_group: WorkerGroup, result: RunResult) -> RunResult:
            failures = result.failures
            # torch annotates the store as None (its initial value); it is the round's store here.
            store: Store | None = getattr(worker_group, "store", None)
            size, me = worker_group.group_world_size or 1, worker_group.group_rank or 0
            if size > 1 and store is not None:
                try:
                    if fl.all_peer_losses(failures, options.monitor_interval):
                        self._publish(store, me, LOST_PEER)
                        record.peer_reports = self._reports(store, size, me)
                    elif self._others_finished(store, size, me):
                        record.teardown = dict(failures)
                        record.succeeded = True
                        record.return_values = dict(result.return_values)
                        # torch's bookkeeping wants a value for every local worker; the failed
                        # ones' are lost (None), and :mod:`.launch` never writes those as a result.
                        values = {w.global_rank: result.return_values.get(w.global_rank) for w in worker_group.workers}
                        return RunResult(state=WorkerState.SUCCEEDED, return_values=values)
                    else:
                        self._publish(store, me, _summary(failures, options.monitor_interval, record))
                except SignalException:
                    raise
                except Exception as e:  # the store may be gone with the node that hosted it
                    say(f"could not share failure reports through the rendezvous store: {type(e).__name__}: {e}")
            if self._remaining_restarts == 0 or result.state == WorkerState.UNHEALTHY:
                # No restart follows: this is how the agent ends.
                record.close_run = options.exit_code(failures, record) < c.EXIT_SIGNAL_BASE
            return result

        def _publish(self, store: Store, group_rank: int, text: str) -> None:
            store.set(f"{FAILURE_KEY}{group_rank}", text[:REPORT_CHARS])

        def _reports(self, store: Store, group_world_size: int, me: int) -> dict[int, str]:
            """The other nodes' failure reports, waiting a little for the first (their agents poll too)."""
            deadline = time.monotonic() + options.monitor_interval + REPORT_MARGIN_SECONDS
            while True:
                found = _published(store, group_world_size, me)
                if any(text != LOST_PEER for text in found.values()):
                    return found
                if time.monotonic() >= deadline:
                    return found
                time.sleep(POLL_SECONDS)

        def _others_finished(self, store: Store, size: int, me: int) -> bool:
            """Whether every other node's workers succeeded: all of them reached the exit barrier.

            Waits until every other node has either arrived there or reported a failure, for
            at most a few monitor intervals, and stops early when the rendezvous shows that
            they will not come (closed, or nodes waiting for a new round).
            """
            others = size - 1
            wait = SETTLE_INTERVALS * options.monitor_interval + SETTLE_MARGIN_SECONDS
            deadline = time.monotonic() + wait
            next_check = time.monotonic() + BARRIER_CHECK_SECONDS
            while True:
                arrived = _store_int(store, ARRIVED_KEY)
                if arrived >= others:
                    return True
                reported = len(_published(store, size, me))
                now = time.monotonic()
                if arrived + reported >= others or now >= deadline:
                    return False
                if now >= next_check:
                    if self._rendezvous_moved_on():
                        return False
                    next_check = now + BARRIER_CHECK_SECONDS
                time.sleep(POLL_SECONDS)

        def _rendezvous_moved_on(self) -> str:
            """Why the other nodes will not reach this round's exit barrier ("" if they still may)."""
            handler = self._rdzv_handler
            if handler.is_closed():
                return "the rendezvous was closed: another node's agent ended"
            if handler.num_nodes_waiting() > 0:
                return "another node restarted its workers into a new rendezvous round"
            return ""

        # ------------------------------------------------------------- the watchdog

        def _watch_heartbeats(self, worker_group: WorkerGroup, timeout: int) -> None:
            """Stop the worker that went silent first, once its silence exceeds ``timeout``.

            A hung worker stalls its peers: every other worker soon waits for it inside a
            collective and stops renewing its heartbeat too, a step later. So only the worker
            silent the longest is stopped: here among the local workers, and across nodes by
            comparing notes in the round's store. A node whose worker is silent too long
            writes when its last beat was, waits one monitor interval and a second (long
            enough for every other such node to write its own), and stops its worker only if
            no other node's went silent earlier. The others' workers then fail on the lost
            peer (exit 204) instead of being called hung themselves.
            """
            now = time.time()
            silent: list[tuple[float, Worker]] = []
            for worker in worker_group.workers:
                hung = record.hung.get(worker.id)
                if hung is not None:
                    if time.monotonic() - hung.signalled_at >= HANG_KILL_GRACE_SECONDS:
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(worker.id, signal.SIGKILL)
                    return
                path = Path(options.heartbeat_dir) / str(record.starts) / str(worker.local_rank)
                try:
                    beat = path.stat().st_mtime
                except FileNotFoundError:
                    continue  # armed at the first beat: startup and data loading are not judged
                if now - beat > timeout:
                    silent.append((beat, worker))
            if not silent:
                record.silent_since = None
                return
            beat, worker = min(silent, key=lambda item: item[0])
            first = self._first_silent(worker_group, beat)
            if first is None:
                return  # still comparing notes
            if first != (worker_group.group_rank or 0):
                if not record.hang_deferred:
                    record.hang_deferred = True
                    say(
                        f"global rank {worker.global_rank} has not renewed its heartbeat for {now - beat:.0f}s either, "
                        f"but node {first}'s worker went silent first: that one is stopped as hung"
                    )
                return
            pid = worker.id
            record.hung[pid] = HungWorker(worker.global_rank, worker.local_rank, pid, now - beat, time.monotonic())
            say(
                f"global rank {worker.global_rank} (local rank {worker.local_rank}, pid {pid}) has not renewed "
                f"its heartbeat for {now - beat:.0f}s ({c.OPT_HANG_TIMEOUT} {timeout}): SIGABRT, so that "
                f"faulthandler prints its stacks, SIGKILL after {HANG_KILL_GRACE_SECONDS:g}s"
            )
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGABRT)

        def _first_silent(self, worker_group: WorkerGroup, beat: float) -> int | None:
            """The node whose worker went silent first (None while the notes are still coming in)."""
            me = worker_group.group_rank or 0
            size = worker_group.group_world_size or 1
            store: Store | None = getattr(worker_group, "store", None)
            if store is None or size == 1:
                return me
            try:
                if record.silent_since is None:
                    store.set(f"{SILENT_KEY}{me}", repr(beat))
                    record.silent_since = time.monotonic()
                if time.monotonic() - record.silent_since < options.monitor_interval + SILENT_SETTLE_SECONDS:
                    return None
                notes = {me: beat}
                for rank in range(size):
                    key = f"{SILENT_KEY}{rank}"
                    if rank != me and store.check([key]):
                        notes[rank] = float(store.get(key).decode())
            except SignalException:
                raise
            except Exception:  # no store: judge alone
                return me
            return min(notes, key=lambda rank: (notes[rank], rank))

        # ------------------------------------------------------------- the exit barrier

        def _exit_barrier(self) -> None:
            worker_group = self._worker_group
            store: Store | None = getattr(self, "_store", None)  # annotated None by torch: set by _rendezvous
            if store is None:
                return
            size = worker_group.group_world_size or 1
            record.close_run = True  # every local worker succeeded: a final end
            self._in_exit_barrier = True  # torch's health check reads it
            try:
                if store.add(ARRIVED_KEY, 1) >= size:
                    store.set(ALL_ARRIVED_KEY, "1")
                elif not store.check([ALL_ARRIVED_KEY]):
                    say(
                        f"every local worker succeeded: waiting for the other nodes in the exit barrier (at most "
                        f"{self._exit_barrier_timeout:g}s)"
                    )
                deadline = time.monotonic() + self._exit_barrier_timeout
                next_check = time.monotonic() + BARRIER_CHECK_SECONDS
                while not store.check([ALL_ARRIVED_KEY]):
                    now = time.monotonic()
                    if now >= deadline:
                        record.barrier_left = f"not every node arrived within {self._exit_barrier_timeout:g}s"
                        return
                    if now >= next_check:
                        why = self._rendezvous_moved_on() or self._failure_reported(store, worker_group)
                        if why:
                            record.barrier_left = why
                            return
                        next_check = now + BARRIER_CHECK_SECONDS
                    time.sleep(POLL_SECONDS)
                self._depart(store, size)
            except SignalException as e:
                record.barrier_signal = e.sigval
                # Counted out, so that the store's host does not wait for this agent to close the
                # run (after a signal launch_agent does not close it).
                _bounded(lambda: store.add(DEPARTED_KEY, 1))
                raise
            except Exception as e:  # torch's own barrier logs a store error and succeeds too
                record.barrier_left = f"the rendezvous store failed: {type(e).__name__}: {e}"
            finally:
                self._in_exit_barrier = False

        def _failure_reported(self, store: Store, worker_group: WorkerGroup) -> str:
            found = _published(store, worker_group.group_world_size or 1, worker_group.group_rank or 0)
            if not found:
                return ""
            rank, text = min(found.items())
            return f"node {rank} reported a failure: {text}"

        def _depart(self, store: Store, size: int) -> None:
            """Close the rendezvous while every agent is still here; the store's host waits until all have.

            An agent that used the store after its host exited (closing the run, a heartbeat,
            one more look at a counter) got a C++ stack trace on stderr. So the others touch
            the store for the last time when they count themselves out, and the host leaves last.
            """
            self._rdzv_handler.shutdown()
            if store.add(DEPARTED_KEY, 1) >= size or not hosts_port(options.rdzv_port):
                return
            deadline = time.monotonic() + DEPART_WAIT_SECONDS
            while _store_int(store, DEPARTED_KEY) < size and time.monotonic() < deadline:
                time.sleep(POLL_SECONDS)

    return ElasticLaunchAgent


def hosts_port(port: int | None) -> bool:
    """Whether this process listens on TCP ``port`` (it hosts the rendezvous store); True when unknown.

    Read from ``/proc/net/tcp{,6}`` (listening sockets and their inodes) and this process's
    descriptors. Unknown (no port, no ``/proc``) counts as hosting: the caller then waits
    for the others, which is only slower.
    """
    if not port:
        return True
    inodes: set[str] = set()
    try:
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            with contextlib.suppress(FileNotFoundError), open(table, encoding="ascii") as f:
                for line in f.readlines()[1:]:
                    fields = line.split()
                    # local_address is HEX_IP:HEX_PORT; state 0A is LISTEN
                    if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rpartition(":")[2], 16) == port:
                        inodes.add(fields[9])
        if not inodes:
            return False
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/self/fd/{fd}") in {f"socket:[{inode}]" for inode in inodes}:
                    return True
    except (OSError, ValueError):
        return True
    return False


def _bounded(operation: Callable[[], object]) -> None:
    """Run a store operation on the way out of a signal, giving up after :data:`SIGNAL_STORE_SECONDS`.

    A store whose host vanished without closing its connections (a lost node) blocks a call
    until the store's timeout (``read_timeout``, 900 s in a compiled job), and the pod's grace
    period would run out. The operation is only a courtesy to the other nodes: it runs in a
    daemon thread, and any error is dropped.
    """

    def attempt() -> None:
        with contextlib.suppress(Exception):
            operation()

    thread = threading.Thread(target=attempt, name="elastic-launch-store", daemon=True)
    thread.start()
    thread.join(SIGNAL_STORE_SECONDS)


def _running(pid: int) -> bool:
    """Whether ``pid`` is alive and not a zombie (an exited worker not yet reaped is a zombie)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _summary(failures: Mapping[int, Any], monitor_interval: float, record: AgentRecord) -> str:
    """One line about this node's failure, for the other nodes' reports."""
    rank, _killed = fl.root_failure(failures, monitor_interval)
    failure = failures[rank]
    hung = record.hung.get(failure.pid)
    if hung is not None:
        return f"global rank {rank} hung: no heartbeat for {hung.silent_for:.0f}s"
    return f"global rank {rank} {fl.describe_end(failure)}"


@contextlib.contextmanager
def installed(record: AgentRecord, options: AgentOptions) -> Iterator[None]:
    """Make ``elastic_launch`` build our agent while the block runs."""
    # launch_agent reads the module's global at each call; restored even when the launch raises.
    name = "LocalElasticAgent"
    original = getattr(launcher_api, name)
    setattr(launcher_api, name, agent_class(record, options))
    try:
        yield
    finally:
        setattr(launcher_api, name, original)
