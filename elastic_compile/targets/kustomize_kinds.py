"""What kustomize must be told about the custom kinds a target emits, as the target declares it.

kustomize knows Kubernetes' built-in kinds and nothing of a PyTorchJob or a TrainJob: which
of their lists merge by which key (``openapi.json``), which of their fields name another
object or hold an image (``kustomizeconfig.yaml``), where their pods carry labels. Each
target says this of its own kinds in :meth:`Target.kustomize
<elastic_compile.targets.Target.kustomize>`; :mod:`elastic_compile.compiler.kustomize`
writes the files from every target's answer and names no kind itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, NamedTuple

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


class CustomKind(NamedTuple):
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


#: A field of a custom kind, as kustomize's field specs name it: ``(group, kind, path)``,
#: the path's parts joined by "/" (``spec/runtimeRef/name``).
Field = tuple[str, str, str]


class Kustomize(NamedTuple):
    """What kustomize must know about a target's kinds (each part optional)."""

    #: The kinds whose lists merge by key (every base's ``openapi.json`` holds every target's).
    kinds: tuple[CustomKind, ...] = ()
    #: Where its pod templates name a ConfigMap volume (the bundled launcher's): kustomize
    #: renames the volume's reference with the ConfigMap.
    config_map_volumes: tuple[Field, ...] = ()
    #: Where the pods of its job carry their labels, for the NetworkPolicy's selector to follow.
    pod_labels: Field | None = None
    #: Comment lines for ``kustomization.yaml`` when a base holds its documents.
    header: str = ""
    #: Keep the base's resources in their order (a runtime before the job that references it).
    in_order: bool = False
    #: ``(group, kind, field)``: a field of its kinds that names an object of that group and
    #: kind, which kustomize renames with the object (namePrefix, nameSuffix).
    name_references: tuple[tuple[str, str, Field], ...] = ()
    #: Fields that hold an image, for an overlay's ``images:``.
    images: tuple[Field, ...] = ()
