"""A TrainJob (``-t trainjob``) gets the guarantees of issue 18 that a PyTorchJob has.

What a custom ``trainjob.yaml.j2`` or ``trainingruntime.yaml.j2`` renders is linted like a
spec: secrets by value (EC107, never printed), invisible characters (EC112), values that
hide text (EC113), privileged containers (EC109) and host namespaces (EC108), in the
TrainJob's trainer and runtimePatches and in our TrainingRuntime's pod template; a
runtimePatches entry that names only init containers is a pod spec too. ``--explain``
escapes control sequences in the TrainJob's layout lines as in the PyTorchJob's.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from support.cli import run_cli

from elastic_compile.compiler.cli import main
from elastic_compile.compiler.render import BUILTIN_TEMPLATES

ROOT = Path(__file__).resolve().parents[2]
# A TrainJob on the stock runtime, and one that needs our TrainingRuntime (a sidecar, a port).
STOCK = ROOT / "tests" / "golden" / "minimal" / "elastic.yaml"
OWN_RUNTIME = ROOT / "tests" / "golden" / "trainjob-sidecar-runtime" / "elastic.yaml"
TRAINJOB = (BUILTIN_TEMPLATES / "trainjob.yaml.j2").read_text()
RUNTIME = (BUILTIN_TEMPLATES / "trainingruntime.yaml.j2").read_text()
TRAINER_LINE = "  trainer: {{ plan.trainer | to_yaml }}\n"
PATCHES_LINE = "  runtimePatches: {{ plan.runtime_patches | to_yaml }}\n"
RUNTIME_SPEC_LINE = "spec: {{ plan.runtime.spec | to_yaml }}\n"
# A GitHub token's shape (not a real one): EC107 must find it and never print it.
TOKEN = "ghp_" + "Zq7RtV2xLm9KpW4sNc8Hd3Jf6Gb1Ya5Ue0Ti"


def _templates(tmp_path: Path, name: str, text: str) -> Path:
    folder = tmp_path / "templates"
    folder.mkdir(exist_ok=True)
    (folder / name).write_text(text)
    return folder


def _trainer_with(tmp_path: Path, expression: str) -> Path:
    """A custom trainjob.yaml.j2 whose trainer is ``expression`` (Jinja, over ``plan.trainer``)."""
    assert TRAINER_LINE in TRAINJOB, "the built-in template changed shape"
    return _templates(
        tmp_path, "trainjob.yaml.j2", TRAINJOB.replace(TRAINER_LINE, f"  trainer: {{{{ {expression} | to_yaml }}}}\n")
    )


def _compile(spec: Path, folder: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    return run_cli(capsys, spec, "-t", "trainjob", "--templates", folder, *args)


def test_a_secret_a_template_puts_in_the_trainer_env_is_found_and_not_printed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _trainer_with(
        tmp_path, f'dict(plan.trainer, env=plan.trainer.env + [{{"name": "NOTE", "value": "{TOKEN}"}}])'
    )
    template = folder / "trainjob.yaml.j2"
    code, out, err = _compile(STOCK, folder, capsys)
    assert code == 0 and TOKEN in out, err
    index = len(yaml.safe_load(out)["spec"]["trainer"]["env"]) - 1
    assert err.startswith(f"{template}:1:1: spec.trainer.env[{index}].value: warning EC107: "), err
    assert "a GitHub token (not shown)" in err and TOKEN not in err
    code, out, err = _compile(STOCK, folder, capsys, "--strict")
    assert (code, out) == (2, "") and "error EC107" in err and TOKEN not in err


@pytest.mark.parametrize(
    ("arg", "code", "fragment"),
    [
        ("train.py\u202e", "EC112", "U+202E RIGHT-TO-LEFT OVERRIDE (a bidi control)"),
        ("x\u200by", "EC112", "U+200B ZERO WIDTH SPACE (an invisible character)"),
        ("a" * 2000, "EC113", "is 2000 characters long"),
        ("ok\n- rm -rf /", "EC113", "a later line reads like another YAML entry"),
    ],
    ids=["bidi", "zero-width", "long", "fake-entry"],
)
def test_text_a_reviewer_cannot_trust_in_the_trainer_args(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], arg: str, code: str, fragment: str
) -> None:
    folder = _trainer_with(tmp_path, f"dict(plan.trainer, args=plan.trainer.args + [{arg!r}])")
    status, out, err = _compile(STOCK, folder, capsys)
    assert status == 0, err
    index = len(yaml.safe_load(out)["spec"]["trainer"]["args"]) - 1
    [warning] = [line for line in err.splitlines() if code in line]
    assert f"spec.trainer.args[{index}]: warning {code}: " in warning and fragment in warning, err
    assert all(line.isprintable() for line in err.splitlines())
    status, out, err = _compile(STOCK, folder, capsys, "--strict")
    assert (status, out) == (2, "") and f"error {code}" in err


def test_our_training_runtime_is_linted_for_privileged_containers_and_host_namespaces(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert RUNTIME_SPEC_LINE in RUNTIME, "the built-in template changed shape"
    sets = (
        "{% set rjob = plan.runtime.spec.template.spec.replicatedJobs[0] %}\n"
        "{% set pod = rjob.template.spec.template.spec %}\n"
        '{% set helper = {"name": "helper", "image": "busybox:1.36", "restartPolicy": "Always", '
        '"securityContext": {"privileged": true}} %}\n'
        "{% set pod2 = dict(pod, hostPID=true, initContainers=pod.initContainers + [helper]) %}\n"
        "{% set job2 = dict(rjob.template.spec, template=dict(rjob.template.spec.template, spec=pod2)) %}\n"
        "{% set rjob2 = dict(rjob, template=dict(rjob.template, spec=job2)) %}\n"
        "{% set spec2 = dict(plan.runtime.spec, template=dict(plan.runtime.spec.template, "
        "spec=dict(plan.runtime.spec.template.spec, replicatedJobs=[rjob2]))) %}\n"
    )
    folder = _templates(
        tmp_path, "trainingruntime.yaml.j2", sets + RUNTIME.replace(RUNTIME_SPEC_LINE, "spec: {{ spec2 | to_yaml }}\n")
    )
    template = folder / "trainingruntime.yaml.j2"
    code, out, err = _compile(OWN_RUNTIME, folder, capsys)
    assert code == 0, err
    runtime = next(yaml.safe_load_all(out))
    pod_spec = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    index = [c["name"] for c in pod_spec["initContainers"]].index("helper")
    pod = "spec.template.spec.replicatedJobs[0].template.spec.template.spec"
    lines = err.splitlines()
    assert len(lines) == 2, err
    assert lines[0].startswith(f"{template}:1:1: {pod}.hostPID: warning EC108: hostPID: true: "), err
    assert lines[1].startswith(
        f"{template}:1:1: {pod}.initContainers[{index}].securityContext.privileged: warning EC109: "
        "container helper is privileged (rendered by this template)"
    ), err
    code, out, err = _compile(OWN_RUNTIME, folder, capsys, "--strict")
    assert (code, out) == (2, "") and err.count("error EC10") == 2


def test_a_runtime_patch_of_init_containers_only_is_a_pod_spec_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A second runtimePatches entry that makes our runtime's native sidecar privileged."""
    assert PATCHES_LINE in TRAINJOB, "the built-in template changed shape"
    patch = (
        '{"manager": "example.com/platform", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": '
        '[{"name": "node", "template": {"spec": {"template": {"spec": {"initContainers": '
        '[{"name": "metrics", "securityContext": {"privileged": true}}]}}}}}]}}}}'
    )
    text = TRAINJOB.replace(PATCHES_LINE, f"  runtimePatches: {{{{ (plan.runtime_patches + [{patch}]) | to_yaml }}}}\n")
    folder = _templates(tmp_path, "trainjob.yaml.j2", text)
    code, out, err = _compile(OWN_RUNTIME, folder, capsys)
    assert code == 0, err
    job = list(yaml.safe_load_all(out))[1]
    assert job["spec"]["runtimePatches"][1]["manager"] == "example.com/platform"
    pod = "spec.runtimePatches[1].trainingRuntimeSpec.template.spec.replicatedJobs[0].template.spec.template.spec"
    assert err.startswith(
        f"{folder / 'trainjob.yaml.j2'}:1:1: {pod}.initContainers[0].securityContext.privileged: warning EC109: "
        "container metrics is privileged"
    ), err


def test_a_runtime_patch_cannot_even_carry_host_namespaces(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Trainer's CRD has no hostNetwork in a runtimePatches pod spec: the output check refuses it."""
    expression = (
        "[dict(plan.runtime_patches[0], trainingRuntimeSpec={'template': {'spec': {'replicatedJobs': "
        "[{'name': 'node', 'template': {'spec': {'template': {'spec': {'hostNetwork': true}}}}}]}}})]"
    )
    folder = _templates(
        tmp_path,
        "trainjob.yaml.j2",
        TRAINJOB.replace(PATCHES_LINE, f"  runtimePatches: {{{{ {expression} | to_yaml }}}}\n"),
    )
    code, out, err = _compile(STOCK, folder, capsys)
    assert (code, out) == (2, "") and "hostNetwork" in err, err


def test_explain_of_a_trainjob_prints_no_raw_control_sequence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(
        "name: t\ntarget: trainjob\nimage: ghcr.io/x/y:1.0\n"
        'command: [python, "\\e[2Jtrain.py\\u202e", "\\u009b31m"]\nnproc_per_node: 1\n'
    )
    assert main([str(spec), "--explain", "--ignore", "EC112"]) == 0
    out = capsys.readouterr().out
    layout = [line for line in out.splitlines() if line.startswith("# container command: ")]
    assert len(layout) == 1 and "--rdzv-at-master" in layout[0], out
    assert all(line.isprintable() for line in out.splitlines())
    assert "\\x1b[2Jtrain.py\\u202e" in layout[0] and "\\x9b31m" in layout[0], layout
