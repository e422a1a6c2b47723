"""What a job means to its engine, read off the pods the engine would create.

``meaning(stream)`` takes a manifest stream (a PyTorchJob, or a TrainJob with the runtimes
beside it) and computes, from the pods of the operator emulations ``elastic-compile run``
uses (elastic_compile/localrun/kubeflow.py, trainer.py), what the training does: how many
pods, what each runs (the program under its launcher, however the launcher is spelled),
how many processes per pod and nodes per rendezvous torch sees, the image, the user's env,
the resources, the metadata the engines copy onward. Two jobs with the same meaning train
the same way; the launcher and its defaults (elastic-launch instead of torchrun, /dev/shm,
timeouts) are the import's documented changes and are not part of it.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from elastic_compile.core import engine_env
from elastic_compile.localrun import kubeflow, trainer
from elastic_compile.schema.models import GPU_RESOURCE
from elastic_compile.targets.launcher import launcher_env
from elastic_compile.targets.readback.command_line import read_launch
from elastic_compile.targets.readback.draft import Draft
from elastic_compile.targets.trainjob import api

#: What an image's ENTRYPOINT is, per image of the examples that run one (their Dockerfiles).
ENTRYPOINTS = {
    "ghcr.io/kubeflow/training-v1/pytorch-dist-mnist:latest": "python /opt/mnist/src/mnist.py",
    "ghcr.io/kubeflow/training-v1/pytorch-dist-sendrecv-test:latest": "python /opt/mlkube/dist_sendrecv.py",
}
_COMPILER_ENV = {name for name, _ in launcher_env(30)}


def docs(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if isinstance(d, dict)]


def _range(text: str) -> str:
    lo, _, hi = text.partition(":")
    return f"{lo}:{hi or lo}"


def _resources(raw: Mapping[str, Any] | None) -> dict[str, dict[str, str]]:
    """Requests default to limits (Kubernetes' defaulting), so a limit alone and both equal are one thing."""
    raw = raw or {}
    limits = {str(k): str(v) for k, v in (raw.get("limits") or {}).items()}
    requests = {**limits, **{str(k): str(v) for k, v in (raw.get("requests") or {}).items()}}
    return {"requests": requests, "limits": limits}


def _program(argv: Sequence[str], env: Mapping[str, str], gpus: int) -> tuple[tuple[str, ...], str, str | None]:
    """(the program every worker runs, processes per pod, nodes torch sees or None without a launcher)."""
    launch = read_launch(list(argv), lambda i: (i,), Draft())
    if launch.launcher is None:
        return tuple(argv), "1", None
    program = tuple(launch.program) if launch.function is None else ("function", launch.function)
    given = launch.settings.get("nproc_per_node")
    nproc = str(given[0]) if given and "$" not in str(given[0]) else env.get("PET_NPROC_PER_NODE", "1")
    if nproc in ("auto", "gpu") and gpus:
        nproc = str(gpus)  # torchrun's and elastic-launch's auto: one per device the pod sees
    nnodes = launch.settings.get("nnodes")
    nodes = str(nnodes[0]) if nnodes and "$" not in str(nnodes[0]) else env.get("PET_NNODES", "1")
    return program, nproc, _range(nodes)


def _user_env(env: Mapping[str, str], generation: engine_env.Generation) -> dict[str, str]:
    engine = {row.name for row in engine_env.TABLES[generation]}
    return {
        k: v
        for k, v in env.items()
        if not k.startswith(("PET_", "ELASTIC_LAUNCH_")) and k not in engine and k not in _COMPILER_ENV
    }


def meaning(stream: Sequence[dict[str, Any]], runtimes: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """The meaning of the one job of ``stream`` (``runtimes``: more documents its TrainJob may reference)."""
    (job,) = [d for d in stream if d.get("kind") in ("PyTorchJob", "TrainJob")]
    out: dict[str, Any] = {"name": job["metadata"]["name"], "namespace": job["metadata"].get("namespace")}
    labels = dict(job["metadata"].get("labels") or {})
    if job["kind"] == "PyTorchJob":
        pods = kubeflow.pods(job, local=False)
        replica = job["spec"]["pytorchReplicaSpecs"].get("Worker") or job["spec"]["pytorchReplicaSpecs"]["Master"]
        template = replica["template"]
        container = next(c for c in template["spec"]["containers"] if c["name"] == "pytorch")
        generation: engine_env.Generation = "v1"
        pod_meta = template.get("metadata") or {}
    else:
        candidates = [d for d in [*stream, *runtimes] if d.get("kind") in api.RUNTIME_KINDS]
        ref = job["spec"]["runtimeRef"]
        runtime = next(
            (r for r in candidates if r["metadata"]["name"] == ref["name"] and r["kind"] == ref.get("kind", r["kind"])),
            None,
        )
        pods = trainer.pods(job, runtime, local=False)
        rjob = next(r for r in trainer.jobset_of(job, runtime)["replicatedJobs"] if r["name"] == api.NODE)
        template = rjob["template"]["spec"]["template"]
        container = next(c for c in template["spec"]["containers"] if c["name"] == api.NODE)
        generation = "v2"
        pod_meta = template.get("metadata") or {}
        jobset: dict[str, dict[str, str]] = {"labels": {}, "annotations": {}}
        for patch in job["spec"].get("runtimePatches") or []:
            meta = patch.get("trainingRuntimeSpec", {}).get("template", {}).get("metadata") or {}
            for key, values in jobset.items():
                values.update(meta.get(key) or {})
        out["jobset_metadata"] = jobset
        out["initializer"] = job["spec"].get("initializer")
        out["suspend"] = job["spec"].get("suspend", False)
        # What of the runtime is not its node job's pod (gang scheduling, other jobs): carried by nobody but it.
        source = runtime or api.stock_runtime()
        extra = {k: v for k, v in source["spec"].items() if k not in ("mlPolicy", "template")}
        others = [r["name"] for r in source["spec"]["template"]["spec"]["replicatedJobs"] if r["name"] != api.NODE]
        out["runtime"] = {**extra, **({"other jobs": others} if others else {})}
    resources = _resources(container.get("resources"))
    gpus = max((int(v) for k, v in resources["limits"].items() if k in (GPU_RESOURCE, "amd.com/gpu")), default=0)
    meanings = []
    for pod in pods:
        # Without command the image's ENTRYPOINT runs, with the container's args after it.
        argv = list(pod.argv) if container.get("command") else [*shlex.split(ENTRYPOINTS[pod.image]), *pod.argv]
        program, nproc, nnodes = _program(argv, pod.env, gpus)
        meanings.append((pod.image, program, nproc, nnodes or f"{len(pods)}:{len(pods)}"))
    (out["pod"],) = set(meanings)  # every pod runs the same
    out["pods"] = len(pods)
    out["env"] = _user_env(pods[0].env, generation)
    out["resources"] = resources
    out["labels"] = labels
    user_pod = {k: v for k, v in (pod_meta.get("annotations") or {}).items() if k != "sidecar.istio.io/inject"}
    out["pod_metadata"] = {"labels": dict(pod_meta.get("labels") or {}), "annotations": user_pod}
    return out
