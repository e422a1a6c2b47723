"""The TrainJob's and TrainingRuntime's own checks: Trainer v2.3's webhooks and CEL rules, re-implemented.

The CRD schemas say nothing of these (Trainer v2.3.0: pkg/webhooks/, pkg/runtime/framework/plugins/): the TrainJob
validating webhook (reserved PET_* names, runtimePatches managers, jobs and containers
that must exist in the runtime, no env patched on ``node``), the runtime webhook (the
trainer-ancestor job has one replica and a container ``node``), the CEL rules that the
offline schema check does not evaluate (name pattern, numProcPerNode, activeDeadlineSeconds),
plus what they accept and the cluster then breaks on (the JobSet pod-name cap, $(PET_*) in
env, a JobSet TTL, a custom subdomain, a non-native sidecar). They need no schema files
and run on every compile, on custom templates too, and on manifests given to
``elastic-compile run``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from elastic_compile.core import names
from elastic_compile.core.manifest import as_int, as_mapping, name_errors, show
from elastic_compile.schema.podspec import ROOT as POD_SPEC
from elastic_compile.targets.checks import FieldPath as Path
from elastic_compile.targets.checks import Finding, from_lines, pod_value_errors
from elastic_compile.targets.trainjob import api

# The JobSet plugin's manager rule: a DNS-1123 subdomain, "/", then a non-empty path (jobset.go).
_MANAGER = re.compile(rf"^{names.DNS1123_SUBDOMAIN_TEXT}/\S+\Z")
_MAX_PATCHES: Final = 16
_FRAMEWORKS: Final = ("torch", "mpi", "flux", "jax", "xgboost")

Jobs = Mapping[str, frozenset[str]]
_CORE: Final = "io.k8s.api.core.v1."


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _at(value: Any, *keys: str) -> Any:
    """``value[k1][k2]...``, or None where a step is missing or not a mapping."""
    for key in keys:
        value = as_mapping(value).get(key)
    return value


def _mappings(value: Any) -> list[Mapping[str, Any]]:
    return [as_mapping(item) for item in _list(value)]


def _pod_spec(rjob: Mapping[str, Any]) -> Mapping[str, Any]:
    return as_mapping(_at(rjob, "template", "spec", "template", "spec"))


def runtime_jobs(runtime: Mapping[str, Any]) -> dict[str, frozenset[str]]:
    """Replicated job -> container and init container names, of a (Cluster)TrainingRuntime document."""
    jobs: dict[str, frozenset[str]] = {}
    for rjob in _mappings(_at(runtime, "spec", "template", "spec", "replicatedJobs")):
        pod = _pod_spec(rjob)
        names = {as_mapping(c).get("name") for c in [*_list(pod.get("containers")), *_list(pod.get("initContainers"))]}
        jobs[str(rjob.get("name"))] = frozenset(str(n) for n in names if n is not None)
    return jobs


def trainjob_errors(job: Mapping[str, Any], jobs: Jobs | None) -> list[str]:
    """The verdict of Trainer v2.3 on the TrainJob ``job``, plus the traps it lets through, as lines.

    ``jobs`` describes the referenced runtime (job -> container names) when it is known
    (ours, or the stock torch-distributed); None skips the checks that need it, as the
    runtime lives on the cluster.
    """
    return _lines(trainjob_findings(job, jobs))


def _lines(found: Sequence[Finding]) -> list[str]:
    return list(dict.fromkeys(str(finding) for finding in found))


def trainjob_findings(job: Mapping[str, Any], jobs: Jobs | None) -> list[Finding]:
    """:func:`trainjob_errors` as findings, each named by its rule.

    ``trainer-webhook`` for what Trainer's webhook and CEL rules reject (and ``$(PET_*)``
    in env, which they let through and never expands), ``name-too-long`` for a name
    JobSet's pods cannot carry.
    """
    found = from_lines("trainer-webhook", name_errors(job))

    def webhook(path: Path, message: str) -> None:
        found.append(Finding("trainer-webhook", path, message))

    spec = as_mapping(job.get("spec"))
    ref = as_mapping(spec.get("runtimeRef"))
    if not ref.get("name"):
        webhook(("spec", "runtimeRef", "name"), "required field is missing")
    kind = ref.get("kind", api.CLUSTER_TRAINING_RUNTIME)
    if ref.get("apiGroup", api.GROUP) != api.GROUP or kind not in api.RUNTIME_KINDS:
        kinds = ", ".join(api.RUNTIME_KINDS)
        webhook(("spec", "runtimeRef"), f"unsupported runtime (apiGroup {api.GROUP}, kind one of {kinds})")

    trainer = spec.get("trainer")
    if not isinstance(trainer, Mapping):
        webhook(("spec", "trainer"), "required: without it the torch plugin injects no PET_* variables")
        trainer = {}
    # Both may be left out: the torch plugin then takes the runtime's mlPolicy.numNodes (else
    # 1), and "auto" for a node with a GPU-like resource, else its CPU count (Trainer v2.3.0
    # pkg/runtime/framework/plugins/torch/torch.go). What is given must be a count.
    nodes = trainer.get("numNodes")
    num_nodes = as_int(nodes)
    if nodes is not None and (num_nodes is None or num_nodes < 1):
        webhook(("spec", "trainer", "numNodes"), f"must be an integer of at least 1 (given: {show(nodes)})")
    nproc = trainer.get("numProcPerNode")
    count = as_int(nproc)
    if nproc is not None and (count is None or count < 1):
        webhook(
            ("spec", "trainer", "numProcPerNode"),
            f"must be an integer of at least 1 since Trainer v2.2 (given: {show(nproc)})",
        )
    for i, var in enumerate(_list(trainer.get("env"))):
        name, value = as_mapping(var).get("name"), as_mapping(var).get("value")
        if name in api.RESERVED_ENV:
            webhook(
                ("spec", "trainer", "env", i, "name"), f"{name} is reserved: the torch plugin sets it (given: {name})"
            )
        if isinstance(value, str) and "$(PET_" in value:
            webhook(
                ("spec", "trainer", "env", i, "value"),
                "$(PET_...) does not expand in env: the plugin appends PET_* after trainer.env; use args",
            )
    deadline = spec.get("activeDeadlineSeconds")
    seconds = as_int(deadline)
    if deadline is not None and (seconds is None or seconds < 1):
        webhook(("spec", "activeDeadlineSeconds"), f"must be at least 1 (given: {show(deadline)})")
    if num_nodes is not None and num_nodes >= 1:
        name = as_mapping(job.get("metadata")).get("name")
        limit = api.name_limit(num_nodes)
        if isinstance(name, str) and len(name) > limit:
            found.append(
                Finding(
                    "name-too-long",
                    ("metadata", "name"),
                    f"at most {limit} characters for {num_nodes} node(s): JobSet's pod name "
                    f"{name}-node-0-{num_nodes - 1}-xxxxx must fit 63 (given: {len(name)})",
                )
            )
    found += _patch_findings(_list(spec.get("runtimePatches")), jobs)
    return list(dict.fromkeys(found))


def _patch_findings(patches: Sequence[Any], jobs: Jobs | None) -> list[Finding]:
    found: list[Finding] = []

    def webhook(path: Path, message: str) -> None:
        found.append(Finding("trainer-webhook", path, message))

    if len(patches) > _MAX_PATCHES:
        webhook(("spec", "runtimePatches"), f"at most {_MAX_PATCHES} entries (given: {len(patches)})")
    managers: set[str] = set()
    for i, raw in enumerate(patches):
        patch = as_mapping(raw)
        where: Path = ("spec", "runtimePatches", i)
        manager = patch.get("manager")
        if not isinstance(manager, str) or not _MANAGER.match(manager):
            webhook(
                (*where, "manager"),
                f"must be a domain-prefixed path such as example.com/tool (given: {show(manager)})",
            )
        elif manager in managers:
            webhook((*where, "manager"), f"{manager} patches twice; one entry per manager")
        else:
            managers.add(manager)
        # No rule for `time`: Trainer's mutating webhook sets it where a patch has none and keeps one
        # that is written (seen on the real v2.3.0 webhook, tests/realcluster/test_checks_vs_server.py),
        # so a TrainJob read back from the server has it, and it is no error.
        rjobs = _mappings(_at(patch, "trainingRuntimeSpec", "template", "spec", "replicatedJobs"))
        for j, rjob in enumerate(rjobs):
            rwhere: Path = (*where, "trainingRuntimeSpec", "template", "spec", "replicatedJobs", j)
            rname = rjob.get("name")
            if jobs is not None and rname not in jobs:
                known = ", ".join(sorted(jobs))
                webhook((*rwhere, "name"), f"no replicated job {rname} in the runtime (it has: {known})")
                continue
            pod = _pod_spec(rjob)
            for field in ("containers", "initContainers"):
                for k, container in enumerate(_mappings(pod.get(field))):
                    cwhere: Path = (*rwhere, "template", "spec", "template", "spec", field, k)
                    cname = container.get("name")
                    if jobs is not None and cname not in jobs[str(rname)]:
                        webhook(
                            (*cwhere, "name"), f"no container {cname} in job {rname}; a patch cannot add containers"
                        )
                    if cname in api.NO_ENV_PATCH and "env" in container:
                        webhook((*cwhere, "env"), f"Trainer refuses env patches on {cname}; use spec.trainer.env")
    return found


def runtime_errors(runtime: Mapping[str, Any]) -> list[str]:
    """The runtime webhook's verdict on a (Cluster)TrainingRuntime, plus its traps, as lines."""
    return _lines(runtime_findings(runtime))


def runtime_findings(runtime: Mapping[str, Any]) -> list[Finding]:
    """:func:`runtime_errors` as findings: ``runtime-webhook`` for the webhook's rules (and what the
    SDK skips), ``jobset-ttl`` and ``regular-sidecar`` for the traps it lets through."""
    found = from_lines("runtime-webhook", name_errors(runtime))

    def webhook(path: Path, message: str) -> None:
        found.append(Finding("runtime-webhook", path, message))

    meta = as_mapping(runtime.get("metadata"))
    spec = as_mapping(runtime.get("spec"))
    if as_mapping(meta.get("labels")).get(api.LABEL_FRAMEWORK) is None:
        webhook(("metadata", "labels"), f"{api.LABEL_FRAMEWORK} is missing; the SDK skips runtimes without it")
    policy = as_mapping(spec.get("mlPolicy"))
    chosen = [f for f in _FRAMEWORKS if f in policy]
    if len(chosen) > 1:
        webhook(("spec", "mlPolicy"), f"at most one of {', '.join(_FRAMEWORKS)} (given: {', '.join(chosen)})")
    template = as_mapping(spec.get("template"))
    jobset = as_mapping(template.get("spec"))
    if as_mapping(jobset.get("network")).get("subdomain") is not None:
        webhook(
            ("spec", "template", "spec", "network", "subdomain"),
            "PET_MASTER_ADDR assumes the TrainJob's name; remove it",
        )
    if jobset.get("ttlSecondsAfterFinished") is not None:
        found.append(
            Finding(
                "jobset-ttl",
                ("spec", "template", "spec", "ttlSecondsAfterFinished"),
                "Trainer v2.3 recreates a failed JobSet that its TTL deleted, without end (kubeflow/trainer#3779); "
                "remove it",
            )
        )
    for i, rjob in enumerate(_mappings(jobset.get("replicatedJobs"))):
        where: Path = ("spec", "template", "spec", "replicatedJobs", i)
        step = as_mapping(_at(rjob, "template", "metadata", "labels")).get(api.LABEL_ANCESTOR)
        pod = _pod_spec(rjob)
        names = [as_mapping(c).get("name") for c in _list(pod.get("containers"))]
        if step in api.ANCESTOR_CONTAINERS:
            replicas = rjob.get("replicas", 1)
            if replicas != 1:
                webhook((*where, "replicas"), f"must be 1 for the {step} step (given: {show(replicas)})")
            wanted = api.ANCESTOR_CONTAINERS[str(step)]
            if wanted not in names:
                webhook(where, f"the {step} step needs a container named {wanted}")
        if step == api.ANCESTOR_TRAINER:
            for k, name in enumerate(names):
                if name != api.NODE:
                    found.append(
                        Finding(
                            "regular-sidecar",
                            (*where, "template", "spec", "template", "spec", "containers", k),
                            f"{name} would keep the Job from completing; make it a native sidecar (an init "
                            "container with restartPolicy Always)",
                        )
                    )
    jobs = runtime_jobs(runtime)
    for i, target in enumerate(_mappings(_at(policy, "torch", "envInjection", "targets"))):
        for name in _list(target.get("containerNames")):
            if name == api.NODE or name not in jobs.get(str(target.get("jobName")), frozenset()):
                webhook(("spec", "mlPolicy", "torch", "envInjection", "targets", i), f"no injectable container {name}")
    return list(dict.fromkeys(found))


def _replicated_pods(jobset: Any, at: Path) -> list[tuple[Path, Any]]:
    """The pod spec of each replicated job of the JobSet spec ``jobset`` (at ``at``), with its path."""
    return [
        (
            (*at, "replicatedJobs", i, "template", "spec", "template", "spec"),
            _at(rjob, "template", "spec", "template", "spec"),
        )
        for i, rjob in enumerate(_mappings(as_mapping(jobset).get("replicatedJobs")))
    ]


def pod_errors(doc: Mapping[str, Any]) -> list[str]:
    """What the API server would reject in the pod values of a TrainJob or a runtime, as lines.

    A TrainJob carries pod parts outside any PodSpec (the trainer's env and resources) and
    pod spec patches (``runtimePatches``, partial: only what they change); a runtime holds
    whole pod specs. The CRDs take any value there, and JobSet's pod creation fails later.
    """
    parts: list[tuple[Path, Any, str]] = []
    spec = as_mapping(doc.get("spec"))
    if doc.get("kind") in api.RUNTIME_KINDS:
        parts += [
            (at, pod, POD_SPEC)
            for at, pod in _replicated_pods(_at(spec, "template", "spec"), ("spec", "template", "spec"))
        ]
    else:
        trainer = as_mapping(spec.get("trainer"))
        for j, var in enumerate(_list(trainer.get("env"))):
            parts.append((("spec", "trainer", "env", j), var, f"{_CORE}EnvVar"))
        parts.append(
            (("spec", "trainer", "resourcesPerNode"), trainer.get("resourcesPerNode"), f"{_CORE}ResourceRequirements")
        )
        for i, patch in enumerate(_mappings(spec.get("runtimePatches"))):
            at: Path = ("spec", "runtimePatches", i, "trainingRuntimeSpec", "template", "spec")
            parts += [
                (where, pod, POD_SPEC)
                for where, pod in _replicated_pods(_at(patch, "trainingRuntimeSpec", "template", "spec"), at)
            ]
    return [line for at, value, ref in parts for line in pod_value_errors(value, at, ref)]


def manifest_errors(doc: Mapping[str, Any], runtime: Mapping[str, Any] | None = None) -> list[str]:
    """Trainer's rules for one manifest (a TrainJob, TrainingRuntime or ClusterTrainingRuntime), as lines.

    A TrainJob is checked against ``runtime`` when given, else against the stock runtime
    when it references it, else without the runtime-dependent rules.
    """
    return _lines(manifest_findings(doc, runtime))


def manifest_findings(doc: Mapping[str, Any], runtime: Mapping[str, Any] | None = None) -> list[Finding]:
    """:func:`manifest_errors` as findings, each named by its rule."""
    if doc.get("kind") in api.RUNTIME_KINDS:
        return runtime_findings(doc)
    jobs: Jobs | None = runtime_jobs(runtime) if runtime is not None else None
    ref = as_mapping(as_mapping(doc.get("spec")).get("runtimeRef"))
    stock = (
        ref.get("name") == api.STOCK_RUNTIME
        and ref.get("kind", api.CLUSTER_TRAINING_RUNTIME) == api.CLUSTER_TRAINING_RUNTIME
        and ref.get("apiGroup", api.GROUP) == api.GROUP
    )
    if jobs is None and stock:
        jobs = dict(api.STOCK_JOBS)
    return trainjob_findings(doc, jobs)
