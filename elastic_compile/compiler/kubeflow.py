"""What the Kubeflow training operator (v1.9.4) makes of a PyTorchJob: one pod per replica.

Given a PyTorchJob document (ours, or a kustomize overlay of it), this computes for each
pod its name, labels, command and exact environment: the container's own env (with the
downward API resolved) followed by what the operator appends (kubeflow-pytorchjob.md §2,
§4). It is what ``elastic-compile run`` starts locally, and what the end-to-end test
uses to prove that compiler and entrypoint agree. Only the rendezvous host and the pod
IPs are mapped to this machine.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from elastic_compile import contract

OPERATOR_NAME = "pytorchjob-controller"
LOCAL_IP = "127.0.0.1"


@dataclass(frozen=True)
class Pod:
    """One pod as the operator would create it."""

    name: str
    replica_type: str
    index: int
    image: str
    argv: tuple[str, ...]
    env: dict[str, str]
    restart_policy: str
    labels: dict[str, str]
    unresolved: tuple[str, ...] = field(default=())  # env entries that need a cluster (secrets, ...)
    looked_up: tuple[str, ...] = field(default=())  # such entries whose value came from ``lookup``


class ManifestError(ValueError):
    """The document is not a PyTorchJob this emulation understands."""


def _container(template: Mapping[str, Any]) -> Mapping[str, Any]:
    containers = template.get("spec", {}).get("containers") or []
    for c in containers:
        if c.get("name") == contract.TRAINING_CONTAINER:
            return dict(c)
    if not containers:
        raise ManifestError("the pod template has no containers")
    return dict(containers[0])  # the operator falls back to container 0 for its port (§2)


def _rdzv_port(policy: Mapping[str, Any], container: Mapping[str, Any]) -> int:
    if policy.get("rdzvPort") is not None:
        return int(policy["rdzvPort"])
    for port in container.get("ports") or []:
        if port.get("name") == contract.OPERATOR_PORT_NAME:
            return int(port["containerPort"])
    return contract.OPERATOR_DEFAULT_PORT


def operator_env(job: Mapping[str, Any], replica_type: str, index: int) -> dict[str, str]:
    """The variables the operator appends to every container of a pod (envvar.go, elastic.go)."""
    spec = job["spec"]
    name = job["metadata"]["name"]
    replicas = spec["pytorchReplicaSpecs"]
    worker = replicas.get("Worker", {})
    worker_replicas = int(worker.get("replicas", 1))
    policy = spec.get("elasticPolicy")
    env: dict[str, str] = {"PYTHONUNBUFFERED": "1"}
    nproc = spec.get("nprocPerNode") or (policy or {}).get("nProcPerNode") or "auto"
    env[contract.PET_NPROC_PER_NODE] = str(nproc)
    if "Master" in replicas:
        master_port = _rdzv_port({}, _container(replicas["Master"]["template"]))
        nproc_int = int(nproc) if str(nproc).isdigit() else 1
        env.update({
            "MASTER_ADDR": f"{name}-master-0", "PET_MASTER_ADDR": f"{name}-master-0",
            "MASTER_PORT": str(master_port), "PET_MASTER_PORT": str(master_port),
            "WORLD_SIZE": str((1 + worker_replicas) * nproc_int),
            "RANK": str(0 if replica_type == "Master" else index + 1),
            "PET_NODE_RANK": str(0 if replica_type == "Master" else index + 1),
        })  # fmt: skip
    if policy is None:
        env[contract.PET_NNODES] = str(worker_replicas + (1 if "Master" in replicas else 0))
        return env
    lo, hi = policy.get("minReplicas"), policy.get("maxReplicas")
    lo, hi = (lo if lo is not None else hi), (hi if hi is not None else lo)
    if lo is None:  # neither: both default to the Worker replicas (the Master is not counted, #2277)
        lo = hi = worker_replicas
    env[contract.PET_NNODES] = f"{lo}:{hi}"
    host = policy.get("rdzvHost") or f"{name}-worker-0"
    env[contract.PET_RDZV_ENDPOINT] = f"{host}:{_rdzv_port(policy, _container(worker['template']))}"
    env[contract.PET_RDZV_BACKEND] = policy.get("rdzvBackend") or "c10d"
    if policy.get("maxRestarts") is not None:
        env[contract.PET_MAX_RESTARTS] = str(policy["maxRestarts"])
    if policy.get("rdzvId") is not None:
        env[contract.PET_RDZV_ID] = str(policy["rdzvId"])
    if policy.get("rdzvConf") is not None:
        env[contract.PET_RDZV_CONF] = ",".join(f"{kv['key']}={kv['value']}" for kv in policy["rdzvConf"])
    if policy.get("standalone"):
        # The operator's broken rendering (§7): torchrun's int("") then fails on it.
        env["PET_STANDALONE"] = ""
    return env


# The operator's own addresses of other pods: DNS names of headless services, which only
# exist in the cluster. Locally every pod is this machine.
_LOCAL_ADDRESS_ENV = ("MASTER_ADDR", "PET_MASTER_ADDR")


def expand(text: str, mapping: Mapping[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion (k8s.io/kubernetes third_party/forked/golang/expansion).

    The kubelet applies it to env values (with the variables defined before them) and to
    command and args (with the container's whole env). ``$$`` is a literal ``$``; an unknown
    or unclosed reference is kept as written.
    """
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char != "$" or i + 1 == len(text):
            out.append(char)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "$":
            out.append("$")
            i += 2
        elif nxt == "(" and ")" in text[i + 2 :]:
            end = text.index(")", i + 2)
            name = text[i + 2 : end]
            out.append(mapping.get(name, f"$({name})"))
            i = end + 1
        else:  # "$x" or an unclosed "$(": both kept, scanning resumes after the second character
            out.append(text[i : i + 2])
            i += 2
    return "".join(out)


_LABEL_REF = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")


def _field_ref(path: str, pod: Mapping[str, Any]) -> str | None:
    direct = {
        "metadata.name": pod["name"],
        "metadata.namespace": pod["namespace"],
        "status.podIP": pod["ip"],
        "status.hostIP": pod["ip"],
        "spec.nodeName": "localhost",
        "spec.serviceAccountName": pod.get("serviceAccountName", "default"),
    }
    if path in direct:
        return str(direct[path])
    match = _LABEL_REF.match(path)
    if match:
        # A missing label or annotation resolves to "" in Kubernetes.
        return str(pod[match.group(1)].get(match.group(2), ""))
    return None


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
            if index == 0 and replica_type == lead:  # §5: master-0, or worker-0 without a Master
                labels["training.kubeflow.org/job-role"] = "master"
            facts = {
                "name": pod_name, "namespace": namespace, "ip": LOCAL_IP, "labels": labels,
                "annotations": dict(template.get("metadata", {}).get("annotations") or {}),
                "serviceAccountName": template.get("spec", {}).get("serviceAccountName", "default"),
            }  # fmt: skip
            operator = operator_env(job, replica_type, index)
            if local and contract.PET_RDZV_ENDPOINT in operator:
                _host, _, port = operator[contract.PET_RDZV_ENDPOINT].rpartition(":")
                operator[contract.PET_RDZV_ENDPOINT] = f"{LOCAL_IP}:{port}"
            if local:
                operator.update({k: LOCAL_IP for k in _LOCAL_ADDRESS_ENV if k in operator})
            # The operator appends its entries after the container's own, so the pod's env
            # list is both, in that order; a repeated name takes the later entry.
            entries = [*(container.get("env") or []), *({"name": k, "value": v} for k, v in operator.items())]
            env: dict[str, str] = {}
            unresolved: list[str] = []
            looked_up: list[str] = []
            for var in entries:
                var_name = str(var["name"])
                if "valueFrom" not in var:
                    # A value is expanded against the entries before it; no value at all is "".
                    env[var_name] = expand(str(var.get("value", "")), env)
                    continue
                ref = (var.get("valueFrom") or {}).get("fieldRef")
                value = _field_ref(ref["fieldPath"], facts) if ref else None
                if value is None and lookup is not None and var_name in lookup:
                    value = lookup[var_name]
                    looked_up.append(var_name)
                if value is None:
                    unresolved.append(var_name)
                else:
                    env[var_name] = value
            words = [*(container.get("command") or []), *(container.get("args") or [])]
            argv = tuple(expand(str(a), env) for a in words)
            out.append(Pod(pod_name, replica_type, index, str(container.get("image", "")), argv, env,
                           str(replica.get("restartPolicy", "OnFailure")), labels, tuple(unresolved),
                           tuple(looked_up)))  # fmt: skip
    return out
