"""The specs the real-cluster tests send through the engines, and what the platform must hold for them.

* :data:`SPECS`: every golden case's spec and every spec under ``examples/`` (found as
  ``elastic-compile examples`` finds them, plus the top-level files): a new one joins the
  tests by existing.
* :func:`trainjob_refusal`: whether the compiler refuses a spec under ``-t trainjob`` (the
  error catalogue, tests/errors, pins the messages).
* :func:`platform_runtimes`: the namespaced TrainingRuntimes a TrainJob references but does not
  bring, as the platform team would have installed them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from kube_helpers import REPO, Cluster

GOLDEN = REPO / "tests" / "golden"
EXAMPLES = REPO / "examples"


def _example_specs() -> list[Path]:
    found = set(EXAMPLES.glob("*.yaml")) | set(EXAMPLES.rglob("elastic.yaml"))
    found |= {p for p in EXAMPLES.rglob("*.elastic.yaml") if not p.name.startswith("_")}
    return sorted(found)


SPECS: list[Path] = sorted(GOLDEN.glob("*/elastic.yaml")) + _example_specs()

#: Examples the compiler refuses under -t trainjob, each with a field its message must name.
TRAINJOB_REFUSED = {
    "examples/ddp-2x8-gpu.yaml": "run_policy.ttl_seconds_after_finished",
    "examples/flyte2/elastic.yaml": "run_policy.ttl_seconds_after_finished",
    "examples/many-jobs/teams/nlp/llm-finetune.elastic.yaml": "run_policy.ttl_seconds_after_finished",
    "examples/many-jobs/teams/nlp/nightly-eval.elastic.yaml": "run_policy.ttl_seconds_after_finished",
    "examples/many-jobs/teams/vision/nightly-eval.elastic.yaml": "run_policy.ttl_seconds_after_finished",
    "examples/many-jobs/teams/vision/resnet50.elastic.yaml": "run_policy.ttl_seconds_after_finished",
}

#: The stock ClusterTrainingRuntime a platform's own TrainingRuntime is copied from.
STOCK_RUNTIME = "torch-distributed"


def rel(spec: Path) -> str:
    """The spec's path in the repository."""
    return str(spec.relative_to(REPO))


def trainjob_refusal(spec: Path) -> str | None:
    """The field the compiler's refusal of ``spec`` under -t trainjob names ("": a golden case's,
    pinned by tests/errors), or None when it compiles."""
    if spec.parent.parent == GOLDEN:
        return None if (spec.parent / "trainjob.yaml").is_file() else ""
    return TRAINJOB_REFUSED.get(rel(spec))


def platform_runtimes(cluster: Cluster, docs: Sequence[Mapping[str, Any]]) -> Iterator[dict[str, Any]]:
    """The runtimes the TrainJobs of ``docs`` reference but do not bring: the platform's, here the
    stock torch-distributed runtime under the name (and kind: a namespaced TrainingRuntime or a
    ClusterTrainingRuntime) the TrainJob gives."""
    ours = {d["metadata"]["name"] for d in docs if d["kind"] == "TrainingRuntime"}
    for d in docs:
        ref = d["spec"].get("runtimeRef", {}) if d["kind"] == "TrainJob" else {}
        kind = ref.get("kind", "ClusterTrainingRuntime")
        if ref.get("name") == STOCK_RUNTIME and kind == "ClusterTrainingRuntime":
            continue
        if ref and not (kind == "TrainingRuntime" and ref["name"] in ours):
            stock = cluster.dynamic.resources.get(
                api_version="trainer.kubeflow.org/v1alpha1", kind="ClusterTrainingRuntime"
            ).get(name=STOCK_RUNTIME)
            yield {
                "apiVersion": "trainer.kubeflow.org/v1alpha1",
                "kind": kind,
                "metadata": {"name": ref["name"], "labels": dict(stock.metadata.labels or {})},
                "spec": stock.to_dict()["spec"],
            }
