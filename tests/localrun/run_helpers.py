"""Helpers for the ``elastic-compile run`` tests: start ``run`` as a real process and find what it left.

Every test spec carries a unique marker in its env (``TEST_MARKER``); every pod process
inherits it, so a scan of /proc tells whether anything outlived ``run``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
TRAIN = EXAMPLES / "train_tiny.py"
RUN = [sys.executable, "-m", "elastic_compile.compiler.cli", "run"]
MARKER_NAME = "TEST_MARKER"

# Fails in the first attempt only, on the second worker of group rank 1: that node's
# agent restarts its worker group in place (TORCHELASTIC_RESTART_COUNT 1); the other agent
# follows the new rendezvous round. Each node's first worker reports how it ended.
FAIL_ONCE = """\
import os, sys
import torch.distributed as dist
dist.init_process_group("gloo")
restart = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
group, local = int(os.environ["GROUP_RANK"]), int(os.environ["LOCAL_RANK"])
dist.barrier()
if (group, local, restart) == (1, 1, 0):
    print("a worker fails on purpose", flush=True)
    sys.exit(7)
dist.barrier()
if local == 0:
    print(f"done group {group} world_size {dist.get_world_size()} restart {restart}", flush=True)
dist.destroy_process_group()
"""


def new_marker() -> str:
    return f"localrun-{uuid.uuid4().hex}"


def processes_with(needle: str) -> list[int]:
    """Live processes whose environment or command line contains ``needle``."""
    data = needle.encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_bytes()
            if stat.rpartition(b")")[2].split()[0] == b"Z":
                continue  # dead already, waiting for its parent
            blob = Path(f"/proc/{entry}/environ").read_bytes() + Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if data in blob:
            found.append(int(entry))
    return found


def kill_marked(needle: str) -> list[int]:
    """SIGKILL whatever carries ``needle`` (test teardown); returns what was found."""
    found = processes_with(needle)
    for pid in found:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return found


def with_tmpdir(tmpdir: Path | None) -> dict[str, str] | None:
    """This environment with ``TMPDIR`` set (None: this environment as it is)."""
    return None if tmpdir is None else {**os.environ, "TMPDIR": str(tmpdir)}


@dataclass
class Result:
    """A finished ``run``: exit code, both streams, wall time."""

    code: int
    out: str
    err: str
    seconds: float

    @property
    def report(self) -> str:
        return f"exit {self.code} after {self.seconds:.1f}s\n--- stdout\n{self.out}\n--- stderr\n{self.err}"

    @property
    def summary(self) -> str:
        lines = [
            line for line in self.err.splitlines() if " after " in line and line.startswith("elastic-compile run: job ")
        ]
        return lines[-1] if lines else ""


def run(
    args: list[str],
    *,
    timeout: float,
    stdin: str | None = None,
    cwd: Path | None = None,
    tmpdir: Path | None = None,
) -> Result:
    """``elastic-compile run ARGS`` to the end (killed after ``timeout``); ``tmpdir``: its TMPDIR."""
    start = time.monotonic()
    proc = subprocess.run(
        [*RUN, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd or ROOT,
        check=False,
        env=with_tmpdir(tmpdir),
    )
    return Result(proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start)


@dataclass
class Running:
    """A ``run`` process whose output is collected while it runs."""

    proc: subprocess.Popen[str]
    started: float = field(default_factory=time.monotonic)
    out: list[str] = field(default_factory=list)
    err: list[str] = field(default_factory=list)
    threads: list[threading.Thread] = field(default_factory=list)

    @classmethod
    def start(cls, args: list[str], tmpdir: Path | None = None) -> Running:
        proc = subprocess.Popen(
            [*RUN, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env=with_tmpdir(tmpdir),
        )
        running = cls(proc)
        for stream, sink in ((proc.stdout, running.out), (proc.stderr, running.err)):
            thread = threading.Thread(target=lambda s=stream, k=sink: k.extend(iter(s.readline, "")), daemon=True)
            thread.start()
            running.threads.append(thread)
        return running

    def wait_for(self, text: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(text in line for line in list(self.out)):
                return True
            if self.proc.poll() is not None:
                return False
            time.sleep(0.1)
        return False

    def finish(self, timeout: float) -> Result:
        code = self.proc.wait(timeout=timeout)
        for thread in self.threads:
            thread.join(5)
        return Result(code, "".join(self.out), "".join(self.err), time.monotonic() - self.started)


def spec(name: str, marker: str, body: str) -> str:
    """An elastic.yaml for a test job: ``body`` plus the image and the marker env."""
    return f"name: {name}\nimage: local/test:1\nenv:\n  {MARKER_NAME}: {marker}\n{body}"
