"""Every command is one process that ends with its exit, and writes nothing but what ``-o`` names.

Each command of the CLI runs as a user runs it (the console script, in a new session), with a
fresh, empty ``HOME`` and ``TMPDIR``. After each one: no process of it is left (none of this
machine's processes carries the run's own marker in its environment), ``HOME`` and ``TMPDIR``
are still empty, and the working directory changed only inside the ``-o`` directory.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CLI = str(Path(sys.executable).parent / "elastic-compile")
MARKER = "ELASTIC_COMPILE_ONE_PROCESS_PROBE"

# (arguments, exit codes allowed): every command and the main options of each.
COMMANDS: list[tuple[list[str], set[int]]] = [
    (["--version"], {0}),
    (["--help"], {0}),
    (["job.elastic.yaml"], {0}),
    (["job.elastic.yaml", "-t", "all", "--format", "json"], {0}),
    (["v2.elastic.yaml", "-t", "trainjob"], {0}),
    (["job.elastic.yaml", "--explain"], {0}),
    (["job.elastic.yaml", "--strict"], {0}),
    (["job.elastic.yaml", "--check", "job.yaml"], {0, 1}),
    (["job.elastic.yaml", "-o", "deploy"], {0}),
    (["job.elastic.yaml", "-o", "deploy", "--check"], {1}),  # nothing written yet: stale
    (["specs", "-o", "deploy"], {0}),
    (["bad.elastic.yaml"], {2}),
    (["schema"], {0}),
    (["import", "job.yaml"], {0}),
    (["import", "--torchrun", "--image", "ghcr.io/x/y:1.0", "--", "torchrun", "--nproc-per-node", "2", "t.py"], {0}),
    (["doctor", "job.yaml"], {0, 1}),
    (["run", "job.elastic.yaml", "--dry-run"], {0}),
]


def _tree(top: Path) -> dict[str, tuple[int, int]]:
    """Every entry under ``top``: its size and modification time (a file rewritten in place shows)."""
    found = {}
    for path in sorted(top.rglob("*")):
        info = path.lstat()
        found[str(path.relative_to(top))] = (info.st_size, info.st_mtime_ns)
    return found


def _left(marker: str) -> list[int]:
    """The processes whose environment holds ``marker``: what a command left running."""
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if f"{MARKER}={marker}".encode() in f.read().split(b"\0"):
                    pids.append(int(pid))
        except OSError:
            continue
    return pids


@pytest.fixture
def work(tmp_path: Path) -> Path:
    tree = tmp_path / "repo"
    (tree / ".git").mkdir(parents=True)  # the boundary, as in a checkout
    shutil.copy(ROOT / "examples" / "ddp-2x8-gpu.yaml", tree / "job.elastic.yaml")
    shutil.copy(ROOT / "examples" / "trainjob-2x8-gpu.yaml", tree / "v2.elastic.yaml")
    (tree / "bad.elastic.yaml").write_text("name: Bad\nimage: x\n", encoding="utf-8")
    (tree / "specs" / "team").mkdir(parents=True)
    shutil.copy(ROOT / "examples" / "minimal.yaml", tree / "specs" / "team" / "a.elastic.yaml")
    shutil.copy(ROOT / "tests" / "golden" / "minimal" / "pytorchjob.yaml", tree / "job.yaml")
    return tree


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="finds processes through /proc")
@pytest.mark.parametrize(("args", "codes"), COMMANDS, ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_a_command_leaves_no_process_and_writes_only_what_o_names(
    args: list[str], codes: set[int], work: Path, tmp_path: Path
) -> None:
    home, tmp = tmp_path / "home", tmp_path / "tmp"
    home.mkdir()
    tmp.mkdir()
    marker = f"{os.getpid()}-{tmp_path.name}"
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("ELASTIC_COMPILE", "XDG_")) and key not in ("HOME", "TMPDIR")
    }
    env.update({"HOME": str(home), "TMPDIR": str(tmp), MARKER: marker})
    before = {path: value for path, value in _tree(work).items() if not path.startswith("deploy")}
    result = subprocess.run(
        [CLI, *args],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        start_new_session=True,
        check=False,
    )
    assert result.returncode in codes, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    deadline = time.monotonic() + 2  # a child that outlived the command would still be here
    while _left(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _left(marker) == []
    assert list(home.iterdir()) == [] and list(tmp.iterdir()) == []
    after = {path: value for path, value in _tree(work).items() if not path.startswith("deploy")}
    assert after == before
    if "-o" in args and "--check" not in args:
        assert (work / "deploy" / ".elastic-compile-owned").is_file()  # it wrote where -o said
