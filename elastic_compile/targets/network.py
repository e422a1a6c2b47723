"""The NetworkPolicy that closes a job's pods to everything but themselves (``network_policy: true``).

The c10d rendezvous store listens on one pod's IP and loads pickles from whoever connects;
NCCL and gloo open ports of their own. Without a policy every pod in the cluster can reach
them. The policy selects the job's pods and admits ingress only from them, in the same
namespace, on any port (NCCL and gloo pick theirs at random). Egress is left alone: pods
still pull data and reach the API server.

The pods are selected by a label of ours, :data:`POD_LABEL` ``: <name>``, which the compiler
puts in every pod's template, rather than by the engine's job-name label
(``training.kubeflow.org/job-name``, ``jobset.sigs.k8s.io/jobset-name``). A kustomize
``namePrefix`` or ``nameSuffix`` renames the job and so the engine's label value, but not
label values in a policy: a policy on the engine's label would then select no pod, leaving
the store open (or, in a default-deny namespace, blocking the job's own traffic). Our label
keeps the policy and the pods together through any rename; in ``-o`` bases
``kustomizeconfig.yaml`` (:func:`elastic_compile.compiler.kustomize.config_text`) also tells
kustomize that the label's value names the job, so an overlay renames it in the pods and the
policy alike, and two overlays of one base in one namespace stay apart.
"""

from __future__ import annotations

from typing import Any

from elastic_compile.schema import ElasticSpec
from elastic_compile.targets import Document

API_VERSION = "networking.k8s.io/v1"
#: The pods' label the policy selects (the job's name); the compiler owns it in pod_template.
POD_LABEL = "elastic-compile.dev/job-name"
KIND = "NetworkPolicy"
#: Its resource on the API server (:attr:`Target.resources <elastic_compile.targets.Target.resources>`).
RESOURCE = {(API_VERSION, KIND): "networkpolicies"}
TEMPLATE = "networkpolicy.yaml.j2"
FILENAME = "networkpolicy.yaml"


def pod_labels(spec: ElasticSpec) -> dict[str, str]:
    """The labels the compiler adds to every pod of the job for its policy (none without one)."""
    return {POD_LABEL: spec.name} if spec.network_policy else {}


def network_problems(spec: ElasticSpec) -> list[tuple[tuple[str | int, ...], str]]:
    """The label of ours written by hand in pod_template: the policy's selection is the compiler's."""
    if POD_LABEL in spec.pod_template.metadata.labels:
        return [
            (
                ("pod_template", "metadata", "labels", POD_LABEL, "[key]"),
                "set by the compiler on every pod for network_policy (the policy selects it); leave it out",
            )
        ]
    return []


def network_policy(spec: ElasticSpec, job_label: str = POD_LABEL) -> dict[str, Any]:
    """The policy's object: pods labelled ``job_label: <name>`` (:data:`POD_LABEL`) admit ingress only from
    each other."""
    metadata: dict[str, Any] = {"name": spec.name}
    if spec.namespace is not None:
        metadata["namespace"] = spec.namespace
    if spec.labels:
        metadata["labels"] = dict(spec.labels)
    same_job = {"matchLabels": {job_label: spec.name}}
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": metadata,
        "spec": {
            "podSelector": same_job,
            "policyTypes": ["Ingress"],
            # A podSelector alone means "pods of this namespace"; no ports: every port.
            "ingress": [{"from": [{"podSelector": same_job}]}],
        },
    }


def network_policy_document(spec: ElasticSpec) -> Document:
    """The document a target adds to its output when ``spec.network_policy`` is set."""
    return Document(TEMPLATE, FILENAME, API_VERSION, KIND, {"policy": network_policy(spec)})


def network_policy_errors(doc: dict[str, Any], spec: ElasticSpec) -> list[str]:
    """What is wrong with a rendered policy: it must select the job's pods and admit only them."""
    if doc != network_policy(spec):
        # A custom template may not widen who reaches the store: the policy is ours to decide.
        return ["the NetworkPolicy must be the compiler's (select the job's pods, admit ingress only from them)"]
    return []
