"""The NetworkPolicy that closes a job's pods to everything but themselves (``network_policy: true``).

The c10d rendezvous store listens on worker-0's pod IP and loads pickles from whoever
connects; NCCL and gloo open ports of their own. Without a policy every pod in the cluster
can reach them. The policy selects the job's pods by a label the engine puts on every pod
of the job and admits ingress only from pods with the same label, in the same namespace,
on any port (NCCL and gloo pick theirs at random). Egress is left alone: pods still pull
data and reach the API server.

Each target that runs pods names its own label (the PyTorchJob operator's
``training.kubeflow.org/job-name``; for a TrainJob, JobSet's ``jobset.sigs.k8s.io/jobset-name``,
the JobSet being named after the TrainJob) and renders ``networkpolicy.yaml.j2`` with
:func:`network_policy_document`.
"""

from __future__ import annotations

from typing import Any

from elastic_compile.schema import ElasticSpec
from elastic_compile.targets import Document

API_VERSION = "networking.k8s.io/v1"
KIND = "NetworkPolicy"
TEMPLATE = "networkpolicy.yaml.j2"
FILENAME = "networkpolicy.yaml"


def network_policy(spec: ElasticSpec, job_label: str) -> dict[str, Any]:
    """The policy's object: pods labelled ``job_label: <name>`` admit ingress only from each other."""
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


def network_policy_document(spec: ElasticSpec, job_label: str) -> Document:
    """The document a target adds to its output when ``spec.network_policy`` is set."""
    return Document(TEMPLATE, FILENAME, API_VERSION, KIND, {"policy": network_policy(spec, job_label)})


def network_policy_errors(doc: dict[str, Any], spec: ElasticSpec, job_label: str) -> list[str]:
    """What is wrong with a rendered policy: it must select the job's pods and admit only them."""
    if doc != network_policy(spec, job_label):
        # A custom template may not widen who reaches the store: the policy is ours to decide.
        return ["the NetworkPolicy must be the compiler's (select the job's pods, admit ingress only from them)"]
    return []
