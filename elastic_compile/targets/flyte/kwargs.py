"""elastic.yaml for flytekit users: ``@task(**task_kwargs("elastic.yaml"))``.

The other Flyte path, ``elastic-compile SPEC -t flyte``, prints a finished TaskSpec whose
container runs elastic-launch. This one hands flytekit the same settings, so that a
Python function decorated with ``@task`` runs under flytekitplugins-kfpytorch's own
launcher with our pod, resources and rendezvous timeouts:

* ``task_config``: an ``Elastic`` with every field explicit (the rendezvous timeouts
  included, which flytekit never serializes and torch would otherwise default), and
  ``increase_shared_mem=False``: the pod template already has our /dev/shm, and
  flytekit's own would mount it on ``containers[0]`` and warn on every task;
* ``pod_template``: the pod of ``-t flyte`` (``targets.flyte.task.flyte_pod_template``), with
  two environment variables that elastic-launch would otherwise set itself;
* ``requests`` / ``limits`` / ``container_image``.

Serialized by flytekit, such a task matches ``-t flyte`` on ``custom``, resources and
the pod spec; only the primary container's command and args differ (flytekit writes
``pyflyte-execute``). tests/flyte/test_task_kwargs.py checks exactly that.

This is the only module that imports flytekit and the kubernetes client; the compiler
never does.
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

from elastic_compile import contract
from elastic_compile.core.errors import SpecError
from elastic_compile.core.loader import Loaded, load_file
from elastic_compile.schema import ElasticSpec
from elastic_compile.schema.validate import validate
from elastic_compile.targets.flyte.task import (
    flyte_pod_template,
    flyte_problems,
    locate,
    raise_problems,
)

_INSTALL_HINT = "elastic_compile.flyte needs flytekit: pip install 'elastic-compile[flyte]'"

try:
    from flytekit import PodTemplate, Resources
    from flytekitplugins.kfpytorch import CleanPodPolicy, Elastic, RunPolicy
    from kubernetes.client import ApiClient
except ImportError as e:  # pragma: no cover - exercised only without the flyte extra
    raise ImportError(f"{_INSTALL_HINT} ({e})") from e

# torch reads this when flytekit's LaunchConfig leaves shutdown_timeout unset (torch
# 2.13 ``LaunchConfig.__post_init__``): how our shutdown_timeout reaches flytekit's launcher.
ENV_SHUTDOWN_TIMEOUT = "TORCH_ELASTIC_SHUTDOWN_TIMEOUT"

# flytekit's Resources fields for the resource names they can express. Anything else
# (nvidia.com/gpu written out, hugepages, vendor devices) stays in the pod template only.
_RESOURCE_FIELDS = {"cpu": "cpu", "memory": "mem", "gpu": "gpu", "ephemeral-storage": "ephemeral_storage"}

_CLEAN_POD_POLICY = {"None": "NONE", "Running": "RUNNING", "All": "ALL"}


def task_kwargs(path: str | Path) -> dict[str, Any]:
    """Keyword arguments for flytekit's ``@task`` from the spec file at ``path``.

    Raises ``SpecError`` (one located line per problem) for a bad spec, or for settings
    that flytekit's Elastic cannot carry. The spec's ``command``/``function`` and its
    ``flyte:`` section are not used: the decorated function is what runs, and
    ``pyflyte register`` names the task.
    """
    loaded = load_file(path)
    return spec_task_kwargs(validate(loaded), loaded)


def spec_task_kwargs(spec: ElasticSpec, loaded: Loaded | None = None) -> dict[str, Any]:
    """``task_kwargs`` for a spec built in Python (``loaded`` locates errors in its file)."""
    raise_problems(flyte_problems(spec, flytekit=True), loaded)
    template = flyte_pod_template(spec)
    primary = next(c for c in template["spec"]["containers"] if c["name"] == contract.TRAINING_CONTAINER)
    _add_launcher_env(spec, primary)
    metadata = template.get("metadata", {})
    kwargs: dict[str, Any] = {
        "task_config": elastic_config(spec),
        "pod_template": PodTemplate(
            pod_spec=_pod_spec(template["spec"], loaded),
            primary_container_name=contract.TRAINING_CONTAINER,
            labels=metadata.get("labels"),
            annotations=metadata.get("annotations"),
        ),
        "container_image": spec.image,
    }
    resources = primary.get("resources", {})
    if all(name in _RESOURCE_FIELDS for side in resources.values() for name in side):
        # flytekit replaces the template's resources with its own when it has any, so
        # they are passed only when it can carry all of them (the same values either way).
        for side in ("requests", "limits"):
            if resources.get(side):
                kwargs[side] = Resources(**{_RESOURCE_FIELDS[k]: v for k, v in resources[side].items()})
    return kwargs


def elastic_config(spec: ElasticSpec) -> Any:
    """flytekit's ``Elastic`` for ``spec``, every field explicit.

    ``nnodes`` is an int when fixed: flytekit picks a plain pod task only for the int 1.
    """
    rdzv = spec.rdzv
    nnodes: int | str = spec.nnodes.min if not spec.nnodes.elastic else f"{spec.nnodes.min}:{spec.nnodes.max}"
    interval = spec.monitor_interval
    return Elastic(
        nnodes=nnodes,
        nproc_per_node=spec.nproc_per_node,
        start_method=spec.start_method,
        monitor_interval=int(interval) if float(interval).is_integer() else interval,
        max_restarts=spec.max_restarts,
        rdzv_configs={
            # c10d ignores "timeout"; LaunchConfig adds 900 when it is missing, so it is set
            # to join_timeout to keep torch's log honest (as elastic-launch does).
            "timeout": rdzv.join_timeout,
            "join_timeout": rdzv.join_timeout,
            "last_call_timeout": rdzv.last_call_timeout,
            "close_timeout": rdzv.close_timeout,
            "heartbeat_timeout": rdzv.heartbeat_timeout,
            "read_timeout": rdzv.read_timeout,
            **rdzv.conf,
        },
        increase_shared_mem=False,
        run_policy=RunPolicy(
            clean_pod_policy=CleanPodPolicy[_CLEAN_POD_POLICY[spec.run_policy.clean_pod_policy]],
            ttl_seconds_after_finished=spec.run_policy.ttl_seconds_after_finished,
            active_deadline_seconds=spec.run_policy.active_deadline_seconds,
            backoff_limit=spec.run_policy.backoff_limit,
        ),
    )


def _add_launcher_env(spec: ElasticSpec, container: dict[str, Any]) -> None:
    """What elastic-launch does for itself, as env for flytekit's launcher (unless the spec sets it)."""
    env: list[dict[str, Any]] = container.setdefault("env", [])
    names = {e.get("name") for e in env}
    for name, value in (
        # Without it restarts and scale-up reuse the rank-0 agent's store and fail
        # (pytorch#135712, torch-elastic.md §7); elastic-launch sets it, flytekit does not.
        (contract.ENV_DISABLE_SHARED_STORE, "1"),
        (ENV_SHUTDOWN_TIMEOUT, str(spec.shutdown_timeout)),
    ):
        if name not in names:
            env.append({"name": name, "value": value})


def _pod_spec(data: dict[str, Any], loaded: Loaded | None) -> Any:
    """``data`` (camelCase JSON) as a ``V1PodSpec``, refusing to lose any field on the way.

    The kubernetes client drops keys its models do not know, so a pod_template field newer
    than the installed client (or misspelt) would vanish from the task without a word.
    """
    client: Any = ApiClient()
    text = json.dumps(data)
    if "response_text" in inspect.signature(client.deserialize).parameters:
        pod_spec = client.deserialize(text, "V1PodSpec", None)  # kubernetes >= 32
    else:  # pragma: no cover - older clients read a response object's .data
        pod_spec = client.deserialize(type("Response", (), {"data": text})(), "V1PodSpec")
    lost = _lost_fields(data, client.sanitize_for_serialization(pod_spec), ())
    if lost:
        why = "the kubernetes client cannot represent {}, so flytekit would drop it; check the spelling or upgrade it"
        raise SpecError([locate(loaded, ("pod_template", "spec"), why.format(path)) for path in lost])
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
