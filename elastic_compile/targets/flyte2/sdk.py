"""The Flyte 2 settings as flyte objects: the only module here that imports flyte.

``flyte``, ``flyteplugins.pytorch`` (which imports torch) and the kubernetes client are
imported when ``environment_kwargs`` is called, never at import time.
"""

from __future__ import annotations

from typing import Any

from elastic_compile.core.loader import Loaded
from elastic_compile.targets.flyte.task import pod_spec_object
from elastic_compile.targets.flyte2.environment import Flyte2Environment

INSTALL_HINT = "elastic_compile.flyte2 needs flyte-sdk: pip install 'elastic-compile[flyte2]'"


def to_sdk(env: Flyte2Environment, loaded: Loaded | None = None) -> dict[str, Any]:
    """``flyte.TaskEnvironment`` keyword arguments built from ``env``.

    A pod_template field that the installed kubernetes client cannot represent is a
    ``SpecError`` located in the spec (``loaded``), not silently dropped.
    """
    try:
        import flyte
        from flyteplugins.pytorch import Elastic
        from flyteplugins.pytorch.task import RunPolicy
    except ImportError as e:
        raise ImportError(f"{INSTALL_HINT} ({e})") from e
    template = env.pod_template
    config = dict(env.plugin_config)
    run_policy = RunPolicy(**config.pop("run_policy"))
    # A [request, limit] pair is a tuple to flyte.Resources.
    resources: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in env.resources.items()}
    gpu = resources.get("gpu")
    if isinstance(gpu, dict):
        # The device verbatim (flytekit's vocabulary): flyte.GPU() takes flyte's short names only.
        resources["gpu"] = flyte.Device(device_class="GPU", **gpu)
    return {
        "name": env.name,
        "image": env.image,
        "env_vars": dict(env.env_vars),
        "resources": flyte.Resources(**resources),
        "pod_template": flyte.PodTemplate(
            pod_spec=pod_spec_object(template["pod_spec"], loaded, "flyte"),
            primary_container_name=template["primary_container_name"],
            labels=template.get("labels"),
            annotations=template.get("annotations"),
        ),
        "plugin_config": Elastic(**config, run_policy=run_policy),
    }
