"""ElasticSpec -> the TrainJob plan: where each setting goes in Trainer v2.3, or why it cannot.

A TrainJob carries a setting in one of three places (Trainer v2.3.0 pkg/apis/trainer/v1alpha1/trainjob_types.go):

* ``spec.trainer``: image, command and args (through elastic-launch), env, numNodes, an
  integer numProcPerNode and resourcesPerNode;
* one ``runtimePatches`` entry of ours: /dev/shm, scheduling, volumes and mounts, service
  account, pull secrets, security contexts, pod labels and annotations, grace period;
* a namespaced ``TrainingRuntime`` of ours, for what no patch can carry (sidecars, init
  containers, other container and pod fields, restartPolicy, backoffLimit), which the
  TrainJob then references instead of the stock runtime.

Settings that Trainer v2.3 cannot express at all (v1's run policies) are located errors:
:func:`trainjob_problems`. An elastic range ``nnodes: MIN:MAX`` (no Trainer release has an
elastic policy: KEP-2903) is ours: MAX pods, elastic-launch ``--min-nodes MIN`` meeting at node
0, and our runtime's Job and JobSet policies (docs/trainer-v2.md, "Elastic TrainJobs").

The same pod as the PyTorchJob's Worker is the starting point
(:func:`elastic_compile.targets.pod.build_pod_template`), so the two targets never disagree
about the pod.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from elastic_compile import contract
from elastic_compile.schema import ElasticSpec
from elastic_compile.schema.models import ObjectMetadata
from elastic_compile.targets.checks import FieldPath
from elastic_compile.targets.launcher import GRACE_MARGIN_SECONDS, command_comment, launcher_args
from elastic_compile.targets.pod import build_pod_template, job_labels, object_metadata
from elastic_compile.targets.trainjob import api

#: Where Trainer's Volcano plugin reads the PodGroup's queue: the JobSet-level annotations of the
#: runtime and its patches (kubeflow/trainer@v2.3.0:pkg/runtime/framework/plugins/volcano/volcano.go:180-184).
VOLCANO_QUEUE_ANNOTATION = "scheduling.volcano.sh/queue-name"

#: Our runtimePatches manager: a domain-prefixed path, as the JobSet plugin's webhook requires.
PATCH_MANAGER = "elastic-compile.dev/compiler"

# The 11 keys of a PodSpecPatch (trainjob_types.go); containers and initContainers are handled apart.
_POD_PATCH_KEYS = (
    "serviceAccountName", "volumes", "imagePullSecrets", "securityContext", "nodeSelector",
    "affinity", "tolerations", "schedulingGates", "terminationGracePeriodSeconds",
)  # fmt: skip
# A ContainerPatch is {name, env, volumeMounts, securityContext}; env on node is refused
# by the webhook and goes to trainer.env instead.
_CONTAINER_PATCH_KEYS = ("volumeMounts", "securityContext")
# What spec.trainer carries for the node container.
_TRAINER_KEYS = ("name", "image", "command", "args", "env", "resources")


@dataclass(frozen=True)
class TrainJobPlan:
    """Everything the TrainJob and TrainingRuntime templates print, already decided."""

    name: str
    namespace: str | None
    labels: dict[str, str]
    annotations: dict[str, str]
    runtime_ref: dict[str, str]
    trainer: dict[str, Any]
    runtime_patches: list[dict[str, Any]]
    suspend: bool
    active_deadline_seconds: int | None
    #: metadata and spec of our TrainingRuntime, or None when the referenced runtime suffices.
    runtime: dict[str, Any] | None
    launcher_args: tuple[str, ...]
    #: spec.initializer, as the spec gives it (trainjob.initializer), or None.
    initializer: dict[str, Any] | None = None

    @property
    def metadata(self) -> dict[str, Any]:
        """The TrainJob's metadata."""
        return object_metadata(self.name, self.namespace, self.labels, self.annotations)

    def runtime_jobs(self) -> dict[str, frozenset[str]] | None:
        """Replicated job -> its container names, of the runtime referenced; None when unknown."""
        if self.runtime is not None:
            jobs: dict[str, frozenset[str]] = {}
            for rjob in self.runtime["spec"]["template"]["spec"]["replicatedJobs"]:
                pod = rjob["template"]["spec"]["template"]["spec"]
                names = [c["name"] for c in [*pod.get("containers", []), *pod.get("initContainers", [])]]
                jobs[rjob["name"]] = frozenset(names)
            return jobs
        if self.runtime_ref == {"apiGroup": api.GROUP, "kind": api.CLUSTER_TRAINING_RUNTIME, "name": api.STOCK_RUNTIME}:
            return dict(api.STOCK_JOBS)
        return None


# --------------------------------------------------------------------------- what v2 cannot carry


def num_proc_per_node(spec: ElasticSpec) -> int | None:
    """The integer numProcPerNode (Trainer v2.2+ takes no keyword); None when none can be decided here.

    ``gpu``, and ``auto`` on an accelerator node, mean one process per accelerator, which is
    the units the pod requests (NVIDIA, AMD, Intel, Gaudi, Neuron: core/resources.py); ``cpu``
    (and ``auto`` without accelerators) count the node's CPUs, which only the container can see.
    """
    nproc = spec.nproc_per_node
    if isinstance(nproc, int):
        return nproc
    units = spec.resources.accelerator_units()
    return units if nproc in ("gpu", "auto") and units > 0 else None


def _runtime_needs(spec: ElasticSpec) -> list[tuple[FieldPath, str]]:
    """Each setting that only a TrainingRuntime of ours can carry: (where, what it is)."""
    needs: list[tuple[FieldPath, str]] = []
    base: FieldPath = ("pod_template", "spec")
    pod = spec.pod_template.spec
    for i, container in enumerate(pod.get("containers") or []):
        if container.get("name") != contract.TRAINING_CONTAINER:
            needs.append(((*base, "containers", i), f"the sidecar {container.get('name')}"))
            continue
        for key in container:
            if key not in (*_TRAINER_KEYS, *_CONTAINER_PATCH_KEYS):
                needs.append(((*base, "containers", i, key), f"{key} of the training container"))
    for i, container in enumerate(pod.get("initContainers") or []):
        needs.append(((*base, "initContainers", i), f"the init container {container.get('name')}"))
    for key in pod:
        if key not in (*_POD_PATCH_KEYS, "containers", "initContainers"):
            needs.append(((*base, key), f"the pod's {key}"))
    if spec.nnodes.elastic:
        needs.append((
            ("nnodes",),
            "an elastic range (the node Job's successPolicy, restartPolicy and the JobSet's failurePolicy)",
        ))  # fmt: skip
    if "restart_policy" in spec.model_fields_set and spec.restart_policy == "Never":
        needs.append((("restart_policy",), "restartPolicy Never"))
    if spec.run_policy.backoff_limit is not None:
        needs.append((("run_policy", "backoff_limit"), "the Job's backoffLimit"))
    return needs


def trainjob_problems(spec: ElasticSpec) -> list[tuple[FieldPath, str]]:
    """Settings that a TrainJob for Trainer v2.3 cannot carry, each with its field path.

    Values left at their schema default never appear here; a value the user chose and
    Trainer v2 cannot honour is an error, never a silent drop.
    """
    problems: list[tuple[FieldPath, str]] = []
    set_fields = spec.model_fields_set
    limit = api.name_limit(spec.nnodes.max)
    if len(spec.name) > limit:
        problems.append((
            ("name",),
            f"at most {limit} characters under -t trainjob ({len(spec.name)} given): JobSet names the pods "
            f"<name>-node-0-<index>-<5 random characters>, which must fit 63 for {spec.nnodes.max} node(s)",
        ))  # fmt: skip
    if num_proc_per_node(spec) is None:
        problems.append((
            ("nproc_per_node",),
            "Trainer v2.3 takes a number of processes per node (numProcPerNode is an integer) and only the "
            "container can count its CPUs; write the number, e.g. 4",
        ))  # fmt: skip
    rdzv = spec.rdzv
    if rdzv.backend != "c10d":
        problems.append((
            ("rdzv", "backend"),
            "Trainer v2 points every pod at node 0 (PET_MASTER_ADDR), where elastic-launch hosts a c10d "
            "rendezvous; use c10d",
        ))  # fmt: skip
    if rdzv.host is not None:
        problems.append(
            (("rdzv", "host"), "Trainer v2 fixes the rendezvous host at node 0 (PET_MASTER_ADDR); remove it")
        )
    if rdzv.port is not None:
        problems.append((
            ("rdzv", "port"),
            f"Trainer v2 fixes the rendezvous port at {api.MASTER_PORT} (PET_MASTER_PORT); remove it",
        ))  # fmt: skip
    if "is_host" in rdzv.conf:
        problems.append((
            ("rdzv", "conf", "is_host"),
            "Trainer v2 gives node rank 0 the store (elastic-launch --rdzv-at-master decides is_host from "
            "PET_NODE_RANK and refuses it here in every pod); remove it",
        ))  # fmt: skip
    if "restart_policy" in set_fields and spec.restart_policy in ("ExitCode", "Always"):
        problems.append((
            ("restart_policy",),
            f"Trainer v2 runs the pods under Jobs, which restart them OnFailure (the default) or Never; "
            f"{spec.restart_policy} is a training-operator v1 policy",
        ))  # fmt: skip
    rp = spec.run_policy
    if "clean_pod_policy" in rp.model_fields_set:
        problems.append((
            ("run_policy", "clean_pod_policy"),
            "a TrainJob has no cleanPodPolicy (finished pods stay until the TrainJob is deleted); remove it",
        ))  # fmt: skip
    if rp.ttl_seconds_after_finished is not None:
        problems.append((
            ("run_policy", "ttl_seconds_after_finished"),
            "a TrainJob has no TTL at Trainer v2.3, and a JobSet TTL in a runtime makes v2.3 recreate a failed "
            "job without end (kubeflow/trainer#3779); remove it",
        ))  # fmt: skip
    if rp.managed_by is not None:
        problems.append((
            ("run_policy", "managed_by"),
            "runPolicy.managedBy is the PyTorchJob's; elastic-compile does not write a TrainJob's managedBy",
        ))  # fmt: skip
    scheduling = rp.scheduling
    if scheduling is not None:
        why = {
            "min_available": "Trainer's gang scheduling (the runtime's podGroupPolicy) always gangs every pod",
            "priority_class": "set pod_template.spec.priorityClassName (a TrainingRuntime of ours carries it)",
            "schedule_timeout_seconds": "it belongs to a runtime's podGroupPolicy.coscheduling, which needs the "
            "coscheduling plugin",
        }
        for field, reason in why.items():
            derived = spec.derived_note(f"run_policy.scheduling.{field}") is not None  # ours, not the user's
            if getattr(scheduling, field) is not None and not derived:
                problems.append((("run_policy", "scheduling", field), f"a TrainJob has no schedulingPolicy: {reason}"))
        if scheduling.queue is not None:
            # One meaning: the gang scheduler's queue, runPolicy.schedulingPolicy.queue of a PyTorchJob
            # (kubeflow/trainer@v1.9.4:pkg/apis/kubeflow.org/v1/common_types.go SchedulingPolicy). Up to
            # issue 27 -t trainjob wrote it as Kueue's label instead: say where each meaning goes now.
            problems.append((
                ("run_policy", "scheduling", "queue"),
                "a TrainJob has no schedulingPolicy, and this is the gang scheduler's queue of a PyTorchJob "
                f"(runPolicy.schedulingPolicy.queue); for Kueue's LocalQueue (the label {api.LABEL_KUEUE_QUEUE}, "
                "which -t trainjob wrote from this field before) write kueue: {queue: ...}; for Volcano's queue "
                f"write trainjob.jobset_metadata.annotations {{{VOLCANO_QUEUE_ANNOTATION}: ...}}, which Trainer's "
                "Volcano plugin reads when the runtime has podGroupPolicy.volcano",
            ))  # fmt: skip
    for i, container in enumerate(spec.pod_template.spec.get("containers") or []):
        if container.get("name") == api.NODE:
            problems.append((
                ("pod_template", "spec", "containers", i, "name"),
                f"{api.NODE} is Trainer's training container (ours, named {contract.TRAINING_CONTAINER} in the "
                "spec); rename the sidecar",
            ))  # fmt: skip
    initializer = spec.trainjob.initializer
    if initializer is not None and (_runtime_needs(spec) or spec.trainjob.own_runtime == "always"
                                    or spec.trainjob.runtime == api.STOCK_RUNTIME):  # fmt: skip
        kinds = " and ".join(f"{key}-initializer" for key in initializer)
        problems.append((
            ("trainjob", "initializer"),
            f"Trainer runs it in the runtime's {kinds} job, which the stock torch-distributed and a runtime of ours "
            "do not have (its webhook refuses the TrainJob); name your runtime that has it in trainjob.runtime",
        ))  # fmt: skip
    problems += _env_reference_problems(spec)
    problems += _runtime_problems(spec)
    return problems


def _env_reference_problems(spec: ElasticSpec) -> list[tuple[FieldPath, str]]:
    """``$(PET_...)`` in an env value never expands: the plugin appends PET_* after trainer.env (torch.go)."""
    problems: list[tuple[FieldPath, str]] = []
    entries = list(spec.env.items()) if isinstance(spec.env, dict) else [(e.name, e.value) for e in spec.env]
    for index, (name, value) in enumerate(entries):
        if value is not None and "$(PET_" in value:
            where: FieldPath = ("env", name) if isinstance(spec.env, dict) else ("env", index, "value")
            problems.append((
                where,
                "Trainer v2 appends the PET_* variables after this env, so Kubernetes leaves $(PET_...) here "
                "unexpanded; read the variable in your program, or pass it in command",
            ))  # fmt: skip
    return problems


def _runtime_problems(spec: ElasticSpec) -> list[tuple[FieldPath, str]]:
    """A runtime of ours that is needed but turned off, or that would replace the runtime the user named."""
    settings = spec.trainjob
    needs = _runtime_needs(spec)
    if settings.own_runtime == "never":
        return [
            (
                where,
                f"{what} needs a TrainingRuntime of ours (runtimePatches cannot carry it), and "
                "trainjob.own_runtime is never; "
                + (
                    f"give a fixed count such as {spec.nnodes.max}, or let elastic-compile emit its runtime"
                    if where == ("nnodes",)
                    else "remove it, or move it into your runtime"
                ),
            )
            for where, what in needs
        ]
    named = {"runtime", "runtime_kind"} & settings.model_fields_set
    if named and (needs or settings.own_runtime == "always"):
        why = needs[0][1] if needs else "trainjob.own_runtime: always"
        return [
            (
                ("trainjob", sorted(named)[0]),
                f"{why} makes the TrainJob reference a TrainingRuntime of ours instead of the runtime named "
                "here; remove this, or move that setting into your runtime and set trainjob.own_runtime: never",
            )
        ]
    return []


def runtime_reference(spec: ElasticSpec) -> tuple[dict[str, str], bool]:
    """The compiled TrainJob's runtimeRef, and whether it names a TrainingRuntime of ours (emitted with it)."""
    settings = spec.trainjob
    if _runtime_needs(spec) or settings.own_runtime == "always":
        return {"apiGroup": api.GROUP, "kind": api.TRAINING_RUNTIME, "name": spec.name}, True
    return {"apiGroup": api.GROUP, "kind": settings.runtime_kind, "name": settings.runtime}, False


# --------------------------------------------------------------------------- the plan


def _rendezvous_args(spec: ElasticSpec) -> list[str]:
    """Where elastic-launch meets: node 0, at the address and port the torch plugin injects.

    ``--rdzv-at-master`` (contract.py) makes elastic-launch run c10d at
    PET_MASTER_ADDR:PET_MASTER_PORT with min == max == PET_NNODES, the pod with
    PET_NODE_RANK 0 hosting the store: the plugin injects no PET_RDZV_* (pkg/runtime/framework/plugins/torch/torch.go).
    """
    args: list[str] = [contract.OPT_RDZV_AT_MASTER]
    if spec.nnodes.elastic:
        # The TrainJob has MAX pods (PET_NNODES, reserved by Trainer); the lower bound is ours.
        args += [contract.OPT_MIN_NODES, str(spec.nnodes.min)]
    if spec.rdzv.id is not None:
        args += [contract.OPT_RDZV_ID, spec.rdzv.id]
    return args


def _split_pod(spec: ElasticSpec, args: list[str]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The v1 worker pod (built from a deep copy of the spec), split into (node container, the rest of
    the pod spec, pod metadata). Its sidecars are native sidecars already, in initContainers."""
    template = build_pod_template(
        spec,
        args,
        spec.shutdown_timeout + GRACE_MARGIN_SECONDS,
        downward=contract.TRAINJOB_DOWNWARD_ENV,
    )
    pod = template["spec"]
    [node] = pod.pop("containers")
    return node, pod, template.get("metadata", {})


def _runtime(spec: ElasticSpec, node_rest: dict[str, Any], pod_rest: dict[str, Any]) -> dict[str, Any]:
    """Our TrainingRuntime: the stock runtime's shape (manifests/base/runtimes/torch_distributed.yaml) plus what no
    patch can carry.

    It passes the runtime webhook (job ``node`` with the trainer ancestor label, one
    replica, container ``node``), has the framework label the SDK needs, sets no
    ``network.subdomain`` (PET_MASTER_ADDR assumes the TrainJob's name) and no JobSet TTL
    (#3779). Sidecars are native sidecars (init containers with restartPolicy Always,
    targets/pod.py), or the Job would never complete while they run.
    """
    inits = list(pod_rest.pop("initContainers", None) or [])
    pod_spec: dict[str, Any] = {}
    if "restart_policy" in spec.model_fields_set and spec.restart_policy in ("OnFailure", "Never"):
        pod_spec["restartPolicy"] = spec.restart_policy
    elif spec.nnodes.elastic:
        # JobSet's default, written out because the elastic semantics rest on it: a failed
        # container restarts in place and its agent rejoins the rendezvous (docs/trainer-v2.md).
        pod_spec["restartPolicy"] = "OnFailure"
    if inits:
        pod_spec["initContainers"] = inits
    pod_spec["containers"] = [{"name": api.NODE, "image": spec.image, **node_rest}]
    pod_spec.update(pod_rest)
    job_spec: dict[str, Any] = {}
    if spec.run_policy.backoff_limit is not None:
        job_spec["backoffLimit"] = spec.run_policy.backoff_limit
    if spec.nnodes.elastic:
        job_spec["podReplacementPolicy"] = api.ELASTIC_POD_REPLACEMENT
        job_spec["successPolicy"] = copy.deepcopy(api.ELASTIC_SUCCESS_POLICY)
    job_spec["template"] = {"spec": pod_spec}
    labels = {api.LABEL_FRAMEWORK: api.FRAMEWORK_TORCH}
    jobset_spec: dict[str, Any] = {}
    if spec.nnodes.elastic:
        jobset_spec["failurePolicy"] = copy.deepcopy(api.ELASTIC_FAILURE_POLICY)
    return {
        "metadata": object_metadata(spec.name, spec.namespace, labels, {}),
        "spec": {
            "mlPolicy": {"numNodes": spec.nnodes.max, "torch": {}},
            "template": {
                "spec": {
                    **jobset_spec,
                    "replicatedJobs": [
                        {
                            "name": api.NODE,
                            "replicas": 1,
                            "template": {
                                "metadata": {"labels": {api.LABEL_ANCESTOR: api.ANCESTOR_TRAINER}},
                                "spec": job_spec,
                            },
                        }
                    ],
                }
            },
        },
    }


def _metadata(meta: ObjectMetadata) -> dict[str, Any]:
    return {k: dict(v) for k, v in (("labels", meta.labels), ("annotations", meta.annotations)) if v}


def _patch(spec: ElasticSpec, pod_patch: dict[str, Any], pod_metadata: dict[str, Any]) -> dict[str, Any]:
    """Our one runtimePatches entry: the JobSet's and the node Job's metadata, the node job's pod.

    Trainer copies the JobSet-level metadata onto the JobSet (its runtime info's labels and
    annotations: T: pkg/runtime/core/trainingruntime.go:141-180) and merges the rest into the
    runtime's JobSet spec (T: trainingruntime.go:162, mergeRuntimePatches).
    """
    pod_template: dict[str, Any] = {}
    if pod_metadata:
        pod_template["metadata"] = pod_metadata
    pod_template["spec"] = pod_patch
    job_template: dict[str, Any] = {}
    job_meta = _metadata(spec.trainjob.job_metadata)
    if job_meta:
        job_template["metadata"] = job_meta
    job_template["spec"] = {"template": pod_template}
    node_job = {"name": api.NODE, "template": job_template}
    template: dict[str, Any] = {}
    jobset_meta = _metadata(spec.trainjob.jobset_metadata)
    if jobset_meta:
        template["metadata"] = jobset_meta
    template["spec"] = {"replicatedJobs": [node_job]}
    return {"manager": PATCH_MANAGER, "trainingRuntimeSpec": {"template": template}}


def spec_to_trainjob_plan(spec: ElasticSpec) -> TrainJobPlan:
    """Decide everything about the TrainJob of ``spec`` (``trainjob_problems`` must be empty)."""
    args = launcher_args(spec, policy_injected=False, rendezvous=_rendezvous_args(spec))
    node, pod_rest, pod_metadata = _split_pod(spec, list(args))

    trainer: dict[str, Any] = {
        "image": node.pop("image"),
        "command": node.pop("command"),
        "args": node.pop("args"),
        "env": node.pop("env"),
        "numNodes": spec.nnodes.max,
        "numProcPerNode": num_proc_per_node(spec),
    }
    if "resources" in node:
        trainer["resourcesPerNode"] = node.pop("resources")
    node.pop("name")

    container_patch: dict[str, Any] = {"name": api.NODE}
    container_patch.update({k: node.pop(k) for k in _CONTAINER_PATCH_KEYS if k in node})
    pod_patch: dict[str, Any] = {k: pod_rest.pop(k) for k in _POD_PATCH_KEYS if k in pod_rest}
    pod_patch["containers"] = [container_patch]
    ordered_patch = {k: pod_patch[k] for k in ("containers", *_POD_PATCH_KEYS) if k in pod_patch}

    ref, ours = runtime_reference(spec)
    runtime = _runtime(spec, node, pod_rest) if ours else None

    labels = job_labels(spec)
    return TrainJobPlan(
        name=spec.name,
        namespace=spec.namespace,
        labels=labels,
        annotations=dict(spec.annotations),
        runtime_ref=ref,
        trainer=trainer,
        runtime_patches=[_patch(spec, ordered_patch, pod_metadata)],
        suspend=spec.run_policy.suspend,
        active_deadline_seconds=spec.run_policy.active_deadline_seconds,
        runtime=runtime,
        launcher_args=args,
        initializer=spec.trainjob.initializer,
    )


def explain_layout(plan: TrainJobPlan, launcher: str) -> list[str]:
    """``--explain``'s lines on the TrainJob's layout: where the pods' settings went."""
    trainer = plan.trainer
    ref = plan.runtime_ref
    runtime = "a TrainingRuntime of ours, emitted first" if plan.runtime is not None else "on the cluster"
    return [
        f"# layout: TrainJob, {trainer['numNodes']} node(s) x numProcPerNode {trainer['numProcPerNode']}; "
        f"runtimeRef {ref['kind']} {ref['name']} ({runtime}); one runtimePatches entry "
        f"({plan.runtime_patches[0]['manager']})\n",
        "# rendezvous: c10d at node 0 (PET_MASTER_ADDR:PET_MASTER_PORT, injected by Trainer's torch plugin), "
        + (
            "which torch's hostname check finds to host the store\n"
            if launcher == "torchrun"
            else "which hosts the store: --rdzv-at-master\n"
        ),
        command_comment(trainer["command"], trainer["args"]),
    ]
