"""Issue 27, done-when: the example jobs of both Kubeflow generations import and compile back to the same job.

Every PyTorchJob of kubeflow/trainer@v1.9.4:examples/ (training-operator v1.9.4) and every
TrainJob of kubeflow/trainer@v2.3.0:examples/yaml/ (Trainer v2.3.0), copied in
tests/engines/upstream/ (Apache-2.0). Each is imported, the spec compiled, and the compiled
job's meaning (tests/engines/job_meaning.py: the pods the operator emulations create, what
each runs and with how many processes and nodes, its image, env, resources and metadata) must
equal the original's. The flux TrainJob is refused: its runtime is not torch's.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from job_meaning import ENTRYPOINTS, docs, meaning

from elastic_compile.compiler.importer import import_stream
from elastic_compile.compiler.output import stream_text
from elastic_compile.compiler.pipeline import compile_text
from elastic_compile.core.errors import SpecError

UPSTREAM = Path(__file__).resolve().parent / "upstream"
V1 = sorted((UPSTREAM / "training-operator-v1.9.4").glob("*.yaml"))
V2 = sorted(p for p in (UPSTREAM / "trainer-v2.3.0").glob("*.yaml") if not p.name.startswith("flux--"))


def _round_trip(path: Path) -> tuple[dict[str, object], dict[str, object], str]:
    text = path.read_text()
    original = docs(text)
    images = {c.get("image") for d in original for c in _containers(d)}
    entrypoint = next((ENTRYPOINTS[i].split() for i in images if i in ENTRYPOINTS), None)
    (imported,) = import_stream(text, path.name, entrypoint=entrypoint)
    compiled = docs(stream_text([compile_text(imported.text, "imported.yaml")], "yaml"))
    return meaning(original), meaning(compiled, runtimes=original), imported.text


def _containers(doc: dict[str, object]) -> list[dict[str, object]]:
    found: list[dict[str, object]] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("containers"), list):
                found.extend(c for c in node["containers"] if isinstance(c, dict))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(doc)
    return found


def test_the_copies_are_all_of_them() -> None:
    # kubeflow/trainer@v1.9.4:examples/ holds 9 PyTorchJobs; @v2.3.0:examples/yaml/ holds 5 TrainJobs.
    assert (len(V1), len(V2)) == (9, 5)


#: The one example whose meaning the spec cannot keep whole: its elasticPolicy.metrics makes the
#: operator create a HorizontalPodAutoscaler (kubeflow/trainer@v1.9.4:pkg/controller.v1/pytorch/hpa.go:33-101)
#: that moves the Worker replicas between MIN and MAX; the spec has no autoscaler, so the
#: compiled job starts at MAX (3) where the manifest started 2. Everything else is the same.
AUTOSCALED = "elastic--imagenet--imagenet.yaml"


@pytest.mark.parametrize(
    "path", [p for p in V1 + V2 if p.name != AUTOSCALED], ids=lambda p: f"{p.parent.name}/{p.name}"
)
def test_example_imports_and_compiles_back_to_the_same_job(path: Path) -> None:
    before, after, spec = _round_trip(path)
    assert after == before, spec


def test_the_autoscaled_example_differs_only_in_its_starting_size_and_says_so() -> None:
    before, after, spec = _round_trip(UPSTREAM / "training-operator-v1.9.4" / AUTOSCALED)
    assert (before.pop("pods"), after.pop("pods")) == (2, 3)
    assert after == before
    assert "# - not carried: cannot carry elasticPolicy.metrics (the operator's HorizontalPodAutoscaler)" in spec
    assert "# the compiled job starts 3 pods (the most nnodes allows); the manifest started 2" in spec


def test_a_flux_trainjob_is_not_a_torch_job() -> None:
    """kubeflow/trainer@v2.3.0:examples/flux/: mlPolicy.flux runs the command under Flux, not torchrun."""
    runtime = (UPSTREAM / "trainer-v2.3.0" / "flux--flux-runtime.yaml").read_text()
    job = (UPSTREAM / "trainer-v2.3.0" / "flux--lammps-train-job.yaml").read_text()
    with pytest.raises(SpecError) as e:
        import_stream(runtime + "\n---\n" + job, "flux.yaml")
    (problem,) = e.value.problems
    assert problem.path == "spec.mlPolicy.flux"
    assert "cannot import: the runtime flux-distributed runs flux, not torch" in problem.message
