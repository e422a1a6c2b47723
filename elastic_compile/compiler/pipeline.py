"""The compile path, left to right: load -> spec -> plan -> render -> parse back -> check.

Emitting (YAML or JSON text, files) is the CLI's job; everything here returns data.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elastic_compile.compiler import crdcheck
from elastic_compile.compiler.errors import CompileError
from elastic_compile.compiler.flyte import FlyteTask, check_task, spec_to_flyte
from elastic_compile.compiler.loader import Loaded, load_file, load_text
from elastic_compile.compiler.plan import Plan, spec_to_plan
from elastic_compile.compiler.render import render
from elastic_compile.compiler.spec import validate
from elastic_compile.schema import ElasticSpec
from elastic_compile.schema.podspec import podspec_problems


@dataclass(frozen=True)
class Target:
    """One kind of output: its template, file name and what it must be."""

    name: str
    template: str
    filename: str
    api_version: str | None  # None: not a Kubernetes object (the Flyte TaskSpec)
    kind: str | None


TARGETS: dict[str, Target] = {
    "pytorchjob": Target("pytorchjob", "pytorchjob.yaml.j2", "pytorchjob.yaml", "kubeflow.org/v1", "PyTorchJob"),
    "podtemplate": Target("podtemplate", "podtemplate.yaml.j2", "podtemplate.yaml", "v1", "PodTemplate"),
    "flyte": Target("flyte", "flyte_task.yaml.j2", "flyte-task.yaml", None, None),
}
# What -t all asks for. flyte is kept only for specs with a flyte: section (project,
# domain and version have no defaults), so -t all never fails on a spec that is not
# meant for Flyte; an explicit -t flyte on such a spec is an error.
ALL = ("pytorchjob", "podtemplate", "flyte")


@dataclass(frozen=True)
class Output:
    """One rendered, parsed-back and checked resource."""

    target: Target
    doc: dict[str, Any]


@dataclass(frozen=True)
class Compiled:
    """Everything one spec compiled to."""

    loaded: Loaded | None
    spec: ElasticSpec
    plan: Plan
    outputs: tuple[Output, ...]


def check_output(target: Target, doc: dict[str, Any], plan: Plan) -> list[str]:
    """What is wrong with a rendered resource (empty when it is fine).

    These are the checks that need no schema files: identity, and for a PyTorchJob the
    operator webhook's rules and the traps we promise never to emit. The CRD and
    kubernetes-validate checks run in the tests (the CRD is not ours to ship).
    """
    if target.api_version is None:
        return check_task(doc)
    problems = []
    if doc.get("apiVersion") != target.api_version or doc.get("kind") != target.kind:
        problems.append(f"expected apiVersion {target.api_version} and kind {target.kind}")
    meta = doc.get("metadata")
    if not isinstance(meta, dict) or meta.get("name") != plan.name:
        problems.append(f"metadata.name must be {plan.name}")
    problems += shape_errors(doc, _SHAPES.get(target.kind or ""))
    if target.kind == "PyTorchJob":
        problems += crdcheck.webhook_errors(doc)
    return problems


# The fields of what we emit (PyTorchJob v1 from training-operator v1.9.4, core PodTemplate),
# so that a custom template's typo (restartPolcy) is an error here and not pruned, with only
# a warning, by the API server. A nested dict is an object; None accepts any value; the
# string "pod" is a PodTemplateSpec, whose spec goes through the PodSpec check.
_META = dict.fromkeys(("name", "namespace", "labels", "annotations", "generateName", "finalizers",
                       "ownerReferences"))  # fmt: skip
_POD: dict[str, Any] = {"metadata": dict.fromkeys(("name", "namespace", "labels", "annotations", "finalizers")),
                        "spec": "podspec"}  # fmt: skip
_REPLICA: dict[str, Any] = {"replicas": None, "restartPolicy": None, "template": _POD}
_SHAPES: dict[str, dict[str, Any]] = {
    "PyTorchJob": {
        "apiVersion": None, "kind": None, "metadata": _META,
        "spec": {
            "pytorchReplicaSpecs": {"Master": _REPLICA, "Worker": _REPLICA},
            "nprocPerNode": None,
            "elasticPolicy": dict.fromkeys(("minReplicas", "maxReplicas", "rdzvBackend", "rdzvPort", "rdzvHost",
                                            "rdzvId", "rdzvConf", "standalone", "nProcPerNode", "maxRestarts",
                                            "metrics")),
            "runPolicy": {
                **dict.fromkeys(("cleanPodPolicy", "ttlSecondsAfterFinished", "activeDeadlineSeconds",
                                 "backoffLimit", "suspend", "managedBy")),
                "schedulingPolicy": dict.fromkeys(("minAvailable", "queue", "minResources", "priorityClass",
                                                   "scheduleTimeoutSeconds")),
            },
        },
    },
    "PodTemplate": {"apiVersion": None, "kind": None, "metadata": _META, "template": _POD},
}  # fmt: skip


def shape_errors(value: Any, shape: Any, path: str = "") -> list[str]:
    """Unknown fields (and non-objects where objects belong) in ``value``, by ``shape``."""
    if shape is None:
        return []
    if shape == "podspec":
        return [f"{path}.{'.'.join(map(str, loc))}: {msg}" for loc, msg in podspec_problems(value)] \
            if isinstance(value, dict) else [f"{path}: expected a mapping"]  # fmt: skip
    if not isinstance(value, dict):
        return [f"{path or 'the document'}: expected a mapping"]
    errors = []
    for key, item in value.items():
        where = f"{path}.{key}" if path else str(key)
        if key not in shape:
            errors.append(f"{where}: unknown field")
        else:
            errors += shape_errors(item, shape[key], where)
    return errors


def plan_outputs(
    plan: Plan, targets: Sequence[str], template_dir: Path | None = None, flyte_task: FlyteTask | None = None
) -> tuple[Output, ...]:
    """Render, parse back and check each target (``flyte`` needs ``flyte_task``)."""
    outputs = []
    for name in targets:
        target = TARGETS[name]
        doc = render(target.template, template_dir, plan=plan, task=flyte_task)
        problems = check_output(target, doc, plan)
        if problems:
            custom = template_dir / target.template if template_dir is not None else None
            where = f"template {custom}" if custom is not None and custom.is_file() else f"template {target.template}"
            raise CompileError(where, "; ".join(problems))
        outputs.append(Output(target, doc))
    return tuple(outputs)


def compile_spec(
    spec: ElasticSpec,
    targets: Sequence[str] = ("pytorchjob",),
    template_dir: Path | None = None,
    loaded: Loaded | None = None,
) -> Compiled:
    """Compile a validated spec. ``targets == ALL`` keeps flyte only if the spec has a flyte: section."""
    if tuple(targets) == ALL and spec.flyte is None:
        targets = tuple(t for t in ALL if t != "flyte")
    plan = spec_to_plan(spec)
    flyte_task = spec_to_flyte(spec, loaded) if "flyte" in targets else None
    return Compiled(loaded, spec, plan, plan_outputs(plan, targets, template_dir, flyte_task))


def compile_path(
    path: str | Path, targets: Sequence[str] = ("pytorchjob",), template_dir: Path | None = None
) -> Compiled:
    """Compile the spec file at ``path`` (``-`` for stdin). Raises ``SpecError`` on bad input."""
    loaded = load_file(path)
    return compile_spec(validate(loaded), targets, template_dir, loaded)


def compile_text(
    text: str | bytes,
    file: str = "<string>",
    targets: Sequence[str] = ("pytorchjob",),
    template_dir: Path | None = None,
) -> Compiled:
    """Compile spec text (used by tests and the fuzzer)."""
    loaded = load_text(text, file)
    return compile_spec(validate(loaded), targets, template_dir, loaded)
