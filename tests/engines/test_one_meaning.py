"""Issue 27, class 7: run_policy.scheduling.queue has one meaning, the gang scheduler's queue.

A PyTorchJob passes it to the gang scheduler as runPolicy.schedulingPolicy.queue
(kubeflow/trainer@v1.9.4:pkg/apis/kubeflow.org/v1/common_types.go:236-251, SchedulingPolicy);
Kueue reads the label kueue.x-k8s.io/queue-name on the job instead (kueue.queue, on both
generations). A TrainJob has no schedulingPolicy: the field is a located error there, saying where
each queue goes now (-t trainjob wrote Kueue's label from it before). Volcano's queue on a
TrainJob is the JobSet-level annotation Trainer's Volcano plugin reads
(kubeflow/trainer@v2.3.0:pkg/runtime/framework/plugins/volcano/volcano.go:180-184, with the
annotations of pkg/runtime/core/trainingruntime.go:145-160): trainjob.jobset_metadata.
"""

from __future__ import annotations

import pytest

from elastic_compile.compiler.pipeline import compile_text
from elastic_compile.core.errors import SpecError

SPEC = "name: j\nimage: x:1.0\ncommand: [python, t.py]\nnnodes: 2\nnproc_per_node: 1\n"


def _job(text: str, target: str) -> dict[str, object]:
    outputs = compile_text(text, "s.yaml", targets=(target,)).outputs
    return next(o.doc for o in outputs if o.doc["kind"] in ("PyTorchJob", "TrainJob"))


def test_the_gang_schedulers_queue_on_a_pytorchjob_and_an_error_on_a_trainjob() -> None:
    text = SPEC + "run_policy: {scheduling: {queue: volcano-q}}\n"
    job = _job(text, "pytorchjob")
    assert job["spec"]["runPolicy"]["schedulingPolicy"] == {"queue": "volcano-q"}  # type: ignore[index]
    assert "labels" not in job["metadata"]  # type: ignore[operator]
    with pytest.raises(SpecError) as e:
        _job(text, "trainjob")
    (problem,) = e.value.problems
    assert (problem.line, problem.col, problem.path) == (6, 34, "run_policy.scheduling.queue")
    assert "write kueue: {queue: ...}" in problem.message
    assert "trainjob.jobset_metadata.annotations {scheduling.volcano.sh/queue-name: ...}" in problem.message
    assert "which -t trainjob wrote from this field before" in problem.message


@pytest.mark.parametrize("target", ["pytorchjob", "trainjob"])
def test_kueues_queue_is_the_same_label_on_both(target: str) -> None:
    job = _job(SPEC + "kueue: {queue: team-a}\n", target)
    assert job["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": "team-a"}  # type: ignore[index]
    assert "schedulingPolicy" not in job["spec"].get("runPolicy", {})  # type: ignore[union-attr]


def test_volcanos_queue_on_a_trainjob_is_where_trainers_plugin_reads_it() -> None:
    text = SPEC + (
        "target: trainjob\ntrainjob:\n  runtime: torch-volcano\n"
        "  jobset_metadata: {annotations: {scheduling.volcano.sh/queue-name: volcano-q}}\n"
    )
    job = _job(text, "trainjob")
    (patch,) = job["spec"]["runtimePatches"]  # type: ignore[index]
    assert patch["trainingRuntimeSpec"]["template"]["metadata"] == {
        "annotations": {"scheduling.volcano.sh/queue-name": "volcano-q"}
    }
