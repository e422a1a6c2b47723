"""A PyTorchJob (kubeflow.org/v1) read back into elastic.yaml: the reverse of this target's plan.

Any replica layout is read: Worker-only or Master + Worker, elastic or not. The compiled
job is always Worker-only (targets/worker.py says why), so a Master is folded into the Workers:
it was one more node of the same job. Topology comes from the replicas and
``elasticPolicy``; the launcher's flags in the container command beat what the operator
injects, as they do in torchrun (torch/distributed/run.py). The operator's defaults
(training-operator v1.9.4 pkg/apis/kubeflow.org/v1/pytorch_defaults.go) are what the original job ran with, so where
the spec's
default differs the import says so.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from elastic_compile import contract
from elastic_compile.core.loader import Loaded
from elastic_compile.core.manifest import as_int, as_mapping
from elastic_compile.targets.readback.command_line import entrypoint_argv, read_launch
from elastic_compile.targets.readback.draft import Draft, Path, shutdown_seconds, spec_default
from elastic_compile.targets.readback.job_object import adopt_metadata, drop_default_nproc, schema_problems
from elastic_compile.targets.readback.launch_settings import Injected, apply_launch
from elastic_compile.targets.readback.pod_template import PodSource, adopt_pod

#: The operator's defaults the spec replaces (pytorch_defaults.go).
OPERATOR_RESTART_POLICY = "OnFailure"
OPERATOR_CLEAN_POD_POLICY = "None"


def pytorchjob_to_spec(loaded: Loaded, entrypoint: Sequence[str] | None = None) -> Draft:
    """The spec for the PyTorchJob in ``loaded`` (its data, located through its nodes).

    ``entrypoint``: the image's ENTRYPOINT (``import --entrypoint``), which runs when the
    training container has no command (Kubernetes appends the container's args to it).
    """
    from elastic_compile.targets.pytorchjob import API_VERSION, KIND, SCHEMA_FILE

    draft = Draft()
    job = schema_problems(draft, loaded.data, SCHEMA_FILE, API_VERSION, KIND)
    if draft.errors:
        return draft  # the mapping below reads only data of the right shape
    adopt_metadata(draft, job)
    name = str(as_mapping(job.get("metadata")).get("name") or "")
    spec = as_mapping(job.get("spec"))
    replica_specs = as_mapping(spec.get("pytorchReplicaSpecs"))
    base: Path = ("spec", "pytorchReplicaSpecs")
    for rtype in replica_specs:
        if rtype not in ("Master", "Worker"):
            draft.warn((*base, rtype), f"replica type {rtype} dropped: the operator knows only Master and Worker")
    master = as_mapping(replica_specs.get("Master")) if "Master" in replica_specs else None
    worker = as_mapping(replica_specs.get("Worker")) if "Worker" in replica_specs else None
    if master is None and worker is None:
        draft.fail(base, "no Master or Worker replica to import")
        return draft
    role = "Worker" if worker is not None else "Master"
    chosen: Mapping[str, Any] = worker if worker is not None else master  # type: ignore[assignment]
    workers = (as_int(worker.get("replicas")) or 1) if worker is not None else 0
    policy = spec.get("elasticPolicy")
    elastic = as_mapping(policy) if policy is not None else None

    nodes = _topology(draft, master, workers, elastic, base)
    if master is not None and worker is not None:
        _compare_templates(draft, master, worker, base)
    _restart_policy(draft, chosen, master, worker, base=base, role=role)

    injected = _injected(draft, spec, elastic, name)
    written = as_mapping(chosen.get("template"))
    template_path: Path = (*base, role, "template")
    containers = as_mapping(written.get("spec")).get("containers") or []
    training = next(
        (i for i, c in enumerate(containers) if as_mapping(c).get("name") == contract.TRAINING_CONTAINER), 0
    )
    if not containers:
        draft.fail((*template_path, "spec", "containers"), "no container to import")
        return draft
    container = as_mapping(containers[training])
    container_path: Path = (*template_path, "spec", "containers", training)
    argv, at = entrypoint_argv(draft, container, container_path, entrypoint)
    if argv is None:
        return draft
    launch = read_launch(argv, at, draft)
    apply_launch(draft, launch, at, injected, nodes)
    template: dict[str, Any] = copy.deepcopy(dict(written))
    if launch.working_dir is not None:
        pod = template.setdefault("spec", {})
        target = dict(pod["containers"][training])
        if "workingDir" not in target:
            target["workingDir"] = launch.working_dir
            pod["containers"] = [target if i == training else c for i, c in enumerate(pod["containers"])]
    shutdown = shutdown_seconds(draft)
    adopt_pod(
        draft,
        PodSource(template, template_path, training),
        shutdown_timeout=shutdown,
        chosen=launch.launcher == contract.LAUNCHER or launch.compiled,
        extra_env=launch.env,
        bundled=launch.bundled,
        torchrun=launch.compiled,
    )
    if launch.launcher is None and launch.program:
        # Nothing read PET_NPROC_PER_NODE: the command ran once per pod.
        draft.set(("nproc_per_node",), 1, at(0))
    drop_default_nproc(draft)
    _run_policy(draft, as_mapping(spec.get("runPolicy")))
    return draft


def _topology(
    draft: Draft, master: Mapping[str, Any] | None, workers: int, elastic: Mapping[str, Any] | None, base: Path
) -> int:
    """``nnodes`` from the replicas and elasticPolicy; returns the most pods the job has."""
    extra = 1 if master is not None else 0
    if elastic is not None:
        lo, hi = as_int(elastic.get("minReplicas")), as_int(elastic.get("maxReplicas"))
        # PET_NNODES on every pod, the Master's too, is MIN:MAX as written; one bound alone is copied to the
        # other, and with neither both are the Worker replicas, the Master not counted (kubeflow/trainer#2277):
        # kubeflow/trainer@v1.9.4:pkg/apis/kubeflow.org/v1/pytorch_defaults.go:38-55,
        # pkg/controller.v1/pytorch/elastic.go:124-144.
        defaulted = lo is None and hi is None
        lo, hi = (lo if lo is not None else hi), (hi if hi is not None else lo)
        if lo is None or hi is None:
            lo = hi = workers
        where: Path = ("spec", "elasticPolicy")
        if extra and defaulted:
            draft.note(
                (*base, "Master"),
                f"Master folded into Workers: every pod got PET_NNODES={lo}:{hi} (the Worker replicas; the operator "
                f"does not count the Master, kubeflow/trainer#2277), so the rendezvous at worker-0 took at most {hi} "
                f"of the {workers + extra} pods; nnodes {hi} keeps what trained",
                "nnodes",
            )
        elif extra:
            draft.note(
                (*base, "Master"),
                f"Master folded into Workers: every pod, the Master too, got PET_NNODES={lo}:{hi} and met in the "
                f"Workers' rendezvous at worker-0, so nnodes {lo}:{hi} keeps the job's range",
                "nnodes",
            )
        if workers + extra != hi:
            draft.note(
                (*base, "Worker", "replicas"),
                f"the compiled job starts {hi} pods (the most nnodes allows); the manifest started {workers + extra}",
                "nnodes",
            )
    else:
        lo = hi = workers + extra
        where = (*base, "Worker" if workers else "Master", "replicas")
        if extra and workers:
            draft.note(
                (*base, "Master"),
                f"Master folded into Workers: {workers} Worker(s) + the Master are {hi} Worker pods meeting through "
                "c10d on worker-0 instead of static rendezvous at the Master",
                "nnodes",
            )
        elif workers > 1:
            draft.warn(
                where,
                f"{workers} Workers without a Master or elasticPolicy get no rendezvous endpoint, so their pods "
                "never met; the compiled job meets through c10d on worker-0",
                "nnodes",
            )
    draft.set_unless_default(("nnodes",), hi if lo == hi else f"{lo}:{hi}", where)
    return hi


def _compare_templates(draft: Draft, master: Mapping[str, Any], worker: Mapping[str, Any], base: Path) -> None:
    m, w = as_mapping(master.get("template")), as_mapping(worker.get("template"))
    if m == w:
        return
    differing = sorted(
        {f"metadata.{k}" for k in set(as_mapping(m.get("metadata"))) | set(as_mapping(w.get("metadata")))
         if as_mapping(m.get("metadata")).get(k) != as_mapping(w.get("metadata")).get(k)}
        | {f"spec.{k}" for k in set(as_mapping(m.get("spec"))) | set(as_mapping(w.get("spec")))
           if as_mapping(m.get("spec")).get(k) != as_mapping(w.get("spec")).get(k)}
    )  # fmt: skip
    draft.warn(
        (*base, "Master", "template"),
        f"the Master's pod template differs from the Workers' ({', '.join(differing[:5])}); every pod gets the "
        "Workers' now",
    )


def _restart_policy(
    draft: Draft,
    chosen: Mapping[str, Any],
    master: Mapping[str, Any] | None,
    worker: Mapping[str, Any] | None,
    *,
    base: Path,
    role: str,
) -> None:
    policy = chosen.get("restartPolicy")
    if master is not None and worker is not None and master.get("restartPolicy") != worker.get("restartPolicy"):
        draft.warn(
            (*base, "Master", "restartPolicy"),
            f"the Master's restartPolicy differs from the Workers'; every pod gets {policy or 'the default'} now",
        )
    if policy is None:
        default = spec_default("restart_policy")
        draft.note(
            (*base, role),
            f"restart_policy {default} now (the default; the operator's was {OPERATOR_RESTART_POLICY}): "
            "errors in your code fail the job at once, lost nodes and preemption recreate the pod",
            "restart_policy",
        )
    else:
        draft.set_unless_default(("restart_policy",), policy, (*base, role, "restartPolicy"))


def _injected(draft: Draft, spec: Mapping[str, Any], elastic: Mapping[str, Any] | None, name: str) -> Injected:
    """What the operator hands torchrun through PET_* for this job (training-operator v1.9.4
    pkg/controller.v1/pytorch/envvar.go, elastic.go)."""
    nproc: tuple[Any, Path]
    if spec.get("nprocPerNode") is not None:
        nproc = (spec["nprocPerNode"], ("spec", "nprocPerNode"))
    elif elastic is not None and elastic.get("nProcPerNode") is not None:
        nproc = (elastic["nProcPerNode"], ("spec", "elasticPolicy", "nProcPerNode"))
        draft.note(nproc[1], "elasticPolicy.nProcPerNode (deprecated) becomes nproc_per_node", "nproc_per_node")
    else:
        nproc = ("auto", ("spec",))  # the operator's default
    if elastic is None:
        return Injected(nproc_per_node=nproc)
    path: Path = ("spec", "elasticPolicy")
    backend = elastic.get("rdzvBackend")
    if elastic.get("standalone") is True:
        draft.note(
            (*path, "standalone"),
            'standalone dropped: the operator turns it into PET_STANDALONE="", which crashes torchrun',
        )
    conf = elastic.get("rdzvConf")
    pairs: list[tuple[str, str]] = []
    if isinstance(conf, list):
        if not conf:
            draft.note((*path, "rdzvConf"), "the empty rdzvConf dropped (the operator panics on it)")
        for item in conf:
            entry = as_mapping(item)
            pairs.append((str(entry.get("key", "")), str(entry.get("value", ""))))
    host = elastic.get("rdzvHost")
    if host is not None and host != f"{name}-worker-0":
        draft.set(("rdzv", "host"), host, (*path, "rdzvHost"))
    port = elastic.get("rdzvPort")
    if port is not None:
        draft.set(("rdzv", "port"), port, (*path, "rdzvPort"))
    if elastic.get("metrics") is not None:
        draft.warn(
            (*path, "metrics"),
            "cannot carry elasticPolicy.metrics (the operator's HorizontalPodAutoscaler); dropped",
        )
    restarts = elastic.get("maxRestarts")
    return Injected(
        nproc_per_node=nproc,
        backend=(backend, (*path, "rdzvBackend")) if backend is not None else None,
        rdzv_id=(str(elastic["rdzvId"]), (*path, "rdzvId")) if elastic.get("rdzvId") is not None else None,
        conf=(pairs, (*path, "rdzvConf")) if pairs else None,
        max_restarts=(restarts, (*path, "maxRestarts")) if restarts is not None else None,
    )


_RUN_POLICY = {
    "ttlSecondsAfterFinished": "ttl_seconds_after_finished",
    "activeDeadlineSeconds": "active_deadline_seconds",
    "backoffLimit": "backoff_limit",
    "suspend": "suspend",
}
_SCHEDULING = {
    "minAvailable": "min_available",
    "queue": "queue",
    "priorityClass": "priority_class",
    "scheduleTimeoutSeconds": "schedule_timeout_seconds",
}


def _run_policy(draft: Draft, run_policy: Mapping[str, Any]) -> None:
    path: Path = ("spec", "runPolicy")
    clean = run_policy.get("cleanPodPolicy")
    if clean is None:
        draft.note(
            path if run_policy else ("spec",),
            f"run_policy.clean_pod_policy {spec_default('run_policy', 'clean_pod_policy')} now (the default; "
            f"the operator's {OPERATOR_CLEAN_POD_POLICY} kept every pod, and the GPUs of those still running)",
            "run_policy",
        )
    else:
        draft.set_unless_default(("run_policy", "clean_pod_policy"), clean, (*path, "cleanPodPolicy"))
    for theirs, ours in _RUN_POLICY.items():
        if run_policy.get(theirs) is not None:
            draft.set_unless_default(("run_policy", ours), run_policy[theirs], (*path, theirs))
    scheduling = as_mapping(run_policy.get("schedulingPolicy"))
    for theirs, ours in _SCHEDULING.items():
        if scheduling.get(theirs) is not None:
            draft.set(("run_policy", "scheduling", ours), scheduling[theirs], (*path, "schedulingPolicy", theirs))
    for key in scheduling:
        if key not in _SCHEDULING:
            draft.warn((*path, "schedulingPolicy", key), f"cannot carry schedulingPolicy.{key}; dropped")
    for key in run_policy:
        if key not in (*_RUN_POLICY, "cleanPodPolicy", "schedulingPolicy"):
            draft.warn((*path, key), f"cannot carry runPolicy.{key}; dropped")
