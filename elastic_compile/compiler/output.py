"""Emit compiled resources: one stream, or the files of one kustomize base per spec for ``-o DIR``.

Writing those files into DIR as their owner, and ``--check``, are :mod:`elastic_compile.compiler.writer`'s.
"""

from __future__ import annotations

from collections.abc import Sequence

from elastic_compile.compiler import kustomize
from elastic_compile.compiler.pipeline import Compiled
from elastic_compile.compiler.writer import (
    MANIFEST,
    WriteError,
    default_boundary,
    diff_directory,
    diff_file,
    manifest_text,
    write_directory,
)
from elastic_compile.core.emit import to_json, to_yaml
from elastic_compile.core.errors import SpecError
from elastic_compile.schema import ElasticSpec
from elastic_compile.targets import checks
from elastic_compile.targets.bundle import CONFIGMAP_FILE
from elastic_compile.targets.network import KIND as NETWORK_POLICY

KUSTOMIZATION = kustomize.KUSTOMIZATION_FILE


def stream_text(compiled: Sequence[Compiled], fmt: str) -> str:
    """All resources of all specs as one YAML stream or one JSON document."""
    docs = [o.doc for c in compiled for o in c.outputs]
    return to_json(docs) if fmt == "json" else to_yaml(docs)


def _base_files(c: Compiled, fmt: str) -> dict[str, str]:
    """One spec's kustomize base: a file per resource, ``kustomization.yaml`` and ``openapi.json``.

    Only Kubernetes objects are listed as kustomize resources: the Flyte TaskSpec (``-t
    all`` on a spec with a ``flyte:`` section) has no apiVersion or kind, and kustomize
    refuses the whole base over it ("missing Resource metadata"). It is still written.
    """
    ext = "json" if fmt == "json" else "yaml"
    files: dict[str, str] = {}
    resources: list[str] = []
    for o in c.outputs:
        name = o.filename.rsplit(".", 1)[0] + "." + ext
        files[name] = to_json([o.doc]) if fmt == "json" else to_yaml([o.doc])
        if o.is_resource:
            resources.append(name)
    chosen = list(dict.fromkeys(o.target for o in c.outputs))  # the targets of this base, in output order
    held = [k for k in (t.kustomize() for t in chosen) if k is not None]
    launcher = any(o.filename == CONFIGMAP_FILE for o in c.outputs)
    # The NetworkPolicy selects the pods of the job its target emits.
    policy = next((o.target.kustomize() for o in c.outputs if o.document.kind == NETWORK_POLICY), None)
    network = policy.pod_labels if policy is not None else None
    files[KUSTOMIZATION] = kustomize.kustomization_text(resources, held=held, launcher=launcher, network=network)
    files[kustomize.OPENAPI_FILE] = kustomize.openapi_text()
    if kustomize.needs_config(held, launcher=launcher, network=network):
        files[kustomize.CONFIG_FILE] = kustomize.config_text(held=held, launcher=launcher, network=network)
    return files


def base_directory(spec: ElasticSpec) -> str:
    """Where one spec's base goes below DIR: ``<namespace>/<name>``, or ``<name>`` with no namespace.

    A function of the spec alone, so that adding, renaming or removing another job never
    moves this one's base (and the overlays that name it).
    """
    return f"{spec.namespace}/{spec.name}" if spec.namespace else spec.name


def _source(c: Compiled) -> str:
    return c.loaded.file if c.loaded else c.spec.name


def base_directories(compiled: Sequence[Compiled], *, nested: bool = False) -> list[str]:
    """Where each spec's base goes below DIR, in order: ``""`` for one spec named alone.

    Several specs, or specs found under a directory (``nested``, so that adding a second job
    never moves the first): :func:`base_directory` each. Two specs with one base, and a
    spec without a namespace whose name is the directory of a namespace, raise
    ``SpecError``: one located line per spec at fault.
    """
    if len(compiled) == 1 and not nested:
        return [""]
    dirs = [base_directory(c.spec) for c in compiled]
    first: dict[str, Compiled] = {}
    namespaces: dict[str, Compiled] = {}
    for c, where in zip(compiled, dirs, strict=True):
        first.setdefault(where, c)
        if c.spec.namespace:
            namespaces.setdefault(c.spec.namespace, c)
    problems = []
    for c, where in zip(compiled, dirs, strict=True):
        if first[where] is not c:
            problems.append(
                checks.locate(
                    c.loaded,
                    ("name",),
                    f"its base {where}/ is also the base of {_source(first[where])}; "
                    "give each job its own name in a namespace",
                )
            )
        elif not c.spec.namespace and c.spec.name in namespaces:
            problems.append(
                checks.locate(
                    c.loaded,
                    ("name",),
                    f"its base {where}/ would hold the bases of namespace {c.spec.name} "
                    f"({_source(namespaces[c.spec.name])}); set this job's namespace or rename it",
                )
            )
    if problems:
        raise SpecError(problems)
    return dirs


def directory_files(compiled: Sequence[Compiled], fmt: str, *, nested: bool = False) -> dict[str, str]:
    """Relative path -> content for ``-o DIR`` (see :func:`base_directories` for the layout)."""
    files: dict[str, str] = {}
    for c, where in zip(compiled, base_directories(compiled, nested=nested), strict=True):
        for rel, text in _base_files(c, fmt).items():
            files[f"{where}/{rel}" if where else rel] = text
    return files


__all__ = [
    "MANIFEST",
    "WriteError",
    "base_directories",
    "base_directory",
    "default_boundary",
    "diff_directory",
    "diff_file",
    "directory_files",
    "manifest_text",
    "stream_text",
    "write_directory",
]
