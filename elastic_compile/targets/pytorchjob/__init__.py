"""Kubeflow training-operator v1 ``PyTorchJob`` (kubeflow.org/v1): Worker-only, elastic or fixed."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from elastic_compile.core.loader import Loaded
from elastic_compile.schema import ElasticSpec
from elastic_compile.targets import Document, Examined, Reader, Target, bundle, network
from elastic_compile.targets.accelerator import placement_problems
from elastic_compile.targets.checks import (
    DoctorRule,
    Finding,
    env_generation_problems,
    from_lines,
    identity_errors,
    raise_problems,
    schema_errors,
)
from elastic_compile.targets.pytorchjob.checks import pod_errors, webhook_errors
from elastic_compile.targets.worker import OPERATOR_LINTS, SERVICE_LINTS, spec_to_plan

if TYPE_CHECKING:
    from elastic_compile.targets.kustomize_kinds import Kustomize
    from elastic_compile.targets.readback.draft import Draft

API_VERSION = "kubeflow.org/v1"
KIND = "PyTorchJob"
#: The compact schema of the training-operator v1.9.4 CRD (elastic_compile/schema/compact/).
SCHEMA_FILE = "pytorchjobs.kubeflow.org.json"


class PyTorchJobTarget(Target):
    """A PyTorchJob for the Kubeflow training operator v1."""

    name = "pytorchjob"
    summary = "Kubeflow training-operator v1 PyTorchJob (kubeflow.org/v1)"
    order = 0
    generation = "v1"
    places_accelerator = True
    resources: ClassVar[Mapping[tuple[str, str], str]] = {
        (API_VERSION, KIND): "pytorchjobs",
        **bundle.RESOURCE,
        **network.RESOURCE,
    }
    spec_fields: ClassVar[Mapping[str, tuple[str, ...]]] = {
        "replicas": ("nnodes",),
        "minReplicas": ("nnodes",),
        "maxReplicas": ("nnodes",),
        "nProcPerNode": ("nproc_per_node",),
    }
    doctor_rules = (
        DoctorRule("DR001", "webhook", "the training operator's validating webhook rejects the job: kubectl apply "
                   "fails"),
        DoctorRule("DR003", "master-with-elastic", "Master + elasticPolicy: PET_NNODES leaves the Master out and the "
                   "rendezvous still points at worker-0 (kubeflow/trainer#2277)"),
        DoctorRule("DR004", "standalone", 'the operator renders standalone as PET_STANDALONE="", which torchrun '
                   "cannot parse"),
        DoctorRule("DR005", "empty-rdzv-conf", "the operator's env builder panics on an empty rdzvConf"),
        DoctorRule("DR006", "elastic-bounds", "Worker replicas outside [minReplicas, maxReplicas], or min above max"),
        DoctorRule("DR013", "no-rendezvous", "several Workers without Master or elasticPolicy have nowhere to meet"),
        DoctorRule("DR015", "backoff-uncounted", "backoffLimit counts in-place restarts only; with ExitCode or Never "
                   "it bounds nothing"),
        DoctorRule("DR016", "restart-policy-unset", "the operator defaults restartPolicy to OnFailure, not the Never "
                   "its CRD describes"),
        DoctorRule("DR020", "no-replicas", "pytorchReplicaSpecs without a replica: the operator has nothing to run"),
        DoctorRule("DR025", "rdzv-is-host", "is_host in the rdzvConf of several pods: every pod gets it, so all host "
                   "the store or none does"),
    )  # fmt: skip

    def in_all(self, spec: ElasticSpec) -> bool:
        # One job per spec in -t all: a spec meant for Trainer v2 gets its TrainJob instead.
        return spec.target != "trainjob"

    def documents(self, spec: ElasticSpec, loaded: Loaded | None) -> list[Document]:
        # The training operator v1 runs this pod and sets its own env in it.
        raise_problems(
            [*env_generation_problems(spec, "v1"), *network.network_problems(spec), *placement_problems(spec)], loaded
        )
        plan = spec_to_plan(spec)
        job = Document("pytorchjob.yaml.j2", "pytorchjob.yaml", API_VERSION, KIND, {"plan": plan})
        documents = [*bundle.documents(spec), job]
        if spec.network_policy:
            # It selects the pods by the label of ours the plan puts on them (targets/network.py says why).
            documents.append(network.network_policy_document(spec))
        return documents

    def check(self, doc: dict[str, Any], document: Document, spec: ElasticSpec) -> list[str]:
        if document.kind == bundle.KIND:
            return bundle.check(doc, spec)
        if document.kind == network.KIND:
            return network.network_policy_errors(doc, spec)
        return [
            *identity_errors(doc, API_VERSION, KIND, spec.name),
            *schema_errors(doc, SCHEMA_FILE, API_VERSION, KIND),
            *webhook_errors(doc),
            *pod_errors(doc),
        ]

    def lint_codes(self, chosen: Collection[Target]) -> frozenset[str]:
        return OPERATOR_LINTS | SERVICE_LINTS

    def readers(self) -> tuple[Reader, ...]:
        return (Reader(API_VERSION, KIND, _read),)

    def examined(self) -> tuple[Examined, ...]:
        return (Examined(API_VERSION, KIND, SCHEMA_FILE, _traps, _pod_values),)

    def kustomize(self) -> Kustomize:
        from elastic_compile.targets.kustomize_kinds import POD_TEMPLATE_SPEC, CustomKind, Kustomize, map_of, obj, ref

        group = API_VERSION.partition("/")[0]
        replicas = "spec/pytorchReplicaSpecs"
        return Kustomize(
            # The replica specs are a map (Master, Worker) of Kubernetes' own pod templates.
            kinds=(
                CustomKind(group, "v1", KIND, obj(pytorchReplicaSpecs=map_of(obj(template=ref(POD_TEMPLATE_SPEC))))),
            ),
            config_map_volumes=tuple(
                (group, KIND, f"{replicas}/{r}/template/spec/volumes/configMap/name") for r in ("Worker", "Master")
            ),
            pod_labels=(group, KIND, f"{replicas}/Worker/template/metadata/labels"),
        )


def _read(loaded: Loaded, stream: Sequence[Loaded], entrypoint: Sequence[str] | None) -> Draft:
    from elastic_compile.targets.pytorchjob.readback import pytorchjob_to_spec

    return pytorchjob_to_spec(loaded, entrypoint)


def _traps(job: Mapping[str, Any], stream: Sequence[Loaded]) -> list[Finding]:
    from elastic_compile.targets.pytorchjob.traps import findings

    return findings(job)


def _pod_values(job: Mapping[str, Any], stream: Sequence[Loaded]) -> list[Finding]:
    return from_lines("pod-value", pod_errors(job))


TARGET = PyTorchJobTarget()
