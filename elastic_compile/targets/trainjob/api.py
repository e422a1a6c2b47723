"""Facts of Kubeflow Trainer v2.3.0 and JobSet v0.12.0 that the TrainJob target relies on.

Each constant names the upstream fact it restates (T is kubeflow/trainer at v2.3.0, J is
kubernetes-sigs/jobset at v0.12.0). The local run
(:mod:`elastic_compile.localrun.trainer`) emulates the same facts, so both read them here.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from typing import Any, Final

from elastic_compile import contract
from elastic_compile.core.quantity import quantity_value

GROUP: Final = "trainer.kubeflow.org"
API_VERSION: Final = f"{GROUP}/v1alpha1"
TRAINJOB: Final = "TrainJob"
TRAINING_RUNTIME: Final = "TrainingRuntime"
CLUSTER_TRAINING_RUNTIME: Final = "ClusterTrainingRuntime"
RUNTIME_KINDS: Final = (CLUSTER_TRAINING_RUNTIME, TRAINING_RUNTIME)

# The trainer's replicated job and container: hard-coded by the torch plugin, which
# points PET_MASTER_ADDR at <trainjob>-node-0-0 (T: pkg/constants/constants.go:69).
NODE: Final = "node"
# The containers whose env the JobSet plugin's webhook refuses to patch (T:
# pkg/runtime/framework/plugins/jobset/jobset.go).
NO_ENV_PATCH: Final = ("node", "dataset-initializer", "model-initializer")

# Runtime labels (T: pkg/webhooks/trainingruntime_webhook.go; the kubeflow SDK 0.5.0): the SDK lists only runtimes
# with the framework label, and
# the runtime webhook checks the job that carries the ancestor label.
LABEL_FRAMEWORK: Final = f"{GROUP}/framework"
FRAMEWORK_TORCH: Final = "torch"
LABEL_ANCESTOR: Final = f"{GROUP}/trainjob-ancestor-step"
ANCESTOR_TRAINER: Final = "trainer"
ANCESTOR_CONTAINERS: Final = {"trainer": "node", "dataset-initializer": "dataset-initializer",
                              "model-initializer": "model-initializer"}  # fmt: skip

# What the torch plugin upserts into the node container, after the runtime's env and
# trainer.env (T: pkg/runtime/framework/plugins/torch/torch.go); the webhook refuses these names in
# trainer.env (torch.go, pkg/constants/constants.go).
PET_NNODES: Final = contract.PET_NNODES
PET_NPROC_PER_NODE: Final = contract.PET_NPROC_PER_NODE
PET_NODE_RANK: Final = contract.PET_NODE_RANK
PET_MASTER_ADDR: Final = contract.PET_MASTER_ADDR
PET_MASTER_PORT: Final = contract.PET_MASTER_PORT
RESERVED_ENV: Final = contract.TRAINER_RESERVED_ENV
MASTER_PORT: Final = 29500  # T: constants.go:72, also added as containerPort on node
# PET_NODE_RANK comes from the Job's completion index through the downward API (T: torch.go).
COMPLETION_INDEX_ANNOTATION: Final = "batch.kubernetes.io/job-completion-index"
#: spec.managedBy as the TrainJob CRD defaults it (Trainer's own controller reconciles the job).
DEFAULT_MANAGED_BY: Final = f"{GROUP}/trainjob-controller"

# JobSet labels every pod with its JobSet's name, which is the TrainJob's (J: api constants).
LABEL_JOBSET_NAME: Final = contract.LABEL_JOBSET_NAME

# Kueue reads the queue from the TrainJob's own labels.
LABEL_KUEUE_QUEUE: Final = "kueue.x-k8s.io/queue-name"

# The stock ClusterTrainingRuntime (T: manifests/base/runtimes/torch_distributed.yaml): one job `node`, one container
# `node`.
#: An elastic TrainJob's node Job succeeds when node 0 has (batch/v1 JobSpec.successPolicy,
#: Indexed Jobs, GA in Kubernetes 1.33): node 0 hosts the rendezvous store, so it is in every
#: round, and the pods that never joined (Pending for want of capacity) must not hold the Job
#: open; once the rule is met the Job controller removes the lingering pods.
ELASTIC_SUCCESS_POLICY: Final[dict[str, Any]] = {"rules": [{"succeededIndexes": "0"}]}
#: An elastic TrainJob's node Job creates a pod for a lost index only once the old pod is Failed,
#: not while it terminates (batch/v1 JobSpec.podReplacementPolicy; Kubernetes' default for an
#: Indexed Job is TerminatingOrFailed): two pods of index 0 would be two rendezvous stores, each
#: able to gather its own world.
ELASTIC_POD_REPLACEMENT: Final = "Failed"
#: An elastic TrainJob's JobSet: a failed node Job fails the JobSet at once. Recovery lives inside
#: the Job (restarts in place, replaced pods, the rendezvous re-forming); a JobSet restart would
#: recreate every pod and reset the Job's backoffLimit count, (maxRestarts + 1) x backoffLimit
#: failures in all (jobset v0.12.0 api/jobset/v1alpha2/jobset_types.go FailurePolicy).
ELASTIC_FAILURE_POLICY: Final[dict[str, Any]] = {"maxRestarts": 0}
#: The node Job's backoffLimit when the runtime writes none (ours without run_policy.backoff_limit,
#: the stock torch-distributed): the API server fills in Kubernetes' default (batch/v1
#: JobSpec.backoffLimit), as the real control plane shows (tests/realcluster/test_trainjob_elastic.py).
#: Under restartPolicy OnFailure it counts container restarts as well as failed pods.
JOB_BACKOFF_LIMIT_DEFAULT: Final = 6
STOCK_RUNTIME: Final = "torch-distributed"
STOCK_JOBS: Final = {NODE: frozenset({NODE})}
STOCK_IMAGE: Final = "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime"  # torch_distributed.yaml:38
_STOCK_RUNTIME_DOC: Final[dict[str, Any]] = {
    "apiVersion": API_VERSION,
    "kind": CLUSTER_TRAINING_RUNTIME,
    "metadata": {"name": STOCK_RUNTIME, "labels": {LABEL_FRAMEWORK: FRAMEWORK_TORCH}},
    "spec": {
        "mlPolicy": {"numNodes": 1, "torch": {}},
        "template": {"spec": {"replicatedJobs": [{
            "name": NODE,
            "template": {
                "metadata": {"labels": {LABEL_ANCESTOR: ANCESTOR_TRAINER}},
                "spec": {"template": {"spec": {"containers": [{"name": NODE, "image": STOCK_IMAGE}]}}},
            },
        }]}},
    },
}  # fmt: skip


def stock_runtime() -> dict[str, Any]:
    """The stock torch-distributed ClusterTrainingRuntime (T: manifests/base/runtimes/torch_distributed.yaml)."""
    return copy.deepcopy(_STOCK_RUNTIME_DOC)


def is_stock(ref: Mapping[str, Any]) -> bool:
    """Whether a runtimeRef names the stock runtime (kind and apiGroup default as the CRD defaults them)."""
    return (
        ref.get("name") == STOCK_RUNTIME
        and ref.get("kind", CLUSTER_TRAINING_RUNTIME) == CLUSTER_TRAINING_RUNTIME
        and ref.get("apiGroup", GROUP) == GROUP
    )


# --------------------------------------------------------------------------- the torch plugin's process count


def _ceil(raw: Any) -> int:
    """A quantity as Go's resource.Quantity.Value() gives it: rounded up to an integer (0 for none)."""
    value = quantity_value(str(raw)) if raw is not None else None
    return math.ceil(value) if value is not None else 0


def gpus_per_node(resources: Mapping[str, Any]) -> int:
    """What the plugin counts as GPUs: a resource whose name holds "gpu", requests first, then limits
    (T: pkg/runtime/runtime.go:280-298). ``aws.amazon.com/neuron`` or ``nvidia.com/mig-1g.10gb`` are none."""
    for side in ("requests", "limits"):
        values = resources.get(side) or {}
        found = [_ceil(v) for k, v in values.items() if "gpu" in str(k).lower()] if isinstance(values, Mapping) else []
        if any(found):
            return max(found)
    return 0


def cpus_per_node(resources: Mapping[str, Any]) -> int:
    """The plugin's CPU count: the request, else the limit, rounded up; 0 for none (T: torch.go:227-240)."""
    requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
    request = _ceil(requests.get("cpu")) if isinstance(requests, Mapping) else 0
    if request:
        return request
    return _ceil(limits.get("cpu")) if isinstance(limits, Mapping) else 0


def plugin_nproc(trainer: Mapping[str, Any], runtime_resources: Mapping[str, Any] | None) -> str:
    """PET_NPROC_PER_NODE as the torch plugin sets it (T: torch.go:121-135).

    ``trainer.numProcPerNode`` when given; else ``auto`` when the node asks for a GPU-like
    resource, else max(1, its CPUs). The node's resources are ``trainer.resourcesPerNode``
    when given (alone: T: torch.go:127-130), else the runtime's node container's
    (T: pkg/runtime/runtime.go:254-277).
    """
    if trainer.get("numProcPerNode") is not None:
        return str(trainer["numProcPerNode"])
    given = trainer.get("resourcesPerNode")
    resources = given if isinstance(given, Mapping) else (runtime_resources or {})
    if gpus_per_node(resources) > 0:
        return "auto"
    return str(max(1, cpus_per_node(resources)))


def runtime_node_resources(runtime: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The resources of the runtime's node container (T: pkg/runtime/runtime.go:254-277), or None."""
    spec = runtime.get("spec") if isinstance(runtime.get("spec"), Mapping) else {}
    template = spec.get("template") if isinstance(spec, Mapping) else None
    jobs = (template.get("spec") or {}).get("replicatedJobs") if isinstance(template, Mapping) else None
    for rjob in jobs if isinstance(jobs, list) else []:
        if not isinstance(rjob, Mapping):
            continue
        rtemplate = rjob.get("template") or {}
        labels = ((rtemplate.get("metadata") or {}).get("labels") or {}) if isinstance(rtemplate, Mapping) else {}
        if rjob.get("name") != NODE and labels.get(LABEL_ANCESTOR) != ANCESTOR_TRAINER:
            continue
        pod = ((rtemplate.get("spec") or {}).get("template") or {}).get("spec") or {}
        for container in pod.get("containers") or []:
            if isinstance(container, Mapping) and container.get("name") == NODE and container.get("resources"):
                resources = container["resources"]
                return resources if isinstance(resources, Mapping) else None
    return None


# JobSet pod names are <trainjob>-node-<job index 0>-<pod index>-<5 random>, at most 63
# characters, so the TrainJob name may have 63 - len("-node-0-") - digits - len("-xxxxx")
# = 49 - digits(numNodes - 1) characters. The CEL rule only checks 63 and JobSet
# rejects the rest later, with no status on the TrainJob (#2735).
POD_NAME_MAX: Final = 63
POD_NAME_OVERHEAD: Final = len("-node-0-") + len("-xxxxx")


def name_limit(num_nodes: int) -> int:
    """The longest TrainJob name whose last JobSet pod name still fits 63 characters."""
    return POD_NAME_MAX - POD_NAME_OVERHEAD - len(str(max(num_nodes, 1) - 1))


def master_addr(name: str) -> str:
    """PET_MASTER_ADDR: node-0's hostname under the JobSet's headless Service (T: torch.go:159-162)."""
    return f"{name}-{NODE}-0-0.{name}"


# --------------------------------------------------------------------------- runtimePatches

# Strategic-merge keys of the lists a runtime patch touches (the CRDs' list-map keys and
# Kubernetes' patchMergeKey tags); any other list is replaced whole, as Kubernetes does.
MERGE_KEYS: Final = {
    "replicatedJobs": "name", "containers": "name", "initContainers": "name", "volumes": "name",
    "env": "name", "volumeMounts": "mountPath", "imagePullSecrets": "name", "ports": "containerPort",
    "schedulingGates": "name", "runtimePatches": "manager",
}  # fmt: skip


def strategic_merge(base: Any, patch: Any, field: str = "") -> Any:
    """``patch`` merged onto ``base`` the way Trainer applies runtimePatches (a copy; inputs untouched)."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = copy.deepcopy(base)
        for key, value in patch.items():
            out[key] = strategic_merge(out[key], value, key) if key in out else copy.deepcopy(value)
        return out
    key = MERGE_KEYS.get(field)
    if key is not None and isinstance(base, list) and isinstance(patch, list):
        merged = [copy.deepcopy(item) for item in base]
        for item in patch:
            at = next((i for i, b in enumerate(merged) if isinstance(b, dict) and b.get(key) == item.get(key)), None)
            if at is None:
                merged.append(copy.deepcopy(item))
            else:
                merged[at] = strategic_merge(merged[at], item)
        return merged
    return copy.deepcopy(patch)
