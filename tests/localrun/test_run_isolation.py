"""``run`` exposes nothing beyond loopback, and leaves nothing behind (issue 18 items 6 and 7).

torch's TCPStore binds every interface whatever host it is given, so the rendezvous store
and the workers' store of a job run here listened on this machine's public addresses
(``*:23456``). ``run`` now starts the pods in a private network namespace whose only
interface is ``lo``. Checked from outside, on the live sockets of a running two-pod job:
the pods' namespace is not this one, holds only ``lo``, and has the stores listening; this
namespace has nothing listening on their ports. A daemon a worker detaches (own session,
clean environment, reparented away from the pod) does not outlive ``run``. Both hold for a
PyTorchJob and for a TrainJob (whose rendezvous store listens on node 0's PET_MASTER_PORT).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from run_helpers import ROOT, Running, spec

from elastic_compile.localrun.netns import interfaces, listening_sockets

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("torch_installed")]

PROBE = ROOT / "tests" / "localrun" / "probe_network.py"
GUARD_SECONDS = 180.0  # a hang guard only; never an assertion
# Each engine: what the spec adds to be compiled for it, the port its rendezvous store takes,
# and the name of the pod that hosts it.
ENGINES = {
    "pytorchjob": ("", 23456, "iso-worker-0"),
    "trainjob": ("target: trainjob\n", 29500, "iso-node-0-0"),
}


def _wait_for(path: Path, running: Running) -> None:
    deadline = time.monotonic() + GUARD_SECONDS
    while not path.exists():
        assert running.proc.poll() is None, "".join(running.out + running.err)
        assert time.monotonic() < deadline, f"no {path.name}: " + "".join(running.out + running.err)
        time.sleep(0.1)


def _job(tmp_path: Path, marker: str, engine: str, *args: str) -> Path:
    probe = tmp_path / "probe"
    probe.mkdir()
    words = ", ".join(["python", str(PROBE), *args])
    body = f"command: [{words}]\nnnodes: 2\nnproc_per_node: 2\nmonitor_interval: 0.5\n{ENGINES[engine][0]}"
    path = tmp_path / "job.yaml"
    path.write_text(spec("iso", marker, body).replace("env:\n", f"env:\n  PROBE_DIR: {probe}\n"))
    return path


@pytest.mark.parametrize("engine", ENGINES)
def test_every_store_listens_only_on_loopback_during_a_run(tmp_path: Path, marker: str, engine: str) -> None:
    path = _job(tmp_path, marker, engine)
    probe = tmp_path / "probe"
    running = Running.start([str(path), "--timeout", "300"])
    try:
        _wait_for(probe / "pid-0", running)
        worker = int((probe / "pid-0").read_text())
        pod_sockets = listening_sockets(worker)
        ports = {port for _, port, _ in pod_sockets}
        # The job's stores listen (the c10d rendezvous store: 23456 for a PyTorchJob, node 0's
        # PET_MASTER_PORT 29500 for a TrainJob; and the workers' store), inside the pods' own network ...
        assert os.readlink(f"/proc/{worker}/ns/net") != os.readlink("/proc/self/ns/net")
        assert interfaces(worker) == ["lo"], interfaces(worker)
        assert ENGINES[engine][1] in ports and len(ports) >= 2, pod_sockets
        # ... and none of those sockets is in this machine's network (compared by socket, not
        # by port: other jobs on this machine may use 23456 too).
        host = {inode for _, _, inode in listening_sockets()}
        assert not {inode for _, _, inode in pod_sockets} & host, pod_sockets
    finally:
        (probe / "release").write_text("")
    result = running.finish(timeout=GUARD_SECONDS)
    assert result.code == 0, result.report
    assert f"[{ENGINES[engine][2]}] rank 0 released" in result.out, result.report


@pytest.mark.parametrize("engine", ENGINES)
def test_a_detached_daemon_does_not_outlive_run(tmp_path: Path, marker: str, engine: str) -> None:
    path = _job(tmp_path, marker, engine, "detach")
    probe = tmp_path / "probe"
    running = Running.start([str(path), "--timeout", "300"])
    try:
        _wait_for(probe / "daemon", running)
        daemon = int((probe / "daemon").read_text())
        assert Path(f"/proc/{daemon}").exists()
        assert marker.encode() not in Path(f"/proc/{daemon}/environ").read_bytes()  # the marker sweep cannot see it
    finally:
        (probe / "release").write_text("")
    result = running.finish(timeout=GUARD_SECONDS)
    assert result.code == 0, result.report
    alive = Path(f"/proc/{daemon}").exists()
    state = Path(f"/proc/{daemon}/stat").read_text().rpartition(")")[2].split()[0] if alive else "gone"
    try:
        assert state in ("gone", "Z"), f"the daemon {daemon} outlived run ({state})"
    finally:
        if state not in ("gone", "Z"):
            os.kill(daemon, 9)
