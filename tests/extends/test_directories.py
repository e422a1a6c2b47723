"""``elastic-compile DIR...``: every spec below, bases recognised by name, stable order, one base per job."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml
from extends_helpers import Write
from support.cli import run_cli
from support.summary import without_summary

from elastic_compile.compiler import inputs

ROOT = Path(__file__).resolve().parents[2]

LAYOUT = {
    "specs/_defaults.elastic.yaml": "image: reg/t:1\ncommand: [python, train.py]\n",
    "specs/zeta.elastic.yaml": "extends: _defaults.elastic.yaml\nname: zeta\n",
    "specs/nlp/_team.elastic.yaml": "extends: ../_defaults.elastic.yaml\nnamespace: nlp\n",
    "specs/nlp/eval.elastic.yaml": "extends: _team.elastic.yaml\nname: eval\n",
    "specs/nlp/llm.elastic.yaml": "extends: _team.elastic.yaml\nname: llm\n",
    "specs/vision/elastic.yaml": "extends: ../_defaults.elastic.yaml\nname: resnet\nnamespace: vision\n",
    "specs/vision/kustomization.yaml": "resources: []\n",  # not a spec: not read
    "specs/.hidden/x.elastic.yaml": "not: [valid\n",  # hidden: skipped
    "specs/alpha.elastic.yml": "extends: _defaults.elastic.yaml\nname: alpha\n",
}


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code, out, err = run_cli(capsys, *args)
    return code, out, without_summary(err)  # these tests read the problems


def names(out: str) -> list[str]:
    return [f"{d['metadata'].get('namespace', '-')}/{d['metadata']['name']}" for d in yaml.safe_load_all(out)]


def test_every_job_below_in_path_order_and_no_base(write: Write, capsys: pytest.CaptureFixture[str]) -> None:
    write(LAYOUT)
    code, out, err = run(capsys, "specs")
    assert (code, err) == (0, "")
    # Component by component: specs/alpha, specs/nlp/..., specs/vision/..., specs/zeta.
    assert names(out) == ["-/alpha", "nlp/eval", "nlp/llm", "vision/resnet", "-/zeta"]


def test_collect_classifies_by_name(write: Write, tree: Path) -> None:
    write(LAYOUT)
    found = inputs.collect(["specs", "specs/nlp/llm.elastic.yaml"], tree)
    assert found.jobs == [
        "specs/alpha.elastic.yml",
        "specs/nlp/eval.elastic.yaml",
        "specs/nlp/llm.elastic.yaml",  # named twice, compiled once
        "specs/vision/elastic.yaml",
        "specs/zeta.elastic.yaml",
    ]
    assert found.bases == ["specs/_defaults.elastic.yaml", "specs/nlp/_team.elastic.yaml"]
    assert (found.directories, found.problems, found.notes) == (True, [], [])


def test_the_order_is_the_paths_not_the_disk(write: Write, tree: Path) -> None:
    # Created in reverse order: the walk sorts, whatever order the directory lists.
    for name in ["b", "a/z", "a", "B"]:
        write({f"d/{name}/elastic.yaml": "name: x\n"})
    assert inputs.collect(["d"], tree).jobs == [
        "d/B/elastic.yaml",
        "d/a/elastic.yaml",
        "d/a/z/elastic.yaml",
        "d/b/elastic.yaml",
    ]


def test_all_problems_of_all_files_in_one_run(write: Write, capsys: pytest.CaptureFixture[str]) -> None:
    write(
        {
            **LAYOUT,
            "specs/_defaults.elastic.yaml": "image: reg/t:1\ncommand: [python, train.py]\nmax_restarts: -1\n",
            "specs/nlp/llm.elastic.yaml": "extends: _team.elastic.yaml\nname: LLM\n",
            "specs/vision/elastic.yaml": "extends: ../_defaults.elastic.yaml\nnamespace: vision\n",
        }
    )
    code, out, err = run(capsys, "specs")
    assert (code, out) == (2, "")
    # The base's problem once, though four specs extend it; then each spec's own.
    assert err.splitlines() == [
        "specs/_defaults.elastic.yaml:3:15: max_restarts: must be >= 0 (given: -1)",
        "specs/nlp/llm.elastic.yaml:2:7: name: not a DNS-1035 label: lower-case letters, digits and '-', starting "
        "with a letter and ending with a letter or digit (given: LLM)",
        "specs/vision/elastic.yaml:1:1: name: required field is missing",
    ]


def test_output_gives_each_job_its_base_and_one_name_in_two_namespaces_two(
    write: Write, tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(
        {
            **LAYOUT,
            "specs/vision/eval.elastic.yaml": "extends: ../_defaults.elastic.yaml\nname: eval\nnamespace: vision\n",
        }
    )
    assert run(capsys, "specs", "-o", "deploy/base")[0] == 0
    bases = sorted(
        str(p.parent.relative_to(tree / "deploy/base")) for p in (tree / "deploy/base").rglob("kustomization.yaml")
    )
    # Each base's place is its own: <namespace>/<name>, <name> for a job without a namespace.
    assert bases == ["alpha", "nlp/eval", "nlp/llm", "vision/eval", "vision/resnet", "zeta"]
    doc = yaml.safe_load((tree / "deploy/base/vision/eval/pytorchjob.yaml").read_text())
    assert (doc["metadata"]["namespace"], doc["metadata"]["name"]) == ("vision", "eval")


def test_a_directory_with_one_job_still_gets_a_directory_per_job(
    write: Write, tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Adding a second job later must not move the first one's base.
    write(
        {
            "specs/_defaults.elastic.yaml": LAYOUT["specs/_defaults.elastic.yaml"],
            "specs/zeta.elastic.yaml": LAYOUT["specs/zeta.elastic.yaml"],
        }
    )
    assert run(capsys, "specs", "-o", "out")[0] == 0
    assert (tree / "out/zeta/pytorchjob.yaml").is_file()


def test_one_name_twice_in_one_namespace_is_refused(write: Write, capsys: pytest.CaptureFixture[str]) -> None:
    write({**LAYOUT, "specs/nlp/copy.elastic.yaml": "extends: _team.elastic.yaml\nname: llm\n"})
    code, _, err = run(capsys, "specs", "-o", "out")
    assert code == 2
    assert err.splitlines() == [
        "specs/nlp/llm.elastic.yaml:2:7: name: its base nlp/llm/ is also the base of specs/nlp/copy.elastic.yaml; "
        "give each job its own name in a namespace (given: llm)"
    ]


def test_check_notices_a_base_that_changed(write: Write, tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(LAYOUT)
    assert run(capsys, "specs", "-o", "deploy")[0] == 0
    assert run(capsys, "specs", "-o", "deploy", "--check")[:2] == (0, "")
    (tree / "specs/nlp/_team.elastic.yaml").write_text(
        "extends: ../_defaults.elastic.yaml\nnamespace: nlp\nmax_restarts: 7\n"
    )
    code, out, _ = run(capsys, "specs", "-o", "deploy", "--check")
    assert code == 1
    changed = sorted(set(re.findall(r"^\+\+\+ b/(\S+)", out, re.MULTILINE)))
    assert changed == ["deploy/nlp/eval/pytorchjob.yaml", "deploy/nlp/llm/pytorchjob.yaml"]


def test_a_base_inside_the_output_directory_is_refused(
    write: Write, tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(
        {
            "deploy/_base.elastic.yaml": "image: reg/t:1\n",
            "job.elastic.yaml": "extends: deploy/_base.elastic.yaml\nname: j\ncommand: [x]\n",
        }
    )
    code, _, err = run(capsys, "job.elastic.yaml", "-o", "deploy")
    assert code == 2
    assert err.splitlines() == [
        "elastic-compile: error: deploy: contains the spec deploy/_base.elastic.yaml; write the base to a "
        "directory of its own"
    ]


def _elsewhere(tree: Path, files: dict[str, str]) -> Path:
    """A directory beside the tree, outside its boundary, holding ``files`` (name -> text)."""
    outside = tree.parent / "elsewhere"
    outside.mkdir()
    for name, text in files.items():
        (outside / name).write_text(text)
    return outside


def test_links_in_a_walked_directory_are_never_followed(
    write: Write, tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(LAYOUT)
    outside = _elsewhere(tree, {"evil.elastic.yaml": "name: evil\nimage: s3cr3t\ncommand: [x]\n"})
    os.symlink(outside / "evil.elastic.yaml", tree / "specs/evil.elastic.yaml")
    os.symlink(outside, tree / "specs/linked-dir")
    os.symlink("zeta.elastic.yaml", tree / "specs/zz.elastic.yaml")
    code, out, err = run(capsys, "specs")
    assert (code, out) == (2, "")
    assert err.splitlines() == [
        "elastic-compile: note: specs/zz.elastic.yaml: a symbolic link, not followed; name the file it points to",
        f"specs/evil.elastic.yaml:1:1: spec: a symbolic link that leads outside {tree}; not followed",
    ]
    assert "s3cr3t" not in err and "elsewhere" not in err


def test_a_spec_named_that_links_out_of_the_tree_is_never_read(
    write: Write, tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A spec a CI command names, turned by a pull request into a link to a file outside."""
    write(LAYOUT)
    outside = _elsewhere(
        tree,
        {
            "credentials": "https://bot:s3cr3t@example.com\n",
            "job.elastic.yaml": "name: evil\nimage: reg/s3cr3t:1\ncommand: [x]\n",
        },
    )
    os.symlink(outside / "credentials", tree / "specs/creds.elastic.yaml")
    os.symlink(outside, tree / "linked")
    os.symlink("zeta.elastic.yaml", tree / "specs/zz.elastic.yaml")
    for named in ("specs/creds.elastic.yaml", "linked/job.elastic.yaml"):
        for extra in ((), ("-o", "out"), ("--root", str(tree))):
            code, out, err = run(capsys, named, *extra)
            assert (code, out) == (2, "")
            assert err == f"{named}:1:1: spec: a symbolic link that leads outside {tree}; not followed\n"
            assert not (tree / "out").exists()
    # A link that stays inside, and a path outside as written (the command's own choice), are read.
    assert run(capsys, "specs/zz.elastic.yaml")[0] == 0
    assert run(capsys, "--root", str(tree / "specs"), str(outside / "job.elastic.yaml"))[0] == 0


def test_no_specs_and_only_bases(write: Write, tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write({"empty/README.md": "nothing here\n", "bases/_a.elastic.yaml": "image: reg/t:1\n"})
    assert run(capsys, "empty")[1:] == (
        "",
        "elastic-compile: error: empty: no specs found (elastic.yaml, *.elastic.yaml)\n",
    )
    assert run(capsys, "bases") == (0, "", "")  # checked, nothing to print
    code, _, err = run(capsys, "bases", "-o", "out")
    assert (code, err) == (2, "elastic-compile: error: no job to compile: only bases (_*.elastic.yaml) were found\n")
    assert not (tree / "out").exists()


def test_the_walk_is_bounded(write: Write, tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    deep = "deep/" + "/".join("d" * (inputs.MAX_DEPTH + 2))
    write({f"{deep}/elastic.yaml": "name: x\n", "deep/elastic.yaml": "name: x\n"})
    found = inputs.collect(["deep"], tree)
    assert found.jobs == ["deep/elastic.yaml"]
    assert [p.message for p in found.problems] == [
        f"deep/{'/'.join('d' * (inputs.MAX_DEPTH + 1))}: more than {inputs.MAX_DEPTH} directory levels; not walked"
    ]
    write({f"wide/{i:02}/x.txt": "" for i in range(12)})
    monkeypatch.setattr(inputs, "MAX_ENTRIES", 10)
    found = inputs.collect(["wide"], tree)
    assert [str(p) for p in found.problems] == [
        "elastic-compile:0:0: usage: wide: more than 10 entries to look at; name a smaller directory"
    ]


def test_the_pre_commit_hook_runs_when_a_spec_or_a_base_changes() -> None:
    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    (hook,) = hooks
    # Never the staged names: a changed base changes every spec that extends it.
    assert hook["pass_filenames"] is False
    pattern = re.compile(hook["files"])
    for path in ["elastic.yaml", "teams/nlp/llm.elastic.yaml", "teams/nlp/_team.elastic.yaml", "_defaults.elastic.yml"]:
        assert pattern.search(path), path
        assert inputs.is_spec_name(os.path.basename(path)), path
    for path in ["deploy/base/pytorchjob.yaml", "kustomization.yaml", "notelastic.yaml"]:
        assert not pattern.search(path) and not inputs.is_spec_name(os.path.basename(path)), path
