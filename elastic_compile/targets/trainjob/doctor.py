"""Traps in a TrainJob we did not write (``elastic-compile doctor``).

Trainer's webhooks and CEL rules, with the traps they let through
(:func:`.checks.trainjob_errors`, and :func:`.checks.runtime_errors` for a runtime in the
same input), then what hand-written TrainJobs get wrong: no launcher (the runtime does
not start torchrun, kubeflow-trainer-v2.md §3), launcher flags against the PET_* the
torch plugin injects, no /dev/shm, regular sidecars in the runtime, a JobSet TTL that
makes v2.3 rerun a failed job (kubeflow/trainer#3779), and the pod rules every target
shares.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from elastic_compile import contract
from elastic_compile.core.crdcheck import as_int, as_mapping
from elastic_compile.core.loader import Loaded
from elastic_compile.schema.launchers import launcher_kind, nested_launcher
from elastic_compile.schema.models import mounts_shm
from elastic_compile.targets.adopt import other_document
from elastic_compile.targets.checks import FieldPath as Path
from elastic_compile.targets.checks import Finding
from elastic_compile.targets.doctor import from_lines, launcher_findings
from elastic_compile.targets.pod import ISTIO_INJECT
from elastic_compile.targets.trainjob import api
from elastic_compile.targets.trainjob.adopt import find_runtime
from elastic_compile.targets.trainjob.checks import manifest_errors, runtime_errors

#: torchrun's options against what the torch plugin injects (kubeflow-trainer-v2.md §4).
_OVERRIDING = {
    "nnodes": "PET_NNODES", "nproc_per_node": "PET_NPROC_PER_NODE", "node_rank": "PET_NODE_RANK",
    "master_addr": "PET_MASTER_ADDR", "master_port": "PET_MASTER_PORT",
}  # fmt: skip
_TRAINER: Path = ("spec", "trainer")


def findings(job: Mapping[str, Any], stream: Sequence[Loaded]) -> list[Finding]:
    """Every trap of the TrainJob ``job``; ``stream`` may hold the runtime it references."""
    runtime, index = find_runtime(job, stream)
    # The runtime's own rules are its document's (runtime_findings), not repeated here.
    found = from_lines("trainer-webhook", manifest_errors(job, runtime))
    spec = as_mapping(job.get("spec"))
    trainer = as_mapping(spec.get("trainer"))
    nodes = as_int(trainer.get("numNodes")) or 1
    nproc = as_int(trainer.get("numProcPerNode")) or 1
    words = [*(trainer.get("command") or []), *(trainer.get("args") or [])]
    if trainer and all(isinstance(w, str) for w in words):
        if not _launches(words) and (nodes > 1 or nproc > 1):
            found.append(
                Finding(
                    "no-launcher",
                    (*_TRAINER, "command") if "command" in trainer else _TRAINER,
                    "no launcher in the trainer's command: Trainer's runtime does not start torchrun, so the command "
                    f"runs once per pod and the PET_* topology ({nodes} node(s) x {nproc}) is never read",
                )
            )
        found += launcher_findings(trainer, _TRAINER, _OVERRIDING, nodes=nodes, restarts_set=True)
    env = trainer.get("env")
    for j, entry in enumerate(env if isinstance(env, list) else []):
        name = as_mapping(entry).get("name")
        if isinstance(name, str) and name in contract.WORKER_ENV_NAMES:
            found.append(
                Finding(
                    "operator-env",
                    (*_TRAINER, "env", j, "name"),
                    f"{name} set by hand: torch elastic sets it for every worker process, so this value never "
                    "reaches the training code",
                )
            )
    found += _pod_findings(spec, runtime, index)
    return list(dict.fromkeys(found))


def runtime_findings(runtime: Mapping[str, Any], stream: Sequence[Loaded]) -> list[Finding]:
    """A TrainingRuntime's (or ClusterTrainingRuntime's) own rules: Trainer's runtime webhook."""
    return from_lines("runtime-webhook", runtime_errors(runtime))


def _launches(words: Sequence[str]) -> bool:
    return launcher_kind(words) is not None or nested_launcher(words) is not None


def _pod_findings(spec: Mapping[str, Any], runtime: Mapping[str, Any] | None, index: int) -> list[Finding]:
    """/dev/shm, regular sidecars, Istio and the JobSet TTL, across the patches and the runtime."""
    found: list[Finding] = []
    shm = False
    patches = spec.get("runtimePatches")
    for p, patch in enumerate(patches if isinstance(patches, list) else []):
        rjobs = as_mapping(as_mapping(as_mapping(patch).get("trainingRuntimeSpec")).get("template")).get("spec")
        for j, rjob in enumerate(as_mapping(rjobs).get("replicatedJobs") or []):
            if as_mapping(rjob).get("name") != api.NODE:
                continue
            tpl = as_mapping(as_mapping(as_mapping(rjob).get("template")).get("spec")).get("template")
            base: Path = ("spec", "runtimePatches", p, "trainingRuntimeSpec", "template", "spec", "replicatedJobs", j)
            shm = shm or _mounts_shm(as_mapping(tpl))
            annotations = as_mapping(as_mapping(as_mapping(tpl).get("metadata")).get("annotations"))
            if str(annotations.get(ISTIO_INJECT)).lower() == "true":
                found.append(_istio((*base, "template", "spec", "template", "metadata", "annotations", ISTIO_INJECT)))
    if runtime is not None:
        rspec = as_mapping(as_mapping(runtime.get("spec")).get("template")).get("spec")
        if as_mapping(rspec).get("ttlSecondsAfterFinished") is not None:
            found.append(
                Finding(
                    "jobset-ttl",
                    other_document(index, ("spec", "template", "spec", "ttlSecondsAfterFinished")),
                    "a JobSet TTL in the runtime: Trainer v2.3 recreates a failed JobSet that the TTL deleted, and "
                    "the job runs again without end (kubeflow/trainer#3779)",
                )
            )
        for j, rjob in enumerate(as_mapping(rspec).get("replicatedJobs") or []):
            if as_mapping(rjob).get("name") != api.NODE:
                continue
            tpl = as_mapping(as_mapping(as_mapping(rjob).get("template")).get("spec")).get("template")
            shm = shm or _mounts_shm(as_mapping(tpl))
            containers = as_mapping(as_mapping(tpl).get("spec")).get("containers")
            for c, container in enumerate(containers if isinstance(containers, list) else []):
                name = as_mapping(container).get("name")
                if name != api.NODE:
                    where = ("spec", "template", "spec", "replicatedJobs", j, "template", "spec", "template", "spec")
                    found.append(
                        Finding(
                            "regular-sidecar",
                            other_document(index, (*where, "containers", c)),
                            f"container {name!s} runs beside {api.NODE}: the Job cannot complete while it keeps "
                            "running; make it a native sidecar (an init container with restartPolicy: Always)",
                        )
                    )
    if not shm:
        found.append(
            Finding(
                "no-shm",
                _TRAINER,
                "no /dev/shm mount on the node container (neither a runtimePatch nor the runtime gives one): the "
                "container runtime's 64 MiB makes DataLoader workers and NCCL die with 'Bus error'",
            )
        )
    return found


def _mounts_shm(template: Mapping[str, Any]) -> bool:
    containers = as_mapping(template.get("spec")).get("containers")
    for container in containers if isinstance(containers, list) else []:
        if as_mapping(container).get("name") == api.NODE:
            mounts = as_mapping(container).get("volumeMounts")
            if any(isinstance(m, Mapping) and mounts_shm(dict(m)) for m in mounts or []):
                return True
    return False


def _istio(path: Path) -> Finding:
    return Finding(
        "istio-sidecar",
        path,
        "an Istio sidecar breaks the rendezvous (kubeflow/trainer#1637) and keeps the pod from completing",
    )
