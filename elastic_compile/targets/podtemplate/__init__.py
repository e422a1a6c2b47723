"""A core v1 ``PodTemplate`` holding the worker pod: for tools that take a pod template by name."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, ClassVar

from elastic_compile.core.loader import Loaded
from elastic_compile.schema import ElasticSpec
from elastic_compile.schema.compact import CORE_FILE
from elastic_compile.targets import Document, Target, bundle
from elastic_compile.targets.accelerator import placement_problems
from elastic_compile.targets.checks import (
    env_generation_problems,
    identity_errors,
    pod_value_errors,
    raise_problems,
    schema_errors,
)
from elastic_compile.targets.worker import SERVICE_LINTS, spec_to_plan

API_VERSION = "v1"
KIND = "PodTemplate"


class PodTemplateTarget(Target):
    """The worker pod template (Flyte's default PodTemplate, Argo, Kueue)."""

    name = "podtemplate"
    summary = "core v1 PodTemplate of the worker pod"
    order = 10
    generation = "v1"
    places_accelerator = True
    resources: ClassVar[Mapping[tuple[str, str], str]] = {(API_VERSION, KIND): "podtemplates", **bundle.RESOURCE}
    # The pod alone: the job around it (a PyTorchJob, a TrainJob, Flyte's) sets these, so with
    # another target of the compile they are that one's to explain.
    unused_settings: ClassVar[Mapping[str, str]] = dict.fromkeys(
        ("restart_policy", "run_policy"), "not in a PodTemplate: it holds the pod only; the job that runs it sets this"
    )

    def documents(self, spec: ElasticSpec, loaded: Loaded | None) -> list[Document]:
        # The training operator v1 runs this pod and sets its own env in it.
        raise_problems([*env_generation_problems(spec, "v1"), *placement_problems(spec)], loaded)
        # The same pod as the PyTorchJob's Worker: one plan, so the two never drift apart.
        plan = spec_to_plan(spec)
        template = Document("podtemplate.yaml.j2", "podtemplate.yaml", API_VERSION, KIND, {"plan": plan})
        return [*bundle.documents(spec), template]

    def check(self, doc: dict[str, Any], document: Document, spec: ElasticSpec) -> list[str]:
        if document.kind == bundle.KIND:
            return bundle.check(doc, spec)
        return [
            *identity_errors(doc, API_VERSION, KIND, spec.name),
            *schema_errors(doc, CORE_FILE, API_VERSION, KIND),
            *pod_value_errors((doc.get("template") or {}).get("spec"), ("template", "spec")),
        ]

    def lint_codes(self, chosen: Collection[Target]) -> frozenset[str]:
        # The v1 Worker's pod, unless it comes with a job of another generation (-t all of a
        # spec whose target is trainjob): then it is that job's pod, whose services JobSet runs.
        if any(t.generation not in (None, self.generation) for t in chosen):
            return frozenset()
        return SERVICE_LINTS


TARGET = PodTemplateTarget()
