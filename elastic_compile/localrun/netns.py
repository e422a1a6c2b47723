"""The local pods' network: one private network namespace whose only interface is loopback.

On a cluster each pod has its own IP; locally every pod is 127.0.0.1. torch's ``TCPStore``
(the c10d rendezvous store, the workers' store) binds every interface whatever host it is
given, and gloo binds the address the host name resolves to, so a job run here would listen
on this machine's public addresses: anyone who reaches the port can send the store a pickle
that the agents load. Instead, ``run`` starts every pod inside one network namespace of its
own whose only interface is ``lo``: the pods reach each other on 127.0.0.1 as before, and
nothing they listen on is reachable from outside it (nor can they reach the network: see
docs/run.md).

A *holder* process creates the namespace (``unshare``: as root directly, otherwise inside a
user namespace that maps only the caller's own uid and gid) and keeps it until ``run``
closes its stdin; each pod's command is prefixed with ``python -m
elastic_compile.localrun.netns enter PID --``, which joins the holder's namespaces and
execs the command (so the pod's process is the command itself).
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import socket
import struct
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1
_TCP_LISTEN = "0A"


class NetworkError(Exception):
    """The private network could not be made (no namespaces on this system, or not allowed)."""


def libc() -> ctypes.CDLL:
    """The C library, keeping errno (unshare, setns and mount have no Python wrapper before 3.12)."""
    return ctypes.CDLL(None, use_errno=True)


def check(result: int, what: str) -> None:
    """Raise ``OSError`` with errno's reason when a C call returned non-zero."""
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")


def unshare_as_self(flags: int) -> None:
    """``unshare(flags)``: as root directly, otherwise inside a new user namespace mapping only our uid and gid.

    The process keeps its uid and gains nothing on the host.
    """
    uid, gid = os.geteuid(), os.getegid()
    check(libc().unshare(flags | (0 if uid == 0 else CLONE_NEWUSER)), "unshare")
    if uid != 0:
        Path("/proc/self/setgroups").write_text("deny")
        Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
        Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")


def _loopback_up() -> None:
    """``ip link set lo up``, by ioctl (a new network namespace starts with lo down)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(s.fileno(), _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(s.fileno(), _SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | _IFF_UP))


def _hold() -> int:
    try:
        unshare_as_self(CLONE_NEWNET)  # the pods keep their uid and gain nothing on the host
        _loopback_up()
    except OSError as e:
        print(f"error {e.strerror or e}", flush=True)
        return 1
    print("ready", flush=True)
    sys.stdin.buffer.read()  # until run closes the pipe, or dies
    return 0


def _enter(holder: int, argv: Sequence[str]) -> int:
    c = libc()
    kinds = [("net", CLONE_NEWNET)] if os.geteuid() == 0 else [("user", CLONE_NEWUSER), ("net", CLONE_NEWNET)]
    try:
        for name, kind in kinds:
            fd = os.open(f"/proc/{holder}/ns/{name}", os.O_RDONLY | os.O_CLOEXEC)
            try:
                check(c.setns(fd, kind), f"setns {name}")
            finally:
                os.close(fd)
        os.execvp(argv[0], list(argv))  # does not return
    except OSError as e:
        print(f"elastic-compile run: cannot start the pod in its network: {e}", file=sys.stderr)
        return 127 if e.errno == errno.ENOENT else 126


class LoopbackNetwork:
    """A private network namespace with only ``lo`` up, for the pods of one ``run``."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def holder(self) -> int:
        """The pid whose namespaces the pods join."""
        if self._proc is None:
            raise RuntimeError("the network is not started")
        return self._proc.pid

    def start(self) -> LoopbackNetwork:
        """Create the namespace; raises :class:`NetworkError` with the system's reason."""
        self._proc = subprocess.Popen(
            [sys.executable, "-m", __name__, "hold"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # Ctrl-C reaches run, which then stops the pods and this
        )
        assert self._proc.stdout is not None  # Popen with stdout=PIPE
        answer = self._proc.stdout.readline().decode(errors="replace").strip()
        if answer != "ready":
            self.close()
            raise NetworkError(answer.removeprefix("error ") or "the namespace holder died")
        return self

    def wrap(self, argv: Sequence[str]) -> list[str]:
        """``argv`` started inside the namespace (the wrapper execs it: same process)."""
        return [sys.executable, "-m", __name__, "enter", str(self.holder), "--", *argv]

    def listening(self, port: int) -> bool:
        """Whether anything in the namespace listens on TCP ``port``."""
        return port in listening_ports(self.holder)

    def close(self) -> None:
        """Let the holder go; the namespace ends with the last process in it."""
        if self._proc is None:
            return
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()


def listening_sockets(pid: int | str = "self") -> list[tuple[str, int, int]]:
    """TCP sockets in LISTEN state in ``pid``'s network namespace: ``(hex address, port, inode)``.

    Read from ``/proc/PID/net/tcp`` and ``tcp6``, which show the namespace of that process.
    """
    found: list[tuple[str, int, int]] = []
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == _TCP_LISTEN:
                address, _, port = fields[1].partition(":")
                found.append((address, int(port, 16), int(fields[9])))
    return found


def listening_ports(pid: int | str = "self") -> set[int]:
    """The ports of :func:`listening_sockets`."""
    return {port for _, port, _ in listening_sockets(pid)}


def interfaces(pid: int | str = "self") -> list[str]:
    """The network interfaces ``pid``'s namespace has (``/proc/PID/net/dev``)."""
    try:
        lines = Path(f"/proc/{pid}/net/dev").read_text().splitlines()[2:]
    except OSError:
        return []
    return [line.split(":", 1)[0].strip() for line in lines]


def main(argv: Sequence[str]) -> int:
    """``hold`` or ``enter PID -- ARGV...`` (internal to ``run``)."""
    if list(argv[:1]) == ["hold"]:
        return _hold()
    if len(argv) >= 4 and argv[0] == "enter" and argv[2] == "--":
        return _enter(int(argv[1]), argv[3:])
    print("usage: python -m elastic_compile.localrun.netns hold | enter PID -- ARGV...", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
