"""A toy target that lives outside the package: proof that a target is one unit.

Nothing in ``elastic_compile`` names it. Registered (``elastic_compile.targets.register``, or
the ``elastic_compile.targets`` entry point group of an installed distribution), it gets
everything a built-in target gets: ``-t toy`` and ``-t all``, ``--help``, its template and
its checks (custom ``--templates`` held to them), a lint rule about its engine, ``import``
of its kind, ``doctor`` rules of its own, and a line in ``--explain``.

Its engine is imaginary: a ``ToyJob`` runs ``replicas`` copies of the training pod's
command, and publishes a pod to the others only once it is Ready (so the readiness-probe
lint, EC114, concerns it as it concerns the training operator's jobs).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from elastic_compile.core.loader import Loaded
from elastic_compile.core.manifest import as_int, as_mapping
from elastic_compile.schema import ElasticSpec
from elastic_compile.targets import Document, Examined, Reader, Target
from elastic_compile.targets.checks import DoctorRule, Finding, identity_errors, raise_problems
from elastic_compile.targets.readback.draft import Draft

API_VERSION = "toy.example.com/v1"
KIND = "ToyJob"
#: More replicas than a toy cluster has.
MAX_REPLICAS = 8


class ToyTarget(Target):
    """A ToyJob of ``replicas`` pods running the spec's command."""

    name = "toy"
    summary = "ToyJob (toy.example.com/v1), a target registered from tests/toy_target"
    order = 40
    templates = Path(__file__).resolve().parent / "templates"
    doctor_rules = (DoctorRule("DR900", "toy-replicas", f"the toy cluster runs at most {MAX_REPLICAS} replicas"),)

    def in_all(self, spec: ElasticSpec) -> bool:
        return spec.command is not None  # a ToyJob runs a command, never a function

    def documents(self, spec: ElasticSpec, loaded: Loaded | None) -> list[Document]:
        if spec.nnodes.max > MAX_REPLICAS:
            raise_problems([(("nnodes",), f"a ToyJob runs at most {MAX_REPLICAS} replicas")], loaded)
        context = {"job": {"name": spec.name, "image": spec.image, "command": list(spec.command or []),
                           "replicas": spec.nnodes.max}}  # fmt: skip
        return [Document("toy.yaml.j2", "toyjob.yaml", API_VERSION, KIND, context)]

    def check(self, doc: dict[str, Any], document: Document, spec: ElasticSpec) -> list[str]:
        problems = identity_errors(doc, API_VERSION, KIND, spec.name)
        replicas = as_mapping(doc.get("spec")).get("replicas")
        if replicas != spec.nnodes.max:
            problems.append(f"spec.replicas must be {spec.nnodes.max}")
        return problems

    def lint_codes(self, chosen: Collection[Target]) -> frozenset[str]:
        return frozenset({"EC114"})

    def readers(self) -> tuple[Reader, ...]:
        return (Reader(API_VERSION, KIND, read_toy),)

    def examined(self) -> tuple[Examined, ...]:
        return (Examined(API_VERSION, KIND, None, toy_traps, no_values),)

    def explain(self, document: Document, spec: ElasticSpec) -> list[str] | None:
        return [f"# layout: ToyJob, {document.context['job']['replicas']} replica(s)\n"]


def read_toy(loaded: Loaded, stream: Sequence[Loaded], entrypoint: Sequence[str] | None) -> Draft:
    """A ToyJob back into a spec: its name, image, command and replicas."""
    draft = Draft()
    doc = as_mapping(loaded.data)
    spec = as_mapping(doc.get("spec"))
    draft.set(("name",), as_mapping(doc.get("metadata")).get("name"), ("metadata", "name"))
    draft.set(("image",), spec.get("image"), ("spec", "image"))
    draft.set(("command",), spec.get("command"), ("spec", "command"))
    replicas = as_int(spec.get("replicas"))
    if replicas is not None and replicas != 1:
        draft.set(("nnodes",), replicas, ("spec", "replicas"))
    draft.note(("spec",), "a ToyJob read back by the toy target")
    return draft


def toy_traps(job: Mapping[str, Any], stream: Sequence[Loaded]) -> list[Finding]:
    replicas = as_int(as_mapping(job.get("spec")).get("replicas"))
    if replicas is not None and replicas > MAX_REPLICAS:
        return [
            Finding("toy-replicas", ("spec", "replicas"), f"{replicas} replicas; the toy cluster has {MAX_REPLICAS}")
        ]
    return []


def no_values(job: Mapping[str, Any], stream: Sequence[Loaded]) -> list[Finding]:
    return []


TARGET = ToyTarget()
