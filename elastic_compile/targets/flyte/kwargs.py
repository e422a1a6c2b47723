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
* ``requests`` / ``limits`` / ``container_image``, and ``accelerator`` (flytekit's constant).

Serialized by flytekit, such a task matches ``-t flyte`` on ``custom``, resources and
the pod spec; only the primary container's command and args differ (flytekit writes
``pyflyte-execute``). tests/flyte/test_task_kwargs.py checks exactly that.

This module imports flytekit (and, through ``pod_spec_object``, the kubernetes client);
the compile path never does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from elastic_compile import contract
from elastic_compile.core.accelerators import DEVICES
from elastic_compile.core.loader import Loaded
from elastic_compile.schema import ElasticSpec
from elastic_compile.schema.extends import load_spec
from elastic_compile.targets.checks import raise_problems
from elastic_compile.targets.flyte.task import (
    elastic_nnodes,
    flyte_pod_template,
    flyte_problems,
    monitor_interval,
    pod_spec_object,
)
from elastic_compile.targets.launcher import add_launcher_env, rdzv_configs

_INSTALL_HINT = "elastic_compile.flyte needs flytekit: pip install 'elastic-compile[flyte]'"

try:
    from flytekit import PodTemplate, Resources
    from flytekitplugins.kfpytorch import CleanPodPolicy, Elastic, RunPolicy
except ImportError as e:  # pragma: no cover - exercised only without the flyte extra
    raise ImportError(f"{_INSTALL_HINT} ({e})") from e

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
    loaded, spec = load_spec(path)  # with its bases (extends:), inside the working tree
    return spec_task_kwargs(spec, loaded)


def spec_task_kwargs(spec: ElasticSpec, loaded: Loaded | None = None) -> dict[str, Any]:
    """``task_kwargs`` for a spec built in Python (``loaded`` locates errors in its file)."""
    raise_problems(flyte_problems(spec, flytekit=True), loaded)
    template = flyte_pod_template(spec)
    primary = next(c for c in template["spec"]["containers"] if c["name"] == contract.TRAINING_CONTAINER)
    add_launcher_env(spec, primary)
    metadata = template.get("metadata", {})
    kwargs: dict[str, Any] = {
        "task_config": elastic_config(spec),
        "pod_template": PodTemplate(
            pod_spec=pod_spec_object(template["spec"], loaded, "flytekit"),
            primary_container_name=contract.TRAINING_CONTAINER,
            labels=metadata.get("labels"),
            annotations=metadata.get("annotations"),
        ),
        "container_image": spec.image,
    }
    if spec.accelerator is not None:
        kwargs["accelerator"] = accelerator(spec.accelerator.device, spec.accelerator.partition)
    resources = primary.get("resources", {})
    if all(name in _RESOURCE_FIELDS for side in resources.values() for name in side):
        # flytekit replaces the template's resources with its own when it has any, so
        # they are passed only when it can carry all of them (the same values either way).
        for side in ("requests", "limits"):
            if resources.get(side):
                kwargs[side] = Resources(**{_RESOURCE_FIELDS[k]: v for k, v in resources[side].items()})
    return kwargs


def accelerator(device: str, partition: str | None) -> Any:
    """flytekit's accelerator for ``device``: its constant in ``flytekit.extras.accelerators``, partitioned.

    The constant serializes the device alone; ``partitioned`` is flytekit's own way to a partition
    (``A100.partition_1g_5gb`` is ``A100.partitioned("1g.5gb")``).
    """
    from flytekit.extras import accelerators

    constant = getattr(accelerators, DEVICES[device].constant)
    return constant if partition is None else type(constant).partitioned(partition)


def elastic_config(spec: ElasticSpec) -> Any:
    """flytekit's ``Elastic`` for ``spec``, every field explicit.

    ``nnodes`` is an int when fixed: flytekit picks a plain pod task only for the int 1.
    """
    return Elastic(
        nnodes=elastic_nnodes(spec),
        nproc_per_node=spec.nproc_per_node,
        start_method=spec.start_method,
        monitor_interval=monitor_interval(spec),
        max_restarts=spec.max_restarts,
        rdzv_configs=rdzv_configs(spec),
        increase_shared_mem=False,
        run_policy=RunPolicy(
            clean_pod_policy=CleanPodPolicy[_CLEAN_POD_POLICY[spec.run_policy.clean_pod_policy]],
            ttl_seconds_after_finished=spec.run_policy.ttl_seconds_after_finished,
            active_deadline_seconds=spec.run_policy.active_deadline_seconds,
            backoff_limit=spec.run_policy.backoff_limit,
        ),
    )
