"""``doctor`` and ``import`` on what the real ``kubectl kustomize`` prints, read from standard input.

A hand-written PyTorchJob without traps, a Service beside it, and an overlay whose JSON6902
patch scales the Workers past the elastic bounds (the slip DR006 names): doctor finds
nothing in the base, exactly that trap in the overlay, located in kustomize's output;
import reads the same output into a spec that compiles.
"""

from __future__ import annotations

import io
import subprocess
from pathlib import Path

import pytest
import yaml

from elastic_compile.compiler.cli import main
from elastic_compile.compiler.pipeline import compile_text

JOB = """\
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: bert}
spec:
  elasticPolicy: {rdzvBackend: c10d, minReplicas: 1, maxReplicas: 3, maxRestarts: 3}
  nprocPerNode: "2"
  pytorchReplicaSpecs:
    Worker:
      replicas: 2
      restartPolicy: OnFailure
      template:
        metadata:
          annotations: {sidecar.istio.io/inject: "false"}
        spec:
          containers:
            - name: pytorch
              image: ghcr.io/example/bert:1.0
              command: [torchrun, train.py]
              volumeMounts: [{name: dshm, mountPath: /dev/shm}]
          volumes:
            - {name: dshm, emptyDir: {medium: Memory}}
"""
SERVICE = "apiVersion: v1\nkind: Service\nmetadata: {name: tensorboard}\nspec:\n  ports: [{port: 6006}]\n"
SCALE = """\
- op: replace
  path: /spec/pytorchReplicaSpecs/Worker/replicas
  value: 5
"""


def _kustomize(kubectl: str, directory: Path) -> bytes:
    out = subprocess.run([kubectl, "kustomize", str(directory)], check=True, capture_output=True, timeout=120)
    return out.stdout


def _stdin(monkeypatch: pytest.MonkeyPatch, data: bytes) -> None:
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data)))


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path]:
    base, overlay = tmp_path / "base", tmp_path / "overlays" / "big"
    base.mkdir()
    overlay.mkdir(parents=True)
    (base / "job.yaml").write_text(JOB)
    (base / "service.yaml").write_text(SERVICE)
    (base / "kustomization.yaml").write_text("resources: [job.yaml, service.yaml]\n")
    (overlay / "scale.yaml").write_text(SCALE)
    (overlay / "kustomization.yaml").write_text(
        "resources: [../../base]\n"
        "patches:\n"
        "  - path: scale.yaml\n"
        "    target: {group: kubeflow.org, version: v1, kind: PyTorchJob, name: bert}\n"
    )
    return base, overlay


def test_doctor_on_kustomize_output(
    kubectl: str, layout: tuple[Path, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    base, overlay = layout
    _stdin(monkeypatch, _kustomize(kubectl, base))
    assert main(["doctor", "-"]) == 0
    assert capsys.readouterr().out == ""

    built = _kustomize(kubectl, overlay)
    _stdin(monkeypatch, built)
    assert main(["doctor", "-"]) == 1
    (line,) = capsys.readouterr().out.splitlines()
    where, _, message = line.partition(": spec.pytorchReplicaSpecs.Worker.replicas: ")
    assert message.startswith("DR006 elastic-bounds: 5 is outside elasticPolicy [1, 3]"), line
    # Located in kustomize's output (which reorders keys): the line that holds the replicas.
    file, row, _col = where.split(":")
    assert file == "<stdin>"
    assert built.decode().splitlines()[int(row) - 1].strip() == "replicas: 5"


def test_import_on_kustomize_output(
    kubectl: str, layout: tuple[Path, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    base, _overlay = layout
    _stdin(monkeypatch, _kustomize(kubectl, base))
    assert main(["import", "-"]) == 0
    out, err = capsys.readouterr()
    spec = yaml.safe_load(out)
    assert (spec["name"], spec["nnodes"], spec["nproc_per_node"]) == ("bert", "1:3", 2)
    assert "<stdin>:1:1: spec: note: skipped (kind Service)" in err
    assert compile_text(out, "spec.yaml").spec.nnodes.max == 3
