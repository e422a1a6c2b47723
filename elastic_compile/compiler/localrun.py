"""``elastic-compile run``: run a PyTorchJob on this machine, one process per pod, as the cluster would.

::

    elastic-compile run SPEC_OR_MANIFEST [--nodes N] [--nproc-per-node N]
                        [--kill POD@SECONDS ...] [--timeout SECONDS] [--workdir DIR] [--dry-run]

The input is an ``elastic.yaml`` (compiled in-process by the real pipeline) or an already
compiled PyTorchJob (a file, or ``-`` for stdin; in a multi-document stream, such as
``kubectl kustomize`` output, the PyTorchJob is picked). Every pod gets the command and
environment the training operator would give it (:func:`kubeflow.pods`); only addresses
that exist in a cluster (the rendezvous host, pod IPs, the master address) become
127.0.0.1. The job then plays out by the operator's rules (kubeflow-pytorchjob.md §6):

* success: with a Master when it succeeds; elastic Worker-only when ANY worker succeeds;
  otherwise when every worker has; the others get :data:`EXIT_BARRIER_GRACE` seconds to
  finish, then are deleted as cleanPodPolicy says (locally: always stopped);
* a failed pod is restarted per restartPolicy (OnFailure/Always: in place, counted
  against backoffLimit; ExitCode: recreated for codes >= 128, a job failure for 1-127;
  Never: a job failure);
* ``--kill POD@SECONDS`` loses a node: SIGKILL to every process of the pod, which is not
  restarted (its node is gone, and the cluster has no spare one);
* Ctrl-C deletes every pod (SIGTERM, SIGKILL after the pod's grace period).

Exit code: 0 the job succeeded; the exit code of the pod whose failure failed the job
(signals as 128+N), or 1; 2 bad input; 124 ``--timeout`` or activeDeadlineSeconds; 130
Ctrl-C (143 SIGTERM). Pod output goes to stdout, one line at a time, as ``[pod] line``;
this command's own lines go to stderr as ``elastic-compile run: ...``. The README ("Run locally") has
the whole story.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO, Any, Final, NoReturn, TextIO

from elastic_compile import contract
from elastic_compile.compiler import crdcheck, kubeflow
from elastic_compile.compiler.errors import SpecError
from elastic_compile.compiler.loader import load_documents

PROG: Final = "elastic-compile run"

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1  # the job failed and no pod's exit code says more
EXIT_INPUT: Final = 2  # as the compiler: bad input, nothing ran
EXIT_TIMEOUT: Final = 124  # --timeout or activeDeadlineSeconds; timeout(1)'s code
EXIT_SIGNAL_BASE: Final = 128  # 130 Ctrl-C, 143 SIGTERM, and a pod killed by signal N

# Every process of a local pod carries this variable (inherited through fork and exec), so
# that stopping a pod reaches all of them, as the container runtime reaches every process
# of a container through its cgroup. torch starts script-mode workers in sessions of their
# own (torch-elastic.md §8): signalling the pod's process group alone would orphan them.
MARKER_ENV: Final = "ELASTIC_COMPILE_RUN_POD"

# The environment a container image would bring (PATH, HOME, locale, Python's), taken
# from this shell; nothing else of it leaks into the pods.
BASE_ENV: Final = (
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR",
    "VIRTUAL_ENV", "PYTHONPATH", "LD_LIBRARY_PATH",
)  # fmt: skip

# Kubernetes' default terminationGracePeriodSeconds.
DEFAULT_GRACE: Final = 30.0
# After the job succeeded, the pods still running get this long to exit on their own
# before cleanPodPolicy applies. An elastic pod exits 0 only after its exit barrier,
# which every agent passes together (torch-elastic.md §10), so the others are normally
# a few milliseconds behind; on a cluster the kubelet and the operator take seconds to
# notice the success anyway.
EXIT_BARRIER_GRACE: Final = 10.0
# The kubelet's CrashLoopBackOff for in-place restarts: 10 s doubling to 300 s. Locally
# a tenth of it, so that a crashing pod neither spins nor stalls a test.
CRASH_LOOP_FIRST: Final = 1.0
CRASH_LOOP_MAX: Final = 30.0
POLL_SECONDS: Final = 0.05
# The other pods start once the store host listens, or after this long regardless.
STORE_WAIT_MAX: Final = 60.0
READER_JOIN_SECONDS: Final = 5.0

RESTART_POLICIES: Final = ("OnFailure", "Always", "ExitCode", "Never")
CLEAN_POD_POLICIES: Final = ("All", "Running", "None")
_OPERATOR_ENV_SHOWN: Final = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK")


class RunError(Exception):
    """Bad input or options: one line, exit code 2, nothing started."""


# --------------------------------------------------------------------------- options


@dataclass(frozen=True)
class Options:
    """The parsed command line."""

    source: str
    nodes: int | None = None
    nproc_per_node: int | None = None
    kills: tuple[tuple[str, float], ...] = ()
    timeout: float | None = None
    workdir: Path | None = None
    dry_run: bool = False


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise RunError(message)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer (given: {text})")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0 (given: {text})")
    return value


def _kill(text: str) -> tuple[str, float]:
    pod, sep, at = text.rpartition("@")
    if not sep or not pod:
        raise argparse.ArgumentTypeError(f"expected POD@SECONDS, e.g. worker-1@20 (given: {text})")
    return pod, _seconds(at)


def parse_args(argv: Sequence[str]) -> Options:
    """Parse ``run``'s arguments; raises :class:`RunError` on bad usage."""
    p = _Parser(
        prog=PROG,
        description="Run a job on this machine, one process per pod, with the command and environment the "
        "Kubeflow training operator would give each pod, restarted and finished by the operator's rules.",
        epilog="Exit code: 0 the job succeeded; the failing pod's exit code (or 1) when it failed; 2 bad "
        "input; 124 --timeout or activeDeadlineSeconds; 130 Ctrl-C. See the README, 'Run locally'.",
    )
    p.add_argument("source", metavar="SPEC_OR_MANIFEST", help="elastic.yaml, or a compiled PyTorchJob; - for stdin")
    p.add_argument("--nodes", type=_positive_int, metavar="N", help="Worker pods (within elasticPolicy min..max)")
    p.add_argument(
        "--nproc-per-node",
        type=_positive_int,
        metavar="N",
        help="workers per pod: sets the manifest's nprocPerNode, which the operator injects as PET_NPROC_PER_NODE",
    )
    p.add_argument(
        "--kill",
        type=_kill,
        action="append",
        default=[],
        metavar="POD@SECONDS",
        help="lose a node: SIGKILL every process of POD (e.g. worker-1) SECONDS after the start; "
        "the pod is not restarted (repeatable)",
    )
    p.add_argument("--timeout", type=_seconds, metavar="SECONDS", help="stop every pod and exit 124 after this long")
    p.add_argument(
        "--workdir",
        type=Path,
        metavar="DIR",
        help="the pods' working directory (default: the file's directory; the current one for stdin)",
    )
    p.add_argument(
        "--dry-run", action="store_true", help="print each pod's command and environment as JSON; run nothing"
    )
    # Read by elastic-compile's main (tracebacks for internal errors); accepted here so it parses.
    p.add_argument("--debug", action="store_true", help="show tracebacks of internal errors")
    ns = p.parse_args(list(argv))
    return Options(
        source=ns.source,
        nodes=ns.nodes,
        nproc_per_node=ns.nproc_per_node,
        kills=tuple(ns.kill),
        timeout=ns.timeout,
        workdir=ns.workdir,
        dry_run=ns.dry_run,
    )


# --------------------------------------------------------------------------- input


@dataclass(frozen=True)
class Source:
    """The job to run and where it came from."""

    job: dict[str, Any]
    label: str  # file name for messages
    directory: Path  # the default working directory of the pods


def _pytorchjobs(raw: bytes) -> list[dict[str, Any]] | None:
    """The PyTorchJobs in a YAML stream, or None when it holds none (then it is a spec).

    Text that is not valid YAML is left to the compiler, whose loader reports it with a
    line and column.
    """
    try:
        # The loader's limits (aliases, depth, size, tags) hold for manifests too.
        docs = load_documents(raw, "<manifest>", max_depth=160)
    except (SpecError, UnicodeDecodeError):
        return None
    jobs = [d for d in docs if isinstance(d, dict) and d.get("kind") == "PyTorchJob"]
    return jobs or None


def load_source(source: str, stdin: IO[bytes] | None = None) -> Source:
    """Read ``source`` and return the PyTorchJob to run, compiling an elastic.yaml in-process.

    Raises ``SpecError`` for a spec the compiler rejects, :class:`RunError` otherwise.
    """
    from elastic_compile.compiler import lint
    from elastic_compile.compiler.pipeline import compile_text

    if source == "-":
        raw = (stdin or sys.stdin.buffer).read()
        label, directory = "<stdin>", Path.cwd()
    else:
        path = Path(source)
        try:
            raw = path.read_bytes()
        except OSError as e:
            raise RunError(f"{source}: {e.strerror or e}") from None
        label, directory = source, path.resolve().parent
    jobs = _pytorchjobs(raw)
    if jobs is None:
        compiled = compile_text(raw, label)
        lint.report([compiled], [], strict=False)  # the compiler's warnings, as `elastic-compile SPEC` prints them
        return Source(compiled.outputs[0].doc, label, directory)
    if len(jobs) > 1:
        names = ", ".join(str((j.get("metadata") or {}).get("name")) for j in jobs)
        raise RunError(f"{label}: {len(jobs)} PyTorchJobs ({names}); run takes one")
    return Source(jobs[0], label, directory)


def check_job(job: Mapping[str, Any], label: str) -> None:
    """Reject what the cluster would reject: the operator's webhook, and pod restart policies.

    Raises :class:`RunError` with every problem, one per line.
    """
    problems = crdcheck.webhook_errors(job)
    for rtype, replica in (job.get("spec", {}).get("pytorchReplicaSpecs") or {}).items():
        policy = replica.get("restartPolicy", "OnFailure") if isinstance(replica, dict) else None
        if policy not in RESTART_POLICIES:
            # The operator copies it onto the pod, and the API server refuses the pod.
            problems.append(
                f"spec.pytorchReplicaSpecs.{rtype}.restartPolicy: expected one of "
                f"{', '.join(RESTART_POLICIES)} (given: {policy})"
            )
    if problems:
        raise RunError("\n".join(f"{label}: {p}" for p in problems))


# --------------------------------------------------------------------------- fitting the job to this machine


def _pytorch_container(template: Mapping[str, Any]) -> Mapping[str, Any]:
    containers = (template.get("spec") or {}).get("containers") or []
    for c in containers:
        if c.get("name") == contract.TRAINING_CONTAINER:
            return dict(c)
    return dict(containers[0]) if containers else {}


def _replicas(job: Mapping[str, Any]) -> dict[str, Any]:
    return dict(job["spec"]["pytorchReplicaSpecs"])


def requested_gpus(job: Mapping[str, Any]) -> int:
    """GPUs per pod: the largest ``*gpu*`` resource (nvidia.com/gpu, amd.com/gpu, ...) of a training container."""
    most = 0
    for replica in _replicas(job).values():
        resources = _pytorch_container(replica.get("template") or {}).get("resources") or {}
        for section in ("limits", "requests"):
            for name, value in (resources.get(section) or {}).items():
                if "gpu" in str(name).lower():
                    try:
                        most = max(most, int(str(value)))
                    except ValueError:
                        continue
    return most


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


def pod_count(job: Mapping[str, Any]) -> int:
    return sum(int(r.get("replicas", 1)) for r in _replicas(job).values())


def fit_nproc(nproc: str, *, gpus_requested: int, gpus_per_pod: int, cpus: int, pods: int) -> tuple[str, str | None]:
    """The nprocPerNode to run locally and a note saying why it changed (None: unchanged).

    One process per GPU becomes one per GPU this machine gives each pod; with none, a CPU
    run. The keywords ``auto``/``cpu`` (and ``gpu`` without a GPU) would start one worker
    per CPU in every pod, as on a node of its own; here all pods share one machine, so
    each gets its share of the CPUs.
    """
    share = max(1, cpus // max(1, pods))
    if nproc.isdigit():
        n = int(nproc)
        if gpus_requested > 0 and gpus_per_pod < gpus_requested:
            scaled = max(1, n * gpus_per_pod // gpus_requested)
            where = f"{gpus_per_pod} each" if gpus_per_pod else "none, so this is a CPU run"
            note = (
                f"each pod requests {gpus_requested} GPU(s) and this machine gives {where}: "
                f"nprocPerNode {scaled} (was {n})"
            )
            return str(scaled), (note if scaled != n or gpus_per_pod == 0 else None)
        return nproc, None
    if nproc in ("auto", "gpu") and gpus_per_pod > 0:
        return nproc, None  # the launcher counts the devices each pod sees
    why = "without a GPU, " if nproc in ("auto", "gpu") else ""
    note = (
        f"nprocPerNode {nproc}: {why}one worker per CPU in every pod; the {pods} pod(s) share "
        f"this machine's {cpus} CPU(s): nprocPerNode {share}"
    )
    return str(share), note


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


def fit_job(
    manifest: Mapping[str, Any],
    opts: Options,
    *,
    gpus: Sequence[str],
    cpus: int,
    is_busy: Callable[[int], bool] = port_busy,
) -> tuple[dict[str, Any], list[str]]:
    """A copy of ``manifest`` changed to run here, and a note for every change.

    Every change is made to the manifest, before the pods are computed, so the operator's
    own rules turn it into the pods' environment: ``--nodes`` sets Worker.replicas,
    ``--nproc-per-node`` and GPU scaling set spec.nprocPerNode (hence PET_NPROC_PER_NODE),
    and a busy rendezvous port sets elasticPolicy.rdzvPort (hence PET_RDZV_ENDPOINT).
    """
    job: dict[str, Any] = copy.deepcopy(dict(manifest))
    spec = job["spec"]
    notes: list[str] = []
    replicas = spec["pytorchReplicaSpecs"]
    policy = spec.get("elasticPolicy")

    if opts.nodes is not None:
        if "Worker" not in replicas:
            raise RunError("--nodes: the job has no Worker replicas")
        old = int(replicas["Worker"].get("replicas", 1))
        if policy is not None:
            lo, hi = policy.get("minReplicas"), policy.get("maxReplicas")
            lo, hi = (lo if lo is not None else hi), (hi if hi is not None else lo)
            if lo is None:  # the operator's default (§2), from the manifest as written
                lo = hi = old
            if not int(lo) <= opts.nodes <= int(hi):
                raise RunError(f"--nodes {opts.nodes}: outside the job's elasticPolicy range {lo}..{hi}")
            # Written out so that PET_NNODES stays what the manifest gives.
            policy["minReplicas"], policy["maxReplicas"] = int(lo), int(hi)
        replicas["Worker"]["replicas"] = opts.nodes
        if opts.nodes != old:
            notes.append(f"--nodes {opts.nodes}: Worker.replicas {opts.nodes} (was {old})")

    nproc = str(spec.get("nprocPerNode") or (policy or {}).get("nProcPerNode") or "auto")
    pods = pod_count(job)
    wanted = requested_gpus(job)
    per_pod = min(wanted, len(gpus) // max(1, pods))
    if opts.nproc_per_node is not None:
        new = str(opts.nproc_per_node)
        note: str | None = f"--nproc-per-node {new}: nprocPerNode {new} (was {nproc})"
    else:
        new, note = fit_nproc(nproc, gpus_requested=wanted, gpus_per_pod=per_pod, cpus=cpus, pods=pods)
    if note:
        notes.append(note)
    if new != nproc or (policy or {}).get("nProcPerNode") is not None:
        spec["nprocPerNode"] = new
        if policy is not None:
            policy.pop("nProcPerNode", None)  # the deprecated field would be Forbidden beside it

    if policy is not None and (policy.get("rdzvBackend") or "c10d") == "c10d":
        first = kubeflow.pods(job, local=True)[0]
        endpoint = first.env.get(contract.PET_RDZV_ENDPOINT, "")
        port = int(endpoint.rpartition(":")[2] or contract.OPERATOR_DEFAULT_PORT)
        if is_busy(port):
            new_port = free_port()
            policy["rdzvPort"] = new_port
            notes.append(
                f"rendezvous port {port} is in use on this machine; using {new_port} "
                "(elasticPolicy.rdzvPort; on the cluster each pod has its own IP)"
            )
    return job, notes


# --------------------------------------------------------------------------- pods


@dataclass
class LocalPod:
    """One pod's local process and the operator's view of it."""

    pod: kubeflow.Pod
    argv: list[str]  # what is executed here
    env: dict[str, str]
    grace: float
    marker: str
    proc: subprocess.Popen[bytes] | None = None
    reader: threading.Thread | None = None
    state: str = "Pending"  # Pending, Running, Succeeded, Failed, Lost, Deleted
    start_at: float | None = 0.0  # seconds after the start; None: nothing scheduled
    started_at: float = 0.0
    restarts: int = 0  # the kubelet's in-place restarts (restartCount): OnFailure, Always
    recreated: int = 0  # deleted and created again by the operator: ExitCode
    exit_code: int | None = None
    starts: int = 0

    @property
    def name(self) -> str:
        return self.pod.name


def local_argv(argv: Sequence[str]) -> list[str]:
    """The pod's command as run here: ``elastic-launch`` and ``python`` are this interpreter's.

    The image would have its own Python on PATH; locally that is the one running this
    command, with elastic-compile (and torch) installed.
    """
    head = Path(argv[0]).name
    if head == contract.LAUNCHER:
        return [sys.executable, "-m", "elastic_compile.entrypoint", *argv[1:]]
    if head in ("python", "python3"):
        return [sys.executable, *argv[1:]]
    return list(argv)


def base_env(environ: Mapping[str, str]) -> dict[str, str]:
    """What the image would bring: :data:`BASE_ENV` from ``environ``, this Python first on PATH."""
    env = {k: environ[k] for k in BASE_ENV if k in environ}
    bindir = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join([bindir, *(p for p in env.get("PATH", os.defpath).split(os.pathsep) if p != bindir)])
    return env


def _describe_ref(container: Mapping[str, Any], name: str) -> str:
    for var in container.get("env") or []:
        if var.get("name") == name:
            source = var.get("valueFrom") or {}
            for kind, ref in source.items():
                if isinstance(ref, dict):
                    target = "/".join(str(ref[k]) for k in ("name", "key", "fieldPath", "resource") if k in ref)
                    return f"{kind} {target}".strip()
            return "valueFrom"
    return "valueFrom"


def build_pods(
    job: Mapping[str, Any], *, environ: Mapping[str, str], gpus: Sequence[str], token: str
) -> tuple[list[LocalPod], list[str]]:
    """The local pods of ``job`` (operator env + container env + what this machine stands in for)."""
    notes: list[str] = []
    computed = kubeflow.pods(job, local=True, lookup=environ)
    if not computed:
        raise RunError("the job has no pods")
    replicas = _replicas(job)
    base = base_env(environ)
    per_pod = min(requested_gpus(job), len(gpus) // len(computed))
    out: list[LocalPod] = []
    for i, pod in enumerate(computed):
        replica = replicas[pod.replica_type]
        template = replica.get("template") or {}
        pod_spec = template.get("spec") or {}
        container = _pytorch_container(template)
        if not container.get("command"):
            raise RunError(
                f"{pod.name}: the pytorch container has no command, so the image's ENTRYPOINT would run; "
                "run cannot know it (set command in the manifest)"
            )
        for name in pod.looked_up:
            notes.append(f"{name} ({_describe_ref(container, name)}): taken from this shell's environment")
        for name in pod.unresolved:
            notes.append(
                f"warning: {name} ({_describe_ref(container, name)}) needs the cluster and is not set in this "
                "shell: skipped (export it to pass a value)"
            )
        for source in container.get("envFrom") or []:
            kind = next((k for k in source if k.endswith("Ref")), "envFrom")
            ref = source.get(kind) or {}
            notes.append(f"warning: envFrom {kind} {ref.get('name', '')} needs the cluster: skipped")
        for other in pod_spec.get("containers") or []:
            if other.get("name") != container.get("name"):
                notes.append(f"sidecar container {other.get('name')} is not run locally")
        for init in pod_spec.get("initContainers") or []:
            notes.append(f"init container {init.get('name')} is not run locally")
        if container.get("workingDir"):
            notes.append(f"workingDir {container['workingDir']} is the image's; the pods run in --workdir")
        env = dict(base)
        env["HOSTNAME"] = pod.name  # the kubelet sets it to the pod name
        env.update(pod.env)
        if gpus:
            # The device plugin's job: each pod sees only its own devices (none when it asks for none).
            env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus[i * per_pod : (i + 1) * per_pod])
        env[MARKER_ENV] = f"{token}/{pod.name}"
        grace = pod_spec.get("terminationGracePeriodSeconds")
        out.append(
            LocalPod(
                pod=pod,
                argv=local_argv(pod.argv),
                env=env,
                grace=float(grace) if grace is not None else DEFAULT_GRACE,
                marker=env[MARKER_ENV],
            )
        )
    return out, list(dict.fromkeys(notes))  # once per note, not once per pod


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


def container_exit_code(returncode: int) -> int:
    """A container's exit code: a process killed by signal N reports 128 + N."""
    return EXIT_SIGNAL_BASE - returncode if returncode < 0 else returncode


# --------------------------------------------------------------------------- output


class Printer:
    """Pod lines to stdout as ``[pod] line``, this command's lines to stderr; whole lines only."""

    def __init__(self, out: TextIO, err: TextIO) -> None:
        self._out, self._err = out, err
        self.clock: Callable[[], float] = lambda: 0.0  # the job's, once it exists
        self._lock = threading.Lock()
        self._broken = False

    def pod_line(self, pod: str, text: str) -> None:
        with self._lock:
            if self._broken:
                return  # keep draining the pod's pipe, or the pod blocks on a full one
            try:
                self._out.write(f"[{pod}] {text}\n")
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
                self._err.write(line + "\n")
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


# --------------------------------------------------------------------------- the job


@dataclass(frozen=True)
class Rules:
    """The operator's rules for this job (kubeflow-pytorchjob.md §2, §6)."""

    name: str
    elastic: bool
    has_master: bool
    min_nodes: int
    backoff_limit: int | None
    clean_pod_policy: str
    active_deadline: float | None

    @classmethod
    def of(cls, job: Mapping[str, Any]) -> Rules:
        spec = job["spec"]
        replicas = spec["pytorchReplicaSpecs"]
        run_policy = spec.get("runPolicy") or {}
        policy = spec.get("elasticPolicy")
        workers = int((replicas.get("Worker") or {}).get("replicas", 1))
        lo = workers
        if policy is not None:
            lo = next(
                (int(v) for v in (policy.get("minReplicas"), policy.get("maxReplicas")) if v is not None), workers
            )
        deadline = run_policy.get("activeDeadlineSeconds")
        return cls(
            name=str(job["metadata"]["name"]),
            elastic=policy is not None,
            has_master="Master" in replicas,
            min_nodes=lo,
            backoff_limit=None if run_policy.get("backoffLimit") is None else int(run_policy["backoffLimit"]),
            # The operator's default is None (§2); the compiler writes Running.
            clean_pod_policy=str(run_policy.get("cleanPodPolicy") or "None"),
            active_deadline=None if deadline is None else float(deadline),
        )

    def describe(self) -> str:
        """The rules in one phrase, for the line printed before the start."""
        if self.has_master:
            success = "succeeds when the Master does"
        elif self.elastic:
            success = "elastic: succeeds when any worker does"
        else:
            success = "succeeds when every worker does"
        limit = "unset" if self.backoff_limit is None else str(self.backoff_limit)
        return f"{success}; cleanPodPolicy {self.clean_pod_policy}; backoffLimit {limit}"

    def past_backoff_limit(self, restarts: int) -> bool:
        """core/job.go PastBackoffLimit: restarts >= limit, or any restart when the limit is 0."""
        if self.backoff_limit is None:
            return False
        return restarts > 0 if self.backoff_limit == 0 else restarts >= self.backoff_limit


@dataclass(frozen=True)
class Outcome:
    """How the job ended."""

    phase: str  # Succeeded, Failed, Interrupted
    exit_code: int
    reason: str


class Job:
    """Runs the local pods and plays the operator: restarts, success, failure, cleanup."""

    def __init__(
        self,
        pods: list[LocalPod],
        rules: Rules,
        opts: Options,
        workdir: Path,
        printer: Printer,
        *,
        store: tuple[LocalPod, int] | None = None,
    ) -> None:
        self.pods = pods
        self.rules = rules
        self.opts = opts
        self.workdir = workdir
        self.printer = printer
        self.t0 = time.monotonic()
        printer.clock = self.elapsed
        self.kills = sorted(((at, self._find(name)) for name, at in opts.kills), key=lambda k: k[0])
        self.signal: int | None = None  # the first SIGINT/SIGTERM received
        self.hurry = False  # a second one, or one while pods are being deleted: SIGKILL now
        self.cleaning = False
        # On a cluster only the pod the endpoint names (worker-0) can host the c10d store:
        # the others reach it by its DNS name, which resolves once that pod runs. Here every
        # pod is 127.0.0.1 and the first to bind would host, so the others wait until the
        # store host listens; losing another pod then never takes the store with it.
        self.store = store
        if store is not None:
            for pod in pods:
                if pod is not store[0]:
                    pod.start_at = None

    def _find(self, name: str) -> LocalPod:
        for pod in self.pods:
            if name in (pod.name, pod.name.removeprefix(self.rules.name + "-")):
                return pod
        known = ", ".join(p.name for p in self.pods)
        raise RunError(f"--kill {name}: no such pod (pods: {known})")

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def on_signal(self, signum: int, _frame: FrameType | None) -> None:
        """SIGINT/SIGTERM handler: the first deletes the job, a second stops waiting for grace periods."""
        if self.signal is None and not self.cleaning:
            self.signal = signum
        else:
            self.hurry = True

    # ------------------------------------------------------------------ pods

    def _start(self, pod: LocalPod) -> None:
        first = pod.starts == 0
        pod.proc = subprocess.Popen(
            pod.argv,
            cwd=self.workdir,
            env=pod.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a pod of its own: Ctrl-C in the terminal reaches only `run`
        )
        pod.state, pod.start_at, pod.started_at, pod.exit_code = "Running", None, self.elapsed(), None
        pod.starts += 1
        assert pod.proc.stdout is not None  # Popen with stdout=PIPE always has it
        pod.reader = threading.Thread(
            target=_read_lines, args=(pod.proc.stdout, pod.name, self.printer), name=f"log-{pod.name}", daemon=True
        )
        pod.reader.start()
        how = "started" if first else "started again"
        self.printer.event(f"{pod.name} {how} (pid {pod.proc.pid}): {shlex.join(pod.pod.argv)}")
        if first:
            shown = [
                f"{k}={v}"
                for k, v in pod.pod.env.items()
                if k.startswith(contract.OPERATOR_ENV_PREFIX) or k in _OPERATOR_ENV_SHOWN
            ]
            self.printer.event(f"{pod.name} operator env: {' '.join(shown)}")

    def _finish_process(self, pod: LocalPod) -> int:
        """Reap the pod's process, kill what is left of it, drain its output; its container exit code."""
        assert pod.proc is not None  # only called for started pods
        code = container_exit_code(pod.proc.wait())
        # When a container's main process ends, the rest of the container goes with it.
        kill_pod_processes(pod)
        if pod.reader is not None:
            pod.reader.join(READER_JOIN_SECONDS)
        pod.exit_code = code
        return code

    def _kill(self, pod: LocalPod) -> None:
        if pod.state == "Running":
            kill_pod_processes(pod)
            code = self._finish_process(pod)
            self.printer.event(
                f"{pod.name} lost (--kill): SIGKILL to every process of the pod (exit {code}); "
                "not restarted, as if its node had vanished"
            )
        elif pod.state == "Pending":
            self.printer.event(f"{pod.name} lost (--kill) while not running; it will not start")
        else:
            self.printer.event(f"--kill {pod.name}: the pod already {pod.state.lower()}; nothing to kill")
            return
        pod.state, pod.start_at = "Lost", None

    def _on_exit(self, pod: LocalPod) -> Outcome | None:
        """Apply the restart policy to a pod whose process ended; an Outcome when that ends the job."""
        code = self._finish_process(pod)
        ran = self.elapsed() - pod.started_at
        policy = pod.pod.restart_policy
        self.printer.event(f"{pod.name} exited with code {code} after {ran:.1f}s")
        if code == 0 and policy != "Always":
            pod.state = "Succeeded"
            return self._success_check(pod)
        if policy in ("OnFailure", "Always"):
            # The kubelet restarts the container in place; the operator counts it (§6).
            pod.restarts += 1
            total = sum(p.restarts for p in self.pods)
            if self.rules.past_backoff_limit(total):
                pod.state = "Failed"
                return Outcome(
                    "Failed",
                    code or EXIT_FAILED,
                    f"{pod.name} exited {code}; backoffLimit {self.rules.backoff_limit} reached: the kubelet's "
                    f"restart count is now {total}, and the operator fails the job once restarts >= backoffLimit "
                    "(it deletes the restarted container at once; run does not start it)",
                )
            delay = min(CRASH_LOOP_MAX, CRASH_LOOP_FIRST * 2 ** (pod.restarts - 1))
            why = "Always restarts even a success" if code == 0 else f"restartPolicy {policy}"
            self.printer.event(f"{pod.name} restarts in place in {delay:g}s ({why}; restart {pod.restarts})")
            pod.state, pod.start_at = "Pending", self.elapsed() + delay
            return None
        if policy == "ExitCode" and code >= EXIT_SIGNAL_BASE:
            # Retryable: the operator deletes the pod and creates it again; the new pod's
            # restartCount is 0, so backoffLimit never counts these (#2045).
            pod.recreated += 1
            self.printer.event(f"{pod.name} exit code {code} is retryable (>= 128): the operator recreates the pod")
            pod.state, pod.start_at = "Pending", self.elapsed()
            return None
        pod.state = "Failed"
        if policy == "ExitCode":
            why = f"exit code {code} is permanent under restartPolicy ExitCode (1-127)"
        else:
            why = f"restartPolicy {policy}: a failed pod fails the job"
        return Outcome("Failed", code, f"{pod.name} failed: {why}")

    def _success_check(self, pod: LocalPod) -> Outcome | None:
        workers = [p for p in self.pods if p.pod.replica_type == "Worker"]
        if self.rules.has_master:
            if pod.pod.replica_type == "Master":
                return Outcome("Succeeded", EXIT_OK, f"{pod.name} (the Master) succeeded")
            return None
        if self.rules.elastic:
            return Outcome(
                "Succeeded", EXIT_OK, f"{pod.name} succeeded (elastic job: any worker's success is the job's)"
            )
        if all(p.state == "Succeeded" for p in workers):
            return Outcome("Succeeded", EXIT_OK, f"all {len(workers)} worker(s) succeeded")
        return None

    def _lost_check(self) -> Outcome | None:
        """A lost pod that the job cannot do without; the cluster would recreate it elsewhere."""
        lost = [p for p in self.pods if p.state == "Lost"]
        if not lost:
            return None
        code = lost[-1].exit_code or EXIT_SIGNAL_BASE + signal.SIGKILL
        if self.rules.has_master and any(p.pod.replica_type == "Master" for p in lost):
            return Outcome("Failed", code, "the Master was lost and the job needs it to succeed")
        if not self.rules.elastic:
            return Outcome("Failed", code, f"{lost[-1].name} was lost and a fixed-size job needs every worker")
        alive = [p for p in self.pods if p.pod.replica_type == "Worker" and p.state not in ("Lost", "Failed")]
        if len(alive) < self.rules.min_nodes:
            return Outcome(
                "Failed",
                code,
                f"{len(alive)} worker(s) left, fewer than elasticPolicy's minimum {self.rules.min_nodes} "
                "(on a cluster the operator would recreate the lost pod on another node)",
            )
        return None

    # ------------------------------------------------------------------ the loop

    def run(self) -> Outcome:
        """Run the job to its end; every pod is stopped when this returns."""
        try:
            outcome = self._loop()
        except BaseException:
            self.hurry = True  # a bug in run itself: leave nothing behind, and fast
            self._delete([p for p in self.pods if p.state in ("Running", "Pending")], "run failed")
            raise
        self.cleaning = True
        self._cleanup(outcome)
        return outcome

    def _loop(self) -> Outcome:
        while True:
            now = self.elapsed()
            if self.signal is not None:
                name = signal.Signals(self.signal).name
                return Outcome("Interrupted", EXIT_SIGNAL_BASE + self.signal, f"{name}: every pod deleted")
            if self.opts.timeout is not None and now >= self.opts.timeout:
                # Not a verdict on the job: as if the user deleted it.
                return Outcome(
                    "Interrupted", EXIT_TIMEOUT, f"--timeout {self.opts.timeout:g}s reached: every pod deleted"
                )
            if self.rules.active_deadline is not None and now >= self.rules.active_deadline:
                return Outcome("Failed", EXIT_TIMEOUT, f"activeDeadlineSeconds {self.rules.active_deadline:g} reached")
            while self.kills and self.kills[0][0] <= now:
                _at, pod = self.kills.pop(0)
                self._kill(pod)
                lost = self._lost_check()
                if lost is not None:
                    return lost
            if self.store is not None:
                self._open_store_gate(now)
            for pod in self.pods:
                if pod.start_at is not None and pod.start_at <= now and pod.state == "Pending":
                    self._start(pod)
            for pod in self.pods:
                if pod.state == "Running" and pod.proc is not None and pod.proc.poll() is not None:
                    outcome = self._on_exit(pod)
                    if outcome is not None:
                        return outcome
            if not any(p.state in ("Running", "Pending") for p in self.pods):
                return Outcome("Failed", EXIT_FAILED, "no pod left running and the success rule was not met")
            time.sleep(POLL_SECONDS)

    def _open_store_gate(self, now: float) -> None:
        assert self.store is not None
        host, port = self.store
        if host.state == "Pending" or (host.state == "Running" and not port_busy(port) and now < STORE_WAIT_MAX):
            return
        if host.state == "Running" and now < STORE_WAIT_MAX:
            why = f"{host.name} hosts the rendezvous store on port {port}"
        elif host.state == "Running":
            why = f"{host.name} does not listen on port {port} after {STORE_WAIT_MAX:g}s"
        else:
            why = f"{host.name} is {host.state.lower()}"
        waiting = [p for p in self.pods if p.state == "Pending" and p.start_at is None and p is not host]
        if waiting:
            self.printer.event(f"{why}: starting {', '.join(p.name for p in waiting)}")
        for pod in waiting:
            pod.start_at = now
        self.store = None

    def _cleanup(self, outcome: Outcome) -> None:
        verb = {"Succeeded": "succeeded", "Failed": "failed", "Interrupted": "interrupted"}[outcome.phase]
        self.printer.event(f"job {verb}: {outcome.reason}")
        active = [p for p in self.pods if p.state in ("Running", "Pending")]
        if outcome.phase == "Succeeded" and active:
            self._settle(active, EXIT_BARRIER_GRACE)
            active = [p for p in self.pods if p.state in ("Running", "Pending")]
        if not active:
            return
        policy = self.rules.clean_pod_policy
        if outcome.phase == "Interrupted":
            why = "the job is deleted"
        elif policy in ("All", "Running"):
            why = f"cleanPodPolicy {policy}"
        else:
            why = f"cleanPodPolicy {policy} would leave it running on the cluster; run leaves no process behind"
        self._delete(active, why)

    def _settle(self, pods: list[LocalPod], seconds: float) -> None:
        """Let ``pods`` end on their own for up to ``seconds`` (a pending restart is not started)."""
        for pod in pods:
            if pod.state == "Pending":
                pod.state, pod.start_at = "Deleted", None
        deadline = self.elapsed() + seconds
        while self.elapsed() < deadline and not self.hurry:
            running = [p for p in pods if p.state == "Running"]
            if not running:
                return
            for pod in running:
                if pod.proc is not None and pod.proc.poll() is not None:
                    code = self._finish_process(pod)
                    pod.state = "Succeeded" if code == 0 else "Failed"
                    self.printer.event(f"{pod.name} exited with code {code} after the job ended")
            time.sleep(POLL_SECONDS)

    def _delete(self, pods: list[LocalPod], why: str) -> None:
        """Delete pods as Kubernetes does: SIGTERM, then SIGKILL after the pod's grace period."""
        running = []
        for pod in pods:
            if pod.state != "Running" or pod.proc is None:
                pod.state, pod.start_at = "Deleted", None
                continue
            self.printer.event(f"deleting {pod.name} ({why}): SIGTERM, SIGKILL after {pod.grace:g}s")
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pod.proc.pid, signal.SIGTERM)
            running.append((pod, self.elapsed() + pod.grace))
        while running:
            still = []
            for pod, deadline in running:
                assert pod.proc is not None  # only running pods are listed
                if pod.proc.poll() is not None:
                    code = self._finish_process(pod)
                    self.printer.event(f"{pod.name} exited with code {code}")
                elif self.hurry or self.elapsed() >= deadline:
                    self.printer.event(f"{pod.name}: SIGKILL to every process of the pod")
                    kill_pod_processes(pod)
                    self._finish_process(pod)
                else:
                    still.append((pod, deadline))
                    continue
                pod.state = "Deleted"
            running = still
            time.sleep(POLL_SECONDS)
        for pod in pods:  # nothing of any pod may outlive run, whatever state it ended in
            kill_pod_processes(pod)


# --------------------------------------------------------------------------- main


def store_host(job: Mapping[str, Any], pods: Sequence[LocalPod]) -> tuple[LocalPod, int] | None:
    """The pod that hosts the c10d store on a cluster (the endpoint's host) and the port, if any."""
    policy = job["spec"].get("elasticPolicy")
    if policy is None or (policy.get("rdzvBackend") or "c10d") != "c10d":
        return None
    host = policy.get("rdzvHost") or f"{job['metadata']['name']}-worker-0"
    for pod in pods:
        endpoint = pod.pod.env.get(contract.PET_RDZV_ENDPOINT, "")
        if pod.name == host and endpoint:
            return pod, int(endpoint.rpartition(":")[2])
    return None


def summary(job: Job, outcome: Outcome) -> str:
    """The one-line job summary printed last."""
    states = ", ".join(f"{p.name} {p.state}" for p in job.pods)
    restarts = sum(p.restarts + p.recreated for p in job.pods)
    return (
        f"job {job.rules.name} {outcome.phase} after {job.elapsed():.1f}s: {len(job.pods)} pod(s) ({states}), "
        f"{restarts} restart(s); exit {outcome.exit_code}"
    )


def dry_run_view(pods: Sequence[LocalPod], workdir: Path, notes: Sequence[str]) -> dict[str, Any]:
    """What ``--dry-run`` prints: each pod's command and environment (without the per-run marker)."""
    return {
        "workdir": str(workdir),
        "notes": list(notes),
        "pods": [
            {
                "name": p.name,
                "restartPolicy": p.pod.restart_policy,
                "terminationGracePeriodSeconds": p.grace,
                "command": list(p.pod.argv),
                "local_command": p.argv,
                "env": {k: v for k, v in p.env.items() if k != MARKER_ENV},
            }
            for p in pods
        ],
    }


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


def main(argv: Sequence[str], *, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    """``elastic-compile run ARGV``; returns the exit code (see the module docstring)."""
    from elastic_compile.compiler.errors import CompileError, SpecError

    out = stdout or sys.stdout
    err = stderr or sys.stderr
    printer = Printer(out, err)
    try:
        opts = parse_args(argv)
        source = load_source(opts.source)
        check_job(source.job, source.label)
        gpus = local_gpus()
        job_doc, notes = fit_job(source.job, opts, gpus=gpus, cpus=local_cpus())
        workdir = (opts.workdir or source.directory).resolve()
        if not workdir.is_dir():
            raise RunError(f"--workdir {workdir}: not a directory")
        token = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        pods, pod_notes = build_pods(job_doc, environ=os.environ, gpus=gpus, token=token)
        rules = Rules.of(job_doc)
        if rules.clean_pod_policy not in CLEAN_POD_POLICIES:
            raise RunError(f"runPolicy.cleanPodPolicy: expected one of {', '.join(CLEAN_POD_POLICIES)}")
        job = Job(pods, rules, opts, workdir, printer, store=store_host(job_doc, pods))  # checks the --kill pod names
    except SpecError as e:
        for problem in e.problems:
            print(str(problem) if problem.path != "usage" else f"{PROG}: error: {problem.message}", file=err)
        return EXIT_INPUT
    except (RunError, CompileError, kubeflow.ManifestError) as e:
        for line in str(e).splitlines():
            print(f"{PROG}: error: {line}", file=err)
        return EXIT_INPUT
    except SystemExit as e:  # --help
        return e.code if isinstance(e.code, int) else EXIT_OK

    for note in [*notes, *pod_notes]:
        printer.note(note)
    if opts.dry_run:
        out.write(json.dumps(dry_run_view(pods, workdir, [*notes, *pod_notes]), indent=2) + "\n")
        return EXIT_OK
    if (job_doc["spec"].get("runPolicy") or {}).get("suspend"):
        printer.note("runPolicy.suspend is true: the cluster would create no pods until resumed; run starts them")
    printer.note(f"job {rules.name}: {len(pods)} pod(s) in {workdir}; {rules.describe()}")
    job.t0 = time.monotonic()
    with _Signals(job.on_signal):
        outcome = job.run()
    printer.note(summary(job, outcome))
    return outcome.exit_code
