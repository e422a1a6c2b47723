"""Our base keeps every built-in kind merging exactly as kustomize does without it, with the real kubectl.

A base's ``openapi.json`` replaces kustomize's built-in schema for the whole build (the
overlay's own Deployments, Services, CronJobs ...). Two overlays, built with and without
our base beside the same objects and patches, must give the same objects:

* every built-in kind our file names, generated from the file itself: each list it merges
  holds one entry with a field only the base has, and the patch brings the same entry
  and a new one (a merge keeps the base's field, a replace loses it), nested lists too;
* a realistic overlay: a Deployment with a sidecar, a StatefulSet, a Job, a CronJob, a
  DaemonSet, a Pod, a Service, a ConfigMap and a Secret, with namespace, name prefix,
  labels, images, replicas, a generated ConfigMap and strategic-merge and JSON6902 patches.

In the same build, the PyTorchJob's containers merge by name.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from elastic_compile.compiler import kustomize
from elastic_compile.compiler.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "ddp-2x8-gpu.yaml"
Build = Callable[[Path], list[dict[str, Any]]]
# Only the base has it: a merge keeps it, a replace drops it.
BASE_ONLY = "zzBaseOnly"
MAX_DEPTH = 8


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ours")
    assert main([str(EXAMPLE), "-o", str(root / "base"), "--root", str(root)]) == 0
    return root / "base"


def _write(directory: Path, resources: list[str], **fields: Any) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    doc = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": resources, **fields}
    (directory / "kustomization.yaml").write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return directory


def _with_and_without(
    tmp_path: Path, base: Path, objects: list[dict[str, Any]], build: Build, **fields: Any
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The same overlay over ``objects``, built beside our base and alone."""
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "objects.yaml").write_text(yaml.safe_dump_all(objects, sort_keys=False), encoding="utf-8")
    _write(theirs, ["objects.yaml"])
    results = []
    for name, resources in (
        ("with", [os.path.relpath(base, tmp_path / "with"), "../theirs"]),
        ("without", ["../theirs"]),
    ):
        overlay = tmp_path / name
        overlay.mkdir()
        for file in tmp_path.glob("*.patch.yaml"):
            (overlay / file.name).write_text(file.read_text(encoding="utf-8"), encoding="utf-8")
        results.append(build(_write(overlay, resources, **fields)))
    return results[0], results[1]


def _others(docs: list[dict[str, Any]]) -> dict[tuple[str, str, str], dict[str, Any]]:
    return {(d["apiVersion"], d["kind"], d["metadata"]["name"]): d for d in docs if d["kind"] != "PyTorchJob"}


# --------------------------------------------------------------------------- every kind, every merged list


class _Sample:
    """Objects and patches that exercise each list our file merges, from the file itself."""

    def __init__(self, definitions: Mapping[str, Any]) -> None:
        self.defs = definitions

    def of(self, name: str, patch: bool, depth: int = 0) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if depth > MAX_DEPTH:
            return out
        for field, node in self.defs.get(name, {}).get("properties", {}).items():
            if field in ("apiVersion", "kind"):
                continue
            value = self.value(node, patch, depth + 1)
            if value is not None:
                out[field] = value
        return out

    def value(self, node: Mapping[str, Any], patch: bool, depth: int) -> Any:
        if "$ref" in node:
            inner = self.of(node["$ref"].rsplit("/", 1)[-1], patch, depth)
            return inner or None
        if "additionalProperties" in node:
            inner = self.value(node["additionalProperties"], patch, depth)
            return None if inner is None else {"some-key": inner}
        if "x-kubernetes-patch-strategy" not in node and "items" not in node:
            return None
        items = node.get("items", {})
        key = node.get("x-kubernetes-patch-merge-key")
        if key is None:
            if "$ref" in items:
                inner = self.value(items, patch, depth)
                return None if inner is None else [inner if patch else {**inner, BASE_ONLY: "x"}]
            return ["from-patch"] if patch else ["from-base"] if "x-kubernetes-patch-strategy" in node else None
        inner = self.value(items, patch, depth) or {}
        first = {**inner, key: self._key_value(key, 1)}
        if not patch:
            return [{**first, BASE_ONLY: "kept when merged"}]
        return [first, {key: self._key_value(key, 2)}]

    @staticmethod
    def _key_value(key: str, n: int) -> Any:
        # Ports and the like are numbers; kustomize compares what it is given.
        return n if key in {"containerPort", "port"} else f"k{n}"


def test_every_builtin_kind_merges_as_without_our_base(tmp_path: Path, base: Path, kustomize_build: Build) -> None:
    schema = kustomize.openapi_schema()
    sample = _Sample(schema["definitions"])
    objects, patches = [], []
    for name, definition in sorted(schema["definitions"].items()):
        for gvk in definition.get("x-kubernetes-group-version-kind", []):
            if gvk["group"] in {g.group for g in kustomize.custom_kinds()}:
                continue
            api_version = f"{gvk['group']}/{gvk['version']}" if gvk["group"] else gvk["version"]
            meta = {"name": f"sample-{gvk['kind'].lower()}"}
            body = {k: v for k, v in sample.of(name, patch=False).items() if k != "metadata"}
            change = {k: v for k, v in sample.of(name, patch=True).items() if k != "metadata"}
            objects.append({"apiVersion": api_version, "kind": gvk["kind"], "metadata": meta, **body})
            patches.append({"apiVersion": api_version, "kind": gvk["kind"], "metadata": meta, **change})
    assert len(objects) > 50, "every built-in kind with a merged list"
    for index, patch in enumerate(patches):
        (tmp_path / f"p{index}.patch.yaml").write_text(yaml.safe_dump(patch), encoding="utf-8")
    ours, theirs = _with_and_without(
        tmp_path, base, objects, kustomize_build, patches=[{"path": f"p{i}.patch.yaml"} for i in range(len(patches))]
    )
    assert _others(ours) == _others(theirs)
    # The sample does test merging: kustomize kept the base-only fields in the merged lists.
    deployment = _others(theirs)[("apps/v1", "Deployment", "sample-deployment")]
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["k1", "k2"] and containers[0][BASE_ONLY] == "kept when merged"


# --------------------------------------------------------------------------- what users write

OBJECTS = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: tensorboard, namespace: ml-team}
spec:
  replicas: 1
  selector: {matchLabels: {app: tensorboard}}
  template:
    metadata: {labels: {app: tensorboard}}
    spec:
      containers:
        - name: tensorboard
          image: tensorflow/tensorflow:2.15.0
          command: [tensorboard, --logdir, /logs]
          ports: [{containerPort: 6006, name: http}]
          envFrom: [{configMapRef: {name: settings}}]
          volumeMounts: [{name: logs, mountPath: /logs}]
        - name: sync
          image: rclone/rclone:1.66
          args: [sync, s3:bucket/logs, /logs]
      volumes: [{name: logs, emptyDir: {}}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: store, namespace: ml-team}
spec:
  serviceName: store
  selector: {matchLabels: {app: store}}
  template:
    metadata: {labels: {app: store}}
    spec:
      containers: [{name: redis, image: redis:7, ports: [{containerPort: 6379}]}]
  volumeClaimTemplates:
    - metadata: {name: data}
      spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}
---
apiVersion: batch/v1
kind: Job
metadata: {name: prepare, namespace: ml-team}
spec:
  template:
    spec:
      restartPolicy: Never
      initContainers: [{name: fetch, image: busybox:1.36, command: [wget, http://data]}]
      containers: [{name: prepare, image: python:3.12, command: [python, prep.py], env: [{name: A, value: "1"}]}]
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: cleanup, namespace: ml-team}
spec:
  schedule: "0 3 * * *"
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: OnFailure
          containers: [{name: cleanup, image: busybox:1.36, command: [sh, -c, rm -rf /tmp/x]}]
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: node-exporter, namespace: ml-team}
spec:
  selector: {matchLabels: {app: ne}}
  template:
    metadata: {labels: {app: ne}}
    spec:
      tolerations: [{operator: Exists}]
      containers: [{name: exporter, image: prom/node-exporter:v1.8.0, ports: [{containerPort: 9100}]}]
---
apiVersion: v1
kind: Pod
metadata: {name: debug, namespace: ml-team}
spec:
  containers: [{name: shell, image: busybox:1.36, command: [sleep, infinity]}]
---
apiVersion: v1
kind: Service
metadata: {name: tensorboard, namespace: ml-team}
spec:
  selector: {app: tensorboard}
  ports: [{name: http, port: 80, targetPort: 6006}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings, namespace: ml-team}
data: {LOG_LEVEL: info}
---
apiVersion: v1
kind: Secret
metadata: {name: token, namespace: ml-team}
stringData: {token: placeholder}
"""

PATCHES = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: tensorboard, namespace: ml-team}
spec:
  template:
    spec:
      containers:
        - name: tensorboard
          env: [{name: TB_PORT, value: "6006"}]
          ports: [{containerPort: 6006, name: web}]
          volumeMounts: [{name: cache, mountPath: /cache}]
      volumes: [{name: cache, emptyDir: {medium: Memory}}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: store, namespace: ml-team}
spec:
  template:
    spec:
      containers:
        - {name: redis, args: [--appendonly, "yes"]}
        - {name: exporter, image: oliver006/redis_exporter:v1.62.0}
---
apiVersion: batch/v1
kind: Job
metadata: {name: prepare, namespace: ml-team}
spec:
  template:
    spec:
      initContainers: [{name: fetch, env: [{name: PROXY, value: http://proxy}]}]
      containers: [{name: prepare, env: [{name: B, value: "2"}]}]
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: cleanup, namespace: ml-team}
spec:
  jobTemplate:
    spec:
      template:
        spec:
          containers: [{name: cleanup, resources: {limits: {memory: 64Mi}}}]
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: node-exporter, namespace: ml-team}
spec:
  template:
    spec:
      tolerations: [{key: gpu, operator: Exists}]
      containers: [{name: exporter, ports: [{containerPort: 9100, hostPort: 9100}]}]
---
apiVersion: v1
kind: Pod
metadata: {name: debug, namespace: ml-team}
spec:
  containers: [{name: shell, env: [{name: PS1, value: "$ "}]}]
---
apiVersion: v1
kind: Service
metadata: {name: tensorboard, namespace: ml-team}
spec:
  ports: [{name: metrics, port: 9090, targetPort: 9090}]
"""


def test_an_overlay_of_every_workload_kind_beside_our_base(tmp_path: Path, base: Path, kustomize_build: Build) -> None:
    job = yaml.safe_load((base / "pytorchjob.yaml").read_text(encoding="utf-8"))
    job_patch = {
        "apiVersion": job["apiVersion"], "kind": job["kind"], "metadata": copy.deepcopy(job["metadata"]),
        "spec": {"pytorchReplicaSpecs": {"Worker": {"template": {"spec": {"containers": [
            {"name": "pytorch", "env": [{"name": "EXTRA", "value": "1"}]},
            {"name": "log-shipper", "image": "fluent/fluent-bit:3.0"},
        ]}}}}},
    }  # fmt: skip
    for index, patch in enumerate(yaml.safe_load_all(PATCHES)):
        (tmp_path / f"k{index}.patch.yaml").write_text(yaml.safe_dump(patch), encoding="utf-8")
    ops = [{"op": "add", "path": "/spec/template/spec/containers/1/env", "value": [{"name": "C", "value": "3"}]}]
    fields = {
        "namespace": "ml-prod",
        "namePrefix": "prod-",
        "labels": [{"pairs": {"team": "ml"}, "includeSelectors": False}],
        "images": [{"name": "busybox", "newTag": "1.37"}],
        "replicas": [{"name": "tensorboard", "count": 2}],
        "configMapGenerator": [
            {"name": "settings", "namespace": "ml-team", "behavior": "merge", "literals": ["LOG_LEVEL=debug"]}
        ],
        "patches": [
            *({"path": f"k{i}.patch.yaml"} for i in range(len(list(yaml.safe_load_all(PATCHES))))),
            {"target": {"kind": "Deployment", "name": "tensorboard"}, "patch": yaml.safe_dump(ops)},
        ],
    }
    objects = list(yaml.safe_load_all(OBJECTS))
    ours, theirs = _with_and_without(tmp_path, base, objects, kustomize_build, **fields)
    assert _others(ours) == _others(theirs)
    assert len(_others(theirs)) == len(objects)
    deployment = _others(theirs)[("apps/v1", "Deployment", "prod-tensorboard")]
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["tensorboard", "sync"]  # the patch merged, the sidecar stayed
    assert containers[0]["command"] == ["tensorboard", "--logdir", "/logs"]
    # Our PyTorchJob in the same build: merged by name, nothing lost.
    (tmp_path / "job.patch.yaml").write_text(yaml.safe_dump(job_patch), encoding="utf-8")
    overlay = tmp_path / "job-overlay"
    _write(overlay, [os.path.relpath(base, overlay)], patches=[{"path": "job.patch.yaml"}])
    (overlay / "job.patch.yaml").write_text(yaml.safe_dump(job_patch), encoding="utf-8")
    (built,) = kustomize_build(overlay)
    merged = built["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    assert [c["name"] for c in merged] == ["pytorch", "log-shipper"]
    assert merged[0]["command"] == ["elastic-launch"] and {"name": "EXTRA", "value": "1"} in merged[0]["env"]
