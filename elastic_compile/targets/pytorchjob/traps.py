"""Traps in a PyTorchJob we did not write (``elastic-compile doctor``).

The webhook's rules and the runtime traps the compiler checks on every compile
(:func:`.checks.webhook_findings`), then what only a hand-written job does: a launcher
whose flags override what the operator injects, a launcher inside a launcher, no
rendezvous at all, torchrun's restart count of 0, a backoffLimit that counts nothing,
restartPolicy left to a default its own CRD misdescribes, torchrun under ExitCode (which its exit
code of 1 defeats), and the pod rules every target
shares (:mod:`elastic_compile.targets.traps`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from elastic_compile import contract
from elastic_compile.core.engine_env import operator_v1_names
from elastic_compile.core.manifest import as_int, as_mapping
from elastic_compile.targets.checks import FieldPath as Path
from elastic_compile.targets.checks import Finding
from elastic_compile.targets.pytorchjob.checks import webhook_findings
from elastic_compile.targets.traps import PER_POD, launcher_findings, pod_findings

_BASE: Path = ("spec", "pytorchReplicaSpecs")


def findings(job: Mapping[str, Any]) -> list[Finding]:
    """Every trap of ``job`` (a PyTorchJob, possibly malformed: nothing here assumes a shape)."""
    found = webhook_findings(job)
    spec = as_mapping(job.get("spec"))
    replicas = as_mapping(spec.get("pytorchReplicaSpecs"))
    elastic = spec.get("elasticPolicy")
    policy = as_mapping(elastic)
    workers = as_int(as_mapping(replicas.get("Worker")).get("replicas")) or (1 if "Worker" in replicas else 0)
    nodes = workers + (1 if "Master" in replicas else 0)
    if elastic is not None:
        nodes = max(nodes, as_int(policy.get("maxReplicas")) or 0)
    if elastic is None and "Master" not in replicas and workers > 1:
        found.append(
            Finding(
                "no-rendezvous",
                (*_BASE, "Worker", "replicas"),
                f"{workers} Workers without a Master or elasticPolicy get no rendezvous endpoint and no master "
                "address: each pod meets only itself; add elasticPolicy (min = max for a fixed size)",
            )
        )
    backoff = as_mapping(spec.get("runPolicy")).get("backoffLimit")
    for rtype, raw in replicas.items():
        rspec = as_mapping(raw)
        role: Path = (*_BASE, str(rtype))
        restart = rspec.get("restartPolicy")
        if restart is None:
            found.append(
                Finding(
                    "restart-policy-unset",
                    role,
                    "no restartPolicy: the operator uses OnFailure (its CRD's description says Never, "
                    "kubeflow/trainer#2127); write the one you mean",
                )
            )
        elif backoff is not None and restart in ("ExitCode", "Never"):
            found.append(
                Finding(
                    "backoff-uncounted",
                    ("spec", "runPolicy", "backoffLimit"),
                    f"backoffLimit with restartPolicy {restart} counts nothing: it sums in-place container "
                    "restarts, and ExitCode recreates the pod instead (kubeflow/trainer#2045); bound the job with "
                    "activeDeadlineSeconds",
                )
            )
        template = as_mapping(rspec.get("template"))
        appended = operator_v1_names(
            master="Master" in replicas, elastic_policy=policy if elastic is not None else None
        )
        found += pod_findings(template, (*role, "template"), training=contract.TRAINING_CONTAINER, engine_env=appended)
        restart_at: Path = (*role, "restartPolicy")
        found += _launcher_findings(
            template,
            (*role, "template"),
            policy if elastic is not None else None,
            nodes,
            (restart, restart_at),
            injected=_injected(job),
        )
    return list(dict.fromkeys(found))


#: What torchrun flags set that the operator injects as PET_* (training-operator v1.9
#: pkg/controller.v1/pytorch/envvar.go and elastic.go).
_OVERRIDING = {
    "nnodes": "PET_NNODES", "rdzv_endpoint": "PET_RDZV_ENDPOINT", "rdzv_backend": "PET_RDZV_BACKEND",
    "master_addr": "PET_MASTER_ADDR", "node_rank": "PET_NODE_RANK", "rdzv_id": "PET_RDZV_ID",
}  # fmt: skip


def _injected(job: Mapping[str, Any]) -> dict[str, str | None]:
    """What the operator sets for each of :data:`_OVERRIDING`, the same in every pod (PER_POD: per pod).

    kubeflow/trainer@v1.9.4:pkg/controller.v1/pytorch/envvar.go:66-123, master.go:33-62,
    elastic.go:68-169, with the defaults of pkg/apis/kubeflow.org/v1/pytorch_defaults.go:38-55.
    """
    name = str(as_mapping(job.get("metadata")).get("name"))
    spec = as_mapping(job.get("spec"))
    replicas = as_mapping(spec.get("pytorchReplicaSpecs"))
    worker = as_mapping(replicas.get("Worker"))
    workers = as_int(worker.get("replicas")) or 1
    out: dict[str, str | None] = {}
    if "Master" in replicas:
        out["master_addr"] = f"{name}-master-0"
        out["node_rank"] = PER_POD
    if spec.get("elasticPolicy") is None:
        out["nnodes"] = str(workers * ("Worker" in replicas) + ("Master" in replicas))
        return out
    policy = as_mapping(spec.get("elasticPolicy"))
    low, high = as_int(policy.get("minReplicas")), as_int(policy.get("maxReplicas"))
    low, high = (low if low is not None else high), (high if high is not None else low)
    out["nnodes"] = f"{low}:{high}" if low is not None else f"{workers}:{workers}"
    out["rdzv_backend"] = str(policy.get("rdzvBackend") or "c10d")
    port = as_int(policy.get("rdzvPort"))
    if port is None:
        containers = as_mapping(as_mapping(worker.get("template")).get("spec")).get("containers")
        ports = [
            p
            for c in (containers if isinstance(containers, list) else [])
            if as_mapping(c).get("name") == contract.TRAINING_CONTAINER
            for p in as_mapping(c).get("ports") or []
        ]
        named = [as_int(as_mapping(p).get("containerPort")) for p in ports if as_mapping(p).get("name") == (
            contract.OPERATOR_PORT_NAME)]  # fmt: skip
        port = named[0] if named and named[0] is not None else contract.OPERATOR_DEFAULT_PORT
    out["rdzv_endpoint"] = f"{policy.get('rdzvHost') or f'{name}-worker-0'}:{port}"
    if policy.get("rdzvId") is not None:
        out["rdzv_id"] = str(policy["rdzvId"])
    return out


def _launcher_findings(
    template: Mapping[str, Any],
    path: Path,
    policy: Mapping[str, Any] | None,
    nodes: int,
    restart_policy: tuple[Any, Path],
    *,
    injected: Mapping[str, str | None],
) -> list[Finding]:
    """The training container's launcher: nested, overriding the operator, without restarts, or exit codes lost."""
    containers = as_mapping(template.get("spec")).get("containers")
    containers = containers if isinstance(containers, list) else []
    index = next(
        (i for i, c in enumerate(containers) if as_mapping(c).get("name") == contract.TRAINING_CONTAINER), None
    )
    if index is None:
        return []
    container = as_mapping(containers[index])
    where: Path = (*path, "spec", "containers", index)
    restarts_set = policy is None or policy.get("maxRestarts") is not None
    return launcher_findings(
        container,
        where,
        _OVERRIDING,
        nodes=nodes,
        restarts_set=restarts_set,
        restart_policy=restart_policy,
        injected=injected,
    )
