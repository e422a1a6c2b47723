"""The compile server: a warm compiler that runs each command in a fork of itself.

Starting the compiler (PyYAML, Jinja2, pydantic and the spec models) costs several times
the interpreter's own start, and an editor or a pre-commit hook starts it on every save.
The result cache only helps when nothing changed; the server helps when something did.

* **The client** is the start of every ``elastic-compile`` command except ``run`` and
  ``server``. It looks for a server of *this* interpreter (same executable, ``sys.path``,
  flags, user, groups, resource limits, namespaces and package directory: the key) in the
  cache directory, and hands it the run: the arguments, the environment, the umask, the
  current directory and standard input, output and error *as open descriptors*, so the run
  reads and writes exactly what it would here. It then waits, passing on SIGINT, SIGTERM
  and SIGHUP, and ends as the run ended (its exit code, or the signal that ended it).
  When there is no usable server, the command runs in the client as it always did; output
  is the same either way, byte for byte.
* **The server** (one process per key) imported and warmed the compiler once, then only
  accepts connections. For each it forks a *handler*, which reads the request and forks a
  *worker*: a fresh copy of the warm compiler that takes the client's descriptors,
  directory, environment and arguments and runs the command as ``main`` would. Nothing a
  run does reaches the server or another run. The server stops when any file of the
  package, the interpreter or a ``sys.path`` directory changes (checked before each run;
  the client then runs the command itself), after :data:`IDLE_SECONDS` without a run, and
  on ``elastic-compile server stop``.

``ELASTIC_COMPILE_SERVER``: ``auto`` (the default) uses a running server and, after a
command that compiled here, starts one in the background, except in CI (``$CI`` set);
``on`` does the same in CI too; ``off`` neither uses nor starts one. No server runs where
there is no cache directory (``ELASTIC_COMPILE_CACHE_DIR=""``), and only on Linux (the
client passes descriptors and checks the peer's user with ``SO_PEERCRED``).

The socket is ``server-<key>.sock`` in the cache directory, whose rules (a directory of
the user's own that nobody else may read or write, never a link) keep other users out;
both ends also check the other's user id. Requests are bounded in size and number
(:data:`MAX_REQUEST_BYTES`, :data:`MAX_RUNS` at once); the server binds nothing but that
file. This module imports nothing of the compiler until a server starts.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import struct
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from elastic_compile.compiler import cachedir

if TYPE_CHECKING:
    import subprocess

#: The environment variable choosing whether a server is used and started.
MODE_ENV: Final = "ELASTIC_COMPILE_SERVER"
MODES: Final = ("auto", "on", "off")
#: A server with no run for this long stops.
IDLE_SECONDS: Final = 600
#: Runs at once; a client beyond it runs its command itself.
MAX_RUNS: Final = 8
#: The largest request (arguments and environment) a handler reads.
MAX_REQUEST_BYTES: Final = 4 * 1024 * 1024
#: How long a client waits for a server to take its run before running it itself.
_HANDSHAKE_SECONDS: Final = 5.0
#: Commands never handed to a server: ``run`` starts and supervises processes of its own.
_LOCAL: Final = frozenset({"run", "server"})
#: Signals a client passes on to its run (unless the client ignores them, as ``nohup`` makes it).
_FORWARDED: Final = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
#: Signals a worker takes as the client had them: ignored, or as Python starts with them.
_DISPOSED: Final = (
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
    signal.SIGTSTP,
    signal.SIGTTIN,
    signal.SIGTTOU,
    signal.SIGALRM,
)
#: What a handler passes on to its worker: the forwarded signals, and Ctrl-Z's stop and continue.
_PASSED: Final = frozenset({*_FORWARDED, signal.SIGSTOP, signal.SIGCONT})
_FORMAT: Final = 1
_MAGIC: Final = b"ECS1"
_HEADER: Final = struct.Struct("!4sI")
_STATUS: Final = struct.Struct("!cBi")  # b"X", 0 exited / 1 killed by a signal, the code or signal
_WORKER: Final = struct.Struct("!ci")  # b"W", the worker's pid
_PEER: Final = struct.Struct("3i")  # struct ucred: pid, uid, gid
_READY, _GO = b"R", b"G"
_PACKAGE: Final = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_PREFIX, _SOCKET, _LOCK = "server-", ".sock", ".lock"
#: Environment variables read when a process starts (they key a server; a run gets the rest).
_STARTUP_ENV: Final = ("LC_", "LD_", "PYTHON", "PYDANTIC_", "MALLOC_", "GLIBC_")

#: Set in a server and its forks: a worker's ``main`` must run the command, not call a server.
_serving = False


class ModeError(ValueError):
    """``$ELASTIC_COMPILE_SERVER`` holds a value that is not one of :data:`MODES`."""


def mode() -> str:
    """``auto``, ``on`` or ``off``, from ``$ELASTIC_COMPILE_SERVER`` (unset or empty: ``auto``)."""
    value = os.environ.get(MODE_ENV, "") or "auto"
    if value not in MODES:
        shown = json.dumps(value[:80])  # one line, whatever the variable holds
        raise ModeError(f"{MODE_ENV}: expected auto, on or off (given: {shown})")
    return value


def available() -> bool:
    """Whether this platform can run a server (descriptor passing, peer credentials, /proc)."""
    return sys.platform == "linux" and hasattr(socket, "send_fds") and hasattr(os, "pidfd_open")


def routed(argv: Sequence[str]) -> bool:
    """Whether a command with ``argv`` may be handed to a server at all.

    Not with ``--debug`` (or a prefix argparse takes for it): its tracebacks would show the
    server's frames around the command's. Not when an argument names one of this process's
    descriptors (``<(...)`` is ``/dev/fd/63``): a run gets standard input, output and error only.
    """
    from elastic_compile.compiler.cli import wants_debug  # loaded already: the client starts there

    if _serving or not available() or (argv[:1] and argv[0] in _LOCAL):
        return False
    return not wants_debug(argv) and not any(_names_a_descriptor(word) for word in argv)


def _names_a_descriptor(word: str) -> bool:
    """Whether ``word`` (or an option's ``=value``) is a path to one of this process's descriptors.

    However it is spelled (``/dev//fd/5``, ``/dev/./fd/5``) and through any links (a link to
    ``/dev/fd/5``, a directory linked to ``/dev/fd``): /dev/fd and /dev/std* lead into /proc.
    """
    path = word.split("=", 1)[1] if word.startswith("--") and "=" in word else word
    for _ in range(40):  # the kernel's own bound on links followed
        try:
            where = os.path.normpath(os.path.abspath(path))
        except (OSError, ValueError):
            return False  # no current directory, or a NUL: the command says so itself
        if where.startswith(("/proc/", "/dev/fd/")) or where in ("/proc", "/dev/fd"):
            return True
        try:
            if os.path.realpath(os.path.dirname(where)).startswith("/proc/"):
                return True
            path = os.path.join(os.path.dirname(where), os.readlink(where))
        except OSError:
            return False  # not a link (or nothing there): where it names is all there is
    return True


# --------------------------------------------------------------------------- the key


def key() -> str | None:
    """What makes two processes interchangeable for a run: None when this one may not use a server.

    A relative ``sys.path`` entry would import from the current directory, which differs
    from run to run: such an interpreter never shares a server.
    """
    import hashlib
    import resource

    if any(not os.path.isabs(entry) and not _path_hook(entry) for entry in sys.path):
        return None
    try:
        if sys.path and sys.path[0] == os.getcwd():
            return None  # `python -m` imports from the current directory first: a server per directory
    except OSError:
        return None
    limits = sorted(
        (name, resource.getrlimit(getattr(resource, name))) for name in dir(resource) if name.startswith("RLIMIT_")
    )
    namespaces = []
    for kind in ("mnt", "pid", "user", "net", "ipc", "uts", "cgroup"):
        try:
            namespaces.append(os.stat(f"/proc/self/ns/{kind}").st_ino)
        except OSError:
            namespaces.append(-1)
    material = {
        "format": _FORMAT,
        "restrictions": _restrictions(),
        "executable": sys.executable,
        "version": sys.version,
        "path": sys.path,
        "flags": list(sys.flags),
        "options": [sorted(sys._xoptions.items(), key=str), sys.warnoptions],
        "fs": [sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()],
        "ids": [os.getuid(), os.geteuid(), os.getgid(), os.getegid(), sorted(os.getgroups())],
        "limits": limits,
        "namespaces": namespaces,
        "package": _PACKAGE,
        # Read while the interpreter, the dynamic loader and the libraries start, so a server
        # keeps its starter's: LD_PRELOAD, PYTHONWARNINGS, PYTHONMALLOC, the locale, TZ...
        "env": sorted((k, v) for k, v in os.environ.items() if k in ("LANG", "TZ") or k.startswith(_STARTUP_ENV)),
    }
    return hashlib.sha256(json.dumps(material).encode("utf-8", "surrogateescape")).hexdigest()[:32]


def _restrictions() -> list[Any]:
    """What the kernel holds against this process beyond ids and limits: a run gets no looser ones.

    Capabilities, no_new_privs and seccomp (/proc/self/status), the cgroup (memory and CPU
    limits), the LSM label, the root directory (chroot), the personality, the scheduling
    policy and priority, the CPU affinity and the OOM score adjustment. What the kernel does
    not show without a system call (the I/O priority of ``ionice``) or at all (Landlock) is
    not here: run such commands with ``ELASTIC_COMPILE_SERVER=off``.
    """
    found: list[Any] = []
    for name in ("status", "cgroup", "attr/current", "oom_score_adj", "personality"):
        try:
            with open(f"/proc/self/{name}", "rb") as f:
                text = f.read(65536).decode("utf-8", "replace")
        except OSError:
            text = ""
        if name == "status":
            keep = ("Cap", "NoNewPrivs", "Seccomp")
            text = "\n".join(line for line in text.splitlines() if line.startswith(keep))
        found.append(text)
    root = os.stat("/")
    found += [
        [root.st_dev, root.st_ino],
        os.getpriority(os.PRIO_PROCESS, 0),
        os.sched_getscheduler(0),
        os.sched_getparam(0).sched_priority,
        sorted(os.sched_getaffinity(0)),
    ]
    return found


def _path_hook(entry: str) -> bool:
    """A ``sys.path`` entry that names an import hook, not a directory (setuptools' editable installs)."""
    return entry.startswith("__editable__.") and entry.endswith(".__path_hook__")


def _directory(*, create: bool) -> int | None:
    where = cachedir.directory()
    return None if where is None else cachedir.open_directory(where, create=create)


def _address(dir_fd: int, name: str) -> str:
    # Through the opened, checked directory: no link swapped in since, and no path too long.
    return f"/proc/self/fd/{dir_fd}/{name}"


def _peer(sock: socket.socket) -> tuple[int, int]:
    """The pid and user id of the process at the other end of ``sock``."""
    pid, uid, _ = _PEER.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEER.size))
    return pid, uid


def _connect(dir_fd: int, name: str) -> socket.socket | None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(_HANDSHAKE_SECONDS)
    try:
        sock.connect(_address(dir_fd, name))
        if _peer(sock)[1] != os.geteuid():
            raise OSError("a server of another user")
    except OSError:
        sock.close()
        return None
    return sock


# --------------------------------------------------------------------------- the client


def call(argv: Sequence[str]) -> int | None:
    """Run ``elastic-compile ARGV`` in a server; its exit code, or None: run it here.

    None means nothing of the command ran: no server, a stale or busy one, or one that did
    not answer within :data:`_HANDSHAKE_SECONDS`. Once a server took the run, this returns
    its exit code, or ends this process with the signal that ended the run.
    """
    name = key()
    if name is None:
        return None
    dir_fd = _directory(create=False)
    if dir_fd is None:
        return None
    try:
        sock = _connect(dir_fd, _PREFIX + name + _SOCKET)
    finally:
        os.close(dir_fd)
    if sock is None:
        return None
    with sock:
        return _hand_over(sock, argv)


def _stream_facts(stream: Any) -> list[Any]:
    """How a standard stream was opened, so the worker opens the same descriptor alike."""
    buffered = stream is not None and hasattr(stream, "buffer") and hasattr(stream.buffer, "raw")
    return [
        getattr(stream, "encoding", None) or "utf-8",
        getattr(stream, "errors", None) or "strict",
        bool(getattr(stream, "line_buffering", False)),
        bool(getattr(stream, "write_through", False)),
        buffered,
    ]


def _hand_over(sock: socket.socket, argv: Sequence[str]) -> int | None:
    umask = os.umask(0o077)
    os.umask(umask)
    ignored = [int(sig) for sig in _DISPOSED if signal.getsignal(sig) == signal.SIG_IGN]
    request = json.dumps(
        {
            "argv": list(argv),
            "argv0": sys.argv[0] if sys.argv else "elastic-compile",
            "env": dict(os.environ),
            "umask": umask,
            "stdio": [_stream_facts(s) for s in (sys.stdin, sys.stdout, sys.stderr)],
            "ignored": ignored,
        }
    ).encode("utf-8", "surrogateescape")
    if len(request) > MAX_REQUEST_BYTES:
        return None
    try:
        # A closed standard descriptor cannot be passed on; checked first, as the open below would take its number.
        for fd in (0, 1, 2):
            os.fstat(fd)
        cwd = os.open(".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None  # no current directory to hand over: the command says so itself
    try:
        message = _HEADER.pack(_MAGIC, len(request)) + request
        # The descriptors travel with the first bytes; a large request takes more than one send.
        sent = socket.send_fds(sock, [message], [cwd, 0, 1, 2])
        sock.sendall(message[sent:])
        if _recv_exactly(sock, 1) != _READY:
            return None
    except OSError:
        return None
    finally:
        os.close(cwd)
    # Committed: from here the run is the server's, and this process only waits for it.
    sock.settimeout(None)
    previous = {
        sig: signal.signal(sig, lambda sig, _frame: _forward(sock, sig)) for sig in _FORWARDED if sig not in ignored
    }
    if signal.SIGTSTP not in ignored:
        previous[signal.SIGTSTP] = signal.signal(signal.SIGTSTP, lambda _sig, _frame: _suspend(sock))
    worker = 0
    try:
        sock.sendall(_GO)
        started = _recv_exactly(sock, _WORKER.size)
        if len(started) == _WORKER.size:
            worker = _WORKER.unpack(started)[1]
        status = _recv_exactly(sock, _STATUS.size)
    except OSError:
        status = b""
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if len(status) != _STATUS.size:
        if worker > 0:  # its handler is gone: the run must not go on writing after this exit
            with contextlib.suppress(OSError):
                os.kill(worker, signal.SIGKILL)
        sys.stderr.write(
            "elastic-compile: internal error: the compile server ended without an exit status "
            f"(rerun with {MODE_ENV}=off and report it)\n"
        )
        return 3
    killed, value = (int(v) for v in _STATUS.unpack(status)[1:])
    if killed:
        sys.stdout.flush()
        with contextlib.suppress(OSError, ValueError):  # SIGKILL and SIGSTOP cannot be set, nor need to be
            signal.signal(value, signal.SIG_DFL)
        os.kill(os.getpid(), value)
        return 128 + value  # the signal was blocked or ignored: end as a shell would report it
    return int(value)  # an exit code, 0-255


def _suspend(sock: socket.socket) -> None:
    """Ctrl-Z: stop the run, stop here as the shell expects, and continue the run when continued."""
    _forward(sock, signal.SIGSTOP)
    handler = signal.signal(signal.SIGTSTP, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTSTP)  # returns once the shell continues this process (fg, bg)
    signal.signal(signal.SIGTSTP, handler)
    _forward(sock, signal.SIGCONT)


def _forward(sock: socket.socket, sig: int) -> None:
    with contextlib.suppress(OSError):
        sock.send(bytes([sig]))


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            break
        data += chunk
    return data


# --------------------------------------------------------------------------- starting one


def wanted_after(argv: Sequence[str]) -> bool:
    """Whether a command that just ran here should start a server for the next one."""
    try:
        chosen = mode()
    except ModeError:
        return False
    if chosen == "off" or not routed(argv):
        return False
    return chosen == "on" or os.environ.get("CI", "").lower() in ("", "0", "false")


def start(*, wait: bool = False) -> int | None:
    """Start a server for this interpreter in the background; with ``wait``, its pid once it answers.

    The server is a new session with no terminal, its standard streams on /dev/null, its
    directory ``/``; it runs with this process's interpreter, flags, ``sys.path`` and
    environment, so that its key is this process's key (a server whose key differs stops).
    """
    import subprocess
    import warnings

    name = key()
    if name is None or not available():
        return None
    dir_fd = _directory(create=True)
    if dir_fd is None:
        return None
    try:
        starting = _holder(dir_fd, _PREFIX + name + _LOCK) is not None  # it runs or is starting: one is enough
    finally:
        os.close(dir_fd)
    if starting:
        return _wait_for(name, None) if wait else None
    boot = (
        "import sys; sys.path[:] = sys.argv[1:-1]; "
        "from elastic_compile.compiler.server import serve; serve(sys.argv[-1])"
    )
    try:
        child = subprocess.Popen(
            [sys.executable, *subprocess._args_from_interpreter_flags(), "-c", boot, *sys.path, name],  # type: ignore[attr-defined]
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd="/",
            start_new_session=True,
        )
    except OSError:
        return None
    if wait:
        return _wait_for(name, child)
    pid = child.pid
    with warnings.catch_warnings():  # it outlives us by design: not a leak to warn of (-W default)
        warnings.simplefilter("ignore", ResourceWarning)
        del child
    return pid


def _wait_for(name: str, child: subprocess.Popen[bytes] | None) -> int | None:
    """The pid of the server of key ``name`` once it answers (at most 30 s); None if it ended first."""
    import time

    for _ in range(600):  # a server imports and warms the compiler: a second or two on a loaded machine
        found = running()
        if name in found:
            return found[name]
        if (child is None or child.poll() is not None) and not _held(name):
            return None  # ours ended (another took the key first) or was not ours, and none is starting
        time.sleep(0.05)
    return None


def _wait_gone() -> None:
    """Wait until no server holds its lock (each checks for a stop every second): at most 10 seconds."""
    import time

    for _ in range(200):
        if not _alive():
            return
        time.sleep(0.05)


def _alive() -> list[int]:
    """The pids of the servers in the cache directory, answering or still starting: each holds its lock.

    A server writes its pid into the lock file it holds; a lock nobody holds is a server gone.
    """
    dir_fd = _directory(create=False)
    if dir_fd is None:
        return []
    try:
        held = [_holder(dir_fd, e) for e in sorted(os.listdir(dir_fd)) if e.startswith(_PREFIX) and e.endswith(_LOCK)]
    finally:
        os.close(dir_fd)
    return [pid for pid in held if pid]


def running() -> dict[str, int]:
    """The servers answering in the cache directory: key -> pid."""
    dir_fd = _directory(create=False)
    if dir_fd is None:
        return {}
    found = {}
    try:
        for entry in sorted(os.listdir(dir_fd)):
            if not (entry.startswith(_PREFIX) and entry.endswith(_SOCKET)):
                continue
            sock = _connect(dir_fd, entry)
            if sock is not None:
                with sock:
                    found[entry[len(_PREFIX) : -len(_SOCKET)]] = _peer(sock)[0]
    finally:
        os.close(dir_fd)
    return found


def command(argv: Sequence[str]) -> int:
    """``elastic-compile server start|stop|status``."""
    words = list(argv)
    if words not in (["start"], ["stop"], ["status"]):
        sys.stderr.write("elastic-compile: usage: elastic-compile server start|stop|status\n")
        return 2
    if words == ["stop"]:
        stopped = 0
        for server in _alive():
            try:
                os.kill(server, signal.SIGTERM)
                stopped += 1
            except OSError:
                pass
        _wait_gone()
        print(f"elastic-compile: stopped {stopped} server{'s' if stopped != 1 else ''}")
        return 0
    try:
        chosen = mode()
    except ModeError as e:
        sys.stderr.write(f"elastic-compile: error: {e}\n")
        return 2
    mine = key()
    if words == ["start"]:
        if chosen == "off" or mine is None or not available() or cachedir.directory() is None:
            if chosen == "off":
                why = f"{MODE_ENV}=off"
            elif cachedir.directory() is None:
                why = f"there is no cache directory to hold its socket ({cachedir.DIR_ENV} is empty)"
            else:
                why = "not available here (see docs/compiler.md)"
            sys.stderr.write(f"elastic-compile: error: no compile server: {why}\n")
            return 2
        pid = running().get(mine) or start(wait=True)
        if pid is None:
            sys.stderr.write(
                "elastic-compile: error: the compile server did not start (is the cache directory usable?)\n"
            )
            return 2
        print(f"elastic-compile: server {pid} is running")
        return 0
    servers = running()
    for name, pid in servers.items():
        print(f"server {pid}{' (this interpreter)' if name == mine else ''}")
    if not servers:
        print("no server is running")
    return 0


# --------------------------------------------------------------------------- the server


def _signature(modules: Sequence[str] = ()) -> list[Any]:
    """Every file of the package, the interpreter, each ``sys.path`` directory and ``modules``, as ``stat`` sees them.

    ``st_ctime_ns`` changes with every write and cannot be set back, so an edit, an install
    or an upgrade shows here without reading a byte. ``modules`` are the files of every module
    the server loaded (the libraries and the standard library): one edited in place shows too.
    """

    def facts(path: str) -> list[Any]:
        try:
            info = os.stat(path)
        except OSError:
            return [path]
        return [path, info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns]

    found = [facts(sys.executable)] + [facts(entry) for entry in sys.path] + [facts(m) for m in modules]
    return found + [facts(path) for path in cachedir.package_files(_PACKAGE)]


def _loaded() -> list[str]:
    """The files of the modules loaded in this process."""
    files = {getattr(module, "__file__", None) for module in list(sys.modules.values())}
    return sorted(f for f in files if isinstance(f, str) and os.path.isabs(f))


def _holder(dir_fd: int, lock: str) -> int | None:
    """The pid a held lock file names (0 if none yet), or None when nobody holds it: no server there."""
    import fcntl

    try:
        fd = os.open(lock, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        text = os.read(fd, 32).decode("ascii", "replace").strip()
        return int(text) if text.isdigit() else 0
    finally:
        os.close(fd)
    return None


def _held(name: str) -> bool:
    """Whether a server of key ``name`` holds its lock (it runs, or is starting)."""
    dir_fd = _directory(create=False)
    if dir_fd is None:
        return False
    try:
        return _holder(dir_fd, _PREFIX + name + _LOCK) is not None
    finally:
        os.close(dir_fd)


def _warm() -> None:
    """Import and run what a command uses, so that each fork starts warm.

    Only the package's own files are read: the example below, not a user's spec, and the
    environment's ``ELASTIC_COMPILE_*`` settings are set aside meanwhile (a worker reads
    its client's).
    """
    import io

    # Every module a command may import: a run then imports nothing from disk (see serve()).
    from elastic_compile.compiler import adopt, cache, cli, doctor, explain, inputs, lint, output, writer  # noqa: F401
    from elastic_compile.compiler.pipeline import compile_text
    from elastic_compile.schema import json_schema  # noqa: F401

    saved = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("ELASTIC_COMPILE_")}
    try:
        cli._parser()
        compiled = [compile_text(_EXAMPLE, "warm.elastic.yaml", ("all",))]
        output.stream_text(compiled, "yaml")
        output.directory_files(compiled, "yaml", nested=False)
        lint.report(compiled, [], strict=False, stream=io.StringIO())
        cache.remember_package()
    finally:
        os.environ.update(saved)


_EXAMPLE: Final = """\
name: warm
image: ghcr.io/example/trainer:1.0
command: [python, train.py]
"""


def serve(name: str) -> None:
    """Run the server for key ``name`` until it is idle, stale or stopped (started by :func:`start`)."""
    global _serving  # noqa: PLW0603 -- the one switch a fork of the server inherits
    import fcntl
    import gc
    import select
    import time

    _serving = True
    os.umask(0o077)
    if key() != name:
        return  # started by a different interpreter or setting: it would not be this key's
    dir_fd = _directory(create=True)
    if dir_fd is None:
        return
    lock = os.open(_PREFIX + name + _LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return  # another server has this key
    os.ftruncate(lock, 0)
    os.write(lock, f"{os.getpid()}\n".encode())  # for `server stop`, which must find a server still starting
    before = _signature()
    from elastic_compile.compiler.cli import _collector_paused

    opened: list[str] = []
    watching = [True]

    def audit(event: str, args: tuple[Any, ...]) -> None:
        # Data files the warm-up reads (a library's schemas, cached for good) are watched too.
        if watching[0] and event == "open" and isinstance(args[0], str):
            opened.append(os.path.abspath(args[0]))

    sys.addaudithook(audit)  # cannot be removed: after the warm-up it returns at once
    with _collector_paused():
        _warm()
    watching[0] = False
    watched = sorted({*_loaded(), *(f for f in opened if not f.startswith(("/proc/", "/dev/")) and os.path.isfile(f))})
    if _signature() != before:
        return  # changed while it loaded
    before = _signature(watched)
    socket_name = _PREFIX + name + _SOCKET
    with contextlib.suppress(FileNotFoundError):
        os.unlink(socket_name, dir_fd=dir_fd)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(_address(dir_fd, socket_name))
    bound = os.stat(socket_name, dir_fd=dir_fd, follow_symlinks=False).st_ino

    def ours() -> bool:
        """Whether the socket's name is still this server's: clients can reach it."""
        try:
            return os.stat(socket_name, dir_fd=dir_fd, follow_symlinks=False).st_ino == bound
        except OSError:
            return False

    listener.listen(MAX_RUNS)
    stopping: list[int] = []  # a flag a signal handler can set: raising there could strike in a fork
    signal.signal(signal.SIGTERM, lambda sig, _frame: stopping.append(sig))
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    gc.collect()
    gc.freeze()  # the warm objects are shared with every fork, never copied by a collection
    handlers: set[int] = set()
    last = time.monotonic()
    try:
        while not stopping:
            readable, _, _ = select.select([listener], [], [], 1.0)
            for pid, status in _reaped(handlers).items():
                handlers.discard(pid)
                if status == 0:  # a run: a probe (`server status`) or a dropped request does not keep it up
                    last = time.monotonic()
            if not ours():  # the cache directory was removed, or a new server took the name
                break
            if readable:
                conn, _ = listener.accept()
                with conn:
                    if len(handlers) >= MAX_RUNS or _signature(watched) != before:
                        if len(handlers) < MAX_RUNS:
                            stopping.append(0)  # the compiler on disk is not the one loaded here
                        continue  # closed unanswered: the client runs the command itself
                    pid = os.fork()
                    if pid == 0:
                        # A run holds none of the server's descriptors (the lock would outlive the server).
                        for fd in (listener.fileno(), lock, dir_fd):
                            os.close(fd)
                        _handle(conn)
                    handlers.add(pid)
            elif not handlers and time.monotonic() - last > IDLE_SECONDS:
                break
    finally:
        # Only our own socket: a new server may have bound the name after this one went stale.
        if ours():
            with contextlib.suppress(OSError):
                os.unlink(socket_name, dir_fd=dir_fd)
        listener.close()
        os.close(lock)
        os.close(dir_fd)


def _reaped(pids: set[int]) -> dict[int, int]:
    """The handlers of ``pids`` that ended: pid -> exit code (0: it ran a command)."""
    done = {}
    for pid in list(pids):
        try:
            ended, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done[pid] = -1
            continue
        if ended == pid:
            done[pid] = os.waitstatus_to_exitcode(status)
    return done


def _handle(conn: socket.socket) -> None:
    """A handler (a fork of the server): read one request, run it in a worker, report how it ended."""
    code = 1
    try:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        conn.settimeout(_HANDSHAKE_SECONDS)
        if _peer(conn)[1] != os.geteuid():
            os._exit(1)
        request, fds = _read_request(conn)
        if request is None:
            for fd in fds:
                os.close(fd)
            os._exit(1)
        conn.sendall(_READY)
        if _recv_exactly(conn, 1) != _GO:
            os._exit(1)  # the client gave up: it runs the command itself
        conn.settimeout(None)
        worker = os.fork()
        if worker == 0:
            conn.close()
            _work(request, fds)
        for fd in fds:
            os.close(fd)
        with contextlib.suppress(OSError):  # a client gone already: _supervise ends the run
            conn.sendall(_WORKER.pack(b"W", worker))
        _supervise(conn, worker)
        code = 0
    finally:
        os._exit(code)


def _read_request(conn: socket.socket) -> tuple[dict[str, Any] | None, list[int]]:
    """The request and its four descriptors (directory, stdin, stdout, stderr); None if malformed."""
    import stat

    head, fds, flags, _ = socket.recv_fds(conn, _HEADER.size, 4)
    if len(fds) != 4 or flags & socket.MSG_CTRUNC or not stat.S_ISDIR(os.fstat(fds[0]).st_mode):
        return None, fds
    head += _recv_exactly(conn, _HEADER.size - len(head))
    if len(head) != _HEADER.size:
        return None, fds
    magic, size = _HEADER.unpack(head)
    if magic != _MAGIC or size > MAX_REQUEST_BYTES:
        return None, fds
    body = _recv_exactly(conn, size)
    try:
        request = json.loads(body.decode("utf-8", "surrogateescape")) if len(body) == size else None
    except (ValueError, RecursionError):
        request = None
    return (request if _well_formed(request) else None), fds


def _well_formed(request: Any) -> bool:
    def strings(value: Any) -> bool:
        return isinstance(value, list) and all(isinstance(v, str) for v in value)

    if not isinstance(request, dict) or set(request) != {"argv", "argv0", "env", "umask", "stdio", "ignored"}:
        return False
    ignored = request["ignored"]
    if not isinstance(ignored, list) or not all(type(sig) is int and sig in _DISPOSED for sig in ignored):
        return False
    env, stdio = request["env"], request["stdio"]
    return (
        strings(request["argv"])
        and isinstance(request["argv0"], str)
        and isinstance(env, dict)
        and all(
            isinstance(k, str) and isinstance(v, str) and k and "=" not in k and "\0" not in k + v
            for k, v in env.items()
        )
        and isinstance(request["umask"], int)
        and 0 <= request["umask"] <= 0o777
        and isinstance(stdio, list)
        and len(stdio) == 3
        and all(
            isinstance(s, list)
            and len(s) == 5
            and isinstance(s[0], str)
            and isinstance(s[1], str)
            and all(isinstance(b, bool) for b in s[2:])
            for s in stdio
        )
    )


def _supervise(conn: socket.socket, worker: int) -> None:
    """Pass the client's signals on to the worker; when it ends, tell the client how."""
    import select

    watched = os.pidfd_open(worker)
    try:
        while True:
            readable, _, _ = select.select([conn.fileno(), watched], [], [])
            if watched in readable:
                break
            data = conn.recv(64)
            if not data:  # the client is gone (killed): so is its run
                os.kill(worker, signal.SIGKILL)
                break
            for sig in data:
                if sig in _PASSED:
                    os.kill(worker, sig)
        _, status = os.waitpid(worker, 0)
    finally:
        os.close(watched)
    if os.WIFSIGNALED(status):
        reply = _STATUS.pack(b"X", 1, os.WTERMSIG(status))
    else:
        reply = _STATUS.pack(b"X", 0, os.waitstatus_to_exitcode(status))
    with contextlib.suppress(OSError):
        conn.sendall(reply)


def _work(request: dict[str, Any], fds: list[int]) -> None:
    """A worker: become the client's process in all that a command sees, run it, exit as it ends."""
    import io
    import traceback

    code: Any = 1
    try:
        # As the client's interpreter has them: ignored where it ignores them (nohup, `cmd &`),
        # else as Python starts (SIGINT raises KeyboardInterrupt, the others their default).
        for sig in _DISPOSED:
            if sig in request["ignored"]:
                signal.signal(sig, signal.SIG_IGN)
            else:
                signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        cwd, *std = fds
        for target, fd in enumerate(std):
            os.dup2(fd, target)
            os.close(fd)
        os.fchdir(cwd)
        os.close(cwd)
        os.umask(request["umask"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = [request["argv0"], *request["argv"]]
        streams = []
        for fd, (encoding, errors, line_buffering, write_through, buffered) in enumerate(request["stdio"]):
            # As the interpreter opens them: open() sizes the buffer by the descriptor (4 KiB for a pipe),
            # which decides when a write reaches a reader that is gone.
            binary: Any = io.open(fd, "rb" if fd == 0 else "wb", buffering=-1 if buffered else 0, closefd=False)  # noqa: SIM115, UP020
            (binary.raw if buffered else binary).name = ("<stdin>", "<stdout>", "<stderr>")[fd]
            stream = io.TextIOWrapper(
                binary,
                encoding=encoding,
                errors=errors,
                newline="\n",
                line_buffering=line_buffering,
                write_through=write_through,
            )
            stream.mode = "r" if fd == 0 else "w"  # type: ignore[misc]  # as open() sets it: part of its repr
            streams.append(stream)
        sys.stdin, sys.stdout, sys.stderr = streams
        sys.__stdin__, sys.__stdout__, sys.__stderr__ = streams  # type: ignore[misc]
        from elastic_compile.compiler.cli import main

        try:
            code = main(request["argv"])
        except SystemExit as e:
            code = e.code
        except KeyboardInterrupt:
            # As the interpreter ends on an uncaught KeyboardInterrupt: the traceback, then the signal.
            traceback.print_exc()
            _flush()
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        except BaseException:
            traceback.print_exc()
            code = 1
        if code is None:
            code = 0
        elif not isinstance(code, int):
            print(code, file=sys.stderr)
            code = 1
        if not _flush():
            code = 120  # as the interpreter exits when it cannot flush standard output
    finally:
        os._exit(code if isinstance(code, int) else 1)


def _flush() -> bool:
    """Flush standard output and error as the interpreter does when it exits, and say so as it does."""
    import traceback

    ok = True
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError) as e:
            ok = False
            with contextlib.suppress(OSError, ValueError):
                sys.stderr.write(f"Exception ignored in: {stream!r}\n" + "".join(traceback.format_exception_only(e)))
                sys.stderr.flush()
    return ok


__all__ = [
    "IDLE_SECONDS",
    "MAX_REQUEST_BYTES",
    "MAX_RUNS",
    "MODES",
    "MODE_ENV",
    "ModeError",
    "available",
    "call",
    "command",
    "key",
    "mode",
    "routed",
    "running",
    "serve",
    "start",
    "wanted_after",
]
