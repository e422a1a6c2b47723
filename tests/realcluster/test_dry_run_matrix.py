"""Every output of every example and golden spec, through the real API server and the operators' webhooks.

For each spec (``tests/golden/*/elastic.yaml`` and every spec under ``examples/``, found as the
CLI finds them) and each Kubernetes target (``pytorchjob``, ``trainjob``, ``podtemplate``), two
outputs are sent to the server:

* the stream ``elastic-compile SPEC -t TARGET`` prints;
* the base ``elastic-compile SPEC -t TARGET -o DIR`` writes, built by the real ``kubectl kustomize``.

Each object goes through server-side apply with ``fieldValidation=Strict`` as a dry run: the
CRD's schema, defaulting and CEL rules, the core validation of built-in kinds, and the
operators' validating and mutating webhooks. It must be accepted with no warning. A
TrainingRuntime of ours is created for real (Trainer's TrainJob webhook looks its runtime up);
a TrainJob naming a runtime the platform installs gets one, a copy of the stock
``torch-distributed``, as the platform would have.

Each spec without ``extends`` is also compiled *hardened*: with ``network_policy: true`` and
``launcher: bundled`` added, so that the NetworkPolicy, the launcher's ConfigMap and the
kustomize configurations that rename their references go through the server too.

Specs the compiler refuses for ``-t trainjob`` are the cases the error catalogue pins
(``tests/errors/``): a golden case without ``trainjob.yaml``, an example in ``TRAINJOB_REFUSED``.
A failure names the spec, the target, the output and the object; every failure of a spec is
reported at once.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from kube_helpers import REPO, ApplyError, Cluster, apply, documents, kustomize, run_cli
from specs import EXAMPLES, GOLDEN, SPECS, TRAINJOB_REFUSED, platform_runtimes, rel, trainjob_refusal

from elastic_compile.compiler.output import directory_files, stream_text
from elastic_compile.compiler.pipeline import compile_path, resolver
from elastic_compile.compiler.writer import default_boundary
from elastic_compile.core.errors import SpecError

TARGETS = ("pytorchjob", "trainjob", "podtemplate")

#: What the hardened variant of a spec adds (both keys are absent from every spec here).
HARDENED = {"network_policy": True, "launcher": "bundled"}


@dataclass(frozen=True)
class Case:
    """One spec of the matrix: its path in the repository, and whether it is the hardened variant."""

    spec: Path
    hardened: bool

    @property
    def rel(self) -> str:
        return rel(self.spec)

    @property
    def label(self) -> str:
        return self.rel + (" (hardened: network_policy, launcher: bundled)" if self.hardened else "")

    def trainjob_refusal(self) -> str | None:
        return trainjob_refusal(self.spec)


def _extends(spec: Path) -> bool:
    loaded = yaml.safe_load(spec.read_text())
    return isinstance(loaded, dict) and "extends" in loaded


CASES = [Case(s, False) for s in SPECS] + [Case(s, True) for s in SPECS if not _extends(s)]


def test_the_matrix_covers_every_spec() -> None:
    """A new golden case or example joins the matrix by existing; the refusal list names real specs."""
    assert len([c for c in CASES if not c.hardened]) >= 30
    assert {c.rel for c in CASES} >= set(TRAINJOB_REFUSED)
    assert all((REPO / rel).is_file() for rel in TRAINJOB_REFUSED)
    for spec in SPECS:
        loaded = yaml.safe_load(spec.read_text())
        assert not set(HARDENED) & set(loaded), f"{spec}: the hardened variant would override the spec's own key"


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of examples/ and tests/golden/ (the -o bases are written beside the specs, inside
    the copy: elastic-compile writes only inside --root)."""
    root = tmp_path_factory.mktemp("matrix")
    shutil.copytree(EXAMPLES, root / "examples")
    shutil.copytree(GOLDEN, root / "tests" / "golden")
    return root


def _spec_in(tree: Path, case: Case) -> Path:
    copy = tree / case.rel
    if not case.hardened:
        return copy
    text = copy.read_text()
    variant = copy.with_name(f"hardened-{copy.stem.removesuffix('.elastic')}.elastic.yaml")
    variant.write_text(text.rstrip("\n") + "\n" + yaml.safe_dump(HARDENED, sort_keys=True))
    return variant


@dataclass
class Tally:
    """What the server accepted, and every refusal or warning, located."""

    objects: int = 0
    failures: list[str] = field(default_factory=list)


def _send(cluster: Cluster, namespace: str, docs: list[dict[str, Any]], where: str, tally: Tally) -> None:
    for runtime in platform_runtimes(cluster, docs):
        apply(cluster, runtime, namespace=namespace)
    for doc in docs:
        what = f"{where}: {doc['kind']}/{doc['metadata']['name']}"
        try:
            # Our TrainingRuntime for real: the TrainJob's webhook reads it.
            result = apply(cluster, doc, namespace=namespace, dry_run=doc["kind"] != "TrainingRuntime")
        except ApplyError as e:
            tally.failures.append(f"{what}: refused: {e}")
            continue
        tally.objects += 1
        if result.warnings:
            tally.failures.append(f"{what}: warnings: {result.warnings}")


def _write_base(directory: Path, files: dict[str, str]) -> Path:
    for path, text in files.items():
        (directory / path).parent.mkdir(parents=True, exist_ok=True)
        (directory / path).write_text(text)
    return directory


@pytest.mark.parametrize("case", CASES, ids=[("hardened:" if c.hardened else "") + c.rel for c in CASES])
def test_every_output_passes_the_server(cluster: Cluster, dry_namespace: str, tree: Path, case: Case) -> None:
    spec = _spec_in(tree, case)
    bases = resolver(default_boundary(tree))
    tally = Tally()
    compiled_targets = 0
    for target in TARGETS:
        where = f"{case.label} -t {target}"
        # One compile gives both outputs, as the CLI makes them: the stream it prints and the
        # files -o writes (the pure-Python parse-back of a bundled launcher's ConfigMap is slow).
        try:
            compiled = compile_path(spec, (target,), None, bases)
        except SpecError as e:
            refusal = case.trainjob_refusal() if target == "trainjob" else None
            assert refusal is not None, f"{where}: refused by the compiler:\n{e}"
            assert refusal == "" or any(p.path == refusal for p in e.problems), f"{where}: not for {refusal}: {e}"
            continue
        assert target != "trainjob" or case.trainjob_refusal() is None, f"{where}: expected the compiler's refusal"
        compiled_targets += 1
        # Our TrainingRuntime comes before the TrainJob, in the stream and in the base (sortOptions fifo).
        stream = documents(stream_text([compiled], "yaml"))
        _send(cluster, dry_namespace, stream, where, tally)

        base = _write_base(spec.parent / "bases" / f"{spec.stem}-{target}", directory_files([compiled], "yaml"))
        built = kustomize(base)
        assert sorted((d["kind"], d["metadata"]["name"]) for d in built) == sorted(
            (d["kind"], d["metadata"]["name"]) for d in stream
        ), f"{where}: the kustomize base builds other objects than the stream holds"
        _send(cluster, dry_namespace, built, f"{where} -o (kubectl kustomize)", tally)

    assert compiled_targets >= 2
    assert not tally.failures, "the API server refused:\n" + "\n".join(tally.failures)
    assert tally.objects >= compiled_targets * 2


def test_the_many_jobs_overlays_pass_the_server(cluster: Cluster, dry_namespace: str, tree: Path) -> None:
    """examples/many-jobs as its README builds it: the bases of every team's job, then the staging
    and production overlays (labels, the production patch) built by kubectl kustomize."""
    layout = tree / "examples" / "many-jobs"
    status, out, err = run_cli(["teams", "-o", "deploy/base", "--root", str(layout)], cwd=layout)
    assert (status, out) == (0, "")
    assert err.startswith("elastic-compile: 4 specs and 2 bases, 12 files written") and err.count("\n") == 1, err
    tally = Tally()
    for overlay in ("staging", "production"):
        built = kustomize(layout / "deploy" / overlay)
        assert sum(d["kind"] == "PyTorchJob" for d in built) == 4
        _send(cluster, dry_namespace, built, f"examples/many-jobs/deploy/{overlay} (kubectl kustomize)", tally)
    assert not tally.failures, "the API server refused:\n" + "\n".join(tally.failures)
    assert tally.objects == 8
