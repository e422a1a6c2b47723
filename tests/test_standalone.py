"""A plain clone is complete: nothing in it names the workspace it was developed in, and it tests alone.

Users clone the repository on its own. Any path outside it (the upstream CRDs the
developers keep beside their checkouts, reference notes) is absent there, so the product
and its tests find the CRDs only through ``$ELASTIC_COMPILE_CRDS`` and otherwise use the
compact schemas the package ships.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Spelled in two parts so that this file does not name it either.
WORKSPACE = "../" + "shared"


def _tracked() -> list[Path]:
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the tracked files are unknown")
    # Tracked files and new ones not ignored: what the next commit (and so a clone) holds.
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    )
    return [ROOT / name for name in out.stdout.decode().split("\0") if name]


def test_no_tracked_file_names_the_workspace() -> None:
    offenders = []
    for path in _tracked():
        if path.is_file() and WORKSPACE in path.read_text(encoding="utf-8", errors="replace"):
            offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []


def test_a_copy_with_nothing_beside_it_tests_alone(tmp_path: Path) -> None:
    """The tracked files alone, in a fresh directory, with no CRDs: the CRD checks run on the shipped schemas."""
    pytest.importorskip("jsonschema", reason="install the test extra: pip install -e '.[test]'")
    clone = tmp_path / "clone"
    for path in _tracked():
        if path.is_file():
            target = clone / path.relative_to(ROOT)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
    assert not (clone.parent / "shared").exists()
    env = {k: v for k, v in os.environ.items() if k != "ELASTIC_COMPILE_CRDS"}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "tests/test_crdcheck.py",
         "tests/test_compact_schemas.py", "tests/test_golden.py"],
        cwd=clone, env=env, capture_output=True, text=True, check=False, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    # The copy's package was the one tested (cwd comes first on sys.path), not this checkout's.
    probe = subprocess.run(
        [sys.executable, "-c", "import elastic_compile; print(elastic_compile.__file__)"],
        cwd=clone, env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert probe.stdout.startswith(str(clone))
    skipped = [line for line in result.stdout.splitlines() if line.startswith("SKIPPED")]
    assert skipped and all("ELASTIC_COMPILE_CRDS is not set" in line for line in skipped), skipped


def test_no_tracked_kubeconfig_holds_credentials() -> None:
    """A kubeconfig with a token, key or password is a reproduction's leftover, not part of the product.

    ``silent.kubeconfig`` (``token: SECRET``) sat at the root of the repository, referenced by
    nothing, after a red team's reproduction (red team 2, item 7). Tests write theirs in tmp_path.
    """
    credentials = ("token:", "client-key-data:", "password:")
    offenders = []
    for path in _tracked():
        if not path.is_file() or path.suffix not in ("", ".kubeconfig", ".yaml", ".yml", ".kc"):
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        if "kind: Config" in text and "clusters:" in text and any(c in text for c in credentials):
            offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []
