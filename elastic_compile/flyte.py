"""elastic.yaml for flytekit users: ``@task(**task_kwargs("elastic.yaml"))``.

The public face of :mod:`elastic_compile.targets.flyte.kwargs` (which see); needs the
``flyte`` extra (flytekit), imported here.
"""

from elastic_compile.targets.flyte.kwargs import elastic_config, spec_task_kwargs, task_kwargs

__all__ = ["elastic_config", "spec_task_kwargs", "task_kwargs"]
