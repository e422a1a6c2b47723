"""Start real ``elastic-launch`` processes for the entrypoint tests.

Every agent gets a unique marker in its environment; workers inherit the environment, so
the marker finds every process a test started (agent, fork/spawn workers and script
workers in their own sessions) through ``/proc/<pid>/environ``, without psutil.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
WORKERS_SCRIPT = HERE / "elastic_workers.py"
# The interpreter that runs elastic-launch, and so its workers: this one, unless
# bench/torch_compat.py points the suite at another torch release's venv.
PYTHON = os.environ.get("EC_TEST_PYTHON") or sys.executable
LAUNCH = (PYTHON, "-m", "elastic_compile.entrypoint")
# The console script, as a container's command runs it: only its bin dir on sys.path.
CONSOLE = (str(Path(sys.executable).with_name("elastic-launch")),)
# Fast polling and fork keep a launch around a second on 2 cores (measured).
FAST = ("--monitor-interval", "0.2", "--start-method", "fork")
MARKER_ENV = "EC_TEST_MARKER"

# Inherited variables that would change what the launcher resolves.
_DROP_PREFIXES = ("PET_", "ELASTIC_LAUNCH_", "TORCHELASTIC_")
_DROP = frozenset({"OMP_NUM_THREADS", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "LOGLEVEL"})


def base_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The test process's environment without launcher inputs, workers on PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_DROP_PREFIXES) and k not in _DROP}
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(REPO)])
    env.update(extra or {})
    return env


def free_port() -> int:
    """A port that was free a moment ago (the OS picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def marked_pids(marker: str) -> list[int]:
    """PIDs of live processes whose environment holds ``marker``."""
    needle = f"{MARKER_ENV}={marker}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue  # gone, or not ours
        if state != "Z" and needle in environ.split(b"\0"):
            pids.append(int(entry.name))
    return pids


@dataclass
class Agent:
    """One running ``elastic-launch`` process, its output in files."""

    proc: subprocess.Popen[bytes]
    stdout_path: Path
    stderr_path: Path
    marker: str
    started: float = field(default_factory=time.monotonic)

    @property
    def stdout(self) -> str:
        return self.stdout_path.read_text(errors="replace")

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(
                f"elastic-launch still running after {timeout}s; stderr tail:\n{self.stderr[-3000:]}"
            ) from None

    @property
    def seconds(self) -> float:
        return time.monotonic() - self.started


class Launcher:
    """Starts agents for one test and kills whatever is left of them afterwards."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.markers: list[str] = []
        self._n = 0

    def start(
        self,
        args: Sequence[str],
        env: Mapping[str, str] | None = None,
        name: str = "",
        *,
        program: Sequence[str] = LAUNCH,
        cwd: Path = REPO,
    ) -> Agent:
        """Start ``program args`` (``python -m elastic_compile.entrypoint`` by default) in ``cwd``."""
        self._n += 1
        name = name or f"agent{self._n}"
        marker = uuid.uuid4().hex
        self.markers.append(marker)
        out, err = self.tmp_path / f"{name}.stdout", self.tmp_path / f"{name}.stderr"
        with out.open("wb") as fo, err.open("wb") as fe:
            proc = subprocess.Popen(
                [*program, *args],
                cwd=cwd,
                env=base_env({**(env or {}), MARKER_ENV: marker}),
                stdin=subprocess.DEVNULL,
                stdout=fo,
                stderr=fe,
            )
        return Agent(proc, out, err, marker)

    def run(
        self,
        args: Sequence[str],
        env: Mapping[str, str] | None = None,
        timeout: float = 60,
        name: str = "",
        *,
        program: Sequence[str] = LAUNCH,
        cwd: Path = REPO,
    ) -> Agent:
        agent = self.start(args, env, name, program=program, cwd=cwd)
        agent.wait(timeout)
        return agent

    def leftovers(self) -> Iterator[int]:
        for marker in self.markers:
            yield from marked_pids(marker)

    def cleanup(self) -> None:
        for pid in self.leftovers():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def wait_for(predicate: Callable[[], bool], timeout: float, what: str, period: float = 0.1) -> None:
    """Poll ``predicate()`` until true; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(period)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")
