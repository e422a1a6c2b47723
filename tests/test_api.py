"""elastic_compile.api: the examples of docs/api.md run as written, and the API's own promises."""

from __future__ import annotations

import doctest
import re
from pathlib import Path

import pytest
from support.specs import MINIMAL as SPEC

from elastic_compile import api
from elastic_compile.compiler.cli import main

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "api.md"


def _examples() -> list[str]:
    return re.findall(r"```pycon\n(.*?)```", PAGE.read_text(), re.S)


def test_the_page_has_its_examples() -> None:
    assert len(_examples()) == 4


def test_the_examples_of_docs_api_md_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every ```pycon block of the page, in order and in one namespace, prints what the page shows."""
    monkeypatch.chdir(ROOT)
    parser = doctest.DocTestParser()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    # One test of every block: a block uses what the ones before it defined.
    test = parser.get_doctest("\n".join(_examples()), {}, "docs/api.md", str(PAGE), 0)
    runner.run(test)
    summary = runner.summarize(verbose=False)
    assert summary.attempted > 15
    assert summary.failed == 0


def test_one_name_is_one_target_not_its_letters() -> None:
    """compile_text(text, "x.yaml", "all") raised KeyError('a'): a string taken as a list of names."""
    from elastic_compile.compiler.pipeline import compile_text

    assert [d["kind"] for d in compile_text(SPEC, "x.yaml", "all").documents] == ["PyTorchJob", "PodTemplate"]
    assert [d["kind"] for d in api.compile_text(SPEC, "podtemplate").documents] == ["PodTemplate"]
    assert [d["kind"] for d in api.compile_text(SPEC, ["trainjob", "podtemplate"]).documents] == [
        "TrainJob",
        "PodTemplate",
    ]


@pytest.mark.parametrize("targets", ["a", ["pytorchjob", "al"], ["all", "pytorchjob"], []])
def test_a_wrong_target_lists_the_valid_ones(targets: str | list[str]) -> None:
    with pytest.raises(api.UnknownTargetError) as raised:
        api.compile_text(SPEC, targets)
    assert isinstance(raised.value, ValueError)
    assert str(raised.value).endswith("; valid targets: pytorchjob, trainjob, podtemplate, flyte, flyte2, all")


def test_a_wrong_target_is_said_before_the_file_is_read(tmp_path: Path) -> None:
    with pytest.raises(api.UnknownTargetError):
        api.compile_file(tmp_path / "missing.yaml", "nope")


def test_plain_data_is_a_copy() -> None:
    compiled = api.compile_text(SPEC)
    compiled.documents[0]["kind"] = "Changed"
    compiled.files["pytorchjob.yaml"]["kind"] = "Changed"
    assert compiled.documents[0]["kind"] == compiled.files["pytorchjob.yaml"]["kind"] == "PyTorchJob"


def test_text_and_warnings_are_what_the_command_prints(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(SPEC.replace("x:1", "x:latest") + "nnodes: 2\nrdzv: {join_timeout: 60}\n")
    compiled = api.compile_file(path, "all")
    assert main([str(path), "-t", "all"]) == 0
    out, err = capsys.readouterr()
    assert compiled.text() == out
    assert compiled.warnings() == err.splitlines() and len(err.splitlines()) == 2
    assert compiled.warnings(ignore=["EC105"]) == err.splitlines()[1:]
    assert main([str(path), "-t", "all", "--format", "json"]) == 0
    assert compiled.text("json") == capsys.readouterr().out
    with pytest.raises(ValueError, match="unknown format 'toml'; valid formats: yaml, json"):
        compiled.text("toml")


def test_load_gives_the_spec_with_its_bases(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "_base.elastic.yaml").write_text("image: x:1\nmax_restarts: 7\n")
    (tmp_path / "job.elastic.yaml").write_text("extends: _base.elastic.yaml\nname: j\ncommand: [python, t.py]\n")
    spec = api.load(tmp_path / "job.elastic.yaml")
    assert (spec.name, spec.image, spec.max_restarts) == ("j", "x:1", 7)
    with pytest.raises(api.SpecError, match="extends"):
        api.load_text((tmp_path / "job.elastic.yaml").read_text())


def test_importing_the_api_imports_no_library() -> None:
    import subprocess
    import sys

    probe = "import sys, elastic_compile.api; print(sorted(m.split('.')[0] for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert not {"yaml", "jinja2", "pydantic"} & set(eval(out))
