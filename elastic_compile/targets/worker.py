"""ElasticSpec -> the worker plan: every decision about the training operator v1's job, as plain frozen data.

The PyTorchJob and the PodTemplate print it (one plan, so their pods never drift apart);
the lints and ``--explain`` describe it whatever the targets of a compile (the TrainJob
has its own plan, over the same pod: targets/trainjob/plan.py). Templates only print what
is here. Each derived value carries its reason in a comment, and each layout rule points at
the operator fact that forces it (training-operator v1.9.4: pkg/controller.v1/pytorch/).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from elastic_compile.schema import ElasticSpec
from elastic_compile.targets.launcher import GRACE_MARGIN_SECONDS, launcher_args
from elastic_compile.targets.pod import build_pod_template, job_labels, object_metadata

#: Lints about the training operator v1's own restart rules: they say nothing of another
#: engine's job (a Job's backoffLimit counts OnFailure restarts and replaced pods alike).
OPERATOR_LINTS = frozenset({"EC110", "EC116"})
#: Lints about the training operator's headless services, which publish a pod only once it is
#: Ready: the operator sets no publishNotReadyAddresses (kubeflow/trainer@v1.9.4:
#: pkg/controller.v1/common/service.go:230-231). JobSet (under a TrainJob) defaults it to true
#: (kubernetes-sigs/jobset@v0.12.0:pkg/webhooks/jobset_webhook.go:137-138, used by
#: pkg/controllers/jobset_controller.go:816). Every target whose pods the operator runs claims them
#: (the PyTorchJob, Flyte's: its PyTorch plugins create one, the PodTemplate of a v1 Worker).
SERVICE_LINTS = frozenset({"EC114"})


class Plan(NamedTuple):
    """Everything the templates print, already decided."""

    name: str
    namespace: str | None
    labels: dict[str, str]
    annotations: dict[str, str]
    replicas: int
    restart_policy: str
    nproc_per_node: str
    elastic_policy: dict[str, Any] | None
    run_policy: dict[str, Any]
    pod_template: dict[str, Any]
    launcher_args: tuple[str, ...]

    @property
    def metadata(self) -> dict[str, Any]:
        """Object metadata of the job (and of the PodTemplate resource)."""
        return object_metadata(self.name, self.namespace, self.labels, self.annotations)


def elastic_policy(spec: ElasticSpec) -> dict[str, Any] | None:
    """The elasticPolicy of a multi-node job; None for a single node.

    Fixed multi-node jobs use the elastic form with min == max, because a Worker-only job
    without elasticPolicy gets no rendezvous endpoint (envvar.go, elastic.go). Never
    ``standalone`` (the operator's PET_STANDALONE="" crashes torchrun) and never an empty
    ``rdzvConf`` (the operator panics on it): both in elastic.go.
    """
    if spec.nnodes.max == 1:
        return None
    rdzv = spec.rdzv
    policy: dict[str, Any] = {
        "rdzvBackend": rdzv.backend,
        "minReplicas": spec.nnodes.min,
        "maxReplicas": spec.nnodes.max,
        "maxRestarts": spec.max_restarts,
    }
    if rdzv.host is not None:
        policy["rdzvHost"] = rdzv.host
    if rdzv.port is not None or rdzv.backend != "c10d":
        policy["rdzvPort"] = rdzv.resolved_port()
    if rdzv.id is not None:
        policy["rdzvId"] = rdzv.id
    if rdzv.conf:
        policy["rdzvConf"] = [{"key": k, "value": v} for k, v in rdzv.conf.items()]
    return policy


def _set(model: object, **names: str) -> dict[str, Any]:
    """``{kubernetesName: value}`` for each of ``model``'s fields (given as ours=theirs) that is set."""
    return {theirs: getattr(model, ours) for ours, theirs in names.items() if getattr(model, ours) is not None}


def run_policy(spec: ElasticSpec) -> dict[str, Any]:
    """runPolicy with only what is set; cleanPodPolicy is always written (see its default's reason)."""
    rp = spec.run_policy
    out: dict[str, Any] = {"cleanPodPolicy": rp.clean_pod_policy}
    out.update(
        _set(
            rp,
            ttl_seconds_after_finished="ttlSecondsAfterFinished",
            active_deadline_seconds="activeDeadlineSeconds",
            backoff_limit="backoffLimit",
        )
    )
    if rp.scheduling is not None:
        policy = _set(
            rp.scheduling,
            min_available="minAvailable",
            queue="queue",
            priority_class="priorityClass",
            schedule_timeout_seconds="scheduleTimeoutSeconds",
        )
        if policy:
            out["schedulingPolicy"] = policy
    if rp.suspend:
        out["suspend"] = True
    if rp.managed_by is not None:
        out["managedBy"] = rp.managed_by
    return out


def spec_to_plan(spec: ElasticSpec) -> Plan:
    """Decide everything about the output of ``spec``."""
    args = launcher_args(spec)
    return Plan(
        name=spec.name,
        namespace=spec.namespace,
        labels=job_labels(spec),
        annotations=dict(spec.annotations),
        # Worker-only for every layout: Master + elasticPolicy gets the wrong PET_NNODES and
        # both env sets (kubeflow/trainer#2277); replicas = max so the HPA-less job starts full.
        replicas=spec.nnodes.max,
        restart_policy=spec.restart_policy,
        nproc_per_node=str(spec.nproc_per_node),
        elastic_policy=elastic_policy(spec),
        run_policy=run_policy(spec),
        pod_template=build_pod_template(spec, args, spec.shutdown_timeout + GRACE_MARGIN_SECONDS),
        launcher_args=args,
    )
