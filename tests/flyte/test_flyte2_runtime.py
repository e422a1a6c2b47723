"""The Flyte 2 pods, run here as the cluster would run them: flyte's ``a0`` runtime, real torch elastic.

The task is defined with ``environment_kwargs`` and serialized with ``flyte.extras.serialize``;
each "pod" is a process running exactly the serialized primary container's args with its
env, plus what the backend and the training operator add (the action's names and paths,
and ``PET_RDZV_ENDPOINT`` pointing at worker-0, here 127.0.0.1). flyteplugins-pytorch
then calls ``elastic_launch`` with our rendezvous settings, c10d and gloo on loopback.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from flyte_helpers import spec_text

MODULE = """
import os
from pathlib import Path

import flyte

from elastic_compile.flyte2 import environment_kwargs

env = flyte.TaskEnvironment(**environment_kwargs(Path(__file__).with_name("elastic.yaml")))


@env.task
def train(label: str = "x") -> str | None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    total = torch.ones(1) * (dist.get_rank() + 1)
    dist.all_reduce(total)
    seen = {k: os.environ.get(k) for k in ("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE",
                                           "NCCL_DEBUG")}
    out = f"{label} rank={dist.get_rank()} world={dist.get_world_size()} sum={total.item():g} {seen}"
    dist.destroy_process_group()
    return out
"""

# What the backend substitutes into the container's args ({{.input}}, ...), per pod.
TEMPLATES = {
    "{{.input}}": "{dir}/inputs.pb",
    "{{.outputPrefix}}": "{dir}/outputs",
    "{{.rawOutputDataPrefix}}": "{dir}/raw",
    "{{.checkpointOutputPrefix}}": "{dir}/checkpoint",
    "{{.prevCheckpointPrefix}}": "",
    "{{.runName}}": "r1",
    "{{.actionName}}": "a0",
    "{{.runStartTime}}": "2026-01-01T00:00:00Z",
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _serialized(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **fields: Any) -> dict[str, Any]:
    from flyte.extras import serialize
    from flyte.models import SerializationContext
    from google.protobuf.json_format import MessageToDict

    (tmp_path / "elastic.yaml").write_text(spec_text(command=None, function="flyte2task:train", **fields))
    (tmp_path / "flyte2task.py").write_text(textwrap.dedent(MODULE))
    loader = importlib.util.spec_from_file_location("flyte2task", tmp_path / "flyte2task.py")
    assert loader is not None and loader.loader is not None
    module = importlib.util.module_from_spec(loader)
    monkeypatch.setitem(sys.modules, "flyte2task", module)  # each test's own, gone after it
    loader.loader.exec_module(module)
    ctx = SerializationContext(version="v1", project="proj", domain="dev", root_dir=tmp_path)
    spec: dict[str, Any] = MessageToDict(serialize(module.train, ctx))
    return spec


def _run_pods(tmp_path: Path, spec: dict[str, Any], pods: int) -> list[Any]:
    """Start every pod at once, wait for all, return each pod's outputs (flyteidl2 Outputs)."""
    from flyteidl2.task import common_pb2

    template = spec["taskTemplate"]
    primary = next(c for c in template["k8sPod"]["podSpec"]["containers"] if c["name"] == "pytorch")
    endpoint = f"127.0.0.1:{_free_port()}"
    procs = []
    for index in range(pods):
        pod_dir = tmp_path / f"pod-{index}"
        for sub in ("outputs", "raw", "checkpoint"):  # local paths stand in for the blob store
            (pod_dir / sub).mkdir(parents=True)
        (pod_dir / "inputs.pb").write_bytes(common_pb2.Inputs().SerializeToString())
        args = list(primary["args"])
        for placeholder, value in TEMPLATES.items():
            args = [a.replace(placeholder, value.format(dir=pod_dir)) for a in args]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PET_", "TORCHELASTIC_"))}
        env.update({e["name"]: e["value"] for e in primary.get("env", []) if "value" in e})
        env.update({
            "_U_RUN_BASE": str(pod_dir / "base"), "_U_ORG_NAME": "o",
            "FLYTE_INTERNAL_EXECUTION_PROJECT": "proj", "FLYTE_INTERNAL_EXECUTION_DOMAIN": "dev",
        })  # fmt: skip
        if template["type"] == "pytorch":
            env["PET_RDZV_ENDPOINT"] = endpoint  # the operator's, for every worker pod
        a0 = Path(sys.executable).with_name(args[0])
        procs.append(subprocess.Popen([str(a0), *args[1:]], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))  # fmt: skip
    logs = [p.communicate(timeout=240)[0] for p in procs]
    outputs = []
    for index, (proc, log) in enumerate(zip(procs, logs, strict=True)):
        (tmp_path / f"pod-{index}" / "log.txt").write_text(log)
        assert proc.returncode == 0, log[-3000:]
        out = common_pb2.Outputs()
        out.ParseFromString((tmp_path / f"pod-{index}" / "outputs" / "outputs.pb").read_bytes())
        outputs.append(out)
    return outputs


def _value(outputs: Any) -> str | None:
    (literal,) = outputs.literals
    union = literal.value.scalar.union.value.scalar
    return union.primitive.string_value if union.HasField("primitive") else None


@pytest.mark.slow
def test_two_pods_rendezvous_and_only_rank_0_returns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = _serialized(tmp_path, monkeypatch, nnodes=2, nproc_per_node=2, monitor_interval=0.5,
                       shutdown_timeout=40, env={"NCCL_DEBUG": "WARN"})  # fmt: skip
    assert spec["taskTemplate"]["type"] == "pytorch"
    values = [_value(o) for o in _run_pods(tmp_path, spec, pods=2)]
    seen = "{'TORCH_ELASTIC_SHUTDOWN_TIMEOUT': '40', 'TORCH_DISABLE_SHARE_RDZV_TCP_STORE': '1', 'NCCL_DEBUG': 'WARN'}"
    # Ranks 0-3 add 1+2+3+4. The pod without global rank 0 returns None: multi-node tasks
    # need an Optional return (flyte-sdk#1398).
    assert sorted(values, key=lambda v: v is None) == [f"x rank=0 world=4 sum=10 {seen}", None]
