"""Issue 27, class 5: env a generation never sets is the user's there.

The tables of elastic_compile/core/engine_env.py say which variables each engine injects, and
when. Here they are held to the two emulations ``elastic-compile run`` starts pods with, and
each reserved name is held to the generation that reserves it:

* training-operator v1 (kubeflow/trainer@v1.9.4:pkg/controller.v1/pytorch/envvar.go:43-127,
  master.go:33-62, elastic.go:68-197) appends PYTHONUNBUFFERED and the PET_* of the layout;
* Trainer v2.3 (kubeflow/trainer@v2.3.0:pkg/runtime/framework/plugins/torch/torch.go:110-225)
  upserts exactly five PET_* into container node and its webhook refuses them in trainer.env
  (kubeflow/trainer@v2.3.0:pkg/constants/constants.go:300, torch.go:66-77); PYTHONUNBUFFERED
  is the user's there.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from elastic_compile import contract
from elastic_compile.compiler import doctor
from elastic_compile.compiler.cli import main
from elastic_compile.compiler.importer import import_stream
from elastic_compile.compiler.output import stream_text
from elastic_compile.compiler.pipeline import compile_text
from elastic_compile.core import engine_env
from elastic_compile.core.emit import to_yaml
from elastic_compile.core.errors import SpecError
from elastic_compile.localrun import kubeflow, trainer
from elastic_compile.schema.models import TORCHRUN_ENV_OPTIONS, env_name_problem

SPEC = "name: tj\nimage: ghcr.io/x/y:1.0\ncommand: [python, t.py]\nnnodes: 2\nnproc_per_node: 2\n"


def _names(table: tuple[engine_env.Injected, ...], *whens: str) -> set[str]:
    return {row.name for row in table if row.when in whens}


def _pytorchjob(*, master: bool, policy: dict[str, Any] | None) -> dict[str, Any]:
    container = {"name": "pytorch", "image": "x:1", "command": ["torchrun", "t.py"]}
    replicas: dict[str, Any] = {"Worker": {"replicas": 2, "template": {"spec": {"containers": [container]}}}}
    if master:
        replicas["Master"] = {"replicas": 1, "template": {"spec": {"containers": [container]}}}
    spec: dict[str, Any] = {"pytorchReplicaSpecs": replicas}
    if policy is not None:
        spec["elasticPolicy"] = policy
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "j"}, "spec": spec}


FULL_POLICY = {"minReplicas": 1, "maxReplicas": 2, "maxRestarts": 3, "rdzvId": "r", "rdzvConf": [{"key": "a",
               "value": "b"}], "standalone": True}  # fmt: skip


@pytest.mark.parametrize(
    ("master", "policy"),
    [(False, None), (True, None), (False, {"minReplicas": 1, "maxReplicas": 2}), (True, FULL_POLICY),
     (False, FULL_POLICY)],
)  # fmt: skip
def test_v1_table_is_what_the_operator_emulation_appends(master: bool, policy: dict[str, Any] | None) -> None:
    # kubeflow/trainer@v1.9.4:pkg/controller.v1/pytorch/envvar.go:43-127: the same rows, the same conditions.
    job = _pytorchjob(master=master, policy=policy)
    expected = engine_env.operator_v1_names(master=master, elastic_policy=policy)
    for rtype in ("Worker", "Master") if master else ("Worker",):
        assert set(kubeflow.operator_env(job, rtype, 0)) == expected
    assert "PYTHONUNBUFFERED" in expected
    if policy is None:  # PET_RDZV_* only with an elasticPolicy (envvar.go:109-123)
        assert not {n for n in expected if n.startswith("PET_RDZV")}
    if not master:  # MASTER_*, WORLD_SIZE, RANK only beside a Master (envvar.go:66-97)
        assert not expected & _names(engine_env.TRAINING_OPERATOR_V1, "with a Master replica")


def test_v2_table_is_what_the_trainer_emulation_injects() -> None:
    # kubeflow/trainer@v2.3.0:pkg/runtime/framework/plugins/torch/torch.go:145-166: five names, no PYTHONUNBUFFERED.
    job = compile_text(SPEC + "target: trainjob\n", "s.yaml").outputs[-1].doc
    (pod, _) = trainer.pods(job)
    injected = {e["name"] for e in trainer.pet_env(job, {}, 2, 29500)}
    assert injected == {row.name for row in engine_env.TRAINER_V2} == set(contract.TRAINER_RESERVED_ENV)
    assert "PYTHONUNBUFFERED" not in pod.env


def _errors(text: str, target: str) -> list[str]:
    try:
        compile_text(text, "s.yaml", targets=(target,))
    except SpecError as e:
        return [str(p) for p in e.problems]
    return []


@pytest.mark.parametrize("form", ["env: {PYTHONUNBUFFERED: '1'}\n", "env: [{name: PYTHONUNBUFFERED, value: '1'}]\n"])
def test_pythonunbuffered_is_the_users_on_a_trainjob(form: str) -> None:
    job = compile_text(SPEC + form, "s.yaml", targets=("trainjob",)).outputs[-1].doc
    env = job["spec"]["trainer"]["env"]
    assert {"name": "PYTHONUNBUFFERED", "value": "1"} in env
    for target in ("pytorchjob", "podtemplate", "flyte2"):
        (line,) = _errors(SPEC + form, target)
        # kubeflow/trainer@v1.9.4:pkg/controller.v1/pytorch/envvar.go:56-60
        assert "the training operator v1 appends PYTHONUNBUFFERED=1 to every container after yours" in line, line
        assert "envvar.go:56-60" in line and "-t trainjob keeps yours" in line


def test_pythonunbuffered_in_the_pod_template_training_container() -> None:
    pod = "pod_template:\n  spec:\n    containers:\n    - name: pytorch\n"
    text = SPEC + pod + "      env: [{name: PYTHONUNBUFFERED, value: x}]\n"
    assert _errors(text, "trainjob") == []
    (line,) = _errors(text, "pytorchjob")
    assert line.startswith("s.yaml:10:20: pod_template.spec.containers[0].env[0].name: the training operator v1")


@pytest.mark.parametrize(
    ("name", "says"),
    [
        # Both engines set it: every generation refuses it, naming both.
        (
            "PET_NNODES",
            "the training operator v1 sets it (every pod) and Trainer v2's torch plugin sets it (every pod)",
        ),
        # Only v1 sets it (elastic.go:78-83); on v2 elastic-launch would read it against --rdzv-at-master.
        (
            "PET_RDZV_ENDPOINT",
            "; the training operator v1 sets it (with an elasticPolicy): set rdzv.host and rdzv.port",
        ),
        ("PET_NODE_RANK", "Trainer v2's torch plugin sets it (every pod): the engine gives each pod its own"),
        # No engine sets it; torchrun reads it and the spec owns the setting.
        (
            "PET_MONITOR_INTERVAL",
            "torchrun reads it as --monitor-interval (elastic-launch does not): set monitor_interval",
        ),
        ("PET_LOG_DIR", "torchrun reads it as --log-dir (elastic-launch does not): the compiled launcher takes"),
    ],
)
def test_pet_names_are_refused_for_the_true_reason(name: str, says: str) -> None:
    why = env_name_problem(name)
    assert why is not None and says in why, why


def test_a_pet_name_nobody_reads_is_the_users() -> None:
    # Neither a torchrun option nor anything an engine sets: no reason to refuse it.
    assert env_name_problem("PET_MY_APP_SETTING") is None
    job = compile_text(SPEC + "env: {PET_MY_APP_SETTING: x}\n", "s.yaml").outputs[-1].doc
    assert {"name": "PET_MY_APP_SETTING", "value": "x"} in job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"][
        "spec"
    ]["containers"][0]["env"]


def test_torchrun_env_options_are_torchs() -> None:
    """The options torch 2.13's torchrun also takes from PET_<OPTION> (torch/distributed/run.py, action=env)."""
    pytest.importorskip("torch")
    from torch.distributed.argparse_util import env
    from torch.distributed.run import get_args_parser

    parser = get_args_parser()
    from_env = {a.dest for a in parser._actions if isinstance(a, env)}
    from_env |= {a.dest for a in parser._actions if type(a).__name__ == "check_env"}
    assert from_env == TORCHRUN_ENV_OPTIONS


# --------------------------------------------------------------------------- import, doctor, run


TRAINJOB = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1",
    "kind": "TrainJob",
    "metadata": {"name": "tj"},
    "spec": {
        "runtimeRef": {"name": "torch-distributed"},
        "trainer": {
            "image": "x:1.0",
            "command": ["torchrun", "t.py"],
            "numNodes": 2,
            "numProcPerNode": 1,
            "env": [{"name": "PYTHONUNBUFFERED", "value": "1"}, {"name": "HF_HOME", "value": "/d"}],
        },
    },
}


def test_import_keeps_pythonunbuffered_of_a_trainjob_and_drops_the_pytorchjobs() -> None:
    (imported,) = import_stream(to_yaml([TRAINJOB]), "tj.yaml")
    assert yaml.safe_load(imported.text)["env"] == {"PYTHONUNBUFFERED": "1", "HF_HOME": "/d"}
    assert "PYTHONUNBUFFERED" not in "\n".join(str(n) for n in imported.notes)
    job = _pytorchjob(master=False, policy={"minReplicas": 2, "maxReplicas": 2})
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "PYTHONUNBUFFERED", "value": "1"}
    ]
    (imported,) = import_stream(to_yaml([job]), "pj.yaml")
    assert "env" not in yaml.safe_load(imported.text)
    assert any("warning: PYTHONUNBUFFERED dropped: the training operator v1 appends" in str(n) for n in imported.notes)


def test_doctor_reports_only_what_this_jobs_engine_sets() -> None:
    def codes(doc: dict[str, Any]) -> list[str]:
        return [p.message.split(" ", 1)[0] for p in doctor.doctor_stream(to_yaml([doc]), "j.yaml").problems]

    assert "DR011" not in codes(TRAINJOB)  # Trainer never sets PYTHONUNBUFFERED
    static = _pytorchjob(master=True, policy=None)
    container = static["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    container["env"] = [{"name": "PET_RDZV_ENDPOINT", "value": "etcd:2379"}]
    assert "DR011" not in codes(static)  # no elasticPolicy: the operator sets no PET_RDZV_* (elastic.go:72-76)
    container["env"] = [{"name": "PYTHONUNBUFFERED", "value": "0"}]
    assert "DR011" in codes(static)


def test_run_gives_a_trainjob_only_what_trainer_sets(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for env, expected in (("", None), ("env: {PYTHONUNBUFFERED: ''}\n", "")):
        spec = tmp_path / "s.yaml"
        spec.write_text(SPEC + "target: trainjob\n" + env)
        assert main(["run", "--dry-run", str(spec)]) == 0
        pods = json.loads(capsys.readouterr().out)["pods"]
        assert [p["env"].get("PYTHONUNBUFFERED") for p in pods] == [expected, expected]
    first = stream_text([compile_text(SPEC + "target: trainjob\n", "s.yaml")], "yaml")
    assert "PYTHONUNBUFFERED" not in first


def test_the_docs_tables_are_the_modules() -> None:
    """docs/cluster.md's two tables name exactly the variables of core/engine_env.py, per generation."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "cluster.md").read_text()
    section = text.split("## The env each engine sets", 1)[1].split("\n## ", 1)[0]
    v1, v2 = section.split("**Trainer v2.3.0**", 1)
    for part, table in ((v1, engine_env.TRAINING_OPERATOR_V1), (v2.split("What the spec")[0], engine_env.TRAINER_V2)):
        rows = [line.split("|")[1] for line in part.splitlines() if line.startswith("| `")]
        named = {re.sub(r"=.*", "", n) for row in rows for n in re.findall(r"`([A-Z_]+(?:=[^`]*)?)`", row)}
        assert named == {row.name for row in table}
