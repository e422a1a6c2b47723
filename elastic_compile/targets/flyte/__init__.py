"""A Flyte 1 task (admin.TaskSpec in flyteidl's JSON), at parity with flytekitplugins-kfpytorch.

:mod:`.task` computes the TaskTemplate without flytekit (the compile path); :mod:`.kwargs`
builds a flytekit task with our settings (needs flytekit, imported lazily).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from elastic_compile.core.loader import Loaded
from elastic_compile.schema import ElasticSpec
from elastic_compile.targets import Document, Target
from elastic_compile.targets.checks import env_generation_problems, raise_problems


class FlyteTarget(Target):
    """The Flyte 1 TaskSpec to register.

    Its modules are imported when it is asked for: every command lists the targets (``-t``, ``--help``).
    """

    name = "flyte"
    summary = "Flyte 1 task spec (admin.TaskSpec JSON, as flytekit registers it)"
    order = 20
    generation = "v1"

    def in_all(self, spec: ElasticSpec) -> bool:
        # project, domain and version have no defaults: -t all never fails on a spec that
        # is not meant for Flyte; an explicit -t flyte on such a spec is an error.
        return spec.flyte is not None

    def documents(self, spec: ElasticSpec, loaded: Loaded | None) -> list[Document]:
        from elastic_compile.targets.flyte.task import spec_to_flyte

        # The training operator v1 runs this pod and sets its own env in it.
        raise_problems(env_generation_problems(spec, "v1"), loaded)
        task = spec_to_flyte(spec, loaded)
        return [Document("flyte_task.yaml.j2", "flyte-task.yaml", None, None, {"task": task})]

    def check(self, doc: dict[str, Any], document: Document, spec: ElasticSpec) -> list[str]:
        from elastic_compile.targets.flyte.task import check_task

        return check_task(doc)

    def lint_codes(self, chosen: Collection[Target]) -> frozenset[str]:
        from elastic_compile.targets.worker import SERVICE_LINTS  # Flyte's plugin runs a PyTorchJob

        return SERVICE_LINTS


TARGET = FlyteTarget()
