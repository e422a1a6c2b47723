"""The Kubeflow training operator (v1.9.4), emulated: what it makes of a PyTorchJob, and its rules.

Given a PyTorchJob document (ours, or a kustomize overlay of it), this computes for each
pod its name, labels, command and exact environment: the container's own env (with the
downward API resolved) followed by what the operator appends (training-operator v1.9.4:
pkg/apis/kubeflow.org/v1/pytorch_defaults.go, pkg/controller.v1/pytorch/envvar.go and elastic.go),
and the rules by which the operator restarts, succeeds and fails the job (pytorchjob_controller.go,
pkg/controller.v1/common/pod.go, pkg/core/job.go). It is
what ``elastic-compile run`` starts locally, and what the end-to-end test uses to prove
that compiler and entrypoint agree. Only the rendezvous host and the pod IPs are mapped to
this machine.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from elastic_compile import contract
from elastic_compile.localrun.engine import Engine, accelerator_units, device_shares
from elastic_compile.localrun.kubelet import LOCAL_IP, Pod, config_map_mounts, expand, resolve_env
from elastic_compile.localrun.process import (
    DEFAULT_GRACE,
    EXIT_SIGNAL_BASE,
    MARKER_ENV,
    LocalPod,
    Options,
    RunError,
    base_env,
    free_port,
    local_argv,
    port_busy,
)
from elastic_compile.targets.pytorchjob.checks import pod_errors, webhook_errors

OPERATOR_NAME = "pytorchjob-controller"

RESTART_POLICIES: Final = ("OnFailure", "Always", "ExitCode", "Never")
CLEAN_POD_POLICIES: Final = ("All", "Running", "None")
_OPERATOR_ENV_SHOWN: Final = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK")


class ManifestError(ValueError):
    """The document is not a PyTorchJob this emulation understands."""


def _container(template: Mapping[str, Any]) -> Mapping[str, Any]:
    containers = template.get("spec", {}).get("containers") or []
    for c in containers:
        if c.get("name") == contract.TRAINING_CONTAINER:
            return dict(c)
    if not containers:
        raise ManifestError("the pod template has no containers")
    return dict(containers[0])  # the operator falls back to container 0 for its port (pytorch_defaults.go)


def _rdzv_port(policy: Mapping[str, Any], container: Mapping[str, Any]) -> int:
    if policy.get("rdzvPort") is not None:
        return int(policy["rdzvPort"])
    for port in container.get("ports") or []:
        if port.get("name") == contract.OPERATOR_PORT_NAME:
            return int(port["containerPort"])
    return contract.OPERATOR_DEFAULT_PORT


def operator_entries(job: Mapping[str, Any], replica_type: str, index: int) -> list[tuple[str, str]]:
    """The variables the operator appends to every container of a pod, in its order, a name
    repeated where it repeats one (setPodEnv, envvar.go:43-127; master.go:33-62; elastic.go:68-120).

    The order, held against the real operator's pods (tests/realcluster/test_pods_match_run.py):
    PYTHONUNBUFFERED; with a Master: MASTER_PORT, PET_MASTER_PORT, MASTER_ADDR, PET_MASTER_ADDR,
    WORLD_SIZE, RANK, PET_NODE_RANK; PET_NPROC_PER_NODE (spec.nprocPerNode, which the webhook
    defaults to auto unless elasticPolicy.nProcPerNode is set); then with an elasticPolicy:
    PET_RDZV_ENDPOINT, PET_RDZV_BACKEND, PET_NNODES, PET_MAX_RESTARTS, PET_NPROC_PER_NODE
    (elasticPolicy.nProcPerNode: a second entry, which wins), PET_RDZV_ID, PET_RDZV_CONF,
    PET_STANDALONE; without one, PET_NNODES (every replica).
    """
    spec = job["spec"]
    name = job["metadata"]["name"]
    replicas = spec["pytorchReplicaSpecs"]
    worker = replicas.get("Worker", {})
    worker_replicas = int(worker.get("replicas", 1))
    total = sum(int(r.get("replicas", 1)) for r in replicas.values())
    policy = spec.get("elasticPolicy")
    # The webhook's defaulting (pytorch_defaults.go setDefaultNprocPerNode).
    nproc = spec.get("nprocPerNode")
    if nproc is None and (policy is None or policy.get("nProcPerNode") is None):
        nproc = "auto"
    env: list[tuple[str, str]] = [("PYTHONUNBUFFERED", "1")]
    if "Master" in replicas:
        master_port = str(_rdzv_port({}, _container(replicas["Master"]["template"])))
        master = f"{name}-master-0"
        rank = str(0 if replica_type == "Master" else index + 1)
        nproc_int = int(nproc) if nproc is not None and str(nproc).isdigit() else 1
        env += [
            ("MASTER_PORT", master_port), ("PET_MASTER_PORT", master_port),
            ("MASTER_ADDR", master), ("PET_MASTER_ADDR", master),
            ("WORLD_SIZE", str(total * nproc_int)), ("RANK", rank), ("PET_NODE_RANK", rank),
        ]  # fmt: skip
    if nproc is not None:
        env.append((contract.PET_NPROC_PER_NODE, str(nproc)))
    if policy is None:
        env.append((contract.PET_NNODES, str(total)))
        return env
    lo, hi = policy.get("minReplicas"), policy.get("maxReplicas")
    lo, hi = (lo if lo is not None else hi), (hi if hi is not None else lo)
    if lo is None:  # neither: both default to the Worker replicas (the Master is not counted, #2277)
        lo = hi = worker_replicas
    host = policy.get("rdzvHost") or f"{name}-worker-0"
    env.append((contract.PET_RDZV_ENDPOINT, f"{host}:{_rdzv_port(policy, _container(worker['template']))}"))
    env.append((contract.PET_RDZV_BACKEND, policy.get("rdzvBackend") or "c10d"))
    env.append((contract.PET_NNODES, f"{lo}:{hi}"))
    if policy.get("maxRestarts") is not None:
        env.append((contract.PET_MAX_RESTARTS, str(policy["maxRestarts"])))
    if policy.get("nProcPerNode") is not None:
        env.append((contract.PET_NPROC_PER_NODE, str(policy["nProcPerNode"])))
    if policy.get("rdzvId") is not None:
        env.append((contract.PET_RDZV_ID, str(policy["rdzvId"])))
    if policy.get("rdzvConf") is not None:
        env.append((contract.PET_RDZV_CONF, ",".join(f"{kv['key']}={kv['value']}" for kv in policy["rdzvConf"])))
    if policy.get("standalone"):
        # The operator's broken rendering (elastic.go): torchrun's int("") then fails on it.
        env.append(("PET_STANDALONE", ""))
    return env


def operator_env(job: Mapping[str, Any], replica_type: str, index: int) -> dict[str, str]:
    """The variables the operator appends to every container of a pod, as the pod sees them (the
    later of a repeated name wins; :func:`operator_entries` has them in order)."""
    return dict(operator_entries(job, replica_type, index))


# The operator's own addresses of other pods: DNS names of headless services, which only
# exist in the cluster. Locally every pod is this machine.
_LOCAL_ADDRESS_ENV = ("MASTER_ADDR", "PET_MASTER_ADDR")


def _local_address(name: str, value: str) -> str:
    """``value`` with the cluster address it holds mapped to this machine."""
    if name == contract.PET_RDZV_ENDPOINT:
        return f"{LOCAL_IP}:{value.rpartition(':')[2]}"
    return LOCAL_IP if name in _LOCAL_ADDRESS_ENV else value


def pods(
    job: Mapping[str, Any],
    *,
    namespace: str = "default",
    local: bool = True,
    lookup: Mapping[str, str] | None = None,
) -> list[Pod]:
    """Every pod of ``job`` with the command and environment the operator would give it.

    With ``local``, the rendezvous host (``<job>-worker-0`` or ``rdzvHost``), the master
    address of Master jobs and every pod IP become 127.0.0.1, so the pods can run as
    processes on this machine. Env entries that need the cluster (secretKeyRef,
    configMapKeyRef, ...) take their value from ``lookup`` by variable name when it has
    one (``Pod.looked_up``) and are otherwise left out (``Pod.unresolved``).
    """
    if job.get("kind") != "PyTorchJob" or "pytorchReplicaSpecs" not in job.get("spec", {}):
        raise ManifestError("not a PyTorchJob with spec.pytorchReplicaSpecs")
    name = job["metadata"]["name"]
    namespace = job["metadata"].get("namespace", namespace)
    out: list[Pod] = []
    lead = "Master" if "Master" in job["spec"]["pytorchReplicaSpecs"] else "Worker"
    for replica_type in ("Master", "Worker"):
        replica = job["spec"]["pytorchReplicaSpecs"].get(replica_type)
        if replica is None:
            continue
        template = replica["template"]
        container = _container(template)
        for index in range(int(replica.get("replicas", 1))):
            pod_name = f"{name}-{replica_type.lower()}-{index}"
            labels = dict(template.get("metadata", {}).get("labels") or {})
            labels.update({
                "training.kubeflow.org/operator-name": OPERATOR_NAME,
                contract.LABEL_JOB_NAME: name,
                contract.LABEL_REPLICA_TYPE: replica_type.lower(),
                contract.LABEL_REPLICA_INDEX: str(index),
            })  # fmt: skip
            if index == 0 and replica_type == lead:  # job-role: master-0, or worker-0 without a Master
                labels["training.kubeflow.org/job-role"] = "master"
            facts = {
                "name": pod_name, "namespace": namespace, "ip": LOCAL_IP, "labels": labels,
                "annotations": dict(template.get("metadata", {}).get("annotations") or {}),
                "serviceAccountName": template.get("spec", {}).get("serviceAccountName", "default"),
            }  # fmt: skip
            operator = operator_entries(job, replica_type, index)
            if local:
                operator = [(k, _local_address(k, v)) for k, v in operator]
            # The operator appends its entries after the container's own, so the pod's env
            # list is both, in that order; a repeated name takes the later entry.
            entries = [*(container.get("env") or []), *({"name": k, "value": v} for k, v in operator)]
            env, unresolved, looked_up = resolve_env(entries, facts, lookup)
            words = [*(container.get("command") or []), *(container.get("args") or [])]
            argv = tuple(expand(str(a), env) for a in words)
            out.append(Pod(pod_name, replica_type, index, str(container.get("image", "")), argv, env,
                           str(replica.get("restartPolicy", "OnFailure")), labels, unresolved,
                           looked_up, config_map_mounts(template.get("spec") or {}, container)))  # fmt: skip
    return out


def check_job(job: Mapping[str, Any], label: str) -> None:
    """Reject what the cluster would reject: the operator's webhook, pod restart policies, pod values.

    Raises :class:`RunError` with every problem, one per line.
    """
    problems = webhook_errors(job) + pod_errors(job)
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


def _pytorch_container(template: Mapping[str, Any]) -> Mapping[str, Any]:
    containers = (template.get("spec") or {}).get("containers") or []
    for c in containers:
        if c.get("name") == contract.TRAINING_CONTAINER:
            return dict(c)
    return dict(containers[0]) if containers else {}


def _replicas(job: Mapping[str, Any]) -> dict[str, Any]:
    return dict(job["spec"]["pytorchReplicaSpecs"])


def requested_gpus(job: Mapping[str, Any]) -> int:
    """Accelerator units per pod (nvidia.com/gpu, amd.com/gpu, ...): the most a training container asks for."""
    containers = [_pytorch_container(replica.get("template") or {}) for replica in _replicas(job).values()]
    return max((accelerator_units(c.get("resources") or {}) for c in containers), default=0)


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
            if lo is None:  # the operator's default (pytorch_defaults.go), from the manifest as written
                lo = hi = old
            if not int(lo) <= opts.nodes <= int(hi):
                raise RunError(f"--nodes {opts.nodes}: outside the job's elasticPolicy range {lo}..{hi}")
            # Written out so that PET_NNODES stays what the manifest gives.
            policy["minReplicas"], policy["maxReplicas"] = int(lo), int(hi)
        replicas["Worker"]["replicas"] = opts.nodes
        if opts.nodes != old:
            notes.append(f"--nodes {opts.nodes}: Worker.replicas {opts.nodes} (was {old})")

    nproc = str(spec.get("nprocPerNode") or (policy or {}).get("nProcPerNode") or "auto")
    pod_total = pod_count(job)
    wanted = requested_gpus(job)
    per_pod = min(wanted, len(gpus) // max(1, pod_total))
    if opts.nproc_per_node is not None:
        new = str(opts.nproc_per_node)
        note: str | None = f"--nproc-per-node {new}: nprocPerNode {new} (was {nproc})"
    else:
        new, note = fit_nproc(nproc, gpus_requested=wanted, gpus_per_pod=per_pod, cpus=cpus, pods=pod_total)
    if note:
        notes.append(note)
    if new != nproc or (policy or {}).get("nProcPerNode") is not None:
        spec["nprocPerNode"] = new
        if policy is not None:
            policy.pop("nProcPerNode", None)  # the deprecated field would be Forbidden beside it

    if policy is not None and (policy.get("rdzvBackend") or "c10d") == "c10d":
        first = pods(job, local=True)[0]
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
    job: Mapping[str, Any],
    *,
    environ: Mapping[str, str],
    gpus: Sequence[str],
    token: str,
    given: Mapping[str, str] | None = None,
) -> tuple[list[LocalPod], list[str]]:
    """The local pods of ``job`` (operator env + container env + what this machine stands in for).

    Env entries that need the cluster (secretKeyRef, configMapKeyRef, ...) take their value
    only from ``given`` (``--env NAME=VALUE``), never from ``environ``: a shell's
    variables (a CI runner's tokens) reach a pod only when the user names them. From
    ``environ`` come only what an image would bring (:data:`BASE_ENV`).
    """
    notes: list[str] = []
    computed = pods(job, local=True, lookup=given or {})
    if not computed:
        raise RunError("the job has no pods")
    replicas = _replicas(job)
    base = base_env(environ)
    shares = device_shares(gpus, requested_gpus(job), len(computed))
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
            notes.append(f"{name} ({_describe_ref(container, name)}): taken from --env")
        for name in pod.unresolved:
            notes.append(
                f"warning: {name} ({_describe_ref(container, name)}) needs the cluster: skipped "
                f"(pass --env {name}=VALUE to give it a value)"
            )
        for source in container.get("envFrom") or []:
            kind = next((k for k in source if k.endswith("Ref")), "envFrom")
            ref = source.get(kind) or {}
            notes.append(f"warning: envFrom {kind} {ref.get('name', '')} needs the cluster: skipped")
        sidecars = tuple(
            str(other.get("name"))
            for other in pod_spec.get("containers") or []
            if other.get("name") != container.get("name")
        )
        for name in sidecars:
            notes.append(
                f"warning: container {name} is a regular sidecar: on the cluster it keeps the pod Running after "
                "training ends, so the pod never finishes (make it a native sidecar: initContainers with "
                "restartPolicy: Always); it is not run locally"
            )
        for init in pod_spec.get("initContainers") or []:
            kind = "native sidecar" if init.get("restartPolicy") == "Always" else "init container"
            notes.append(f"{kind} {init.get('name')} is not run locally")
        env = dict(base)
        env["HOSTNAME"] = pod.name  # the kubelet sets it to the pod name
        env.update(pod.env)
        if gpus:
            # The device plugin's job: each pod sees only its own devices (none when it asks for none).
            env["CUDA_VISIBLE_DEVICES"] = shares[i]
        env[MARKER_ENV] = f"{token}/{pod.name}"
        grace = pod_spec.get("terminationGracePeriodSeconds")
        out.append(
            LocalPod(
                pod=pod,
                argv=local_argv(pod.argv, env["PATH"]),
                env=env,
                grace=float(grace) if grace is not None else DEFAULT_GRACE,
                marker=env[MARKER_ENV],
                sidecars=sidecars,
            )
        )
    return out, list(dict.fromkeys(notes))  # once per note, not once per pod


# --------------------------------------------------------------------------- the job


@dataclass(frozen=True)
class Rules:
    """The operator's rules for this job (pytorch_defaults.go, pytorchjob_controller.go)."""

    name: str
    elastic: bool
    has_master: bool
    min_nodes: int
    backoff_limit: int | None
    clean_pod_policy: str
    active_deadline: float | None
    # The pod whose agent hosts the c10d rendezvous store (the endpoint's host), if a pod does.
    store_host: str | None = None

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
        host = None
        if policy is not None and (policy.get("rdzvBackend") or "c10d") == "c10d":
            host = str(policy.get("rdzvHost") or f"{job['metadata']['name']}-worker-0")
        return cls(
            name=str(job["metadata"]["name"]),
            elastic=policy is not None,
            has_master="Master" in replicas,
            min_nodes=lo,
            backoff_limit=None if run_policy.get("backoffLimit") is None else int(run_policy["backoffLimit"]),
            # The operator's default is None (pytorch_defaults.go); the compiler writes Running.
            clean_pod_policy=str(run_policy.get("cleanPodPolicy") or "None"),
            active_deadline=None if deadline is None else float(deadline),
            store_host=host,
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

    def replaces(self, policy: str, code: int) -> str | None:
        """ExitCode 128-255 is retryable: the operator deletes the pod and creates it again."""
        if policy == "ExitCode" and code >= EXIT_SIGNAL_BASE:
            return f"exit code {code} is retryable (>= 128): the operator recreates the pod"
        return None

    def past_failed_limit(self, replaced: int) -> bool:
        """Never: a recreated pod's restartCount is 0, so backoffLimit never counts these (#2045)."""
        return False

    def success(self, pods: Sequence[LocalPod], pod: LocalPod) -> str | None:
        """With a Master when it succeeds; elastic Worker-only when any worker does; else all workers."""
        workers = [p for p in pods if p.pod.replica_type == "Worker"]
        if self.has_master:
            return f"{pod.name} (the Master) succeeded" if pod.pod.replica_type == "Master" else None
        if self.elastic:
            return f"{pod.name} succeeded (elastic job: any worker's success is the job's)"
        if all(p.state == "Succeeded" for p in workers):
            return f"all {len(workers)} worker(s) succeeded"
        return None

    def lost(self, pods: Sequence[LocalPod]) -> str | None:
        """A lost pod the job cannot do without (the cluster would recreate it elsewhere)."""
        lost = [p for p in pods if p.state == "Lost"]
        if not lost:
            return None
        if self.has_master and any(p.pod.replica_type == "Master" for p in lost):
            return "the Master was lost and the job needs it to succeed"
        if not self.elastic:
            return f"{lost[-1].name} was lost and a fixed-size job needs every worker"
        if any(p.name == self.store_host for p in lost):
            # Here every pod is 127.0.0.1: a recreated survivor would host a new store itself
            # and carry on, which no cluster does (issue 31, class 7).
            return (
                f"{self.store_host} was lost, and its agent hosted the rendezvous store: on a cluster the other pods "
                f"lose the store and then wait for {self.store_host}'s name to resolve again, until the operator "
                "recreates it on another node (minutes); nothing brings it back here"
            )
        alive = [p for p in pods if p.pod.replica_type == "Worker" and p.state not in ("Lost", "Failed")]
        if len(alive) < self.min_nodes:
            return (
                f"{len(alive)} worker(s) left, fewer than elasticPolicy's minimum {self.min_nodes} "
                "(on a cluster the operator would recreate the lost pod on another node)"
            )
        return None

    def cleanup_why(self) -> str:
        if self.clean_pod_policy in ("All", "Running"):
            return f"cleanPodPolicy {self.clean_pod_policy}"
        return (
            f"cleanPodPolicy {self.clean_pod_policy} would leave it running on the cluster; "
            "run leaves no process behind"
        )


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


class PyTorchJobEngine(Engine):
    """A PyTorchJob as the training operator (v1.9.4) runs it."""

    kind = "PyTorchJob"

    def check(self) -> None:
        check_job(self.job, self.label)

    def fit(self, opts: Options, *, gpus: Sequence[str], cpus: int, is_busy: Callable[[int], bool]) -> list[str]:
        self.job, notes = fit_job(self.job, opts, gpus=gpus, cpus=cpus, is_busy=is_busy)
        return notes

    def pod_parts(self, pod: LocalPod | None = None) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
        replicas = _replicas(self.job)
        replica = replicas[pod.pod.replica_type] if pod is not None else next(iter(replicas.values()), {})
        template = replica.get("template") or {}
        return template.get("spec") or {}, _pytorch_container(template)

    def build_pods(
        self, *, environ: Mapping[str, str], gpus: Sequence[str], token: str, given: Mapping[str, str]
    ) -> tuple[list[LocalPod], list[str]]:
        return build_pods(self.job, environ=environ, gpus=gpus, token=token, given=given)

    def rules(self) -> Rules:
        rules = Rules.of(self.job)
        if rules.clean_pod_policy not in CLEAN_POD_POLICIES:
            raise RunError(f"runPolicy.cleanPodPolicy: expected one of {', '.join(CLEAN_POD_POLICIES)}")
        return rules

    def store_host(self, pods: Sequence[LocalPod]) -> tuple[LocalPod, int] | None:
        return store_host(self.job, pods)

    def suspended(self) -> bool:
        return bool((self.job["spec"].get("runPolicy") or {}).get("suspend"))

    def queue_notes(self) -> list[str]:
        notes = super().queue_notes()
        if ((self.job.get("spec") or {}).get("runPolicy") or {}).get("managedBy") == "kueue.x-k8s.io/multikueue":
            notes.append(
                "runPolicy.managedBy is MultiKueue's: a worker cluster's operator would run the job; run plays it"
            )
        return notes
