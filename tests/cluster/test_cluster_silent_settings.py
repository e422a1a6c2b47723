"""Class 7 of issue 10: settings that silently do nothing.

* ``$(ELASTIC_LAUNCH_*)`` in a user env value: the kubelet expands a reference only against
  the entries before it, so the compiler's downward-API entries come first;
* a reference that cannot expand (listed later, appended by the operator, set nowhere): EC111;
* ``backoff_limit`` with ExitCode counts nothing (kubeflow/trainer#2045): EC110, and
  ``--explain`` says what bounds such a job;
* a launcher nested in ``command`` (torchrun, python -m torch.distributed.run): an error with
  the command to write instead.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cluster_helpers import BASE, compile_cli, run_cli

from elastic_compile import contract

DOWNWARD = [name for name, _ in contract.DOWNWARD_ENV]


def test_downward_entries_come_first_so_user_values_can_use_them(tmp_path: Path) -> None:
    run = compile_cli(tmp_path, BASE + 'env:\n  METRICS_ADDR: "$(ELASTIC_LAUNCH_POD_IP):9090"\n')
    assert run.status == 0 and run.err == ""
    names = [e["name"] for e in run.training["env"]]
    assert names == [*DOWNWARD, "METRICS_ADDR"]


def test_the_local_run_expands_the_reference_as_the_kubelet_does(tmp_path: Path) -> None:
    text = BASE + 'env:\n  METRICS_ADDR: "$(ELASTIC_LAUNCH_POD_IP):9090"\n  JOB: "$(ELASTIC_LAUNCH_JOB_NAME)-x"\n'
    (tmp_path / "s.yaml").write_text(text.replace("[python, t.py]", "[python, t.py, $(JOB)]"))
    result = run_cli(tmp_path / "s.yaml", "--dry-run")
    assert result.status == 0, result.err
    [pod] = json.loads(result.out)["pods"]
    assert pod["env"]["METRICS_ADDR"] == "127.0.0.1:9090"  # the pod IP is 127.0.0.1 here
    assert pod["env"]["JOB"] == "t-x"
    assert pod["command"][-3:] == ["python", "t.py", "t-x"]


@pytest.mark.parametrize(
    ("env", "ref", "why"),
    [
        ('  A: "$(B)/x"\n  B: b\n', "B", "it is listed after this entry"),
        ('  A: "$(PET_NNODES)/x"\n', "PET_NNODES", "the training operator appends it after your entries"),
        ('  A: "$(NOWHERE)/x"\n', "NOWHERE", "nothing sets it in this container"),
    ],
)
def test_a_reference_that_cannot_expand_is_a_warning(tmp_path: Path, env: str, ref: str, why: str) -> None:
    run = compile_cli(tmp_path, BASE + "env:\n" + env)
    assert run.status == 0
    assert run.errors == [
        f"s.yaml:5:6: env.A: warning EC111: $({ref}) in A stays literal: {why}; the kubelet expands $(NAME) only "
        f"against env entries listed before it; otherwise it stays literal (given: $({ref})/x)"
    ]


@pytest.mark.parametrize(
    "env", ['  A: "$$(B)"\n  B: b\n', '  B: b\n  A: "$(B)"\n', '  A: "$(ELASTIC_LAUNCH_NAMESPACE)"\n', "  A: x\n"]
)
def test_references_that_expand_are_quiet(tmp_path: Path, env: str) -> None:
    run = compile_cli(tmp_path, BASE + "env:\n" + env)
    assert (run.status, run.err) == (0, "")


def test_backoff_limit_with_exit_code_warns_and_explain_says_what_bounds_the_job(tmp_path: Path) -> None:
    text = BASE + "run_policy: {backoff_limit: 3}\n"
    run = compile_cli(tmp_path, text)
    assert run.status == 0
    [line] = run.errors
    assert line.startswith("s.yaml:4:29: run_policy.backoff_limit: warning EC110: backoff_limit 3 with restart_policy")
    assert "recreated forever; bound the job with run_policy.active_deadline_seconds" in line
    explain = compile_cli(tmp_path, text, "--explain").out
    assert "run_policy.backoff_limit: 3" in explain
    assert "# restartPolicy ExitCode: exit 1-127 fails the job; 128 or more deletes and recreates the pod" in explain


@pytest.mark.parametrize(
    ("policy", "fires"), [("ExitCode", True), ("Never", True), ("OnFailure", False), ("Always", False)]
)
def test_backoff_limit_warns_only_where_it_counts_nothing(tmp_path: Path, policy: str, fires: bool) -> None:
    run = compile_cli(tmp_path, BASE + f"restart_policy: {policy}\nrun_policy: {{backoff_limit: 2}}\n")
    assert run.status == 0
    assert ("EC110" in run.err) is fires


@pytest.mark.parametrize(
    ("command", "at", "fix"),
    [
        (
            "[torchrun, --nproc-per-node, '8', --nnodes=2, train.py, --lr, '1e-4']",
            "4:11: command[0]",
            "write command: [python, train.py, --lr, 1e-4]",
        ),
        ("[/opt/conda/bin/torchrun, --standalone, train.py]", "4:11: command[0]", "write command: [python, train.py]"),
        (
            "[python, -m, torch.distributed.run, --nnodes, '2', -m, pkg.train]",
            "4:23: command[2]",
            "write command: [python, -m, pkg.train]",
        ),
        ("[python3, -u, -m, torch.distributed.launch, t.py]", "4:28: command[3]", "write command: [python, t.py]"),
        ("[bash, -c, 'cd /app && torchrun train.py']", "4:21: command[2]", "give the training script itself"),
        ("[elastic-launch, --, python, t.py]", "4:11: command[0]", "write command: [python, t.py]"),
        # Found by bench/fuzz_spec.py: a word with a line break made the message two lines.
        (
            '[torchrun, train.py, "a\\nb", "trailing\\n", "x y"]',
            "4:11: command[0]",
            'write command: [python, train.py, "a\\nb", "trailing\\n", "x y"]',
        ),
    ],
)
def test_a_nested_launcher_is_an_error_with_the_command_to_write(
    tmp_path: Path, command: str, at: str, fix: str
) -> None:
    run = compile_cli(tmp_path, BASE.replace("command: [python, t.py]\n", "") + f"\ncommand: {command}\n")
    assert run.status == 2 and run.out == ""
    [line] = run.errors
    assert line.startswith(f"s.yaml:{at}: "), line
    assert "would be a second launcher: elastic-launch already is one" in line and fix in line, line


@pytest.mark.parametrize(
    "command",
    ["[python, train.py, torchrun]", "[python, -m, trainer.run]", "[bash, -c, 'python train.py --tag torchrunner']"],
)
def test_commands_that_only_mention_a_launcher_pass(tmp_path: Path, command: str) -> None:
    run = compile_cli(tmp_path, BASE.replace("[python, t.py]", command))
    assert run.status == 0, run.err
