"""Kubeflow training-operator v1 ``PyTorchJob`` (kubeflow.org/v1): Worker-only, elastic or fixed."""

from __future__ import annotations

from typing import Any

from elastic_compile.core.loader import Loaded
from elastic_compile.schema import ElasticSpec
from elastic_compile.targets import Document, Target, bundle, network
from elastic_compile.targets.accelerator import placement_problems
from elastic_compile.targets.checks import env_generation_problems, identity_errors, raise_problems, schema_errors
from elastic_compile.targets.pytorchjob.checks import pod_errors, webhook_errors
from elastic_compile.targets.pytorchjob.plan import spec_to_plan

API_VERSION = "kubeflow.org/v1"
KIND = "PyTorchJob"
#: The compact schema of the training-operator v1.9.4 CRD (elastic_compile/schema/compact/).
SCHEMA_FILE = "pytorchjobs.kubeflow.org.json"


class PyTorchJobTarget(Target):
    """A PyTorchJob for the Kubeflow training operator v1."""

    name = "pytorchjob"
    summary = "Kubeflow training-operator v1 PyTorchJob (kubeflow.org/v1)"
    order = 0

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


TARGET = PyTorchJobTarget()
