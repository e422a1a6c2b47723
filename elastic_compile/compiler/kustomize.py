"""The kustomize base that ``-o DIR`` writes: ``kustomization.yaml`` and ``openapi.json``.

Why ``openapi.json`` exists: kustomize merges a strategic-merge patch into a list by a
key only when its OpenAPI schema names that key. It knows Kubernetes' built-in kinds but
not the PyTorchJob CRD, so a patch that touches
``spec.pytorchReplicaSpecs.Worker.template.spec.containers`` silently *replaces* the whole
list: sidecars vanish and the ``pytorch`` container loses its command, args, env and
mounts (https://kubectl.docs.kubernetes.io/references/kustomize/kustomization/openapi/;
``tests/kustomize/test_kustomize_overlays.py`` shows it).

The kustomization's ``openapi: {path: openapi.json}`` fixes that, but the file then
*replaces* kustomize's built-in schema for every kind in the whole build, the overlay's
own Deployments and Services included. So the file is self-contained: Kubernetes' own
merge keys for every built-in kind (``schema/compact/k8s-merge-keys.json``, generated
from Kubernetes 1.25 and pruned to the paths that lead to a merged list: 40 KB), plus our
custom resources, whose pod templates refer to the same ``PodTemplateSpec``. Measured
with the real ``kubectl kustomize`` (``tests/kustomize/test_kustomize_builtin_kinds.py``):
every built-in kind, patched on every list the file names, builds exactly as it does
without our base. The alternatives measured: kustomize's ``crds:`` field keeps built-in
kinds intact but gives custom resources no merge keys (it only feeds name references);
a minimal file with only our kinds breaks every other kind; the full built-in definitions
work too but weigh 1.1 MB per base.

What kustomize v5.8.1 (in kubectl 1.37) needs, found by experiment:

- ``definitions`` with ``x-kubernetes-group-version-kind`` on each top-level kind; without
  it the kind falls back to no schema. ``swagger``, ``info``, ``paths`` and ``type`` are not
  read; we keep them so the file is an ordinary Swagger 2.0 document.
- ``$ref`` must be ``#/definitions/<name>`` inside this file. Any other form does not
  resolve and silently disables merging below it.
- Both ``x-kubernetes-patch-merge-key`` and ``x-kubernetes-patch-strategy: merge`` on the
  list, and one ``type`` (``["array", "null"]`` hides the items).
- ``additionalProperties`` is followed, so ``pytorchReplicaSpecs`` is typed as the map it
  is in the CRD and covers Master and Worker alike.

To make another custom resource merge (a TrainJob, a TrainingRuntime), add a
:class:`CustomKind` to :data:`CUSTOM_KINDS` whose fields lead to the built-in definitions
(``PodTemplateSpec``, ``JobTemplateSpec``, ``ObjectMeta``) by :func:`ref`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, Final

from elastic_compile.core.emit import to_yaml
from elastic_compile.schema import compact

KUSTOMIZATION_FILE: Final = "kustomization.yaml"
OPENAPI_FILE: Final = "openapi.json"
CONFIG_FILE: Final = "kustomizeconfig.yaml"

POD_TEMPLATE_SPEC: Final = "io.k8s.api.core.v1.PodTemplateSpec"
JOB_TEMPLATE_SPEC: Final = "io.k8s.api.batch.v1.JobTemplateSpec"
OBJECT_META: Final = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"


def ref(name: str) -> dict[str, str]:
    """A reference to the definition ``name`` (the only form kustomize resolves)."""
    return {"$ref": f"#/definitions/{name}"}


def obj(**properties: Any) -> dict[str, Any]:
    """An object schema with ``properties``."""
    return {"type": "object", "properties": properties}


def map_of(values: Mapping[str, Any]) -> dict[str, Any]:
    """A map schema whose every value is ``values`` (``pytorchReplicaSpecs``: Master, Worker)."""
    return {"type": "object", "additionalProperties": dict(values)}


def merged_list(key: str, items: Mapping[str, Any]) -> dict[str, Any]:
    """A list merged by ``key`` (both extensions are needed: the key alone still replaces)."""
    return {
        "type": "array",
        "items": dict(items),
        "x-kubernetes-patch-merge-key": key,
        "x-kubernetes-patch-strategy": "merge",
    }


@dataclass(frozen=True)
class CustomKind:
    """A custom resource kustomize must merge: its ``spec`` schema, down to the built-in definitions."""

    group: str
    version: str
    kind: str
    spec: Mapping[str, Any]

    def definitions(self) -> dict[str, Any]:
        """Its definitions, named like Kubernetes' own (reverse-DNS group, version, kind)."""
        prefix = ".".join(reversed(self.group.split("."))) + f".{self.version}."
        return {
            prefix + self.kind: {
                **obj(metadata=ref(OBJECT_META), spec=ref(prefix + self.kind + "Spec")),
                "x-kubernetes-group-version-kind": [{"group": self.group, "kind": self.kind, "version": self.version}],
            },
            prefix + self.kind + "Spec": dict(self.spec),
        }


def _trainer_kinds() -> tuple[CustomKind, ...]:
    """Kubeflow Trainer v2.3: TrainJob and (Cluster)TrainingRuntime, down to the Jobs' templates.

    The keys are the CRDs' own list-map keys: runtimePatches by manager, replicatedJobs by
    name, trainer.env by name; each replicated job's template is Kubernetes' JobTemplateSpec.
    """
    jobset = obj(spec=obj(replicatedJobs=merged_list("name", obj(template=ref(JOB_TEMPLATE_SPEC)))))
    runtime_spec = obj(template=jobset)
    trainjob = obj(
        trainer=obj(env=merged_list("name", {"type": "object"})),
        runtimePatches=merged_list("manager", obj(trainingRuntimeSpec=runtime_spec)),
    )
    group, version = "trainer.kubeflow.org", "v1alpha1"
    return (
        CustomKind(group, version, "TrainJob", trainjob),
        CustomKind(group, version, "TrainingRuntime", runtime_spec),
        CustomKind(group, version, "ClusterTrainingRuntime", runtime_spec),
    )


#: The custom resources elastic-compile emits. Their pod templates are Kubernetes'
#: PodTemplateSpec, so a patch merges containers, env, volumes and mounts exactly as it does
#: in a Deployment of the same build.
CUSTOM_KINDS: tuple[CustomKind, ...] = (
    CustomKind(
        "kubeflow.org",
        "v1",
        "PyTorchJob",
        obj(pytorchReplicaSpecs=map_of(obj(template=ref(POD_TEMPLATE_SPEC)))),
    ),
    *_trainer_kinds(),
)


def builtin_definitions() -> dict[str, Any]:
    """Kubernetes' merge keys for every built-in kind (``schema/compact/k8s-merge-keys.json``)."""
    return compact.merge_keys()


def openapi_schema(custom: Sequence[CustomKind] = CUSTOM_KINDS) -> dict[str, Any]:
    """The OpenAPI (Swagger 2.0) document kustomize reads through ``openapi: {path: ...}``."""
    definitions = dict(builtin_definitions())
    for kind in custom:
        definitions.update(kind.definitions())
    return {
        "swagger": "2.0",
        "info": {
            "title": "elastic-compile merge keys for kustomize",
            "description": (
                "Generated by elastic-compile. Kubernetes' strategic-merge keys for the built-in kinds and for "
                "PyTorchJob, TrainJob and TrainingRuntime, so that patches merge containers, env, volumes, "
                "runtimePatches and replicatedJobs instead of replacing them. It replaces kustomize's built-in "
                "schema for the whole build, so it covers every kind."
            ),
            # The document's own version, not the package's: a release must not make every
            # committed base stale for --check.
            "version": "v1",
        },
        "paths": {},
        "definitions": dict(sorted(definitions.items())),
    }


@cache  # the same bytes in every base: a batch builds them once
def openapi_text() -> str:
    """``openapi.json``: one definition per line, sorted, so the bytes never vary and diffs stay short."""
    schema = openapi_schema()
    head = {k: v for k, v in schema.items() if k != "definitions"}
    lines = [f"  {json.dumps(k)}: {json.dumps(v, sort_keys=True, separators=(',', ':'))}" for k, v in head.items()]
    defs = [
        f"    {json.dumps(name)}: {json.dumps(d, sort_keys=True, separators=(',', ':'), ensure_ascii=True)}"
        for name, d in schema["definitions"].items()
    ]
    return "{\n" + ",\n".join([*lines, '  "definitions": {\n' + ",\n".join(defs) + "\n  }"]) + "\n}\n"


# kustomize keeps comments out of its output, so this header is only for whoever opens
# the base: it tells them why openapi.json must stay.
_KUSTOMIZATION_HEADER = f"""\
# Generated by elastic-compile: change the spec and recompile, or layer an overlay on top.
# {OPENAPI_FILE} gives kustomize the merge keys of PyTorchJob lists (containers, env and
# volumes by name, volumeMounts by mountPath, ports by containerPort) and of every built-in
# kind, which it replaces for the whole build. Without it a strategic-merge patch replaces
# a PyTorchJob's whole containers list, dropping sidecars.
"""


# With a TrainJob in the base: what openapi.json also merges, and why the two extra fields.
_TRAINER_HEADER = f"""\
# For the TrainJob it also merges runtimePatches by manager and replicatedJobs by name.
# sortOptions fifo keeps our TrainingRuntime before the TrainJob that references it (kustomize
# would sort TrainJob first, and Trainer refuses a TrainJob whose runtime does not exist yet;
# set it in your overlays too). {CONFIG_FILE} makes runtimeRef.name follow the runtime's
# name through namePrefix and nameSuffix, and an overlay's images: reach spec.trainer.image.
"""


# With the bundled launcher's ConfigMap in the base (launcher: bundled).
_LAUNCHER_HEADER = f"""\
# {CONFIG_FILE} makes the pods' volume of the launcher's ConfigMap follow its name through
# namePrefix and nameSuffix (kustomize knows that reference in built-in kinds only).
"""

#: Where a pod template of each kind we emit names a ConfigMap volume (kustomize's own
#: nameReference covers the built-in kinds, the PodTemplate among them, not custom resources).
_CONFIGMAP_VOLUME_PATHS: Final = (
    ("kubeflow.org", "PyTorchJob", "spec/pytorchReplicaSpecs/Worker/template/spec/volumes/configMap/name"),
    ("kubeflow.org", "PyTorchJob", "spec/pytorchReplicaSpecs/Master/template/spec/volumes/configMap/name"),
    (
        "trainer.kubeflow.org",
        "TrainJob",
        "spec/runtimePatches/trainingRuntimeSpec/template/spec/replicatedJobs/template/spec/template/spec/volumes/"
        "configMap/name",
    ),
    (
        "trainer.kubeflow.org",
        "TrainingRuntime",
        "spec/template/spec/replicatedJobs/template/spec/template/spec/volumes/configMap/name",
    ),
)


def kustomization(
    resources: Sequence[str], *, trainer: bool = False, launcher: bool = False, network: str | None = None
) -> dict[str, Any]:
    """The Kustomization listing ``resources`` and pointing kustomize at ``openapi.json``.

    ``trainer``: the base holds a TrainJob, so resources keep their order (our
    TrainingRuntime first) and :data:`CONFIG_FILE` teaches kustomize the runtimeRef.
    ``launcher``: the base holds the bundled launcher's ConfigMap, whose references
    :data:`CONFIG_FILE` teaches kustomize too. ``network``: the kind of the job a NetworkPolicy
    of the base selects, whose name :data:`CONFIG_FILE` makes its selector follow.
    """
    out: dict[str, Any] = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": list(resources),
        "openapi": {"path": OPENAPI_FILE},
    }
    if trainer:
        out["sortOptions"] = {"order": "fifo"}
    if trainer or launcher or network:
        out["configurations"] = [CONFIG_FILE]
    return out


def kustomization_text(
    resources: Sequence[str], *, trainer: bool = False, launcher: bool = False, network: str | None = None
) -> str:
    """``kustomization.yaml``: a comment header, then the canonical YAML of :func:`kustomization`."""
    header = _KUSTOMIZATION_HEADER + (_TRAINER_HEADER if trainer else "") + (_LAUNCHER_HEADER if launcher else "")
    header += _NETWORK_HEADER if network else ""
    return header + to_yaml([kustomization(resources, trainer=trainer, launcher=launcher, network=network)])


def _escaped(key: str) -> str:
    """A map key in a kustomize field path: its slashes escaped (kustomize's PathSplitter)."""
    return key.replace("/", "\\/")


#: Where each job kind's pods carry the NetworkPolicy's label (targets/network.POD_LABEL): the
#: PyTorchJob's Worker template and the TrainJob's runtime patch.
_POD_LABEL_PATHS: Final = {
    "PyTorchJob": ("kubeflow.org", "spec/pytorchReplicaSpecs/Worker/template/metadata/labels"),
    "TrainJob": (
        "trainer.kubeflow.org",
        "spec/runtimePatches/trainingRuntimeSpec/template/spec/replicatedJobs/template/spec/template/metadata/labels",
    ),
}


def _network_references(kind: str) -> dict[str, Any]:
    """The NetworkPolicy's selector and the pods' label both name the job: renamed with it."""
    from elastic_compile.targets.network import POD_LABEL

    group, labels = _POD_LABEL_PATHS[kind]
    key = _escaped(POD_LABEL)
    policy = [
        {"kind": "NetworkPolicy", "group": "networking.k8s.io", "path": f"{path}/{key}"}
        for path in ("spec/podSelector/matchLabels", "spec/ingress/from/podSelector/matchLabels")
    ]
    return {
        "kind": kind,
        "group": group,
        "fieldSpecs": [*policy, {"kind": kind, "group": group, "path": f"{labels}/{key}"}],
    }


# With a NetworkPolicy in the base.
_NETWORK_HEADER = f"""\
# {CONFIG_FILE} makes the NetworkPolicy's selector and the pods' label it selects follow the job's
# name through namePrefix and nameSuffix (kustomize renames names, not label values), and puts
# commonLabels on the job's pods as it does on the policy's selectors.
"""


def config_text(*, trainer: bool = False, launcher: bool = False, network: str | None = None) -> str:
    """``kustomizeconfig.yaml``: what kustomize cannot know about our custom resources.

    ``trainer``: runtimeRef.name of a TrainJob names a (Cluster)TrainingRuntime, and
    spec.trainer.image is an image: kustomize's images transformer looks only in
    ``containers`` and ``initContainers`` lists, and Trainer gives container ``node`` the
    trainer's image, so without this an overlay's ``images:`` pin would change only our
    runtime's placeholder, not the job.
    ``launcher``: a ConfigMap volume of a PyTorchJob, TrainJob or TrainingRuntime names a ConfigMap.
    ``network``: the job kind whose name the NetworkPolicy's selector and its pods' label carry.
    """
    group = "trainer.kubeflow.org"
    config: dict[str, Any] = {"nameReference": []}
    if trainer:
        config["nameReference"] += [
            {
                "kind": kind,
                "group": group,
                "fieldSpecs": [{"kind": "TrainJob", "group": group, "path": "spec/runtimeRef/name"}],
            }
            for kind in ("TrainingRuntime", "ClusterTrainingRuntime")
        ]
        config["images"] = [{"kind": "TrainJob", "group": group, "path": "spec/trainer/image"}]
    if launcher:
        specs = [{"kind": kind, "group": g, "path": path} for g, kind, path in _CONFIGMAP_VOLUME_PATHS]
        config["nameReference"].append({"kind": "ConfigMap", "version": "v1", "fieldSpecs": specs})
    if network:
        config["nameReference"].append(_network_references(network))
        # commonLabels (and labels: with includeSelectors or includeTemplates) add a label to the
        # policy's selectors, which kustomize knows, and to pod templates it knows, which ours are
        # not: the policy would then require a label no pod has. These put it on the pods too.
        group, labels = _POD_LABEL_PATHS[network]
        pods = [{"path": labels, "create": True, "kind": network, "group": group}]
        config["commonLabels"] = pods
        config["templateLabels"] = pods
    return to_yaml([config])
