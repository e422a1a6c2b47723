"""``launcher: bundled`` bases through the real ``kubectl kustomize``: the pods' volume follows the ConfigMap's name.

kustomize renames the ConfigMap under ``namePrefix``/``nameSuffix``, and knows that a pod
volume names a ConfigMap only in built-in kinds; our base's ``kustomizeconfig.yaml`` teaches it
the PyTorchJob's, the TrainJob's runtimePatches and our TrainingRuntime's. A volume left on
the old name would keep every pod in ContainerCreating.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from elastic_compile.compiler.cli import main
from elastic_compile.targets import bundle

Build = Callable[[Path], list[dict[str, Any]]]
SPEC = "name: demo\nimage: ghcr.io/example/train:1.0\ncommand: [python, train.py]\nnnodes: 2\nlauncher: bundled\n"


def _configmap_volumes(node: Any) -> Iterator[str]:
    """Every ``configMap.name`` of a pod volume anywhere in a document."""
    if isinstance(node, dict):
        for volume in node.get("volumes") or [] if isinstance(node.get("volumes"), list) else []:
            if isinstance(volume, dict) and isinstance(volume.get("configMap"), dict):
                yield volume["configMap"]["name"]
        for value in node.values():
            yield from _configmap_volumes(value)
    elif isinstance(node, list):
        for value in node:
            yield from _configmap_volumes(value)


@pytest.mark.parametrize(
    ("extra", "kinds"),
    [
        ("", ["ConfigMap", "PyTorchJob"]),
        ("target: trainjob\ntrainjob: {own_runtime: always}\n", ["ConfigMap", "TrainingRuntime", "TrainJob"]),
    ],
)
def test_name_prefix_and_suffix_reach_every_volume(
    tmp_path: Path, kustomize_build: Build, extra: str, kinds: list[str]
) -> None:
    spec = tmp_path / "elastic.yaml"
    spec.write_text(SPEC + extra, encoding="utf-8")
    base = tmp_path / "base"
    assert main([str(spec), "-o", str(base), "--root", str(tmp_path)]) == 0
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    kustomization = {"resources": ["../base"], "namePrefix": "team-", "nameSuffix": "-prod"}
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump(kustomization), encoding="utf-8")
    docs = kustomize_build(overlay)
    assert sorted(d["kind"] for d in docs) == sorted(kinds)
    (configmap,) = (d for d in docs if d["kind"] == "ConfigMap")
    name = f"team-demo-elastic-launch-{bundle.bundle().sha256[: bundle.NAME_DIGEST_LENGTH]}-prod"
    assert configmap["metadata"]["name"] == name
    assert configmap["data"][bundle.BUNDLE_KEY] == bundle.bundle().text  # the file, untouched
    referenced = [n for d in docs if d["kind"] != "ConfigMap" for n in _configmap_volumes(d)]
    assert referenced and set(referenced) == {name}, referenced
