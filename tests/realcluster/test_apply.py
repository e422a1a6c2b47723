"""``elastic-compile apply`` against the real control plane, run as a user runs it (a subprocess).

The command dry-runs every object on the server, then applies them by server-side apply under
the field manager ``elastic-compile`` (docs/apply.md). Each test uses a fresh namespace.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from kube_helpers import REPO, Cluster, apply, wait_for_pods
from specs import EXAMPLES, GOLDEN

CPU_DDP = EXAMPLES / "cpu-ddp.yaml"


def _apply(
    cluster: Cluster, tmp_path: Path, *args: str, kubeconfig: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``elastic-compile apply ARGS`` with the cluster's kubeconfig and an empty TMPDIR of its own."""
    tmp = tmp_path / "tmpdir"
    tmp.mkdir(exist_ok=True)
    env = {**os.environ, "KUBECONFIG": str(kubeconfig or cluster.kubeconfig), "TMPDIR": str(tmp)}
    command = [sys.executable, "-m", "elastic_compile.compiler.cli", "apply", *args]
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, check=False)


def _get(cluster: Cluster, api_version: str, kind: str, name: str, namespace: str) -> Any:
    from kubernetes.dynamic.exceptions import NotFoundError

    resource = cluster.dynamic.resources.get(api_version=api_version, kind=kind)
    try:
        return resource.get(name=name, namespace=namespace)
    except NotFoundError:
        return None


def test_dry_run_stores_nothing(cluster: Cluster, dry_namespace: str, tmp_path: Path) -> None:
    done = _apply(cluster, tmp_path, str(CPU_DDP), "-n", dry_namespace, "--dry-run=server")
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == "pytorchjob.kubeflow.org/cpu-ddp created (server dry run)\n"
    assert _get(cluster, "kubeflow.org/v1", "PyTorchJob", "cpu-ddp", dry_namespace) is None
    assert list((tmp_path / "tmpdir").iterdir()) == []  # nothing written, not even the client's temp files


def test_apply_creates_then_configures_under_our_field_manager(
    cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    spec = tmp_path / "elastic.yaml"
    spec.write_text(CPU_DDP.read_text() + "\nnetwork_policy: true\nlauncher: bundled\n")
    done = _apply(cluster, tmp_path, str(spec), "-n", namespace, "--root", str(tmp_path))
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    lines = done.stdout.splitlines()
    assert [line.rpartition(" ")[2] for line in lines] == ["created"] * 3
    assert [line.split("/")[0] for line in lines] == [
        "configmap",
        "pytorchjob.kubeflow.org",
        "networkpolicy.networking.k8s.io",
    ]
    job = _get(cluster, "kubeflow.org/v1", "PyTorchJob", "cpu-ddp", namespace)
    assert job is not None
    managers = {m["manager"]: m["operation"] for m in job.to_dict()["metadata"]["managedFields"]}
    assert managers["elastic-compile"] == "Apply"
    wait_for_pods(cluster, namespace, "training.kubeflow.org/job-name=cpu-ddp", 2)

    again = _apply(cluster, tmp_path, str(spec), "-n", namespace, "--root", str(tmp_path))
    assert again.returncode == 0
    assert [line.rpartition(" ")[2] for line in again.stdout.splitlines()] == ["configured"] * 3


def test_trainjob_with_its_own_runtime(cluster: Cluster, namespace: str, tmp_path: Path) -> None:
    """Trainer's webhook cannot judge a TrainJob before its runtime exists: the dry run says so and
    leaves it out; the apply creates the runtime first, and Trainer runs the job."""
    spec = GOLDEN / "pod-template-sidecar" / "elastic.yaml"
    apply(cluster, {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "trainer"}}, namespace=namespace)
    dry = _apply(cluster, tmp_path, str(spec), "-t", "trainjob", "-n", namespace, "--dry-run=server")
    assert dry.returncode == 0
    assert dry.stdout == "trainingruntime.trainer.kubeflow.org/vit-train created (server dry run)\n"
    assert "trainjob.trainer.kubeflow.org/vit-train: not dry-run" in dry.stderr
    done = _apply(cluster, tmp_path, str(spec), "-t", "trainjob", "-n", namespace)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "trainingruntime.trainer.kubeflow.org/vit-train created",
        "trainjob.trainer.kubeflow.org/vit-train created",
    ]
    wait_for_pods(cluster, namespace, "jobset.sigs.k8s.io/jobset-name=vit-train", 2)


def test_a_refusal_is_located_and_nothing_is_applied(cluster: Cluster, dry_namespace: str, tmp_path: Path) -> None:
    """The TrainJob names a runtime the cluster does not have: Trainer's webhook refuses it in the
    dry run, the line points at the spec, and nothing is created."""
    spec = GOLDEN / "trainjob-named-runtime" / "elastic.yaml"
    done = _apply(cluster, tmp_path, str(spec.relative_to(REPO)), "-n", dry_namespace)
    assert done.returncode == 1
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    # Located at the spec field the webhook's field path (spec.runtimeRef) comes from.
    start = f"{spec.relative_to(REPO)}:9:12: trainjob.runtime: the server's dry run refused TrainJob resnet: "
    assert line.startswith(start), line
    assert 'admission webhook "validator.trainjob.trainer.kubeflow.org" denied the request' in line
    assert "torch-a100" in line
    assert _get(cluster, "trainer.kubeflow.org/v1alpha1", "TrainJob", "resnet", dry_namespace) is None


def test_a_conflict_needs_force_conflicts(cluster: Cluster, dry_namespace: str, tmp_path: Path) -> None:
    """Another field manager owns a field we set: refused (409) unless --force-conflicts, as in kubectl."""
    assert _apply(cluster, tmp_path, str(CPU_DDP), "-n", dry_namespace).returncode == 0
    job = _get(cluster, "kubeflow.org/v1", "PyTorchJob", "cpu-ddp", dry_namespace).to_dict()
    theirs = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "cpu-ddp"},
        "spec": {
            "runPolicy": {"cleanPodPolicy": "All" if job["spec"]["runPolicy"]["cleanPodPolicy"] != "All" else "None"}
        },
    }
    body = yaml.safe_load(yaml.safe_dump(theirs))
    from kube_helpers import FIELD_MANAGER

    assert FIELD_MANAGER != "elastic-compile"
    apply(cluster, body, namespace=dry_namespace)  # the tests' field manager takes the field over (force)
    refused = _apply(cluster, tmp_path, str(CPU_DDP), "-n", dry_namespace)
    assert refused.returncode == 1
    assert "conflict" in refused.stderr.lower() and "cleanPodPolicy" in refused.stderr
    forced = _apply(cluster, tmp_path, str(CPU_DDP), "-n", dry_namespace, "--force-conflicts")
    assert forced.returncode == 0, forced.stderr
    assert forced.stdout == "pytorchjob.kubeflow.org/cpu-ddp configured\n"


def test_bad_input_and_an_unreachable_server(cluster: Cluster, dry_namespace: str, tmp_path: Path) -> None:
    mismatch = _apply(cluster, tmp_path, str(EXAMPLES / "ddp-2x8-gpu.yaml"), "-n", dry_namespace)
    assert mismatch.returncode == 2
    assert "examples/ddp-2x8-gpu.yaml:4:12: namespace: the spec's namespace is ml-team" in mismatch.stderr

    config = yaml.safe_load(cluster.kubeconfig.read_text())
    for entry in config["clusters"]:
        entry["cluster"]["server"] = "https://127.0.0.1:1"
    closed = tmp_path / "closed.kubeconfig"
    closed.write_text(yaml.safe_dump(config))
    done = _apply(cluster, tmp_path, str(CPU_DDP), "-n", dry_namespace, kubeconfig=closed)
    assert done.returncode == 1
    assert done.stderr.startswith("elastic-compile apply: error: cannot reach the API server at https://127.0.0.1:1")
    assert "Traceback" not in done.stderr

    missing = _apply(cluster, tmp_path, str(CPU_DDP), "--kubeconfig", str(tmp_path / "none"))
    assert missing.returncode == 2
    assert "elastic-compile: error: kubeconfig" in missing.stderr and "Traceback" not in missing.stderr
