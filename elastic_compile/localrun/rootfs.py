"""A read-only root for a local pod whose container asks for one (``readOnlyRootFilesystem``).

On the cluster such a container writes only to its volumes (and /dev, /proc): a job that
writes a checkpoint into its working directory, or a temp file without a writable /tmp,
fails there. ``run`` must not be more forgiving, so the pod's command starts in a mount
namespace of its own (``unshare``: as root directly, otherwise inside a user namespace that
maps only the caller's uid and gid) where every mount of this machine is read-only, except
/proc, /sys and /dev, and except the container's emptyDir volumes, each a fresh directory of
its own bound at its mount path. The namespace ends with the pod; nothing changes outside it.

The wrapper execs the pod's command, so the pod's process is the command itself. Where the
system allows no namespaces, :func:`probe` says why and ``run`` notes that the read-only root
is not emulated.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Final

from elastic_compile.localrun.netns import check, libc, unshare_as_self

CLONE_NEWNS: Final = 0x00020000
MS_RDONLY: Final = 0x1
MS_NOSUID: Final = 0x2
MS_NODEV: Final = 0x4
MS_NOEXEC: Final = 0x8
MS_REMOUNT: Final = 0x20
MS_NOATIME: Final = 0x400
MS_NODIRATIME: Final = 0x800
MS_BIND: Final = 0x1000
MS_REC: Final = 0x4000
MS_PRIVATE: Final = 0x40000
MS_RELATIME: Final = 0x200000
MS_STRICTATIME: Final = 0x1000000
# Flags a remount inside a user namespace must keep (the kernel locks them): mountinfo's per-mount options.
_KEPT: Final = {
    "nosuid": MS_NOSUID,
    "nodev": MS_NODEV,
    "noexec": MS_NOEXEC,
    "noatime": MS_NOATIME,
    "nodiratime": MS_NODIRATIME,
    "relatime": MS_RELATIME,
    "strictatime": MS_STRICTATIME,
}
# Left as they are: the kernel's and the devices' file systems, writable in a container too.
_KERNEL: Final = ("/proc", "/sys", "/dev")


def _mounts() -> list[tuple[str, int]]:
    """Mount points of this namespace (mountinfo's escapes undone) and the flags a remount keeps."""
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        point = fields[4].encode().decode("unicode_escape")  # "\040" is a space, as the kernel writes it
        flags = 0
        for option in fields[5].split(","):
            flags |= _KEPT.get(option, 0)
        out.append((point, flags))
    return out


def _under(path: str, roots: Sequence[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def keep_paths() -> list[str]:
    """This machine's own software that a pod runs: the interpreter's prefixes and our checkout.

    On a cluster the image's files never sit under an emptyDir's mount path; here they may (a clone
    or a venv under /tmp), and covering them with a fresh /tmp would hide the pod's own program.
    """
    package_root = Path(__file__).resolve().parents[2]
    found = {sys.prefix, sys.base_prefix, str(Path(sys.executable).resolve().parent), str(package_root)}
    return sorted(p for p in found if os.path.isdir(p))


def enter(binds: Sequence[tuple[str, str]], keep: Sequence[str] = ()) -> None:
    """Make this process's view read-only except ``binds`` (source, mount path): a new mount namespace.

    ``keep``: directories that stay visible (read-only) even where a bind covers their path.
    """
    c = libc()
    unshare_as_self(CLONE_NEWNS)
    check(c.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "make / private")
    writable = [target for _, target in binds]
    # Opened before any bind covers them: a descriptor still reaches a directory its path no longer shows.
    kept = [(path, os.open(path, os.O_PATH | os.O_DIRECTORY)) for path in keep if _under(path, writable)]
    # Writable volumes first: a bind copies the flags of its source's mount.
    for source, target in binds:
        check(c.mount(source.encode(), target.encode(), None, MS_BIND | MS_REC, None), f"bind {target}")
    for path, fd in kept:
        os.makedirs(path, exist_ok=True)  # its mount point, inside the fresh volume
        check(c.mount(f"/proc/self/fd/{fd}".encode(), path.encode(), None, MS_BIND | MS_REC, None), f"keep {path}")
        os.close(fd)
    kept_paths = [path for path, _ in kept]
    for point, flags in _mounts():
        if _under(point, _KERNEL) or (_under(point, writable) and not _under(point, kept_paths)):
            continue
        # Mount points this process cannot reach (another namespace's) fail harmlessly.
        c.mount(None, point.encode(), None, MS_REMOUNT | MS_BIND | MS_RDONLY | flags, None)


def wrap(argv: Sequence[str], binds: Sequence[tuple[str, str]]) -> list[str]:
    """``argv`` started under a read-only root with ``binds`` writable (the wrapper execs it)."""
    spec = [f"{source}:{target}" for source, target in binds]
    keep = [f"--keep={path}" for path in keep_paths()]
    return [sys.executable, "-m", __name__, *(f"--bind={b}" for b in spec), *keep, "--", *argv]


@cache
def probe() -> str | None:
    """Why this system cannot give a pod a read-only root (None: it can); asked once per process."""
    import subprocess

    done = subprocess.run(
        [sys.executable, "-m", __name__, "--", sys.executable, "-c", "pass"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    if done.returncode == 0:
        return None
    return done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"


def main(args: Sequence[str]) -> int:
    """``python -m elastic_compile.localrun.rootfs [--bind=SRC:DST ...] [--keep=DIR ...] -- COMMAND...``."""
    split = list(args).index("--") if "--" in args else len(args)
    options = list(args[:split])
    binds = [tuple(a.removeprefix("--bind=").split(":", 1)) for a in options if a.startswith("--bind=")]
    keep = [a.removeprefix("--keep=") for a in options if a.startswith("--keep=")]
    argv = list(args[split + 1 :])
    try:
        enter([(s, t) for s, t in binds], keep)
        os.execvp(argv[0], argv)  # does not return
    except (OSError, IndexError) as e:
        print(f"elastic-compile run: no read-only root here: {e}", file=sys.stderr)
    return 126


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
