"""Class 1 of issue 10: a pod that can never finish.

A regular container beside ``pytorch`` keeps running after training ends: with restartPolicy
Never or ExitCode the pod never reaches Succeeded or Failed, the PyTorchJob never completes and
holds its GPUs. The compiler makes every sidecar a native sidecar (an init container with
``restartPolicy: Always``, Kubernetes >= 1.29), says so in ``--explain``, and ``run`` reports a
regular sidecar in a manifest (an overlay's, say) as a pod that could never finish.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml
from cluster_helpers import BASE, compile_cli, run_cli

SIDECARS = """\
pod_template:
  spec:
    initContainers:
      - {name: fetch-data, image: ghcr.io/x/fetch:1}
    containers:
      - name: log-shipper
        image: fluent/fluent-bit:3.0
        env: [{name: PET_NNODES, value: mine}]
      - name: pytorch
        env: [{name: A, value: b}]
      - {name: metrics, image: ghcr.io/x/metrics:1}
"""


@pytest.mark.parametrize("target", ["pytorchjob", "podtemplate"])
def test_sidecars_become_native_sidecars_after_the_init_containers(tmp_path: Path, target: str) -> None:
    run = compile_cli(tmp_path, BASE + "nnodes: 2\n" + SIDECARS, "-t", target)
    assert run.status == 0, run.err
    doc = run.docs[0]
    pod = (
        doc["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
        if target == "pytorchjob"
        else doc["template"]["spec"]
    )
    assert [c["name"] for c in pod["containers"]] == ["pytorch"]
    # The order a regular container had: after the pod's own init containers.
    assert [(c["name"], c.get("restartPolicy")) for c in pod["initContainers"]] == [
        ("fetch-data", None),
        ("log-shipper", "Always"),
        ("metrics", "Always"),
    ]
    # Copied as written: the operator appends no env to init containers, so PET_* is the sidecar's own.
    assert pod["initContainers"][1]["env"] == [{"name": "PET_NNODES", "value": "mine"}]


def test_explain_says_which_sidecars_changed_and_why(tmp_path: Path) -> None:
    out = compile_cli(tmp_path, BASE + SIDECARS, "--explain").out
    for name in ("log-shipper", "metrics"):
        assert (
            f"# sidecar {name}: a native sidecar (initContainers, restartPolicy: Always; Kubernetes >= 1.29): as a "
            "regular container it would keep the pod Running after training ends, and the job would never complete"
        ) in out
    assert "# sidecar fetch-data" not in out and "# sidecar pytorch" not in out


@pytest.mark.parametrize(
    ("fragment", "path", "message"),
    [
        (
            "    initContainers: [{name: pytorch, image: a:1}]\n",
            "initContainers[0].name",
            "the training container's name",
        ),
        (
            "    initContainers: [{name: side, image: a:1}]\n    containers: [{name: side, image: b:1}]\n",
            "initContainers[0].name",
            "already the name of containers[0]; names are unique across containers and initContainers",
        ),
        (
            "    containers: [{name: side, image: b:1, restartPolicy: Always}]\n",
            "containers[0].restartPolicy",
            "already makes every sidecar a native sidecar",
        ),
    ],
)
def test_names_and_restart_policies_that_cannot_work(tmp_path: Path, fragment: str, path: str, message: str) -> None:
    run = compile_cli(tmp_path, BASE + "pod_template:\n  spec:\n" + fragment)
    assert run.status == 2
    assert any(f": pod_template.spec.{path}: " in e and message in e for e in run.errors), run.err


READINESS = (
    "pod_template:\n  spec:\n    containers:\n      - name: pytorch\n        readinessProbe: {httpGet: {port: 8080}}\n"
)


def test_a_readiness_probe_on_the_training_container_is_linted(tmp_path: Path) -> None:
    run = compile_cli(tmp_path, BASE + "nnodes: 1:4\n" + READINESS)
    assert run.status == 0
    [line] = run.errors
    assert line.startswith("s.yaml:9:25: pod_template.spec.containers[0].readinessProbe: warning EC114: ")
    assert "t-worker-0's name does not resolve" in line and "rdzv.read_timeout, 900 s" in line


@pytest.mark.parametrize("extra", ["", "nnodes: 2\nrdzv: {host: store.example}\n"])
def test_no_readiness_lint_where_nobody_resolves_worker_0(tmp_path: Path, extra: str) -> None:
    run = compile_cli(tmp_path, BASE + extra + READINESS)
    assert (run.status, run.err) == (0, "")


@pytest.mark.parametrize(("targets", "fires"), [(("trainjob",), False), (("pytorchjob",), True), (("all",), True)])
def test_the_readiness_lint_follows_the_engine(tmp_path: Path, targets: tuple[str, ...], fires: bool) -> None:
    """JobSet's headless service publishes not-ready pods (network.publishNotReadyAddresses defaults to
    true), so a TrainJob alone is not delayed; the same spec as a PyTorchJob is."""
    argv = [a for t in targets for a in ("-t", t)]
    run = compile_cli(tmp_path, BASE + "nnodes: 2\n" + READINESS, *argv)
    assert run.status == 0, run.err
    assert ("warning EC114" in run.err) is fires


# ----------------------------------------------------------------------------- elastic-compile run


def _manifest(tmp_path: Path, *, sidecar: bool) -> Path:
    """A compiled job whose training container exits 0 at once (real processes, no torch needed)."""
    job = compile_cli(tmp_path, BASE).job
    pod = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    pod["containers"][0]["command"] = [sys.executable, "-c", "print('trained')"]
    pod["containers"][0]["args"] = []
    if sidecar:  # what an overlay adds under containers, bypassing the compiler
        pod["containers"].append({"name": "log-shipper", "image": "fluent/fluent-bit:3.0"})
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def test_run_reports_a_regular_sidecar_as_a_pod_that_could_never_finish(tmp_path: Path) -> None:
    result = run_cli(_manifest(tmp_path, sidecar=True), "--workdir", str(tmp_path))
    assert result.status == 1, result.err
    assert "[t-worker-0] trained" in result.out
    assert "warning: container log-shipper is a regular sidecar" in result.err
    assert (
        "job could never finish: t-worker-0's training container exited 0, but the regular sidecar(s) log-shipper "
        "keep the pod Running: on the cluster the pod never reaches Succeeded or Failed" in result.err
    ), result.err
    assert "job t Stuck after" in result.err and "(t-worker-0 Stuck)" in result.err
    assert "job succeeded" not in result.err and "job t Succeeded" not in result.err


def test_the_same_job_without_the_sidecar_succeeds(tmp_path: Path) -> None:
    result = run_cli(_manifest(tmp_path, sidecar=False), "--workdir", str(tmp_path))
    assert result.status == 0, result.err
    assert "job t Succeeded after" in result.err
