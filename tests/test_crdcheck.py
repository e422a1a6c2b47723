"""The offline manifest checker catches real problems and accepts good objects.

Each mutation names the layer expected to catch it, so the table also documents what
the CRD schema alone would let through (replica-key typos, a missing ``pytorch``
container, the runtime traps).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from support import crdcheck
from support.crdcheck import (
    CrdUnavailable,
    CrdValidator,
    core_errors,
    pod_template_spec_errors,
)

from elastic_compile.targets.pytorchjob.checks import webhook_errors

Job = dict[str, Any]
Checker = Callable[[Mapping[str, Any]], list[str]]

WORKER = "spec.pytorchReplicaSpecs.Worker"
CONTAINER0 = f"{WORKER}.template.spec.containers[0]"


def valid_job() -> Job:
    """The smallest elastic, Worker-only PyTorchJob we would emit."""
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "train", "labels": {"app.kubernetes.io/name": "train"}},
        "spec": {
            "elasticPolicy": {"rdzvBackend": "c10d", "minReplicas": 1, "maxReplicas": 2, "maxRestarts": 3},
            "nprocPerNode": "2",
            "pytorchReplicaSpecs": {
                "Worker": {
                    "replicas": 2,
                    "restartPolicy": "OnFailure",
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "pytorch",
                                    "image": "x:1",
                                    "command": ["elastic-launch", "--", "python", "-m", "train"],
                                    "resources": {"limits": {"memory": "64Gi", "cpu": 4}},
                                }
                            ]
                        }
                    },
                }
            },
        },
    }


def valid_pod_template() -> Job:
    return {
        "apiVersion": "v1",
        "kind": "PodTemplate",
        "metadata": {"name": "train-worker"},
        "template": {
            "metadata": {"labels": {"app": "train"}},
            "spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "pytorch", "image": "x:1", "resources": {"requests": {"memory": "8Gi"}}}],
            },
        },
    }


def spec(job: Job) -> Job:
    result: Job = job["spec"]
    return result


def worker(job: Job) -> Job:
    result: Job = spec(job)["pytorchReplicaSpecs"]["Worker"]
    return result


def container(job: Job) -> Job:
    result: Job = worker(job)["template"]["spec"]["containers"][0]
    return result


def test_valid_job_has_no_errors(check_manifest: Checker, pytorchjob_validator: CrdValidator) -> None:
    job = valid_job()
    assert pytorchjob_validator.errors(job) == []
    assert webhook_errors(job) == []
    assert check_manifest(job) == []
    assert job == valid_job(), "checking must not mutate the manifest"


def test_master_worker_job_is_valid(check_manifest: Checker) -> None:
    job = valid_job()
    del spec(job)["elasticPolicy"]
    spec(job)["pytorchReplicaSpecs"]["Master"] = copy.deepcopy(worker(job)) | {"replicas": 1}
    assert check_manifest(job) == []


MUTATIONS: list[tuple[str, Callable[[Job], object], str, str]] = [
    # (id, mutation, expected message, the layer that must catch it)
    (
        "unknown-spec-field",
        lambda j: spec(j).update(elasticPolicyy={}),
        "spec.elasticPolicyy: unknown field",
        "crd",
    ),
    (
        "unknown-container-field",
        lambda j: container(j).update(imagee="x:2"),
        f"{CONTAINER0}.imagee: unknown field",
        "crd",
    ),
    (
        "int32-overflow",
        lambda j: worker(j).update(replicas=3_000_000_000),
        f"{WORKER}.replicas: out of range for int32 (given: 3000000000)",
        "crd",
    ),
    (
        "replicas-as-string",
        lambda j: worker(j).update(replicas="2"),
        f'{WORKER}.replicas: must be of type integer (given: "2")',
        "crd",
    ),
    (
        "float-replicas",
        lambda j: worker(j).update(replicas=2.0),
        f"{WORKER}.replicas: must be of type integer (given: 2.0)",
        "crd",
    ),
    (
        # The CRD types quantities as integer-or-string: a float that a core PodTemplate
        # accepts is rejected inside a PyTorchJob. Emit "500m".
        "float-quantity",
        lambda j: container(j)["resources"]["limits"].update(cpu=0.5),
        f"{CONTAINER0}.resources.limits.cpu: must be an integer or a string (given: 0.5)",
        "crd",
    ),
    (
        "null-command",
        lambda j: container(j).update(command=None),
        f"{CONTAINER0}.command: must be of type array (given: null)",
        "crd",
    ),
    (
        "duplicate-container-name",
        lambda j: worker(j)["template"]["spec"]["containers"].append({"name": "pytorch", "image": "y:1"}),
        f'{WORKER}.template.spec.containers[1]: duplicate entry name="pytorch" (same key as item 0)',
        "crd",
    ),
    (
        "duplicate-port-by-default-protocol",
        lambda j: container(j).update(ports=[{"containerPort": 8080}, {"containerPort": 8080, "protocol": "TCP"}]),
        f'{CONTAINER0}.ports[1]: duplicate entry containerPort=8080, protocol="TCP" (same key as item 0)',
        "crd",
    ),
    (
        "bad-quantity",
        lambda j: container(j)["resources"]["limits"].update(memory="64Gx"),
        f'{CONTAINER0}.resources.limits.memory: must be a Kubernetes quantity such as 500m, 4Gi or 1e3 (given: "64Gx")',
        "crd",
    ),
    (
        "bad-name",
        lambda j: j["metadata"].update(name="Not_A_DNS"),
        "metadata.name: must be a DNS-1035 label: lower-case letters, digits and '-', starting with a letter"
        ' and ending with a letter or digit (given: "Not_A_DNS")',
        "webhook",
    ),
    (
        "wrong-api-version",
        lambda j: j.update(apiVersion="kubeflow.org/v1beta1"),
        'apiVersion: must be one of kubeflow.org/v1 (given: "kubeflow.org/v1beta1")',
        "crd",
    ),
    (
        "metadata-typo",
        lambda j: j["metadata"].update(lables={"a": "b"}),
        "metadata.lables: unknown field",
        "manifest",
    ),
    (
        "replica-key-typo",
        lambda j: spec(j)["pytorchReplicaSpecs"].update(Wroker=spec(j)["pytorchReplicaSpecs"].pop("Worker")),
        "spec.pytorchReplicaSpecs.Wroker: unsupported replica type (supported: Master, Worker)",
        "webhook",
    ),
    (
        "no-pytorch-container",
        lambda j: container(j).update(name="trainer"),
        f"{WORKER}.template.spec.containers: must have a container named 'pytorch'",
        "webhook",
    ),
    (
        "empty-image",
        lambda j: container(j).update(image=""),
        f"{CONTAINER0}.image: required field is missing",
        "webhook",
    ),
    (
        "master-without-replicas",
        lambda j: spec(j)["pytorchReplicaSpecs"].update(Master={"template": copy.deepcopy(worker(j)["template"])}),
        "spec.pytorchReplicaSpecs.Master.replicas: must be set explicitly to 1 (the webhook sees no defaults)",
        "webhook",
    ),
    (
        "zero-workers",
        lambda j: worker(j).update(replicas=0),
        f"{WORKER}.replicas: must be at least 1 (given: 0)",
        "webhook",
    ),
    (
        "deprecated-nprocpernode-with-new",
        lambda j: spec(j)["elasticPolicy"].update(nProcPerNode=2),
        "spec.elasticPolicy.nProcPerNode: forbidden together with spec.nprocPerNode"
        " (deprecated; use spec.nprocPerNode only)",
        "webhook",
    ),
    (
        "managed-by",
        lambda j: spec(j).update(runPolicy={"managedBy": "me"}),
        "spec.runPolicy.managedBy: must be unset or one of kubeflow.org/training-operator,"
        ' kueue.x-k8s.io/multikueue (given: "me")',
        "webhook",
    ),
    (
        "standalone-true",
        lambda j: spec(j)["elasticPolicy"].update(standalone=True),
        'spec.elasticPolicy.standalone: must not be true: the operator sets PET_STANDALONE=""'
        " and torchrun crashes parsing it (accepted by the webhook, fails at runtime)",
        "webhook",
    ),
    (
        "empty-rdzv-conf",
        lambda j: spec(j)["elasticPolicy"].update(rdzvConf=[]),
        "spec.elasticPolicy.rdzvConf: must be omitted when empty: the operator's env builder panics on an"
        " empty list (accepted by the webhook, fails at runtime)",
        "webhook",
    ),
    (
        "master-with-elastic",
        lambda j: spec(j)["pytorchReplicaSpecs"].update(Master=copy.deepcopy(worker(j)) | {"replicas": 1}),
        "spec.pytorchReplicaSpecs.Master: must not be combined with elasticPolicy: PET_NNODES leaves the"
        " Master out and rendezvous still points at worker-0 (kubeflow/trainer#2277)",
        "webhook",
    ),
    (
        "pod-name-too-long",
        # 55 characters pass the webhook, but the HPA may scale to worker-9: 64 characters.
        lambda j: (j["metadata"].update(name="a" * 55), spec(j)["elasticPolicy"].update(maxReplicas=10)),
        f"metadata.name: too long for pod and service name '{'a' * 55}-worker-9' (64 > 63 characters;"
        " accepted by the webhook, fails at runtime)",
        "webhook",
    ),
    (
        "pod-template-typo",
        lambda j: worker(j)["template"]["spec"].update(restartpolicy="Never"),
        f"{WORKER}.template.spec.restartpolicy: unknown field",
        "template",
    ),
]


@pytest.mark.parametrize(("mutate", "expected", "layer"), [m[1:] for m in MUTATIONS], ids=[m[0] for m in MUTATIONS])
def test_mutation_is_reported(
    check_manifest: Checker,
    pytorchjob_validator: CrdValidator,
    mutate: Callable[[Job], object],
    expected: str,
    layer: str,
) -> None:
    job = valid_job()
    mutate(job)
    layers: dict[str, Checker] = {
        "crd": pytorchjob_validator.errors,
        "webhook": webhook_errors,
        "template": lambda j: pod_template_spec_errors(worker(dict(j))["template"], path=f"{WORKER}.template"),
        "manifest": check_manifest,
    }
    assert expected in layers[layer](job)
    assert expected in check_manifest(job)


def test_schema_gaps_are_left_to_the_spec_model(check_manifest: Checker) -> None:
    """The CRD has no enums and no cross-field rules: these pass here, so the pydantic
    spec must reject them (nor does the webhook, pkg/webhooks/pytorch/pytorchjob_webhook.go)."""
    job = valid_job()
    worker(job)["restartPolicy"] = "Sometimes"
    spec(job)["runPolicy"] = {"cleanPodPolicy": "Nope"}
    assert check_manifest(job) == []


def test_errors_point_into_every_replica(check_manifest: Checker) -> None:
    job = valid_job()
    spec(job)["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["imagee"] = "x"
    errors = check_manifest(job)
    # CRD strict mode and the PodTemplateSpec schema both see this typo: reported once.
    assert errors == [f"{CONTAINER0}.imagee: unknown field"]


def test_pod_template_spec_errors_directly() -> None:
    template = copy.deepcopy(valid_job()["spec"]["pytorchReplicaSpecs"]["Worker"]["template"])
    assert pod_template_spec_errors(template) == []
    template["spec"]["restartpolicy"] = "Never"
    template["spec"]["containers"][0]["resources"] = {"limit": {"cpu": 1}}
    assert pod_template_spec_errors(template) == [
        "spec.containers[0].resources.limit: unknown field",
        "spec.restartpolicy: unknown field",
    ]


def test_pod_template_core_kind() -> None:
    pytest.importorskip("kubernetes_validate")
    good = valid_pod_template()
    assert core_errors(good) == []
    assert core_errors(good, kind_hint="PodTemplate") == []
    assert crdcheck.check_manifest(good) == []

    bad = valid_pod_template()
    bad["template"]["spec"]["containers"][0]["imagee"] = "x:2"
    bad["template"]["spec"]["containers"][0]["resources"]["requests"]["memory"] = "64Gx"
    assert core_errors(bad) == [
        "template.spec.containers[0].resources.requests.memory: must be a Kubernetes quantity such as 500m,"
        ' 4Gi or 1e3 (given: "64Gx")',
        "template.spec.containers[0].imagee: unknown field",
    ]
    assert core_errors(good, kind_hint="Pod") == ['kind: must be Pod (given: "PodTemplate")']
    assert core_errors({"apiVersion": "example.com/v1", "kind": "Widget"}) == [
        f"kind: no Kubernetes v{crdcheck.CORE_KUBERNETES_VERSION}.0-local-strict schema for example.com/v1 Widget"
    ]


def test_converted_schema_is_valid_2020_12(pytorchjob_validator: CrdValidator) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.Draft202012Validator.check_schema(pytorchjob_validator.schemas["v1"])
    assert pytorchjob_validator.api_versions == ("kubeflow.org/v1",)
    # The CRD's only CEL rule is a transition rule (queue immutability): nothing skipped.
    assert pytorchjob_validator.unchecked_rules == ()


def test_crd_conversion_is_cached(pytorchjob_validator: CrdValidator) -> None:
    assert crdcheck.pytorchjob_validator() is pytorchjob_validator
    assert crdcheck.pytorchjob_validator(strict=False) is not pytorchjob_validator


def test_upstream_crd_conversion_is_cached(crds_dir: Path) -> None:
    validator = CrdValidator.from_file(crds_dir / crdcheck.PYTORCHJOB_CRD)
    assert CrdValidator.from_file(crds_dir / crdcheck.PYTORCHJOB_CRD) is validator
    assert crdcheck.pytorchjob_validator() is validator


def test_only_strict_mode_finds_an_unknown_field() -> None:
    """Lenient is what the API server does by default (prune and warn): a typo is lost, which is why we run strict."""
    job = valid_job()
    container(job)["imagee"] = "x:2"
    strict = crdcheck.pytorchjob_validator(strict=True).errors(job)
    assert len(strict) == 1 and "imagee" in strict[0]
    assert crdcheck.pytorchjob_validator(strict=False).errors(job) == []


def test_without_the_crds_the_shipped_schema_serves(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(crdcheck.CRDS_ENV, raising=False)
    assert crdcheck.crd_dir() is None
    validator = crdcheck.pytorchjob_validator()
    assert Path(validator.source).name == crdcheck.PYTORCHJOB_COMPACT
    assert validator.errors(valid_job()) == []
    job = valid_job()
    container(job)["imagee"] = "x"
    assert validator.errors(job) == [f"{CONTAINER0}.imagee: unknown field"]


def test_a_wrong_crd_directory_is_an_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # A CI job that means to test against the upstream CRDs must not fall back silently.
    monkeypatch.setenv(crdcheck.CRDS_ENV, str(tmp_path / "absent"))
    with pytest.raises(CrdUnavailable, match=r"ELASTIC_COMPILE_CRDS=.*absent is not a directory"):
        crdcheck.check_manifest(valid_job())
    monkeypatch.setenv(crdcheck.CRDS_ENV, str(tmp_path))
    assert crdcheck.crd_dir() == tmp_path
    with pytest.raises(CrdUnavailable, match="does not exist"):
        crdcheck.pytorchjob_validator()


def test_webhook_rules_need_no_crd() -> None:
    # webhook_errors is pure stdlib: it runs even where the CRDs are absent.
    assert webhook_errors(valid_job()) == []
    assert webhook_errors({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "x"}}) == [
        "spec.pytorchReplicaSpecs: required field is missing"
    ]


@pytest.mark.parametrize(
    ("min_replicas", "max_replicas", "replicas", "fragment"),
    [
        (3, 2, 2, "minReplicas 3 is above maxReplicas 2"),
        (1, 2, 4, "Worker.replicas: 4 is outside elasticPolicy [1, 2]"),
    ],
)
def test_elastic_bounds_are_checked(min_replicas: int, max_replicas: int, replicas: int, fragment: str) -> None:
    job = valid_job()
    job["spec"]["elasticPolicy"].update(minReplicas=min_replicas, maxReplicas=max_replicas)
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = replicas
    assert any(fragment in e for e in webhook_errors(job)), webhook_errors(job)
