"""What ``elastic-compile run`` says each pod is, held against the pod the real engines create.

``run`` computes every pod of a job (:func:`elastic_compile.localrun.kubeflow.pods`,
:func:`elastic_compile.localrun.trainer.pods`, with ``local=False``: the cluster's view, before
it maps addresses to 127.0.0.1 and fits the process count to this machine). The real
training-operator, or Trainer + JobSet + the Job controller, create the pods from the same
object. :func:`differences` lists every way the two disagree; each is a defect of ``run`` (or
of the compiler), except the documented exceptions below.

Documented exceptions (docs/development.md, "The pods the engines create"):

* a TrainJob's pod is named by the Job controller from ``generateName`` ``<hostname>-``, with a
  random suffix; ``run`` names it by its hostname (the env resolved from ``metadata.name`` is
  compared under that name);
* the PyTorchJob operator turns ``restartPolicy: ExitCode`` into the pod's ``Never`` (it applies
  the exit-code rule itself); ``run`` keeps the replica's policy, which is the rule it plays;
* labels ``run`` does not model: the controllers' bookkeeping (:data:`BOOKKEEPING_LABELS`), whose
  values are uids and indexes that no env or selector of ours reads;
* the API server's pod defaults (:data:`SERVER_DEFAULTS`), the service-account token volume and
  mount, the two NoExecute tolerations (DefaultTolerationSeconds admission), appended to lists;
* the pod IP: there is none without a kubelet, and ``run``'s is 127.0.0.1; both sides resolve
  ``status.podIP`` to 127.0.0.1.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from elastic_compile import contract
from elastic_compile.localrun import kubeflow, trainer
from elastic_compile.localrun.kubelet import LOCAL_IP, Pod, config_map_mounts, expand, resolve_env

#: Labels the controllers put on pods for their own bookkeeping, which run does not model.
BOOKKEEPING_LABELS = frozenset({
    "batch.kubernetes.io/controller-uid", "controller-uid", "batch.kubernetes.io/job-name", "job-name",
    "jobset.sigs.k8s.io/global-replicas", "jobset.sigs.k8s.io/group-name", "jobset.sigs.k8s.io/group-replicas",
    "jobset.sigs.k8s.io/job-global-index", "jobset.sigs.k8s.io/job-group-index", "jobset.sigs.k8s.io/job-index",
    "jobset.sigs.k8s.io/job-key", "jobset.sigs.k8s.io/jobset-uid", "jobset.sigs.k8s.io/priority",
    "jobset.sigs.k8s.io/replicatedjob-replicas", "jobset.sigs.k8s.io/restart-attempt",
})  # fmt: skip

#: Pod spec fields the API server defaults (or admission sets) that no template of ours writes.
SERVER_DEFAULTS = frozenset({
    "dnsPolicy", "enableServiceLinks", "preemptionPolicy", "priority", "schedulerName", "securityContext",
    "serviceAccount", "serviceAccountName", "terminationGracePeriodSeconds", "tolerations", "volumes",
})  # fmt: skip

#: The volume (and mount) the ServiceAccount admission adds to every pod.
_TOKEN_VOLUME = re.compile(r"^kube-api-access-[a-z0-9]{5}$")
#: The Job controller's pod name: the generateName <hostname>- plus five random characters.
_GENERATED = re.compile(r"^(?P<hostname>.+)-[a-z0-9]{5}$")


def _container(spec: Mapping[str, Any], name: str) -> Mapping[str, Any] | None:
    return next((c for c in spec.get("containers") or [] if c.get("name") == name), None)


def _without_token(items: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [i for i in items if not _TOKEN_VOLUME.match(str(i.get("name", "")))]


def covers(ours: Any, theirs: Any, path: str, out: list[str]) -> None:
    """Every value of ``ours`` is in ``theirs`` at the same place; lists may go on past ours
    (the engines and admission append). Appends each difference to ``out``."""
    if isinstance(ours, Mapping):
        if not isinstance(theirs, Mapping):
            out.append(f"{path}: {ours!r} run, {theirs!r} cluster")
            return
        for key, value in ours.items():
            if key not in theirs:
                out.append(f"{path}.{key}: {value!r} run, absent on the cluster")
            else:
                covers(value, theirs[key], f"{path}.{key}", out)
    elif isinstance(ours, list):
        if not isinstance(theirs, list) or len(theirs) < len(ours):
            out.append(f"{path}: {ours!r} run, {theirs!r} cluster")
            return
        for i, value in enumerate(ours):
            covers(value, theirs[i], f"{path}[{i}]", out)
    elif str(ours) != str(theirs) or isinstance(ours, bool) != isinstance(theirs, bool):
        out.append(f"{path}: {ours!r} run, {theirs!r} cluster")


def _resolved(
    pod: Mapping[str, Any], container: Mapping[str, Any], name: str
) -> tuple[dict[str, str], tuple[str, ...]]:
    """The container's env as the kubelet resolves it, the pod named ``name``, its IP 127.0.0.1."""
    facts = {
        "name": name,
        "namespace": pod["metadata"]["namespace"],
        "ip": LOCAL_IP,
        "labels": pod["metadata"].get("labels") or {},
        "annotations": pod["metadata"].get("annotations") or {},
        "serviceAccountName": pod["spec"].get("serviceAccountName", "default"),
    }
    env, unresolved, _ = resolve_env(container.get("env") or [], facts, None)
    return env, unresolved


def emulated_template(job: Mapping[str, Any], runtime: Mapping[str, Any] | None, pod: Pod) -> Mapping[str, Any]:
    """The pod template ``run`` derives the pod from: the replica's (v1), or the trainer job's of
    the JobSet Trainer builds (v2: runtime, runtimePatches, trainer fields)."""
    if job["kind"] == "PyTorchJob":
        template: Mapping[str, Any] = job["spec"]["pytorchReplicaSpecs"][pod.replica_type]["template"]
        return template
    rjob = trainer._trainer_job(trainer.jobset_of(job, runtime))
    built: Mapping[str, Any] = rjob["template"]["spec"]["template"]
    return built


def differences(
    job: Mapping[str, Any], runtime: Mapping[str, Any] | None, real: Sequence[Mapping[str, Any]]
) -> tuple[list[Pod], list[str]]:
    """``run``'s pods of ``job`` and every difference from the ``real`` pods the engines made."""
    v1 = job["kind"] == "PyTorchJob"
    namespace = job["metadata"]["namespace"]
    ours = kubeflow.pods(job, namespace=namespace, local=False) if v1 else trainer.pods(job, runtime, local=False)
    out: list[str] = []
    by_name: dict[str, Mapping[str, Any]] = {}
    for pod in real:
        name = pod["metadata"]["name"]
        if not v1:
            generated = _GENERATED.match(name)
            if generated is None or generated.group("hostname") != pod["spec"].get("hostname"):
                out.append(
                    f"{name}: not named <hostname>-<5 random characters> (hostname {pod['spec'].get('hostname')})"
                )
                continue
            name = generated.group("hostname")
        by_name[name] = pod
    if sorted(by_name) != sorted(p.name for p in ours):
        out.append(f"the pods: {sorted(p.name for p in ours)} run, {sorted(by_name)} cluster")
    for pod in ours:
        theirs = by_name.get(pod.name)
        if theirs is not None:
            out += [f"{pod.name}: {d}" for d in _pod_differences(job, runtime, pod, theirs, v1)]
    return ours, out


def _pod_differences(
    job: Mapping[str, Any], runtime: Mapping[str, Any] | None, pod: Pod, real: Mapping[str, Any], v1: bool
) -> list[str]:
    out: list[str] = []
    template = emulated_template(job, runtime, pod)
    spec = real["spec"]
    cname = kubeflow._container(template)["name"] if v1 else "node"
    container = _container(spec, str(cname))
    if container is None:
        return [f"no container {cname} on the cluster"]
    if container.get("image") != pod.image:
        out.append(f"image: {pod.image} run, {container.get('image')} cluster")

    # The environment, in order, each value as the kubelet resolves it; then command and args.
    env, unresolved = _resolved(real, container, pod.name)
    if list(env.items()) != list(pod.env.items()):
        out.append(f"env:\n    run:     {list(pod.env.items())}\n    cluster: {list(env.items())}")
    if set(unresolved) != set(pod.unresolved):
        out.append(f"env needing the cluster: {sorted(pod.unresolved)} run, {sorted(unresolved)} cluster")
    words = [*(container.get("command") or []), *(container.get("args") or [])]
    argv = tuple(expand(str(w), env) for w in words)
    if argv != pod.argv:
        out.append(f"argv: {list(pod.argv)} run, {list(argv)} cluster")

    policy = {"ExitCode": "Never"}.get(pod.restart_policy, pod.restart_policy) if v1 else pod.restart_policy
    if spec.get("restartPolicy") != policy:
        out.append(f"restartPolicy: {pod.restart_policy} run, {spec.get('restartPolicy')} cluster")

    labels = real["metadata"].get("labels") or {}
    for key, value in pod.labels.items():
        if labels.get(key) != value:
            out.append(f"label {key}: {value!r} run, {labels.get(key)!r} cluster")
    unknown = sorted(set(labels) - set(pod.labels) - BOOKKEEPING_LABELS)
    if unknown:
        out.append(f"labels run does not give the pod: {unknown}")

    if config_map_mounts(spec, container) != pod.mounts:
        out.append(f"ConfigMap mounts: {pod.mounts} run, {config_map_mounts(spec, container)} cluster")

    # The rest of the pod: what run's template says, all of it on the cluster's pod (which adds defaults).
    mine = dict(template.get("spec") or {})
    theirs = dict(spec)
    theirs["volumes"] = _without_token(spec.get("volumes") or [])
    theirs["containers"] = [
        {**c, "volumeMounts": _without_token(c.get("volumeMounts") or [])} for c in spec.get("containers") or []
    ]
    theirs["initContainers"] = [
        {**c, "volumeMounts": _without_token(c.get("volumeMounts") or [])} for c in spec.get("initContainers") or []
    ]
    if "restartPolicy" in mine:
        mine["restartPolicy"] = policy
    covers(mine, theirs, "spec", out)
    extra = sorted(set(theirs) - set(mine) - SERVER_DEFAULTS - {"initContainers", "restartPolicy"})
    if v1 and extra:
        out.append(f"pod fields the operator sets that run does not model: {extra}")
    if not v1 and set(extra) - {"hostname", "subdomain"}:
        out.append(f"pod fields JobSet sets that run does not model: {extra}")
    return out


def addresses(
    job: Mapping[str, Any],
    ours: Sequence[Pod],
    real: Sequence[Mapping[str, Any]],
    services: Sequence[Mapping[str, Any]],
) -> list[str]:
    """The addresses in run's env name, on the cluster, the pod run says: the rendezvous or master
    host (a headless Service of that name selecting that pod, v1; the pod's hostname and subdomain
    with a headless Service of the subdomain, v2) and its port (a containerPort of that pod)."""
    out: list[str] = []
    name = job["metadata"]["name"]
    by_service = {s["metadata"]["name"]: s for s in services}

    def selects(service: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
        selector = service["spec"].get("selector") or {}
        labels = pod["metadata"].get("labels") or {}
        return bool(selector) and all(labels.get(k) == v for k, v in selector.items())

    def port_of(pod: Mapping[str, Any], port: str, cname: str) -> bool:
        c = _container(pod["spec"], cname) or {}
        return any(str(p.get("containerPort")) == port for p in c.get("ports") or [])

    env = ours[0].env
    if job["kind"] == "PyTorchJob":
        # The first replica's training container (pytorch, else its first), as the operator names it.
        first = next(iter(job["spec"]["pytorchReplicaSpecs"].values()))
        containers = first["template"]["spec"]["containers"]
        cname = next(
            (str(c["name"]) for c in containers if c["name"] == contract.TRAINING_CONTAINER), containers[0]["name"]
        )
        for var, port_var in ((contract.PET_RDZV_ENDPOINT, None), ("MASTER_ADDR", "MASTER_PORT")):
            if var not in env:
                continue
            host, _, port = env[var].rpartition(":") if port_var is None else (env[var], "", env[port_var])
            if host not in (f"{name}-worker-0", f"{name}-master-0"):
                continue  # a host of the user's (rdzvHost): not the job's to make
            service = by_service.get(host)
            target = [p for p in real if p["metadata"]["name"] == host]
            if service is None or service["spec"].get("clusterIP") != "None":
                out.append(f"{var}={env[var]}: no headless Service {host}")
            elif len(target) != 1 or [p for p in real if selects(service, p)] != target:
                out.append(f"{var}={env[var]}: Service {host} does not select exactly pod {host}")
            elif not port_of(target[0], port, cname):
                out.append(f"{var}={env[var]}: port {port} is not a containerPort of {host}")
        return out
    addr, port = env.get(contract.PET_MASTER_ADDR, ""), env.get(contract.PET_MASTER_PORT, "")
    host, _, subdomain = addr.partition(".")
    target = [p for p in real if p["spec"].get("hostname") == host and p["spec"].get("subdomain") == subdomain]
    service = by_service.get(subdomain)
    if len(target) != 1:
        out.append(f"PET_MASTER_ADDR={addr}: {len(target)} pods with hostname {host} and subdomain {subdomain}")
    elif service is None or service["spec"].get("clusterIP") != "None" or not selects(service, target[0]):
        out.append(f"PET_MASTER_ADDR={addr}: no headless Service {subdomain} selecting {host}")
    elif not port_of(target[0], port, "node"):
        out.append(f"PET_MASTER_PORT={port}: not a containerPort of {host}")
    return out
