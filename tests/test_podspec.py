"""pod_template.spec is checked at compile time against Kubernetes' PodSpec schema."""

from __future__ import annotations

import pytest
from support.specs import MINIMAL

from elastic_compile.compiler.pipeline import compile_text
from elastic_compile.core.errors import SpecError

BASE = MINIMAL + "pod_template:\n  spec:\n"


def _lines(fragment: str) -> list[str]:
    with pytest.raises(SpecError) as e:
        compile_text(BASE + fragment, "s.yaml")
    return [str(p) for p in e.value.problems]


@pytest.mark.parametrize(
    ("fragment", "expected"),
    [
        (
            "    nodeSelectr: {pool: gpu}\n",
            "s.yaml:6:5: pod_template.spec.nodeSelectr: unknown field; did you mean nodeSelector? (given: nodeSelectr)",
        ),
        (
            "    tolerations: {key: a}\n",
            "s.yaml:6:18: pod_template.spec.tolerations: expected a list, not a mapping",
        ),
        (
            "    containers:\n      - name: side\n        image: s:1\n        resources: {limits: {cpu: 2x}}\n",
            "s.yaml:9:35: pod_template.spec.containers[0].resources.limits.cpu: not a Kubernetes quantity; use a "
            "number with an optional suffix: 500m, 8, 64Gi (given: 2x)",
        ),
        (
            "    containers:\n      - name: side\n",
            "s.yaml:7:9: pod_template.spec.containers[0]: a sidecar needs an image reference: "
            "[registry[:port]/]path[:tag][@digest], ASCII",
        ),
        (
            "    securityContext: {runAsUser: '1000'}\n",
            "s.yaml:6:34: pod_template.spec.securityContext.runAsUser: expected a whole number, not a string "
            "(given: 1000)",
        ),
        (
            "    terminationGracePeriodSeconds:\n",
            "s.yaml:6:35: pod_template.spec.terminationGracePeriodSeconds: empty value; give a value or remove the key",
        ),
    ],
    ids=["typo", "wrong-type", "quantity", "sidecar-image", "string-int", "null"],
)
def test_pod_template_problems_are_located(fragment: str, expected: str) -> None:
    assert _lines(fragment) == [expected]


def test_valid_fragment_with_integers_compiles() -> None:
    fragment = (
        "    securityContext: {runAsUser: 1000, fsGroup: 100}\n"
        "    tolerations: [{key: gpu, operator: Exists, effect: NoExecute, tolerationSeconds: 30}]\n"
        "    containers:\n      - {name: side, image: 's:1', ports: [{containerPort: 8080}]}\n"
    )
    doc = compile_text(BASE + fragment, "s.yaml").outputs[0].doc
    pod = doc["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    assert pod["securityContext"] == {"runAsUser": 1000, "fsGroup": 100}
    # The sidecar is a native sidecar: an init container with restartPolicy Always.
    assert pod["initContainers"][0]["ports"] == [{"containerPort": 8080}]
