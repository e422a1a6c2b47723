"""Compiler and entrypoint agree: a compiled PyTorchJob runs, pod by pod, as the operator would run it.

The manifest is compiled from examples/cpu-ddp.yaml; each pod's command and environment come
from ``elastic_compile.localrun.kubeflow`` (what the training operator v1.9.4 injects:
pkg/controller.v1/pytorch/envvar.go, elastic.go); only the rendezvous host and the pod IPs become 127.0.0.1.
Each pod is a separate process group, as separate pods would be.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from elastic_compile import contract
from elastic_compile.compiler.pipeline import compile_path
from elastic_compile.localrun.kubeflow import pods

ROOT = Path(__file__).resolve().parents[1]
LAUNCHER = [sys.executable, "-m", "elastic_compile.entrypoint"]
TIMEOUT = 240


def _base_env() -> dict[str, str]:
    # What a container image would have: a PATH and a Python; nothing from this test's environment.
    keep = ("PATH", "HOME", "LANG", "PIP_FIND_LINKS", "VIRTUAL_ENV")
    return {k: os.environ[k] for k in keep if k in os.environ}


def test_compiled_example_trains_across_two_pods() -> None:
    torch = pytest.importorskip("torch", reason="the entrypoint needs torch (test extra)")
    del torch
    job = compile_path(ROOT / "examples" / "cpu-ddp.yaml").outputs[0].doc
    workers = pods(job)
    assert [p.name for p in workers] == ["cpu-ddp-worker-0", "cpu-ddp-worker-1"]
    first = workers[0]
    assert first.argv[0] == contract.LAUNCHER
    assert first.env[contract.PET_NNODES] == "2:2"
    assert first.env[contract.PET_RDZV_ENDPOINT] == f"127.0.0.1:{contract.OPERATOR_DEFAULT_PORT}"
    assert first.env[contract.ENV_POD_NAME] == "cpu-ddp-worker-0"
    assert first.env[contract.ENV_JOB_NAME] == "cpu-ddp"

    procs = []
    for pod in workers:
        argv = [*LAUNCHER, *pod.argv[1:]]
        procs.append(subprocess.Popen(
            argv, cwd=ROOT / "examples", env={**_base_env(), **pod.env},
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        ))  # fmt: skip
    outputs = []
    try:
        for proc in procs:
            out, _ = proc.communicate(timeout=TIMEOUT)
            outputs.append(out)
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    report = "\n".join(
        f"--- {p.name} (exit {proc.returncode})\n{out}" for p, proc, out in zip(workers, procs, outputs, strict=True)
    )
    assert [proc.returncode for proc in procs] == [0, 0], report
    everything = "".join(outputs)
    assert "done world_size 4" in everything, report
    assert "step 19 loss" in everything, report
    # elastic-launch read the operator's topology and the compiler's baked timeouts
    assert "run id default.cpu-ddp" in everything, report
