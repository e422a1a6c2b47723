"""The container's own environment: its working directory, a read-only root, shell wrappers.

Real ``elastic-launch`` processes (issue 10 class 4). A pod runs the console script from
the image's ``workingDir``; a hardened pod has ``readOnlyRootFilesystem: true`` (emulated
with a read-only remount of ``/`` in a private mount namespace, which needs CAP_SYS_ADMIN:
skipped with the reason otherwise); training commands often sit behind ``sh -c``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from launch_helpers import CONSOLE, FAST, Launcher

from elastic_compile import contract as c

pytestmark = pytest.mark.slow

TRAIN_PY = """
import json, os, sys

def main(out):
    with open(os.path.join(out, f"rank{os.environ['RANK']}.json"), "w") as f:
        json.dump({"cwd": os.getcwd(), "module": __file__}, f)
    return "trained"
"""


# ---------------------------------------------------------------------------- working directory


@pytest.mark.timeout(120)
@pytest.mark.parametrize("start_method", ["spawn", "fork"])
def test_function_mode_imports_from_the_working_directory(
    launcher: Launcher, tmp_path: Path, start_method: str
) -> None:
    # The image's code sits in its workingDir, not on PYTHONPATH: python -m finds it, and so
    # must the console script (whose sys.path[0] is its bin dir). Every pod exited 2 before.
    project, out, result = tmp_path / "project", tmp_path / "out", tmp_path / "result.json"
    project.mkdir()
    out.mkdir()
    (project / "cwd_train.py").write_text(TRAIN_PY)
    args = ["--monitor-interval", "0.2", "--start-method", start_method, "--nproc-per-node", "2"]
    agent = launcher.run(
        [*args, "--function", "cwd_train:main", "--result", str(result), "--", str(out)],
        program=CONSOLE,
        cwd=project,
        timeout=100,
    )
    assert agent.proc.returncode == 0, agent.stderr
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert {r["module"] for r in ranks} == {str(project / "cwd_train.py")}
    assert json.loads(result.read_text()) == "trained"


def test_missing_module_is_still_a_usage_error_from_the_working_directory(launcher: Launcher, tmp_path: Path) -> None:
    agent = launcher.run(["--function", "not_here:main", "--", "x"], program=CONSOLE, cwd=tmp_path, timeout=60)
    assert agent.proc.returncode == c.EXIT_USAGE
    assert "no module named 'not_here'" in agent.stderr


# ---------------------------------------------------------------------------- read-only root


def _can_remount_root_read_only() -> bool:
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return False
    probe = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "mount", "-o", "remount,bind,ro", "/"],
        capture_output=True,
        check=False,
    )
    return probe.returncode == 0


def read_only_root(writable: Path, *, shm: bool) -> tuple[str, ...]:
    """A command prefix: a private mount namespace whose / is read-only, ``writable`` kept rw.

    ``shm=False`` makes /dev/shm read-only too: nothing is left to write to.
    """
    script = f'mount --bind "{writable}" "{writable}" && mount -o remount,bind,ro / && '
    if not shm:
        script += "mount -o remount,bind,ro /dev/shm && "
    script += 'exec "$@"'
    return ("unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", *CONSOLE)


needs_mounts = pytest.mark.skipif(
    not _can_remount_root_read_only(), reason="unshare -m with mount is not permitted here (needs CAP_SYS_ADMIN)"
)


@needs_mounts
@pytest.mark.timeout(120)
def test_read_only_root_falls_back_to_dev_shm(launcher: Launcher, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    agent = launcher.run(
        [*FAST, "--function", "elastic_workers:scratch_report", "--", str(out)],
        env={"TMPDIR": ""},
        program=read_only_root(tmp_path, shm=True),
        timeout=100,
    )
    assert agent.proc.returncode == 0, agent.stderr
    assert "TMPDIR=/dev/shm for the agent and the workers; not writable: /tmp (Read-only file system)" in agent.stderr
    report = json.loads((out / "scratch.rank0.json").read_text())
    assert report["TMPDIR"] == "/dev/shm" and report["gettempdir"] == "/dev/shm"
    assert report["made"].startswith("/dev/shm/")


@needs_mounts
@pytest.mark.timeout(120)
def test_tmpdir_is_used_first(launcher: Launcher, tmp_path: Path) -> None:
    out, scratch = tmp_path / "out", tmp_path / "scratch"
    out.mkdir()
    scratch.mkdir()
    agent = launcher.run(
        [*FAST, "--function", "elastic_workers:scratch_report", "--", str(out)],
        env={"TMPDIR": str(scratch)},
        program=read_only_root(tmp_path, shm=True),
        timeout=100,
    )
    assert agent.proc.returncode == 0, agent.stderr
    assert "TMPDIR=" not in agent.stderr  # nothing to say: the pod's own TMPDIR works
    report = json.loads((out / "scratch.rank0.json").read_text())
    assert report["gettempdir"] == str(scratch)
    assert report["error_file"].startswith(f"{scratch}/elastic-launch-")  # our logs went there
    assert sorted(scratch.iterdir()) == []  # and were removed when the launch ended


@needs_mounts
@pytest.mark.timeout(60)
def test_no_writable_directory_is_a_permanent_error(launcher: Launcher, tmp_path: Path) -> None:
    # It used to be torch's own mkdtemp failing in the agent: exit 203, retryable, so the
    # operator's ExitCode policy recreated the pod forever.
    term = tmp_path / "termination-log"
    agent = launcher.run(
        ["--termination-log", str(term), "--", "true"],
        env={"TMPDIR": ""},
        program=read_only_root(tmp_path, shm=False),
        timeout=50,
    )
    assert agent.proc.returncode == c.EXIT_USAGE < 128, agent.stderr
    line = agent.stderr.strip().splitlines()[-1]
    assert line.startswith("elastic-launch: error: no writable directory for worker logs and error files")
    assert "/tmp (Read-only file system)" in line and "/dev/shm (Read-only file system)" in line
    assert "Mount an emptyDir at /tmp" in line
    assert "no writable directory" in term.read_text()


# ---------------------------------------------------------------------------- shell wrappers


@pytest.mark.timeout(90)
@pytest.mark.parametrize(
    ("shell", "expected", "says"),
    [
        # The worker's child is SIGKILLed (the OOM killer's signal); sh reports 128 + 9.
        ("sleep 60 & kill -KILL $!; wait $!", 128 + 9, "exited with code 137: SIGKILL, as a shell reports it"),
        ("sleep 60 & kill -TERM $!; wait $!", 128 + 15, "exited with code 143: SIGTERM, as a shell reports it"),
        ("exit 200", c.EXIT_USER_FAILURE, "exited with code 200"),  # 200 - 128 is no signal: permanent
    ],
    ids=["sigkill", "sigterm", "exit-200"],
)
def test_signal_behind_a_shell_is_retryable_like_a_direct_one(
    launcher: Launcher, tmp_path: Path, shell: str, expected: int, says: str
) -> None:
    term = tmp_path / "termination-log"
    agent = launcher.run(
        ["--monitor-interval", "0.2", "--termination-log", str(term), "--", "sh", "-c", shell], timeout=60
    )
    assert agent.proc.returncode == expected, agent.stderr
    meaning = "retryable" if expected >= 128 else "permanent"
    assert f"exit {expected} ({meaning})" in agent.stderr
    assert says in agent.stderr and says in term.read_text()


# ---------------------------------------------------------------------------- accelerators


def _has_accelerator() -> bool:
    torch = pytest.importorskip("torch", reason="needs torch (test extra)")
    return torch.accelerator.current_accelerator() is not None


@pytest.mark.timeout(90)
def test_gpu_where_torch_sees_no_accelerator_is_a_clear_usage_error(launcher: Launcher, tmp_path: Path) -> None:
    if _has_accelerator():
        pytest.skip("this machine's torch has an accelerator")
    term = tmp_path / "termination-log"
    agent = launcher.run(["--nproc-per-node", "gpu", "--termination-log", str(term), "--", "true"], timeout=80)
    assert agent.proc.returncode == c.EXIT_USAGE, agent.stderr
    assert "--nproc-per-node gpu: no accelerator is visible to torch (CPU-only build; asked: NVIDIA GPU" in agent.stderr
    assert "no accelerator is visible" in term.read_text()


@pytest.mark.timeout(120)
def test_auto_where_torch_sees_no_accelerator_counts_cpus(launcher: Launcher, tmp_path: Path) -> None:
    if _has_accelerator():
        pytest.skip("this machine's torch has an accelerator")
    agent = launcher.run([*FAST, "--nproc-per-node", "auto", "--", "true"], timeout=100)
    assert agent.proc.returncode == 0, agent.stderr
    assert "worker(s), from the usable CPUs (torch sees no accelerator)" in agent.stderr
