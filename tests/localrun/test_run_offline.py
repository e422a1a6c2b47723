"""``elastic-compile run`` without running anything: ``--dry-run``, input handling and the rules' arithmetic.

No torch and no training here: these check what each pod would be given, in milliseconds.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from run_helpers import EXAMPLES, ROOT, new_marker, processes_with

from elastic_compile.compiler.cli import main
from elastic_compile.compiler.pipeline import compile_path
from elastic_compile.localrun import kubeflow, process

SHRINK = "name: shrink\nimage: local/test:1\ncommand: [python, train.py]\nnnodes: '1:2'\n"


def _dry(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any], str]:
    code = main(["run", *args, "--dry-run"])
    captured = capsys.readouterr()
    return code, (json.loads(captured.out) if code == 0 else {}), captured.err


def _compiled(capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    """The compiled cpu-ddp example, as plain YAML data (what kubectl would be given)."""
    assert main([str(EXAMPLES / "cpu-ddp.yaml")]) == 0
    job: dict[str, Any] = yaml.safe_load(capsys.readouterr().out)
    return job


def _env(view: dict[str, Any], key: str) -> list[str | None]:
    return [pod["env"].get(key) for pod in view["pods"]]


def test_gpu_example_becomes_a_cpu_run(capsys: pytest.CaptureFixture[str]) -> None:
    if process.local_gpus():
        pytest.skip("this machine has GPUs")
    code, view, err = _dry(capsys, str(EXAMPLES / "ddp-2x8-gpu.yaml"))
    assert code == 0, err
    note = "each pod requests 8 GPU(s) and this machine gives none, so this is a CPU run: nprocPerNode 1 (was 8)"
    assert note in err
    assert [p["name"] for p in view["pods"]] == ["llm-finetune-worker-0", "llm-finetune-worker-1"]
    assert _env(view, "PET_NPROC_PER_NODE") == ["1", "1"]
    assert _env(view, "NCCL_DEBUG") == ["WARN", "WARN"]  # the container's own env, untouched
    assert _env(view, "ELASTIC_LAUNCH_NAMESPACE") == ["ml-team", "ml-team"]
    # The console script beside this interpreter, as the image's: not python -m (issue 10, class 9).
    assert view["pods"][0]["local_command"][0] == str(Path(sys.executable).parent / "elastic-launch")
    assert view["pods"][0]["command"][0] == "elastic-launch"


def test_gpus_are_shared_out_between_pods() -> None:
    job = compile_path(EXAMPLES / "ddp-2x8-gpu.yaml").outputs[0].doc
    opts = process.Options(source="x")
    fitted, notes = kubeflow.fit_job(job, opts, gpus=["0", "1", "2", "3"], cpus=8, is_busy=lambda _p: False)
    assert fitted["spec"]["nprocPerNode"] == "2"
    assert notes == ["each pod requests 8 GPU(s) and this machine gives 2 each: nprocPerNode 2 (was 8)"]
    pods, _ = kubeflow.build_pods(fitted, environ={}, gpus=["0", "1", "2", "3"], token="t")
    assert [p.env["CUDA_VISIBLE_DEVICES"] for p in pods] == ["0,1", "2,3"]
    assert job["spec"]["nprocPerNode"] == "8"  # the input is not changed


@pytest.mark.parametrize(
    ("nproc", "gpus_requested", "gpus_per_pod", "expected"),
    [
        ("2", 0, 0, "2"),  # a CPU job stays as written
        ("8", 8, 0, "1"),  # one process per GPU, no GPU here: one CPU process
        ("8", 8, 2, "2"),
        ("8", 8, 8, "8"),
        ("4", 8, 2, "1"),  # two GPUs per process, scaled alike
        ("gpu", 8, 0, "2"),  # 4 CPUs shared by 2 pods
        ("gpu", 8, 1, "gpu"),  # the launcher counts the devices the pod sees
        ("auto", 0, 0, "2"),
        ("cpu", 0, 0, "2"),
    ],
)
def test_fit_nproc(nproc: str, gpus_requested: int, gpus_per_pod: int, expected: str) -> None:
    new, _note = kubeflow.fit_nproc(nproc, gpus_requested=gpus_requested, gpus_per_pod=gpus_per_pod, cpus=4, pods=2)
    assert new == expected


def test_nodes_within_the_elastic_range(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "shrink.yaml"
    path.write_text(SHRINK)
    code, view, err = _dry(capsys, str(path), "--nodes", "1")
    assert code == 0, err
    assert [p["name"] for p in view["pods"]] == ["shrink-worker-0"]
    assert _env(view, "PET_NNODES") == ["1:2"]  # the operator's range, not the pod count
    assert "--nodes 1: Worker.replicas 1 (was 2)" in err
    code, _view, err = _dry(capsys, str(path), "--nodes", "3")
    assert code == 2
    assert err == "elastic-compile run: error: --nodes 3: outside the job's elasticPolicy range 1..2\n"


def test_nproc_per_node_goes_through_the_operator_env(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "shrink.yaml"
    path.write_text(SHRINK)
    code, view, err = _dry(capsys, str(path), "--nproc-per-node", "3")
    assert code == 0, err
    assert _env(view, "PET_NPROC_PER_NODE") == ["3", "3"]
    assert "--nproc-per-node 3: nprocPerNode 3 (was 1)" in err
    assert "--nproc-per-node" not in view["pods"][0]["command"]  # the command stays the manifest's


def test_secret_refs_come_only_from_env_flags_never_from_this_shell(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A CI runner's variables reach a pod only when named with --env (issue 18 item 7)."""
    monkeypatch.setenv("WANDB_API_KEY", "from-the-shell")
    monkeypatch.setenv("HF_TOKEN", "also-from-the-shell")
    monkeypatch.delenv("DATASET", raising=False)
    spec = str(ROOT / "tests" / "golden" / "env-secret-refs" / "elastic.yaml")
    code, view, err = _dry(capsys, spec, "--env", "WANDB_API_KEY=given")
    assert code == 0, err
    assert _env(view, "WANDB_API_KEY") == ["given", "given"]
    assert _env(view, "HF_TOKEN") == [None, None]  # set in the shell, not passed
    assert "from-the-shell" not in json.dumps(view) and "also-from-the-shell" not in json.dumps(view)
    assert _env(view, "NODE_NAME") == ["localhost", "localhost"]  # a downward-API field
    assert "WANDB_API_KEY (secretKeyRef wandb/api-key): taken from --env" in err
    assert "warning: HF_TOKEN (secretKeyRef hf/token) needs the cluster: skipped (pass --env HF_TOKEN=VALUE" in err
    assert "warning: DATASET (configMapKeyRef datasets/current) needs the cluster" in err
    assert err.count("warning: HF_TOKEN") == 1  # one note per variable, not one per pod


def test_no_shell_variable_reaches_a_pod_but_what_an_image_brings(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    shell = {"CI_JOB_TOKEN": "s1-runner", "GITHUB_TOKEN": "s2-gh", "AWS_SECRET_ACCESS_KEY": "s3-aws"}
    shell["WANDB_API_KEY"] = "s4-wandb"  # the spec asks for it through a secretKeyRef
    for name, value in shell.items():
        monkeypatch.setenv(name, value)
    code, view, err = _dry(capsys, str(ROOT / "tests" / "golden" / "env-secret-refs" / "elastic.yaml"))
    assert code == 0, err
    assert not any(value in json.dumps(view) for value in shell.values())


def test_a_saved_manifest_runs_as_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = _compiled(capsys)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    code, view, err = _dry(capsys, str(path))
    assert code == 0, err
    assert view["workdir"] == str(tmp_path)  # a manifest's directory, like a spec's
    assert _env(view, "PET_NNODES") == ["2:2", "2:2"]
    assert _env(view, "HOSTNAME") == ["cpu-ddp-worker-0", "cpu-ddp-worker-1"]
    code, view, err = _dry(capsys, str(path), "--workdir", str(EXAMPLES))
    assert view["workdir"] == str(EXAMPLES)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--kill", "worker-9@3"], "--kill worker-9: no such pod (pods: cpu-ddp-worker-0, cpu-ddp-worker-1)"),
        (
            ["--kill", "worker-1"],
            "argument --kill: expected POD@SECONDS or POD@/TEXT/, e.g. worker-1@20 (given: worker-1)",
        ),
        (["--kill", "worker-9@/step 3/"], "--kill worker-9: no such pod (pods: cpu-ddp-worker-0, cpu-ddp-worker-1)"),
        (["--nodes", "0"], "argument --nodes: expected a positive integer (given: 0)"),
        (["--timeout", "soon"], "argument --timeout: expected a number of seconds > 0 (given: soon)"),
    ],
)
def test_bad_options(capsys: pytest.CaptureFixture[str], args: list[str], message: str) -> None:
    code, _view, err = _dry(capsys, str(EXAMPLES / "cpu-ddp.yaml"), *args)
    assert code == 2
    assert err == f"elastic-compile run: error: {message}\n"


def test_bad_inputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = _compiled(capsys)
    two = tmp_path / "two.yaml"
    two.write_text(yaml.safe_dump_all([job, {**job, "metadata": {"name": "other"}}]))
    assert (
        _dry(capsys, str(two))[2]
        == "elastic-compile run: error: " + f"{two}: 2 jobs (PyTorchJob cpu-ddp, PyTorchJob other); run takes one\n"
    )

    renamed = yaml.safe_load(yaml.safe_dump(job))
    renamed["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["name"] = "trainer"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(renamed))
    code, _view, err = _dry(capsys, str(bad))
    assert code == 2
    assert "must have a container named 'pytorch'" in err  # the operator's webhook would refuse it

    # is_host in every pod's PET_RDZV_CONF: each pod would start the store (here the second one
    # fails to bind, exit 202, and is recreated without end); refused before anything runs.
    hosted = yaml.safe_load(yaml.safe_dump(job))
    hosted["spec"]["elasticPolicy"]["rdzvConf"] = [{"key": "is_host", "value": "true"}]
    bad.write_text(yaml.safe_dump(hosted))
    code, _view, err = _dry(capsys, str(bad))
    assert code == 2
    assert "spec.elasticPolicy.rdzvConf[0].value: is_host true reaches every pod" in err

    spec = tmp_path / "typo.yaml"
    spec.write_text("name: x\nimage: i:1\ncommand: [python]\nnnodse: 2\n")
    code, _view, err = _dry(capsys, str(spec))
    assert code == 2
    assert err.startswith(f"{spec}:4:1: nnodse: unknown field")  # the compiler's located error

    code, _view, err = _dry(capsys, str(tmp_path / "missing.yaml"))
    # Read as compiling, doctor and import read what they are named: the same located line.
    missing = tmp_path / "missing.yaml"
    assert (code, err) == (2, f"{missing}:1:1: spec: cannot read the file: No such file or directory\n")


@pytest.mark.parametrize(
    ("limit", "restarts", "past"),
    [(None, 100, False), (0, 0, False), (0, 1, True), (1, 1, True), (2, 1, False), (2, 2, True)],
)
def test_backoff_limit_rule(limit: int | None, restarts: int, past: bool) -> None:
    rules = kubeflow.Rules("j", elastic=True, has_master=False, min_nodes=1, backoff_limit=limit,
                           clean_pod_policy="Running", active_deadline=None)  # fmt: skip
    assert rules.past_backoff_limit(restarts) is past


@pytest.mark.parametrize(
    ("policy", "host"),
    [
        ({"rdzvBackend": "c10d"}, "j-worker-0"),
        ({"rdzvBackend": "c10d", "rdzvHost": "j-worker-1"}, "j-worker-1"),
        ({"rdzvBackend": "etcd-v2", "rdzvHost": "etcd.example"}, None),  # the store is not a pod's
        (None, None),
    ],
)
def test_the_store_host_is_the_pod_the_endpoint_names(policy: dict[str, str] | None, host: str | None) -> None:
    spec: dict[str, object] = {"pytorchReplicaSpecs": {"Worker": {"replicas": 2}}}
    if policy is not None:
        spec["elasticPolicy"] = {"minReplicas": 1, "maxReplicas": 2, **policy}
    assert kubeflow.Rules.of({"metadata": {"name": "j"}, "spec": spec}).store_host == host


def test_stopping_a_pod_reaches_processes_in_other_sessions() -> None:
    """torch starts script-mode workers with setsid: the pod's process group alone would miss them."""
    marker = new_marker()
    child = (
        "import subprocess, sys, time\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], start_new_session=True)\n"
        "time.sleep(60)\n"
    )
    env = {**os.environ, process.MARKER_ENV: marker}
    proc = subprocess.Popen([sys.executable, "-c", child], env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while len(process.marked_processes(marker)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(process.marked_processes(marker)) == 2
        pod = process.LocalPod(pod=None, argv=[], env={}, grace=0, marker=marker, proc=proc)  # type: ignore[arg-type]
        assert process.kill_pod_processes(pod) >= 2
        assert proc.wait(5) == -signal.SIGKILL
        assert process.marked_processes(marker) == set()
        assert processes_with(marker) == []
    finally:
        if proc.poll() is None:
            proc.kill()


def test_run_reads_at_most_the_size_limit_from_stdin() -> None:
    import io

    from elastic_compile.core.source import MAX_BYTES
    from elastic_compile.localrun.cli import load_source
    from elastic_compile.localrun.process import RunError

    stdin = io.BytesIO(b"# " + b"x" * (4 * MAX_BYTES))
    with pytest.raises(RunError, match="larger than 1048576 bytes"):
        load_source("-", stdin=stdin)
    assert stdin.tell() == MAX_BYTES + 1


def test_run_reads_at_most_the_size_limit_from_a_file(tmp_path: Path) -> None:
    """``run /dev/zero`` once read until memory ran out; now it stops at the limit (in a limited child)."""
    import resource

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    run = subprocess.run(
        [sys.executable, "-m", "elastic_compile.compiler.cli", "run", "/dev/zero", "--dry-run"],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=limit,
        check=False,
    )
    expected = "elastic-compile run: error: /dev/zero: the file is larger than 1048576 bytes\n"
    assert (run.returncode, run.stderr) == (2, expected)


def test_errors_and_lints_in_the_message_format(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """run prints its input's errors and the compiler's lints as compiling does (red team 17)."""
    spec = tmp_path / "typo.yaml"
    spec.write_text("name: x\nimage: i:1\ncommand: [python]\nnnodse: 2\n")
    code, _view, err = _dry(capsys, str(spec), "--message-format", "json")
    (record,) = [json.loads(line) for line in err.splitlines()]
    assert code == 2 and (record["file"], record["line"], record["field"]) == (str(spec), 4, "nnodse")

    code, _view, err = _dry(capsys, str(tmp_path / "missing.yaml"), "--message-format", "github")
    # run reads its input as compiling does (core/source.py): the same located line, as an annotation.
    missing = tmp_path / "missing.yaml"
    assert (code, err) == (
        2,
        f"::error file={missing},line=1,col=1::spec: cannot read the file: No such file or directory\n",
    )

    code, _view, err = _dry(capsys, str(EXAMPLES / "cpu-ddp.yaml"), "--nodes", "0", "--message-format", "json")
    (record,) = [json.loads(line) for line in err.splitlines()]
    assert code == 2 and record["code"] == "usage" and record["message"].startswith("argument --nodes: ")

    lint = tmp_path / "lint.yaml"
    lint.write_text("name: x\nimage: ghcr.io/x/y:1.0\ncommand: [python, t.py]\nshared_memory: 1Gi\n")
    code, _view, err = _dry(capsys, str(lint), "--message-format", "json")
    warnings = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    assert code == 0 and [(w["code"], w["line"]) for w in warnings] == [("EC102", 4)], err


def test_a_manifest_the_engine_refuses_is_located(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Red team 16: the operator's rules refuse at the manifest's line, as the compiler's errors are located."""
    job = _compiled(capsys)
    job["spec"]["elasticPolicy"]["minReplicas"] = 5
    bad = tmp_path / "hj.yaml"
    bad.write_text(yaml.safe_dump(job, sort_keys=False))
    code, _view, err = _dry(capsys, str(bad))
    lines = bad.read_text().splitlines()
    policy = next(i for i, line in enumerate(lines) if line.strip() == "elasticPolicy:")
    assert code == 2
    assert err.startswith(f"{bad}:{policy + 2}:5: spec.elasticPolicy: minReplicas 5 is above maxReplicas 2"), err
    assert len(err.splitlines()) == 1
