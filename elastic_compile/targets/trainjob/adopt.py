"""A TrainJob (trainer.kubeflow.org/v1alpha1) read back into elastic.yaml: the reverse of this target's plan.

A TrainJob's pod comes from three places (plan.py): ``spec.trainer`` (image, command,
env, resources, topology), its ``runtimePatches`` (volumes, mounts, scheduling, pod
metadata), and the runtime it references. When that runtime is a TrainingRuntime in the
same input (ours, or one written beside the job), its node job is read too: native
sidecars, init containers, the node container's other fields, the pod's restartPolicy
and the Job's backoffLimit. The pieces are put together as one pod template, whose
paths point back at where each piece was (:attr:`Draft.aliases`), and read like a
PyTorchJob's Worker (:func:`elastic_compile.targets.adopt.adopt_pod`).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from elastic_compile import contract
from elastic_compile.core.crdcheck import as_mapping
from elastic_compile.core.loader import Loaded
from elastic_compile.schema import ElasticSpec
from elastic_compile.targets.adopt import (
    Draft,
    Injected,
    Path,
    PodSource,
    adopt_metadata,
    adopt_pod,
    apply_launch,
    drop_default_nproc,
    other_document,
    read_launch,
    schema_problems,
    shutdown_seconds,
    spec_order,
)
from elastic_compile.targets.trainjob import SCHEMA_FILES, api
from elastic_compile.targets.trainjob.plan import PATCH_MANAGER

#: The pod template put together from the pieces (a path prefix no manifest has).
POD: Path = ("\x00pod",)
_TRAINER: Path = ("spec", "trainer")
# trainer fields -> the training container's.
_TRAINER_CONTAINER = {"image": "image", "env": "env", "resourcesPerNode": "resources"}


def trainjob_to_spec(loaded: Loaded, stream: Sequence[Loaded]) -> Draft:
    """The spec for the TrainJob in ``loaded``; ``stream`` may hold the TrainingRuntime it references."""
    draft = Draft()
    job = schema_problems(draft, loaded.data, SCHEMA_FILES[api.TRAINJOB], api.API_VERSION, api.TRAINJOB)
    if draft.errors:
        return draft
    draft.set(("target",), "trainjob", ("kind",))
    adopt_metadata(draft, job)
    labels = draft.get("labels") or {}
    if api.LABEL_KUEUE_QUEUE in labels:
        draft.set(("run_policy", "scheduling", "queue"), labels.pop(api.LABEL_KUEUE_QUEUE), ("metadata", "labels"))
        if not labels:
            del draft.values["labels"]
    spec = as_mapping(job.get("spec"))
    trainer = as_mapping(spec.get("trainer"))
    if not trainer:
        draft.fail(("spec",), "no trainer: Trainer's torch plugin injects the PET_* topology only into spec.trainer")
        return draft

    runtime, runtime_index = _runtime(draft, job, stream)
    if runtime is not None:
        runtime = _checked_runtime(draft, runtime, runtime_index)
        if draft.errors:
            return draft
    rjob, rjob_path = _node_job(draft, runtime, runtime_index)
    nodes = trainer.get("numNodes")
    if nodes is None and runtime is not None:
        nodes = as_mapping(as_mapping(runtime.get("spec")).get("mlPolicy")).get("numNodes")
    draft.set_unless_default(("nnodes",), nodes if nodes is not None else 1, (*_TRAINER, "numNodes"))

    command = [str(w) for w in trainer.get("command") or []]
    args = [str(w) for w in trainer.get("args") or []]
    if not command:
        draft.fail(_TRAINER, "no trainer.command: the runtime's container starts, and the manifest does not say what")
        return draft

    def at(i: int) -> Path:
        return (*_TRAINER, "command", i) if i < len(command) else (*_TRAINER, "args", i - len(command))

    launch = read_launch(command + args, at, draft)
    nproc = trainer.get("numProcPerNode")
    injected = Injected(nproc_per_node=(nproc, (*_TRAINER, "numProcPerNode")) if nproc is not None else None)
    apply_launch(draft, launch, at, injected, int(nodes or 1))
    chosen = launch.launcher == contract.LAUNCHER or launch.compiled

    template = _pod_template(draft, trainer, job, rjob, rjob_path)
    if launch.working_dir is not None:
        template["spec"]["containers"][0].setdefault("workingDir", launch.working_dir)
    shutdown = shutdown_seconds(draft)
    adopt_pod(
        draft,
        PodSource(template, POD, 0),
        shutdown_timeout=shutdown,
        chosen=chosen,
        extra_env=launch.env,
        ours=contract.TRAINJOB_DOWNWARD_ENV,
        bundled=launch.bundled,
        torchrun=launch.compiled,
        generation="v2",
    )
    drop_default_nproc(draft)
    for key, ours in (("suspend", "suspend"), ("activeDeadlineSeconds", "active_deadline_seconds")):
        if spec.get(key) is not None:
            draft.set_unless_default(("run_policy", ours), spec[key], ("spec", key))
    for key in ("initializer", "managedBy"):
        if key in spec:
            draft.warn(("spec", key), f"cannot carry spec.{key}; dropped")
    if runtime is not None and _needs_nothing(draft):
        # Our runtime was asked for, not needed: keep asking, or the compiled job would use the stock one.
        draft.set(("trainjob", "own_runtime"), "always", other_document(runtime_index, ()))
    return draft


def find_runtime(job: Mapping[str, Any], stream: Sequence[Loaded]) -> tuple[Mapping[str, Any] | None, int]:
    """The runtime ``job`` references, when the input holds it, and its index in the stream; else (None, -1)."""
    ref = as_mapping(as_mapping(job.get("spec")).get("runtimeRef"))
    name, kind = ref.get("name"), ref.get("kind", api.CLUSTER_TRAINING_RUNTIME)
    namespace = as_mapping(job.get("metadata")).get("namespace")
    for index, other in enumerate(stream):
        doc = other.data
        meta = as_mapping(doc.get("metadata")) if isinstance(doc, dict) else {}
        if (
            isinstance(doc, dict)
            and (doc.get("apiVersion"), doc.get("kind")) == (api.API_VERSION, kind)
            and meta.get("name") == name
            and (kind == api.CLUSTER_TRAINING_RUNTIME or meta.get("namespace") == namespace)
        ):
            return doc, index
    return None, -1


def _runtime(draft: Draft, job: Mapping[str, Any], stream: Sequence[Loaded]) -> tuple[Mapping[str, Any] | None, int]:
    """The runtime the job references when the input holds it; else its name goes into the spec."""
    ref = as_mapping(as_mapping(job.get("spec")).get("runtimeRef"))
    name, kind = ref.get("name"), ref.get("kind", api.CLUSTER_TRAINING_RUNTIME)
    runtime, index = find_runtime(job, stream)
    if runtime is not None:
        if kind != api.TRAINING_RUNTIME or name != as_mapping(job.get("metadata")).get("name"):
            draft.note(
                ("spec", "runtimeRef"),
                f"the runtime {name} is carried by the spec: the compiled job gets a TrainingRuntime named after it",
            )
        return runtime, index
    draft.set_unless_default(("trainjob", "runtime"), name, ("spec", "runtimeRef", "name"))
    draft.set_unless_default(("trainjob", "runtime_kind"), kind, ("spec", "runtimeRef", "kind"))
    return None, -1


def _checked_runtime(draft: Draft, runtime: Mapping[str, Any], index: int) -> Mapping[str, Any]:
    """The runtime against its CRD's compact schema, problems located in its own document."""
    kind = str(runtime.get("kind"))
    schema = SCHEMA_FILES.get(kind, "clustertrainingruntimes.trainer.kubeflow.org.json")
    inner = Draft()
    checked = schema_problems(inner, runtime, schema, api.API_VERSION, kind)
    for note in inner.notes:
        draft.notes.append(type(note)(other_document(index, note.path), note.message, note.severity, note.key))
    for path, message, given in inner.errors:
        draft.fail(other_document(index, path), message, given)
    return checked


def _node_job(draft: Draft, runtime: Mapping[str, Any] | None, index: int) -> tuple[Mapping[str, Any], Path]:
    """The runtime's ``node`` replicated job and its path; what else the runtime holds is not carried."""
    if runtime is None:
        return {}, ()
    spec = as_mapping(runtime.get("spec"))
    base: Path = ("spec", "template", "spec", "replicatedJobs")
    jobs = as_mapping(spec.get("template")).get("spec")
    found: Mapping[str, Any] = {}
    path: Path = ()
    for i, rjob in enumerate(as_mapping(jobs).get("replicatedJobs") or []):
        if as_mapping(rjob).get("name") == api.NODE:
            found, path = as_mapping(rjob), other_document(index, (*base, i))
        else:
            draft.warn(other_document(index, (*base, i)), "cannot carry the runtime's other replicated jobs; dropped")
    policy = as_mapping(spec.get("mlPolicy"))
    for key in policy:
        if key not in ("numNodes", "torch"):
            draft.warn(other_document(index, ("spec", "mlPolicy", key)), f"cannot carry mlPolicy.{key}; dropped")
    for key in spec:
        if key not in ("mlPolicy", "template"):
            draft.warn(other_document(index, ("spec", key)), f"cannot carry the runtime's spec.{key}; dropped")
    return found, path


def _pod_template(
    draft: Draft, trainer: Mapping[str, Any], job: Mapping[str, Any], rjob: Mapping[str, Any], rjob_path: Path
) -> dict[str, Any]:
    """One pod template from the runtime's node job, the patches and the trainer (in the order Trainer applies them)."""
    container: dict[str, Any] = {"name": contract.TRAINING_CONTAINER}
    pod: dict[str, Any] = {}
    metadata: dict[str, Any] = {}
    sidecars: list[dict[str, Any]] = []
    job_spec = as_mapping(as_mapping(rjob.get("template")).get("spec"))
    if rjob:
        pod_path: Path = (*rjob_path, "template", "spec", "template")
        rpod = copy.deepcopy(dict(as_mapping(as_mapping(job_spec.get("template")).get("spec"))))
        draft.aliases[(*POD, "spec")] = (*pod_path, "spec")
        inits: list[Any] = []
        for i, init in enumerate(rpod.pop("initContainers", None) or []):
            if as_mapping(init).get("restartPolicy") == "Always":
                draft.aliases[(*POD, "spec", "containers", 1 + len(sidecars))] = (
                    *pod_path,
                    "spec",
                    "initContainers",
                    i,
                )
                sidecars.append({k: v for k, v in dict(init).items() if k != "restartPolicy"})
            else:
                draft.aliases[(*POD, "spec", "initContainers", len(inits))] = (*pod_path, "spec", "initContainers", i)
                inits.append(init)
        for i, node in enumerate(rpod.pop("containers", None) or []):
            if as_mapping(node).get("name") == api.NODE:
                draft.aliases[(*POD, "spec", "containers", 0)] = (*pod_path, "spec", "containers", i)
                container.update({k: v for k, v in dict(node).items() if k not in ("name", "image")})
        restart = rpod.pop("restartPolicy", None)
        if restart is not None:
            draft.set(("restart_policy",), restart, (*pod_path, "spec", "restartPolicy"))
        if inits:
            pod["initContainers"] = inits
        pod.update(rpod)
        if job_spec.get("backoffLimit") is not None:
            draft.set(
                ("run_policy", "backoff_limit"),
                job_spec["backoffLimit"],
                (*rjob_path, "template", "spec", "backoffLimit"),
            )
    patches = as_mapping(job.get("spec")).get("runtimePatches") or []
    for p, patch in enumerate(patches):
        base: Path = ("spec", "runtimePatches", p, "trainingRuntimeSpec", "template", "spec", "replicatedJobs")
        if as_mapping(patch).get("manager") != PATCH_MANAGER:
            draft.note(("spec", "runtimePatches", p, "manager"), "this patch is carried by the spec's own patch now")
        rjobs = as_mapping(as_mapping(as_mapping(patch).get("trainingRuntimeSpec")).get("template")).get("spec")
        for j, patched in enumerate(as_mapping(rjobs).get("replicatedJobs") or []):
            if as_mapping(patched).get("name") != api.NODE:
                draft.warn((*base, j), "cannot carry a patch of another replicated job; dropped")
                continue
            tpl = as_mapping(as_mapping(as_mapping(patched).get("template")).get("spec")).get("template")
            tpl_path: Path = (*base, j, "template", "spec", "template")
            for key, value in as_mapping(as_mapping(tpl).get("metadata")).items():
                metadata.setdefault(key, {}).update(value or {})
                draft.aliases[(*POD, "metadata", key)] = (*tpl_path, "metadata", key)
            for key, value in as_mapping(as_mapping(tpl).get("spec")).items():
                if key == "containers":
                    for c, patched_container in enumerate(value or []):
                        if as_mapping(patched_container).get("name") == api.NODE:
                            for field, item in dict(patched_container).items():
                                if field != "name":
                                    container[field] = item
                                    draft.aliases[(*POD, "spec", "containers", 0, field)] = (
                                        *tpl_path,
                                        "spec",
                                        key,
                                        c,
                                        field,
                                    )
                        else:
                            draft.warn(
                                (*tpl_path, "spec", key, c), "cannot carry a patch of another container; dropped"
                            )
                    continue
                pod[key] = value
                draft.aliases[(*POD, "spec", key)] = (*tpl_path, "spec", key)
    for theirs, ours in _TRAINER_CONTAINER.items():
        if theirs in trainer:
            container[ours] = copy.deepcopy(trainer[theirs])
            draft.aliases[(*POD, "spec", "containers", 0, ours)] = (*_TRAINER, theirs)
    draft.aliases.setdefault((*POD, "spec", "containers", 0), _TRAINER)
    draft.aliases.setdefault((*POD, "spec"), ("spec", "runtimePatches"))
    draft.aliases.setdefault((*POD,), ("spec",))
    ordered: dict[str, Any] = {"containers": [container, *sidecars]}
    ordered.update(pod)
    template: dict[str, Any] = {"spec": ordered}
    if metadata:
        template["metadata"] = metadata
    return template


def _needs_nothing(draft: Draft) -> bool:
    """Whether the drafted spec compiles without a runtime of ours (then only own_runtime: always asks for one)."""
    from elastic_compile.targets.trainjob.plan import _runtime_needs

    try:
        spec = ElasticSpec.model_validate(spec_order(draft.values))
    except ValueError:
        return False  # the spec is checked, and its errors located, when the import is finished
    return not _runtime_needs(spec)
