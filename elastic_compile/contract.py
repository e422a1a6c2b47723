"""The contract between the compiler and ``elastic-launch``.

Both sides import this module and nothing else from each other: the compiler writes
these names into manifests, the entrypoint reads them inside the pod. Keep it free of
third-party imports (it runs in training images that may lack pydantic or jinja2).
"""

from __future__ import annotations

from typing import Final

# The Kubeflow training operator only treats a container named ``pytorch`` as the
# training container: the webhook rejects jobs without one, and ExitCode restarts and
# the rendezvous port look only at it (training-operator v1.9.4: pkg/webhooks/pytorch/pytorchjob_webhook.go,
# pkg/apis/kubeflow.org/v1/pytorch_defaults.go, pkg/controller.v1/common/pod.go).
TRAINING_CONTAINER: Final = "pytorch"

# Operator default port for the rendezvous (``pytorchjob-port``). The operator appends
# this port itself; we declare a port with this name only to move it.
OPERATOR_PORT_NAME: Final = "pytorchjob-port"
OPERATOR_DEFAULT_PORT: Final = 23456

# Labels the operator puts on every pod it creates (training-operator v1.9.4: pkg/apis/kubeflow.org/v1/common_types.go).
LABEL_JOB_NAME: Final = "training.kubeflow.org/job-name"
LABEL_REPLICA_TYPE: Final = "training.kubeflow.org/replica-type"
LABEL_REPLICA_INDEX: Final = "training.kubeflow.org/replica-index"

# Environment the compiler adds through the downward API, read by elastic-launch.
ENV_POD_IP: Final = "ELASTIC_LAUNCH_POD_IP"  # status.podIP -> LaunchConfig.local_addr
ENV_POD_NAME: Final = "ELASTIC_LAUNCH_POD_NAME"  # metadata.name
ENV_JOB_NAME: Final = "ELASTIC_LAUNCH_JOB_NAME"  # label training.kubeflow.org/job-name
ENV_NAMESPACE: Final = "ELASTIC_LAUNCH_NAMESPACE"  # metadata.namespace

DOWNWARD_ENV: Final[tuple[tuple[str, str], ...]] = (
    (ENV_POD_IP, "status.podIP"),
    (ENV_POD_NAME, "metadata.name"),
    (ENV_NAMESPACE, "metadata.namespace"),
    (ENV_JOB_NAME, f"metadata.labels['{LABEL_JOB_NAME}']"),
)

# What the operator injects (training-operator v1.9.4: pkg/controller.v1/pytorch/envvar.go, elastic.go).
# elastic-launch reads them.
PET_NNODES: Final = "PET_NNODES"
PET_NPROC_PER_NODE: Final = "PET_NPROC_PER_NODE"
PET_RDZV_ENDPOINT: Final = "PET_RDZV_ENDPOINT"
PET_RDZV_BACKEND: Final = "PET_RDZV_BACKEND"
PET_MAX_RESTARTS: Final = "PET_MAX_RESTARTS"
PET_RDZV_ID: Final = "PET_RDZV_ID"
PET_RDZV_CONF: Final = "PET_RDZV_CONF"

# Kubeflow Trainer v2 (TrainJob): its torch plugin injects these five into the container
# `node`, after trainer.env (so `$(VAR)` of them expands in command/args only, never in env),
# and its webhook rejects them in trainer.env (Trainer v2.3.0: pkg/runtime/framework/plugins/torch/torch.go,
# pkg/constants/constants.go). PET_NNODES is
# a plain integer; there is no PET_RDZV_*.
PET_NODE_RANK: Final = "PET_NODE_RANK"
PET_MASTER_ADDR: Final = "PET_MASTER_ADDR"
PET_MASTER_PORT: Final = "PET_MASTER_PORT"
TRAINER_RESERVED_ENV: Final = frozenset(
    {PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK, PET_MASTER_ADDR, PET_MASTER_PORT}
)

# What a compiled TrainJob passes to elastic-launch (in trainer.args, never env):
#   OPT_RDZV_AT_MASTER: c10d rendezvous at PET_MASTER_ADDR:PET_MASTER_PORT with
#     min == max == PET_NNODES (a failed worker restarts the worker group in place,
#     max_restarts times), or min == OPT_MIN_NODES for an elastic TrainJob; the pod with
#     PET_NODE_RANK 0 hosts the store (is_host true), every other pod is a client (is_host
#     false). A --nnodes range, another backend, an is_host key or a different endpoint are
#     usage errors (exit 2).
#   OPT_MAX_RESTARTS N: Trainer injects no PET_MAX_RESTARTS, so the count goes in args,
#     with the behaviour options the PyTorchJob gets (timeouts, monitor interval, ...).
# And in trainer.env, the downward-API entries of TRAINJOB_DOWNWARD_ENV: the run id
# defaults to <namespace>.<TrainJob name> (the JobSet, named after the TrainJob, labels its
# pods with it) and the pod IP becomes local_addr, exactly as for a PyTorchJob.
OPT_RDZV_AT_MASTER: Final = "--rdzv-at-master"
#: With OPT_RDZV_AT_MASTER: the elastic lower bound. The TrainJob runs PET_NNODES (MAX) pods and
#: the rendezvous is MIN:PET_NNODES. Ours, not PET_NNODES=MIN:MAX: Trainer's webhook reserves
#: PET_NNODES in trainer.env (v2.3.0 pkg/runtime/framework/plugins/torch/torch.go) and its
#: plugin overwrites it with the integer numNodes.
OPT_MIN_NODES: Final = "--min-nodes"
#: elastic-launch prints "elastic-launch: world size N: ..." each time its workers start (a
#: rendezvous round): run reads the world size from it to say when the job's size changes.
WORLD_SIZE_WORDS: Final = "world size "
LABEL_JOBSET_NAME: Final = "jobset.sigs.k8s.io/jobset-name"
TRAINJOB_DOWNWARD_ENV: Final[tuple[tuple[str, str], ...]] = (
    (ENV_POD_IP, "status.podIP"),
    (ENV_POD_NAME, "metadata.name"),
    (ENV_NAMESPACE, "metadata.namespace"),
    (ENV_JOB_NAME, f"metadata.labels['{LABEL_JOBSET_NAME}']"),
)

# Names users may not set: the operator appends its own entries after the user's in every
# layout we emit, so a user value is silently overridden (or duplicated) in the pod.
OPERATOR_ENV_NAMES: Final = frozenset({"PYTHONUNBUFFERED"})
OPERATOR_ENV_PREFIX: Final = "PET_"
# Set by torch elastic for every worker process, replacing whatever the container had (torch
# 2.13: LocalElasticAgent._start_workers's worker_env). The
# operator sets MASTER_*, WORLD_SIZE and RANK only in layouts with a Master replica, which we
# never emit (training-operator v1.9.4: pkg/controller.v1/pytorch/master.go), so a user value on the training
# container is dead.
WORKER_ENV_NAMES: Final = frozenset(
    {"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
     "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME", "TORCHELASTIC_RESTART_COUNT",
     "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_USE_AGENT_STORE"}
)  # fmt: skip
LAUNCHER_ENV_PREFIX: Final = "ELASTIC_LAUNCH_"

# torch shares the rank-0 agent's TCPStore across restarts by default, which breaks
# restarts and scale-up (pytorch#135712). elastic-launch sets this to "1" unless the
# user's environment already has a value.
ENV_DISABLE_SHARED_STORE: Final = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"

# Scratch space. elastic-launch needs a writable directory for worker logs and error files
# (torch's error.json, the root cause it reports), and Python's tempfile in the workers needs
# one too. It tries $TMPDIR, then SCRATCH_ORDER, and never the working directory; none
# writable is a permanent error (EXIT_USAGE, one line saying what to mount), not a retryable
# agent error that ExitCode would turn into endless pod recreation. When it falls back past a
# directory that failed, it sets TMPDIR for the workers to the one it chose.
# For the compiler: with readOnlyRootFilesystem the root's /tmp is read-only, so give the
# training container a writable one: an emptyDir mounted at SCRATCH_MOUNT (disk-backed; no
# env needed), or ENV_TMPDIR set to a writable mount (SHM_DIR when shared_memory is on:
# memory-backed, it counts against the memory limit).
ENV_TMPDIR: Final = "TMPDIR"
SCRATCH_MOUNT: Final = "/tmp"
SHM_DIR: Final = "/dev/shm"
SCRATCH_ORDER: Final = ("/tmp", "/var/tmp", "/usr/tmp", SHM_DIR)  # tempfile's list, then /dev/shm

# Where Kubernetes reads a container's termination message from by default.
DEFAULT_TERMINATION_LOG: Final = "/dev/termination-log"

# elastic-launch options the compiler writes into the manifest. The compiler builds the
# command line from these names, the entrypoint's parser defines them: one spelling.
OPT_NNODES: Final = "--nnodes"
OPT_NPROC_PER_NODE: Final = "--nproc-per-node"
OPT_RDZV_BACKEND: Final = "--rdzv-backend"
OPT_RDZV_ENDPOINT: Final = "--rdzv-endpoint"
OPT_RDZV_ID: Final = "--rdzv-id"
OPT_RDZV_CONF: Final = "--rdzv-conf"
OPT_MAX_RESTARTS: Final = "--max-restarts"
OPT_JOIN_TIMEOUT: Final = "--join-timeout"
OPT_LAST_CALL_TIMEOUT: Final = "--last-call-timeout"
OPT_CLOSE_TIMEOUT: Final = "--close-timeout"
OPT_HEARTBEAT_TIMEOUT: Final = "--heartbeat-timeout"
OPT_READ_TIMEOUT: Final = "--read-timeout"
OPT_MONITOR_INTERVAL: Final = "--monitor-interval"
OPT_START_METHOD: Final = "--start-method"
OPT_SHUTDOWN_TIMEOUT: Final = "--shutdown-timeout"
OPT_FUNCTION: Final = "--function"
OPT_RESULT: Final = "--result"
OPT_TERMINATION_LOG: Final = "--termination-log"
#: The hang watchdog (elastic.yaml's hang_timeout): seconds a worker may go without renewing
#: the file named by ENV_HEARTBEAT_FILE before it is stopped as hung (EXIT_HUNG).
OPT_HANG_TIMEOUT: Final = "--hang-timeout"
# What a compiled job passes when elastic.yaml leaves the setting unset, where it differs from
# elastic-launch's own default (torch's): the schema's defaults, named in elastic-launch --help.
#: rdzv.read_timeout: worker-0 hosts the store and its name resolves only once it is Ready,
#: so the other pods must outwait its image pull (torch's 60 s does not; flytekit#3419).
COMPILED_READ_TIMEOUT: Final = 900
#: max_restarts: losing a node or a transient NCCL error costs one restart, not the job.
COMPILED_MAX_RESTARTS: Final = 3
# Options only the user or the pod spec sets by hand (the compiler leaves them out).
OPT_LOCAL_ADDR: Final = "--local-addr"
OPT_LOG_DIR: Final = "--log-dir"
OPT_DRY_RUN: Final = "--dry-run"  # print the resolved settings as JSON and exit; runs nothing
OPT_DEBUG: Final = "--debug"

# With OPT_HANG_TIMEOUT, every worker gets this variable: the path of a file it renews (creates,
# or updates the modification time of) to show progress, e.g. once per training step. The
# watchdog arms at the first renewal.
ENV_HEARTBEAT_FILE: Final = "ELASTIC_LAUNCH_HEARTBEAT_FILE"

# Setting this to "1" has the same effect as OPT_DEBUG (tracebacks of agent errors).
ENV_DEBUG: Final = "ELASTIC_LAUNCH_DEBUG"

LAUNCHER: Final = "elastic-launch"
# launcher: torchrun runs the image's torchrun instead (the compiler's targets/launcher.py
# spells our settings for it); elastic-compile run starts it as this Python's.
TORCHRUN: Final = "torchrun"
# launcher: bundled: elastic-launch as one file in a ConfigMap the compiler emits, mounted
# read-only here and run by the image's python3 (targets/bundle.py). Tools that read a
# container's command (doctor, import) know it as elastic-launch by this path.
BUNDLE_MOUNT: Final = "/opt/elastic-launch"
BUNDLE_FILE: Final = "elastic-launch.py"
BUNDLE_PATH: Final = f"{BUNDLE_MOUNT}/{BUNDLE_FILE}"

# Exit codes. The operator's ExitCode restart policy treats 1-127 as permanent and
# 128-255 as retryable (training-operator v1.9.4: pkg/util/train/train_util.go IsRetryableExitCode).
# elastic-launch maps every outcome onto that split:
EXIT_USER_FAILURE: Final = 1  # a worker raised or exited 1-127 (its own code is kept when in range)
EXIT_USAGE: Final = 2  # bad options or environment: permanent, nothing ran
EXIT_SIGNAL_BASE: Final = 128  # agent or worker killed by signal N exits 128 + N (SIGTERM: 143)
EXIT_RENDEZVOUS_TIMEOUT: Final = 201  # not enough nodes joined within join_timeout: retryable
EXIT_RENDEZVOUS_ERROR: Final = 202  # store unreachable, rendezvous closed, peers lost: retryable
EXIT_AGENT_ERROR: Final = 203  # unexpected failure inside the agent itself: retryable
# The local workers failed only because a process on another node went away (its OOM kill,
# preemption, node loss): gloo/NCCL peer errors, a broken store connection. No evidence
# against the code here: retryable (entrypoint/failures.py says what counts).
EXIT_PEER_LOST: Final = 204
# A worker did not renew its heartbeat within OPT_HANG_TIMEOUT, in its last attempt: a hang
# that outlasted the in-place restarts is the code's (or its data's), so permanent; retrying
# it under ExitCode would recreate the pod without limit. timeout(1)'s code.
EXIT_HUNG: Final = 124
