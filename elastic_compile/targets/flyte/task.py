"""ElasticSpec -> a Flyte TaskSpec, as flyteidl's JSON (``json_format.MessageToDict``) spells it.

No flytekit or flyteidl here: the compile path stays light (tests/test_imports.py), and
the tests check the output with the real IDL and against flytekit's own serializer
instead (tests/flyte/). Facts are from flytekit 1.16.31's
``plugins/flytekit-kf-pytorch/flytekitplugins/kfpytorch/task.py`` and flyteplugins'
``go/tasks/plugins/k8s/kfoperators/pytorch/pytorch.go``.

What Flyte does with the task, and therefore what we print:

* ``nnodes`` > 1: type ``pytorch``, ``taskTypeVersion`` 1, ``custom`` a
  ``kubeflow.DistributedPyTorchTrainingTask``. The backend turns it into a PyTorchJob with
  only Worker replicas and an ``elasticPolicy``, so the operator injects the same
  ``PET_*`` topology that our own PyTorchJob gets (pytorch.go).
* ``nnodes`` == 1: a plain pod task (``python-task``, no ``custom``), as flytekit does;
  no operator runs, so the topology is passed to elastic-launch as options.
* Either way the pod is ``k8sPod`` = the pod template of the PyTorchJob
  (``podspec.build_pod_template``), with ``config.primary_container_name`` naming the
  training container, which already has the name the backend renames it to (``pytorch``).

``custom`` and ``k8sPod.podSpec`` are ``google.protobuf.Struct`` fields: a Struct holds
only doubles, so every number in them is printed as a float (``2.0``), and proto3 drops
zero values from ``custom`` (a 0 restart count or an enum's 0 is absent, not ``0``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from elastic_compile import __version__, contract
from elastic_compile.core.errors import SpecError
from elastic_compile.core.loader import Loaded
from elastic_compile.schema import ElasticSpec
from elastic_compile.schema.models import GPU_KEY, GPU_RESOURCE
from elastic_compile.targets.checks import FieldPath, locate
from elastic_compile.targets.launcher import GRACE_MARGIN_SECONDS, launcher_args
from elastic_compile.targets.pod import build_pod_template, resources

# flytekit's task types for an Elastic config (flytekitplugins/kfpytorch/task.py): a PyTorchJob for more than one node,
# a plain pod for one. The backend rejects any taskTypeVersion but 0 and 1, and 1 is the
# kubeflow.DistributedPyTorchTrainingTask that has elasticConfig and runPolicy (pytorch.go).
TASK_TYPE_ELASTIC = "pytorch"
TASK_TYPE_POD = "python-task"
TASK_TYPE_VERSION = 1

# flytekit hard-codes c10d (task.py) and the backend passes rdzvBackend through; without a
# rendezvous host the operator points every pod at worker-0, which only c10d can use.
RDZV_BACKEND = "c10d"

# The key flytekit and the backend use for the container that runs the task (task.py, pytorch.go).
PRIMARY_CONTAINER_KEY = "primary_container_name"

# flyteidl's kubeflow.CleanPodPolicy names for our clean_pod_policy values. NONE is the
# enum's 0, which proto3 JSON leaves out; the backend reads an absent one as None (pytorch.go).
CLEAN_POD_POLICY = {
    "None": "CLEANPOD_POLICY_NONE",
    "Running": "CLEANPOD_POLICY_RUNNING",
    "All": "CLEANPOD_POLICY_ALL",
}

# RuntimeMetadata says who wrote the task. Type OTHER (the proto3 zero, so absent in
# JSON): FLYTE_SDK would claim flytekit wrote it.
RUNTIME = {"version": __version__, "flavor": "elastic-compile"}

# Fields of core.TaskTemplate in flyteidl's JSON spelling (for check_task).
_TEMPLATE_FIELDS = frozenset({
    "id", "type", "metadata", "interface", "custom", "container", "k8sPod", "sql", "taskTypeVersion",
    "securityContext", "extendedResources", "config",
})  # fmt: skip
_CUSTOM_FIELDS = frozenset({"workerReplicas", "masterReplicas", "runPolicy", "elasticConfig"})
_ZERO_ENUMS = frozenset({"CLEANPOD_POLICY_NONE"})


@dataclass(frozen=True)
class FlyteTask:
    """The TaskTemplate fields, already in flyteidl's JSON form; the template prints them."""

    id: dict[str, str]
    type: str
    metadata: dict[str, Any]
    interface: dict[str, Any]
    custom: dict[str, Any] | None
    task_type_version: int
    config: dict[str, str]
    k8s_pod: dict[str, Any]
    #: ``extendedResources`` (``gpuAccelerator``), or None when the spec names no accelerator.
    extended_resources: dict[str, Any] | None = None

    def document(self) -> dict[str, Any]:
        """The admin.TaskSpec, as the template prints it (for Python callers and tests)."""
        template: dict[str, Any] = {
            "id": self.id,
            "type": self.type,
            "metadata": self.metadata,
            "interface": self.interface,
        }
        if self.custom is not None:
            template["custom"] = self.custom
        template["taskTypeVersion"] = self.task_type_version
        if self.extended_resources is not None:
            template["extendedResources"] = self.extended_resources
        template["config"] = self.config
        template["k8sPod"] = self.k8s_pod
        return {"template": template}


# --------------------------------------------------------------------------- what Flyte can carry


def flyte_problems(spec: ElasticSpec, *, flytekit: bool = False) -> list[tuple[FieldPath, str]]:
    """Settings that a Flyte task would silently drop or break, each with its field path.

    Values at their schema default never appear here (the default restart_policy,
    ExitCode, becomes Flyte's Never: docs/flyte.md says why that is acceptable); a value
    the user chose and Flyte cannot honour is an error, not a surprise in production.
    ``flytekit=True`` adds the limits of flytekit's ``Elastic`` launcher, which runs
    instead of elastic-launch in tasks built with ``elastic_compile.flyte.task_kwargs``.
    """
    problems: list[tuple[FieldPath, str]] = []

    def problem(*path_and_message: str) -> None:
        *path, message = path_and_message
        problems.append((tuple(path), message))

    rdzv, rp = spec.rdzv, spec.run_policy
    if spec.launcher == "bundled":
        problem(
            "launcher",
            "Flyte creates only the pods of a task (in the namespace of its project and domain), never a "
            "ConfigMap beside them, so the bundled launcher would be missing; install elastic-launch in the image "
            "(pip install --no-deps elastic-compile) or use launcher: torchrun",
        )
    elif flytekit and spec.launcher != "elastic-launch":
        problem("launcher", "flytekit's Elastic runs its own launcher in the task's process; remove launcher")
    if rdzv.backend != RDZV_BACKEND:
        problem(
            "rdzv",
            "backend",
            "Flyte's elastic tasks rendezvous with c10d on worker-0 (the backend sets no rendezvous host); use c10d",
        )
    if rdzv.host is not None:
        problem(
            "rdzv",
            "host",
            "Flyte cannot set the rendezvous host: the PyTorchJob it creates points every pod at worker-0; remove it",
        )
    if rdzv.id is not None:
        problem(
            "rdzv", "id", "Flyte names the PyTorchJob of each attempt and the run id comes from that name; remove it"
        )
    if spec.restart_policy in ("OnFailure", "Always"):
        problem(
            "restart_policy",
            "Flyte's elastic tasks run workers with restartPolicy Never (a failed pod fails "
            "the job; Flyte retries rerun it); use ExitCode or Never",
        )
    if "scheduling" in rp.model_fields_set:  # not our elastic-range default: Flyte cannot carry it either
        problem("run_policy", "scheduling", "Flyte's RunPolicy has no schedulingPolicy; remove it")
    if rp.managed_by is not None:
        problem("run_policy", "managed_by", "Flyte's RunPolicy has no managedBy; remove it")
    if spec.kueue is not None:
        problem("kueue", "Flyte creates the PyTorchJob itself; set Kueue's queue-name label through Flyte's labels")
    if rp.suspend:
        problem("run_policy", "suspend", "Flyte's RunPolicy cannot create a suspended job; remove it")
    for field, name in (("ttl_seconds_after_finished", "ttlSecondsAfterFinished"), ("backoff_limit", "backoffLimit")):
        if getattr(rp, field) == 0:
            problem(
                "run_policy",
                field,
                f"Flyte's RunPolicy drops a 0 (a proto3 zero value), so the job would get "
                f"no {name} at all; use 1 or more, or remove it",
            )
    if not isinstance(spec.nproc_per_node, int) and (flytekit or spec.nnodes.max > 1):
        where = "flytekit's Elastic" if flytekit else "Flyte's ElasticConfig.nprocPerNode"
        problem("nproc_per_node", f"{where} takes a number of processes; write the number, e.g. 8")
    if flytekit and spec.start_method not in ("spawn", "fork"):
        problem("start_method", "flytekit's Elastic starts workers with spawn or fork only")
    if flytekit and spec.hang_timeout is not None:
        problem("hang_timeout", "flytekit's Elastic has no hang watchdog (elastic-launch's); remove hang_timeout")
    if spec.accelerator is not None and GPU_RESOURCE not in spec.resources.accelerators():
        mig = next(iter(spec.resources.accelerators()), None)  # the schema allows only NVIDIA devices beside it
        if mig is not None:
            problems.append((
                ("resources", *spec.resources.where(mig)),
                f"Flyte applies accelerator only to pods that request nvidia.com/gpu (its gpu-resource-name: "
                f"pod_helper.go ApplyGPUNodeSelectors), so {mig} would run on any node; request gpu: 1 and give "
                "the slice as accelerator.partition",
            ))  # fmt: skip
    return problems


def gpu_accelerator(spec: ElasticSpec) -> dict[str, str] | None:
    """``extendedResources.gpuAccelerator`` as flytekit serializes ``accelerator=`` (MessageToDict of
    flyteidl's ``core.GPUAccelerator``): the device, and ``partitionSize`` for a partition. None without one.

    flytekit's ``A100`` (no partition chosen) writes the device alone, as a ``GPUAccelerator`` does
    (flytekit/extras/accelerators.py ``to_flyte_idl``); the device class is NVIDIA_GPU, the enum's 0,
    so it is not written."""
    acc = spec.accelerator
    if acc is None:
        return None
    out = {"device": acc.device}
    if acc.partition is not None:
        out["partitionSize"] = acc.partition
    return out


# --------------------------------------------------------------------------- the task


def flyte_launcher_args(spec: ElasticSpec) -> tuple[str, ...]:
    """elastic-launch's arguments in a Flyte pod: the PyTorchJob's, plus what no operator injects.

    Multi-node: the operator still runs (Flyte creates a PyTorchJob) and injects the
    topology, but Flyte never sets ``elasticPolicy.rdzvConf`` (pytorch.go), so rdzv.conf travels
    as an option. One node: a plain pod, no operator and no PET_* variables, so
    nproc_per_node must be an option too (elastic-launch would default to 1).
    """
    extra: list[str] = []
    if spec.nnodes.max == 1:
        extra += [contract.OPT_NPROC_PER_NODE, str(spec.nproc_per_node)]
    if spec.rdzv.conf:
        extra += [contract.OPT_RDZV_CONF, ",".join(f"{k}={v}" for k, v in spec.rdzv.conf.items())]
    return (*extra, *launcher_args(spec))


def flyte_resources(spec: ElasticSpec) -> dict[str, dict[str, str]]:
    """The training container's resources as Flyte expects them.

    The same as the PyTorchJob's, except that a ``gpu`` the user wrote stays ``gpu``: the
    backend maps it to its configured GPU resource (``gpu-resource-name``, nvidia.com/gpu
    by default) and keys its GPU tolerations on that, and flytekit writes ``gpu`` too.
    """
    wrote_gpu = GPU_KEY in spec.resources.requests or GPU_KEY in spec.resources.limits
    out = resources(spec)
    if not wrote_gpu:
        return out
    return {side: {(GPU_KEY if k == GPU_RESOURCE else k): v for k, v in values.items()} for side, values in out.items()}


def flyte_pod_template(spec: ElasticSpec, *, shm_volume: bool = True) -> dict[str, Any]:
    """``{metadata, spec}`` of the Flyte pod: the PyTorchJob's pod template, Flyte's args and resources.

    Plain JSON numbers (ints stay ints); ``spec_to_flyte`` turns them into Struct doubles.
    ``shm_volume=False`` leaves out our /dev/shm volume and mount (Flyte 2 asks the
    backend for them instead).
    """
    template = build_pod_template(
        spec,
        flyte_launcher_args(spec),
        spec.shutdown_timeout + GRACE_MARGIN_SECONDS,
        shm_volume=shm_volume,
        placement=False,  # the backend selects the device's nodes from gpuAccelerator, by its own labels
    )
    primary = next(c for c in template["spec"]["containers"] if c["name"] == contract.TRAINING_CONTAINER)
    res = flyte_resources(spec)
    if res:
        primary["resources"] = res
    return template


# --------------------------------------------------------------------------- Flyte's own launchers
#
# elastic_compile.flyte (flytekit's Elastic) and elastic_compile.flyte2 (flyte-sdk's
# Elastic) hand the task to a launcher that calls torch's elastic_launch in the pod
# instead of elastic-launch. Both get the same settings from here, and the rendezvous keys
# and environment that every launcher not ours gets (targets/launcher.py).


def elastic_nnodes(spec: ElasticSpec) -> int | str:
    """``Elastic.nnodes``: an int when fixed, ``"MIN:MAX"`` for a range.

    Both Flyte SDKs pick a plain pod task for the int 1 only (``"1"`` would be a
    one-worker PyTorchJob), which is what ``-t flyte`` prints for one node.
    """
    return spec.nnodes.min if not spec.nnodes.elastic else f"{spec.nnodes.min}:{spec.nnodes.max}"


def monitor_interval(spec: ElasticSpec) -> int | float:
    """``Elastic.monitor_interval``: an int when whole (the SDKs declare an int; torch takes a float)."""
    interval = spec.monitor_interval
    return int(interval) if float(interval).is_integer() else interval


def pod_spec_object(data: dict[str, Any], loaded: Loaded | None, sdk: str) -> Any:
    """``data`` (camelCase JSON) as a kubernetes ``V1PodSpec``, refusing to lose any field on the way.

    The kubernetes client drops keys its models do not know, so a pod_template field newer
    than the installed client (or misspelt) would vanish from the task without a word.
    ``sdk`` names who would drop it, for the message. Imports the kubernetes client.
    """
    import inspect
    import json

    from kubernetes.client import ApiClient

    client: Any = ApiClient()
    text = json.dumps(data)
    if "response_text" in inspect.signature(client.deserialize).parameters:
        pod_spec = client.deserialize(text, "V1PodSpec", None)  # kubernetes >= 32
    else:  # pragma: no cover - older clients read a response object's .data
        pod_spec = client.deserialize(type("Response", (), {"data": text})(), "V1PodSpec")
    lost = _lost_fields(data, client.sanitize_for_serialization(pod_spec), ())
    if lost:
        why = "the kubernetes client cannot represent {}, so {} would drop it; check the spelling or upgrade it"
        raise SpecError([locate(loaded, ("pod_template", "spec"), why.format(path, sdk)) for path in lost])
    return pod_spec


def _lost_fields(given: Any, kept: Any, path: tuple[str | int, ...]) -> list[str]:
    if isinstance(given, dict) and isinstance(kept, dict):
        out: list[str] = []
        for key, value in given.items():
            if key not in kept:
                out.append(".".join(map(str, (*path, key))))
            else:
                out += _lost_fields(value, kept[key], (*path, key))
        return out
    if isinstance(given, list) and isinstance(kept, list) and len(given) == len(kept):
        return [p for i, (g, k) in enumerate(zip(given, kept, strict=True)) for p in _lost_fields(g, k, (*path, i))]
    return [] if given == kept else [".".join(map(str, path))]


def elastic_custom(spec: ElasticSpec) -> dict[str, Any] | None:
    """``custom``: DistributedPyTorchTrainingTask through MessageToDict and a Struct; None for one node.

    Built exactly as flytekit's ``PytorchElasticFunctionTask.get_custom`` builds it (task.py),
    in flyteidl's field order, zero values left out.
    """
    if spec.nnodes.max == 1:
        return None
    elastic: dict[str, Any] = {
        "rdzvBackend": RDZV_BACKEND,
        "minReplicas": spec.nnodes.min,
        "maxReplicas": spec.nnodes.max,
        "nprocPerNode": spec.nproc_per_node,
        "maxRestarts": spec.max_restarts,
    }
    custom: dict[str, Any] = {
        # replicas = max, as flytekit and our PyTorchJob: the job starts at full size.
        "workerReplicas": {"replicas": spec.nnodes.max},
        "runPolicy": _run_policy(spec),
        "elasticConfig": elastic,
    }
    struct: dict[str, Any] = struct_value(_drop_zeros(custom))
    return struct


def _run_policy(spec: ElasticSpec) -> dict[str, Any]:
    rp = spec.run_policy
    return {
        "cleanPodPolicy": CLEAN_POD_POLICY[rp.clean_pod_policy],
        "ttlSecondsAfterFinished": rp.ttl_seconds_after_finished,
        "activeDeadlineSeconds": rp.active_deadline_seconds,
        "backoffLimit": rp.backoff_limit,
    }


def _drop_zeros(message: dict[str, Any]) -> dict[str, Any]:
    """proto3 JSON: scalar fields at their zero value (0, "", enum 0, unset) are not written.

    Nested messages stay even when empty: a set RunPolicy with every field zero is
    ``runPolicy: {}``, which the backend still reads as "a run policy was given".
    """
    out: dict[str, Any] = {}
    for key, value in message.items():
        if isinstance(value, dict):
            out[key] = _drop_zeros(value)
        elif value not in (None, 0, "") and value not in _ZERO_ENUMS:
            out[key] = value
    return out


def struct_value(value: Any) -> Any:
    """``value`` as a ``google.protobuf.Struct`` gives it back: every number a float."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, dict):
        return {str(k): struct_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [struct_value(v) for v in value]
    raise TypeError(f"not JSON data: {type(value).__name__}")


def task_name(spec: ElasticSpec) -> str:
    """The registered task name: flyte.name, else the spec name."""
    return (spec.flyte.name if spec.flyte is not None else None) or spec.name


def spec_to_flyte(spec: ElasticSpec, loaded: Loaded | None = None) -> FlyteTask:
    """The Flyte task of ``spec``; raises ``SpecError`` (located when ``loaded`` is given).

    Needs the spec's ``flyte:`` section (project, domain, version), and every setting to
    be one Flyte can carry (``flyte_problems``).
    """
    problems = flyte_problems(spec)
    target = spec.flyte
    if target is None:
        why = "-t flyte needs a flyte: section with project, domain and version (name defaults to the spec name)"
        problems.insert(0, (("flyte",), why))
    if problems or target is None:
        raise SpecError(sorted(locate(loaded, path, message) for path, message in problems))
    pod = flyte_pod_template(spec)
    custom = elastic_custom(spec)
    return FlyteTask(
        id={
            "resourceType": "TASK",
            "project": target.project,
            "domain": target.domain,
            "name": task_name(spec),
            "version": target.version,
        },
        type=TASK_TYPE_POD if custom is None else TASK_TYPE_ELASTIC,
        # retries {}: no Flyte retries unless the platform's defaults add them; a retry
        # reruns the whole PyTorchJob (pytorch.go), which is a choice for the project, not for us.
        metadata={"runtime": dict(RUNTIME), "retries": {}},
        # No inputs, no outputs: the command or function reads and writes its own data,
        # so Flyte has nothing to pass in and no outputs.pb to wait for.
        interface={"inputs": {}, "outputs": {}},
        custom=custom,
        task_type_version=TASK_TYPE_VERSION,
        config={PRIMARY_CONTAINER_KEY: contract.TRAINING_CONTAINER},
        k8s_pod={"metadata": pod.get("metadata", {}), "podSpec": struct_value(pod["spec"])},
        extended_resources=_extended_resources(spec),
    )


def _extended_resources(spec: ElasticSpec) -> dict[str, Any] | None:
    accelerator = gpu_accelerator(spec)
    return None if accelerator is None else {"gpuAccelerator": accelerator}


# --------------------------------------------------------------------------- checks


def _numbers_are_doubles(value: Any, where: str, problems: list[str]) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _numbers_are_doubles(v, f"{where}.{k}", problems)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _numbers_are_doubles(v, f"{where}[{i}]", problems)
    elif isinstance(value, int) and not isinstance(value, bool):
        problems.append(f"{where}: a Struct holds doubles; write {value}.0")


def check_task(doc: dict[str, Any]) -> list[str]:
    """What is wrong with a rendered Flyte TaskSpec (empty when it is fine).

    The shape flyteidl and the backend need, checked without flyteidl (the tests parse
    the output with the real IDL). A custom ``--templates`` file is held to the same rules.
    """
    problems: list[str] = []
    template = doc.get("template")
    if set(doc) != {"template"} or not isinstance(template, dict):
        return ["expected an admin.TaskSpec: a mapping with only the key template"]
    unknown = sorted(set(template) - _TEMPLATE_FIELDS)
    if unknown:
        problems.append(f"template: unknown TaskTemplate fields {unknown}")
    ident = template.get("id")
    if (
        not isinstance(ident, dict)
        or ident.get("resourceType") != "TASK"
        or not all(isinstance(ident.get(k), str) and ident[k] for k in ("project", "domain", "name", "version"))
    ):
        problems.append("template.id: needs resourceType TASK and a project, domain, name and version")
    kind, custom = template.get("type"), template.get("custom")
    if template.get("taskTypeVersion") != TASK_TYPE_VERSION:
        problems.append(f"template.taskTypeVersion: must be {TASK_TYPE_VERSION}")
    if kind == TASK_TYPE_ELASTIC:
        if not isinstance(custom, dict) or set(custom) - _CUSTOM_FIELDS:
            problems.append(f"template.custom: expected DistributedPyTorchTrainingTask fields {sorted(_CUSTOM_FIELDS)}")
        elif not isinstance(custom.get("workerReplicas"), dict) or not custom["workerReplicas"].get("replicas"):
            problems.append("template.custom.workerReplicas.replicas: the backend needs at least one worker")
        _numbers_are_doubles(custom, "template.custom", problems)
    elif kind == TASK_TYPE_POD:
        if custom is not None:
            problems.append("template.custom: a single-node pod task has none")
    else:
        problems.append(f"template.type: expected {TASK_TYPE_ELASTIC} or {TASK_TYPE_POD}")
    pod = template.get("k8sPod")
    pod_spec = pod.get("podSpec") if isinstance(pod, dict) else None
    if not isinstance(pod_spec, dict):
        problems.append("template.k8sPod.podSpec: missing")
        return problems
    _numbers_are_doubles(pod_spec, "template.k8sPod.podSpec", problems)
    primary = (template.get("config") or {}).get(PRIMARY_CONTAINER_KEY)
    names = [c.get("name") for c in pod_spec.get("containers") or [] if isinstance(c, dict)]
    if primary not in names:
        problems.append(f"template.config.{PRIMARY_CONTAINER_KEY}: must name a container of the pod ({names})")
    return problems
