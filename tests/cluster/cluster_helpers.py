"""Helpers for the cluster-correctness tests (issue 10): compile through the CLI, in-process.

``compile_cli`` runs ``elastic-compile`` exactly as a user does (``main()`` with argv), on a
spec written to a temporary file, and returns the exit status, stdout, stderr and the parsed
documents. Every test here goes through the CLI: a rule that only a Python call would hit is
not a rule a user ever meets.
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from support.specs import PINNED

from elastic_compile.compiler.cli import main

#: A spec every test starts from: the smallest valid one, with a pinned image.
BASE = PINNED


@dataclass(frozen=True)
class Run:
    """One ``elastic-compile`` run."""

    status: int
    out: str
    err: str

    @property
    def docs(self) -> list[dict[str, Any]]:
        return [d for d in yaml.safe_load_all(self.out) if d is not None]

    @property
    def job(self) -> dict[str, Any]:
        return next(d for d in self.docs if d.get("kind") == "PyTorchJob")

    @property
    def pod(self) -> dict[str, Any]:
        """The Worker pod spec of the PyTorchJob."""
        spec: dict[str, Any] = self.job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
        return spec

    @property
    def training(self) -> dict[str, Any]:
        return next(c for c in self.pod["containers"] if c["name"] == "pytorch")

    @property
    def errors(self) -> list[str]:
        return self.err.splitlines()


def compile_cli(tmp_path: Path, text: str, *argv: str) -> Run:
    """Write ``text`` to ``tmp_path/s.yaml`` and run ``elastic-compile s.yaml ARGV``."""
    spec = tmp_path / "s.yaml"
    spec.write_text(text)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main([str(spec), *argv])
    return Run(status, out.getvalue(), err.getvalue().replace(f"{spec}:", "s.yaml:"))


def run_cli(path: Path, *argv: str) -> Run:
    """``elastic-compile run PATH ARGV`` in-process (``--dry-run`` starts nothing)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(["run", str(path), *argv])
    return Run(status, out.getvalue(), err.getvalue())
