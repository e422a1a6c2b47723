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
    return env


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


def pods(job: Mapping[str, Any], *, namespace: str = "default", local: bool = True) -> list[Pod]:
    """Every pod of ``job`` with the command and environment the operator would give it.

    With ``local``, the rendezvous host (``<job>-worker-0`` or ``rdzvHost``) and every
    pod IP become 127.0.0.1, so the pods can run as processes on this machine.
    """
    if job.get("kind") != "PyTorchJob" or "pytorchReplicaSpecs" not in job.get("spec", {}):
        raise ManifestError("not a PyTorchJob with spec.pytorchReplicaSpecs")
    name = job["metadata"]["name"]
    namespace = job["metadata"].get("namespace", namespace)
    out: list[Pod] = []
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
            facts = {
                "name": pod_name, "namespace": namespace, "ip": LOCAL_IP, "labels": labels,
                "annotations": dict(template.get("metadata", {}).get("annotations") or {}),
                "serviceAccountName": template.get("spec", {}).get("serviceAccountName", "default"),
            }  # fmt: skip
            env: dict[str, str] = {}
            unresolved: list[str] = []
            for var in container.get("env") or []:
                if "value" in var:
                    env[var["name"]] = str(var["value"])
                    continue
                ref = (var.get("valueFrom") or {}).get("fieldRef")
                value = _field_ref(ref["fieldPath"], facts) if ref else None
                if value is None:
                    unresolved.append(var["name"])
                else:
                    env[var["name"]] = value
            operator = operator_env(job, replica_type, index)
            if local and contract.PET_RDZV_ENDPOINT in operator:
                _host, _, port = operator[contract.PET_RDZV_ENDPOINT].rpartition(":")
                operator[contract.PET_RDZV_ENDPOINT] = f"{LOCAL_IP}:{port}"
            env.update(operator)  # appended after the container's own: the operator's entry wins
            argv = tuple(str(a) for a in [*(container.get("command") or []), *(container.get("args") or [])])
            out.append(Pod(pod_name, replica_type, index, str(container.get("image", "")), argv, env,
                           str(replica.get("restartPolicy", "OnFailure")), labels, tuple(unresolved)))  # fmt: skip
    return out
