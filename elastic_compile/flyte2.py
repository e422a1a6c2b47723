"""elastic.yaml for Flyte 2: ``flyte.TaskEnvironment(**environment_kwargs("elastic.yaml"))``.

Flyte 2 (flyte-sdk) runs torch elastic through flyteplugins-pytorch's ``Elastic``: a
decorated Python function, launched in every pod by flyte's own runtime on the Kubeflow
PyTorchJob that Flyte 1 used, with the same ``custom`` as ``-t flyte``. This module gives
the environment our pod, resources, rendezvous timeouts and defaults::

    import flyte
    from elastic_compile.flyte2 import environment_kwargs

    env = flyte.TaskEnvironment(**environment_kwargs("elastic.yaml"))

    @env.task
    def train(epochs: int) -> float | None: ...

Importing this module is cheap: the spec models are imported when a function is called,
and flyte, flyteplugins-pytorch (and so torch) and the kubernetes client by
``environment_kwargs`` only. ``environment_settings``
returns the same settings as plain data without them (what ``elastic-compile SPEC -t
flyte2`` prints).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from elastic_compile.core.loader import Loaded
    from elastic_compile.schema import ElasticSpec

# Everything else is imported by the functions: a workflow module pays for the spec
# models (pydantic) when it builds an environment, not when it imports this module.

__all__ = ["environment_kwargs", "environment_settings"]


def environment_kwargs(spec: str | Path | ElasticSpec, *, name: str | None = None) -> dict[str, Any]:
    """Keyword arguments for ``flyte.TaskEnvironment`` from an elastic.yaml.

    ``spec``: the path of a spec file, or a validated ``ElasticSpec``. ``name``: the
    environment's name (default: the spec's ``name``); tasks register as
    ``<name>.<function>``. Returns ``name``, ``image``, ``env_vars``, ``resources``
    (``flyte.Resources``), ``pod_template`` (``flyte.PodTemplate``) and ``plugin_config``
    (``flyteplugins.pytorch.Elastic``).

    Raises ``SpecError`` (one ``file:line:col`` line per problem) for a bad spec or one
    that Flyte 2 cannot run, ``ValueError`` for a ``name`` Flyte would refuse, and
    ``ImportError`` with an install hint without the ``[flyte2]`` extra.
    """
    from elastic_compile.targets.flyte2.environment import spec_to_flyte2
    from elastic_compile.targets.flyte2.sdk import to_sdk

    validated, loaded = _load(spec)
    return to_sdk(spec_to_flyte2(validated, loaded, name=name), loaded)


def environment_settings(spec: str | Path | ElasticSpec, *, name: str | None = None) -> dict[str, Any]:
    """``environment_kwargs`` as plain data (lists, mappings, strings, numbers), without importing flyte."""
    from elastic_compile.targets.flyte2.environment import spec_to_flyte2

    validated, loaded = _load(spec)
    return spec_to_flyte2(validated, loaded, name=name).document()


def _load(spec: str | Path | ElasticSpec) -> tuple[ElasticSpec, Loaded | None]:
    from elastic_compile.schema import ElasticSpec
    from elastic_compile.schema.extends import load_spec

    if isinstance(spec, ElasticSpec):
        return spec, None
    loaded, validated = load_spec(spec)  # with its bases (extends:), inside the working tree
    return validated, loaded
