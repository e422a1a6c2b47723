"""A target from outside the package (toy.py, beside this file) gets everything a built-in one gets.

Nothing in ``elastic_compile`` names it: registered, it compiles, is checked, claims a
lint rule, is imported, examined by doctor and explained. In process it is registered
with ``targets.register``; the ``elastic-compile`` command finds it through the entry
point group of an installed distribution (a ``.dist-info`` written here).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import toy
import yaml
from support.cli import Cli

from elastic_compile import targets
from elastic_compile.compiler import doctor

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SPEC = "name: tiny\nimage: ghcr.io/x/y:1.0\ncommand: [python, train.py]\nnnodes: 2\n"
READY = "pod_template:\n  spec:\n    containers:\n      - {name: pytorch, readinessProbe: {exec: {command: [x]}}}\n"
TOYJOB = "apiVersion: toy.example.com/v1\nkind: ToyJob\nmetadata: {name: tiny}\nspec:\n  image: ghcr.io/x/y:1.0\n"


@pytest.fixture
def registered() -> Iterator[None]:
    targets.register(toy.TARGET)
    yield
    targets.unregister(toy.TARGET.name)


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    path = tmp_path / "elastic.yaml"
    path.write_text(SPEC)
    return path


def test_nothing_in_the_package_names_it() -> None:
    """The proof is only a proof if the package does not know the toy."""
    for path in (ROOT / "elastic_compile").rglob("*"):
        if path.is_file() and path.suffix in (".py", ".j2", ".json"):
            assert re.search(r"\btoy", path.read_text(encoding="utf-8"), re.I) is None, path


def test_unknown_until_registered(spec: Path, cli: Cli) -> None:
    assert "toy" not in targets.names()
    code, out, err = cli(spec, "-t", "toy")
    assert code == 2 and out == "" and "invalid choice: 'toy'" in err


def test_compiles_with_its_template_and_in_all(registered: None, spec: Path, cli: Cli) -> None:
    code, out, err = cli(spec, "-t", "toy")
    assert (code, err) == (0, "")
    assert yaml.safe_load(out) == {
        "apiVersion": "toy.example.com/v1",
        "kind": "ToyJob",
        "metadata": {"name": "tiny"},
        "spec": {"image": "ghcr.io/x/y:1.0", "command": ["python", "train.py"], "replicas": 2},
    }
    code, out, err = cli(spec, "-t", "all")
    assert code == 0
    assert [d["kind"] for d in yaml.safe_load_all(out)] == ["PyTorchJob", "PodTemplate", "ToyJob"]  # by order


def test_help_lists_it(registered: None, cli: Cli, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        cli("--help")
    assert done.value.code == 0
    assert "toy: ToyJob (toy.example.com/v1)" in " ".join(capsys.readouterr().out.split())


def test_its_problems_are_located(registered: None, tmp_path: Path, cli: Cli) -> None:
    path = tmp_path / "big.yaml"
    path.write_text(SPEC.replace("nnodes: 2", "nnodes: 9"))
    code, out, err = cli(path, "-t", "toy")
    assert (code, out) == (2, "")
    assert err == f"{path}:4:9: nnodes: a ToyJob runs at most 8 replicas (given: 9)\n"


def test_its_checks_hold_custom_templates(registered: None, spec: Path, tmp_path: Path, cli: Cli) -> None:
    custom = tmp_path / "templates"
    custom.mkdir()
    text = (HERE / "templates" / "toy.yaml.j2").read_text().replace("{{ job.replicas | tojson }}", "1")
    (custom / "toy.yaml.j2").write_text(text)
    code, out, err = cli(spec, "-t", "toy", "--templates", custom)
    assert (code, out) == (2, "")
    assert "spec.replicas must be 2" in err and str(custom / "toy.yaml.j2") in err


def test_the_lint_it_claims_fires_for_it_alone(registered: None, tmp_path: Path, cli: Cli) -> None:
    path = tmp_path / "ready.yaml"
    path.write_text(SPEC + READY)
    _code, _out, err = cli(path, "-t", "toy")
    assert "warning EC114" in err
    _code, _out, err = cli(path, "-t", "trainjob")  # JobSet publishes pods before they are Ready
    assert "EC114" not in err


def test_import_reads_its_kind(registered: None, tmp_path: Path, cli: Cli) -> None:
    path = tmp_path / "toyjob.yaml"
    path.write_text(TOYJOB + "  command: [python, train.py]\n  replicas: 3\n")
    code, out, err = cli("import", path)
    assert code == 0, err
    assert "a ToyJob read back by the toy target" in err
    assert yaml.safe_load(out) == {
        "name": "tiny",
        "image": "ghcr.io/x/y:1.0",
        "command": ["python", "train.py"],
        "nnodes": 3,
    }


def test_doctor_applies_its_rules(registered: None, tmp_path: Path, cli: Cli) -> None:
    assert ("DR900", "toy-replicas") in {(r.code, r.name) for r in doctor.rules()}
    path = tmp_path / "toyjob.yaml"
    path.write_text(TOYJOB + "  command: [python, train.py]\n  replicas: 12\n")
    code, out, _err = cli("doctor", path)
    assert code == 1
    assert out == f"{path}:7:13: spec.replicas: DR900 toy-replicas: 12 replicas; the toy cluster has 8\n"


def test_explain_says_its_layout(registered: None, spec: Path, cli: Cli) -> None:
    code, out, _err = cli(spec, "-t", "toy", "--explain")
    assert code == 0 and "# layout: ToyJob, 2 replica(s)\n" in out


def test_the_command_finds_it_through_its_entry_point(spec: Path, tmp_path: Path) -> None:
    """An installed distribution's entry point is all the ``elastic-compile`` command needs."""
    site = tmp_path / "site"
    info = site / "toy_target-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-target\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[elastic_compile.targets]\ntoy = toy:TARGET\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(HERE)])}
    command = [sys.executable, "-m", "elastic_compile.compiler.cli"]
    done = subprocess.run([*command, str(spec), "-t", "toy"], env=env, capture_output=True, text=True, check=False)
    assert (done.returncode, done.stderr) == (0, "")
    assert yaml.safe_load(done.stdout)["kind"] == "ToyJob"
    # Below the targets, the loader learns from the registry that import reads a ToyJob.
    manifest = tmp_path / "toyjob.yaml"
    manifest.write_text(TOYJOB)
    done = subprocess.run([*command, str(manifest)], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 2
    assert (
        f"a ToyJob manifest, not an elastic.yaml spec; write one from it with: elastic-compile import {manifest}"
        in (done.stderr)
    )
