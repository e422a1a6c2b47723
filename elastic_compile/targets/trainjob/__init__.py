"""Kubeflow Trainer v2.3 ``TrainJob`` (trainer.kubeflow.org/v1alpha1), and a ``TrainingRuntime`` of ours when needed.

:mod:`.plan` decides where each setting goes (trainer, runtimePatches, our runtime) and
which ones v2 cannot carry; :mod:`.checks` re-implements Trainer's webhooks; :mod:`.api`
holds the upstream facts both rely on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from elastic_compile.core.loader import Loaded
from elastic_compile.schema import ElasticSpec
from elastic_compile.targets import Document, Examined, Reader, Target, bundle, network
from elastic_compile.targets.checks import DoctorRule, Finding, identity_errors, raise_problems, schema_errors
from elastic_compile.targets.trainjob import api

if TYPE_CHECKING:
    from elastic_compile.targets.kustomize_kinds import Kustomize
    from elastic_compile.targets.readback.draft import Draft
    from elastic_compile.targets.trainjob.plan import TrainJobPlan

#: The compact schemas of the Trainer v2.3.0 CRDs (elastic_compile/schema/compact/).
SCHEMA_FILES = {
    api.TRAINJOB: "trainjobs.trainer.kubeflow.org.json",
    api.TRAINING_RUNTIME: "trainingruntimes.trainer.kubeflow.org.json",
    api.CLUSTER_TRAINING_RUNTIME: "clustertrainingruntimes.trainer.kubeflow.org.json",
}


# kustomization.yaml's lines for a base with a TrainJob: what openapi.json also merges, and why
# the two extra fields.
_KUSTOMIZE_HEADER = """\
# For the TrainJob it also merges runtimePatches by manager and replicatedJobs by name.
# sortOptions fifo keeps our TrainingRuntime before the TrainJob that references it (kustomize
# would sort TrainJob first, and Trainer refuses a TrainJob whose runtime does not exist yet;
# set it in your overlays too). kustomizeconfig.yaml makes runtimeRef.name follow the runtime's
# name through namePrefix and nameSuffix, and an overlay's images: reach spec.trainer.image.
"""


class TrainJobTarget(Target):
    """A TrainJob for Kubeflow Trainer v2.3, preceded by our TrainingRuntime when the spec needs one.

    Its plan and checks are imported when it is asked for: every command lists the targets
    (``-t``, ``--help``).
    """

    name = "trainjob"
    summary = "Kubeflow Trainer v2.3 TrainJob (trainer.kubeflow.org/v1alpha1), with a TrainingRuntime when needed"
    order = 5
    generation = "v2"
    places_accelerator = True
    resources: ClassVar[Mapping[tuple[str, str], str]] = {
        (api.API_VERSION, api.TRAINJOB): "trainjobs",
        (api.API_VERSION, api.TRAINING_RUNTIME): "trainingruntimes",
        **bundle.RESOURCE,
        **network.RESOURCE,
    }
    unused_settings: ClassVar[Mapping[str, str]] = {
        "restart_policy": "not in a TrainJob: the runtime's Jobs restart a failed pod (OnFailure) or not (Never); "
        "ExitCode is a training-operator v1 policy",
        "run_policy.clean_pod_policy": "not in a TrainJob: finished pods stay until the TrainJob is deleted",
        "run_policy.ttl_seconds_after_finished": "not in a TrainJob: Trainer v2.3 has no TTL; the TrainJob stays "
        "until deleted",
        "run_policy.managed_by": "not in a TrainJob: runPolicy.managedBy is the PyTorchJob's",
        "run_policy.scheduling": "not in a TrainJob: it has no schedulingPolicy; Trainer's gang scheduling comes "
        "from the runtime's podGroupPolicy",
    }
    spec_fields: ClassVar[Mapping[str, tuple[str, ...]]] = {
        "resourcesPerNode": ("resources",),
        "numNodes": ("nnodes",),
        "numProcPerNode": ("nproc_per_node",),
        "runtimeRef": ("trainjob", "runtime"),
    }
    doctor_rules = (
        DoctorRule("DR021", "trainer-webhook", "Trainer v2's webhooks or CEL rules reject the TrainJob"),
        DoctorRule("DR022", "runtime-webhook", "Trainer v2's runtime webhook rejects the runtime, or the SDK skips it"),
        DoctorRule("DR023", "no-launcher", "Trainer's runtime starts no launcher: the command runs once per pod, "
                   "without MASTER_ADDR, RANK or WORLD_SIZE"),
        DoctorRule("DR024", "jobset-ttl", "a JobSet TTL makes Trainer v2.3 rerun a failed job without end"),
        DoctorRule("DR031", "min-above-nodes", "the launcher's minimum node count is above numNodes: the rendezvous "
                   "never fills, or elastic-launch refuses it, and the pods fail until backoffLimit"),
        DoctorRule("DR032", "elastic-stock-runtime", "an elastic range in the launcher on a runtime without the node "
                   "Job's successPolicy (Trainer's stock one): the job never completes below its maximum"),
    )  # fmt: skip

    def default_settings(self, spec: ElasticSpec) -> Mapping[str, tuple[Any, str]]:
        settings: dict[str, tuple[Any, str]] = {}
        if spec.rdzv.host is None:
            # The PyTorchJob's wording (<name>-worker-0) never applies here: Trainer's torch plugin
            # sets PET_MASTER_ADDR, which the launcher's --rdzv-at-master reads.
            settings["rdzv.host"] = (
                None,
                "unset: Trainer's torch plugin sets PET_MASTER_ADDR to <name>-node-0-0.<name>, node 0 of the JobSet, "
                "which hosts the c10d store (etcd is refused under -t trainjob)",
            )
        if spec.run_policy.backoff_limit is not None:
            return settings
        from elastic_compile.targets.trainjob.plan import runtime_reference

        ref, ours = runtime_reference(spec)
        default = api.JOB_BACKOFF_LIMIT_DEFAULT
        if not ours and not api.is_stock(ref):
            why = (f"not set: the node Job of the runtime {ref['name']} decides (Kubernetes' default {default} when it "
                   "sets none)")  # fmt: skip
            settings["run_policy.backoff_limit"] = (None, why)
            return settings
        runtime = "our TrainingRuntime" if ours else f"the stock {api.STOCK_RUNTIME}"
        why = (
            f"not set: {runtime} writes no backoffLimit on the node Job, so it gets Kubernetes' default {default}: "
            f"{default} failed pods or container restarts (restartPolicy OnFailure) fail the Job, and with it the "
            "JobSet and the TrainJob"
        )
        settings["run_policy.backoff_limit"] = (default, why)
        return settings

    def in_all(self, spec: ElasticSpec) -> bool:
        # A PyTorchJob and a TrainJob of one spec would train twice on one cluster: -t all
        # gives the job of the generation the spec names (target), never both.
        return spec.target == self.name

    def documents(self, spec: ElasticSpec, loaded: Loaded | None) -> list[Document]:
        from elastic_compile.targets.accelerator import placement_problems
        from elastic_compile.targets.trainjob.plan import spec_to_trainjob_plan, trainjob_problems

        raise_problems([*trainjob_problems(spec), *network.network_problems(spec), *placement_problems(spec)], loaded)
        plan = spec_to_trainjob_plan(spec)
        docs = [Document("trainjob.yaml.j2", "trainjob.yaml", api.API_VERSION, api.TRAINJOB, {"plan": plan})]
        if plan.runtime is not None:
            # First: the TrainJob webhook refuses a TrainJob whose runtime does not exist yet.
            runtime = Document(
                "trainingruntime.yaml.j2", "trainingruntime.yaml", api.API_VERSION, api.TRAINING_RUNTIME, {"plan": plan}
            )
            docs.insert(0, runtime)
        if spec.network_policy:
            # It selects the pods by the label of ours the patch puts on them (targets/network.py says why).
            docs.append(network.network_policy_document(spec))
        return [*bundle.documents(spec), *docs]

    def check(self, doc: dict[str, Any], document: Document, spec: ElasticSpec) -> list[str]:
        from elastic_compile.targets.trainjob.checks import runtime_errors, trainjob_errors

        if document.kind == bundle.KIND:
            return bundle.check(doc, spec)
        if document.kind == network.KIND:
            return network.network_policy_errors(doc, spec)
        plan: TrainJobPlan = document.context["plan"]
        if document.kind == api.TRAINING_RUNTIME:
            return [
                *identity_errors(doc, api.API_VERSION, api.TRAINING_RUNTIME, spec.name),
                *schema_errors(doc, SCHEMA_FILES[api.TRAINING_RUNTIME], api.API_VERSION, api.TRAINING_RUNTIME),
                *runtime_errors(doc),
            ]
        return [
            *identity_errors(doc, api.API_VERSION, api.TRAINJOB, spec.name),
            *schema_errors(doc, SCHEMA_FILES[api.TRAINJOB], api.API_VERSION, api.TRAINJOB),
            *trainjob_errors(doc, plan.runtime_jobs()),
        ]

    def admission_needs(self, doc: Mapping[str, Any]) -> tuple[str, str, str] | None:
        # Trainer's webhook looks the runtime up: a TrainJob whose TrainingRuntime does not exist
        # yet is refused, in a dry run too.
        if (doc.get("apiVersion"), doc.get("kind")) != (api.API_VERSION, api.TRAINJOB):
            return None
        ref = (doc.get("spec") or {}).get("runtimeRef") or {}
        if ref.get("kind") != api.TRAINING_RUNTIME or not ref.get("name"):
            return None
        return api.API_VERSION, api.TRAINING_RUNTIME, str(ref["name"])

    def readers(self) -> tuple[Reader, ...]:
        # Its runtime may be in the stream beside it: read with the TrainJob.
        runtimes = ((api.API_VERSION, api.TRAINING_RUNTIME), (api.API_VERSION, api.CLUSTER_TRAINING_RUNTIME))
        return (Reader(api.API_VERSION, api.TRAINJOB, _read, runtimes),)

    def examined(self) -> tuple[Examined, ...]:
        job = Examined(api.API_VERSION, api.TRAINJOB, SCHEMA_FILES[api.TRAINJOB], _traps, _pod_values)
        runtimes = tuple(
            Examined(api.API_VERSION, kind, SCHEMA_FILES[kind], _runtime_traps, _pod_values, job=False)
            for kind in (api.TRAINING_RUNTIME, api.CLUSTER_TRAINING_RUNTIME)
        )
        return (job, *runtimes)

    def explain(self, document: Document, spec: ElasticSpec) -> list[str] | None:
        if document.kind != api.TRAINJOB:
            return None
        from elastic_compile.targets.trainjob.plan import explain_layout

        return explain_layout(document.context["plan"], spec.launcher)

    def kustomize(self) -> Kustomize:
        from elastic_compile.targets.kustomize_kinds import (
            JOB_TEMPLATE_SPEC,
            CustomKind,
            Kustomize,
            merged_list,
            obj,
            ref,
        )

        group, version = api.GROUP, api.API_VERSION.partition("/")[2]
        # The CRDs' own list-map keys: runtimePatches by manager, replicatedJobs by name,
        # trainer.env by name; each replicated job's template is Kubernetes' JobTemplateSpec.
        jobset = obj(spec=obj(replicatedJobs=merged_list("name", obj(template=ref(JOB_TEMPLATE_SPEC)))))
        runtime_spec = obj(template=jobset)
        trainjob = obj(
            trainer=obj(env=merged_list("name", {"type": "object"})),
            runtimePatches=merged_list("manager", obj(trainingRuntimeSpec=runtime_spec)),
        )
        pod = "template/spec/replicatedJobs/template/spec/template"
        return Kustomize(
            kinds=(
                CustomKind(group, version, api.TRAINJOB, trainjob),
                CustomKind(group, version, api.TRAINING_RUNTIME, runtime_spec),
                CustomKind(group, version, api.CLUSTER_TRAINING_RUNTIME, runtime_spec),
            ),
            config_map_volumes=(
                (group, api.TRAINJOB, f"spec/runtimePatches/trainingRuntimeSpec/{pod}/spec/volumes/configMap/name"),
                (group, api.TRAINING_RUNTIME, f"spec/{pod}/spec/volumes/configMap/name"),
            ),
            pod_labels=(group, api.TRAINJOB, f"spec/runtimePatches/trainingRuntimeSpec/{pod}/metadata/labels"),
            header=_KUSTOMIZE_HEADER,
            # Trainer refuses a TrainJob whose runtime does not exist yet; kustomize would sort TrainJob first.
            in_order=True,
            name_references=tuple(
                (group, kind, (group, api.TRAINJOB, "spec/runtimeRef/name"))
                for kind in (api.TRAINING_RUNTIME, api.CLUSTER_TRAINING_RUNTIME)
            ),
            # Trainer gives container node the trainer's image, and kustomize's images transformer
            # looks only in containers lists: without this an overlay's pin misses the job.
            images=((group, api.TRAINJOB, "spec/trainer/image"),),
        )


def _read(loaded: Loaded, stream: Sequence[Loaded], entrypoint: Sequence[str] | None) -> Draft:
    from elastic_compile.targets.trainjob.readback import trainjob_to_spec

    return trainjob_to_spec(loaded, stream, entrypoint)


def _traps(job: Mapping[str, Any], stream: Sequence[Loaded]) -> list[Finding]:
    from elastic_compile.targets.trainjob.traps import findings

    return findings(job, stream)


def _runtime_traps(runtime: Mapping[str, Any], stream: Sequence[Loaded]) -> list[Finding]:
    from elastic_compile.targets.trainjob.checks import runtime_findings

    return runtime_findings(runtime)


def _pod_values(doc: Mapping[str, Any], stream: Sequence[Loaded]) -> list[Finding]:
    from elastic_compile.targets.checks import from_lines
    from elastic_compile.targets.trainjob.checks import pod_errors

    return from_lines("pod-value", pod_errors(doc))


TARGET = TrainJobTarget()
