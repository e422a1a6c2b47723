"""A writable directory for worker logs, error files and temporary files, or a permanent error.

torch puts every worker's ``error.json`` (the root cause the failure report quotes) under a
log directory, by default ``tempfile.mkdtemp()``. With ``readOnlyRootFilesystem: true`` the
usual temp directories are read-only: torch fails inside the agent, which used to exit 203
(retryable), and the operator's ExitCode policy recreated the pod forever. This module
finds a writable place before torch is imported, in the order of
:data:`elastic_compile.contract.SCRATCH_ORDER`, and makes "none" a usage error (exit 2,
permanent) that says how to give the pod one. It never falls back to the working directory,
as Python's ``tempfile`` would: that directory holds the user's files.

Pure standard library.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from elastic_compile import contract as c
from elastic_compile.entrypoint.settings import UsageError

LOG_DIR_PREFIX = "elastic-launch-"


@dataclass(frozen=True)
class Scratch:
    """Where this launch writes: ``log_dir`` (created) and the temp dir the workers get."""

    log_dir: str
    tmpdir: str | None  # set TMPDIR to this for the agent and its workers; None: leave it alone
    notes: tuple[str, ...] = ()
    #: True when the launcher made ``log_dir`` (no ``--log-dir``): it is removed when the launch ends.
    owned: bool = False


#: Free space a scratch directory needs. Creating a directory needs none, so a full disk
#: passed the old check; then torch's ``record`` wrote an empty ``error.json`` and the agent
#: failed on it (exit 203, retryable, the user's error lost). Error files with long
#: tracebacks take hundreds of KiB; 1 MiB leaves room for a few and for the workers' tempfiles.
MIN_FREE_BYTES: Final = 1024 * 1024
#: Bytes actually written by the probe: statvfs does not see a quota, a write does.
PROBE_BYTES: Final = 64 * 1024


def _unwritable(directory: str) -> str | None:
    """Why ``directory`` cannot hold our files, or None when it can (a directory and some data fit)."""
    try:
        probe = tempfile.mkdtemp(prefix=".elastic-launch-probe-", dir=directory)
    except OSError as e:
        return e.strerror or type(e).__name__
    try:
        fs = os.statvfs(probe)
        free = fs.f_bavail * fs.f_frsize
        if free < MIN_FREE_BYTES:
            return f"{free // 1024} KiB free, less than the {MIN_FREE_BYTES // 1024} KiB needed"
        with open(os.path.join(probe, "probe"), "wb") as f:
            f.write(bytes(PROBE_BYTES))
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        return e.strerror or type(e).__name__
    finally:
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(probe, "probe"))
        with contextlib.suppress(OSError):
            os.rmdir(probe)
    return None


def candidates(environ: Mapping[str, str]) -> list[tuple[str, str]]:
    """``(directory, where it came from)`` in the order they are tried."""
    found: list[tuple[str, str]] = []
    tmpdir = environ.get(c.ENV_TMPDIR, "").strip()
    if tmpdir:
        found.append((tmpdir, f"${c.ENV_TMPDIR}"))
    found += [(d, "default") for d in c.SCRATCH_ORDER]
    return found


def prepare_scratch(
    log_dir: str | None, environ: Mapping[str, str], order: Sequence[tuple[str, str]] | None = None
) -> Scratch:
    """Create the log directory for this launch; raise :class:`UsageError` when nothing is writable.

    ``log_dir`` (``--log-dir``) is used as given (created if missing) and must be writable.
    Otherwise the first writable directory of ``order`` (default :func:`candidates`) gets a
    fresh ``elastic-launch-*`` directory. When that directory is not what ``$TMPDIR`` or
    Python's defaults would give the workers, :attr:`Scratch.tmpdir` says to point
    ``TMPDIR`` there, so that ``tempfile`` in the workers does not land in the working
    directory or fail.
    """
    if log_dir is not None:
        try:
            os.makedirs(log_dir, exist_ok=True)
        except OSError as e:
            raise UsageError(f"{c.OPT_LOG_DIR} {log_dir}: cannot create it: {e.strerror}") from None
        why = _unwritable(log_dir)
        if why is not None:
            raise UsageError(f"{c.OPT_LOG_DIR} {log_dir}: not writable ({why})")
        return Scratch(log_dir, None)

    tried: list[str] = []
    for directory, _source in order if order is not None else candidates(environ):
        why = _unwritable(directory)
        if why is not None:
            tried.append(f"{directory} ({why})")
            continue
        made = tempfile.mkdtemp(prefix=LOG_DIR_PREFIX, dir=directory)
        if not tried:
            return Scratch(made, None, owned=True)
        # Something before it failed ($TMPDIR, /tmp): the workers' tempfile would fail too, or
        # fall back to the working directory. Point them here, and say so.
        note = f"{c.ENV_TMPDIR}={directory} for the agent and the workers; not writable: {'; '.join(tried)}"
        if directory == c.SHM_DIR:
            note += f" ({c.SHM_DIR} is memory-backed: mount an emptyDir at /tmp to spare the RAM)"
        return Scratch(made, directory, (note,), owned=True)
    raise UsageError(
        "no writable directory for worker logs and error files (read-only root filesystem?): tried "
        f"{'; '.join(tried)}. Mount an emptyDir at /tmp, or set {c.ENV_TMPDIR} to a writable mount, "
        f"or pass {c.OPT_LOG_DIR}"
    )


def remove_scratch(scratch: Scratch) -> None:
    """Remove the log directory the launcher made, once the launch has ended (a ``--log-dir`` stays).

    Its error files have been read into the report by then; left behind, every launch of a
    machine that is not a pod (``elastic-compile run``, a test, a laptop) would add a directory
    to ``/tmp``. ``shutil.rmtree`` follows no symbolic link a worker may have left there.
    """
    if scratch.owned:
        shutil.rmtree(scratch.log_dir, ignore_errors=True)


def apply_scratch(scratch: Scratch, environ: dict[str, str] | os._Environ[str]) -> None:
    """Point ``TMPDIR`` (and this process's ``tempfile``) at the chosen directory when asked to."""
    if scratch.tmpdir is None:
        return
    environ[c.ENV_TMPDIR] = scratch.tmpdir
    # tempfile caches its choice on first use; multiprocessing's forkserver asks it too.
    tempfile.tempdir = scratch.tmpdir
