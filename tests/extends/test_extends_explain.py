"""--explain names, for every value, the file and line it came from: the spec or one of its bases."""

from __future__ import annotations

import pytest
from extends_helpers import Write

from elastic_compile.compiler.cli import main

PLATFORM = """\
x-labels: &labels {cost-center: ml}
image: reg/platform:1
labels: *labels
env: {NCCL_DEBUG: WARN, NCCL_IB_HCA: mlx5}
resources:
  requests: {cpu: 8, memory: 64Gi}
  limits: {memory: 64Gi}
pod_template:
  spec:
    tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
"""
TEAM = """\
extends: ../../platform/_defaults.elastic.yaml
namespace: nlp
env:
  - name: WANDB_API_KEY
    valueFrom: {secretKeyRef: {name: wandb, key: api-key}}
pod_template:
  spec:
    tolerations: [{key: spot, operator: Exists, effect: NoSchedule}]
"""
JOB = """\
extends: _team.elastic.yaml
name: llm
command: [python, train.py]
resources:
  requests: {cpu: 16}
env: {NCCL_DEBUG: INFO}
"""


@pytest.fixture
def rows(write: Write, capsys: pytest.CaptureFixture[str]) -> dict[str, str]:
    """``--explain``'s rows: path -> the comment naming where the value came from."""
    write(
        {
            "platform/_defaults.elastic.yaml": PLATFORM,
            "teams/nlp/_team.elastic.yaml": TEAM,
            "teams/nlp/llm.elastic.yaml": JOB,
        }
    )
    assert main(["teams/nlp/llm.elastic.yaml", "--explain"]) == 0
    out = capsys.readouterr().out
    found = {}
    for line in out.splitlines()[1:]:
        if not line.startswith("#"):
            value, _, source = line.partition("  # ")
            found[value.split(":", 1)[0].strip()] = source
    found["#"] = out.splitlines()[0]
    return found


def test_the_header_names_the_chain(rows: dict[str, str]) -> None:
    assert rows["#"] == (
        "# llm: every setting, resolved from teams/nlp/llm.elastic.yaml, extending teams/nlp/_team.elastic.yaml, "
        "platform/_defaults.elastic.yaml"
    )


@pytest.mark.parametrize(
    ("path", "source"),
    [
        ("extends", "teams/nlp/llm.elastic.yaml:1"),
        ("name", "teams/nlp/llm.elastic.yaml:2"),
        ("namespace", "teams/nlp/_team.elastic.yaml:2"),
        ("image", "platform/_defaults.elastic.yaml:2"),
        ("labels", "platform/_defaults.elastic.yaml:1"),  # where the anchor's mapping is written
        ("resources.requests.cpu", "teams/nlp/llm.elastic.yaml:5"),
        ("resources.requests.memory", "platform/_defaults.elastic.yaml:6"),
        ("resources.limits", "platform/_defaults.elastic.yaml:7"),
        ("env[0]", "teams/nlp/llm.elastic.yaml:6"),  # NCCL_DEBUG, overridden in place
        ("env[1]", "platform/_defaults.elastic.yaml:4"),  # NCCL_IB_HCA
        ("env[2]", "teams/nlp/_team.elastic.yaml:4"),  # WANDB_API_KEY
        ("pod_template.spec.tolerations[0]", "platform/_defaults.elastic.yaml:10"),
        ("pod_template.spec.tolerations[1]", "teams/nlp/_team.elastic.yaml:8"),
        (
            "max_restarts",
            "default 3: losing a node or a transient NCCL error costs one restart, and torchrun's 0 "
            "turns every blip into a failed job.",
        ),
    ],
)
def test_every_value_names_its_file_and_line(rows: dict[str, str], path: str, source: str) -> None:
    assert rows[path] == source


def test_a_spec_without_bases_explains_as_before(write: Write, capsys: pytest.CaptureFixture[str]) -> None:
    write({"job.elastic.yaml": "name: job\nimage: reg/t:1\ncommand: [x]\nenv: {A: a, B: b}\n"})
    assert main(["job.elastic.yaml", "--explain"]) == 0
    out = capsys.readouterr().out
    assert 'env: {"A": "a", "B": "b"}' in out and "# job.elastic.yaml:4" in out
    assert "extends" not in out and "extending" not in out
