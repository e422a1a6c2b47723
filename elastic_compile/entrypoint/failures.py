"""Which local worker failure a report names, and which failures are only a peer's loss.

Pure standard library: it works on anything shaped like torch's ``ProcessFailure`` (the
agent's record of one failed worker), so that the agent (:mod:`.agent`), the launcher
(:mod:`.launch`) and the tests share one set of rules.

**A peer's loss.** When another node's worker dies (an OOM kill, a preempted pod, a lost
node), every survivor's collective breaks and the survivor's worker raises. Its failure is
no evidence against its own code: it gets a retryable exit code
(:data:`elastic_compile.contract.EXIT_PEER_LOST`), and 1 stays for failures that are the
code's own. The rule is narrow on purpose, because a retryable code makes the operator's
ExitCode policy recreate the pod without limit: a failure is a peer's loss only when the
worker's error file (written by ``@record``, which function mode always uses) holds

* ``DistNetworkError``: a connection to a store broke (the store's host, another node's
  agent or worker, went away); or
* a ``RuntimeError`` or ``DistBackendError`` whose text is one of the transports' own words
  for a vanished peer (:data:`PEER_LOSS_TEXTS`).

Not a peer's loss: a failure without an error file (its exit code says nothing about why),
``DistStoreError`` (a wait that timed out: the key may never come because of the code),
collective timeouts (a peer that hangs, or ranks that call different collectives), gloo's
"Connection refused" (a wrong address fails the same way on every attempt), and NCCL's
``ncclSystemError`` (as often local as remote).
"""

from __future__ import annotations

import math
import signal
from collections.abc import Mapping
from typing import Final, Protocol

from elastic_compile import contract as c


class Failure(Protocol):
    """The fields of torch's ``ProcessFailure`` these rules read."""

    @property
    def local_rank(self) -> int: ...
    @property
    def pid(self) -> int: ...
    @property
    def exitcode(self) -> int: ...
    @property
    def error_file(self) -> str: ...
    @property
    def message(self) -> object: ...
    @property
    def timestamp(self) -> int: ...


#: What torch's ``ProcessFailure`` holds as ``error_file`` when the worker wrote none.
NO_ERROR_FILE: Final = "<N/A>"

#: The transports' words for a peer that went away, as torch 2.13 raises them. gloo
#: (third_party/gloo/gloo/transport/tcp/pair.cc, in libtorch_cpu.so): "Connection closed by
#: peer" (measured: the survivor of a SIGKILLed peer, tests/entrypoint/test_launch_faults.py)
#: and a read that fails with ECONNRESET ("Read error ...: Connection reset by peer"). NCCL
#: (ProcessGroupNCCL, in libtorch_cuda.so; not measured here, no GPU): ``ncclRemoteError``,
#: NCCL's own result for "a network error or a remote process exiting prematurely".
PEER_LOSS_TEXTS: Final = ("Connection closed by peer", "Connection reset by peer", "ncclRemoteError")
#: Exception types whose error text is checked against :data:`PEER_LOSS_TEXTS`.
_TRANSPORT_ERRORS: Final = ("RuntimeError", "DistBackendError")
#: Exception types that are a peer's loss whatever their text: a store connection broke.
_STORE_CONNECTION_ERRORS: Final = ("DistNetworkError",)


def error_text(failure: Failure) -> str:
    """``"Type: message"`` from the worker's error file, or ``""`` without one."""
    if failure.error_file == NO_ERROR_FILE or not isinstance(failure.message, dict):
        return ""
    return str(failure.message.get("message", ""))


def is_peer_loss(failure: Failure) -> bool:
    """Whether the worker failed only because another node's process went away (module docstring)."""
    text = error_text(failure)
    kind = text.partition(":")[0].strip().rpartition(".")[2]  # "torch.distributed.DistNetworkError" too
    if kind in _STORE_CONNECTION_ERRORS:
        return True
    return kind in _TRANSPORT_ERRORS and any(words in text for words in PEER_LOSS_TEXTS)


# Signals the kernel sends a worker for what it did itself: the OOM killer's SIGKILL, a
# crash (SIGSEGV, SIGBUS, SIGILL, SIGFPE), a seccomp or rlimit kill. Its peers' failures
# follow from losing it. SIGABRT is not among them: torch's NCCL watchdog aborts a worker
# whose peer exited ("Process group watchdog thread terminated with exception: ... remote
# process exited", ProcessGroupNCCL.cpp), a consequence; SIGTERM and SIGINT are sent.
KERNEL_SIGNALS: Final = frozenset(
    int(getattr(signal, name))
    for name in ("SIGKILL", "SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE", "SIGSYS", "SIGXCPU", "SIGXFSZ")
)

# A worker's death by SIGTERM or SIGINT, directly or as a shell's 128 + N: what the agent, or
# the worker or someone else, sent it.
_SENT: Final = frozenset(
    code for sig in (signal.SIGTERM, signal.SIGINT) for code in (-int(sig), c.EXIT_SIGNAL_BASE + int(sig))
)
_VALID_SIGNALS: Final = frozenset(int(s) for s in signal.valid_signals())


def _signal_of(exitcode: int) -> int | None:
    """The signal that ended a worker, directly (``-N``) or behind a shell (``128 + N``); None for an exit."""
    if exitcode < 0:
        return -exitcode
    n = exitcode - c.EXIT_SIGNAL_BASE
    return n if n in _VALID_SIGNALS else None


# Ranks of the causes, most telling first. A SIGTERM or SIGINT the agent sent while stopping
# the others after a failure (:data:`_STOPPED`) comes last: it never is the cause.
_KERNEL, _OWN, _OTHER_SIGNAL, _PEER, _STOPPED = 0, 1, 2, 3, 4


def _cause(failure: Failure) -> int:
    """:data:`_KERNEL`, :data:`_OWN` (an exit code), :data:`_OTHER_SIGNAL`, or :data:`_PEER` (a peer's loss)."""
    if is_peer_loss(failure):
        return _PEER
    signum = _signal_of(failure.exitcode)
    if signum is None:
        return _OWN
    return _KERNEL if signum in KERNEL_SIGNALS else _OTHER_SIGNAL


def first_by_time(failures: Mapping[int, Failure]) -> int:
    """torch's ``ChildFailedError.get_first_failure``: the earliest stamp, ties to the first recorded."""
    return min(failures, key=lambda rank: failures[rank].timestamp)


def root_failure(failures: Mapping[int, Failure], monitor_interval: float) -> tuple[int, bool]:
    """The global rank whose failure to report, and whether a kernel's signal was put before torch's first.

    torch's ``get_first_failure`` takes the earliest timestamp, ties going to the first it
    recorded. One poll of the agent (``SubprocessContext._poll``) records the workers found
    dead, stops the rest with SIGTERM and records those too, after them; a worker without an
    error file is stamped with the poll's whole second, one with an error file (``@record``)
    with the second it raised, up to a monitor interval before. So a cause and its
    consequences arrive together: the kernel kills one worker (the OOM killer's SIGKILL) and
    its peers exit 1 with a connection reset; or a worker raises and its NCCL peers abort
    (SIGABRT); or the agent's SIGTERM makes a worker exit with a code of its own (a shell
    trap's 143). Reporting a consequence changes the operator's retry decision under its
    ExitCode policy. So among the failures recorded by the first poll (stamped no later than
    a second after it, or, for an error file, a monitor interval and a second after the
    worker raised): a kernel's signal first, then a worker's own exit code, then other
    signals (SIGABRT), then a peer's loss (:func:`is_peer_loss`), then the SIGTERM or SIGINT
    the agent sent, each by timestamp and then torch's order. A SIGTERM or SIGINT death recorded first was not the
    agent's (it stops the others only after it recorded a failure): a worker's own ending,
    like an exit code (``os.kill(os.getpid(), SIGTERM)`` in a timeout handler). The agent's
    SIGKILL on a worker that outlived its SIGTERM (torch waits 30 s) is recorded after that
    poll and never displaces the first failure.
    """
    recorded = {rank: index for index, rank in enumerate(failures)}
    polled = [f.timestamp for f in failures.values() if f.error_file == NO_ERROR_FILE]
    # An error file not written by @record may have no stamp: torch reads 0, which says nothing.
    raised = [f.timestamp for f in failures.values() if f.error_file != NO_ERROR_FILE and f.timestamp > 0]
    # When the first poll was: whole seconds (taken one after the other in one poll, they
    # can straddle a second's boundary), at most a monitor interval after a worker raised.
    estimates = polled + [t + math.ceil(monitor_interval) + 1 for t in raised]
    first_poll = min(estimates) if estimates else max(f.timestamp for f in failures.values())
    horizon = first_poll + 1

    def order(rank: int) -> tuple[int, int, int]:
        failure = failures[rank]
        cause = _cause(failure)
        if cause == _OTHER_SIGNAL and failure.exitcode in _SENT:
            # The agent sends SIGTERM only once it has recorded a failure: recorded first, it
            # was not the agent's (the worker's own ending), recorded later it was.
            cause = _OWN if recorded[rank] == 0 else _STOPPED
        return cause, failure.timestamp, recorded[rank]

    rank = min((r for r, f in failures.items() if f.timestamp <= horizon), key=order)
    return rank, rank != first_by_time(failures) and order(rank)[0] == _KERNEL


def all_peer_losses(failures: Mapping[int, Failure], monitor_interval: float) -> bool:
    """Whether the failure to report is a peer's loss: no local worker failed for a reason of its own."""
    rank, _killed = root_failure(failures, monitor_interval)
    return is_peer_loss(failures[rank])


def describe_end(failure: Failure) -> str:
    """How a worker ended (``exited with code 2``, ``was killed by SIGKILL``), with its error's first line."""
    signum = _signal_of(failure.exitcode)
    if failure.exitcode < 0:
        how = f"was killed by {_signal_name(-failure.exitcode)}"
    elif signum is not None:
        how = f"exited with code {failure.exitcode} ({_signal_name(signum)}, as a shell reports it)"
    else:
        how = f"exited with code {failure.exitcode}"
    text = error_text(failure).strip().partition("\n")[0]
    return f"{how}: {text}" if text else how


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
