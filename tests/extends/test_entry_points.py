"""Every way in that takes a spec file reads its bases: the Flyte APIs and ``elastic-compile run``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from extends_helpers import Write

from elastic_compile.compiler.cli import main
from elastic_compile.core.errors import SpecError
from elastic_compile.flyte import task_kwargs
from elastic_compile.flyte2 import environment_settings

BASE = "image: reg/platform:1\nresources: {requests: {cpu: 4}}\nenv: {NCCL_DEBUG: WARN, FROM_BASE: yes-base}\n"


@pytest.fixture
def specs(write: Write) -> None:
    write(
        {
            "platform/_defaults.elastic.yaml": BASE,
            "jobs/train.elastic.yaml": "extends: ../platform/_defaults.elastic.yaml\nname: train\n"
            "command: [python, train.py]\nenv: {NCCL_DEBUG: INFO}\n",
            "jobs/fn.elastic.yaml": "extends: ../platform/_defaults.elastic.yaml\nname: fn\nfunction: pkg.mod:train\n",
            "jobs/escape.elastic.yaml": "extends: ../../elsewhere.elastic.yaml\nname: x\nfunction: pkg.mod:train\n",
        }
    )


@pytest.mark.usefixtures("specs")
def test_flyte_task_kwargs() -> None:
    kwargs = task_kwargs("jobs/fn.elastic.yaml")
    assert kwargs["container_image"] == "reg/platform:1"
    pytorch = next(c for c in kwargs["pod_template"].pod_spec.containers if c.name == "pytorch")
    env = {e.name: e.value for e in pytorch.env}
    assert (env["NCCL_DEBUG"], env["FROM_BASE"]) == ("WARN", "yes-base")


@pytest.mark.usefixtures("specs")
def test_flyte2_environment_settings() -> None:
    settings = environment_settings("jobs/fn.elastic.yaml")
    assert settings["image"] == "reg/platform:1"
    assert settings["env_vars"] == {"NCCL_DEBUG": "WARN", "FROM_BASE": "yes-base"}


@pytest.mark.usefixtures("specs")
@pytest.mark.parametrize("call", [task_kwargs, environment_settings])
def test_the_python_apis_keep_bases_inside_the_tree(call: object, tree: Path) -> None:
    with pytest.raises(SpecError) as e:
        call("jobs/escape.elastic.yaml")  # type: ignore[operator]
    assert [str(p) for p in e.value.problems] == [
        f"jobs/escape.elastic.yaml:1:10: extends: outside {tree}, where elastic-compile reads bases (see --root) "
        "(given: ../../elsewhere.elastic.yaml)"
    ]


@pytest.mark.usefixtures("specs")
def test_run_dry_run(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "jobs/train.elastic.yaml", "--dry-run"]) == 0
    env = json.loads(capsys.readouterr().out)["pods"][0]["env"]
    assert (env["NCCL_DEBUG"], env["FROM_BASE"]) == ("INFO", "yes-base")
