"""Compile-time check of ``pod_template.spec`` against the Kubernetes PodSpec schema.

Without it, a typo such as ``nodeSelectr`` passes the compiler, and the API server
silently prunes it from a PyTorchJob (custom resources are pruned, not rejected): the
job runs on the wrong nodes. So we validate the fragment here, with a location and a
did-you-mean, before anything is emitted.

The schema is Kubernetes' PodSpec in ``compact/k8s-core.json`` (see
:mod:`elastic_compile.schema.compact`; ``python -m elastic_compile.schema.generate``
writes it from kubernetes-validate, and a test keeps it current).
"""

from __future__ import annotations

from typing import Any, Final

from elastic_compile.schema import compact

ROOT: Final = "io.k8s.api.core.v1.PodSpec"


def podspec_problems(spec: dict[str, Any], *, fragment: bool = False) -> list[compact.Problem]:
    """Problems in a PodSpec fragment, each with its location relative to the fragment.

    ``fragment``: the values of a base (``extends:``), which the specs extending it complete,
    so no field is required there.
    """
    problems = compact.core().problems(spec, {"ref": ROOT})
    # A fragment: the compiler supplies the training container, so `containers` is optional.
    if fragment:
        return [p for p in problems if not p[1].endswith(compact.REQUIRED)]
    return [p for p in problems if p != ((), "containers" + compact.REQUIRED)]


def field_names(definition: str) -> list[str]:
    """Known fields of a Kubernetes definition (for messages and tests)."""
    return sorted(compact.core().definition(definition).get("properties", {}))
