"""Flyte 2: the settings of a ``flyte.TaskEnvironment`` running flyteplugins-pytorch's ``Elastic``.

:mod:`.environment` computes them as plain data without flyte (``-t flyte2`` prints them,
which checks a spec for Flyte 2 from the CLI); :mod:`.sdk` turns the same data into flyte
objects for :func:`elastic_compile.flyte2.environment_kwargs` (flyte imported lazily).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from elastic_compile.core.loader import Loaded
from elastic_compile.schema import ElasticSpec
from elastic_compile.targets import Document, Target
from elastic_compile.targets.checks import env_generation_problems, raise_problems


class Flyte2Target(Target):
    """The TaskEnvironment settings that ``elastic_compile.flyte2.environment_kwargs`` passes.

    Its modules are imported when it is asked for: every command lists the targets (``-t``, ``--help``).
    """

    name = "flyte2"
    summary = (
        "Flyte 2 TaskEnvironment settings as data (what elastic_compile.flyte2.environment_kwargs "
        "passes; checks the spec for Flyte 2 without importing flyte)"
    )
    order = 30
    generation = "v1"

    def in_all(self, spec: ElasticSpec) -> bool:
        # Only when asked for: a Flyte 2 environment runs a decorated function, so a
        # command: spec, fine for every other target, is an error here.
        return False

    def documents(self, spec: ElasticSpec, loaded: Loaded | None) -> list[Document]:
        from elastic_compile.targets.flyte2.environment import spec_to_flyte2

        # The training operator v1 runs this pod and sets its own env in it.
        raise_problems(env_generation_problems(spec, "v1"), loaded)
        env = spec_to_flyte2(spec, loaded)
        return [Document("flyte2_environment.yaml.j2", "flyte2-environment.yaml", None, None, {"env": env})]

    def check(self, doc: dict[str, Any], document: Document, spec: ElasticSpec) -> list[str]:
        from elastic_compile.targets.flyte2.environment import check_environment

        return check_environment(doc)

    def lint_codes(self, chosen: Collection[Target]) -> frozenset[str]:
        from elastic_compile.targets.worker import SERVICE_LINTS  # Flyte's plugin runs a PyTorchJob

        return SERVICE_LINTS


TARGET = Flyte2Target()
