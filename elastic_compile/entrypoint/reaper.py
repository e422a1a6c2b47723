"""No process started under ``elastic-launch`` outlives it.

torch stops its workers (and, for scripts, their process groups), but a worker's child
that detached itself (double fork, ``setsid``, ``nohup ... &``) is in neither: it is
reparented to the nearest subreaper or to PID 1 and keeps running, holding GPUs, ports or
files, after the pod's training is over. Outside a container (``elastic-compile run``, a
workstation) nothing ever stops it.

So the agent makes itself a child subreaper (Linux ``prctl(PR_SET_CHILD_SUBREAPER)``):
orphans below it are reparented to it instead of escaping, and after the launch it stops
every descendant still alive (SIGTERM, then SIGKILL after a short grace) and reaps them.
Descendants are found in ``/proc`` by parent pid. Pure standard library; where ``prctl``
or ``/proc`` is missing it does nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Final

PR_SET_CHILD_SUBREAPER: Final = 36  # <linux/prctl.h>
PROC: Final = Path("/proc")
POLL_SECONDS: Final = 0.05
#: How long leftovers get between SIGTERM and SIGKILL. Short: the training is over, the pod's
#: grace period is already being spent, and these are processes nobody waits for.
SWEEP_GRACE_SECONDS: Final = 5.0


def become_subreaper() -> bool:
    """Make orphaned descendants ours instead of PID 1's; False where the platform cannot."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        return int(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _stat(pid: int) -> tuple[int, str, str] | None:
    """``(parent pid, state, name)`` of a live process, or None."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # The name is in parentheses and may itself contain ')' or spaces.
    name = text[text.index("(") + 1 : text.rindex(")")]
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[1]), fields[0], name


def descendants(root: int) -> list[int]:
    """Live (non-zombie) descendants of ``root``, parents before children."""
    children: dict[int, list[int]] = {}
    states: dict[int, str] = {}
    for entry in PROC.iterdir() if PROC.is_dir() else ():
        if not entry.name.isdigit():
            continue
        found = _stat(int(entry.name))
        if found is not None:
            children.setdefault(found[0], []).append(int(entry.name))
            states[int(entry.name)] = found[1]
    out: list[int] = []
    todo = [root]
    while todo:
        for child in sorted(children.get(todo.pop(0), [])):
            todo.append(child)
            if states.get(child) != "Z":
                out.append(child)
    return out


def _reap() -> None:
    """Collect every exited child (ours by birth or by reparenting) without blocking."""
    while True:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _alive(pids: Iterable[int]) -> list[int]:
    return [pid for pid in pids if (found := _stat(pid)) is not None and found[1] != "Z"]


def helper_pids() -> set[int]:
    """Python's own multiprocessing helpers (resource tracker, forkserver): they end with us."""
    import multiprocessing.forkserver
    import multiprocessing.resource_tracker

    pids = {
        getattr(multiprocessing.resource_tracker._resource_tracker, "_pid", None),
        getattr(multiprocessing.forkserver._forkserver, "_forkserver_pid", None),
    }
    return {pid for pid in pids if isinstance(pid, int)}


def _signal_all(pids: Iterable[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def _wait_gone(pids: list[int], seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while True:
        _reap()
        pids = _alive(pids)
        if not pids or time.monotonic() >= deadline:
            return pids
        time.sleep(POLL_SECONDS)


def sweep(grace: float = SWEEP_GRACE_SECONDS, exclude: Iterable[int] = ()) -> list[str]:
    """Stop every descendant still alive; returns ``"<pid> (<name>)"`` for each one found.

    SIGTERM first, SIGKILL for whatever is left after ``grace`` (a leftover may have started
    more processes meanwhile: up to three rounds). Call it once the launch is over (torch
    has stopped and waited for its workers): it also reaps, with ``waitpid(-1)``, children
    nobody else will wait for any more.
    """
    skip = set(exclude) | helper_pids()
    named: dict[int, str] = {}

    def scan() -> list[int]:
        pids = [pid for pid in descendants(os.getpid()) if pid not in skip]
        for pid in pids:
            stat = _stat(pid)
            named.setdefault(pid, "".join(ch if ch.isprintable() else "?" for ch in stat[2]) if stat else "?")
        return pids

    found = scan()
    if found:
        _signal_all(found, signal.SIGTERM)
        _wait_gone(found, grace)
        for _round in range(3):
            found = scan()
            if not found:
                break
            _signal_all(found, signal.SIGKILL)
            _wait_gone(found, grace)
    _reap()
    return [f"{pid} ({name})" for pid, name in named.items()]
