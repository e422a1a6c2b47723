"""Fixtures for ``extends:``: a working tree of spec files, and compiling one of them with its bases."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from extends_helpers import Write


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty working tree, the current directory (the boundary bases must stay inside)."""
    root = tmp_path / "repo"
    root.mkdir()
    (root / ".git").mkdir()
    monkeypatch.chdir(root)
    return root


@pytest.fixture
def write(tree: Path) -> Write:
    """``write({"a/b.elastic.yaml": "text"})``: files below the tree (dedented)."""

    def _write(files: dict[str, str]) -> None:
        for rel, text in files.items():
            path = tree / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(textwrap.dedent(text))

    return _write
