"""The faults clusters produce, on a 2-pod job under the operator's ExitCode policy: what each pod exits with.

    .venv/bin/python bench/faults_bench.py [-k NAME]

Each row runs one 2-pod job (1 worker per pod, gloo, function mode, fork, monitor interval
0.2 s) through ``elastic-compile run``, which plays training-operator v1.9.4: it recreates a
pod that exits 128 or more, fails the job on 1-127, succeeds an elastic job when any pod
succeeds. One worker of ``faults-worker-1`` injects the fault once
(``tests/entrypoint/elastic_workers.py:fault``). The table shows, per pod, its exit codes in
order (``(deleted)``: the job's cleanup deleted it, and it then exited with that code), what
the operator did, how the job ended, and the seconds from the fault (the worker writes the time
when it injects it) to the end of ``run``, so torch's start-up is not counted.

Two rows run agents directly, as tests/entrypoint/test_launch_faults.py does: SIGTERM to a
pod waiting in the exit barrier (seconds from the signal to its exit), and a worker that
fills a 2 MiB tmpfs holding its log directory, then raises (needs ``unshare -Urm``).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORKERS = ROOT / "tests" / "entrypoint"
RUN = [sys.executable, "-m", "elastic_compile.compiler.cli", "run"]

JOB = """\
name: faults
image: local/bench:1
function: {{target: "elastic_workers:fault", args: ["{out}", {kind}, faults-worker-1, "{steps}"]}}
nnodes: {nnodes}
nproc_per_node: 1
start_method: fork
monitor_interval: 0.2
max_restarts: {restarts}
rdzv: {{join_timeout: 120, last_call_timeout: 2, conf: {{keep_alive_interval: "1"}}}}
{extra}"""


@dataclass(frozen=True)
class Case:
    name: str
    kind: str
    restarts: int
    extra: str = ""
    nnodes: str = "2"
    kill: str = ""  # run --kill (a lost node) instead of the worker's own fault


CASES = (
    Case("OOM kill of one worker, max_restarts 0", "sigkill", 0),
    Case("OOM kill of one worker, max_restarts 1", "sigkill", 1),
    Case("preemption (SIGTERM to a pod), max_restarts 0", "preempt", 0),
    Case("preemption (SIGTERM to a pod), max_restarts 1", "preempt", 1),
    Case("a worker's own exit (os._exit(3)), max_restarts 0", "exit3", 0),
    Case("a worker's own exit (os._exit(3)), max_restarts 1", "exit3", 1),
    Case("crash at teardown (SIGSEGV after destroy_process_group), max_restarts 0", "teardown", 0),
    Case("crash at teardown, max_restarts 1", "teardown", 1),
    Case("hang, hang_timeout 2, max_restarts 0", "hang", 0, "hang_timeout: 2\n"),
    Case("store host lost (--kill worker-0), nnodes 1:2", "hold", 3, nnodes='"1:2"', kill="faults-worker-0@/step 2 /"),
)


def run_case(case: Case) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out"
        out.mkdir()
        (out / "release").write_text("")  # "hold" never holds here
        steps = "40" if case.kill else "6"
        spec = Path(tmp) / "faults.yaml"
        spec.write_text(
            JOB.format(
                out=out, kind=case.kind, restarts=case.restarts, extra=case.extra, nnodes=case.nnodes, steps=steps
            )
        )
        args = [str(spec), "--workdir", str(WORKERS)] + (["--kill", case.kill] if case.kill else [])
        done = subprocess.run([*RUN, *args], capture_output=True, text=True, timeout=900, check=False)
        ended = time.time()
        fault = out / "fault-done"
        fault_at = float(fault.read_text()) if fault.exists() and fault.read_text() else None
    events = done.stderr
    codes = {pod: _exits(events, pod) for pod in ("faults-worker-0", "faults-worker-1")}
    operator = "; ".join(dict.fromkeys(_operator(events))) or "nothing"  # in order, each once
    summary = next((line for line in events.splitlines() if line.startswith("elastic-compile run: job faults ")), "")
    phase = summary.split(" ")[4] if summary else "?"
    lost_at = _lost_time(events, summary)  # --kill: the fault is run's own, timed by its clock
    took = f"{ended - fault_at:.1f}" if fault_at is not None else f"{lost_at:.1f}" if lost_at is not None else "?"
    return (
        f"| {case.name} | {codes['faults-worker-0']} | {codes['faults-worker-1']} | {operator} | "
        f"{phase}, exit {done.returncode} | {took} |"
    )


def _exits(events: str, pod: str) -> str:
    found = re.findall(rf"\] {pod} (exited with code (\d+)|: SIGKILL to every process|lost \(--kill\))", events)
    codes = []
    for whole, code in found:
        codes.append(code if code else "lost" if "lost" in whole else "killed")
    deleted = re.search(rf"deleting {pod} ", events) is not None
    text = ", ".join(codes) or "-"
    return f"{text} (deleted)" if deleted else text


def _operator(events: str) -> list[str]:
    said = []
    for line in events.splitlines():
        if "the operator recreates the pod" in line:
            said.append("recreates " + line.split("] ")[1].split(" ")[0].removeprefix("faults-"))
        elif "job failed:" in line:
            said.append("fails the job")
        elif "job succeeded:" in line:
            said.append("job succeeds")
    return said


def _clock(line: str) -> float | None:
    found = re.search(r"after ([0-9.]+)s:", line) or re.search(r"\[\s*([0-9.]+)s\]", line)
    return float(found.group(1)) if found else None


def _lost_time(events: str, summary: str) -> float | None:
    """Seconds from run's --kill to the job's end, by run's clock."""
    for line in events.splitlines():
        if "lost (--kill)" in line:
            start, end = _clock(line), _clock(summary)
            return end - start if start is not None and end is not None else None
    return None


# ---------------------------------------------------------------------------- direct agents


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _agent(out: Path, pod: str, ip: str, port: int, run_id: str) -> subprocess.Popen[str]:
    """One pod's agent: pod-a's worker holds on after its last step until ``release`` exists."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("PET_", "ELASTIC_LAUNCH_", "TORCHELASTIC_"))},
        "PYTHONPATH": os.pathsep.join([str(WORKERS), str(ROOT)]),
        "PET_NNODES": "2",
        "PET_RDZV_ENDPOINT": f"127.0.0.1:{port}",
        "PET_RDZV_ID": run_id,
        "ELASTIC_LAUNCH_POD_NAME": pod,
        "ELASTIC_LAUNCH_POD_IP": ip,
    }
    args = ["--monitor-interval", "0.2", "--start-method", "fork", "--function", "elastic_workers:fault"]
    return subprocess.Popen(
        [sys.executable, "-m", "elastic_compile.entrypoint", *args, "--", str(out), "hold", "pod-a"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def sigterm_in_barrier() -> str:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        port, run_id = _port(), f"bench-{uuid.uuid4().hex[:8]}"
        a = _agent(out, "pod-a", "127.0.0.1", port, run_id)
        while not _listening(port):
            time.sleep(0.1)
        b = _agent(out, "pod-b", "127.0.0.2", port, run_id)
        assert b.stderr is not None
        for line in b.stderr:
            if "waiting for the other nodes in the exit barrier" in line:
                break
        sent = time.monotonic()
        b.send_signal(signal.SIGTERM)
        code_b = b.wait(120)
        took = time.monotonic() - sent
        (out / "release").write_text("")
        code_a = a.wait(120)
    return (
        f"| SIGTERM to worker-1 waiting in the exit barrier (direct agents) | {code_a} | {code_b} | "
        f"job succeeds (any pod's 0) | Succeeded | {took:.1f} (SIGTERM to its exit) |"
    )


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def full_disk() -> str:
    with tempfile.TemporaryDirectory() as tmp:
        logs = Path(tmp) / "logs"
        logs.mkdir()
        script = f'mount -t tmpfs -o size=2m tmpfs "{logs}" && exec "$@"'
        command = ["unshare", "-Urm", "--propagation", "private", "sh", "-c", script, "sh", sys.executable]
        command += ["-m", "elastic_compile.entrypoint", "--monitor-interval", "0.2", "--start-method", "fork"]
        command += ["--log-dir", str(logs), "--function", "elastic_workers:fill_and_raise", "--", str(logs)]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(WORKERS), str(ROOT)])}
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300, check=False)
    return (
        f"| a worker fills its log directory's disk, then raises (one pod, direct) | {done.returncode} | - | "
        f"{'fails the job' if 0 < done.returncode < 128 else 'recreates worker-0'} | "
        f"{'Failed' if 0 < done.returncode < 128 else 'Running'}, exit {done.returncode} | - |"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-k", default="", help="run only the rows whose name contains this")
    opts = parser.parse_args()
    print("| fault | worker-0 exits | worker-1 exits | operator (ExitCode) | job | seconds, fault to end |")
    print("|---|---|---|---|---|---|")
    for case in CASES:
        if opts.k in case.name:
            print(run_case(case), flush=True)
    if opts.k in "SIGTERM to worker-1 waiting in the exit barrier":
        print(sigterm_in_barrier(), flush=True)
    if opts.k in "a worker fills its log directory's disk":
        print(full_disk(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
