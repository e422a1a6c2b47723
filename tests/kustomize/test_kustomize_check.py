"""``--check`` end to end, byte-identical output across machines, and the pre-commit hook.

Everything runs ``elastic-compile`` in a subprocess, as CI and pre-commit do.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "ddp-2x8-gpu.yaml"
HOOKS = ROOT / ".pre-commit-hooks.yaml"

# Non-ASCII in a value, a comment and an annotation: the bytes written must not depend on the locale.
UNICODE_SPEC = """\
# Données d'entraînement: ✓
name: unicode-job
image: ghcr.io/example/trainer:1.0
command: [python, train.py, --tag, "café ✓"]
annotations: {team: "ml-π"}
env: {GREETING: "grüß dich"}
"""


def _run(*args: str | Path, cwd: Path = ROOT, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "elastic_compile.compiler.cli", *map(str, args)],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        encoding="utf-8",
        check=False,
        timeout=120,
    )


def _snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under ``root`` (and its siblings' names) with bytes and mtime: proof nothing was written."""
    files = {str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()}
    files["<siblings>"] = (" ".join(sorted(p.name for p in root.parent.iterdir())).encode(), 0)
    return files


# ------------------------------------------------------------------------------ --check -o DIR


def test_check_directory_end_to_end(tmp_path: Path) -> None:
    spec = tmp_path / "elastic.yaml"
    spec.write_text(EXAMPLE.read_text(encoding="utf-8"), encoding="utf-8")
    base = tmp_path / "deploy" / "base"
    written = _run(spec, "-t", "all", "-o", base, cwd=tmp_path)
    assert (written.returncode, written.stdout, written.stderr) == (0, "", "")

    fresh = _run(spec, "-t", "all", "-o", base, "--check", cwd=tmp_path)
    assert (fresh.returncode, fresh.stdout, fresh.stderr) == (0, "", "")

    # A hand edit, a file of the user's (named, never shown, never drift), and a deleted file.
    job = base / "pytorchjob.yaml"
    job.write_text(job.read_text(encoding="utf-8").replace("replicas: 2", "replicas: 3"), encoding="utf-8")
    (base / "notes.txt").write_text("kept by hand\n", encoding="utf-8")
    (base / "openapi.json").unlink()
    before = _snapshot(tmp_path)
    stale = _run(spec, "-t", "all", "-o", base, "--check", cwd=tmp_path)
    assert stale.returncode == 1
    assert f"--- a/{base}/pytorchjob.yaml\n+++ b/{base}/pytorchjob.yaml\n" in stale.stdout
    assert "-      replicas: 3\n+      replicas: 2\n" in stale.stdout
    assert "notes.txt" not in stale.stdout and "kept by hand" not in stale.stdout + stale.stderr
    assert f"left alone: {base}/notes.txt\n" in stale.stderr
    assert f"--- /dev/null\n+++ b/{base}/openapi.json\n" in stale.stdout
    assert "stale" in stale.stderr and "rerun without --check" in stale.stderr
    assert _snapshot(tmp_path) == before, "--check never writes"

    # Writing brings it back in line (the user's file stays); then a changed spec is drift again.
    assert _run(spec, "-t", "all", "-o", base, cwd=tmp_path).returncode == 0
    assert (base / "notes.txt").read_text(encoding="utf-8") == "kept by hand\n"
    assert _run(spec, "-t", "all", "-o", base, "--check", cwd=tmp_path).returncode == 0
    spec.write_text(spec.read_text(encoding="utf-8").replace("nnodes: 2", "nnodes: 4"), encoding="utf-8")
    before = _snapshot(tmp_path)
    changed = _run(spec, "-t", "all", "-o", base, "--check", cwd=tmp_path)
    assert changed.returncode == 1
    assert "-      replicas: 2\n+      replicas: 4\n" in changed.stdout
    assert "-    maxReplicas: 2\n" in changed.stdout and "+    maxReplicas: 4\n" in changed.stdout
    assert "podtemplate.yaml" not in changed.stdout, "only the files that differ"
    assert _snapshot(tmp_path) == before


def test_check_missing_directory_is_drift(tmp_path: Path) -> None:
    missing = _run(EXAMPLE, "-o", tmp_path / "nowhere", "--check", cwd=tmp_path)
    assert missing.returncode == 1
    assert f"+++ b/{tmp_path}/nowhere/kustomization.yaml" in missing.stdout
    assert not (tmp_path / "nowhere").exists()


def test_check_several_specs(tmp_path: Path) -> None:
    other = tmp_path / "u.yaml"
    other.write_text(UNICODE_SPEC, encoding="utf-8")
    out = tmp_path / "out"
    assert _run(EXAMPLE, other, "-o", out, cwd=tmp_path).returncode == 0
    assert _run(EXAMPLE, other, "-o", out, "--check", cwd=tmp_path).returncode == 0
    # Dropping a spec from the command line would delete its base: that is drift too.
    dropped = _run(EXAMPLE, "-o", out, "--check", cwd=tmp_path)
    assert dropped.returncode == 1 and f"--- a/{out}/unicode-job/pytorchjob.yaml\n+++ /dev/null" in dropped.stdout


def test_check_file_end_to_end(tmp_path: Path) -> None:
    target = tmp_path / "job.yaml"
    target.write_text(_run(EXAMPLE).stdout, encoding="utf-8")
    assert _run(EXAMPLE, "--check", target, cwd=tmp_path).returncode == 0
    target.write_text(target.read_text(encoding="utf-8").rstrip("\n"), encoding="utf-8")
    before = target.read_bytes()
    stale = _run(EXAMPLE, "--check", target, cwd=tmp_path)
    assert stale.returncode == 1
    assert "\\ No newline at end of file\n" in stale.stdout
    assert target.read_bytes() == before


# ------------------------------------------------------------------------------ reproducible bytes


def test_same_bytes_across_machines(tmp_path: Path) -> None:
    """Two runs differing in hash seed, locale (ASCII C vs C.UTF-8), time zone, cwd and spec paths."""
    specs_dir = tmp_path / "specs"
    specs_dir.mkdir()
    (specs_dir / "u.yaml").write_text(UNICODE_SPEC, encoding="utf-8")
    ascii_c = {
        "PYTHONHASHSEED": "0",
        "LANG": "C",
        "LC_ALL": "C",
        # Without these Python 3.7+ quietly switches a C locale to UTF-8 (PEP 538, PEP 540).
        "PYTHONCOERCECLOCALE": "0",
        "PYTHONUTF8": "0",
        "TZ": "UTC",
    }
    utf8 = {
        "PYTHONHASHSEED": "4242",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONUTF8": "1",
        "TZ": "Pacific/Chatham",
    }
    one, two = tmp_path / "one", tmp_path / "two"
    # --root: the two working directories differ, the outputs lie in neither.
    first = _run("u.yaml", EXAMPLE, "-t", "all", "-o", one, "--root", tmp_path, cwd=specs_dir, env=ascii_c)
    second = _run(
        specs_dir / "u.yaml",
        os.path.relpath(EXAMPLE, ROOT),
        "-t",
        "all",
        "-o",
        two,
        "--root",
        tmp_path,
        cwd=ROOT,
        env=utf8,
    )
    # Nothing but the run's summary line: no warning, no problem.
    assert (first.returncode, first.stderr) == (
        0,
        f"elastic-compile: 2 specs, 8 files written to {one}, 0 unchanged, 0 warnings, 0 errors\n",
    )
    assert (second.returncode, second.stderr) == (
        0,
        f"elastic-compile: 2 specs, 8 files written to {two}, 0 unchanged, 0 warnings, 0 errors\n",
    )

    def tree(root: Path) -> dict[str, bytes]:
        return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}

    assert tree(one) == tree(two)
    assert len(tree(one)) == 9  # two bases of four files, and the manifest
    assert "grüß dich".encode() in tree(one)["unicode-job/pytorchjob.yaml"]


# ------------------------------------------------------------------------------ pre-commit hook


@pytest.fixture(scope="module")
def hook() -> dict[str, object]:
    (entry,) = yaml.safe_load(HOOKS.read_text(encoding="utf-8"))
    assert isinstance(entry, dict)
    return entry


def test_hook_definition(hook: dict[str, object]) -> None:
    assert hook["id"] == "elastic-compile-check"
    assert hook["entry"] == "elastic-compile"
    assert hook["language"] == "python"
    # The output depends on every spec listed in args, not only on the staged ones.
    assert hook["pass_filenames"] is False
    files = re.compile(str(hook["files"]))
    for name in ("elastic.yaml", "jobs/elastic.yml", "train.elastic.yaml", "a/b/llm-finetune.elastic.yml"):
        assert files.search(name), name
    for name in ("notelastic.yaml", "elastic.yaml.bak", "elastic.json", "docs/elastic.md"):
        assert not files.search(name), name


def test_hook_args_as_documented(tmp_path: Path, hook: dict[str, object]) -> None:
    """pre-commit runs ``entry`` + ``args`` (no file names): docs/overlays.md's args must work as written.

    --check comes first: it takes an optional FILE, so ``-o DIR --check spec.yaml`` would
    read spec.yaml as the file to compare with.
    """
    spec = tmp_path / "train.elastic.yaml"
    spec.write_text(EXAMPLE.read_text(encoding="utf-8"), encoding="utf-8")
    docs = (ROOT / "docs" / "overlays.md").read_text(encoding="utf-8")
    config = docs[docs.index("# .pre-commit-config.yaml\n") :]
    (repo,) = yaml.safe_load(config[: config.index("```")])["repos"]
    (entry,) = repo["hooks"]
    assert entry["id"] == "elastic-compile-check"
    args = entry["args"]
    assert args == ["--check", "-o", "deploy/base", "--message-format", "github", "train.elastic.yaml"]
    assert _run(*args[1:], cwd=tmp_path).returncode == 0  # the command that wrote the base
    assert _run(*args, cwd=tmp_path).returncode == 0
    (tmp_path / "deploy" / "base" / "pytorchjob.yaml").write_text("edited: by hand\n", encoding="utf-8")
    stale = _run(*args, cwd=tmp_path)
    assert stale.returncode == 1
    # GitHub's annotation for the drift, on the stale file (the diff itself stays on stdout)
    assert stale.stderr == (
        "::error file=deploy/base/pytorchjob.yaml,line=1,col=1,title=stale::stale: a write would change it from line "
        "1; rerun without --check to update it\n"
    )
