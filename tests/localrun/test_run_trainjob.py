"""``elastic-compile run`` on a TrainJob: Trainer v2 and JobSet emulated, real elastic-launch in every pod.

The end-to-end path of issue 12: compile a 2-node spec with ``-t trainjob``, run the
compiled manifest, and real ``elastic_launch`` trains at world size 2 x nproc; a worker
failure with ``max_restarts: 1`` restarts the worker group in place and the job succeeds.
Around it, the engine's own rules on small real processes: pod names, the five PET_*
variables, the runtime merged with the patches, OnFailure restarts counted against
backoffLimit, Never replacing pods. And what ``run`` guarantees for any engine (issue 18):
cluster-only env values come from ``--env`` alone, never from this shell, and input stops
at 1 MiB (the private network and the orphan sweep: test_run_isolation.py).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from run_helpers import FAIL_ONCE, MARKER_NAME, ROOT, TRAIN, run, spec

from elastic_compile.compiler.cli import main as compile_main

GOLDEN = ROOT / "tests" / "golden"
PET = ("PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT")


def _compile(tmp_path: Path, name: str, body: str, marker: str) -> Path:
    """``elastic-compile -t trainjob SPEC > manifest.yaml``: the manifest, as a user would apply it."""
    source = tmp_path / f"{name}.yaml"
    source.write_text(spec(name, marker, body), encoding="utf-8")
    manifest = tmp_path / f"{name}.trainjob.yaml"
    assert compile_main([str(source), "-t", "trainjob", "-o", str(tmp_path / "base"), "--root", str(tmp_path)]) == 0
    docs = [(tmp_path / "base" / f).read_text(encoding="utf-8") for f in ("trainingruntime.yaml", "trainjob.yaml")
            if (tmp_path / "base" / f).is_file()]  # fmt: skip
    manifest.write_text("---\n".join(docs), encoding="utf-8")
    return manifest


def _dry_run(path: Path) -> dict[str, Any]:
    result = run([str(path), "--dry-run"], timeout=120)
    assert result.code == 0, result.report
    return dict(json.loads(result.out))


def test_pods_and_pet_env_as_trainer_gives_them(tmp_path: Path, marker: str) -> None:
    manifest = _compile(tmp_path, "petjob", f"command: [python, {TRAIN}]\nnnodes: 3\nnproc_per_node: 2\n", marker)
    view = _dry_run(manifest)
    names = [p["name"] for p in view["pods"]]
    assert names == ["petjob-node-0-0", "petjob-node-0-1", "petjob-node-0-2"]
    for index, pod in enumerate(view["pods"]):
        env = pod["env"]
        assert [k for k in env if k.startswith("PET_")] == list(PET), "the five, last, and no PET_RDZV_*"
        assert (env["PET_NNODES"], env["PET_NPROC_PER_NODE"], env["PET_NODE_RANK"]) == ("3", "2", str(index))
        assert env["PET_MASTER_ADDR"] == "127.0.0.1"  # petjob-node-0-0.petjob on the cluster
        assert env["ELASTIC_LAUNCH_JOB_NAME"] == "petjob", "from JobSet's label: the run id comes from the TrainJob"
        assert env[MARKER_NAME] == marker
        assert "--rdzv-at-master" in pod["command"], "elastic-launch meets at PET_MASTER_ADDR:PET_MASTER_PORT"
        assert pod["restartPolicy"] == "OnFailure", "JobSet's default"


def test_runtime_merged_with_the_patches() -> None:
    """Our TrainingRuntime, the runtimePatch and the trainer: what the node container ends up with."""
    from elastic_compile.localrun import trainer

    runtime, job = yaml.safe_load_all((GOLDEN / "trainjob-sidecar-runtime" / "trainjob.yaml").read_text())
    jobset = trainer.jobset_of(job, runtime)
    pod = jobset["replicatedJobs"][0]["template"]["spec"]["template"]
    (node,) = pod["spec"]["containers"]
    assert node["image"] == "ghcr.io/example/trainer:1.0" and node["command"] == ["elastic-launch"]
    assert node["ports"] == [{"containerPort": 8080, "name": "http"}], "from the runtime"
    assert [m["mountPath"] for m in node["volumeMounts"]] == ["/data", "/dev/shm"], "from the patch"
    assert node["resources"]["limits"]["nvidia.com/gpu"] == "4", "from the trainer"
    assert pod["spec"]["nodeSelector"] == {"pool": "gpu"} and pod["metadata"]["labels"] == {"team": "ml"}
    assert pod["spec"]["initContainers"][0]["restartPolicy"] == "Always"
    assert trainer.Rules.of(job, runtime).backoff_limit == 3
    # The stock runtime when the TrainJob references torch-distributed.
    stock_job = yaml.safe_load((GOLDEN / "minimal" / "trainjob.yaml").read_text())
    assert trainer.Rules.of(stock_job).backoff_limit == trainer.DEFAULT_BACKOFF_LIMIT


def _python_job(tmp_path: Path, code: str, restart_policy: str, backoff_limit: int, marker: str) -> Path:
    """A one-node TrainJob whose node runs ``python -c CODE`` (no torch): the Job rules alone."""
    body = (
        f"command: [python, -c, {json.dumps(code)}]\nrestart_policy: {restart_policy}\n"
        f"run_policy: {{backoff_limit: {backoff_limit}}}\n"
    )
    manifest = _compile(tmp_path, "rules", body, marker)
    docs = list(yaml.safe_load_all(manifest.read_text(encoding="utf-8")))
    docs[-1]["spec"]["trainer"]["command"] = [sys.executable, "-c", code]
    docs[-1]["spec"]["trainer"]["args"] = []
    manifest.write_text(yaml.safe_dump_all(docs), encoding="utf-8")
    return manifest


def test_on_failure_restarts_in_place_until_backoff_limit(tmp_path: Path, marker: str) -> None:
    manifest = _python_job(tmp_path, "import sys; sys.exit(3)", "OnFailure", 2, marker)
    result = run([str(manifest)], timeout=120)
    assert result.code == 3, result.report
    assert "rules-node-0-0 restarts in place" in result.err, result.report
    assert "backoffLimit 2 reached" in result.err, result.report
    assert re.search(r"job rules Failed after .*rules-node-0-0 Failed\), 2 restart\(s\); exit 3$", result.summary)


def test_never_replaces_the_pod_until_backoff_limit(tmp_path: Path, marker: str) -> None:
    manifest = _python_job(tmp_path, "import sys; sys.exit(4)", "Never", 1, marker)
    result = run([str(manifest)], timeout=120)
    assert result.code == 4, result.report
    assert result.err.count("the Job controller creates a new pod for its index") == 1, result.report
    assert "2 failed pod(s) is more than it allows" in result.err, result.report


@pytest.mark.slow
@pytest.mark.usefixtures("torch_installed")
def test_two_nodes_train_at_world_size_two_times_nproc(tmp_path: Path, marker: str) -> None:
    manifest = _compile(
        tmp_path, "tiny", f"command: [python, {TRAIN}, --steps, '4']\nnnodes: 2\nnproc_per_node: 2\n", marker
    )
    result = run([str(manifest)], timeout=300)
    assert result.code == 0, result.report
    assert "[tiny-node-0-0] done world_size 4" in result.out, result.report
    assert "[tiny-node-0-0] elastic-launch: run id default.tiny: nnodes 2, 2 worker(s) per node" in result.out
    assert re.search(r"job tiny Succeeded after .*tiny-node-0-1 Succeeded\), 0 restart\(s\); exit 0$", result.summary)


@pytest.mark.slow
@pytest.mark.usefixtures("torch_installed")
def test_worker_failure_restarts_in_place_and_the_job_succeeds(tmp_path: Path, marker: str) -> None:
    script = tmp_path / "fail_once.py"
    script.write_text(FAIL_ONCE, encoding="utf-8")
    body = f"command: [python, {script}]\nnnodes: 2\nnproc_per_node: 2\nmax_restarts: 1\nmonitor_interval: 0.5\n"
    manifest = _compile(tmp_path, "flaky", body, marker)
    result = run([str(manifest)], timeout=300)
    assert result.code == 0, result.report
    assert re.search(r"^\[flaky-node-0-[01]\] a worker fails on purpose$", result.out, re.M), result.report
    done = re.findall(r"^\[flaky-node-0-[01]\] done group ([01]) world_size (\d+) restart (\d)$", result.out, re.M)
    assert sorted(g for g, _w, _r in done) == ["0", "1"], result.report
    assert {w for _g, w, _r in done} == {"4"}, result.report
    assert ("1", "4", "1") in done, "the failed node's agent restarted its workers once (max_restarts 1)"
    # In place: the agents restarted their workers; no pod restarted or was replaced.
    assert "restarts in place in" not in result.err and "started again" not in result.err, result.report
    assert re.search(r"job flaky Succeeded after .* 0 restart\(s\); exit 0$", result.summary), result.report


def test_help_names_the_trainjob(capsys: pytest.CaptureFixture[str]) -> None:
    """``run --help`` says what run takes and what --nodes and --nproc-per-node set for a TrainJob."""
    from elastic_compile.localrun.cli import parse_args

    with pytest.raises(SystemExit):
        parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "compiled PyTorchJob or TrainJob" in text
    assert "a TrainJob's numNodes" in text and "a TrainJob's numProcPerNode" in text


def test_secret_refs_come_only_from_env_flags_never_from_this_shell(monkeypatch: pytest.MonkeyPatch) -> None:
    """A CI runner's variables reach a TrainJob's pods only when named with --env."""
    monkeypatch.setenv("WANDB_API_KEY", "from-the-shell")
    monkeypatch.setenv("HF_TOKEN", "also-from-the-shell")
    monkeypatch.setenv("CI_JOB_TOKEN", "s1-runner")  # asked for by nothing
    manifest = GOLDEN / "env-secret-refs" / "trainjob.yaml"
    result = run([str(manifest), "--dry-run", "--env", "WANDB_API_KEY=given"], timeout=120)
    assert result.code == 0, result.report
    view = json.loads(result.out)
    assert [p["name"] for p in view["pods"]] == ["wandb-logged-node-0-0", "wandb-logged-node-0-1"]
    assert [p["env"].get("WANDB_API_KEY") for p in view["pods"]] == ["given", "given"]
    assert [p["env"].get("HF_TOKEN") for p in view["pods"]] == [None, None]  # set in the shell, not passed
    assert not any(v in result.out for v in ("from-the-shell", "also-from-the-shell", "s1-runner"))
    assert "WANDB_API_KEY: taken from --env" in result.err, result.report
    assert result.err.count("warning: HF_TOKEN needs the cluster: skipped (pass --env HF_TOKEN=VALUE") == 1
    assert "warning: DATASET needs the cluster" in result.err


def test_a_trainjob_over_the_size_limit_is_not_read_past_it(tmp_path: Path) -> None:
    from elastic_compile.core.source import MAX_BYTES

    manifest = tmp_path / "big.yaml"
    text = (GOLDEN / "minimal" / "trainjob.yaml").read_text(encoding="utf-8")
    manifest.write_text(text + "# " + "x" * MAX_BYTES + "\n", encoding="utf-8")
    result = run([str(manifest), "--dry-run"], timeout=120)
    assert (result.code, result.err) == (
        2,
        f"elastic-compile run: error: {manifest}: the file is larger than 1048576 bytes\n",
    )


def test_elastic_trainjob_rules_and_nodes_range(tmp_path: Path, marker: str) -> None:
    """An elastic TrainJob (issue 30): its runtime's successPolicy and MIN are read; --nodes must lie in MIN..MAX."""
    from elastic_compile.localrun import trainer

    runtime, job = yaml.safe_load_all((GOLDEN / "trainjob-elastic" / "trainjob.yaml").read_text())
    rules = trainer.Rules.of(job, runtime)
    assert (rules.success_rules, rules.min_nodes) == (((frozenset({0}), None),), 2)
    assert rules.describe().startswith("elastic: trains with 2 node(s) or more; succeeds by its successPolicy")
    assert trainer.elastic_min(job, runtime) == 2 and trainer.num_nodes(job, runtime) == 4
    fixed_runtime, fixed = yaml.safe_load_all((GOLDEN / "trainjob-sidecar-runtime" / "trainjob.yaml").read_text())
    assert trainer.Rules.of(fixed, fixed_runtime).success_rules == ()
    assert trainer.elastic_min(fixed, fixed_runtime) is None

    manifest = _compile(tmp_path, "el", f'command: [python, {TRAIN}]\nnnodes: "2:3"\nnproc_per_node: 1\n', marker)
    result = run([str(manifest), "--nodes", "1", "--dry-run"], timeout=120)
    assert result.code == 2, result.report
    assert "--nodes 1: the elastic TrainJob runs 2:3 nodes; give 2..3" in result.err, result.report
    view = _dry_run(manifest)
    assert [p["env"]["PET_NNODES"] for p in view["pods"]] == ["3", "3", "3"], "MAX pods, PET_NNODES their count"
