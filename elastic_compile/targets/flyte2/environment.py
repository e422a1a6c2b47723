"""ElasticSpec -> the settings of a Flyte 2 ``flyte.TaskEnvironment``, as plain data.

No flyte, flyteplugins or kubernetes here: ``-t flyte2`` prints this data, and
``sdk.environment_kwargs`` turns the very same data into flyte objects. Facts are from
flyte 2.12.1 and flyteplugins-pytorch 2.12.1 (``flyteplugins/pytorch/task.py``,
``flyte/_resources.py``, ``flyte/_internal/runtime/task_serde.py``,
``resources_serde.py``) and the Flyte 2 backend's ``flytek8s/pod_helper.go``.

Flyte 2 still runs torch elastic as a Kubeflow PyTorchJob, from the same ``custom`` as
Flyte 1, so most of this is the ``-t flyte`` pod (``targets.flyte.task.flyte_pod_template``)
redistributed over the environment's fields:

* ``plugin_config``: ``Elastic`` with every field explicit, because flyte-sdk's defaults
  differ from flytekit's and ours (max_restarts 3, monitor_interval 3, no read timeout);
* ``resources``: what ``flyte.Resources`` can say exactly (cpu and memory as a request
  or a ``[request, limit]`` pair, a GPU request count, an ``ephemeral-storage`` request
  as ``disk``) plus ``shm`` for ``shared_memory``; everything else stays on the pod
  template's training container, and Flyte merges the two, its own keys winning;
* ``env_vars``: the spec's env up to its first ``valueFrom`` entry (``env_vars`` holds
  plain strings, and Flyte puts them before the template container's env); the rest stays,
  in order, on the training container;
* ``pod_template``: the ``-t flyte`` pod without what Flyte 2 sets itself (image, command
  and args of the training container), without elastic-launch's downward-API env (no
  elastic-launch runs), and without our /dev/shm (the backend mounts ``shm`` on the
  primary container and refuses a second /dev/shm), plus the two variables elastic-launch
  would have set for itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from elastic_compile import contract
from elastic_compile.core.errors import Problem, SpecError
from elastic_compile.core.loader import Loaded
from elastic_compile.core.quantity import parse_quantity
from elastic_compile.schema import ElasticSpec, compact
from elastic_compile.schema.models import GPU_RESOURCE, mounts_shm
from elastic_compile.schema.podspec import podspec_problems
from elastic_compile.targets.checks import FieldPath, locate
from elastic_compile.targets.flyte.task import (
    elastic_nnodes,
    flyte_pod_template,
    flyte_problems,
    monitor_interval,
)
from elastic_compile.targets.launcher import add_launcher_env, rdzv_configs
from elastic_compile.targets.pod import adds_shm, env_entries

# flyte/_environment.py: environment names are snake or kebab case (the task is
# registered as <env>.<function>); TaskEnvironment raises ValueError otherwise.
ENV_NAME = re.compile(r"^[a-z0-9]+([_-][a-z0-9]+)*$")

# resources_serde.py names the /dev/shm volume "flyte-shm"; the backend's
# ApplySharedMemory fails the task when the pod already has a volume of that name.
SHM_MOUNT_NAME = "flyte-shm"
# Resources(shm="auto"): a memory-backed /dev/shm with no sizeLimit, as our shared_memory: true.
SHM_AUTO = "auto"

# flyteplugins.pytorch.task.RunPolicy's spelling of our clean_pod_policy values (it
# upper-cases them into CLEANPOD_POLICY_*; its Literal type says "all").
CLEAN_POD_POLICY = {"All": "all", "Running": "Running", "None": "None"}

# flyte.Resources fields that take a request or a (request, limit) pair, and those that
# take a request only (GPU and disk limits exist only through the pod template).
_PAIRS = {"cpu": "cpu", "memory": "memory"}
_REQUEST_ONLY = {"ephemeral-storage": "disk"}
_GPU = "gpu"

_DOWNWARD_ENV = frozenset(name for name, _ in contract.DOWNWARD_ENV)


@dataclass(frozen=True)
class Flyte2Environment:
    """``flyte.TaskEnvironment`` keyword arguments as plain data (what ``-t flyte2`` prints).

    ``resources`` holds ``flyte.Resources`` keyword arguments (a pair as a two-item
    list); ``pod_template`` those of ``flyte.PodTemplate`` with ``pod_spec`` in
    Kubernetes' camelCase JSON; ``plugin_config`` those of ``flyteplugins.pytorch.Elastic``
    with ``run_policy`` those of its ``RunPolicy``.
    """

    name: str
    image: str
    env_vars: dict[str, str]
    resources: dict[str, Any]
    pod_template: dict[str, Any]
    plugin_config: dict[str, Any]

    def document(self) -> dict[str, Any]:
        """The settings as one mapping, in TaskEnvironment's argument order."""
        return {
            "name": self.name,
            "image": self.image,
            "env_vars": self.env_vars,
            "resources": self.resources,
            "pod_template": self.pod_template,
            "plugin_config": self.plugin_config,
        }


# --------------------------------------------------------------------------- what Flyte 2 cannot do


def flyte2_problems(spec: ElasticSpec, name: str | None = None) -> list[tuple[FieldPath, str]]:
    """Settings that a Flyte 2 task would drop or fail on, each with its field path.

    Flyte's limits on the job (``flyte_problems``: the same PyTorchJob, the same
    ``custom``), plus those of flyte-sdk's ``Elastic`` launcher and environment.
    ``name`` is the caller's environment name, checked instead of the spec's.
    """
    # Flyte's limits on launcher assume a command in the pod; Flyte 2 has none (below).
    problems = [p for p in flyte_problems(spec) if p[0] != ("launcher",)]

    def problem(path: FieldPath, message: str) -> None:
        problems.append((path, message))

    if name is None and not ENV_NAME.match(spec.name):
        problem(
            ("name",),
            f"{_ENV_NAME_RULE}; rename it or pass name= to environment_kwargs",
        )
    if spec.command is not None:
        problem(
            ("command",),
            "Flyte 2's Elastic runs a Python function (the task you decorate), not a command; "
            "use function: pkg.module:fn and decorate that function",
        )
    if spec.function is not None and spec.function.args:
        problem(
            ("function", "args"),
            "Flyte 2 calls the task with its inputs, not with string arguments; make them task inputs",
        )
    if not isinstance(spec.nproc_per_node, int) and spec.nnodes.max == 1:
        # nnodes > 1: flyte_problems already says it (the same ElasticConfig field).
        problem(("nproc_per_node",), "Flyte 2's Elastic takes a number of processes; write the number, e.g. 8")
    if spec.launcher != "elastic-launch":
        problem(
            ("launcher",),
            "Flyte 2's Elastic runs its own launcher in the task's process, whatever launcher says; remove it",
        )
    if spec.start_method != "spawn":
        problem(("start_method",), "Flyte 2's Elastic always starts workers with spawn; remove it")
    if spec.hang_timeout is not None:
        problem(("hang_timeout",), "Flyte 2's Elastic has no hang watchdog (elastic-launch's); remove hang_timeout")
    problems += _shm_problems(spec)
    problems += _launcher_reference_problems(spec)
    return problems


def _launcher_reference_problems(spec: ElasticSpec) -> list[tuple[FieldPath, str]]:
    """``$(ELASTIC_LAUNCH_*)`` in a value: the pod has no such variable without elastic-launch."""
    values: list[tuple[FieldPath, Any]] = []
    if isinstance(spec.env, dict):
        values += [(("env", name), value) for name, value in spec.env.items()]
    else:
        values += [(("env", i, "value"), var.value) for i, var in enumerate(spec.env)]
    for i, container in enumerate(spec.pod_template.spec.get("containers") or []):
        if container.get("name") == contract.TRAINING_CONTAINER:
            for j, var in enumerate(container.get("env") or []):
                values.append((("pod_template", "spec", "containers", i, "env", j, "value"), var.get("value")))
    reference = f"$({contract.LAUNCHER_ENV_PREFIX}"
    return [
        (path, "Flyte 2 runs no elastic-launch, so the pod has no ELASTIC_LAUNCH_* variables and the reference "
         "would stay literal; use the downward API (valueFrom.fieldRef) instead")
        for path, value in values
        if isinstance(value, str) and reference in value
    ]  # fmt: skip


def _shm_problems(spec: ElasticSpec) -> list[tuple[FieldPath, str]]:
    """/dev/shm: the backend mounts ``flyte-shm`` on the primary container, and refuses a second one."""
    out: list[tuple[FieldPath, str]] = []
    pod = spec.pod_template.spec
    if "shared_memory" in spec.model_fields_set and spec.shared_memory is not False:
        for i, container in enumerate(pod.get("containers") or []):
            if container.get("name") != contract.TRAINING_CONTAINER:
                continue
            for j, mount in enumerate(container.get("volumeMounts") or []):
                if mounts_shm(mount):
                    out.append(
                        (
                            ("pod_template", "spec", "containers", i, "volumeMounts", j, "mountPath"),
                            "you mount /dev/shm yourself, so shared_memory would be ignored (Flyte 2's backend "
                            "fails a task with two); remove one of them",
                        )
                    )
    if adds_shm(spec):
        for i, volume in enumerate(pod.get("volumes") or []):
            if volume.get("name") == SHM_MOUNT_NAME:
                out.append(
                    (
                        ("pod_template", "spec", "volumes", i, "name"),
                        "Flyte 2's backend adds the /dev/shm volume under this name and fails the task "
                        "when it exists; rename it",
                    )
                )
    return out


def raise_flyte2_problems(spec: ElasticSpec, loaded: Loaded | None, name: str | None = None) -> None:
    """Raise ``SpecError``, one located line per problem, if Flyte 2 cannot run ``spec``."""
    problems: list[Problem] = [locate(loaded, path, message) for path, message in flyte2_problems(spec, name)]
    if problems:
        raise SpecError(sorted(problems))


def check_env_name(name: str) -> None:
    """``ValueError`` for a name that ``flyte.TaskEnvironment`` would refuse."""
    if not ENV_NAME.match(name):
        raise ValueError(f"{name!r}: {_ENV_NAME_RULE}")


_ENV_NAME_RULE = "Flyte 2 environment names are snake or kebab case (a single '-' or '_' between letters and digits)"


# --------------------------------------------------------------------------- the environment


def spec_to_flyte2(spec: ElasticSpec, loaded: Loaded | None = None, *, name: str | None = None) -> Flyte2Environment:
    """The TaskEnvironment settings of ``spec``; raises ``SpecError`` (located when ``loaded`` is given).

    ``name`` replaces the spec name as the environment's name (``ValueError`` if Flyte
    would refuse it).
    """
    if name is not None:
        check_env_name(name)
    raise_flyte2_problems(spec, loaded, name)
    template = flyte_pod_template(spec, shm_volume=False)
    pod = template["spec"]
    primary = next(c for c in pod["containers"] if c["name"] == contract.TRAINING_CONTAINER)
    for key in ("image", "command", "args"):
        # Flyte sets command and args (its a0 runtime); the image comes from image=.
        del primary[key]
    env_vars, rest = _split_env(spec, primary.pop("env"))
    primary["env"] = rest
    add_launcher_env(spec, primary, set(env_vars))
    if not primary["env"]:
        del primary["env"]
    resources = _split_resources(primary, spec)
    if adds_shm(spec):
        resources["shm"] = spec.shared_memory if isinstance(spec.shared_memory, str) else SHM_AUTO
    metadata = template.get("metadata", {})
    pod_template: dict[str, Any] = {"primary_container_name": contract.TRAINING_CONTAINER}
    pod_template.update({k: metadata[k] for k in ("labels", "annotations") if metadata.get(k)})
    pod_template["pod_spec"] = pod
    return Flyte2Environment(
        name=name if name is not None else spec.name,
        image=spec.image,
        env_vars=env_vars,
        resources=resources,
        pod_template=pod_template,
        plugin_config=_elastic(spec),
    )


def _split_env(spec: ElasticSpec, env: list[dict[str, Any]]) -> tuple[dict[str, str], list[dict[str, Any]]]:
    """``env_vars`` (the spec's leading plain values) and what stays on the container, order kept.

    Flyte puts ``env_vars`` before the template container's env; stopping at the first
    ``valueFrom`` keeps every ``$(NAME)`` reference after the variable it names.
    elastic-launch's downward-API variables are left out: no elastic-launch runs.
    """
    leading: dict[str, str] = {}
    for entry in env_entries(spec):
        if "value" not in entry:
            break
        leading[entry["name"]] = entry["value"]
    rest = [e for e in env if e["name"] not in _DOWNWARD_ENV]
    # What is left is the spec's env, then the user's training-container env.
    return leading, rest[len(leading) :]


def _split_resources(container: dict[str, Any], spec: ElasticSpec) -> dict[str, Any]:
    """Move what ``flyte.Resources`` says exactly out of ``container``; return its keyword arguments.

    With ``accelerator`` the GPU request is a ``flyte.Device`` (``{device, quantity, partition}``
    here), whatever name the spec gave the resource: flyte writes a gpuAccelerator only for a
    device, and with the device verbatim the task selects the same nodes as flytekit's (flyte's
    own short names differ: its H100 is nvidia-tesla-h100, flytekit's nvidia-h100).
    """
    res = container.pop("resources", {})
    requests: dict[str, str] = dict(res.get("requests", {}))
    limits: dict[str, str] = dict(res.get("limits", {}))
    kwargs: dict[str, Any] = {}
    for name, field in _PAIRS.items():
        if name in requests:
            request = requests.pop(name)
            kwargs[field] = [request, limits.pop(name)] if name in limits else request
    acc = spec.accelerator
    if acc is not None:
        name = _GPU if _GPU in requests else GPU_RESOURCE
        quantity = int(parse_quantity(requests.pop(name)))  # the schema requires this request, in whole units
        device: dict[str, Any] = {"device": acc.device, "quantity": quantity}
        if acc.partition is not None:
            device["partition"] = acc.partition
        kwargs[_GPU] = device
    for name, field in _REQUEST_ONLY.items():
        if name in requests:
            kwargs[field] = requests.pop(name)
    gpus = requests.get(_GPU)
    if gpus is not None and acc is None and gpus.isdigit() and str(int(gpus)) == gpus and int(gpus) > 0:
        # An int count (Resources(gpu=N) writes str(N)); the limit, which Kubernetes needs
        # equal to it, stays on the template (Resources has GPU requests only). 0 would
        # vanish from Resources, and "2e0" would be rewritten, so those stay too.
        kwargs[_GPU] = int(parse_quantity(requests.pop(_GPU)))
    left = {side: values for side, values in (("requests", requests), ("limits", limits)) if values}
    if left:
        container["resources"] = left
    return kwargs


def _elastic(spec: ElasticSpec) -> dict[str, Any]:
    """``Elastic`` keyword arguments: every field that differs from flyte-sdk's defaults, and the rest too."""
    rp = spec.run_policy
    run_policy: dict[str, Any] = {"clean_pod_policy": CLEAN_POD_POLICY[rp.clean_pod_policy]}
    for field in ("ttl_seconds_after_finished", "active_deadline_seconds", "backoff_limit"):
        value = getattr(rp, field)
        if value is not None:
            run_policy[field] = value
    return {
        "nnodes": elastic_nnodes(spec),
        "nproc_per_node": spec.nproc_per_node,
        "rdzv_backend": spec.rdzv.backend,
        "max_restarts": spec.max_restarts,
        "monitor_interval": monitor_interval(spec),
        "rdzv_configs": rdzv_configs(spec),
        "run_policy": run_policy,
    }


# --------------------------------------------------------------------------- checks

# The keyword arguments each part may hold (flyte.Resources, flyte.PodTemplate,
# flyteplugins.pytorch.Elastic and its RunPolicy, all 2.12.1); a custom template's typo is
# an error here, not a TypeError when the environment is built. None: any value.
_ELASTIC_FIELDS = ("nnodes", "nproc_per_node", "rdzv_backend", "max_restarts", "monitor_interval", "rdzv_configs",
                   "nccl_heartbeat_timeout_sec", "nccl_async_error_handling", "nccl_collective_timeout_sec",
                   "nccl_enable_monitoring")  # fmt: skip
_RUN_POLICY_FIELDS = ("clean_pod_policy", "ttl_seconds_after_finished", "active_deadline_seconds", "backoff_limit")
_SHAPE: dict[str, Any] = {
    "name": None,
    "image": None,
    "env_vars": None,
    "resources": dict.fromkeys(("cpu", "memory", "gpu", "disk", "shm")),
    "pod_template": dict.fromkeys(("primary_container_name", "labels", "annotations", "pod_spec")),
    "plugin_config": {**dict.fromkeys(_ELASTIC_FIELDS), "run_policy": dict.fromkeys(_RUN_POLICY_FIELDS)},
}
_NNODES = re.compile(r"^[1-9][0-9]*:[1-9][0-9]*$")


def _unknown_fields(value: Any, shape: dict[str, Any], path: str = "") -> list[str]:
    if not isinstance(value, dict):
        return [f"{path or 'the document'}: expected a mapping"]
    errors: list[str] = []
    for key, item in value.items():
        where = f"{path}.{key}" if path else str(key)
        if key not in shape:
            errors.append(f"{where}: unknown field")
        elif isinstance(shape[key], dict):
            errors += _unknown_fields(item, shape[key], where)
    return errors


def check_environment(doc: dict[str, Any]) -> list[str]:
    """What is wrong with rendered TaskEnvironment settings (empty when they are fine).

    What flyte would refuse, or silently turn into another job, checked without flyte (the
    tests build and serialize the environment with the real SDK).
    """
    problems = _unknown_fields(doc, _SHAPE)
    missing = sorted({"name", "image", "plugin_config"} - set(doc))
    if missing:
        problems.append(f"missing {missing}")
    if not isinstance(doc.get("name"), str) or not ENV_NAME.match(doc["name"]):
        problems.append(f"name: {_ENV_NAME_RULE}")
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in (doc.get("env_vars") or {}).items()):
        problems.append("env_vars: names and values must be strings")
    config = doc.get("plugin_config")
    if isinstance(config, dict):
        nnodes, nproc = config.get("nnodes"), config.get("nproc_per_node")
        # An int is a fixed size (1: a plain pod); a string must be MIN:MAX, or "1" would
        # quietly become a one-worker PyTorchJob.
        if not (type(nnodes) is int and nnodes >= 1) and not (isinstance(nnodes, str) and _NNODES.match(nnodes)):
            problems.append("plugin_config.nnodes: expected a whole number >= 1 or MIN:MAX")
        if not (type(nproc) is int and nproc >= 1):
            problems.append("plugin_config.nproc_per_node: expected a whole number >= 1")
    gpu = (doc.get("resources") or {}).get(_GPU) if isinstance(doc.get("resources"), dict) else None
    if isinstance(gpu, dict):
        # flyte.Device(device, quantity, partition): a device verbatim, a quantity of at least 1.
        if set(gpu) - {"device", "quantity", "partition"} or not isinstance(gpu.get("device"), str):
            problems.append("resources.gpu: expected {device, quantity, partition} (flyte.Device)")
        if not (type(gpu.get("quantity")) is int and gpu["quantity"] >= 1):
            problems.append("resources.gpu.quantity: expected a whole number >= 1")
    elif gpu is not None and not (type(gpu) is int and gpu >= 1):
        problems.append("resources.gpu: expected a whole number >= 1 or {device, quantity, partition}")
    template = doc.get("pod_template")
    if isinstance(template, dict):
        primary = template.get("primary_container_name")
        pod = template.get("pod_spec")
        containers = pod.get("containers") if isinstance(pod, dict) else None
        names = [c.get("name") for c in containers or [] if isinstance(c, dict)]
        if primary not in names:
            problems.append(f"pod_template.primary_container_name: must name a container of pod_spec ({names})")
        if isinstance(pod, dict):
            # Kubernetes' PodSpec schema, strictly: flyte hands the pod to the kubernetes
            # client, which silently drops fields it does not know.
            problems += compact.render(podspec_problems(_as_backend_sends(pod, primary)), ("pod_template", "pod_spec"))
    return problems


def _as_backend_sends(pod: dict[str, Any], primary: Any) -> dict[str, Any]:
    """``pod`` as Flyte's backend creates it: the primary container's ``gpu`` resource renamed.

    flyteplugins' ApplyResourceOverrides (flytek8s/container_helper.go,
    SanitizeGPUResourceRequirements) turns ``gpu`` into the configured GPU resource name,
    nvidia.com/gpu by default, so Kubernetes never sees ``gpu`` there.
    """
    containers = pod.get("containers")
    if not isinstance(containers, list):
        return pod  # the PodSpec check reports it as it is

    def renamed(side: Any) -> Any:
        return {GPU_RESOURCE if n == _GPU else n: v for n, v in side.items()} if isinstance(side, dict) else side

    out = []
    for container in containers:
        res = container.get("resources") if isinstance(container, dict) and container.get("name") == primary else None
        resources = {k: renamed(side) for k, side in res.items()} if isinstance(res, dict) else None
        out.append(container if resources is None else {**container, "resources": resources})
    return {**pod, "containers": out}
