"""Issue 27, class 4: import keeps a PyTorchJob's size and range as training-operator v1 sets PET_NNODES.

With an elasticPolicy every pod, a Master included, gets PET_NNODES=MIN:MAX as written; one
bound alone is copied to the other; with neither, both are the Worker replicas and the Master is
not counted (kubeflow/trainer#2277). Sources: kubeflow/trainer@v1.9.4:pkg/controller.v1/pytorch/
elastic.go:124-144 (generateEnvNnodes), pkg/apis/kubeflow.org/v1/pytorch_defaults.go:38-55
(setElasticPolicy), envvar.go:106-123. The original's pods are those of the operator emulation
(elastic_compile/localrun/kubeflow.py), and so are the compiled job's.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from elastic_compile.compiler.importer import import_stream
from elastic_compile.compiler.pipeline import compile_text
from elastic_compile.core.emit import to_yaml
from elastic_compile.localrun import kubeflow


def _job(master: bool, workers: int, policy: dict[str, Any] | None) -> dict[str, Any]:
    def replica(count: int) -> dict[str, Any]:
        container = {"name": "pytorch", "image": "x:1.0", "command": ["torchrun", "t.py"]}
        return {"replicas": count, "restartPolicy": "OnFailure", "template": {"spec": {"containers": [container]}}}

    replicas = {"Worker": replica(workers)}
    if master:
        replicas["Master"] = replica(1)
    spec: dict[str, Any] = {"pytorchReplicaSpecs": replicas}
    if policy is not None:
        spec["elasticPolicy"] = {"rdzvBackend": "c10d", "maxRestarts": 3, **policy}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "mw"}, "spec": spec}


def _nnodes(job: dict[str, Any]) -> tuple[int, set[str]]:
    """(pods the operator creates, the PET_NNODES they get)."""
    pods = kubeflow.pods(job)
    # torchrun reads N as N:N (torch/distributed/run.py parse_min_max_nnodes).
    return len(pods), {p.env["PET_NNODES"] if ":" in p.env["PET_NNODES"] else "{0}:{0}".format(p.env["PET_NNODES"])
                       for p in pods}  # fmt: skip


@pytest.mark.parametrize(
    ("master", "workers", "policy", "nnodes", "pods"),
    [
        # The case: Master + 2 Workers, 1:3 as written: the range and the size (3 pods) stay.
        (True, 2, {"minReplicas": 1, "maxReplicas": 3}, "1:3", 3),
        (True, 1, {"minReplicas": 2, "maxReplicas": 2}, 2, 2),
        (True, 2, {"maxReplicas": 4}, 4, 4),  # one bound copied to the other
        (True, 3, {"minReplicas": 1}, 1, 1),  # PET_NNODES=1:1: one pod of four trained
        (True, 2, {}, 2, 2),  # neither: the Worker replicas, the Master not counted (#2277)
        (False, 3, {"minReplicas": 1, "maxReplicas": 3}, "1:3", 3),
        (True, 2, None, 3, 3),  # static Master + Workers: PET_NNODES is every replica (envvar.go:117-123)
    ],
)
def test_import_keeps_pet_nnodes(
    master: bool, workers: int, policy: dict[str, Any] | None, nnodes: int | str, pods: int
) -> None:
    original = _job(master, workers, policy)
    (imported,) = import_stream(to_yaml([original]), "job.yaml")
    spec = yaml.safe_load(imported.text)
    assert spec.get("nnodes", 1) == nnodes, imported.text
    compiled = next(o.doc for o in compile_text(imported.text, "s.yaml").outputs if o.doc["kind"] == "PyTorchJob")
    count, ranges = _nnodes(compiled)
    assert count == pods
    before_count, before = _nnodes(original)
    if policy is not None:
        assert ranges == before  # the range torch sees is the original's, on every pod
    else:
        assert ranges == before == {f"{before_count}:{before_count}"}
    notes = "\n".join(map(str, imported.notes))
    if before_count != count:
        assert (
            f"the compiled job starts {count} pods (the most nnodes allows); the manifest started {before_count}"
            in (notes)
        )
    if master and policy == {}:
        assert "kubeflow/trainer#2277" in notes
