"""Kubeflow Trainer v2.3 on JobSet v0.12, emulated: what they make of a TrainJob, and their rules.

Given a TrainJob (and our TrainingRuntime when the stream has one; the stock
``torch-distributed`` runtime is built in), this computes what Trainer and JobSet would
run (Trainer v2.3.0: pkg/apis/trainer/v1alpha1/trainjob_types.go, the JobSet and torch plugins
in pkg/runtime/framework/plugins/):

* the runtime's JobSet template, with the TrainJob's ``runtimePatches`` strategic-merged
  onto it in list order, then the ``trainer`` fields applied to the container ``node`` of
  the trainer-ancestor job (image, command, args; env after the runtime's; resources merged);
* one Indexed Job ``<name>-node-0`` with ``numNodes`` pods named ``<name>-node-0-<i>``
  (the hostname; the real pod name adds a random suffix), whose env ends with the five
  ``PET_*`` variables of the torch plugin, ``PET_NODE_RANK`` from the completion index;
* the rules: pods restart in place under ``OnFailure`` (JobSet's default) or are replaced
  under ``Never``, both counted against the Job's ``backoffLimit`` (Kubernetes' default 6);
  the Job succeeds when every index has, or when its successPolicy is met (an elastic
  TrainJob's: node 0); a failed Job fails the JobSet and the TrainJob (no failurePolicy, or
  ours: maxRestarts 0), and activeDeadlineSeconds fails it too;
* an elastic TrainJob (``nnodes: MIN:MAX``, :func:`elastic_min`) keeps its MAX pods; ``--nodes``
  says how many find a node, the others stay Pending (``UNSCHEDULABLE``).

Only node 0's address (``PET_MASTER_ADDR``) and the pod IPs become this machine.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from elastic_compile import contract
from elastic_compile.localrun.engine import Engine, accelerator_units, device_shares
from elastic_compile.localrun.kubeflow import fit_nproc
from elastic_compile.localrun.kubelet import LOCAL_IP, Pod, config_map_mounts, expand, resolve_env
from elastic_compile.localrun.process import (
    DEFAULT_GRACE,
    MARKER_ENV,
    LocalPod,
    Options,
    RunError,
    base_env,
    free_port,
    local_argv,
    port_busy,
)
from elastic_compile.schema.launchers import node0_torchrun
from elastic_compile.targets.readback.command_line import read_launch
from elastic_compile.targets.readback.draft import Draft
from elastic_compile.targets.trainjob import api
from elastic_compile.targets.trainjob.checks import manifest_errors

#: The state of a pod that no node can take (an elastic TrainJob run with --nodes below MAX).
UNSCHEDULABLE: Final = "Unschedulable"
#: Kubernetes' Job default (batch/v1 JobSpec.backoffLimit), where the runtime's node Job sets none.
DEFAULT_BACKOFF_LIMIT: Final = api.JOB_BACKOFF_LIMIT_DEFAULT
#: JobSet's webhook defaults the pod restartPolicy to OnFailure when the template has none.
DEFAULT_RESTART_POLICY: Final = "OnFailure"
JOB_RESTART_POLICIES: Final = ("OnFailure", "Never")

# The stock torch-distributed ClusterTrainingRuntime of v2.3.0, for a TrainJob that references it.
STOCK_RUNTIME: Final = api.stock_runtime()

strategic_merge = api.strategic_merge


def _runtime_for(job: Mapping[str, Any], runtime: Mapping[str, Any] | None) -> Mapping[str, Any]:
    ref = job["spec"].get("runtimeRef") or {}
    kind = ref.get("kind", api.CLUSTER_TRAINING_RUNTIME)
    if runtime is not None and runtime.get("kind") == kind and runtime["metadata"]["name"] == ref.get("name"):
        return runtime
    if kind == api.CLUSTER_TRAINING_RUNTIME and ref.get("name") == api.STOCK_RUNTIME:
        return STOCK_RUNTIME
    raise RunError(
        f"the TrainJob references the {kind} {ref.get('name')}, which run does not know: give a stream that "
        "holds it (e.g. kubectl kustomize output), or reference torch-distributed"
    )


def _trainer_job(jobset: Mapping[str, Any]) -> dict[str, Any]:
    for rjob in jobset.get("replicatedJobs") or []:
        labels = ((rjob.get("template") or {}).get("metadata") or {}).get("labels") or {}
        if labels.get(api.LABEL_ANCESTOR) == api.ANCESTOR_TRAINER:
            return dict(rjob)
    raise RunError(f"the runtime has no replicated job labelled {api.LABEL_ANCESTOR}: {api.ANCESTOR_TRAINER}")


def jobset_of(job: Mapping[str, Any], runtime: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The JobSet spec Trainer builds: the runtime, then each runtimePatch in order, then the trainer (jobset.go,
    torch.go)."""
    source = _runtime_for(job, runtime)
    jobset: dict[str, Any] = copy.deepcopy(source["spec"]["template"]["spec"])
    for patch in job["spec"].get("runtimePatches") or []:
        patched = ((patch.get("trainingRuntimeSpec") or {}).get("template") or {}).get("spec") or {}
        jobset = strategic_merge(jobset, patched)
    trainer = job["spec"].get("trainer") or {}
    rjob = _trainer_job(jobset)
    pod = rjob["template"]["spec"]["template"]["spec"]
    node = next((c for c in pod.get("containers") or [] if c.get("name") == api.NODE), None)
    if node is None:
        raise RunError(f"the trainer job {rjob.get('name')} has no container {api.NODE}")
    for key in ("image", "command", "args"):
        if key in trainer:
            node[key] = list(trainer[key]) if isinstance(trainer[key], list) else trainer[key]
    if trainer.get("env"):
        node["env"] = strategic_merge(node.get("env") or [], trainer["env"], "env")
    if trainer.get("resourcesPerNode"):
        node["resources"] = strategic_merge(node.get("resources") or {}, trainer["resourcesPerNode"])
    return jobset


def num_nodes(job: Mapping[str, Any], runtime: Mapping[str, Any] | None = None) -> int:
    """trainer.numNodes, else the runtime's mlPolicy.numNodes, else 1 (torch.go:117-119)."""
    trainer = job["spec"].get("trainer") or {}
    if trainer.get("numNodes") is not None:
        return int(trainer["numNodes"])
    policy = _runtime_for(job, runtime)["spec"].get("mlPolicy") or {}
    return int(policy.get("numNodes") or 1)


def pet_env(job: Mapping[str, Any], node: Mapping[str, Any], nodes: int, master_port: int) -> list[dict[str, Any]]:
    """The five variables the torch plugin upserts into ``node`` (torch.go:110-225), in its order."""
    name = job["metadata"]["name"]
    trainer = job["spec"].get("trainer") or {}
    # The node's resources: trainer.resourcesPerNode alone when given, else the runtime's (already in node).
    nproc = api.plugin_nproc(trainer, node.get("resources") or {})
    return [
        {"name": api.PET_NNODES, "value": str(nodes)},
        {"name": api.PET_NPROC_PER_NODE, "value": str(nproc)},
        {
            "name": api.PET_NODE_RANK,
            "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{api.COMPLETION_INDEX_ANNOTATION}']"}},
        },
        {"name": api.PET_MASTER_ADDR, "value": api.master_addr(name)},
        {"name": api.PET_MASTER_PORT, "value": str(master_port)},
    ]


#: The variable the Job controller gives every container of an Indexed Job's pod.
COMPLETION_INDEX_ENV: Final = "JOB_COMPLETION_INDEX"


def completion_index_env(entries: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """What the Job controller appends to a container's env: ``JOB_COMPLETION_INDEX`` from the
    pod's completion-index label, unless the container names it already (kubernetes v1.37.2
    pkg/controller/job/indexed_job_utils.go:462-477; seen on the real pods,
    tests/realcluster/test_pods_match_run.py)."""
    if any(e.get("name") == COMPLETION_INDEX_ENV for e in entries):
        return []
    path = f"metadata.labels['{api.COMPLETION_INDEX_ANNOTATION}']"
    return [{"name": COMPLETION_INDEX_ENV, "valueFrom": {"fieldRef": {"fieldPath": path}}}]


def pods(
    job: Mapping[str, Any],
    runtime: Mapping[str, Any] | None = None,
    *,
    namespace: str = "default",
    local: bool = True,
    lookup: Mapping[str, str] | None = None,
    master_port: int = api.MASTER_PORT,
) -> list[Pod]:
    """Every pod of the trainer job, with the command and environment Trainer and JobSet give it.

    With ``local``, node 0's address and the pod IPs become 127.0.0.1; ``master_port``
    stands in for the plugin's 29500 when that port is taken here.
    """
    if job.get("kind") != api.TRAINJOB:
        raise RunError("not a TrainJob")
    name = str(job["metadata"]["name"])
    namespace = str(job["metadata"].get("namespace", namespace))
    rjob = _trainer_job(jobset_of(job, runtime))
    template = rjob["template"]["spec"]["template"]
    pod_spec = template["spec"]
    node = next(c for c in pod_spec["containers"] if c["name"] == api.NODE)
    count = num_nodes(job, runtime)
    out: list[Pod] = []
    for index in range(count):
        pod_name = f"{name}-{rjob['name']}-0-{index}"
        labels = dict((template.get("metadata") or {}).get("labels") or {})
        labels.update({
            api.LABEL_JOBSET_NAME: name,
            "jobset.sigs.k8s.io/replicatedjob-name": str(rjob["name"]),
            "batch.kubernetes.io/job-completion-index": str(index),
        })  # fmt: skip
        annotations = dict((template.get("metadata") or {}).get("annotations") or {})
        annotations[api.COMPLETION_INDEX_ANNOTATION] = str(index)
        facts = {
            "name": pod_name, "namespace": namespace, "ip": LOCAL_IP, "labels": labels, "annotations": annotations,
            "serviceAccountName": pod_spec.get("serviceAccountName", "default"),
        }  # fmt: skip
        plugin = pet_env(job, node, count, master_port)
        if local:
            for var in plugin:
                if var["name"] == api.PET_MASTER_ADDR:
                    var["value"] = LOCAL_IP
        # The plugin upserts: a runtime or trainer entry of the same name is replaced in place.
        entries = [e for e in node.get("env") or [] if e.get("name") not in api.RESERVED_ENV] + plugin
        entries += completion_index_env(entries)
        env, unresolved, looked_up = resolve_env(entries, facts, lookup)
        words = [*(node.get("command") or []), *(node.get("args") or [])]
        argv = tuple(expand(str(a), env) for a in words)
        restart = str(pod_spec.get("restartPolicy", DEFAULT_RESTART_POLICY))
        out.append(Pod(pod_name, api.NODE, index, str(node.get("image", "")), argv, env, restart, labels,
                       unresolved, looked_up, config_map_mounts(pod_spec, node)))  # fmt: skip
    return out


def elastic_min(job: Mapping[str, Any], runtime: Mapping[str, Any] | None = None) -> int | None:
    """MIN of an elastic TrainJob (``nnodes: MIN:MAX``), from its launcher's words; None for a fixed one.

    Trainer has no elastic policy: the range lives only in the command, as elastic-launch's
    ``--min-nodes MIN`` (the compiled form) or torchrun's ``--nnodes MIN:$(PET_NNODES)``;
    the pod count, MAX, is numNodes.
    """
    (pod, *_rest) = pods(job, runtime, local=False)
    torchrun = node0_torchrun(pod.argv)
    words = torchrun[0] if torchrun is not None else list(pod.argv)
    words = words[: words.index("--")] if "--" in words else words
    for i, word in enumerate(words[:-1]):
        value = words[i + 1]
        if word == contract.OPT_MIN_NODES and value.isdigit():
            return int(value)
        if word == "--nnodes" and ":" in value:
            low = value.partition(":")[0]
            return int(low) if low.isdigit() else None
    return None


def check_job(job: Mapping[str, Any], runtime: Mapping[str, Any] | None, label: str) -> None:
    """Reject what the cluster would reject: Trainer's webhooks and the Job's restart policy."""
    problems = manifest_errors(job, runtime)
    if runtime is not None:
        problems += manifest_errors(runtime)
    if not problems:
        pod_spec = _trainer_job(jobset_of(job, runtime))["template"]["spec"]["template"]["spec"]
        policy = pod_spec.get("restartPolicy", DEFAULT_RESTART_POLICY)
        if policy not in JOB_RESTART_POLICIES:
            problems.append(f"restartPolicy: a Job's pods take OnFailure or Never (given: {policy})")
    if not problems:
        problems += _guessed_store_host(job, runtime)
    if problems:
        raise RunError("\n".join(f"{label}: {p}" for p in problems))


def _guessed_store_host(job: Mapping[str, Any], runtime: Mapping[str, Any] | None) -> list[str]:
    """torchrun's c10d rendezvous with the store host left to torch's guess: the cluster could fail it.

    Without ``is_host``, torch's c10d backend makes a pod the host when the endpoint's name is
    its hostname or resolves to its own address (torch 2.13 rendezvous/c10d_rendezvous_backend.py:137-145,
    utils.py:117-166). Trainer's node 0 is <name>-node-0-0, and PET_MASTER_ADDR
    <name>-node-0-0.<name> matches it only through a DNS lookup that races JobSet's headless
    Service: a miss leaves no pod hosting the store. Here every pod is 127.0.0.1, which
    always matches, so a run would pass what the cluster can fail.
    """
    (pod, *_rest) = pods(job, runtime, local=False)
    if node0_torchrun(pod.argv) is not None:
        return []  # the compiled form: a shell sets is_host from PET_NODE_RANK
    launch = read_launch(list(pod.argv), lambda i: (i,), Draft())
    if launch.launcher is None or "rdzv_at_master" in launch.settings:
        return []  # none, or elastic-launch --rdzv-at-master (it decides by PET_NODE_RANK)
    # torchrun, or elastic-launch without --rdzv-at-master, whose pod name (JobSet's has a random
    # suffix) names no endpoint here: both fall back to torch's guess.
    settings = {name: str(value) for name, (value, _at) in launch.settings.items()}
    static = "static" if launch.launcher != contract.LAUNCHER else "c10d"  # each launcher's default backend
    backend = settings.get("rdzv_backend") or pod.env.get(contract.PET_RDZV_BACKEND) or static
    conf = settings.get("rdzv_conf") or pod.env.get(contract.PET_RDZV_CONF) or ""
    if backend != "c10d" or any(item.partition("=")[0].strip() == "is_host" for item in conf.split(",")):
        return []
    endpoint = settings.get("rdzv_endpoint") or pod.env.get(contract.PET_RDZV_ENDPOINT) or ""
    host = endpoint.rpartition(":")[0] if ":" in endpoint else endpoint
    hostname = f"{job['metadata']['name']}-{api.NODE}-0-0"
    if not host or host in (hostname, "localhost", "127.0.0.1", "::1", "[::1]"):
        return []
    return [
        f"{launch.launcher} meets with c10d at {host} without is_host: on the cluster node 0 "
        f"({hostname}) hosts the store only if that name already resolves to its own address when its agent "
        "starts (a DNS lookup racing JobSet's headless Service), and no pod hosts it otherwise; here every pod is "
        "127.0.0.1, which always passes. Decide it by rank: elastic-launch --rdzv-at-master, or torchrun as "
        "elastic-compile writes it (launcher: torchrun: a shell sets is_host from PET_NODE_RANK)"
    ]


def fit_job(
    manifest: Mapping[str, Any],
    runtime: Mapping[str, Any] | None,
    opts: Options,
    *,
    gpus: Sequence[str],
    cpus: int,
) -> tuple[dict[str, Any], list[str]]:
    """A copy of the TrainJob changed to run here, and a note per change (as ``kubeflow.fit_job``).

    ``--nodes`` sets trainer.numNodes and ``--nproc-per-node`` (or GPU scaling) sets
    numProcPerNode, so that the plugin's own rules turn them into PET_* variables.
    """
    job: dict[str, Any] = copy.deepcopy(dict(manifest))
    trainer = job["spec"].setdefault("trainer", {})
    notes: list[str] = []
    nodes = num_nodes(job, runtime)
    low = elastic_min(job, runtime)
    if low is not None and opts.nodes is not None:
        # An elastic TrainJob keeps its MAX pods: --nodes says how many of them find a node.
        if not low <= opts.nodes <= nodes:
            raise RunError(f"--nodes {opts.nodes}: the elastic TrainJob runs {low}:{nodes} nodes; give {low}..{nodes}")
        if opts.nodes < nodes:
            notes.append(
                f"--nodes {opts.nodes}: {opts.nodes} of the {nodes} pods find a node; the others stay Pending "
                f"(unschedulable), and the rendezvous starts with {opts.nodes} after its last call"
            )
    elif opts.nodes is not None and opts.nodes != nodes:
        notes.append(f"--nodes {opts.nodes}: trainer.numNodes {opts.nodes} (was {nodes})")
        trainer["numNodes"] = nodes = opts.nodes
    # What the torch plugin would set on the cluster: a CPU-only node without numProcPerNode
    # runs one process per CPU it requests (torch.go:121-135), not this machine's share.
    nproc = api.plugin_nproc(trainer, api.runtime_node_resources(_runtime_for(job, runtime)))
    wanted = requested_units(job, runtime)
    running = opts.nodes if low is not None and opts.nodes is not None else nodes
    per_pod = min(wanted, len(gpus) // max(1, running))
    note: str | None
    if opts.nproc_per_node is not None:
        new, note = str(opts.nproc_per_node), f"--nproc-per-node {opts.nproc_per_node}: numProcPerNode (was {nproc})"
    else:
        new, note = fit_nproc(nproc, gpus_requested=wanted, gpus_per_pod=per_pod, cpus=cpus, pods=running)
    if note:
        notes.append(note.replace("nprocPerNode", "numProcPerNode"))
    if new != nproc:
        trainer["numProcPerNode"] = int(new) if new.isdigit() else new
    return job, notes


def node_parts(job: Mapping[str, Any], runtime: Mapping[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The pod spec of the trainer job's pods and its ``node`` container, as Trainer builds them."""
    pod_spec: dict[str, Any] = _trainer_job(jobset_of(job, runtime))["template"]["spec"]["template"]["spec"]
    return pod_spec, next(c for c in pod_spec["containers"] if c["name"] == api.NODE)


def requested_units(job: Mapping[str, Any], runtime: Mapping[str, Any] | None) -> int:
    """Devices each node asks for: the ``node`` container's resources, trainer.resourcesPerNode merged in."""
    return accelerator_units(node_parts(job, runtime)[1].get("resources") or {})


def build_pods(
    job: Mapping[str, Any],
    runtime: Mapping[str, Any] | None,
    *,
    environ: Mapping[str, str],
    gpus: Sequence[str],
    token: str,
    given: Mapping[str, str] | None = None,
    is_busy: Callable[[int], bool] = port_busy,
    schedulable: int | None = None,
) -> tuple[list[LocalPod], list[str], int]:
    """The local pods of the TrainJob, the notes, and the master port used here.

    As :func:`kubeflow.build_pods`: env entries that need the cluster take their value only
    from ``given`` (``--env NAME=VALUE``), never from ``environ``. ``is_busy`` says whether
    the plugin's port is taken where the pods run (never, in run's private network).
    """
    notes: list[str] = []
    master_port = api.MASTER_PORT
    if num_nodes(job, runtime) > 1 and is_busy(master_port):
        master_port = free_port()
        notes.append(
            f"PET_MASTER_PORT {api.MASTER_PORT} is in use on this machine; using {master_port} "
            "(on the cluster node 0 has its own IP)"
        )
    computed = pods(job, runtime, local=True, lookup=given or {}, master_port=master_port)
    if not computed:
        raise RunError("the TrainJob has no pods (trainer.numNodes is 0)")
    pod_spec = _trainer_job(jobset_of(job, runtime))["template"]["spec"]["template"]["spec"]
    node = next(c for c in pod_spec["containers"] if c["name"] == api.NODE)
    if not node.get("command"):
        raise RunError("the node container has no command, so the image's ENTRYPOINT would run; run cannot know it")
    for name in computed[0].looked_up:
        notes.append(f"{name}: taken from --env")
    for name in computed[0].unresolved:
        notes.append(f"warning: {name} needs the cluster: skipped (pass --env {name}=VALUE to give it a value)")
    for init in pod_spec.get("initContainers") or []:
        kind = "native sidecar" if init.get("restartPolicy") == "Always" else "init container"
        notes.append(f"{kind} {init.get('name')} is not run locally")
    for other in pod_spec.get("containers") or []:
        if other.get("name") != api.NODE:
            notes.append(f"container {other.get('name')} is not run locally")
    base = base_env(environ)
    placed = len(computed) if schedulable is None else min(schedulable, len(computed))
    shares = device_shares(gpus, requested_units(job, runtime), placed)
    grace = pod_spec.get("terminationGracePeriodSeconds")
    out: list[LocalPod] = []
    for i, pod in enumerate(computed):
        env = dict(base)
        env["HOSTNAME"] = pod.name  # JobSet sets the hostname to <name>-node-0-<i>
        env.update(pod.env)
        if gpus and i < placed:
            env["CUDA_VISIBLE_DEVICES"] = shares[i]
        env[MARKER_ENV] = f"{token}/{pod.name}"
        local = LocalPod(
            pod=pod,
            argv=local_argv(pod.argv),
            env=env,
            grace=float(grace) if grace is not None else DEFAULT_GRACE,
            marker=env[MARKER_ENV],
        )
        if i >= placed:  # no node for it: Pending for good, as the scheduler leaves it
            local.state, local.start_at = UNSCHEDULABLE, None
        out.append(local)
    return out, notes, master_port


# --------------------------------------------------------------------------- the rules


def _indexes(text: str) -> frozenset[int]:
    """A Job successPolicy's succeededIndexes, ``"0"`` or ``"0-2,5"`` (batch/v1 SuccessPolicyRule)."""
    out: set[int] = set()
    for part in text.split(","):
        first, _sep, last = part.strip().partition("-")
        if not first.isdigit() or (last and not last.isdigit()):
            raise RunError(f"successPolicy: succeededIndexes {text!r} is not a list of indexes and ranges")
        out.update(range(int(first), int(last or first) + 1))
    return frozenset(out)


def _success_rules(spec: Mapping[str, Any]) -> tuple[tuple[frozenset[int] | None, int | None], ...]:
    """The node Job's successPolicy rules as (indexes or None for any, count or None for all of them)."""
    rules = []
    for rule in (spec.get("successPolicy") or {}).get("rules") or []:
        indexes = rule.get("succeededIndexes")
        count = rule.get("succeededCount")
        rules.append((None if indexes is None else _indexes(str(indexes)), None if count is None else int(count)))
    return tuple(rules)


@dataclass(frozen=True)
class Rules:
    """JobSet's and the Job controller's rules for the trainer job (torch.go, Kubernetes batch/v1)."""

    name: str
    backoff_limit: int
    active_deadline: float | None
    suspended: bool
    #: The node Job's successPolicy rules (empty: every index must succeed).
    success_rules: tuple[tuple[frozenset[int] | None, int | None], ...] = ()
    #: MIN of an elastic TrainJob (its launcher's --min-nodes), None for a fixed one.
    min_nodes: int | None = None

    @classmethod
    def of(cls, job: Mapping[str, Any], runtime: Mapping[str, Any] | None = None) -> Rules:
        rjob = _trainer_job(jobset_of(job, runtime))
        limit = rjob["template"]["spec"].get("backoffLimit")
        deadline = job["spec"].get("activeDeadlineSeconds")
        return cls(
            name=str(job["metadata"]["name"]),
            backoff_limit=DEFAULT_BACKOFF_LIMIT if limit is None else int(limit),
            active_deadline=None if deadline is None else float(deadline),
            suspended=bool(job["spec"].get("suspend")),
            success_rules=_success_rules(rjob["template"]["spec"]),
            min_nodes=elastic_min(job, runtime),
        )

    def describe(self) -> str:
        if self.success_rules:
            when = "succeeds by its successPolicy (" + "; ".join(self._rule_text(r) for r in self.success_rules) + ")"
        else:
            when = "succeeds when every node does"
        elastic = f"elastic: trains with {self.min_nodes} node(s) or more; " if self.min_nodes is not None else ""
        return (
            f"{elastic}{when}; any failed Job fails the JobSet; backoffLimit {self.backoff_limit}"
            " (restarts and replaced pods)"
        )

    @staticmethod
    def _rule_text(rule: tuple[frozenset[int] | None, int | None]) -> str:
        indexes, count = rule
        where = "any index" if indexes is None else "index(es) " + ",".join(str(i) for i in sorted(indexes))
        return f"{where}: {'all' if count is None else count} succeeded"

    def past_backoff_limit(self, restarts: int) -> bool:
        """pastBackoffLimitOnFailure: the Job's container restarts >= backoffLimit (any, for 0)."""
        return restarts > 0 if self.backoff_limit == 0 else restarts >= self.backoff_limit

    def replaces(self, policy: str, code: int) -> str | None:
        """Under Never the Job controller creates a new pod for the failed index."""
        if policy == "Never":
            return "failed under restartPolicy Never: the Job controller creates a new pod for its index"
        return None

    def past_failed_limit(self, failed: int) -> bool:
        """A Job with restartPolicy Never fails once its failed pods exceed backoffLimit."""
        return failed > self.backoff_limit

    def success(self, pods: Sequence[LocalPod], pod: LocalPod) -> str | None:
        """An Indexed Job completes when every index has succeeded, or when a successPolicy rule is met
        (the Job controller then removes the lingering pods); the JobSet with its only Job."""
        done = frozenset(p.pod.index for p in pods if p.state == "Succeeded")
        for rule in self.success_rules:
            indexes, count = rule
            among = done if indexes is None else done & indexes
            need = count if count is not None else (len(pods) if indexes is None else len(indexes))
            if len(among) >= need:
                return (
                    f"{pod.name} succeeded, which meets the node Job's successPolicy ({self._rule_text(rule)}): the "
                    "Job completes and its lingering pods are removed, and the JobSet and TrainJob complete with it"
                )
        if all(p.state == "Succeeded" for p in pods):
            return f"all {len(pods)} node(s) succeeded: the Job completes, and the JobSet and TrainJob with it"
        return None

    def lost(self, pods: Sequence[LocalPod]) -> str | None:
        lost = [p for p in pods if p.state == "Lost"]
        if not lost:
            return None
        if self.min_nodes is None:
            return (
                f"{lost[-1].name} was lost and a TrainJob has a fixed number of nodes (the cluster would replace the "
                "pod)"
            )
        # --kill plays a node gone with no other node free: the Job's new pod for the index stays Pending.
        host = next((p for p in lost if p.pod.index == 0), None)
        if host is not None:
            return (
                f"{host.name} was lost, and its agent hosted the rendezvous store: on a cluster the other pods lose "
                f"the store, restart in place (exit 202) and wait read_timeout for {host.name}'s name again, until "
                "the Job's new pod for index 0 runs and hosts a new store (each restart counts against "
                "backoffLimit); with no node free for it, as --kill plays it, nothing brings it back"
            )
        alive = [p for p in pods if p.state in ("Running", "Pending", "Succeeded")]
        if len(alive) < self.min_nodes:
            return (
                f"{len(alive)} node(s) left, fewer than the elastic minimum {self.min_nodes}: on a cluster the "
                "survivors wait join_timeout per attempt for the Job's new pods, which need a free node"
            )
        return None

    def cleanup_why(self) -> str:
        return "the failed Job's active pods are deleted"


def store_host(pods: Sequence[LocalPod], master_port: int) -> tuple[LocalPod, int] | None:
    """Node 0 hosts the c10d store on the cluster (PET_MASTER_ADDR names it)."""
    return (pods[0], master_port) if len(pods) > 1 else None


class TrainJobEngine(Engine):
    """A TrainJob as Trainer v2.3 and JobSet run it (with our TrainingRuntime when the input has it)."""

    kind = "TrainJob"

    def __init__(self, job: Mapping[str, Any], label: str, others: Sequence[Mapping[str, Any]] = ()) -> None:
        super().__init__(job, label, others)
        ref = (self.job.get("spec") or {}).get("runtimeRef") or {}
        runtimes = [r for r in others if r.get("kind") == "TrainingRuntime"]
        self.runtime = next((r for r in runtimes if (r.get("metadata") or {}).get("name") == ref.get("name")), None)
        self.master_port: int = api.MASTER_PORT
        self._is_busy: Callable[[int], bool] = port_busy
        self._schedulable: int | None = None

    def check(self) -> None:
        check_job(self.job, self.runtime, self.label)

    def fit(self, opts: Options, *, gpus: Sequence[str], cpus: int, is_busy: Callable[[int], bool]) -> list[str]:
        self.job, notes = fit_job(self.job, self.runtime, opts, gpus=gpus, cpus=cpus)
        self._is_busy = is_busy  # the plugin's master port moves in build_pods, once the pods are known
        # An elastic TrainJob keeps its MAX pods; --nodes says how many of them find a node.
        self._schedulable = opts.nodes if elastic_min(self.job, self.runtime) is not None else None
        return notes

    def pod_parts(self, pod: LocalPod | None = None) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
        return node_parts(self.job, self.runtime)

    def build_pods(
        self, *, environ: Mapping[str, str], gpus: Sequence[str], token: str, given: Mapping[str, str]
    ) -> tuple[list[LocalPod], list[str]]:
        pods, notes, self.master_port = build_pods(
            self.job,
            self.runtime,
            environ=environ,
            gpus=gpus,
            token=token,
            given=given,
            is_busy=self._is_busy,
            schedulable=self._schedulable,
        )
        return pods, notes

    def rules(self) -> Rules:
        return Rules.of(self.job, self.runtime)

    def store_host(self, pods: Sequence[LocalPod]) -> tuple[LocalPod, int] | None:
        return store_host(pods, self.master_port)

    def suspended(self) -> bool:
        return bool(self.job["spec"].get("suspend"))
