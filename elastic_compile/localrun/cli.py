"""``elastic-compile run``: run a PyTorchJob or a TrainJob on this machine, one process per pod, as the cluster would.

::

    elastic-compile run SPEC_OR_MANIFEST [--nodes N] [--nproc-per-node N] [--env NAME=VALUE ...] [--host-network]
                        [--kill POD@SECONDS|POD@/TEXT/ ...] [--timeout SECONDS] [--workdir DIR]
                        [--python PYTHON] [--dry-run]

The input is an ``elastic.yaml`` (compiled in-process by the real pipeline, for its own
``target``) or an already compiled PyTorchJob or TrainJob (a file, or ``-`` for stdin; in
a multi-document stream, such as ``kubectl kustomize`` output, the job is picked, with our
TrainingRuntime when there is one). Every pod gets the command and environment its engine
would give it (:func:`kubeflow.pods`, :func:`trainer.pods`); only addresses that exist in a
cluster (the rendezvous host, pod IPs, the master address) become 127.0.0.1. ConfigMap
volumes in the input (``launcher: bundled``'s) are mounted read-only; ``--python`` stands in
for the image's interpreter (:func:`~.process.use_image_python`). A TrainJob
plays out by Trainer v2's and JobSet's rules (:mod:`.trainer`); a PyTorchJob by the
operator's (training-operator v1.9.4: pkg/controller.v1/pytorch/pytorchjob_controller.go,
pkg/controller.v1/common/pod.go, pkg/core/job.go):

* success: with a Master when it succeeds; elastic Worker-only when ANY worker succeeds;
  otherwise when every worker has; the others get :data:`EXIT_BARRIER_GRACE` seconds to
  finish, then are deleted as cleanPodPolicy says (locally: always stopped);
* a failed pod is restarted per restartPolicy (OnFailure/Always: in place, counted
  against backoffLimit; ExitCode: recreated for codes >= 128, a job failure for 1-127;
  Never: a job failure);
* ``--kill POD@SECONDS`` (or ``POD@/TEXT/``: once any pod prints a line containing TEXT)
  loses a node: SIGKILL to every process of the pod, which is not restarted (its node is
  gone, and the cluster has no spare one);
* Ctrl-C deletes every pod (SIGTERM, SIGKILL after the pod's grace period).

Exit code: 0 the job succeeded; the exit code of the pod whose failure failed the job
(signals as 128+N), or 1; 2 bad input; 124 ``--timeout`` or activeDeadlineSeconds; 130
Ctrl-C (143 SIGTERM). Pod output goes to stdout, one line at a time, as ``[pod] line``;
this command's own lines go to stderr as ``elastic-compile run: ...``. docs/run.md has
the whole story.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NoReturn, TextIO

from elastic_compile.compiler.diagnostics import FORMATS
from elastic_compile.core.errors import SpecError, printable
from elastic_compile.core.loader import Loaded, load_stream
from elastic_compile.core.source import MAX_BYTES, read_input
from elastic_compile.localrun import kubeflow
from elastic_compile.localrun.engine import Engine, emulate_read_only_root, read_only_scratch, working_directory
from elastic_compile.localrun.job import Job, summary
from elastic_compile.localrun.kubeflow import PyTorchJobEngine
from elastic_compile.localrun.netns import LoopbackNetwork, NetworkError
from elastic_compile.localrun.process import (
    EXIT_INPUT,
    EXIT_OK,
    MARKER_ENV,
    PROG,
    LocalPod,
    Options,
    Printer,
    RunError,
    _Signals,
    local_cpus,
    local_gpus,
    mount_config_maps,
    port_busy,
    private_tmpdirs,
    use_image_python,
)
from elastic_compile.localrun.trainer import TrainJobEngine

if TYPE_CHECKING:
    from elastic_compile.compiler.diagnostics import Reporter

# --------------------------------------------------------------------------- options


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        from elastic_compile.core.errors import Problem

        # A usage problem, as the compiler's parser reports one (code "usage" in --message-format json).
        raise SpecError([Problem("elastic-compile", 0, 0, "usage", message)])


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


def _env_pair(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE (given: {text})")
    return name, value


def _kill(text: str) -> tuple[str, float | str]:
    """``POD@SECONDS``, or ``POD@/TEXT/``: lose POD once any pod prints a line containing TEXT."""
    pod, sep, line = text.partition("@/")
    if sep and pod and len(line) > 1 and line.endswith("/"):
        return pod, line[:-1]
    pod, sep, at = text.rpartition("@")
    if not sep or not pod:
        raise argparse.ArgumentTypeError(f"expected POD@SECONDS or POD@/TEXT/, e.g. worker-1@20 (given: {text})")
    return pod, _seconds(at)


def build_parser() -> argparse.ArgumentParser:
    """``run``'s argument parser (shell completion reads it too)."""
    p = _Parser(
        prog=PROG,
        description="Run a job on this machine, one process per pod, with the command and environment the "
        "Kubeflow training operator (PyTorchJob) or Trainer v2 and JobSet (TrainJob) would give each pod, "
        "restarted and finished by their rules.",
        epilog="Exit code: 0 the job succeeded; the failing pod's exit code (or 1) when it failed; 2 bad "
        "input; 124 --timeout or activeDeadlineSeconds; 130 Ctrl-C. See docs/run.md.",
    )
    p.add_argument(
        "source",
        metavar="SPEC_OR_MANIFEST",
        help="elastic.yaml, or a compiled PyTorchJob or TrainJob (with our TrainingRuntime); - for stdin",
    )
    p.add_argument(
        "--nodes",
        type=_positive_int,
        metavar="N",
        help="pods: a PyTorchJob's Worker replicas (within elasticPolicy min..max), a TrainJob's numNodes",
    )
    p.add_argument(
        "--nproc-per-node",
        type=_positive_int,
        metavar="N",
        help="workers per pod: sets the manifest's nprocPerNode (a TrainJob's numProcPerNode), which the "
        "operator (Trainer) injects as PET_NPROC_PER_NODE",
    )
    p.add_argument(
        "--kill",
        type=_kill,
        action="append",
        default=[],
        metavar="POD@SECONDS|POD@/TEXT/",
        help="lose a node: SIGKILL every process of POD (e.g. worker-1) SECONDS after the start, or as soon as "
        "any pod prints a line containing TEXT; the pod is not restarted (repeatable)",
    )
    p.add_argument(
        "--replace",
        type=_kill,
        action="append",
        default=[],
        metavar="POD@SECONDS|POD@/TEXT/",
        help="lose a node the cluster can replace: as --kill, then the pod's controller creates it again at once "
        "(a new pod for its index, counted against the Job's backoffLimit) (repeatable)",
    )
    p.add_argument("--timeout", type=_seconds, metavar="SECONDS", help="stop every pod and exit 124 after this long")
    p.add_argument(
        "--workdir",
        type=Path,
        metavar="DIR",
        help="the pods' working directory (default: the file's directory; the current one for stdin)",
    )
    p.add_argument(
        "--host-network",
        action="store_true",
        help="run the pods in this machine's network instead of a private one with only loopback: the "
        "rendezvous and worker stores then listen on every interface (torch binds them so)",
    )
    p.add_argument(
        "--env",
        type=_env_pair,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="the value of an env entry that needs the cluster (secretKeyRef, configMapKeyRef); nothing is taken "
        "from this shell's environment (repeatable)",
    )
    p.add_argument(
        "--dry-run", action="store_true", help="print each pod's command and environment as JSON; run nothing"
    )
    p.add_argument(
        "--python",
        type=Path,
        metavar="PYTHON",
        help="the image's Python (e.g. a venv with torch and nothing of ours): runs python, python3 and the "
        "console scripts beside it (elastic-launch, torchrun) in the pods; default: this interpreter",
    )
    p.add_argument(
        "--message-format",
        choices=FORMATS,
        default="text",
        help="how errors in the input and the compiler's lints print: text, json (one object per line) or "
        "github (workflow commands), as when compiling (docs/lints.md); run's own lines stay text",
    )
    # Read by elastic-compile's main (tracebacks for internal errors); accepted here so it parses.
    p.add_argument("--debug", action="store_true", help="show tracebacks of internal errors")
    return p


def parse_args(argv: Sequence[str]) -> Options:
    """Parse ``run``'s arguments; raises :class:`RunError` on bad usage."""
    ns = build_parser().parse_args(list(argv))
    return Options(
        source=ns.source,
        nodes=ns.nodes,
        nproc_per_node=ns.nproc_per_node,
        kills=tuple((pod, at) for pod, at in ns.kill if isinstance(at, float)),
        line_kills=tuple((pod, at) for pod, at in ns.kill if isinstance(at, str)),
        replaces=tuple((pod, at) for pod, at in ns.replace if isinstance(at, float)),
        line_replaces=tuple((pod, at) for pod, at in ns.replace if isinstance(at, str)),
        timeout=ns.timeout,
        workdir=ns.workdir,
        dry_run=ns.dry_run,
        env=tuple(ns.env),
        host_network=ns.host_network,
        python=ns.python,
    )


# --------------------------------------------------------------------------- input


@dataclass(frozen=True)
class Source:
    """The job to run and where it came from."""

    job: dict[str, Any]
    label: str  # file name for messages
    directory: Path  # the default working directory of the pods
    others: list[dict[str, Any]] = field(default_factory=list)  # our TrainingRuntime, beside a TrainJob
    config_maps: dict[str, dict[str, Any]] = field(default_factory=dict)  # by name: the pods' volumes
    #: The documents of a manifest as loaded, to locate what the engine's checks refuse (none for a spec).
    documents: tuple[Loaded, ...] = ()

    def engine(self) -> Engine:
        """The engine that runs :attr:`job`, by its kind."""
        return ENGINES[str(self.job.get("kind"))](self.job, self.label, self.others)

    def located(self, error: Exception) -> SpecError | None:
        """The engine's refusal (``LABEL: field.path: message`` lines) as located problems, as the
        compiler's; None when a line names no field the manifest holds (it is then printed as it is)."""
        from elastic_compile.targets.checks import parse_path

        problems = []
        for line in str(error).splitlines():
            where, sep, message = line.removeprefix(f"{self.label}: ").partition(": ")
            path = parse_path(where) if sep else ()
            found = next((d for d in self.documents if path and d.locate(path)[2]), None)
            if found is None:
                return None
            given = _GIVEN.search(message)
            if given is not None:
                message = message[: given.start()]
            problems.append(found.problem(path, message, given=given.group(1) if given else None))
        return SpecError(problems) if problems else None


#: The ``(given: X)`` a check's message ends with (the located problem carries it as its own).
_GIVEN = re.compile(r" \(given: (.*)\)$")


#: The engines run emulates, by the kind of job each runs.
ENGINES: dict[str, type[Engine]] = {engine.kind: engine for engine in (PyTorchJobEngine, TrainJobEngine)}
_JOB_KINDS = tuple(ENGINES)
# What a job's pods need beside it: our TrainingRuntime, ConfigMaps (the bundled launcher's).
_BESIDE_KINDS = ("TrainingRuntime", "ConfigMap")


def _jobs(raw: bytes, label: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[Loaded]] | None:
    """The jobs (PyTorchJobs, TrainJobs), the other documents (TrainingRuntimes, ConfigMaps) and
    every document as loaded, of a YAML stream; None when it holds no job (then it is a spec).

    Text that is not valid YAML is left to the compiler, whose loader reports it with a
    line and column.
    """
    try:
        # The loader's limits (aliases, depth, size, tags) hold for manifests too.
        loaded = load_stream(raw, label, max_depth=160)
    except (SpecError, UnicodeDecodeError):
        return None
    docs = [d.data for d in loaded]
    jobs = [d for d in docs if isinstance(d, dict) and d.get("kind") in _JOB_KINDS]
    others = [d for d in docs if isinstance(d, dict) and d.get("kind") in _BESIDE_KINDS]
    return (jobs, others, loaded) if jobs else None


def load_source(source: str, stdin: IO[bytes] | None = None, reporter: Reporter | None = None) -> Source:
    """Read ``source`` and return the job to run, compiling an elastic.yaml in-process.

    Raises ``SpecError`` for a spec the compiler rejects, :class:`RunError` otherwise. The
    compiler's lints print through ``reporter`` (text on stderr by default).
    """
    from elastic_compile.compiler import lint
    from elastic_compile.compiler.pipeline import compile_path, compile_text

    if source == "-":
        raw = (stdin or sys.stdin.buffer).read(MAX_BYTES + 1)
        label, directory = "<stdin>", Path.cwd()
    else:
        # The reader compiling, doctor and import use: bounded, and never through a link out of the tree.
        raw, label = read_input(source)
        directory = Path(source).resolve().parent
    if len(raw) > MAX_BYTES:
        raise RunError(f"{label}: the file is larger than {MAX_BYTES} bytes")
    found = _jobs(raw, label)
    if found is None:
        # A file is compiled as a file, so that its bases (extends:) are found beside it.
        compiled = compile_text(raw, label) if source == "-" else compile_path(source)
        # The compiler's warnings, as `elastic-compile SPEC` prints them.
        lint.report([compiled], [], strict=False, reporter=reporter)
        docs = [o.doc for o in compiled.outputs]
        if not any(d.get("kind") in _JOB_KINDS for d in docs):
            raise RunError(f"{label}: target {compiled.spec.target} makes no job to run; use pytorchjob or trainjob")
        found = (
            [d for d in docs if d.get("kind") in _JOB_KINDS],
            [d for d in docs if d.get("kind") in _BESIDE_KINDS],
            [],  # the compiler has checked what it emits
        )
    jobs, others, documents = found
    config_maps = {str((d.get("metadata") or {}).get("name")): d for d in others if d.get("kind") == "ConfigMap"}
    if len(jobs) > 1:
        names = ", ".join(f"{j.get('kind')} {(j.get('metadata') or {}).get('name')}" for j in jobs)
        raise RunError(f"{label}: {len(jobs)} jobs ({names}); run takes one")
    beside = [d for d in others if d.get("kind") != "ConfigMap"]
    return Source(jobs[0], label, directory, beside, config_maps, tuple(documents))


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


def main(argv: Sequence[str], *, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    """``elastic-compile run ARGV``; returns the exit code (see the module docstring)."""
    # The pods' ConfigMap volumes (the bundled launcher's) and TMPDIRs live here while the job runs.
    with tempfile.TemporaryDirectory(prefix="elastic-compile-run-") as mounts:
        return _main(argv, stdout or sys.stdout, stderr or sys.stderr, Path(mounts))


def _main(argv: Sequence[str], out: TextIO, err: TextIO, mounts: Path) -> int:
    from elastic_compile.compiler.diagnostics import Reporter, wanted
    from elastic_compile.core.errors import CompileError

    printer = Printer(out, err)
    # Read before parsing, so that a usage error prints in the format asked for too.
    reporter = Reporter(wanted(argv), stream=err)
    network: LoopbackNetwork | None = None
    try:
        try:
            opts = parse_args(argv)
            source = load_source(opts.source, reporter=reporter)
            engine = source.engine()
            try:
                engine.check()
            except (RunError, kubeflow.ManifestError) as e:
                located = source.located(e)  # at the field, as the compiler's errors (red team 16)
                if located is not None:
                    raise located from None
                raise
            gpus = local_gpus()
            network = None if opts.dry_run or opts.host_network else _loopback_network()
            # In the private network no port is taken; in the host's, a busy rendezvous port moves.
            busy = port_busy if network is None else _never_busy
            token = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
            notes = engine.fit(opts, gpus=gpus, cpus=local_cpus(), is_busy=busy)
            workdir, note = working_directory(engine, opts.workdir, source.directory)
            notes += [note] if note else []
            scratch = read_only_scratch(engine, notes)
            pods, pod_notes = engine.build_pods(environ=os.environ, gpus=gpus, token=token, given=dict(opts.env))
            private_tmpdirs(pods, mounts)
            pod_notes += emulate_read_only_root(engine, pods, scratch)
            # Job() checks the --kill pod names.
            job = Job(pods, engine.rules(), opts, workdir, printer, store=engine.store_host(pods), network=network)
            suspended = engine.suspended()
            notes += engine.queue_notes()
            pod_notes += mount_config_maps(job.pods, source.config_maps, mounts)
            if opts.python is not None:
                pod_notes += use_image_python(job.pods, opts.python)
        except SpecError as e:
            for problem in e.problems:
                if reporter.format != "text":
                    reporter.problem(problem)
                    continue
                line = str(problem) if problem.path != "usage" else f"{PROG}: error: {problem.message}"
                print(printable(line), file=err)
            return EXIT_INPUT
        except (RunError, CompileError, kubeflow.ManifestError) as e:
            for line in str(e).splitlines():
                if reporter.format != "text":
                    reporter.error(f"run: {line}")
                    continue
                print(printable(f"{PROG}: error: {line}"), file=err)
            return EXIT_INPUT
        except SystemExit as e:  # --help
            return e.code if isinstance(e.code, int) else EXIT_OK

        for note in [*notes, *pod_notes]:
            printer.note(note)
        if opts.dry_run:
            out.write(json.dumps(dry_run_view(job.pods, workdir, [*notes, *pod_notes]), indent=2) + "\n")
            return EXIT_OK
        if opts.host_network:
            printer.note(
                "warning: --host-network: the pods share this machine's network; the rendezvous and worker stores "
                "listen on every interface"
            )
        if suspended:
            printer.note("the job is suspended: the cluster would create no pods until resumed; run starts them")
        printer.note(f"job {job.rules.name}: {len(job.pods)} pod(s) in {workdir}; {job.rules.describe()}")
        job.t0 = time.monotonic()
        with _Signals(job.on_signal):
            outcome = job.run()
        printer.note(summary(job, outcome))
        return outcome.exit_code
    finally:
        if network is not None:
            network.close()


def _never_busy(_port: int) -> bool:
    return False


def _loopback_network() -> LoopbackNetwork:
    try:
        return LoopbackNetwork().start()
    except NetworkError as e:
        raise RunError(
            f"cannot give the pods a private network with only loopback ({e}): this needs Linux network "
            "namespaces (root, or unprivileged user namespaces). --host-network runs them in this machine's "
            "network, where the rendezvous store listens on every interface"
        ) from None
