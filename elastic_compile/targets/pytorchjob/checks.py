"""The PyTorchJob's own checks: the training-operator v1.9.4 webhook and the runtime traps.

These need no schema files and run on every compile (and on manifests given to
``elastic-compile run``). The webhook sees the raw, undefaulted object (v1 has no
mutating webhook: the controller defaults in memory, pkg/controller.v1/pytorch/pytorchjob_controller.go), so neither
do we default anything here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from elastic_compile.contract import TRAINING_CONTAINER
from elastic_compile.contract_values import parse_bool
from elastic_compile.core import names
from elastic_compile.core.manifest import as_int, as_mapping, name_errors, show
from elastic_compile.targets.checks import FieldPath as Path
from elastic_compile.targets.checks import Finding, from_lines, pod_value_errors

# Webhook constants, training-operator v1.9.4 pkg/webhooks/pytorch/pytorchjob_webhook.go
# and pkg/common/util/webhooks.go.
_REPLICA_TYPES: Final = ("Master", "Worker")
_MANAGED_BY: Final = ("kubeflow.org/training-operator", "kueue.x-k8s.io/multikueue")


def webhook_errors(job: Mapping[str, Any]) -> list[str]:
    """The training-operator v1.9.4 webhook's verdict on ``job``, plus our runtime traps, as lines.

    The webhook sees the raw, undefaulted object (v1 has no mutating webhook), so neither
    do we default anything here. The traps (pkg/controller.v1/pytorch/elastic.go,
    kubeflow/trainer#2277) pass the webhook but fail once the job runs; their
    messages say so.
    """
    return list(dict.fromkeys(str(finding) for finding in webhook_findings(job)))


def webhook_findings(job: Mapping[str, Any]) -> list[Finding]:
    """:func:`webhook_errors` as findings: each names its rule (``webhook`` for the webhook's own)."""
    found = from_lines("webhook", name_errors(job))
    spec = as_mapping(job.get("spec"))
    specs_path: Path = ("spec", "pytorchReplicaSpecs")

    def webhook(path: Path, message: str) -> None:
        found.append(Finding("webhook", path, message))

    managed_by = as_mapping(spec.get("runPolicy")).get("managedBy")
    if managed_by is not None and managed_by not in _MANAGED_BY:
        allowed = ", ".join(_MANAGED_BY)
        webhook(("spec", "runPolicy", "managedBy"), f"must be unset or one of {allowed} (given: {show(managed_by)})")

    raw_specs = spec.get("pytorchReplicaSpecs")
    replica_specs = as_mapping(raw_specs)
    # Go decodes an explicit null as a nil pointer, so only a present, non-null
    # elasticPolicy switches the job to elastic mode.
    elastic = spec.get("elasticPolicy")
    if elastic is not None:
        if "Worker" not in replica_specs:
            webhook((*specs_path, "Worker"), "required when elasticPolicy is set")
        if as_mapping(elastic).get("nProcPerNode") is not None and spec.get("nprocPerNode") is not None:
            webhook(
                ("spec", "elasticPolicy", "nProcPerNode"),
                "forbidden together with spec.nprocPerNode (deprecated; use spec.nprocPerNode only)",
            )

    if raw_specs is None:
        webhook(specs_path, "required field is missing")
    for rtype, raw_rspec in replica_specs.items():
        role: Path = (*specs_path, str(rtype))
        rspec = as_mapping(raw_rspec)
        containers_path: Path = (*role, "template", "spec", "containers")
        if rtype not in _REPLICA_TYPES:
            webhook(role, f"unsupported replica type (supported: {', '.join(_REPLICA_TYPES)})")
        containers = as_mapping(as_mapping(rspec.get("template")).get("spec")).get("containers")
        containers = containers if isinstance(containers, list) else []
        if not containers:
            webhook(containers_path, "at least one container is required")
        has_training = False
        for index, raw_container in enumerate(containers):
            container = as_mapping(raw_container)
            if not container.get("image"):
                webhook((*containers_path, index, "image"), "required field is missing")
            has_training = has_training or container.get("name") == TRAINING_CONTAINER
        if not has_training:
            webhook(containers_path, f"must have a container named {TRAINING_CONTAINER!r}")
        replicas = rspec.get("replicas")
        if rtype == "Master":
            # No defaulting happens before the webhook: an omitted Master.replicas fails.
            if replicas is None:
                webhook((*role, "replicas"), "must be set explicitly to 1 (the webhook sees no defaults)")
            elif as_int(replicas) != 1:
                webhook((*role, "replicas"), f"must be 1 (given: {show(replicas)})")
        else:
            count = as_int(replicas)
            if count is not None and count < 1:
                webhook((*role, "replicas"), f"must be at least 1 (given: {count})")

    found.extend(_trap_findings(job, spec, replica_specs, elastic))
    return list(dict.fromkeys(found))


def _trap_findings(
    job: Mapping[str, Any], spec: Mapping[str, Any], replica_specs: Mapping[str, Any], elastic: Any
) -> list[Finding]:
    """What the webhook accepts but the operator or torchrun breaks on (elastic.go, kubeflow/trainer#2277)."""
    found: list[Finding] = []
    runtime = "accepted by the webhook, fails at runtime"
    policy = as_mapping(elastic)
    if policy.get("standalone") is True:
        found.append(
            Finding(
                "standalone",
                ("spec", "elasticPolicy", "standalone"),
                f'must not be true: the operator sets PET_STANDALONE="" and torchrun crashes parsing it ({runtime})',
            )
        )
    if "rdzvConf" in policy and policy["rdzvConf"] == []:
        found.append(
            Finding(
                "empty-rdzv-conf",
                ("spec", "elasticPolicy", "rdzvConf"),
                f"must be omitted when empty: the operator's env builder panics on an empty list ({runtime})",
            )
        )
    if elastic is not None and "Master" in replica_specs:
        found.append(
            Finding(
                "master-with-elastic",
                ("spec", "pytorchReplicaSpecs", "Master"),
                "must not be combined with elasticPolicy: PET_NNODES "
                "leaves the Master out and rendezvous still points at worker-0 (kubeflow/trainer#2277)",
            )
        )
    if spec.get("pytorchReplicaSpecs") is not None and not replica_specs:
        found.append(
            Finding(
                "no-replicas", ("spec", "pytorchReplicaSpecs"), f"must define at least one replica type ({runtime})"
            )
        )
    lo, hi = as_int(policy.get("minReplicas")), as_int(policy.get("maxReplicas"))
    workers = as_int(as_mapping(replica_specs.get("Worker")).get("replicas"))
    if elastic is not None and lo is not None and hi is not None:
        if lo > hi:
            found.append(
                Finding(
                    "elastic-bounds",
                    ("spec", "elasticPolicy"),
                    f"minReplicas {lo} is above maxReplicas {hi} ({runtime})",
                )
            )
        elif workers is not None and not lo <= workers <= hi:
            # An easy slip with a JSON6902 scale patch that forgets the elastic bounds.
            found.append(
                Finding(
                    "elastic-bounds",
                    ("spec", "pytorchReplicaSpecs", "Worker", "replicas"),
                    f"{workers} is outside elasticPolicy [{lo}, {hi}]; PET_NNODES comes from the bounds ({runtime})",
                )
            )

    found.extend(_is_host_findings(policy, replica_specs, runtime))

    name = as_mapping(job.get("metadata")).get("name")
    if isinstance(name, str):
        for rtype, raw_rspec in replica_specs.items():
            count = as_int(as_mapping(raw_rspec).get("replicas")) or 1
            if rtype == "Worker":
                # The HPA may scale an elastic job up to maxReplicas.
                count = max(count, as_int(policy.get("maxReplicas")) or 0)
            pod = f"{name}-{str(rtype).lower()}-{count - 1}"
            if len(pod) > names.DNS1035_LABEL_MAX:
                found.append(
                    Finding(
                        "name-too-long",
                        ("metadata", "name"),
                        f"too long for pod and service name {pod!r} "
                        f"({len(pod)} > {names.DNS1035_LABEL_MAX} characters; {runtime})",
                    )
                )
    return found


def _is_host_findings(policy: Mapping[str, Any], replica_specs: Mapping[str, Any], runtime: str) -> list[Finding]:
    """``is_host`` in the rdzvConf of a job with several pods: the operator gives every pod the same PET_RDZV_CONF.

    ``true`` makes every pod start a store on the rendezvous port; ``false`` leaves the store
    at the endpoint (worker-0) unhosted, unless ``rdzvHost`` names a store outside the job.
    The schema refuses the same in a spec (``rdzv.conf.is_host``).
    """
    conf = policy.get("rdzvConf")
    if not isinstance(conf, list):
        return []
    pods = sum(as_int(as_mapping(r).get("replicas")) or 1 for r in replica_specs.values())
    if max(pods, as_int(policy.get("maxReplicas")) or 0) < 2:
        return []
    found: list[Finding] = []
    for i, raw in enumerate(conf):
        entry = as_mapping(raw)
        if entry.get("key") != "is_host":
            continue
        try:
            host = parse_bool(str(entry.get("value")))
        except ValueError:
            continue  # torch refuses it in every pod; elastic-launch says so
        if host:
            why = "every pod would start its own store on the rendezvous port"
        elif policy.get("rdzvHost") is None:
            why = "no pod would host the store at worker-0 and the rendezvous times out"
        else:
            continue  # a store outside the job
        found.append(
            Finding(
                "rdzv-is-host",
                ("spec", "elasticPolicy", "rdzvConf", i, "value"),
                f"is_host {entry.get('value')} reaches every pod (the operator's PET_RDZV_CONF): {why}; remove it, "
                f"the pod the endpoint names hosts ({runtime})",
            )
        )
    return found


def pod_errors(job: Mapping[str, Any]) -> list[str]:
    """What the API server would reject when the operator creates each replica's pods."""
    errors: list[str] = []
    for rtype, raw_rspec in as_mapping(as_mapping(job.get("spec")).get("pytorchReplicaSpecs")).items():
        pod_spec = as_mapping(as_mapping(raw_rspec).get("template")).get("spec")
        errors += pod_value_errors(pod_spec, ("spec", "pytorchReplicaSpecs", str(rtype), "template", "spec"))
    return errors
