"""The worker pod: our training container merged with the user's pod_template.

Rules (they fix the three pod-template bugs of flytekit's plugin,
``flytekitplugins/kfpytorch/pod_template.py``):

* the training container is always named ``pytorch`` and always comes first; a user
  container with that name is merged into it, the user's fields winning except the
  ones the compiler owns (name, image, command, args, resources: the schema rejects
  those with a pointer to the top-level field);
* every other container is a sidecar, copied untouched except that it becomes a native
  sidecar (an init container with ``restartPolicy: Always``, :func:`native_sidecar`), or the
  pod could never finish; the /dev/shm mount goes on the training container only (flytekit
  mounts it on ``containers[0]``, whatever it is);
* no placeholder containers are invented, and if the user's training container already
  mounts /dev/shm we add neither volume nor mount (flytekit raises);
* the user's input is deep-copied, never mutated (flytekit appends to the caller's
  PodTemplate, so reusing one template for two tasks fails).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from elastic_compile import contract
from elastic_compile.schema import ElasticSpec
from elastic_compile.schema.models import (
    GPU_KEY,
    GPU_RESOURCE,
    SCRATCH_VOLUME_NAME,
    SHM_PATH,
    SHM_VOLUME_NAME,
    EnvVar,
    mount_path,
    mounts_shm,
    no_overcommit,
)
from elastic_compile.targets import accelerator, bundle, network
from elastic_compile.targets.launcher import add_launcher_env, container_command

SHM_VOLUME = SHM_VOLUME_NAME
SCRATCH_VOLUME = SCRATCH_VOLUME_NAME
ISTIO_INJECT = "sidecar.istio.io/inject"


def object_metadata(
    name: str, namespace: str | None, labels: dict[str, str], annotations: dict[str, str]
) -> dict[str, Any]:
    """An object's metadata with only what is set, in Kubernetes' usual order."""
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    if labels:
        meta["labels"] = dict(labels)
    if annotations:
        meta["annotations"] = dict(annotations)
    return meta


def job_labels(spec: ElasticSpec) -> dict[str, str]:
    """The job object's labels: the spec's, and Kueue's (``kueue``), which Kueue reads on the job."""
    return {**spec.labels, **(spec.kueue.labels() if spec.kueue is not None else {})}


def resources(spec: ElasticSpec) -> dict[str, dict[str, str]]:
    """Kubernetes resources of the training container.

    ``gpu`` becomes ``nvidia.com/gpu``; a device or hugepages given on one side only is
    copied to the other, because Kubernetes requires request == limit for them.
    """
    requests = {_k8s_name(k): v for k, v in spec.resources.requests.items()}
    limits = {_k8s_name(k): v for k, v in spec.resources.limits.items()}
    for name, value in list(requests.items()):
        if no_overcommit(name):
            limits.setdefault(name, value)
    for name, value in list(limits.items()):
        if no_overcommit(name):
            requests.setdefault(name, value)
    out: dict[str, dict[str, str]] = {}
    if requests:
        out["requests"] = requests
    if limits:
        out["limits"] = limits
    return out


def _k8s_name(name: str) -> str:
    return GPU_RESOURCE if name == GPU_KEY else name


def env_entries(spec: ElasticSpec) -> list[dict[str, Any]]:
    """The spec's env as Kubernetes EnvVar entries, in the order written."""
    if isinstance(spec.env, dict):
        return [{"name": k, "value": v} for k, v in spec.env.items()]
    return [_env_var(e) for e in spec.env]


def _env_var(var: EnvVar) -> dict[str, Any]:
    out: dict[str, Any] = {"name": var.name}
    if var.value is not None:
        out["value"] = var.value
    if var.valueFrom is not None:
        out["valueFrom"] = var.valueFrom.model_dump(exclude_none=True)
    return out


def downward_env(pairs: Sequence[tuple[str, str]] = contract.DOWNWARD_ENV) -> list[dict[str, Any]]:
    """What elastic-launch needs to know about its pod: contract.DOWNWARD_ENV for a PyTorchJob,
    contract.TRAINJOB_DOWNWARD_ENV for a TrainJob (the job name is on another label)."""
    return [{"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}} for name, path in pairs]


def adds_shm(spec: ElasticSpec) -> bool:
    """Whether the training container gets our /dev/shm: asked for, and not mounted there by the user."""
    user = next((c for c in spec.pod_template.spec.get("containers") or [] if _is_training(c)), None)
    mounts = (user or {}).get("volumeMounts") or []
    return spec.shared_memory is not False and not any(mounts_shm(m) for m in mounts)


def _is_training(container: dict[str, Any]) -> bool:
    return container.get("name") == contract.TRAINING_CONTAINER


def training_container(
    spec: ElasticSpec,
    user: dict[str, Any] | None,
    launch_args: Sequence[str],
    downward: Sequence[tuple[str, str]] = contract.DOWNWARD_ENV,
    *,
    shm_volume: bool = True,
) -> tuple[dict[str, Any], bool]:
    """The merged ``pytorch`` container, and whether it got our /dev/shm mount (``shm_volume=False``: never).

    ``launch_args`` are elastic-launch's arguments; the command and args are those of
    ``spec.launcher`` (:func:`~elastic_compile.targets.launcher.container_command`).
    """
    user = copy.deepcopy(user) if user else {}
    command, args = container_command(spec, launch_args)
    container: dict[str, Any] = {
        "name": contract.TRAINING_CONTAINER,
        "image": spec.image,
        "command": command,
        "args": args,
    }
    # The downward-API entries first: the kubelet expands $(NAME) in a value only against the
    # entries before it, so this order lets your values use $(ELASTIC_LAUNCH_POD_IP) and friends.
    env = downward_env(downward) + env_entries(spec) + list(user.pop("env", None) or [])
    container["env"] = env
    if spec.launcher == "torchrun":
        add_launcher_env(spec, container)  # what elastic-launch would set for itself
    res = resources(spec)
    if res:
        container["resources"] = res
    mounts = list(user.pop("volumeMounts", None) or [])
    add_shm = shm_volume and adds_shm(spec)
    if add_shm:
        mounts.append({"name": SHM_VOLUME, "mountPath": SHM_PATH})
    if spec.launcher == "bundled":
        mounts.append(bundle.volume_mount())
    if needs_scratch(spec):
        mounts.append({"name": SCRATCH_VOLUME, "mountPath": contract.SCRATCH_MOUNT})
    if mounts:
        container["volumeMounts"] = mounts
    ports = list(user.pop("ports", None) or [])
    port = spec.rdzv.resolved_port()
    moved = spec.rdzv.backend == "c10d" and port != contract.OPERATOR_DEFAULT_PORT
    if moved and not any(p.get("name") == contract.OPERATOR_PORT_NAME for p in ports):
        # The operator publishes the port named pytorchjob-port on the job's services and
        # points PET_RDZV_ENDPOINT at it; declaring it is how the port moves (training-operator v1.9.4
        # pkg/controller.v1/pytorch/elastic.go).
        ports.append({"name": contract.OPERATOR_PORT_NAME, "containerPort": port, "protocol": "TCP"})
    if ports:
        container["ports"] = ports
    for key, value in user.items():
        if key not in container:
            container[key] = value
    return container, add_shm


def native_sidecar(container: dict[str, Any]) -> dict[str, Any]:
    """A sidecar as a Kubernetes native sidecar: an init container with ``restartPolicy: Always``.

    A regular container beside ``pytorch`` keeps running after training ends, so the pod never
    reaches Succeeded or Failed and the job never completes, holding its GPUs. A native sidecar
    (Kubernetes >= 1.29) starts before the training container, after the pod's own init
    containers (the order a regular container had), and the kubelet stops it once the training
    container has exited, so the pod finishes. The operator appends no env to init containers.
    """
    return {**container, "restartPolicy": "Always"}


HOST_NETWORK_DNS = "ClusterFirstWithHostNet"


def needs_scratch(spec: ElasticSpec) -> bool:
    """Whether the training container gets an emptyDir at /tmp: a read-only root and nothing mounted there.

    With ``readOnlyRootFilesystem`` the image's /tmp is read-only too: elastic-launch (its worker
    logs and error files) and Python's tempfile in the workers need a writable directory, and
    the launcher's contract (contract.SCRATCH_MOUNT) is a disk-backed emptyDir there.
    """
    containers: list[dict[str, Any]] = spec.pod_template.spec.get("containers") or []
    training = next((c for c in containers if c.get("name") == contract.TRAINING_CONTAINER), {})
    context = training.get("securityContext") or {}
    mounts = training.get("volumeMounts") or []
    return context.get("readOnlyRootFilesystem") is True and not any(
        mount_path(m) == contract.SCRATCH_MOUNT for m in mounts
    )


def host_network_dns(spec: ElasticSpec) -> bool:
    """Whether the compiler sets dnsPolicy ClusterFirstWithHostNet: hostNetwork without a dnsPolicy of its own."""
    pod = spec.pod_template.spec
    return pod.get("hostNetwork") is True and "dnsPolicy" not in pod


def sidecar_names(spec: ElasticSpec) -> list[str]:
    """The user's regular containers that the compiler makes native sidecars (for --explain)."""
    containers = spec.pod_template.spec.get("containers") or []
    return [str(c.get("name")) for c in containers if not _is_training(c)]


def build_pod_template(
    spec: ElasticSpec,
    launch_args: Sequence[str],
    grace_seconds: int,
    downward: Sequence[tuple[str, str]] = contract.DOWNWARD_ENV,
    *,
    shm_volume: bool = True,
    placement: bool = True,
) -> dict[str, Any]:
    """The PodTemplateSpec of every worker, running ``spec.launcher`` with elastic-launch's ``launch_args``.

    ``downward``: see :func:`downward_env`; ``shm_volume=False``: without our /dev/shm volume;
    ``placement=False``: without ``accelerator``'s nodeSelector and tolerations (Flyte selects
    the nodes itself, from the task's gpuAccelerator: :mod:`.accelerator`).
    ``launcher: bundled`` adds the volume of the launcher's ConfigMap and the annotations
    naming the launcher file (:mod:`.bundle`).
    """
    user_spec: dict[str, Any] = copy.deepcopy(spec.pod_template.spec) if spec.pod_template.spec else {}
    user_containers: list[dict[str, Any]] = user_spec.pop("containers", None) or []
    user_training = next((c for c in user_containers if _is_training(c)), None)
    sidecars = [c for c in user_containers if c is not user_training]
    training, add_shm = training_container(spec, user_training, launch_args, downward, shm_volume=shm_volume)

    pod: dict[str, Any] = {"containers": [training]}
    init = [*(user_spec.pop("initContainers", None) or []), *map(native_sidecar, sidecars)]
    if init:
        pod["initContainers"] = init
    volumes = list(user_spec.pop("volumes", None) or [])
    if add_shm:
        empty_dir: dict[str, Any] = {"medium": "Memory"}
        if isinstance(spec.shared_memory, str):
            empty_dir["sizeLimit"] = spec.shared_memory
        volumes.append({"name": SHM_VOLUME, "emptyDir": empty_dir})
    if spec.launcher == "bundled":
        volumes.append(bundle.volume(spec))
    if needs_scratch(spec):
        volumes.append({"name": SCRATCH_VOLUME, "emptyDir": {}})
    if volumes:
        pod["volumes"] = volumes
    pod["terminationGracePeriodSeconds"] = user_spec.pop("terminationGracePeriodSeconds", grace_seconds)
    if host_network_dns(spec):
        # With the node's network, ClusterFirst falls back to the node's DNS, where
        # <job>-worker-0, the rendezvous, does not resolve.
        pod["dnsPolicy"] = HOST_NETWORK_DNS
    pod.update(user_spec)
    if placement:
        accelerator.add_to_pod(spec, pod)

    metadata: dict[str, Any] = {}
    labels = {**spec.pod_template.metadata.labels, **network.pod_labels(spec)}
    annotations = dict(spec.pod_template.metadata.annotations)
    if not spec.istio_sidecar:
        annotations.setdefault(ISTIO_INJECT, "false")
    if spec.launcher == "bundled":
        annotations.update(bundle.pod_annotations())
    if labels:
        metadata["labels"] = labels
    if annotations:
        metadata["annotations"] = annotations
    template: dict[str, Any] = {}
    if metadata:
        template["metadata"] = metadata
    template["spec"] = pod
    return template
