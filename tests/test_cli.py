"""The command line: streams, formats, directories written atomically, --check, exit codes."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from elastic_compile import __version__
from elastic_compile.compiler.cli import main

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = str(ROOT / "examples" / "ddp-2x8-gpu.yaml")
MINIMAL = str(ROOT / "examples" / "minimal.yaml")


@pytest.fixture(autouse=True)
def _in_a_working_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # -o and --check stay inside the working tree: tmp_path stands for the user's.
    monkeypatch.chdir(tmp_path)


def test_stdout_is_the_pytorchjob(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([EXAMPLE]) == 0
    out, err = capsys.readouterr()
    doc = yaml.safe_load(out)
    assert (doc["kind"], err) == ("PyTorchJob", "")


def test_all_targets_and_json_list(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([EXAMPLE, "-t", "all", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["kind"] == "List"
    assert [i["kind"] for i in doc["items"]][:2] == ["PyTorchJob", "PodTemplate"]


def test_all_is_what_its_help_says(capsys: pytest.CaptureFixture[str]) -> None:
    """A spec Flyte 2 can run still gets only its job and PodTemplate from -t all, as --help says."""
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "never flyte2 (ask for it with -t flyte2)" in " ".join(capsys.readouterr().out.split())
    spec = str(ROOT / "examples" / "flyte2" / "elastic.yaml")
    assert main([spec, "-t", "all", "--format", "json"]) == 0
    assert [i["kind"] for i in json.loads(capsys.readouterr().out)["items"]] == ["PyTorchJob", "PodTemplate"]
    assert main([spec, "-t", "flyte2", "--format", "json"]) == 0


def test_stdin(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(Path(MINIMAL).read_bytes())))
    assert main(["-"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["metadata"]["name"] == "minimal"


def test_version() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "elastic_compile.compiler.cli", "--version"], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == f"elastic-compile {__version__}"


def test_output_directory_and_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = tmp_path / "base"
    assert main([EXAMPLE, "-t", "all", "-o", str(base)]) == 0
    names = sorted(p.name for p in base.iterdir())
    assert names == [
        ".elastic-compile-owned",
        "kustomization.yaml",
        "openapi.json",
        "podtemplate.yaml",
        "pytorchjob.yaml",
    ]
    assert main([EXAMPLE, "-t", "all", "-o", str(base), "--check"]) == 0
    assert capsys.readouterr().out == ""
    (base / "pytorchjob.yaml").write_text((base / "pytorchjob.yaml").read_text().replace("'8'", "'4'"))
    before = {p: p.read_bytes() for p in base.iterdir()}
    assert main([EXAMPLE, "-t", "all", "-o", str(base), "--check"]) == 1
    out, err = capsys.readouterr()
    assert "-  nprocPerNode: '4'" in out and "+  nprocPerNode: '8'" in out and "stale" in err
    assert {p: p.read_bytes() for p in base.iterdir()} == before  # --check never writes


def test_check_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "job.yaml"
    assert main([EXAMPLE]) == 0
    target.write_text(capsys.readouterr().out)
    assert main([EXAMPLE, "--check", str(target)]) == 0
    assert main([MINIMAL, "--check", str(target)]) == 1
    assert "@@" in capsys.readouterr().out


def test_bad_spec_in_a_batch_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert main([EXAMPLE, MINIMAL, "-o", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == [".elastic-compile-owned", "minimal", "ml-team"]
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nimage: x\n")
    assert main([EXAMPLE, str(bad), "-o", str(out)]) == 2
    assert f"{bad}:1:1: command:" in capsys.readouterr().err
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no staging left behind


def test_internal_errors_are_one_line_without_debug(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    templates = tmp_path / "t"
    templates.mkdir()
    (templates / "pytorchjob.yaml.j2").write_text("apiVersion: {{ plan.name | tojson }}\nkind: [\n")
    assert main([EXAMPLE, "--templates", str(templates)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pytorchjob.yaml.j2" in err and "not valid YAML" in err
    # --debug adds the traceback and keeps the exit code (red-team item 13).
    assert main([EXAMPLE, "--templates", str(templates), "--debug"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("Traceback") and err.endswith("\n") and "not valid YAML" in err.splitlines()[-1]


def test_explain_names_sources(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([EXAMPLE, "--explain"]) == 0
    out = capsys.readouterr().out
    assert "rdzv.join_timeout: 900" in out and "ddp-2x8-gpu.yaml:13" in out
    assert "rdzv.read_timeout: 900" in out and "default 900, not torch's 60" in out
    assert "nproc_per_node: 8" in out and "derived" in out


def test_check_before_a_spec_with_output_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`-o DIR --check spec.yaml`: the word after --check is a spec, not the FILE to compare with."""
    base = tmp_path / "base"
    assert main([EXAMPLE, "-o", str(base)]) == 0
    assert main(["-o", str(base), "--check", EXAMPLE]) == 0
    assert main(["-o", str(base), "--check", MINIMAL]) == 1
    assert "minimal" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "advice"),
    [
        (["-o", "json"], "for json on standard output use --format json"),
        (["--output=json"], "for json on standard output use --format json"),
        (["-o", "yaml"], "for yaml on standard output use --format yaml"),
        (["-oyml"], "for yml on standard output use --format yaml"),
        (["-o", "-"], "standard output is the default: leave out -o"),
        (["-o", "JSON"], "for json on standard output use --format json"),
        (["-o", "wide"], "kubectl's -o wide has no counterpart"),
        (["-o", "name"], "kubectl's -o name has no counterpart"),
        (["-o", "jsonpath={.kind}"], "kubectl's -o jsonpath has no counterpart"),
        (["-o", "custom-columns=NAME:.metadata.name"], "kubectl's -o custom-columns has no counterpart"),
    ],
)
def test_output_format_words_are_not_directories(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], advice: str
) -> None:
    """kubectl's `-o json` would have written a base into a new directory `json` and printed nothing."""
    assert main([MINIMAL, *argv]) == 2
    out, err = capsys.readouterr()
    assert (out, err.count("\n")) == ("", 1) and advice in err
    assert list(tmp_path.iterdir()) == []
    assert main([MINIMAL, "-o", "./json"]) == 0  # a directory of that name, written as a path
    assert (tmp_path / "json" / "pytorchjob.yaml").is_file()


def test_no_pydantic_plugin_is_looked_for_but_by_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """A command reads no distribution's entry points for pydantic plugins, and leaves the environment as it was."""
    from pydantic.plugin import _loader

    from elastic_compile.compiler import cli

    looked: list[str] = []

    def entry_points(group: str) -> list[object]:
        looked.append(group)
        return []

    monkeypatch.setattr(_loader, "entry_points", entry_points)
    monkeypatch.setattr(_loader, "_plugins", None)
    monkeypatch.delenv("PYDANTIC_DISABLE_PLUGINS", raising=False)
    with cli._without_pydantic_plugins(["spec.yaml"]):
        assert list(_loader.get_plugins()) == []
    assert looked == []
    assert "PYDANTIC_DISABLE_PLUGINS" not in os.environ
    # run starts the job's processes, which would inherit the setting: pydantic looks there.
    with cli._without_pydantic_plugins(["run", "spec.yaml"]):
        assert "PYDANTIC_DISABLE_PLUGINS" not in os.environ
        _loader.get_plugins()
    assert looked == ["pydantic"]
