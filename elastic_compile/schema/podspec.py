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

import re
from typing import Any, Final

from elastic_compile.schema import compact, podvalues

ROOT: Final = "io.k8s.api.core.v1.PodSpec"


def podspec_problems(spec: dict[str, Any], *, fragment: bool = False) -> list[compact.Problem]:
    """Problems in a PodSpec fragment (its shape, then its values), each located relative to the fragment.

    ``fragment``: the values of a base (``extends:``), which the specs extending it complete,
    so no field is required there.
    """
    problems = compact.core().problems(spec, {"ref": ROOT})
    # A fragment: the compiler supplies the training container, so `containers` is optional.
    if fragment:
        problems = [p for p in problems if not p[1].endswith(compact.REQUIRED)]
    else:
        problems = [p for p in problems if p != ((), "containers" + compact.REQUIRED)]
    # A base's values are checked in the spec that extends it, merged and complete.
    values = [] if fragment else pod_value_problems(spec)
    return [*(octal_hint(spec, p) for p in problems), *values]


def pod_value_problems(spec: dict[str, Any], ref: str = ROOT) -> list[compact.Problem]:
    """What the API server would reject in the values of a PodSpec (:mod:`podvalues`).

    ``ref``: another Kubernetes definition the value is (``io.k8s.api.core.v1.EnvVar``),
    for the parts of a pod a TrainJob carries outside any PodSpec. Only fields the schema
    knows are looked at, so a manifest written for a newer Kubernetes is checked for what
    we can judge and nothing else.
    """
    found: list[compact.Problem] = []
    for definition, value, loc in compact.core().objects(spec, {"ref": ref}):
        podvalues.check(definition, value, loc, found)
    return found


# A decimal with a leading zero: YAML 1.1 reads 0644 as octal 420, YAML 1.2 as 644, and
# our loader keeps it as text rather than guess.
_OCTAL = re.compile(r"^0[0-7]+$")


def octal_hint(spec: Any, problem: compact.Problem) -> compact.Problem:
    """For a YAML 1.1 octal such as ``defaultMode: 0644``, say what to write instead.

    ``problem`` is one of ``spec``'s (a PodSpec, or a whole manifest), located from it.
    """
    loc, message = problem
    if message != "expected a whole number, not a string":
        return problem
    value: Any = spec
    for part in loc:
        value = value[part]
    if not isinstance(value, str) or not _OCTAL.match(value):
        return problem
    digits = value.lstrip("0") or "0"
    if loc and loc[-1] in ("defaultMode", "mode"):
        return (
            loc,
            f"{value} is the octal file mode {int(value, 8)} to YAML 1.1 and the decimal {digits} to YAML 1.2, so "
            f"readers disagree; write 0o{digits} (or {int(value, 8)})",
        )
    return (loc, f"{message}; a leading zero reads as octal in YAML 1.1 and decimal in YAML 1.2: write {digits}")
