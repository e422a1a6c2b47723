"""Exit codes and failure reports: stderr for people, the termination log for Kubernetes.

Pure standard library. The launcher turns torch's exceptions into :class:`Outcome` values;
everything here works on plain data so it can be tested without starting processes.
"""

from __future__ import annotations

import errno
import os
import signal
import stat
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, TextIO

from elastic_compile import contract as c

# Kubernetes keeps at most 4096 bytes of a container's termination message (and 12 KiB
# for all containers of a pod): anything longer is cut by the kubelet, usually losing the
# exception at the end of a traceback. We cut it ourselves, keeping the head and the tail.
TERMINATION_LOG_LIMIT: Final = 4096
_ELLIPSIS: Final = "\n[...]\n"


@dataclass(frozen=True)
class Outcome:
    """How a launch ended: the exit code and what to tell the user about it.

    ``headline`` is one line; ``details`` (error message, traceback) may span many.
    """

    exit_code: int
    headline: str = ""
    details: str = ""

    @property
    def text(self) -> str:
        return f"{self.headline}\n{self.details}".rstrip("\n") if self.details else self.headline


def shell_signal(exitcode: int) -> int | None:
    """The signal a shell reports as exit code ``128 + N``, or None.

    ``sh -c "python train.py"`` (a wrapper script, ``bash -c``, ``env`` in a pipeline) does
    not die with its child's signal: it exits ``128 + N``. A worker OOM-killed behind such a
    wrapper exits 137, not ``-9``.
    """
    n = exitcode - c.EXIT_SIGNAL_BASE
    return n if n in _SIGNAL_NUMBERS else None


_SIGNAL_NUMBERS = frozenset(int(s) for s in signal.valid_signals())


def worker_exit_code(exitcode: int) -> int:
    """Map a worker's exit status to ours.

    A negative status is a signal (``-9``: SIGKILL) and becomes ``128 + N``, the shell
    convention, which the operator's ExitCode policy retries; ``128 + N`` for a real signal
    N (a shell's report of it, :func:`shell_signal`) is kept, the same. A code in 1-127 is
    kept (permanent). Anything else (above ``128 + SIGRTMAX``, e.g. 255 from
    ``sys.exit(-1)``) becomes 1: the worker reported a failure, not a kill, and retrying it
    would repeat it.
    """
    if exitcode < 0:
        return c.EXIT_SIGNAL_BASE - exitcode
    if 1 <= exitcode <= 127 or shell_signal(exitcode) is not None:
        return exitcode
    return c.EXIT_USER_FAILURE


def exit_code_meaning(code: int) -> str:
    """What the Kubeflow operator's ExitCode restart policy makes of ``code`` (training-operator v1.9.4
    IsRetryableExitCode)."""
    if code == 0:
        return "success"
    return "retryable" if code >= 128 else "permanent"


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def worker_failure(
    rank: int, *, local_rank: int, exitcode: int, pid: int, error_file: str | None, message: object
) -> Outcome:
    """The report for a failed worker (torch's ``ProcessFailure`` fields, taken apart).

    ``message`` is what torch read from the worker's error file (a dict written by
    ``@record``: ``{"message": "Type: text", "extraInfo": {"py_callstack": ...}}``) or a
    plain string when there was no error file (torch/distributed/elastic/multiprocessing/errors/__init__.py).
    """
    code = worker_exit_code(exitcode)
    via_shell = shell_signal(exitcode)
    if exitcode < 0:
        status = f"was killed by {signal_name(-exitcode)}"
    elif via_shell is not None:
        status = f"exited with code {exitcode}: {signal_name(via_shell)}, as a shell reports it"
    else:
        status = f"exited with code {exitcode}"
    headline = f"worker failed: global rank {rank} (local rank {local_rank}, pid {pid}) {status}"
    if isinstance(message, dict):
        text = str(message.get("message", ""))
        extra = message.get("extraInfo")
        traceback = str(extra.get("py_callstack", "")) if isinstance(extra, dict) else ""
        # py_callstack already ends with the "Type: text" line; print that line once.
        details = traceback.rstrip("\n") if text and text in traceback else f"{text}\n{traceback}".strip("\n")
    elif error_file or exitcode < 0:
        details = str(message)  # e.g. "Signal 9 (SIGKILL) received by PID 123"
    elif via_shell is not None:
        details = ""  # killed, not failed: no traceback to point at
    else:
        details = (
            "no error file: wrap the script's main function in "
            "torch.distributed.elastic.multiprocessing.errors.record to get its traceback here "
            "(the worker's own stderr above has it)"
        )
    return Outcome(code, headline, details)


#: Of a cut message, at most this much of its head is the exception's summary (where it was
#: raised and how its text starts); the rest of the room goes to the end of the text.
_SUMMARY_SHARE: Final = 4


def fit_termination_message(text: str, limit: int = TERMINATION_LOG_LIMIT) -> str:
    """``text`` cut to ``limit`` UTF-8 bytes: the first line, the exception's summary, and as much of the end as fits.

    A traceback ends with ``Type: message``; a long message (a 200 KB exception) pushed the
    type and the place it was raised out of the kept tail. So when ``text`` holds a Python
    traceback, the head keeps its innermost ``File "...", line N, in f`` and the start of
    its exception line too.
    """
    data = text.encode()
    if len(data) <= limit:
        return text
    head, _, _rest = text.partition("\n")
    summary = _traceback_summary(text)
    if summary:
        head = f"{head}\n{_cut(summary, limit // _SUMMARY_SHARE)}"
    head_b = head.encode()[: limit // 2]
    room = limit - len(head_b) - len(_ELLIPSIS.encode())
    tail = data[len(data) - room :]
    # A cut in the middle of a multi-byte character would leave invalid UTF-8; drop it.
    return head_b.decode(errors="ignore") + _ELLIPSIS + tail.decode(errors="ignore")


def _cut(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` UTF-8 bytes at a character boundary."""
    return text.encode()[:limit].decode(errors="ignore")


def _traceback_summary(text: str) -> str:
    """The innermost frame of the last traceback in ``text`` and the exception line after it ("" if none)."""
    lines = text.split("\n")
    frames = [i for i, line in enumerate(lines) if line.startswith('  File "')]
    if not frames:
        return ""
    last = frames[-1]
    # After the frame: its source line and caret markers (indented), then "Type: message".
    exception = next((line for line in lines[last + 1 :] if line and not line.startswith(" ")), "")
    return f"{lines[last].strip()}\n{exception}".rstrip("\n")


# Environment variables whose values may appear in a report as they are: set by the operator,
# by Trainer, by the compiler (downward API) or by torch for the launcher, and a few that
# every image has and that locate files in tracebacks. Every other value is a possible
# secret (env from a Secret) and is never copied into the termination message, which
# anyone who may read the pod's status sees.
_SHOWN_ENV_PREFIXES: Final = (c.OPERATOR_ENV_PREFIX, c.LAUNCHER_ENV_PREFIX, "TORCHELASTIC_", "KUBERNETES_")
_SHOWN_ENV: Final = frozenset(
    {"PATH", "HOME", "PWD", "HOSTNAME", "LANG", "TERM", "SHELL", "USER", "PYTHONPATH", "VIRTUAL_ENV", "TMPDIR"}
)
#: Shorter values ("1", "true", "c10d") are everywhere in ordinary text; hiding them would
#: garble the report without protecting a real secret.
MIN_HIDDEN_LENGTH: Final = 6


def hide_env_values(text: str, environ: Mapping[str, str]) -> str:
    """``text`` with the value of every environment variable not known to be harmless replaced by ``<$NAME>``."""
    hidden = [
        (value, name)
        for name, value in environ.items()
        if len(value) >= MIN_HIDDEN_LENGTH and name not in _SHOWN_ENV and not name.startswith(_SHOWN_ENV_PREFIXES)
    ]
    for value, name in sorted(hidden, key=lambda vn: -len(vn[0])):  # longest first: a value inside another
        text = text.replace(value, f"<${name}>")
    return text


def _write_no_follow(path: str, data: bytes, *, create: bool) -> None:
    """Write ``data`` to the regular file ``path``, never through a symbolic link or into a FIFO or device."""
    flags = os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | (os.O_CREAT if create else 0)
    fd = os.open(path, flags, 0o666)  # the umask applies
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", path)
        os.ftruncate(fd, 0)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def write_termination_log(
    path: str | None, text: str, *, create: bool, environ: Mapping[str, str] | None = None
) -> bool:
    """Write ``text`` (cut to Kubernetes' limit, env values hidden) to ``path``; True if written.

    ``create=False`` writes only to a file that exists: Kubernetes mounts
    ``/dev/termination-log`` into every container, while on a workstation that default
    path does not exist and must not be created in ``/dev``. A missing directory or an
    unwritable file is skipped quietly: the report already went to stderr. A symbolic link
    (or anything but a regular file) at ``path`` is never written through; that is said
    on stderr. ``environ`` (default ``os.environ``) is what :func:`hide_env_values` hides.
    """
    if not path or (not create and not os.path.lexists(path)):
        return False
    message = hide_env_values(text, os.environ if environ is None else environ)
    try:
        _write_no_follow(path, fit_termination_message(message).encode(), create=create)
    except OSError as e:
        if e.errno == errno.ELOOP:
            say(f"termination log {path} is a symbolic link: not written through")
        elif e.errno in (errno.EINVAL, errno.ENXIO):
            say(f"termination log {path} is not a regular file: not written")
        return False
    return True


def say(line: str, stream: TextIO | None = None) -> None:
    """One diagnostic line on stderr, prefixed with the program name."""
    print(f"{c.LAUNCHER}: {line}", file=stream or sys.stderr, flush=True)


def usage_error(message: str) -> int:
    """Print the one-line usage error and return ``EXIT_USAGE``."""
    say(f"error: {message}")
    return c.EXIT_USAGE
