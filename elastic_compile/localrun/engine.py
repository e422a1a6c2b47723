"""One interface for the engines ``run`` emulates, and the behaviour they share, written once.

An :class:`Engine` holds one job (a PyTorchJob for :class:`~.kubeflow.PyTorchJobEngine`, a
TrainJob for :class:`~.trainer.TrainJobEngine`) and knows its controller's part: what the
cluster rejects, how the job is fitted to this machine, the pods with their command and
environment, the restart and success rules, the pod that hosts the rendezvous store. What
the kubelet does for any pod is here, the same for every engine:

* the container's ``workingDir`` (:func:`working_directory`);
* ``readOnlyRootFilesystem`` (:func:`emulate_read_only_root`), with the container's
  emptyDir volumes writable;
* accelerators (:func:`accelerator_units`, from :mod:`elastic_compile.core.resources`):
  how many devices a pod asks for, and so how far a job is scaled down on a smaller machine;
* the queue and suspension notes (:meth:`Engine.queue_notes`).

``run`` (:mod:`.cli`) drives an engine through these steps and never asks which one it has.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from elastic_compile import contract
from elastic_compile.core.resources import accelerator_counts
from elastic_compile.localrun import rootfs
from elastic_compile.localrun.job import EngineRules
from elastic_compile.localrun.process import LocalPod, Options, RunError
from elastic_compile.schema.models import KUEUE_QUEUE_LABEL, mount_path


def accelerator_units(resources: Mapping[str, Any]) -> int:
    """Devices a container's ``resources`` ask for (nvidia.com/gpu, habana.ai/gaudi, a MIG slice, ...).

    Shares of a device (``gpu.intel.com/millicores``) and quantities that are not whole are
    not devices: :func:`~elastic_compile.core.resources.accelerator_counts` decides.
    """
    limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
    return sum(accelerator_counts(limits, requests).values())


def device_shares(gpus: Sequence[str], requested: int, pods: int) -> list[str]:
    """Each pod's ``CUDA_VISIBLE_DEVICES``: the device plugin's part, on this machine's ``gpus``.

    A pod sees only its own devices: as many as it requests, fewer when this machine has
    fewer than every pod's request (the job is then scaled down: :func:`.kubeflow.fit_nproc`),
    none when it requests none.
    """
    per_pod = min(requested, len(gpus) // max(1, pods))
    return [",".join(gpus[i * per_pod : (i + 1) * per_pod]) for i in range(pods)]


class Engine(ABC):
    """A job and its engine's rules, as ``run`` plays them on this machine."""

    #: The kind of job it runs.
    kind: ClassVar[str]

    def __init__(self, job: Mapping[str, Any], label: str, others: Sequence[Mapping[str, Any]] = ()) -> None:
        #: The job as the engine will run it (:meth:`fit` changes it).
        self.job: dict[str, Any] = dict(job)
        self.label = label
        self.others = others

    @abstractmethod
    def check(self) -> None:
        """Reject what the cluster would reject (webhooks, restart policies, pod values): :class:`RunError`."""

    @abstractmethod
    def fit(self, opts: Options, *, gpus: Sequence[str], cpus: int, is_busy: Callable[[int], bool]) -> list[str]:
        """Change :attr:`job` to run here (``--nodes``, ``--nproc-per-node``, fewer devices, a busy port); the notes."""

    @abstractmethod
    def pod_parts(self, pod: LocalPod | None = None) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
        """The pod spec and training container of ``pod`` (None: of the job's first pod)."""

    @abstractmethod
    def build_pods(
        self, *, environ: Mapping[str, str], gpus: Sequence[str], token: str, given: Mapping[str, str]
    ) -> tuple[list[LocalPod], list[str]]:
        """The local pods of :attr:`job` and the notes (env entries taken from ``given`` or skipped, sidecars)."""

    @abstractmethod
    def rules(self) -> EngineRules:
        """The controller's restart, success and failure rules for :attr:`job`."""

    @abstractmethod
    def store_host(self, pods: Sequence[LocalPod]) -> tuple[LocalPod, int] | None:
        """The pod whose agent hosts the c10d store on a cluster, and its port (None: no pod does)."""

    @abstractmethod
    def suspended(self) -> bool:
        """Whether the job is suspended (the cluster would create no pods)."""

    def queue_notes(self) -> list[str]:
        """What Kueue would do with the job before any pod exists."""
        queue = ((self.job.get("metadata") or {}).get("labels") or {}).get(KUEUE_QUEUE_LABEL)
        if queue:
            return [f"Kueue queue {queue}: the cluster would hold the job until the queue admits it; run starts it"]
        return []

    def read_only_root(self) -> bool:
        """Whether a training container asks for a read-only root filesystem."""
        return _read_only(self.pod_parts()[1])


def _read_only(container: Mapping[str, Any]) -> bool:
    return (container.get("securityContext") or {}).get("readOnlyRootFilesystem") is True


def working_directory(engine: Engine, chosen: Path | None, default: Path) -> tuple[Path, str | None]:
    """Where the pods run, and a note on the container's workingDir.

    ``--workdir`` wins; else the training container's workingDir when this machine has that
    directory (the image's files, at the path the image has them); else the file's directory,
    standing for the image's.
    """
    working = engine.pod_parts()[1].get("workingDir")
    if chosen is not None:
        workdir = chosen.resolve()
        if not workdir.is_dir():
            raise RunError(f"--workdir {workdir}: not a directory")
        note = f"--workdir {workdir} stands for the container's workingDir {working}" if working else None
        return workdir, note
    if isinstance(working, str) and working.startswith("/") and Path(working).is_dir():
        return Path(working).resolve(), f"the pods run in the container's workingDir {working}"
    if working:
        return default, f"workingDir {working} does not exist here: the pods run in {default}, which stands for it"
    return default, None


def read_only_scratch(engine: Engine, notes: list[str]) -> Path | None:
    """A directory for the pods' writable volumes under a read-only root (None: not asked for, or not possible)."""
    if not engine.read_only_root():
        return None
    why = rootfs.probe()
    if why is not None:
        notes.append(
            f"warning: readOnlyRootFilesystem is not emulated on this machine ({why}): the pods can write anywhere"
        )
        return None
    scratch = Path(tempfile.mkdtemp(prefix="elastic-compile-run-"))
    atexit.register(shutil.rmtree, scratch, ignore_errors=True)
    return scratch


def emulate_read_only_root(engine: Engine, pods: Sequence[LocalPod], scratch: Path | None) -> list[str]:
    """Start each pod whose container asks for a read-only root in one (:mod:`.rootfs`); the notes.

    Its emptyDir volumes become fresh directories under ``scratch`` (a directory run owns).
    """
    if scratch is None:
        return []
    notes = []
    for pod in pods:
        pod_spec, container = engine.pod_parts(pod)
        if not _read_only(container):
            continue
        binds = _writable_volumes(pod_spec, container, scratch / pod.name)
        pod.argv = rootfs.wrap(pod.argv, binds)
        if contract.ENV_TMPDIR not in pod.pod.env:
            # Read-only in here: the image brings no TMPDIR, so /tmp (an emptyDir, when the
            # compiler made one) and the launcher's fallbacks decide, as on the cluster.
            pod.env.pop(contract.ENV_TMPDIR, None)
        shown = ", ".join(target for _, target in binds) or "none"
        notes.append(
            "read-only root filesystem (readOnlyRootFilesystem): every mount of this machine is read-only in "
            f"the pods but /proc, /sys, /dev and their emptyDir volumes ({shown})"
        )
    return list(dict.fromkeys(notes))


def _writable_volumes(
    pod_spec: Mapping[str, Any], container: Mapping[str, Any], scratch: Path
) -> list[tuple[str, str]]:
    """(a fresh directory, its mount path) for each emptyDir the container mounts writable, at a path this machine has.

    /dev is left as it is (the host's /dev/shm is a writable tmpfs, as the pod's is).
    """
    empty = {v.get("name") for v in pod_spec.get("volumes") or [] if isinstance(v, dict) and "emptyDir" in v}
    binds = []
    for index, mount in enumerate(container.get("volumeMounts") or []):
        if not isinstance(mount, dict):
            continue
        path = mount_path(mount)  # as the kubelet resolves it: a relative "tmp" is /tmp, not ./tmp here
        if mount.get("name") not in empty or mount.get("readOnly") or path.startswith("/dev/"):
            continue
        if Path(path).is_dir():
            source = scratch / f"volume-{index}"
            source.mkdir(parents=True, exist_ok=True)
            binds.append((str(source), path))
    return binds
