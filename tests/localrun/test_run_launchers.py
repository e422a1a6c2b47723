"""``launcher: bundled`` and ``launcher: torchrun`` end to end: compiled, then run pod by pod as the cluster runs them.

The image is a venv holding torch and nothing of ours (``image_env.make_torch_venv``, the
helper of tests/test_packaging.py), given to ``elastic-compile run --python``: the bundled
launcher is the file of the compiled ConfigMap, mounted read-only, run by that venv's
``python3``; torchrun is that venv's own console script, reading the operator's (or
Trainer's) ``PET_*``. In both modes and on both engines a 2-node x 2-worker job succeeds at
world size 4 after one worker fails in the first attempt, restarted in place by its node's
agent. Then what torchrun loses: a worker killed by SIGKILL (what the OOM killer sends)
ends torchrun with 1, which the ExitCode policy treats as permanent (lint EC116), where
elastic-launch exits 137.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from image_env import image_env, make_torch_venv
from run_helpers import FAIL_ONCE, ROOT, RUN, Result, spec

from elastic_compile.targets import bundle

COMPILE = [sys.executable, "-m", "elastic_compile.compiler.cli"]

# run_helpers.FAIL_ONCE, whose second round then reports what each of its workers saw.
REPORTED = (
    FAIL_ONCE
    + """\
import importlib.util, json
# One write per line: the workers share the pod's log, and print() writes the text and its line
# break apart when the output is unbuffered, so two workers' lines could interleave.
sys.stdout.write("REPORT " + json.dumps({
    "group": group, "local": local, "world": int(os.environ["WORLD_SIZE"]), "restart": restart,
    "python": sys.executable, "ours": importlib.util.find_spec("elastic_compile") is not None,
    "agent_store": os.environ.get("TORCHELASTIC_USE_AGENT_STORE"),
}) + "\\n")
sys.stdout.flush()
"""
)

# The other workers wait in a barrier for one that the kernel kills, as the OOM killer would.
KILLED = """\
import os, signal
import torch.distributed as dist
dist.init_process_group("gloo")
if int(os.environ["RANK"]) == 1:
    os.kill(os.getpid(), signal.SIGKILL)
dist.barrier()
"""

# torchrun as pip installs it into an image's bin directory: a console script of that Python.
TORCHRUN_SCRIPT = """\
#!{python}
import sys
from torch.distributed.run import main
if __name__ == "__main__":
    sys.exit(main())
"""


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The image's python: a venv with torch (and torchrun) but not elastic_compile."""
    pytest.importorskip("torch", reason="the pods run torch")
    bin_dir = make_torch_venv(tmp_path_factory.mktemp("image") / "venv")
    torchrun = bin_dir / "torchrun"
    torchrun.write_text(TORCHRUN_SCRIPT.format(python=bin_dir / "python"))
    torchrun.chmod(0o755)
    return bin_dir / "python"


def compile_to(tmp_path: Path, name: str, body: str, marker: str, target: str) -> Path:
    """``elastic-compile spec.yaml -t TARGET > manifest.yaml``: every document, as ``kubectl apply -f`` takes them."""
    source = tmp_path / f"{name}.yaml"
    source.write_text(spec(name, marker, body), encoding="utf-8")
    compiled = subprocess.run(
        [*COMPILE, str(source), "-t", target], capture_output=True, text=True, timeout=120, check=False
    )
    assert compiled.returncode == 0, compiled.stderr
    out = tmp_path / f"{name}.{target}.yaml"
    out.write_text(compiled.stdout, encoding="utf-8")
    return out


def run_image(args: list[str], python: Path) -> Result:
    """``elastic-compile run --python PYTHON ARGS`` with nothing of this checkout on the pods' sys.path."""
    start = time.monotonic()
    proc = subprocess.run(
        [*RUN, "--python", str(python), *args],
        capture_output=True,
        text=True,
        timeout=600,  # a hang guard: the jobs are bounded by max_restarts and barriers
        cwd=ROOT,
        env=image_env(),
        check=False,
    )
    return Result(proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start)


def reports(out: str) -> list[dict[str, object]]:
    return sorted(
        (json.loads(line.partition("REPORT ")[2]) for line in out.splitlines() if "REPORT {" in line),
        key=lambda r: (r["group"], r["local"]),
    )


@pytest.mark.slow
@pytest.mark.parametrize("target", ["pytorchjob", "trainjob"])
@pytest.mark.parametrize("launcher", ["bundled", "torchrun"])
def test_two_nodes_restart_in_place_in_an_image_without_elastic_compile(
    tmp_path: Path, marker: str, image: Path, launcher: str, target: str
) -> None:
    script = tmp_path / "fail_once.py"
    script.write_text(REPORTED, encoding="utf-8")
    body = (
        f"command: [python, {script}]\nlauncher: {launcher}\nnnodes: 2\nnproc_per_node: 2\n"
        "max_restarts: 1\nmonitor_interval: 0.5\nrestart_policy: OnFailure\n"
    )
    manifest = compile_to(tmp_path, "modes", body, marker, target)
    result = run_image([str(manifest)], image)
    assert result.code == 0, result.report
    assert result.out.count("a worker fails on purpose") == 1, result.report
    seen = reports(result.out)
    # Every worker of the second round, at world size 4, in the image's Python without our package.
    assert [(r["group"], r["local"], r["world"]) for r in seen] == [(g, i, 4) for g in (0, 1) for i in (0, 1)]
    # Node 1's agent restarted its failed group (its one restart). Node 0's followed into the new
    # round: counted as a restart when its workers' own failure (the peer gone) came first, not
    # when it saw node 1 waiting first (torch's agent), so either 0 or 1 there.
    assert [r["restart"] for r in seen if r["group"] == 1] == [1, 1], result.report
    assert {r["restart"] for r in seen if r["group"] == 0} <= {0, 1}, result.report
    # The image's interpreter (`python` or `python3`, as the launcher names it), never ours.
    assert {(str(Path(str(r["python"])).parent), r["ours"]) for r in seen} == {(str(image.parent), False)}
    # TORCH_DISABLE_SHARE_RDZV_TCP_STORE reached torch: each attempt had its own store.
    assert {r["agent_store"] for r in seen} == {"False"}
    assert "0 restart(s)" in result.summary, "the agents restarted the workers; no pod was restarted"
    ours = [line for line in result.out.splitlines() if "] elastic-launch: " in line]
    if launcher == "bundled":
        configmap_note = f"volume elastic-launch (ConfigMap modes-elastic-launch-{bundle.bundle().sha256[:10]})"
        assert configmap_note in result.err, result.report
        assert any("run id " in line for line in ours), result.report
    else:
        assert ours == [], "torchrun alone: no launcher of ours in the pods"


def test_elastic_launch_is_not_in_such_an_image(tmp_path: Path, marker: str, image: Path) -> None:
    # The near twin: the default launcher needs elastic-compile in the image, and this one lacks it.
    manifest = compile_to(tmp_path, "plain", "command: [python, -c, pass]\n", marker, "pytorchjob")
    result = run_image([str(manifest)], image)
    assert result.code != 0, result.report
    # Started as `python -m elastic_compile.entrypoint`, or refused before the start when run
    # looks the console script up in the image's bin directory.
    missing = ("No module named 'elastic_compile'", "elastic-launch is not in the image's")
    assert any(text in result.out + result.err for text in missing), result.report


@pytest.mark.slow
@pytest.mark.parametrize(("launcher", "code"), [("torchrun", 1), ("bundled", 137)])
def test_a_worker_killed_by_the_kernel(tmp_path: Path, marker: str, image: Path, launcher: str, code: int) -> None:
    script = tmp_path / "killed.py"
    script.write_text(KILLED, encoding="utf-8")
    body = (
        f"command: [python, {script}]\nlauncher: {launcher}\nnproc_per_node: 2\nmax_restarts: 0\n"
        "monitor_interval: 0.5\nrestart_policy: Never\n"
    )
    result = run_image([str(compile_to(tmp_path, "oom", body, marker, "pytorchjob"))], image)
    # ExitCode recreates a pod for 128 and above: elastic-launch's 137 would be retried,
    # torchrun's 1 is permanent (EC116).
    assert result.code == code, result.report
    assert f"exit {code}" in result.summary, result.report
