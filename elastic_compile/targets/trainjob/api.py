"""Facts of Kubeflow Trainer v2.3.0 and JobSet v0.12.0 that the TrainJob target relies on.

Each constant names the upstream fact it restates (T is kubeflow/trainer at v2.3.0, J is
kubernetes-sigs/jobset at v0.12.0). The local run
(:mod:`elastic_compile.localrun.trainer`) emulates the same facts, so both read them here.
"""

from __future__ import annotations

from typing import Final

from elastic_compile import contract

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

# JobSet labels every pod with its JobSet's name, which is the TrainJob's (J: api constants).
LABEL_JOBSET_NAME: Final = contract.LABEL_JOBSET_NAME

# Kueue reads the queue from the TrainJob's own labels.
LABEL_KUEUE_QUEUE: Final = "kueue.x-k8s.io/queue-name"

# The stock ClusterTrainingRuntime (T: manifests/base/runtimes/torch_distributed.yaml): one job `node`, one container
# `node`.
STOCK_RUNTIME: Final = "torch-distributed"
STOCK_JOBS: Final = {NODE: frozenset({NODE})}

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
