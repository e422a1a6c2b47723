"""Pods as local processes: starting, marking, killing, exit codes and output lines.

Engine-neutral: what a container runtime and the kubelet do for any pod, whichever engine
created it (:mod:`elastic_compile.localrun.kubeflow`, ...).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import ctypes
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from types import FrameType
from typing import IO, Any, Final, TextIO

from elastic_compile import contract
from elastic_compile.core.errors import printable
from elastic_compile.localrun import rootfs
from elastic_compile.localrun.kubelet import ConfigMapMount, Pod

PROG: Final = "elastic-compile run"

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1  # the job failed and no pod's exit code says more
EXIT_INPUT: Final = 2  # as the compiler: bad input, nothing ran
EXIT_TIMEOUT: Final = 124  # --timeout or activeDeadlineSeconds; timeout(1)'s code
EXIT_SIGNAL_BASE: Final = 128  # 130 Ctrl-C, 143 SIGTERM, and a pod killed by signal N

# Every process of a local pod carries this variable (inherited through fork and exec), so
# that stopping a pod reaches all of them, as the container runtime reaches every process
# of a container through its cgroup. torch starts script-mode workers in sessions of their
# own (torch/distributed/elastic/multiprocessing/subprocess_handler): signalling the pod's process group alone would
# orphan them.
MARKER_ENV: Final = "ELASTIC_COMPILE_RUN_POD"

# The environment a container image would bring (PATH, HOME, locale, Python's), taken
# from this shell; nothing else of it leaks into the pods.
BASE_ENV: Final = (
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR",
    "VIRTUAL_ENV", "PYTHONPATH", "LD_LIBRARY_PATH",
)  # fmt: skip

# Kubernetes' default terminationGracePeriodSeconds.
DEFAULT_GRACE: Final = 30.0


@dataclass(frozen=True)
class Options:
    """The parsed command line."""

    source: str
    nodes: int | None = None
    nproc_per_node: int | None = None
    kills: tuple[tuple[str, float], ...] = ()
    # --kill POD@/TEXT/: lose POD as soon as any pod prints a line containing TEXT.
    line_kills: tuple[tuple[str, str], ...] = ()
    # --replace POD@SECONDS / POD@/TEXT/: lose POD as --kill does, and its controller creates it again.
    replaces: tuple[tuple[str, float], ...] = ()
    line_replaces: tuple[tuple[str, str], ...] = ()
    timeout: float | None = None
    workdir: Path | None = None
    dry_run: bool = False
    env: tuple[tuple[str, str], ...] = ()  # --env NAME=VALUE: values for entries that need the cluster
    host_network: bool = False  # --host-network: no private loopback-only network for the pods
    # --python: the image's interpreter, in place of this one (:func:`use_image_python`).
    python: Path | None = None


class RunError(Exception):
    """Bad input or options: one line, exit code 2, nothing started."""


def local_gpus() -> list[str]:
    """The NVIDIA devices this machine shows (``/proc/driver/nvidia/gpus``), as CUDA_VISIBLE_DEVICES ids."""
    try:
        count = len(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        count = 0
    ids = [str(i) for i in range(count)]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        ids = [d.strip() for d in visible.split(",") if d.strip()][:count]
    return ids


def local_cpus() -> int:
    """CPUs this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def free_port() -> int:
    """A TCP port nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def port_busy(port: int) -> bool:
    """Whether a c10d store could not listen on ``port`` (all addresses, as TCPStore binds)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # As TCPStore does: a socket left in TIME_WAIT by an earlier run is no obstacle.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("", port))
        except OSError:
            return True
    return False


# --------------------------------------------------------------------------- pods


@dataclass
class LocalPod:
    """One pod's local process and the operator's view of it."""

    pod: Pod
    argv: list[str]  # what is executed here
    env: dict[str, str]
    grace: float
    marker: str
    proc: subprocess.Popen[bytes] | None = None
    reader: threading.Thread | None = None
    state: str = "Pending"  # Pending, Running, Succeeded, Failed, Lost, Deleted, Stuck
    start_at: float | None = 0.0  # seconds after the start; None: nothing scheduled
    started_at: float = 0.0
    restarts: int = 0  # the kubelet's in-place restarts (restartCount): OnFailure, Always
    recreated: int = 0  # deleted and created again by the operator: ExitCode
    exit_code: int | None = None
    starts: int = 0
    # Regular containers beside the training container: on a cluster they keep the pod
    # Running after training ends (they are not run here).
    sidecars: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.pod.name


def local_argv(argv: Sequence[str], path: str | None = None) -> list[str]:
    """The pod's command as run here: exactly the manifest's, its program found on the pod's ``path``.

    The pod's PATH starts with this interpreter's bin directory (:func:`base_env`), so
    ``elastic-launch`` is the console script installed beside it and ``python`` is this
    interpreter, as the image's would be. Not ``python -m elastic_compile.entrypoint``: a
    console script has its bin directory first on sys.path, not the working directory, and
    running anything else would hide what every pod of the cluster meets (issue 10, class 9).
    Raises :class:`RunError` when the program is not found.
    """
    search = path if path is not None else base_env(os.environ)["PATH"]
    found = shutil.which(argv[0], path=search)
    if found is None:
        hint = " (pip install 'elastic-compile[launch]' into this Python)" if argv[0] == contract.LAUNCHER else ""
        raise RunError(f"{argv[0]}: not found on the pod's PATH{hint}")
    return [found, *argv[1:]]


# Kubernetes' rule for ConfigMap keys (IsConfigMapKey); a key is also a file name.
_CONFIG_MAP_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")


def _relative_file(path: str) -> PurePosixPath | None:
    """``path`` when it is a relative path of plain components (what Kubernetes allows for items), else None."""
    parts = path.split("/")
    if not path or any(part in ("", ".", "..") for part in parts):
        return None
    return PurePosixPath(path)


def _config_map_files(config_map: Mapping[str, Any], mount: ConfigMapMount) -> dict[PurePosixPath, bytes]:
    """The files the kubelet would project for ``mount``: relative path -> content."""
    values: dict[str, bytes] = {}
    for key, value in (config_map.get("data") or {}).items():
        values[str(key)] = str(value).encode("utf-8")
    for key, value in (config_map.get("binaryData") or {}).items():
        try:
            values[str(key)] = base64.b64decode(str(value), validate=True)
        except binascii.Error as e:
            raise RunError(f"ConfigMap {mount.config_map}: binaryData.{key}: not base64") from e
    for key in values:
        if not _CONFIG_MAP_KEY.match(key) or key in (".", ".."):
            raise RunError(f"ConfigMap {mount.config_map}: {key!r} is not a ConfigMap key")
    items = mount.items if mount.items is not None else tuple((key, key) for key in values)
    files: dict[PurePosixPath, bytes] = {}
    for key, path in items:
        relative = _relative_file(path)
        if relative is None:
            raise RunError(f"volume {mount.volume}: items path {path!r} must be relative, without '..'")
        if key not in values:
            raise RunError(f"volume {mount.volume}: ConfigMap {mount.config_map} has no key {key}")
        files[relative] = values[key]
    return files


def mount_config_maps(pods: Sequence[LocalPod], config_maps: Mapping[str, Mapping[str, Any]], root: Path) -> list[str]:
    """Give each pod's ConfigMap volumes a local directory under ``root``, as the kubelet projects them.

    Each mounted ConfigMap that the input holds is written to ``root/<pod>/<volume>/``
    (read-only files), and every word of the pod's command that names a path under the
    mount path is pointed there: the bundled launcher, ``/opt/elastic-launch/elastic-launch.py``,
    runs from its ConfigMap's own text. A ConfigMap the input lacks: a pod whose command runs
    a file from it would wait in ContainerCreating on the cluster, so that is an error; any
    other is left out with a note. Returns the notes.
    """
    notes: list[str] = []
    for pod in pods:
        for mount in pod.pod.mounts:
            prefix = mount.mount_path.rstrip("/") + "/"
            used = [w for w in pod.argv if w == mount.mount_path or w.startswith(prefix)]
            config_map = config_maps.get(mount.config_map)
            if config_map is None:
                if used and not mount.optional:
                    raise RunError(
                        f"{pod.name}: the command runs {used[0]} from the ConfigMap {mount.config_map} (volume "
                        f"{mount.volume}), which is not in the input, so the pod would never start; give a stream "
                        "that holds it (kubectl kustomize output) or the spec"
                    )
                notes.append(f"volume {mount.volume} (ConfigMap {mount.config_map}) is not in the input: not mounted")
                continue
            local = root / pod.name / mount.volume
            local.mkdir(parents=True, exist_ok=True)
            for relative, data in _config_map_files(config_map, mount).items():
                target = local.joinpath(*relative.parts)
                target.parent.mkdir(parents=True, exist_ok=True)
                flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
                fd = os.open(target, flags, 0o444)
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
            # The kubelet mounts a ConfigMap read-only: nothing in the pod adds or changes a file there.
            for directory in sorted((p for p in local.rglob("*") if p.is_dir()), reverse=True):
                directory.chmod(0o555)
            local.chmod(0o555)
            pod.argv = [str(local) + w[len(mount.mount_path.rstrip("/")) :] if w in used else w for w in pod.argv]
            notes.append(f"volume {mount.volume} (ConfigMap {mount.config_map}) at {mount.mount_path}: {root}/<pod>/")
    return list(dict.fromkeys(notes))


def private_tmpdirs(pods: Sequence[LocalPod], root: Path) -> None:
    """Give each pod a ``TMPDIR`` of its own, ``root/<pod>/.tmp`` (``root``: run's scratch, removed when run ends).

    On a cluster each pod has a ``/tmp`` of its own that goes with it; here the pods would
    share this machine's, and what torch and the workers leave there (the launcher's logs,
    ``torchinductor_<user>``, a crashed worker's files) would stay after every run. A
    ``TMPDIR`` the manifest sets is kept, as on the cluster. (``.tmp``: no volume, whose
    name is a DNS label, can be called that.)
    """
    for pod in pods:
        if contract.ENV_TMPDIR in pod.pod.env:
            continue
        directory = root / pod.name / ".tmp"
        directory.mkdir(parents=True, exist_ok=True)
        pod.env[contract.ENV_TMPDIR] = str(directory)


def use_image_python(pods: Sequence[LocalPod], python: Path) -> list[str]:
    """Run the pods with ``python`` as the image's interpreter instead of this one (``--python``).

    An image brings its own Python, which may have torch and nothing of ours: that is
    what ``launcher: bundled`` and ``launcher: torchrun`` are for. Every program the pods
    would take from this interpreter (itself, or a console script beside it such as
    ``elastic-launch`` and ``torchrun``) is taken from ``python``'s bin directory instead,
    which also replaces this one on the pods' PATH; a program that directory lacks is an
    error, as a container whose command is not in its image never starts. Returns the notes.
    """
    # Not resolved: a venv's python is a symlink, and resolving it would leave the venv.
    image = Path(os.path.abspath(python))
    if not image.is_file() or not os.access(image, os.X_OK):
        raise RunError(f"--python {python}: not an executable file")
    here = Path(sys.executable).parent
    for pod in pods:
        # Under a read-only root the wrapper (ours, run by this interpreter) execs the command after "--".
        wrapped = pod.argv[1:3] == ["-m", rootfs.__name__] and "--" in pod.argv
        at = pod.argv.index("--") + 1 if wrapped else 0
        head = Path(pod.argv[at])
        if pod.argv[at] == sys.executable:
            pod.argv[at] = str(image)
        elif head.parent == here:
            candidate = image.parent / head.name
            if not candidate.is_file():
                raise RunError(f"{pod.name}: {head.name} is not in the image's {image.parent} (--python)")
            pod.argv[at] = str(candidate)
        path = [p for p in pod.env.get("PATH", os.defpath).split(os.pathsep) if p and Path(p) != here]
        pod.env["PATH"] = os.pathsep.join([str(image.parent), *path])
    return [f"the image's Python: {image} (--python), its bin directory first on the pods' PATH"]


def base_env(environ: Mapping[str, str]) -> dict[str, str]:
    """What the image would bring: :data:`BASE_ENV` from ``environ``, this Python first on PATH."""
    env = {k: environ[k] for k in BASE_ENV if k in environ}
    bindir = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join([bindir, *(p for p in env.get("PATH", os.defpath).split(os.pathsep) if p != bindir)])
    return env


# --------------------------------------------------------------------------- processes


def _proc_ppid(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = stat.rpartition(b")")[2].split()
    if len(fields) < 2 or fields[0] == b"Z":
        return None  # a zombie is dead already; its parent reaps it
    return int(fields[1])


def marked_processes(marker: str, root: int | None = None) -> set[int]:
    """Live processes whose environment has ``MARKER_ENV=marker``, plus ``root``'s descendants."""
    needle = f"{MARKER_ENV}={marker}".encode()
    found: set[int] = set()
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit():
            continue
        pid = int(entry)
        ppid = _proc_ppid(pid)
        if ppid is None:
            continue
        children.setdefault(ppid, []).append(pid)
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:  # another user's process, or gone
            continue
        if needle in environ.split(b"\0"):
            found.add(pid)
    stack = [root] if root is not None else []
    while stack:
        pid = stack.pop()
        if pid not in found:
            found.add(pid)
            stack.extend(children.get(pid, []))
    found.discard(os.getpid())
    return found


def kill_pod_processes(pod: LocalPod) -> int:
    """SIGKILL every process of ``pod`` until none is left; returns how many were signalled.

    Repeated because a process may fork between the scan and the kill.
    """
    root = pod.proc.pid if pod.proc is not None and pod.proc.returncode is None else None
    if root is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(root, signal.SIGKILL)
    killed = 0
    for _ in range(100):
        pids = marked_processes(pod.marker, root)
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except (ProcessLookupError, PermissionError):
                pass
        if pod.proc is not None:
            pod.proc.poll()  # reap the root, or it stays a zombie and its pid stays ours
        root = None
        time.sleep(0.02)
    return killed


_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37


def _prctl_subreaper(value: int | None) -> int:
    """Set this process's child-subreaper flag (None: only read it); returns the previous value."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        previous = ctypes.c_int(0)
        libc.prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(previous), 0, 0, 0)
        if value is not None:
            libc.prctl(_PR_SET_CHILD_SUBREAPER, value, 0, 0, 0)
        return previous.value
    except (OSError, AttributeError):  # not Linux: the marker sweep alone
        return 0


def children_of(pid: int) -> set[int]:
    """Every process whose parent is ``pid``, zombies included."""
    found: set[int] = set()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_bytes().rpartition(b")")[2].split()
            except OSError:
                continue
            if len(fields) > 1 and int(fields[1]) == pid:
                found.add(int(entry))
    return found


class OrphanSweep:
    """Processes the pods detach end with ``run``, whatever they did to their environment.

    While it is active this process is a child subreaper (``PR_SET_CHILD_SUBREAPER``): a
    process a pod double-forks into a session of its own, with a clean environment that
    the marker sweep cannot see, is reparented here instead of to init. :meth:`sweep`
    SIGKILLs every such orphan (and what it started) and reaps it.
    """

    def __init__(self, keep: set[int]) -> None:
        self.keep = set(keep)  # children that are not orphans of pods (and the pods' own roots)
        self._previous = 0

    def __enter__(self) -> OrphanSweep:
        self.keep |= children_of(os.getpid())  # what this process had before: not ours to sweep
        self._previous = _prctl_subreaper(1)
        return self

    def __exit__(self, *_exc: object) -> None:
        self.sweep()
        _prctl_subreaper(self._previous)

    def sweep(self) -> int:
        """SIGKILL and reap every orphan reparented here; returns how many there were."""
        orphans: set[int] = set()
        for _ in range(200):  # an orphan's own children are reparented here once it dies: next round
            found = children_of(os.getpid()) - self.keep
            if not found:
                break
            for pid in found:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)
            orphans |= found
            time.sleep(0.01)
        return len(orphans)


def container_exit_code(returncode: int) -> int:
    """A container's exit code: a process killed by signal N reports 128 + N."""
    return EXIT_SIGNAL_BASE - returncode if returncode < 0 else returncode


# --------------------------------------------------------------------------- output


class Printer:
    """Pod lines to stdout as ``[pod] line``, this command's lines to stderr; whole lines only."""

    def __init__(self, out: TextIO, err: TextIO) -> None:
        self._out, self._err = out, err
        self.clock: Callable[[], float] = lambda: 0.0  # the job's, once it exists
        # Called with (pod, line) for every pod line, from the pod's reader thread.
        self.on_line: Callable[[str, str], None] | None = None
        self._lock = threading.Lock()
        self._broken = False

    def pod_line(self, pod: str, text: str) -> None:
        if self.on_line is not None:
            self.on_line(pod, text)
        with self._lock:
            if self._broken:
                return  # keep draining the pod's pipe, or the pod blocks on a full one
            try:
                # A pod's output may carry escape sequences; a terminal must not act on them.
                self._out.write(f"[{pod}] {printable(text, keep=chr(9))}\n")
                self._out.flush()
            except (BrokenPipeError, ValueError):
                self._broken = True

    def note(self, text: str) -> None:
        self._write(f"{PROG}: {text}")

    def event(self, text: str) -> None:
        self._write(f"{PROG}: [{self.clock():6.1f}s] {text}")

    def _write(self, line: str) -> None:
        with self._lock:
            try:
                self._err.write(printable(line, keep=chr(9)) + "\n")
                self._err.flush()
            except (BrokenPipeError, ValueError):
                pass


def _read_lines(stream: IO[bytes], pod: str, printer: Printer) -> None:
    pending = b""
    while True:
        chunk = stream.readline()
        if not chunk:
            break
        pending += chunk
        if pending.endswith(b"\n"):
            printer.pod_line(pod, pending[:-1].decode(errors="replace").rstrip("\r"))
            pending = b""
    if pending:  # a last line without a newline
        printer.pod_line(pod, pending.decode(errors="replace"))
    stream.close()


@dataclass
class _Signals:
    """Installs and restores the SIGINT/SIGTERM handlers (main thread only)."""

    handler: Callable[[int, FrameType | None], None]
    saved: dict[int, Any] = field(default_factory=dict)

    def __enter__(self) -> _Signals:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self.saved[sig] = signal.signal(sig, self.handler)
        return self

    def __exit__(self, *_exc: object) -> None:
        for sig, old in self.saved.items():
            signal.signal(sig, old)
