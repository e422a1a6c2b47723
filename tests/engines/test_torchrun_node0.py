"""Issue 27, class 8: ``launcher: torchrun`` on a TrainJob makes node 0 the store host explicitly.

torch 2.13's c10d backend, without ``is_host``, hosts the store on a pod whose hostname is the
endpoint's host or whose address the endpoint's name resolves to
(torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py:137-145, utils.py:117-166: run
below). Trainer's PET_MASTER_ADDR is <name>-node-0-0.<name>
(kubeflow/trainer@v2.3.0:pkg/runtime/framework/plugins/torch/torch.go:159-162), not node 0's
hostname <name>-node-0-0, so node 0 hosts only once DNS answers for it. The compiled TrainJob runs
torchrun under a POSIX shell that sets is_host from PET_NODE_RANK (the Job completion index,
torch.go:152-156). ``elastic-compile run`` refuses what leaves it to the guess: there every pod is
127.0.0.1, which always matches.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from elastic_compile.compiler.cli import main
from elastic_compile.compiler.importer import import_stream
from elastic_compile.compiler.output import stream_text
from elastic_compile.compiler.pipeline import compile_text
from elastic_compile.core.emit import to_yaml

SPEC = "name: tj\nimage: x:1.0\ncommand: [python, t.py]\nnnodes: 2\nnproc_per_node: 1\ntarget: trainjob\n"


def _trainer(text: str) -> dict[str, object]:
    return compile_text(text, "s.yaml").outputs[-1].doc["spec"]["trainer"]  # type: ignore[no-any-return]


def test_the_hostname_guess_needs_dns_for_trainers_address() -> None:
    """What torch decides without is_host: a name that does not resolve here is never this machine."""
    pytest.importorskip("torch")
    import socket

    from torch.distributed.elastic.rendezvous.utils import _matches_machine_hostname

    assert _matches_machine_hostname(socket.gethostname())
    assert not _matches_machine_hostname("tj-node-0-0.tj.invalid")  # PET_MASTER_ADDR before DNS answers


@pytest.mark.parametrize(("rank", "host"), [("0", "true"), ("1", "false"), ("7", "false")])
def test_the_shell_gives_node_0_the_store(tmp_path: Path, rank: str, host: str) -> None:
    trainer = _trainer(SPEC + "launcher: torchrun\n")
    command, args = list(trainer["command"]), list(trainer["args"])  # type: ignore[call-overload]
    # A stand-in torchrun on PATH that prints the arguments it gets, one per line.
    fake = tmp_path / "torchrun"
    fake.write_text('#!/bin/sh\nfor a in "$@"; do echo "$a"; done\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    env = {"PATH": f"{tmp_path}:{os.environ['PATH']}", "PET_NODE_RANK": rank}
    out = subprocess.run([*command, *args], env=env, capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[:2] == ["--rdzv-conf", f"{args[1]},is_host={host}"]
    assert out[2:] == args[2:]  # every other argument as compiled


def test_the_compiled_form_reads_back_as_launcher_torchrun() -> None:
    first = stream_text([compile_text(SPEC + "launcher: torchrun\n", "s.yaml")], "yaml")
    (imported,) = import_stream(first, "tj.yaml")
    assert "launcher: torchrun" in imported.text and [str(n) for n in imported.notes] == []
    assert stream_text([compile_text(imported.text, "i.yaml")], "yaml") == first


HAND_WRITTEN = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1",
    "kind": "TrainJob",
    "metadata": {"name": "hw"},
    "spec": {
        "runtimeRef": {"name": "torch-distributed"},
        "trainer": {"image": "x:1.0", "numNodes": 2, "numProcPerNode": 1, "command": ["torchrun", "t.py"]},
    },
}


@pytest.mark.parametrize(
    ("flags", "refused"),
    [
        (["--rdzv-backend", "c10d", "--rdzv-endpoint", "$(PET_MASTER_ADDR):$(PET_MASTER_PORT)"], True),
        (["--rdzv-backend", "c10d", "--rdzv-endpoint", "$(PET_MASTER_ADDR):29500", "--rdzv-conf", "is_host=0"], False),
        ([], False),  # static, Trainer's default for torchrun: rank 0 hosts (static_tcp_rendezvous.py:65)
        # Red-team: elastic-launch told the endpoint but not --rdzv-at-master compares it with its pod's name
        # (JobSet's has a random suffix), then leaves it to torch's guess too.
        (["elastic-launch", "--rdzv-endpoint", "$(PET_MASTER_ADDR):$(PET_MASTER_PORT)", "--", "python"], True),
        (["elastic-launch", "--rdzv-at-master", "--", "python"], False),
    ],
)
def test_run_refuses_what_the_cluster_leaves_to_a_guess(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], refused: bool
) -> None:
    manifest = tmp_path / "job.yaml"
    job = json.loads(json.dumps(HAND_WRITTEN))
    job["spec"]["trainer"]["command"] = [*(flags if flags[:1] == ["elastic-launch"] else ["torchrun", *flags]), "t.py"]
    manifest.write_text(to_yaml([job]))
    code = main(["run", "--dry-run", str(manifest)])
    err = capsys.readouterr().err
    assert (code != 0) == refused, err
    if refused:
        assert "meets with c10d at hw-node-0-0.hw without is_host: on the cluster node 0 (hw-node-0-0)" in err
        assert "here every pod is 127.0.0.1, which always passes" in err


def test_run_takes_the_compiled_form(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC + "launcher: torchrun\n")
    assert main(["run", "--dry-run", str(spec)]) == 0
    pods = json.loads(capsys.readouterr().out)["pods"]
    assert [p["env"]["PET_NODE_RANK"] for p in pods] == ["0", "1"]
    assert all(p["command"][:2] == ["sh", "-c"] for p in pods)
