"""A TrainJob (trainer.kubeflow.org/v1alpha1) read back into elastic.yaml: the reverse of this target's plan.

A TrainJob's pod comes from three places (plan.py): ``spec.trainer`` (image, command,
env, resources, topology), its ``runtimePatches`` (volumes, mounts, scheduling, pod
metadata), and the runtime it references. When that runtime is a TrainingRuntime in the
same input (ours, or one written beside the job), its node job is read too: native
sidecars, init containers, the node container's other fields, the pod's restartPolicy
and the Job's backoffLimit. The pieces are put together as one pod template, whose
paths point back at where each piece was (:attr:`Draft.aliases`), and read like a
PyTorchJob's Worker (:func:`elastic_compile.targets.readback.pod_template.adopt_pod`).
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Mapping, Sequence
from typing import Any, Final

from elastic_compile import contract
from elastic_compile.core.loader import Loaded
from elastic_compile.core.manifest import as_int, as_mapping
from elastic_compile.schema import ElasticSpec
from elastic_compile.schema.models import KUEUE_PRIORITY_LABEL as LABEL_KUEUE_PRIORITY
from elastic_compile.schema.models import KUEUE_QUEUE_LABEL as LABEL_KUEUE_QUEUE
from elastic_compile.schema.models import mounts_shm
from elastic_compile.targets.readback.command_line import Launch, entrypoint_argv, read_launch
from elastic_compile.targets.readback.draft import Draft, Path, other_document, shutdown_seconds, spec_order
from elastic_compile.targets.readback.job_object import adopt_metadata, drop_default_nproc, schema_problems
from elastic_compile.targets.readback.launch_settings import Injected, apply_launch
from elastic_compile.targets.readback.pod_template import PodSource, adopt_pod
from elastic_compile.targets.trainjob import SCHEMA_FILES, api
from elastic_compile.targets.trainjob.plan import PATCH_MANAGER

#: The pod template put together from the pieces (a path prefix no manifest has).
POD: Path = ("\x00pod",)
_TRAINER: Path = ("spec", "trainer")
# trainer fields -> the training container's.
_TRAINER_CONTAINER = {"image": "image", "env": "env", "resourcesPerNode": "resources"}


def trainjob_to_spec(loaded: Loaded, stream: Sequence[Loaded], entrypoint: Sequence[str] | None = None) -> Draft:
    """The spec for the TrainJob in ``loaded``; ``stream`` may hold the TrainingRuntime it references.

    ``entrypoint``: the image's ENTRYPOINT (``import --entrypoint``), for a trainer without command
    whose runtime gives none either.
    """
    draft = Draft()
    job = schema_problems(draft, loaded.data, SCHEMA_FILES[api.TRAINJOB], api.API_VERSION, api.TRAINJOB)
    if draft.errors:
        return draft
    draft.set(("target",), "trainjob", ("kind",))
    adopt_metadata(draft, job)
    _kueue_labels(draft)
    spec = as_mapping(job.get("spec"))
    trainer = as_mapping(spec.get("trainer"))
    if not trainer:
        draft.fail(("spec",), "no trainer: Trainer's torch plugin injects the PET_* topology only into spec.trainer")
        return draft

    ref = as_mapping(spec.get("runtimeRef"))
    runtime, runtime_index = _runtime(draft, job, stream)
    if runtime is not None:
        runtime = _checked_runtime(draft, runtime, runtime_index)
        if draft.errors:
            return draft
    if runtime is not None:
        policy = as_mapping(as_mapping(runtime.get("spec")).get("mlPolicy"))
        other = next((k for k in policy if k not in ("numNodes", "torch")), None)
        if other is not None and "torch" not in policy:
            # Only the torch plugin injects PET_* and runs torchrun's topology (T: pkg/runtime/framework/plugins/).
            draft.fail(
                other_document(runtime_index, ("spec", "mlPolicy", other)),
                f"the runtime {ref.get('name')} runs {other}, not torch: elastic-compile writes torch jobs",
            )
            return draft
    # The compiled elastic TrainJob (issue 30): MIN in the launcher's words, our policies in the runtime.
    elastic = _elastic_words(trainer, runtime)
    carried = runtime is not None and _carry(draft, runtime, runtime_index, ref, elastic=elastic)
    if draft.errors:
        return draft
    rjob, rjob_path = _node_job(draft, runtime if carried else None, runtime_index)
    job_name = as_mapping(job.get("metadata")).get("name")
    if carried and (ref.get("kind") != api.TRAINING_RUNTIME or ref.get("name") != job_name):
        draft.note(
            ("spec", "runtimeRef"),
            f"the runtime {ref.get('name')} is carried by the spec: the compiled job gets a TrainingRuntime named "
            "after the job",
        )
    nodes = trainer.get("numNodes")
    if nodes is None and runtime is not None:
        nodes = as_mapping(as_mapping(runtime.get("spec")).get("mlPolicy")).get("numNodes")
    if nodes is None and runtime is None and not api.is_stock(ref):
        draft.warn(
            (*_TRAINER,),
            f"no trainer.numNodes: the runtime {ref.get('name')} decides it (its mlPolicy.numNodes), and it is not in "
            "the input; nnodes 1 assumed",
            "nnodes",
        )
    draft.set_unless_default(("nnodes",), nodes if nodes is not None else 1, (*_TRAINER, "numNodes"))

    # Trainer sets node's command and args only when trainer gives them (T: jobset.go, the trainer's fields).
    node = next((c for _p, c in _node_containers(runtime)), {}) if runtime is not None else {}
    written = dict(trainer)
    for key in ("command", "args"):
        if key not in written and node.get(key):
            written[key] = node[key]
    argv, at = entrypoint_argv(draft, written, _TRAINER, entrypoint)
    if argv is None:
        return draft

    launch = read_launch(argv, at, draft)
    resources = api.runtime_node_resources(runtime) if runtime is not None else None
    if launch.launcher is None:
        # Nothing read PET_NPROC_PER_NODE: the command ran once per pod.
        injected = Injected(nproc_per_node=(1, at(0)), generation="v2")
    else:
        injected = Injected(nproc_per_node=_nproc(draft, trainer, ref, runtime, resources), generation="v2")
    apply_launch(draft, launch, at, injected, int(nodes or 1))
    low = _elastic_min(launch)
    if low is not None and runtime is None and not api.is_stock(ref):
        _elastic_runtime_missing(draft, job, ref, f"{low[0]}:{int(nodes or 1)}")
        return draft
    if low is not None:
        value, index = low
        draft.set(("nnodes",), f"{value}:{int(nodes or 1)}", at(index))
    chosen = launch.launcher == contract.LAUNCHER or launch.compiled

    template = _pod_template(draft, trainer, job, rjob, rjob_path, elastic=elastic)
    if launch.working_dir is not None:
        template["spec"]["containers"][0].setdefault("workingDir", launch.working_dir)
    if runtime is not None and not carried and _runtime_mounts_shm(runtime):
        # The referenced runtime gives node its /dev/shm: the compiled patch must not add a second.
        draft.set(("shared_memory",), False, other_document(runtime_index, ()))
        draft.note(
            other_document(runtime_index, ()),
            f"shared_memory false: the runtime {ref.get('name')} mounts /dev/shm on node already",
            "shared_memory",
        )
    shutdown = shutdown_seconds(draft)
    adopt_pod(
        draft,
        PodSource(template, POD, 0),
        shutdown_timeout=shutdown,
        chosen=chosen or draft.get("shared_memory") is False,
        extra_env=launch.env,
        ours=contract.TRAINJOB_DOWNWARD_ENV,
        bundled=launch.bundled,
        torchrun=launch.compiled,
        generation="v2",
    )
    _image(draft, trainer, ref, runtime, runtime_index)
    drop_default_nproc(draft)
    for key, ours in (("suspend", "suspend"), ("activeDeadlineSeconds", "active_deadline_seconds")):
        if spec.get(key) is not None:
            draft.set_unless_default(("run_policy", ours), spec[key], ("spec", key))
    if "initializer" in spec:
        draft.set(("trainjob", "initializer"), copy.deepcopy(spec["initializer"]), ("spec", "initializer"))
    if spec.get("managedBy") == api.DEFAULT_MANAGED_BY:
        # The CRD's default: every TrainJob read back from the API server has it.
        draft.note(
            ("spec", "managedBy"), f"spec.managedBy dropped (the API server's default, {api.DEFAULT_MANAGED_BY})"
        )
    elif "managedBy" in spec:
        draft.warn(("spec", "managedBy"), "cannot carry spec.managedBy (no spec field); dropped", "trainjob")
    if carried and _needs_nothing(draft):
        # Our runtime was asked for, not needed: keep asking, or the compiled job would use the stock one.
        draft.set(("trainjob", "own_runtime"), "always", other_document(runtime_index, ()))
    return draft


def _elastic_runtime_missing(draft: Draft, job: Mapping[str, Any], ref: Mapping[str, Any], nnodes: str) -> None:
    """An elastic range whose runtime is not in the input: the range's Job and JobSet policies live in
    that runtime, so the import cannot tell whether it is ours (then the spec's range emits it again)
    or one of the user's (then the spec must name it, and ours cannot run the range in it)."""
    name, kind = ref.get("name"), ref.get("kind", api.CLUSTER_TRAINING_RUNTIME)
    namespace = as_mapping(job.get("metadata")).get("namespace")
    get = f"kubectl get {str(kind).lower()} {name}" + (f" -n {namespace}" if namespace and kind == api.TRAINING_RUNTIME
                                                       else "")  # fmt: skip
    draft.fail(
        ("spec", "runtimeRef", "name"),
        f"the launcher runs an elastic range ({nnodes}), and the {kind} {name} that holds its Job and JobSet "
        "policies is not in the input; import the two together: the stream elastic-compile printed, `kubectl "
        f"kustomize DIR | elastic-compile import -` for a base it wrote, or `{get} -o yaml`, then --- and the "
        f"TrainJob, in one file. If {name} is the runtime elastic-compile emitted for this job, a spec with nnodes: "
        f'"{nnodes}" and no trainjob.runtime emits it again',
    )


def _kueue_labels(draft: Draft) -> None:
    """Kueue's labels on the TrainJob, where Kueue reads them (T: examples/yaml/03-kueue-integration.yaml),
    become the spec's kueue section, which writes them back there."""
    labels = draft.get("labels") or {}
    queue = labels.pop(LABEL_KUEUE_QUEUE, None)
    priority = labels.pop(LABEL_KUEUE_PRIORITY, None)
    if queue is not None:
        draft.set(("kueue", "queue"), queue, ("metadata", "labels", LABEL_KUEUE_QUEUE))
        if priority is not None:
            draft.set(("kueue", "priority_class"), priority, ("metadata", "labels", LABEL_KUEUE_PRIORITY))
    elif priority is not None:
        labels[LABEL_KUEUE_PRIORITY] = priority
    if "labels" in draft.values and not labels:
        del draft.values["labels"]


def _nproc(
    draft: Draft,
    trainer: Mapping[str, Any],
    ref: Mapping[str, Any],
    runtime: Mapping[str, Any] | None,
    resources: Mapping[str, Any] | None,
) -> tuple[Any, Path]:
    """What the torch plugin sets as PET_NPROC_PER_NODE (T: torch.go:121-135), and where it comes from."""
    value = api.plugin_nproc(trainer, resources)
    if trainer.get("numProcPerNode") is not None:
        return value, (*_TRAINER, "numProcPerNode")
    given = isinstance(trainer.get("resourcesPerNode"), Mapping)
    where: Path = (*_TRAINER, "resourcesPerNode") if given else (*_TRAINER,)
    if not given and runtime is None and not api.is_stock(ref):
        draft.warn(
            where,
            f"no numProcPerNode and no resourcesPerNode: Trainer counts the GPUs or CPUs of the runtime "
            f"{ref.get('name')}, which is not in the input; nproc_per_node {value} assumed",
            "nproc_per_node",
        )
    elif value != "auto" and int(value) > 1:
        draft.note(
            where,
            f"nproc_per_node {value}: without numProcPerNode, Trainer's torch plugin starts one process per CPU the "
            f"node requests when it asks for no GPU (Trainer v2.3.0 torch.go:121-135)",
            "nproc_per_node",
        )
    return value, where


def _image(
    draft: Draft,
    trainer: Mapping[str, Any],
    ref: Mapping[str, Any],
    runtime: Mapping[str, Any] | None,
    index: int,
) -> None:
    """trainer.image, else the referenced runtime's node container image (Trainer sets it only when given)."""
    if draft.get("image") is not None:
        return
    name = ref.get("name")
    if runtime is not None:
        for path, container in _node_containers(runtime):
            if isinstance(container.get("image"), str):
                draft.set(("image",), container["image"], other_document(index, (*path, "image")))
                draft.note(
                    other_document(index, (*path, "image")),
                    f"image from the runtime {name}: trainer.image is not set, so Trainer runs the runtime's",
                    "image",
                )
                return
    elif api.is_stock(ref):
        draft.set(("image",), api.STOCK_IMAGE, ("spec", "runtimeRef"))
        draft.note(
            ("spec", "runtimeRef"),
            f"image {api.STOCK_IMAGE} from the stock {api.STOCK_RUNTIME} runtime (Trainer v2.3.0): trainer.image is "
            "not set, so Trainer runs the runtime's",
            "image",
        )
        return
    draft.fail(
        (*_TRAINER,),
        f"no trainer.image: the image is the runtime {name}'s, which is not in the input; give the input with the "
        "runtime, or trainer.image",
    )


def _node_containers(runtime: Mapping[str, Any]) -> list[tuple[Path, Mapping[str, Any]]]:
    """The runtime's node containers (in its trainer job) and their paths."""
    out: list[tuple[Path, Mapping[str, Any]]] = []
    base: Path = ("spec", "template", "spec", "replicatedJobs")
    jobs = as_mapping(as_mapping(as_mapping(runtime.get("spec")).get("template")).get("spec")).get("replicatedJobs")
    for i, rjob in enumerate(jobs if isinstance(jobs, list) else []):
        if as_mapping(rjob).get("name") != api.NODE:
            continue
        pod = as_mapping(as_mapping(as_mapping(as_mapping(rjob).get("template")).get("spec")).get("template"))
        for k, container in enumerate(as_mapping(pod.get("spec")).get("containers") or []):
            if as_mapping(container).get("name") == api.NODE:
                out.append(((*base, i, "template", "spec", "template", "spec", "containers", k), as_mapping(container)))
    return out


def _runtime_mounts_shm(runtime: Mapping[str, Any]) -> bool:
    return any(
        isinstance(m, Mapping) and mounts_shm(dict(m))
        for _path, container in _node_containers(runtime)
        for m in container.get("volumeMounts") or []
    )


#: What of a runtime the spec carries (its node job's pod is pod_template; the rest are these).
_RUNTIME_SPEC = ("mlPolicy", "template")
_JOB_KEYS = ("name", "replicas", "template")
_JOB_SPEC = ("template", "backoffLimit")
#: What JobSet v0.12's CRD defaults in a replicated job: a runtime read back from the API server
#: has it, and it is the value the compiled runtime gets too (seen on the real server:
#: tests/realcluster/test_import_from_server.py).
JOB_DEFAULTS: Final[Mapping[str, Any]] = {"groupName": "default"}
#: What JobSet v0.12's CRD defaults in the fields of the JobSet spec our runtime writes: a
#: ``failurePolicy`` gets ``restartStrategy: Recreate`` (held against the real server by the
#: same test). An elastic runtime read back from the server is still ours.
JOBSET_DEFAULTS: Final[Mapping[str, Mapping[str, Any]]] = {"failurePolicy": {"restartStrategy": "Recreate"}}
_NO_DEFAULT = object()


def _without_defaults(value: Any, defaults: Mapping[str, Any] | None) -> Any:
    """``value`` less the entries that hold the CRD's default (what the server filled in, or the same written)."""
    if not defaults or not isinstance(value, Mapping):
        return value
    return {k: v for k, v in value.items() if defaults.get(k, _NO_DEFAULT) != v}


def _elastic_words(trainer: Mapping[str, Any], runtime: Mapping[str, Any] | None) -> bool:
    """Whether the node container's words hold an elastic range: elastic-launch's --min-nodes, or torchrun's
    --nnodes MIN:$(PET_NNODES) (the compiled forms, targets/launcher.py)."""
    words = [str(w) for w in [*(trainer.get("command") or []), *(trainer.get("args") or [])]]
    if not words and runtime is not None:
        node = next((c for _p, c in _node_containers(runtime)), {})
        words = [str(w) for w in [*(node.get("command") or []), *(node.get("args") or [])]]
    if contract.OPT_MIN_NODES in words:
        return True
    return any(w == "--nnodes" and ":" in n for w, n in itertools.pairwise(words))


def _elastic_min(launch: Launch) -> tuple[str, int] | None:
    """MIN of the elastic range the launcher was given, and the index of its word; None for a fixed count."""
    found = launch.settings.get("min_nodes")
    if found is not None:
        return str(found[0]), found[1]
    nnodes = launch.settings.get("nnodes")
    if nnodes is not None and str(nnodes[0]).endswith(f":$({contract.PET_NNODES})"):
        return str(nnodes[0]).partition(":")[0], nnodes[1]
    return None


#: What our runtime writes for an elastic range (targets/trainjob/plan.py), by where it sits.
_ELASTIC_JOBSET: Final = {"failurePolicy": api.ELASTIC_FAILURE_POLICY}
_ELASTIC_JOB: Final = {"successPolicy": api.ELASTIC_SUCCESS_POLICY, "podReplacementPolicy": api.ELASTIC_POD_REPLACEMENT}


def _carry(
    draft: Draft, runtime: Mapping[str, Any], index: int, ref: Mapping[str, Any], *, elastic: bool = False
) -> bool:
    """Whether the spec can carry the runtime in the input (then the compiled job gets a TrainingRuntime of
    ours named after it); otherwise the compiled job references the runtime by name, and notes say what it keeps.

    With ``elastic``, our runtime's policies for the range are carried by ``nnodes`` itself.
    """
    ours_jobset = _ELASTIC_JOBSET if elastic else {}
    ours_job = _ELASTIC_JOB if elastic else {}
    spec = as_mapping(runtime.get("spec"))
    kept: list[tuple[Path, str]] = []
    for key in spec:
        if key not in _RUNTIME_SPEC:
            kept.append((("spec", key), f"spec.{key}"))
    policy = as_mapping(spec.get("mlPolicy"))
    for key in policy:
        if key not in ("numNodes", "torch") or (key == "torch" and as_mapping(policy[key])):
            kept.append((("spec", "mlPolicy", key), f"mlPolicy.{key}"))
    template = as_mapping(spec.get("template"))
    jobset = as_mapping(template.get("spec"))
    for key in jobset:
        served = _without_defaults(jobset[key], JOBSET_DEFAULTS.get(key))
        if key != "replicatedJobs" and not (key in ours_jobset and served == ours_jobset[key]):
            kept.append((("spec", "template", "spec", key), f"the JobSet's {key}"))
    base: Path = ("spec", "template", "spec", "replicatedJobs")
    for i, raw in enumerate(jobset.get("replicatedJobs") or []):
        rjob = as_mapping(raw)
        if rjob.get("name") != api.NODE:
            kept.append(((*base, i), f"its replicated job {rjob.get('name')}"))
            continue
        kept += [
            ((*base, i, key), f"the node job's {key}")
            for key in rjob
            if key not in _JOB_KEYS and JOB_DEFAULTS.get(key, _NO_DEFAULT) != rjob[key]
        ]
        if as_int(rjob.get("replicas")) not in (None, 1):
            kept.append(((*base, i, "replicas"), "the node job's replicas"))
        job_spec = as_mapping(as_mapping(rjob.get("template")).get("spec"))
        kept += [
            ((*base, i, "template", "spec", key), f"the node Job's {key}")
            for key in job_spec
            if key not in _JOB_SPEC and not (key in ours_job and job_spec[key] == ours_job[key])
        ]
    if not kept:
        return True
    name, kind = ref.get("name"), ref.get("kind", api.CLUSTER_TRAINING_RUNTIME)
    if elastic:
        # The range runs only in a runtime of ours, and this one holds more than ours: referencing it would make
        # the spec name a runtime that the range then replaces (an advice loop). Say which way out there is.
        whats = ", ".join(what for _path, what in kept)
        draft.fail(
            other_document(index, kept[0][0]),
            f"the launcher runs an elastic range, whose Job and JobSet policies elastic-compile writes in a "
            f"TrainingRuntime of its own, and the runtime {name} also has what the spec cannot carry ({whats}); "
            "remove that from the runtime to import the job onto ours, or give the launcher a fixed node count to "
            f"keep {name} as it is",
        )
        return False
    draft.set_unless_default(("trainjob", "runtime"), name, ("spec", "runtimeRef", "name"))
    draft.set_unless_default(("trainjob", "runtime_kind"), kind, ("spec", "runtimeRef", "kind"))
    for path, what in kept:
        draft.note(
            other_document(index, path),
            f"the runtime {name} is referenced, not carried: the spec has no field for {what}; apply the runtime as "
            "written beside the compiled job",
            "trainjob",
        )
    return False


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
    """The carried runtime's ``node`` replicated job and its path (``_carry`` said the rest fits the spec).

    Its JobSet-level and Job-level metadata become trainjob.jobset_metadata and
    trainjob.job_metadata (less the ancestor label, which the compiled runtime writes again).
    """
    if runtime is None:
        return {}, ()
    meta = as_mapping(runtime.get("metadata"))
    labels = {k: v for k, v in as_mapping(meta.get("labels")).items() if k != api.LABEL_FRAMEWORK}
    for key, value in (("labels", labels), ("annotations", as_mapping(meta.get("annotations")))):
        if value:
            draft.warn(
                other_document(index, ("metadata", key)),
                f"cannot carry the runtime object's own {key} (Trainer copies none of them to the job); dropped",
                "trainjob",
            )
    spec = as_mapping(runtime.get("spec"))
    template = as_mapping(spec.get("template"))
    _carry_metadata(
        draft,
        "jobset_metadata",
        as_mapping(template.get("metadata")),
        other_document(index, ("spec", "template", "metadata")),
    )
    base: Path = ("spec", "template", "spec", "replicatedJobs")
    for i, rjob in enumerate(as_mapping(template.get("spec")).get("replicatedJobs") or []):
        if as_mapping(rjob).get("name") == api.NODE:
            path = other_document(index, (*base, i))
            job_meta = dict(as_mapping(as_mapping(as_mapping(rjob).get("template")).get("metadata")))
            job_meta["labels"] = {
                k: v for k, v in as_mapping(job_meta.get("labels")).items() if k != api.LABEL_ANCESTOR
            }
            _carry_metadata(draft, "job_metadata", job_meta, (*path, "template", "metadata"))
            return as_mapping(rjob), path
    return {}, ()


def _carry_metadata(draft: Draft, field: str, meta: Mapping[str, Any], path: Path) -> None:
    """labels and annotations of a JobSet or Job template onto trainjob.<field> (merged: patches come later)."""
    for key in ("labels", "annotations"):
        value = as_mapping(meta.get(key))
        if value:
            current = draft.get("trainjob", field, key) or {}
            draft.set(("trainjob", field, key), {**current, **value}, (*path, key))
    for key in meta:
        if key not in ("labels", "annotations"):
            draft.warn((*path, key), f"cannot carry metadata.{key}; dropped", "trainjob")


def _pod_template(
    draft: Draft,
    trainer: Mapping[str, Any],
    job: Mapping[str, Any],
    rjob: Mapping[str, Any],
    rjob_path: Path,
    *,
    elastic: bool = False,
) -> dict[str, Any]:
    """One pod template from the carried runtime's node job, the patches and the trainer (in the order Trainer
    applies them, merged as it merges them: T: pkg/runtime/core/trainingruntime.go:251-290, torch.go:141).

    The patches' JobSet-level and Job-level metadata go to trainjob.jobset_metadata and job_metadata.
    """
    container: dict[str, Any] = {"name": contract.TRAINING_CONTAINER}
    pod: dict[str, Any] = {}
    metadata: dict[str, Any] = {}
    sidecars: list[dict[str, Any]] = []
    job_spec = as_mapping(as_mapping(rjob.get("template")).get("spec"))
    if rjob:
        pod_path: Path = (*rjob_path, "template", "spec", "template")
        rpod = copy.deepcopy(dict(as_mapping(as_mapping(job_spec.get("template")).get("spec"))))
        for key, value in as_mapping(as_mapping(job_spec.get("template")).get("metadata")).items():
            metadata[key] = dict(as_mapping(value))
            draft.aliases[(*POD, "metadata", key)] = (*pod_path, "metadata", key)
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
        if restart is not None and not (elastic and restart == "OnFailure"):  # the range writes it again
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
        patched_template = as_mapping(as_mapping(as_mapping(patch).get("trainingRuntimeSpec")).get("template"))
        meta_path: Path = ("spec", "runtimePatches", p, "trainingRuntimeSpec", "template", "metadata")
        _carry_metadata(draft, "jobset_metadata", as_mapping(patched_template.get("metadata")), meta_path)
        rjobs = patched_template.get("spec")
        for j, patched in enumerate(as_mapping(rjobs).get("replicatedJobs") or []):
            if as_mapping(patched).get("name") != api.NODE:
                draft.warn((*base, j), "cannot carry a patch of another replicated job; dropped", "trainjob")
                continue
            job_template = as_mapping(as_mapping(patched).get("template"))
            _carry_metadata(
                draft, "job_metadata", as_mapping(job_template.get("metadata")), (*base, j, "template", "metadata")
            )
            tpl = as_mapping(job_template.get("spec")).get("template")
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
                                    container[field] = api.strategic_merge(container.get(field), item, field)
                                    draft.aliases[(*POD, "spec", "containers", 0, field)] = (
                                        *tpl_path,
                                        "spec",
                                        key,
                                        c,
                                        field,
                                    )
                        else:
                            draft.warn(
                                (*tpl_path, "spec", key, c),
                                "cannot carry a patch of another container; dropped",
                                "trainjob",
                            )
                    continue
                pod[key] = api.strategic_merge(pod.get(key), value, key) if key in pod else copy.deepcopy(value)
                draft.aliases[(*POD, "spec", key)] = (*tpl_path, "spec", key)
    for theirs, ours in _TRAINER_CONTAINER.items():
        if theirs in trainer:
            # Trainer upserts trainer.env into the runtime's and merges resourcesPerNode onto its resources.
            merge = theirs in ("env", "resourcesPerNode") and container.get(ours) is not None
            container[ours] = api.strategic_merge(container[ours], trainer[theirs], ours) if merge else (
                copy.deepcopy(trainer[theirs]))  # fmt: skip
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
