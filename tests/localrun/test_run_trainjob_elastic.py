"""An elastic TrainJob (issue 30) run for real: ``nnodes: MIN:MAX`` compiled with ``-t trainjob``, then
``elastic-compile run`` plays Trainer and JobSet and every pod runs the real elastic-launch (gloo on 127.0.0.1).

Runs, each asserting the world sizes the job went through, as ``run`` reports them (one
line per change, from elastic-launch's line at every rendezvous round) and as the workers saw
them (each step all-reduces a 1 from every rank, so the sum is the world size):

* all MAX pods find a node: one round at MAX;
* only MIN pods find one (``--nodes MIN``): the others stay Pending, and the rendezvous starts
  with MIN after its last call; the Job's successPolicy (node 0) completes the job without them;
* a pod is lost mid-run (``--kill``): the survivors re-form at MAX - 1 and finish;
* a worker fails: its agent restarts the worker group in place, the rendezvous re-forms at MAX;

and node 0, the store's host, lost and created again by its Job (``--replace``): the others
restart in place and meet at its new store.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from run_helpers import run, spec

from elastic_compile.compiler.cli import main as compile_main

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("torch_installed")]

# Every step all-reduces a 1 from each rank (the sum is the world size the collective really
# spanned) and rank 0 prints it. The pod named by FAIL_POD fails its worker once, on its
# agent's first attempt (TORCHELASTIC_RESTART_COUNT 0), at step 2.
WORKER = """\
import os, sys, time
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
restart = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
steps, pause = int(sys.argv[1]), float(sys.argv[2])
for step in range(steps):
    one = torch.ones(1)
    dist.all_reduce(one)
    if rank == 0:
        print(f"step {step} world_size {world} sum {int(one.item())} restart {restart}", flush=True)
    if os.environ.get("FAIL_POD") == os.environ["HOSTNAME"] and restart == 0 and step == 2:
        print("a worker fails on purpose", flush=True)
        sys.exit(7)
    time.sleep(pause)
dist.barrier()
if rank == 0:
    print(f"done world_size {world}", flush=True)
dist.destroy_process_group()
"""

# 2:3 nodes, one worker each. The rendezvous notices a lost node within 3 s (keep-alive 1 s x 3)
# and closes a round 2 s after MIN have joined (last_call_timeout); max_restarts 3 lets a
# survivor spend one restart on a lost peer. monitor_interval 0.5: agents notice a finished or
# failed worker quickly.
ELASTIC = """\
target: trainjob
command: [python, worker.py, "{steps}", "{pause}"]
nnodes: "2:3"
nproc_per_node: 1
rdzv:
  last_call_timeout: 2
  conf: {{keep_alive_interval: "1"}}
monitor_interval: 0.5
max_restarts: 3
"""


def _compile(tmp_path: Path, marker: str, *, steps: int, pause: float, env: str = "") -> Path:
    """``elastic-compile -t trainjob`` of the elastic spec: our TrainingRuntime, then the TrainJob."""
    (tmp_path / "worker.py").write_text(WORKER, encoding="utf-8")
    source = tmp_path / "el.yaml"
    # ``env`` continues the spec's env mapping (spec() ends it with the marker).
    source.write_text(spec("el", marker, env + ELASTIC.format(steps=steps, pause=pause)), encoding="utf-8")
    base = tmp_path / "base"
    assert compile_main([str(source), "-o", str(base), "--root", str(tmp_path)]) == 0
    manifest = tmp_path / "el.trainjob.yaml"
    docs = [(base / f).read_text(encoding="utf-8") for f in ("trainingruntime.yaml", "trainjob.yaml")]
    manifest.write_text("---\n".join(docs), encoding="utf-8")
    return manifest


def _world_sizes(err: str) -> list[int]:
    """The world sizes ``run`` reported, in order (one line each time it changed)."""
    return [int(m) for m in re.findall(r"\] world size (\d+)(?: \(was \d+\)| again)?: ", err)]


def _sums(out: str) -> list[tuple[int, int]]:
    """(world_size, all-reduce sum) of every step rank 0 printed."""
    return [(int(w), int(s)) for w, s in re.findall(r"\] step \d+ world_size (\d+) sum (\d+) restart \d+$", out, re.M)]


def test_the_compiled_runtime_and_trainjob(tmp_path: Path, marker: str) -> None:
    """MAX pods, the launcher told MIN, and the runtime's policies for the elastic semantics."""
    manifest = _compile(tmp_path, marker, steps=1, pause=0)
    runtime, job = yaml.safe_load_all(manifest.read_text(encoding="utf-8"))
    assert job["spec"]["trainer"]["numNodes"] == 3
    args = job["spec"]["trainer"]["args"]
    assert args[args.index("--min-nodes") + 1] == "2" and "--rdzv-at-master" in args
    assert not [e for e in job["spec"]["trainer"]["env"] if e["name"].startswith("PET_")]
    jobset = runtime["spec"]["template"]["spec"]
    assert jobset["failurePolicy"] == {"maxRestarts": 0}
    node_job = jobset["replicatedJobs"][0]["template"]["spec"]
    assert node_job["successPolicy"] == {"rules": [{"succeededIndexes": "0"}]}
    assert node_job["podReplacementPolicy"] == "Failed"
    assert node_job["template"]["spec"]["restartPolicy"] == "OnFailure"


def test_at_max_pods_one_round_at_max(tmp_path: Path, marker: str) -> None:
    manifest = _compile(tmp_path, marker, steps=6, pause=0.1)
    result = run([str(manifest)], timeout=240)
    assert result.code == 0, result.report
    assert _world_sizes(result.err) == [3], result.report
    assert set(_sums(result.out)) == {(3, 3)}, result.report
    assert "done world_size 3" in result.out, result.report
    assert re.search(r"job el Succeeded after [0-9.]+s: 3 pod\(s\) \(el-node-0-0 Succeeded, ", result.summary)


def test_at_min_pods_the_rest_pending_and_node_0_completes_the_job(tmp_path: Path, marker: str) -> None:
    manifest = _compile(tmp_path, marker, steps=6, pause=0.1)
    result = run([str(manifest), "--nodes", "2"], timeout=240)
    assert result.code == 0, result.report
    assert "--nodes 2: 2 of the 3 pods find a node; the others stay Pending" in result.err, result.report
    assert _world_sizes(result.err) == [2], result.report
    assert set(_sums(result.out)) == {(2, 2)}, result.report
    assert "meets the node Job's successPolicy (index(es) 0: all succeeded)" in result.err, result.report
    assert "el-node-0-2 started" not in result.err, result.report
    assert "el-node-0-2 Unschedulable" in result.summary, result.report


def test_a_pod_lost_mid_run_the_others_re_form_and_finish(tmp_path: Path, marker: str) -> None:
    manifest = _compile(tmp_path, marker, steps=40, pause=0.3)
    # Lose node 2 once training runs at world size 3 (rank 0's first step), however long that takes.
    result = run([str(manifest), "--kill", "el-node-0-2@/world_size 3 sum 3 restart 0/"], timeout=300)
    assert result.code == 0, result.report
    assert _world_sizes(result.err) == [3, 2], result.report
    sums = _sums(result.out)
    assert sums[0] == (3, 3) and sums[-1] == (2, 2) and set(sums) == {(3, 3), (2, 2)}, result.report
    assert "el-node-0-2 lost (--kill)" in result.err and "el-node-0-2 started again" not in result.err
    assert "done world_size 2" in result.out, result.report


def test_a_worker_failure_restarts_in_place_and_the_world_re_forms(tmp_path: Path, marker: str) -> None:
    manifest = _compile(tmp_path, marker, steps=8, pause=0.2, env="  FAIL_POD: el-node-0-1\n")
    result = run([str(manifest)], timeout=300)
    assert result.code == 0, result.report
    assert "a worker fails on purpose" in result.out, result.report
    # The agent restarts its worker group in place (no pod restart): a new round, at MAX again.
    assert "restarts in place" not in result.err and "started again" not in result.err, result.report
    rounds = re.findall(r"\[el-node-0-1\] elastic-launch: world size (\d+): .*, start (\d+)$", result.out, re.M)
    assert rounds == [("3", "1"), ("3", "2")], result.report
    assert _world_sizes(result.err) == [3, 3], result.report  # the nodes met again, at the same size
    assert set(_sums(result.out)) == {(3, 3)}, result.report
    assert re.search(r"step \d+ world_size 3 sum 3 restart [01]$", result.out, re.M), result.report
    assert "done world_size 3" in result.out, result.report


def test_node_0_replaced_the_others_restart_and_meet_its_new_store(tmp_path: Path, marker: str) -> None:
    """Node 0, the store's host, is lost and its Job creates it again (``--replace``): the others lose the
    store, exit 202 and restart in place (OnFailure), then meet at the new pod's store: no survivor hosts one."""
    manifest = _compile(tmp_path, marker, steps=30, pause=0.3)
    result = run([str(manifest), "--replace", "el-node-0-0@/world_size 3 sum 3 restart 0/"], timeout=400)
    assert result.code == 0, result.report
    assert "el-node-0-0 lost (--replace)" in result.err and "el-node-0-0 started again" in result.err
    for survivor in ("el-node-0-1", "el-node-0-2"):
        assert f"{survivor} exited with code 202" in result.err, result.report
        assert f"{survivor} restarts in place" in result.err, result.report
    assert _world_sizes(result.err) == [3, 3], result.report
    assert set(_sums(result.out)) == {(3, 3)} and "done world_size 3" in result.out, result.report
    assert re.search(r"job el Succeeded after [0-9.]+s: .*, 3 restart\(s\); exit 0$", result.summary), result.report
