"""A pod template onto the spec: the reverse of :func:`elastic_compile.targets.pod.build_pod_template`.

The training container becomes ``image``, ``resources``, ``env`` and ``shared_memory``;
the compiler's own additions (its downward-API env, /dev/shm, the bundled launcher's
volume, the Istio opt-out, the NetworkPolicy label) are recognised and left for the
compiler to write again; everything else stays in ``pod_template``.
"""

from __future__ import annotations

import copy
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from elastic_compile import contract
from elastic_compile.core.accelerators import read_selector
from elastic_compile.core.engine_env import Generation, generation_env_problem, injected
from elastic_compile.schema.models import (
    BUNDLE_MOUNT,
    BUNDLE_VOLUME_NAME,
    GPU_KEY,
    GPU_RESOURCE,
    SHM_VOLUME_NAME,
    EnvVar,
    env_name_problem,
    is_extended,
    is_operator_env,
    mount_path,
    mounts_shm,
)
from elastic_compile.schema.podvalues import ENV_NAME
from elastic_compile.targets import bundle, network
from elastic_compile.targets.launcher import ENV_SHUTDOWN_TIMEOUT, GRACE_MARGIN_SECONDS, launcher_env
from elastic_compile.targets.pod import ISTIO_INJECT, downward_env
from elastic_compile.targets.readback.draft import Draft, Path
from elastic_compile.targets.readback.launch_settings import option_number


@dataclass(frozen=True)
class PodSource:
    """A pod template in a manifest and the container that trains in it."""

    template: Mapping[str, Any]
    path: Path  # of the template (metadata, spec)
    training: int  # index of the training container in spec.containers


def adopt_pod(
    draft: Draft,
    source: PodSource,
    *,
    shutdown_timeout: int,
    chosen: bool,
    extra_env: Sequence[tuple[str, str]] = (),
    ours: Sequence[tuple[str, str]] = contract.DOWNWARD_ENV,
    bundled: bool = False,
    torchrun: bool = False,
    generation: Generation = "v1",
) -> None:
    """The pod template onto image, resources, env, shared_memory, istio_sidecar and pod_template.

    The training container's command is the caller's (it needs the engine's topology).
    ``chosen``: the job already runs elastic-launch, so a default it lacks (/dev/shm, the
    Istio opt-out) was turned off on purpose and stays off; otherwise the default applies
    and a note says so. ``bundled``: the command runs the bundled launcher, whose volume and
    mount become ``launcher: bundled``. ``torchrun``: the command is the compiler's torchrun
    form, whose env carries shutdown_timeout and what elastic-launch does for itself
    (:func:`.launcher.add_launcher_env`): read back, not kept as the user's env.
    ``generation``: whose engine ran the job, for the env it sets itself (core/engine_env.py).
    """
    base = source.path
    template = copy.deepcopy(dict(source.template))
    spec: dict[str, Any] = dict(template.get("spec") or {})
    containers: list[Any] = list(spec.pop("containers", None) or [])
    train_path: Path = (*base, "spec", "containers", source.training)
    training: dict[str, Any] = dict(containers[source.training])
    sidecars = [c for i, c in enumerate(containers) if i != source.training]
    sidecar_paths = [(*base, "spec", "containers", i) for i in range(len(containers)) if i != source.training]

    if isinstance(training.get("image"), str):
        draft.set(("image",), training["image"], (*train_path, "image"))
    training.pop("image", None)
    training.pop("command", None)
    training.pop("args", None)
    if training.get("name") != contract.TRAINING_CONTAINER:
        draft.note(
            (*train_path, "name"),
            f"the training container {training.get('name')!r} is named {contract.TRAINING_CONTAINER} "
            "(the operator's exit codes and ports look only at that name)",
        )
    training["name"] = contract.TRAINING_CONTAINER
    _resources(draft, training.pop("resources", None), (*train_path, "resources"))
    volumes: list[Any] = list(spec.pop("volumes", None) or [])
    _shared_memory(draft, training, volumes, sidecars, train_path=train_path, base=base, chosen=chosen)
    if bundled:
        _bundled_launcher(draft, training, volumes, train_path=train_path, base=base)
    compiler_env: frozenset[int] = frozenset()
    if torchrun:
        grace_given = spec.get("terminationGracePeriodSeconds")
        shutdown_timeout, compiler_env = _torchrun_env(draft, training, train_path, shutdown_timeout, grace_given)
    _env(draft, training, train_path, extra_env, ours, compiler=compiler_env, generation=generation)
    ports = training.get("ports")
    if isinstance(ports, list):
        kept = [p for p in ports if not (isinstance(p, dict) and p.get("name") == contract.OPERATOR_PORT_NAME)]
        for i, port in enumerate(ports):
            if isinstance(port, dict) and port.get("name") == contract.OPERATOR_PORT_NAME:
                number = port.get("containerPort")
                if number != contract.OPERATOR_DEFAULT_PORT and draft.get("rdzv", "port") is None:
                    draft.set(("rdzv", "port"), number, (*train_path, "ports", i))
        if kept:
            training["ports"] = kept
        else:
            training.pop("ports")

    for i, sidecar in enumerate(sidecars):
        if isinstance(sidecar, dict):
            _sidecar_env(draft, sidecar, sidecar_paths[i], generation)

    grace = spec.pop("terminationGracePeriodSeconds", None)
    compiled = shutdown_timeout + GRACE_MARGIN_SECONDS
    if grace is not None and grace != compiled:
        if isinstance(grace, int) and not isinstance(grace, bool) and grace <= shutdown_timeout:
            draft.note(
                (*base, "spec", "terminationGracePeriodSeconds"),
                f"terminationGracePeriodSeconds {grace} dropped: elastic-launch needs more than shutdown_timeout "
                f"({shutdown_timeout} s) to stop its workers; the compiled pods get {compiled}",
                "pod_template",
            )
        else:
            spec["terminationGracePeriodSeconds"] = grace
    elif grace is None:
        draft.note(
            (*base, "spec"),
            f"terminationGracePeriodSeconds {compiled} now (shutdown_timeout + {GRACE_MARGIN_SECONDS}, "
            "so that elastic-launch stops its workers before the kubelet kills it)",
            "pod_template",
        )
    if "restartPolicy" in spec:
        draft.note(
            (*base, "spec", "restartPolicy"),
            "the pod's restartPolicy dropped: the operator overwrites it from the replica's restartPolicy",
        )
        spec.pop("restartPolicy")

    _accelerator(draft, spec, base)
    rest: dict[str, Any] = {}
    training_rest = {k: v for k, v in training.items() if k != "name"}
    pod_containers: list[Any] = []
    if training_rest:
        pod_containers.append(training)
    pod_containers += sidecars
    if pod_containers:
        rest["containers"] = pod_containers
    if volumes:
        rest["volumes"] = volumes
    for key, value in spec.items():
        if key not in rest:
            rest[key] = value
    # pod_template.spec in the manifest's order: containers and volumes where build_pod_template puts them.
    ordered: dict[str, Any] = {k: rest[k] for k in ("containers", "initContainers", "volumes") if k in rest}
    ordered.update({k: v for k, v in rest.items() if k not in ordered})
    if ordered:
        draft.set(("pod_template", "spec"), ordered, (*base, "spec"))
        for key in ordered:
            if key != "containers":
                draft.source(("pod_template", "spec", key), (*base, "spec", key))
        for i, path in enumerate(([train_path] if training_rest else []) + sidecar_paths):
            draft.source(("pod_template", "spec", "containers", i), path)

    meta = template.get("metadata") or {}
    labels = dict(meta.get("labels") or {})
    annotations = dict(meta.get("annotations") or {})
    policy_label = labels.pop(network.POD_LABEL, None)
    if policy_label is not None and policy_label == draft.get("name"):
        # The compiler's label for network_policy (its NetworkPolicy selects it): it writes both again.
        draft.set(("network_policy",), True, (*base, "metadata", "labels", network.POD_LABEL))
    elif policy_label is not None:
        draft.warn(
            (*base, "metadata", "labels", network.POD_LABEL),
            f"{network.POD_LABEL} dropped: the compiler's label for network_policy, with the job's name",
            "pod_template",
        )
    inject = annotations.pop(ISTIO_INJECT, None)
    if bundled:
        # Which launcher file the pods run: the compiler writes them again for the one it bundles.
        for key in bundle.pod_annotations():
            annotations.pop(key, None)
    if inject is None and chosen:
        draft.set(("istio_sidecar",), True, (*base,))
    elif inject is None:
        draft.note(
            (*base,),
            f'pods get {ISTIO_INJECT}: "false" now (the default): an Istio sidecar breaks rendezvous',
            "istio_sidecar",
        )
    elif str(inject).lower() == "true":
        draft.set(("istio_sidecar",), True, (*base, "metadata", "annotations", ISTIO_INJECT))
    for key in ("labels", "annotations"):
        value = labels if key == "labels" else annotations
        if value:
            draft.set(("pod_template", "metadata", key), value, (*base, "metadata", key))
    for key in meta:
        if key not in ("labels", "annotations"):
            draft.warn((*base, "metadata", key), f"cannot carry the pod template's metadata.{key}; dropped")


def _accelerator(draft: Draft, spec: dict[str, Any], base: Path) -> None:
    """``accelerator`` and ``accelerator_label`` from the pod's nodeSelector, on a preset's label with a known value.

    Only for a pod that requests NVIDIA GPUs (``gpu``), the devices ``accelerator`` names. The
    entries the compiler writes again from them leave ``pod_template``; a device whose label
    has several values on the platform (GKE's two H100s) keeps its entry, which chooses.
    """
    selector = spec.get("nodeSelector")
    requested = [draft.get("resources", side) or {} for side in ("requests", "limits")]
    if not isinstance(selector, dict) or not any(GPU_KEY in side for side in requested):
        return
    found = read_selector(selector)
    if found is None:
        return
    where = (*base, "spec", "nodeSelector", found.preset.label)
    if found.partition is None:
        draft.set(("accelerator",), found.device, where)
    else:
        draft.set(("accelerator",), {"device": found.device, "partition": found.partition}, where)
    draft.set(("accelerator_label",), found.preset.label, where)
    kept = {k: v for k, v in selector.items() if k not in found.keys}
    if kept:
        spec["nodeSelector"] = kept
    else:
        del spec["nodeSelector"]


def _resources(draft: Draft, resources: Any, path: Path) -> None:
    if not isinstance(resources, dict):
        return
    requests = {_spec_resource(k): v for k, v in (resources.get("requests") or {}).items()}
    limits = {_spec_resource(k): v for k, v in (resources.get("limits") or {}).items()}
    for name in list(limits):
        # Kubernetes requires limit == request for devices; the compiler writes both sides.
        if is_extended(name) and name in requests and str(requests[name]) == str(limits[name]):
            del limits[name]
    if requests:
        draft.set(("resources", "requests"), requests, (*path, "requests"))
    if limits:
        draft.set(("resources", "limits"), limits, (*path, "limits"))
    for key in resources:
        if key not in ("requests", "limits"):
            draft.warn((*path, key), f"cannot carry resources.{key} of the training container; dropped")


def _spec_resource(name: str) -> str:
    return GPU_KEY if name == GPU_RESOURCE else name


def _shared_memory(
    draft: Draft,
    training: dict[str, Any],
    volumes: list[Any],
    sidecars: Sequence[Any],
    *,
    train_path: Path,
    base: Path,
    chosen: bool,
) -> None:
    """A memory-backed emptyDir at /dev/shm becomes ``shared_memory``; none means the default now applies.

    ``chosen``: the job was written for elastic-launch (compiled by us, most likely), so
    what it leaves out was left out on purpose: no /dev/shm is ``shared_memory: false``, and
    only the compiler's own volume (``dshm``) is read back as ``shared_memory``.
    """
    mounts = training.get("volumeMounts")
    mounts = mounts if isinstance(mounts, list) else []
    shm = next((i for i, m in enumerate(mounts) if isinstance(m, dict) and mounts_shm(m)), None)
    by_name = {v.get("name"): i for i, v in enumerate(volumes) if isinstance(v, dict)}
    if shm is None and chosen:
        draft.set(("shared_memory",), False, train_path)
    elif shm is None:
        draft.note(
            train_path,
            "the training container gets a memory-backed /dev/shm now (shared_memory, the default): "
            "the runtime's 64 MiB makes DataLoader workers and NCCL die with 'Bus error'",
            "shared_memory",
        )
    else:
        name = mounts[shm].get("name")
        index = by_name.get(name)
        volume = volumes[index] if index is not None else None
        empty_dir = volume.get("emptyDir") if isinstance(volume, dict) else None
        shared = any(
            isinstance(m, dict) and m.get("name") == name
            for c in sidecars
            if isinstance(c, dict)
            for m in (c.get("volumeMounts") or [])
        )
        if (
            isinstance(empty_dir, dict)
            and empty_dir.get("medium") == "Memory"
            and set(empty_dir) <= {"medium", "sizeLimit"}
            and set(volume) == {"name", "emptyDir"}  # type: ignore[arg-type]
            and set(mounts[shm]) <= {"name", "mountPath"}
            and not shared
            and index is not None
            and (name == SHM_VOLUME_NAME or not chosen)
        ):
            size = empty_dir.get("sizeLimit")
            if size is not None:
                draft.set(("shared_memory",), str(size), (*base, "spec", "volumes", index, "emptyDir", "sizeLimit"))
            if name != SHM_VOLUME_NAME:
                draft.note(
                    (*base, "spec", "volumes", index),
                    f"the /dev/shm volume {name} becomes shared_memory",
                    "shared_memory",
                )
            del mounts[shm]
            del volumes[index]
        elif not chosen:
            draft.note(
                (*train_path, "volumeMounts", shm),
                "your own /dev/shm mount is kept in pod_template (the compiler then adds none)",
                "pod_template",
            )
    if mounts:
        training["volumeMounts"] = mounts
    else:
        training.pop("volumeMounts", None)
    for i, volume in enumerate(volumes):
        if isinstance(volume, dict) and volume.get("name") == SHM_VOLUME_NAME:
            draft.fail(
                (*base, "spec", "volumes", i, "name"),
                f"a volume named {SHM_VOLUME_NAME} is the compiler's /dev/shm volume; rename it in the manifest",
            )


def _bundled_launcher(
    draft: Draft, training: dict[str, Any], volumes: list[Any], *, train_path: Path, base: Path
) -> None:
    """The compiler's ConfigMap volume of the bundled launcher and its mount become ``launcher: bundled``.

    The ConfigMap itself is the compiler's to write again (its name and text follow the
    installed launcher); without the volume and the mount the command could not have run.
    """
    mounts = training.get("volumeMounts")
    mounts = mounts if isinstance(mounts, list) else []
    mount = next(
        (
            i
            for i, m in enumerate(mounts)
            if isinstance(m, dict) and m.get("name") == BUNDLE_VOLUME_NAME and mount_path(m) == BUNDLE_MOUNT
        ),
        None,
    )
    volume = next(
        (
            i
            for i, v in enumerate(volumes)
            if isinstance(v, dict) and v.get("name") == BUNDLE_VOLUME_NAME and isinstance(v.get("configMap"), dict)
        ),
        None,
    )
    if mount is None or volume is None:
        draft.fail(
            (*train_path, "volumeMounts"),
            f"the command runs {contract.BUNDLE_PATH}, but no ConfigMap volume {BUNDLE_VOLUME_NAME} is mounted at "
            f"{BUNDLE_MOUNT}: the pod could not start",
        )
        return
    draft.set(("launcher",), "bundled", (*base, "spec", "volumes", volume))
    del mounts[mount]
    del volumes[volume]
    if mounts:
        training["volumeMounts"] = mounts
    else:
        training.pop("volumeMounts", None)


def _env(
    draft: Draft,
    training: dict[str, Any],
    path: Path,
    extra: Sequence[tuple[str, str]],
    downward: Sequence[tuple[str, str]],
    *,
    compiler: Collection[int] = (),
    generation: Generation = "v1",
) -> None:
    """The training container's env into ``env`` (map form when every value is literal).

    ``downward``: the compiler's downward-API entries for this engine, ``compiler``: the
    indices of its other entries (:func:`_torchrun_env`); both written again on compile.
    """
    entries = training.pop("env", None)
    entries = list(entries) if isinstance(entries, list) else []
    ours = downward_env(downward)
    kept: list[tuple[int | None, dict[str, Any]]] = []
    rest: list[Any] = []
    for i, entry in enumerate(entries):
        if rest:
            rest.append(entry)  # after an entry the spec cannot hold, order matters: keep them together
            continue
        name = entry.get("name") if isinstance(entry, dict) else None
        if isinstance(name, str) and name.startswith(contract.LAUNCHER_ENV_PREFIX) and entry in ours:
            continue  # the compiler's downward-API entries: written again on compile
        if i in compiler:
            continue
        problem = None
        if isinstance(name, str):
            problem = env_name_problem(name) or generation_env_problem(name, generation)
        if isinstance(name, str) and problem is not None and ENV_NAME.match(name):
            engine = (
                is_operator_env(name) or name in contract.WORKER_ENV_NAMES or injected(name, generation) is not None
            )
            draft.warn((*path, "env", i, "name"), f"{name} dropped: {problem}", "env" if engine else None)
            continue
        if isinstance(entry, dict) and _fits_env(entry):
            kept.append((i, entry))
        else:
            rest.append(entry)
    for name, value in extra:
        kept.append((None, {"name": name, "value": value}))
    if kept:
        literal = all(set(e) == {"name", "value"} and isinstance(e.get("value"), str) for _, e in kept)
        if literal:
            draft.set(("env",), {e["name"]: e["value"] for _, e in kept}, (*path, "env"))
            for index, e in kept:
                if index is not None:
                    draft.source(("env", e["name"]), (*path, "env", index))
        else:
            draft.set(("env",), [e for _, e in kept], (*path, "env"))
            for j, (index, _e) in enumerate(kept):
                if index is not None:
                    draft.source(("env", j), (*path, "env", index))
    if rest:
        training["env"] = rest


def _torchrun_env(
    draft: Draft, training: Mapping[str, Any], path: Path, default: int, grace: Any
) -> tuple[int, frozenset[int]]:
    """shutdown_timeout, and the indices of the env entries the compiler wrote for torchrun.

    The compiler appends :func:`.launcher.launcher_env` after every entry of the user's, in
    that order, leaving out the names the user set (:func:`.launcher.add_launcher_env`): its
    entries are the trailing ones in that order. Its TORCH_ELASTIC_SHUTDOWN_TIMEOUT is also
    the pod's grace period less the margin. Any other entry is the user's own env and stays
    so (torchrun has no flag for shutdown_timeout: ``default`` applies then).
    """
    raw = training.get("env")
    entries = raw if isinstance(raw, list) else []
    index, ours, shutdown = len(entries), set(), default
    for name, value_written in reversed(launcher_env(default)):
        entry = entries[index - 1] if index else None
        if not (isinstance(entry, dict) and set(entry) == {"name", "value"} and entry.get("name") == name):
            continue  # the user set it (the compiler left it out), or this is not the compiled form
        if name != ENV_SHUTDOWN_TIMEOUT and entry["value"] != value_written:
            break  # the user's own value: so is every entry before it
        if name == ENV_SHUTDOWN_TIMEOUT:
            value = option_number(entry["value"])
            if not isinstance(value, int) or grace not in (None, value + GRACE_MARGIN_SECONDS):
                break  # the user's own entry: so is every one before it
            draft.set_unless_default(("shutdown_timeout",), value, (*path, "env", index - 1))
            shutdown = value
        index -= 1
        ours.add(index)
    return shutdown, frozenset(ours)


def _fits_env(entry: dict[str, Any]) -> bool:
    """Whether the spec's ``env`` can hold this EnvVar (else it stays in pod_template)."""
    try:
        EnvVar.model_validate(entry)
    except ValueError:
        return False
    return True


def _sidecar_env(draft: Draft, container: dict[str, Any], path: Path, generation: Generation) -> None:
    """A sidecar's env, less what the v1 operator appended after it (it appends to every container in
    ``spec.containers``, envvar.go:49); Trainer v2 sets env in container ``node`` only (torch.go:173)."""
    env = container.get("env")
    if not isinstance(env, list) or generation != "v1":
        return
    kept = []
    for i, entry in enumerate(env):
        name = entry.get("name") if isinstance(entry, dict) else None
        row = injected(name, generation) if isinstance(name, str) else None
        if row is not None and (row.when == "every pod" or is_operator_env(str(name))):
            draft.warn(
                (*path, "env", i, "name"),
                f"{name} dropped: the training operator v1 appends its own to every container ({row.source})",
                "pod_template",
            )
            continue
        kept.append(entry)
    if kept:
        container["env"] = kept
    else:
        container.pop("env")
