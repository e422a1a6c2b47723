"""Issue 27, class 9: docs/trainer-v2.md says the env order the output has.

The compiled TrainJob's trainer.env holds elastic-launch's downward-API entries first, then the
spec's (targets/pod.py), so a value may use $(ELASTIC_LAUNCH_POD_IP); Trainer's torch plugin
upserts its five PET_* after trainer.env (kubeflow/trainer@v2.3.0:pkg/runtime/framework/plugins/torch/
torch.go:141-176; test/integration/controller/trainjob_controller_test.go:444-476), which the
emulation gives the pods. The docs row is held to both.
"""

from __future__ import annotations

from pathlib import Path

from elastic_compile import contract
from elastic_compile.compiler.pipeline import compile_text
from elastic_compile.localrun import trainer

SPEC = (
    "name: tj\nimage: x:1.0\ncommand: [python, t.py]\nnnodes: 2\nnproc_per_node: 1\ntarget: trainjob\n"
    'env: {METRICS_ADDR: "$(ELASTIC_LAUNCH_POD_IP):9090", HF_HOME: /data}\n'
)
DOCS = Path(__file__).resolve().parents[2] / "docs" / "trainer-v2.md"


def test_downward_entries_come_first_then_the_users_then_trainers() -> None:
    job = compile_text(SPEC, "s.yaml").outputs[-1].doc
    names = [e["name"] for e in job["spec"]["trainer"]["env"]]
    downward = [name for name, _path in contract.TRAINJOB_DOWNWARD_ENV]
    assert names == [*downward, "METRICS_ADDR", "HF_HOME"]
    (pod, _) = trainer.pods(job, local=False)
    assert list(pod.env)[: len(names)] == names
    assert set(list(pod.env)[len(names) : len(names) + 5]) == contract.TRAINER_RESERVED_ENV
    assert pod.env["METRICS_ADDR"].endswith(":9090") and "$(" not in pod.env["METRICS_ADDR"]  # expanded: defined before
    row = next(line for line in DOCS.read_text().splitlines() if line.startswith("| `env` (and the training container"))
    assert "first what elastic-launch reads from the downward API" in row and "then yours" in row
    assert "appends after all of these" in row
