"""Traps in manifests we did not write: the rules every Kubernetes target's pods share.

``elastic-compile doctor`` reads hand-written jobs. Each rule here looks at one pod
template of such a job and returns :class:`~elastic_compile.targets.checks.Finding`s
named by rule (:data:`RULES`: the rules every Kubernetes target's pods share; each target
has its own beside it, ``Target.doctor_rules``); the command gives each rule its stable
code (:mod:`elastic_compile.compiler.doctor`). The compiler never writes these traps (its own
output passes every rule: a test holds it to that), so they live apart from the checks
that run on every compile.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from elastic_compile import contract
from elastic_compile.core.manifest import as_mapping
from elastic_compile.schema.launchers import launcher_kind, nested_launcher
from elastic_compile.schema.models import mounts_shm
from elastic_compile.targets.checks import DoctorRule, Finding
from elastic_compile.targets.checks import FieldPath as Path
from elastic_compile.targets.launcher import TORCHRUN_EXIT_CODES, exit_codes_lost
from elastic_compile.targets.pod import ISTIO_INJECT
from elastic_compile.targets.readback.command_line import container_argv, read_launch
from elastic_compile.targets.readback.draft import Draft

#: The rules of this module and of those every Kubernetes target's checks share (names and
#: pods), by the codes doctor has always printed for them.
RULES: tuple[DoctorRule, ...] = (
    DoctorRule("DR007", "name-too-long", "the pods' names (<name>-worker-<index>, JobSet's "
               "<name>-node-0-<index>-xxxxx) must fit 63 characters, or the pods and services are never created"),
    DoctorRule("DR008", "no-shm", "without a memory-backed /dev/shm, DataLoader workers and NCCL die with 'Bus error'"),
    DoctorRule("DR009", "launcher-overrides", "a launcher flag beats the PET_* the engine injects with another value: "
               "the pods disagree with the manifest"),
    DoctorRule("DR010", "nested-launcher", "a launcher inside a launcher: nproc_per_node² processes, outside the "
               "rendezvous"),
    DoctorRule("DR011", "operator-env", "env the operator or torch elastic sets, written by hand: duplicated and "
               "overridden"),
    DoctorRule("DR012", "regular-sidecar", "a regular sidecar keeps running, so the pod never completes and the job "
               "never succeeds"),
    DoctorRule("DR014", "no-max-restarts", "torchrun's default of 0 restarts fails an elastic job at its first blip"),
    DoctorRule("DR017", "pod-restart-policy", "the operator overwrites the pod template's restartPolicy"),
    DoctorRule("DR018", "istio-sidecar", "an Istio sidecar breaks the rendezvous and keeps the pod from completing"),
    DoctorRule("DR019", "host-network-dns", "hostNetwork pods resolve with the node's DNS unless dnsPolicy is "
               "ClusterFirstWithHostNet"),
    DoctorRule("DR026", "torchrun-exit-codes", TORCHRUN_EXIT_CODES),
)  # fmt: skip


def _containers(pod: Mapping[str, Any]) -> Iterator[tuple[int, Mapping[str, Any]]]:
    items = pod.get("containers")
    for index, item in enumerate(items if isinstance(items, list) else []):
        if isinstance(item, Mapping):
            yield index, item


def has_shm(container: Mapping[str, Any]) -> bool:
    """True when the container mounts something at /dev/shm (as the compiler's check reads it)."""
    mounts = container.get("volumeMounts")
    return any(isinstance(m, Mapping) and mounts_shm(dict(m)) for m in (mounts if isinstance(mounts, list) else []))


def no_shm(path: Path, what: str) -> Finding:
    """The ``no-shm`` finding at ``path``; ``what`` says what is missing where."""
    return Finding(
        "no-shm",
        path,
        f"{what}: the container runtime's 64 MiB makes DataLoader workers and NCCL die with 'Bus error'; "
        "mount an emptyDir {medium: Memory} at /dev/shm",
    )


def istio_findings(template: Mapping[str, Any], path: Path) -> list[Finding]:
    """``istio-sidecar`` when the pod template at ``path`` asks for Istio's sidecar."""
    annotations = as_mapping(as_mapping(template.get("metadata")).get("annotations"))
    if str(annotations.get(ISTIO_INJECT)).lower() != "true":
        return []
    return [
        Finding(
            "istio-sidecar",
            (*path, "metadata", "annotations", ISTIO_INJECT),
            "an Istio sidecar breaks the rendezvous (kubeflow/trainer#1637) and keeps the pod from completing",
        )
    ]


def pod_findings(
    template: Mapping[str, Any], path: Path, *, training: str, engine_env: frozenset[str] = frozenset()
) -> list[Finding]:
    """The pod-level traps of one pod template at ``path`` whose training container is named ``training``.

    ``engine_env`` names what the engine appends to every container of this pod
    (:func:`elastic_compile.core.engine_env.operator_v1_names`).
    """
    found: list[Finding] = []
    pod = as_mapping(template.get("spec"))
    spec_path: Path = (*path, "spec")
    for index, container in _containers(pod):
        where: Path = (*spec_path, "containers", index)
        name = container.get("name")
        if name == training:
            if not has_shm(container):
                found.append(no_shm(where, "no /dev/shm mount"))
        else:
            found.append(
                Finding(
                    "regular-sidecar",
                    where,
                    f"container {name!s} runs beside {training}: the pod cannot complete while it keeps running, so "
                    "the job never succeeds; make it a native sidecar (an init container with restartPolicy: Always)",
                )
            )
        env = container.get("env")
        for j, entry in enumerate(env if isinstance(env, list) else []):
            var = as_mapping(entry).get("name")
            if not isinstance(var, str):
                continue
            if var in engine_env:
                found.append(
                    Finding(
                        "operator-env",
                        (*where, "env", j, "name"),
                        f"{var} set by hand: the engine sets it in every container, so this value is duplicated "
                        "and overridden",
                    )
                )
            elif name == training and var in contract.WORKER_ENV_NAMES:
                found.append(
                    Finding(
                        "operator-env",
                        (*where, "env", j, "name"),
                        f"{var} set by hand: torch elastic sets it for every worker process, so this value never "
                        "reaches the training code",
                    )
                )
    if "restartPolicy" in pod:
        found.append(
            Finding(
                "pod-restart-policy",
                (*spec_path, "restartPolicy"),
                "the operator overwrites the pod's restartPolicy from the replica's (and warns in an event)",
            )
        )
    found += istio_findings(template, path)
    if pod.get("hostNetwork") is True and pod.get("dnsPolicy") != "ClusterFirstWithHostNet":
        found.append(
            Finding(
                "host-network-dns",
                (*spec_path, "dnsPolicy") if "dnsPolicy" in pod else (*spec_path, "hostNetwork"),
                "hostNetwork without dnsPolicy: ClusterFirstWithHostNet resolves names with the node's DNS, so the "
                "pods' service names (the rendezvous host) do not resolve",
            )
        )
    return found


#: The value an engine gives each pod differently (a node rank): no literal flag can match it.
PER_POD = None


def _range(text: str) -> str:
    low, _, high = text.partition(":")
    return f"{low}:{high or low}"


def _same(option: str, flag: str, injected: str) -> bool:
    """Whether a launcher flag's value is what the engine injects (``nnodes``: N is N:N, as torchrun reads it)."""
    return _range(flag) == _range(injected) if option == "nnodes" else flag == injected


def launcher_findings(
    container: Mapping[str, Any],
    where: Path,
    overriding: Mapping[str, str],
    *,
    nodes: int,
    restarts_set: bool,
    injected: Mapping[str, str | None],
    restarts_at: Path = ("spec", "elasticPolicy"),
    restart_policy: tuple[Any, Path] | None = None,
) -> list[Finding]:
    """The training container's launcher: nested, overriding what the engine injects, or without restarts.

    ``overriding`` maps torchrun's option names to the PET_* variable the engine sets for
    them; ``injected`` maps them to the value the engine sets in every pod of this job
    (:data:`PER_POD` when each pod gets its own; absent when it sets none): a flag that
    says the same overrides nothing. ``restarts_set``: the engine passes a restart count
    (else torchrun's 0 applies); ``restart_policy``: the replica's restartPolicy and its
    path, where the engine reads the launcher's exit code (a PyTorchJob's ExitCode).
    """
    words = [*(container.get("command") or []), *(container.get("args") or [])]
    if not all(isinstance(w, str) for w in words):
        return []  # the schema's finding
    argv, relative = container_argv(container)

    def at(i: int) -> Path:
        return (*where, *relative(i))

    draft = Draft()  # the reader's notes are the import's business; only its reading is used here
    launch = read_launch(argv, at, draft)
    found: list[Finding] = []
    nested = bool(launch.program and (launcher_kind(launch.program) or nested_launcher(launch.program))) or any(
        "another launcher" in message for _p, message, _g in draft.errors
    )
    if launch.launcher is not None and nested:
        found.append(
            Finding(
                "nested-launcher",
                at(launch.program_at or 0),
                f"{launch.launcher} starts another launcher: every worker becomes an agent of its own, "
                "nproc_per_node² processes per pod outside the job's rendezvous",
            )
        )
    if launch.launcher is None:
        return found
    s = launch.settings
    for name, env in overriding.items():
        value = s.get(name)
        if value is None or (isinstance(value[0], str) and "$" in value[0]) or name not in injected:
            continue  # not given, taken from what the engine injects, or the engine injects nothing for it
        engine = injected[name]
        if engine is PER_POD and nodes == 1:
            continue
        if engine is not PER_POD and _same(name, str(value[0]), engine):
            continue  # the same value as the engine's: nothing is overridden
        found.append(
            Finding(
                "launcher-overrides",
                at(value[1]),
                f"--{name.replace('_', '-')} {value[0]} overrides the engine's {env}: the command line beats the "
                "environment, so the pods disagree with the manifest's topology when it changes",
            )
        )
    if "standalone" in s and nodes > 1:
        found.append(
            Finding(
                "launcher-overrides",
                at(s["standalone"][1]),
                f"--standalone in a job of {nodes} pods: each pod meets only itself and trains alone",
            )
        )
    if restart_policy is not None and exit_codes_lost(launch.launcher, restart_policy[0]):
        found.append(
            Finding(
                "torchrun-exit-codes",
                restart_policy[1],
                f"restartPolicy ExitCode with {launch.launcher}: every failure is permanent, a preempted or "
                "OOM-killed pod too, since torchrun exits 1 for all of them; use OnFailure to restart pods in "
                "place (bounded by runPolicy.backoffLimit) or Never",
            )
        )
    if not restarts_set and "max_restarts" not in s:
        found.append(
            Finding(
                "no-max-restarts",
                restarts_at,
                "no restart count from the engine and no --max-restarts: torchrun's default is 0, so the first "
                "failure or membership change fails the job",
            )
        )
    return found
