"""Traps in a TrainJob we did not write (``elastic-compile doctor``).

Trainer's webhooks and CEL rules, with the traps they let through
(:func:`.checks.manifest_findings`; a runtime in the same input is its own document, with
its regular sidecars and JobSet TTL: :func:`.checks.runtime_findings`), then what
hand-written TrainJobs get wrong: no launcher (the stock runtime's command is the
trainer's, it starts no torchrun: Trainer's manifests/base/runtimes/torch_distributed.yaml),
launcher flags against the PET_* the torch plugin injects, no /dev/shm, an Istio sidecar,
and the launcher rules every target shares.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from elastic_compile import contract
from elastic_compile.core.loader import Loaded
from elastic_compile.core.manifest import as_int, as_mapping
from elastic_compile.schema.launchers import launcher_kind, nested_launcher
from elastic_compile.targets.checks import FieldPath as Path
from elastic_compile.targets.checks import Finding
from elastic_compile.targets.readback.command_line import container_argv, read_launch
from elastic_compile.targets.readback.draft import Draft
from elastic_compile.targets.trainjob import api
from elastic_compile.targets.trainjob.checks import manifest_findings
from elastic_compile.targets.trainjob.readback import find_runtime
from elastic_compile.targets.traps import PER_POD, has_shm, istio_findings, launcher_findings, no_shm

#: torchrun's options against what the torch plugin injects (Trainer v2.3
#: pkg/runtime/framework/plugins/torch/torch.go).
_OVERRIDING = {
    "nnodes": "PET_NNODES", "nproc_per_node": "PET_NPROC_PER_NODE", "node_rank": "PET_NODE_RANK",
    "master_addr": "PET_MASTER_ADDR", "master_port": "PET_MASTER_PORT",
}  # fmt: skip
_TRAINER: Path = ("spec", "trainer")


def findings(job: Mapping[str, Any], stream: Sequence[Loaded]) -> list[Finding]:
    """Every trap of the TrainJob ``job``; ``stream`` may hold the runtime it references."""
    runtime, _index = find_runtime(job, stream)
    # The runtime's own rules (its webhook, a JobSet TTL, regular sidecars) are its
    # document's (runtime_findings), not repeated here.
    found = manifest_findings(job, runtime)
    spec = as_mapping(job.get("spec"))
    trainer = as_mapping(spec.get("trainer"))
    nodes = as_int(trainer.get("numNodes"))
    if nodes is None and runtime is not None:
        nodes = as_int(as_mapping(as_mapping(runtime.get("spec")).get("mlPolicy")).get("numNodes"))
    nodes = nodes or 1
    # What the torch plugin gives node (Trainer v2.3.0 torch.go:121-165): numProcPerNode, else auto
    # with a *gpu* resource, else one per requested CPU; the resources of a runtime in the input count.
    resources = api.runtime_node_resources(runtime) if runtime is not None else None
    nproc_text = api.plugin_nproc(trainer, resources)
    job_name = str(as_mapping(job.get("metadata")).get("name"))
    injected: dict[str, str | None] = {
        "nnodes": str(nodes), "nproc_per_node": nproc_text, "node_rank": PER_POD,
        "master_addr": api.master_addr(job_name), "master_port": str(api.MASTER_PORT),
    }  # fmt: skip
    words = [*(trainer.get("command") or []), *(trainer.get("args") or [])]
    policy = as_mapping(as_mapping(runtime.get("spec")).get("mlPolicy")) if runtime is not None else {}
    torch = runtime is None or "torch" in policy  # another framework's runtime (flux...) starts its own launcher
    if torch and trainer and all(isinstance(w, str) for w in words):
        # Without a command the image's entrypoint runs (with the args): not in the manifest to judge.
        if trainer.get("command") and not _launches(words):
            per_node = nproc_text
            if per_node == "auto":  # one process per device the pod gets: its GPU request
                given = trainer.get("resourcesPerNode")
                gpus = api.gpus_per_node(given if isinstance(given, Mapping) else (resources or {}))
                per_node = str(gpus) if gpus > 0 else per_node
            found += _no_launcher(words, nodes, per_node)
        found += launcher_findings(trainer, _TRAINER, _OVERRIDING, nodes=nodes, restarts_set=True, injected=injected)
    env = trainer.get("env")
    for j, entry in enumerate(env if isinstance(env, list) else []):
        name = as_mapping(entry).get("name")
        if isinstance(name, str) and name in contract.WORKER_ENV_NAMES:
            found.append(
                Finding(
                    "operator-env",
                    (*_TRAINER, "env", j, "name"),
                    f"{name} set by hand: torch elastic sets it for every worker process, so this value never "
                    "reaches the training code",
                )
            )
    elastic = _elastic_range(trainer, nodes) if trainer else None
    found += _min_above_nodes(elastic, nodes)
    found += _elastic_without_policies(elastic, as_mapping(spec.get("runtimeRef")), runtime)
    found += _pod_findings(spec, runtime)
    return list(dict.fromkeys(found))


def _elastic_range(trainer: Mapping[str, Any], nodes: int) -> tuple[str, int, int] | None:
    """The elastic range the trainer's launcher is given: ``(option, MIN, MAX)``, or None for none.

    elastic-launch's ``--min-nodes MIN`` (MAX is numNodes, its ``PET_NNODES``), or torchrun's
    ``--nnodes MIN:MAX`` (``MIN:$(PET_NNODES)`` as the compiler writes it). The command line is
    read as each launcher reads it (torchrun's own option rules in
    :func:`~elastic_compile.schema.launchers.parse_torchrun`, elastic-launch's parser, a plain
    ``sh -c`` script unwrapped), as ``import`` reads it.
    """
    argv, _relative = container_argv(trainer)
    launch = read_launch(argv, lambda i: (), Draft())  # only the reading counts here, not the import's notes
    if launch.launcher is None:
        return None
    found = launch.settings.get("min_nodes")
    if found is not None:
        low, high, option = str(found[0]), str(nodes), contract.OPT_MIN_NODES
    else:
        found = launch.settings.get("nnodes")
        if found is None or ":" not in str(found[0]):
            return None
        low, _colon, high = str(found[0]).partition(":")
        high, option = (str(nodes) if high == f"$({contract.PET_NNODES})" else high), "--nnodes"
    return (option, int(low), int(high)) if low.isdigit() and high.isdigit() else None


def _min_above_nodes(elastic: tuple[str, int, int] | None, nodes: int) -> list[Finding]:
    """DR031: an elastic minimum above numNodes, as an overlay that lowers numNodes leaves it: no
    rendezvous can start."""
    if elastic is None or elastic[1] <= nodes:
        return []
    option, low, _high = elastic
    if option == contract.OPT_MIN_NODES:
        fate = "elastic-launch refuses it at start"
    else:
        fate = "the rendezvous never reaches its minimum and times out"
    message = (
        f"{option} asks for at least {low} nodes but numNodes is {nodes}: {fate}, so every pod fails until "
        f"backoffLimit; lower the minimum with numNodes, or raise numNodes to {low} or more"
    )
    return [Finding("min-above-nodes", (*_TRAINER, "numNodes"), message)]


def _elastic_without_policies(
    elastic: tuple[str, int, int] | None, ref: Mapping[str, Any], runtime: Mapping[str, Any] | None
) -> list[Finding]:
    """DR032: an elastic range run by a runtime without the node Job policies it needs.

    Trainer's stock torch-distributed (or a runtime in the input whose node Job has no
    successPolicy) gives the node Job none: seen on the real control plane, its Job has
    ``completions`` numNodes and no successPolicy, so it completes only when every index has
    succeeded, and ``podReplacementPolicy: TerminatingOrFailed``, so a lost node 0 is replaced
    while the old pod still terminates (tests/realcluster/test_trainjob_elastic.py).
    """
    if elastic is None or elastic[1] >= elastic[2]:
        return []
    if runtime is None:
        if not api.is_stock(ref):
            return []  # a runtime not in the input: its policies cannot be seen
        runtime = api.stock_runtime()
    if _node_job_spec(runtime).get("successPolicy") is not None:
        return []
    option, low, high = elastic
    name = ref.get("name")
    which = f"Trainer's stock runtime {name}" if api.is_stock(ref) else f"the runtime {name}"
    given = f"{option} {low} of numNodes {high}" if option == contract.OPT_MIN_NODES else f"{option} {low}:{high}"
    message = (
        f"an elastic range ({given}) on {which}, whose node Job has no successPolicy: the "
        f"Job completes only when all {high} indexes have succeeded, so a job training at {low} while the other "
        "pods wait for a node never completes, and a lost node 0 is replaced while the old pod still terminates "
        "(podReplacementPolicy TerminatingOrFailed: two rendezvous stores); compile the job with nnodes "
        f'"{low}:{high}" under -t trainjob, whose TrainingRuntime carries these policies, and reference it, or give '
        "the launcher a fixed node count"
    )
    return [Finding("elastic-stock-runtime", ("spec", "runtimeRef", "name"), message)]


def _node_job_spec(runtime: Mapping[str, Any]) -> Mapping[str, Any]:
    """The Job spec of the runtime's node job (empty when it has none)."""
    jobs = as_mapping(as_mapping(as_mapping(runtime.get("spec")).get("template")).get("spec")).get("replicatedJobs")
    for rjob in jobs if isinstance(jobs, list) else []:
        if as_mapping(rjob).get("name") == api.NODE:
            return as_mapping(as_mapping(as_mapping(rjob).get("template")).get("spec"))
    return {}


def _no_launcher(words: Sequence[str], nodes: int, nproc: str) -> list[Finding]:
    """DR023: the command runs once per pod, with what torch's env:// needs set by nobody.

    Trainer sets only the PET_* variables (torch.go:145-166): no MASTER_ADDR, RANK or
    WORLD_SIZE, and nothing starts PET_NPROC_PER_NODE processes. A command that names PET_*
    itself (a script reading PET_NODE_RANK) sets up its topology on its own: not judged.
    """
    many = nproc != "1"
    if not (nodes > 1 or many) or any("PET_" in w for w in words):
        return []
    per_node = "one process per device" if nproc == "auto" else f"{nproc} per node"
    return [
        Finding(
            "no-launcher",
            (*_TRAINER, "command"),
            f"no launcher in the trainer's command: Trainer's runtime starts none, so it runs once per pod ({nodes} "
            f"x 1, where Trainer's PET_* say {nodes} node(s) x {per_node}), and torch's env:// finds no MASTER_ADDR, "
            "RANK or WORLD_SIZE (Trainer sets only PET_*); start it with torchrun or elastic-launch, or read PET_* in "
            "the script",
        )
    ]


def _launches(words: Sequence[str]) -> bool:
    return launcher_kind(words) is not None or nested_launcher(words) is not None


def _pod_findings(spec: Mapping[str, Any], runtime: Mapping[str, Any] | None) -> list[Finding]:
    """/dev/shm across the patches and the runtime, Istio in the patches."""
    found: list[Finding] = []
    shm = False
    patches = spec.get("runtimePatches")
    for p, patch in enumerate(patches if isinstance(patches, list) else []):
        rjobs = as_mapping(as_mapping(as_mapping(patch).get("trainingRuntimeSpec")).get("template")).get("spec")
        for j, rjob in enumerate(as_mapping(rjobs).get("replicatedJobs") or []):
            if as_mapping(rjob).get("name") != api.NODE:
                continue
            tpl = as_mapping(as_mapping(as_mapping(rjob).get("template")).get("spec")).get("template")
            base: Path = ("spec", "runtimePatches", p, "trainingRuntimeSpec", "template", "spec", "replicatedJobs", j)
            shm = shm or _mounts_shm(as_mapping(tpl))
            found += istio_findings(as_mapping(tpl), (*base, "template", "spec", "template"))
    if runtime is not None:
        rspec = as_mapping(as_mapping(runtime.get("spec")).get("template")).get("spec")
        for rjob in as_mapping(rspec).get("replicatedJobs") or []:
            if as_mapping(rjob).get("name") == api.NODE:
                tpl = as_mapping(as_mapping(as_mapping(rjob).get("template")).get("spec")).get("template")
                shm = shm or _mounts_shm(as_mapping(tpl))
    if not shm:
        found.append(
            no_shm(
                _TRAINER, "no /dev/shm mount on the node container (neither a runtimePatch nor the runtime gives one)"
            )
        )
    return found


def _mounts_shm(template: Mapping[str, Any]) -> bool:
    containers = as_mapping(template.get("spec")).get("containers")
    return any(
        as_mapping(c).get("name") == api.NODE and has_shm(as_mapping(c))
        for c in (containers if isinstance(containers, list) else [])
    )
