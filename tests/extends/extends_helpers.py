"""Helpers for the ``extends:`` tests: compile a spec file with its bases, and read the pod it gives."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from elastic_compile.compiler.pipeline import Compiled, compile_path, resolver

#: The ``write`` fixture: ``write({"a/b.elastic.yaml": "text"})`` writes files below the tree.
Write = Callable[[dict[str, str]], None]

#: What every job needs besides its bases (the image and the command may come from a base).
JOB = "name: job\ncommand: [python, train.py]\n"


def compile_file(path: str, *targets: str) -> Compiled:
    """``path`` compiled with its bases, the boundary being the current directory."""
    return compile_path(path, targets or ("pytorchjob",), bases=resolver(Path.cwd()))


def pod(compiled: Compiled) -> dict[str, Any]:
    """The worker pod spec of the compiled PyTorchJob."""
    doc = compiled.outputs[0].doc
    spec: dict[str, Any] = doc["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    return spec


def container(compiled: Compiled, name: str = "pytorch") -> dict[str, Any]:
    """A container of the compiled worker pod, by name (a sidecar is a native sidecar, in initContainers)."""
    spec = pod(compiled)
    found: dict[str, Any] = next(c for c in [*spec["containers"], *spec.get("initContainers", [])] if c["name"] == name)
    return found


def user_env(compiled: Compiled) -> list[dict[str, Any]]:
    """The training container's env without the compiler's downward-API entries."""
    return [e for e in container(compiled).get("env", []) if not e["name"].startswith("ELASTIC_LAUNCH_")]
