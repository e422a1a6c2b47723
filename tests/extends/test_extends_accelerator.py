"""``accelerator`` through ``extends:``: the platform names its label once, jobs name their device.

A platform base sets ``accelerator_label`` (and its tolerations); a team or a job sets the
device. ``accelerator`` is replaced whole (a device and its partition are one piece of
hardware), ``accelerator_tolerations`` merge by key and effect, and ``--explain`` names the
file and line of the device, of the label, and the nodeSelector they make.
"""

from __future__ import annotations

import pytest
from extends_helpers import JOB, Write, compile_file, pod

from elastic_compile.compiler.cli import main
from elastic_compile.core.errors import SpecError

ACC, PART = "cloud.google.com/gke-accelerator", "cloud.google.com/gke-gpu-partition-size"
GPU_TAINT = "{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}"
PLATFORM = f"""\
image: reg/platform:1
resources: {{requests: {{gpu: 1}}}}
accelerator_label: cloud.google.com/gke-accelerator
accelerator_tolerations: [{GPU_TAINT}]
"""
SLICES = """\
extends: _platform.elastic.yaml
accelerator: {device: nvidia-tesla-a100, partition: 1g.5gb}
"""


@pytest.fixture
def tree_files(write: Write) -> None:
    write({"_platform.elastic.yaml": PLATFORM, "_slices.elastic.yaml": SLICES})


def test_the_base_names_the_label_and_the_job_the_device(tree_files: None, write: Write) -> None:
    write({"job.elastic.yaml": f"extends: _platform.elastic.yaml\n{JOB}accelerator: nvidia-l4\n"})
    spec = pod(compile_file("job.elastic.yaml"))
    assert spec["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-l4"}
    assert spec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


@pytest.mark.parametrize(
    ("written", "expected"),
    [
        # The mapping is replaced whole: the base's partition does not survive a new device.
        ("accelerator: {device: nvidia-tesla-a100}", {ACC: "nvidia-tesla-a100"}),
        ("accelerator: nvidia-l4", {ACC: "nvidia-l4"}),
        ("accelerator: {device: nvidia-a100-80gb, partition: 2g.20gb}", {ACC: "nvidia-a100-80gb", PART: "2g.20gb"}),
        ("", {ACC: "nvidia-tesla-a100", PART: "1g.5gb"}),
        ("accelerator: null", None),  # removed: any GPU, no selector
    ],
)  # fmt: skip
def test_accelerator_replaces_the_inherited_one_whole(
    tree_files: None, write: Write, written: str, expected: dict[str, str] | None
) -> None:
    write({"job.elastic.yaml": f"extends: _slices.elastic.yaml\n{JOB}{written}\n"})
    compiled = compile_file("job.elastic.yaml")
    assert pod(compiled).get("nodeSelector") == expected
    assert ("tolerations" in pod(compiled)) is (expected is not None)


def test_tolerations_merge_by_key_and_effect(tree_files: None, write: Write) -> None:
    write(
        {
            "job.elastic.yaml": f"extends: _slices.elastic.yaml\n{JOB}accelerator_tolerations:\n"
            "  - {key: nvidia.com/gpu, operator: Equal, value: present, effect: NoSchedule}\n"
            "  - {key: spot, operator: Exists, effect: NoSchedule}\n"
        }
    )
    assert pod(compile_file("job.elastic.yaml"))["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"},
        {"key": "spot", "operator": "Exists", "effect": "NoSchedule"},
    ]


def test_errors_are_located_in_the_file_that_wrote_them(write: Write) -> None:
    write(
        {
            "_base.elastic.yaml": "image: reg/a:1\nresources: {requests: {gpu: 1}}\naccelerator: nvidia-tesla-a1000\n",
            "job.elastic.yaml": f"extends: _base.elastic.yaml\n{JOB}",
            "_nolabel.elastic.yaml": "image: reg/a:1\nresources: {requests: {gpu: 2}}\n",
            "other.elastic.yaml": f"extends: _nolabel.elastic.yaml\n{JOB}accelerator: nvidia-l4\n",
        }
    )
    with pytest.raises(SpecError) as e:
        compile_file("job.elastic.yaml")
    [problem] = e.value.problems
    assert str(problem).startswith("_base.elastic.yaml:3:14: accelerator.device: not a device type of flytekit's")
    with pytest.raises(SpecError) as e:
        compile_file("other.elastic.yaml")
    [problem] = e.value.problems
    assert str(problem).startswith("other.elastic.yaml:4:14: accelerator: nvidia-l4 is selected by a node label")


def test_explain_names_where_the_device_type_came_from(
    tree_files: None, write: Write, capsys: pytest.CaptureFixture[str]
) -> None:
    write({"teams/job.elastic.yaml": f"extends: ../_slices.elastic.yaml\n{JOB}nnodes: 2\n"})
    assert main(["teams/job.elastic.yaml", "--explain"]) == 0
    lines = capsys.readouterr().out.splitlines()
    row = {line.split(":", 1)[0]: line.rpartition("  # ")[2] for line in lines if not line.startswith("#")}
    assert row["accelerator.device"] == row["accelerator.partition"] == "_slices.elastic.yaml:2"
    assert row["accelerator_label"] == "_platform.elastic.yaml:3"
    assert row["accelerator_tolerations"] == "_platform.elastic.yaml:4"
    assert row["nproc_per_node"] == "derived: 1, one process on the pod's one MIG slice (nvidia.com/mig-1g.5gb: 1)"
    assert (
        "# accelerator nvidia-tesla-a100: nodeSelector {cloud.google.com/gke-accelerator: nvidia-tesla-a100, "
        "cloud.google.com/gke-gpu-partition-size: 1g.5gb} (GKE preset); 1 toleration(s) from accelerator_tolerations"
    ) in lines


def test_explain_of_the_short_form_points_at_it(
    tree_files: None, write: Write, capsys: pytest.CaptureFixture[str]
) -> None:
    write({"job.elastic.yaml": f"extends: _platform.elastic.yaml\n{JOB}accelerator: nvidia-l4\n"})
    assert main(["job.elastic.yaml", "--explain"]) == 0
    lines = capsys.readouterr().out.splitlines()
    [row] = [line for line in lines if line.startswith("accelerator:")]
    assert row.startswith('accelerator: {"device": "nvidia-l4"}') and row.endswith("# job.elastic.yaml:4")


def test_the_spec_docs_excerpt_is_real_output(write: Write, capsys: pytest.CaptureFixture[str]) -> None:
    """docs/spec.md's --explain excerpt, from the files it names (blanks between value and comment aside)."""
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "spec.md").read_text()
    block = doc.split("and the\nnodeSelector they make:\n\n```text\n", 1)[1].split("```", 1)[0]
    write({"_platform.elastic.yaml": PLATFORM.replace(f"accelerator_tolerations: [{GPU_TAINT}]\n", ""),
           "_slices.elastic.yaml": SLICES, "job.elastic.yaml": f"extends: _slices.elastic.yaml\n{JOB}"})  # fmt: skip
    assert main(["job.elastic.yaml", "--explain"]) == 0
    out = {" ".join(line.split()) for line in capsys.readouterr().out.splitlines()}
    shown = [" ".join(line.split()) for line in block.splitlines()]
    assert len(shown) == 4 and [line for line in shown if line not in out] == []
