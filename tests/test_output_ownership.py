"""``-o DIR`` owns only what it wrote, and reads and writes nothing outside the working tree.

Each test runs in a fresh directory that stands for the user's working tree (a git
checkout where it matters), with the CLI as a user runs it.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from support.cli import run_cli as run

from elastic_compile.compiler import output
from elastic_compile.core import safefs

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "ddp-2x8-gpu.yaml"
MINIMAL = ROOT / "examples" / "minimal.yaml"
BASE_FILES = [output.MANIFEST, "kustomization.yaml", "openapi.json", "pytorchjob.yaml"]
SECRET = "s3cr3t-value-that-must-never-be-printed"


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A git working tree with a spec, a README and code; the current directory."""
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "train.yaml").write_text(MINIMAL.read_text())
    (repo / "README.md").write_text("# my project\n")
    (repo / "src").mkdir()
    (repo / "src" / "train.py").write_text("print('train')\n")
    monkeypatch.chdir(repo)
    return repo


def files(root: Path) -> dict[str, bytes]:
    """Every file and link under ``root`` (links by target), with its bytes."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            out[rel] = b"-> " + os.readlink(path).encode()
        elif path.is_file() and ".git" not in path.relative_to(root).parts:
            out[rel] = path.read_bytes()
    return out


# --------------------------------------------------------------------------- the refusals


def test_output_into_the_working_tree_itself_is_refused(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The headline data loss: `-o .` deleted the spec, the README, the code and .git."""
    before = files(tree)
    code, out, err = run(capsys, "train.yaml", "-o", ".")
    assert (code, out) == (2, "")
    assert err.splitlines() == [
        f"elastic-compile: error: .: is the working tree {tree} or contains it; "
        "elastic-compile writes only into a directory of its own",
        "elastic-compile: error: .: contains the spec train.yaml; write the base to a directory of its own",
    ]
    assert files(tree) == before and (tree / ".git").is_dir()


def test_a_directory_holding_the_spec_is_refused(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tree / "jobs").mkdir()
    (tree / "train.yaml").rename(tree / "jobs" / "train.yaml")
    code, _, err = run(capsys, "jobs/train.yaml", "-o", "jobs")
    assert code == 2
    assert (
        err
        == "elastic-compile: error: jobs: contains the spec jobs/train.yaml; write the base to a directory of its own\n"
    )
    assert sorted(p.name for p in (tree / "jobs").iterdir()) == ["train.yaml"]


def test_a_directory_holding_git_is_refused(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nested = tree / "vendor" / "other"
    nested.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(nested)], check=True)
    code, _, err = run(capsys, "train.yaml", "-o", "vendor/other")
    assert code == 2
    assert err == (
        "elastic-compile: error: vendor/other: holds .git; elastic-compile writes only into a directory of its own\n"
    )
    assert sorted(p.name for p in nested.iterdir()) == [".git"]


@pytest.mark.parametrize("where", [".git/hooks", ".git", "sub/.git/x", ".GIT/x", "hooks", "hooks/x"])
@pytest.mark.parametrize("check", [False, True])
def test_a_directory_inside_git_is_refused(
    tree: Path, capsys: pytest.CaptureFixture[str], where: str, check: bool
) -> None:
    """A hook written there would run as the user's git; ``hooks`` is a committed link to .git/hooks."""
    subprocess.run(["git", "init", "-q", str(tree / "sub")], check=True)
    (tree / "hooks").symlink_to(".git/hooks")
    before = files(tree)
    git_before = sorted(str(p.relative_to(tree)) for p in tree.rglob("*") if ".git" in p.parts)
    code, out, err = run(capsys, "train.yaml", "-o", where, *(["--check"] if check else []))
    assert (code, out) == (2, "")
    assert err == (
        f"elastic-compile: error: {where}: is .git or inside it; "
        "elastic-compile writes only into a directory of its own\n"
    )
    assert files(tree) == before
    assert sorted(str(p.relative_to(tree)) for p in tree.rglob("*") if ".git" in p.parts) == git_before


def test_an_ancestor_of_the_working_tree_is_refused(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Even when --root allows writing there."""
    (tree / "src" / "deep").mkdir()
    os.chdir(tree / "src" / "deep")
    code, _, err = run(capsys, tree / "train.yaml", "--root", tree.parent, "-o", tree.parent)
    assert code == 2
    assert f"{tree.parent}: is the working tree" in err


@pytest.mark.parametrize("where", ["../elsewhere", "absolute"])
def test_outside_the_working_tree_as_written_is_the_users_choice(
    tree: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    """A DIR or FILE typed on the command line outside the working tree is written and checked there.

    As a spec named on the command line is read there: the command line is the user's, not
    the pull request's. What a link leads out to stays refused (the tests below).
    """
    target = tree.parent / "elsewhere" if where == "../elsewhere" else tmp_path / "out" / "base"
    shown = where if where == "../elsewhere" else str(target)
    code, _, err = run(capsys, "train.yaml", "-o", shown)
    assert code == 0 and "error" not in err
    assert sorted(p.name for p in target.iterdir()) == BASE_FILES
    assert run(capsys, "train.yaml", "-o", shown, "--check")[0] == 0
    code, out, _ = run(capsys, EXAMPLE, "-o", shown, "--check")
    assert code == 1 and "llm-finetune" in out
    printed = tmp_path / "job.yaml"
    code, out, _ = run(capsys, "train.yaml")
    printed.write_text(out)
    assert run(capsys, "train.yaml", "--check", printed)[0] == 0


def test_outside_through_a_link_into_git_is_refused(
    tree: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Outside as written, but a link leads into a .git: hooks there would run as the user's git."""
    (tmp_path / "git").symlink_to(tree / ".git")
    code, _, err = run(capsys, "train.yaml", "-o", tmp_path / "git" / "hooks")
    assert code == 2 and "is .git or inside it" in err
    assert not (tree / ".git" / "hooks" / "pytorchjob.yaml").exists()


def test_root_allows_another_boundary(tree: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "train.yaml", "--root", tmp_path, "-o", tmp_path / "out")
    assert (code, err) == (0, "")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == BASE_FILES


def test_foreign_files_where_we_would_write_are_refused(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = tree / "deploy" / "base"
    base.mkdir(parents=True)
    (base / "pytorchjob.yaml").write_text(f"# my own job\nkind: PyTorchJob\ntoken: {SECRET}\n")
    (base / "kustomization.yaml").write_text("resources: [pytorchjob.yaml]\n")
    before = files(tree)
    code, out, err = run(capsys, "train.yaml", "-o", "deploy/base")
    assert (code, out) == (2, "")
    assert err.splitlines() == [
        f"elastic-compile: error: deploy/base/{name}: exists and was not written by elastic-compile "
        f"(not in {output.MANIFEST}); move it away or choose another -o"
        for name in ("kustomization.yaml", "pytorchjob.yaml")
    ]
    assert files(tree) == before
    code, out, err = run(capsys, "train.yaml", "-o", "deploy/base", "--check")
    assert code == 2 and SECRET not in out + err


def test_an_identical_file_is_taken_over(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A base written before the manifest existed: identical bytes can be replaced without loss."""
    assert run(capsys, "train.yaml", "-o", "deploy/base")[0] == 0
    (tree / "deploy" / "base" / output.MANIFEST).unlink()
    code, out, _ = run(capsys, "train.yaml", "-o", "deploy/base", "--check")
    assert code == 1 and f"+++ b/deploy/base/{output.MANIFEST}" in out
    assert run(capsys, "train.yaml", "-o", "deploy/base")[0] == 0
    assert run(capsys, "train.yaml", "-o", "deploy/base", "--check")[:2] == (0, "")


def test_a_tampered_manifest_is_refused(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "train.yaml", "-o", "deploy/base")[0] == 0
    manifest = tree / "deploy" / "base" / output.MANIFEST
    manifest.write_text(manifest.read_text() + "../../README.md\n")
    before = files(tree)
    code, _, err = run(capsys, EXAMPLE, "-o", "deploy/base")
    assert code == 2
    assert err == (
        f"elastic-compile: error: deploy/base/{output.MANIFEST}: '../../README.md' is not a file elastic-compile "
        "writes; fix or delete it\n"
    )
    assert files(tree) == before


# --------------------------------------------------------------------------- owning what we wrote


def test_several_specs_beside_a_hand_written_overlay(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The issue's second data loss: `a.yaml b.yaml -o deploy/` deleted deploy/prod/."""
    prod = tree / "deploy" / "prod"
    prod.mkdir(parents=True)
    (prod / "kustomization.yaml").write_text("resources: [../minimal, ../ml-team/llm-finetune]\n")
    (tree / "deploy" / "NOTES.md").write_text("hand-written\n")
    code, _, err = run(capsys, "train.yaml", EXAMPLE, "-o", "deploy")
    assert (code, err) == (
        0,
        "elastic-compile: 2 specs, 6 files written to deploy, 0 unchanged, 0 warnings, 0 errors\n",
    )
    assert sorted(p.name for p in (tree / "deploy").iterdir()) == [
        output.MANIFEST, "NOTES.md", "minimal", "ml-team", "prod",
    ]  # fmt: skip
    assert (prod / "kustomization.yaml").read_text() == "resources: [../minimal, ../ml-team/llm-finetune]\n"
    owned = (tree / "deploy" / output.MANIFEST).read_text().splitlines()
    assert [line for line in owned if not line.startswith("#")] == [
        f"{name}/{f}" for name in ("minimal", "ml-team/llm-finetune") for f in BASE_FILES[1:]
    ]
    # --check: clean, and the hand-written entries are named (never read), not drift.
    code, out, err = run(capsys, "train.yaml", EXAMPLE, "-o", "deploy", "--check")
    assert (code, out) == (0, "")
    assert err == (
        "elastic-compile: note: not written by elastic-compile, left alone: deploy/NOTES.md, deploy/prod\n"
        "elastic-compile: 2 specs, 0 files stale, 6 current, 0 warnings, 0 errors\n"
    )
    # One spec fewer: its base goes, the overlay and the notes stay.
    assert run(capsys, EXAMPLE, MINIMAL, "-o", "deploy")[0] == 0
    assert run(capsys, MINIMAL, "train.yaml", "-o", "deploy")[0] == 2  # same name twice, same namespace
    (tree / "other.yaml").write_text(MINIMAL.read_text().replace("name: minimal", "name: other"))
    assert run(capsys, "other.yaml", EXAMPLE, "-o", "deploy")[0] == 0
    assert sorted(p.name for p in (tree / "deploy").iterdir()) == [
        output.MANIFEST, "NOTES.md", "ml-team", "other", "prod",
    ]  # fmt: skip


def test_rerun_is_idempotent_and_removes_stale_files(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "train.yaml", "-t", "all", "-o", "deploy/base")[0] == 0
    base = tree / "deploy" / "base"
    stamps = {p.name: p.stat().st_mtime_ns for p in base.iterdir()}
    inodes = {p.name: p.stat().st_ino for p in base.iterdir()}
    assert run(capsys, "train.yaml", "-t", "all", "-o", "deploy/base") == (0, "", "")
    assert {p.name: p.stat().st_mtime_ns for p in base.iterdir()} == stamps, "identical files are not rewritten"
    assert {p.name: p.stat().st_ino for p in base.iterdir()} == inodes
    (base / "mine.txt").write_text("keep me\n")
    # -t pytorchjob no longer emits the PodTemplate: ours, so it goes; mine.txt stays.
    assert run(capsys, "train.yaml", "-o", "deploy/base") == (0, "", "")
    assert sorted(p.name for p in base.iterdir()) == sorted([*BASE_FILES, "mine.txt"])
    assert run(capsys, "train.yaml", "-o", "deploy/base", "--check")[:2] == (0, "")


def test_a_file_of_ours_edited_by_hand_is_drift_and_restored(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "train.yaml", "-o", "deploy/base")[0] == 0
    job = tree / "deploy" / "base" / "pytorchjob.yaml"
    job.write_text(job.read_text().replace("replicas: 1", "replicas: 3"))
    code, out, _ = run(capsys, "train.yaml", "-o", "deploy/base", "--check")
    assert code == 1 and "-      replicas: 3\n+      replicas: 1\n" in out
    assert run(capsys, "train.yaml", "-o", "deploy/base")[0] == 0
    assert "replicas: 1" in job.read_text()


def test_same_name_in_two_namespaces(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for team in ("team-a", "team-b"):
        (tree / f"{team}.yaml").write_text(MINIMAL.read_text() + f"namespace: {team}\n")
    (tree / "unset.yaml").write_text(MINIMAL.read_text().replace("name: minimal", "name: solo"))
    code, _, err = run(capsys, "team-a.yaml", "team-b.yaml", "unset.yaml", "-o", "deploy")
    assert (code, err) == (
        0,
        "elastic-compile: 3 specs, 9 files written to deploy, 0 unchanged, 0 warnings, 0 errors\n",
    )
    deploy = tree / "deploy"
    bases = sorted(str(p.parent.relative_to(deploy)) for p in deploy.rglob("kustomization.yaml"))
    assert bases == ["solo", "team-a/minimal", "team-b/minimal"]
    for team in ("team-a", "team-b"):
        job = yaml.safe_load((deploy / team / "minimal" / "pytorchjob.yaml").read_text())
        assert job["metadata"]["namespace"] == team
    assert run(capsys, "team-a.yaml", "team-b.yaml", "unset.yaml", "-o", "deploy", "--check")[:2] == (0, "")


def test_adding_a_job_never_moves_another(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A base's place is a function of its own spec: overlays naming it stay valid."""
    (tree / "team-a.yaml").write_text(MINIMAL.read_text() + "namespace: team-a\n")
    (tree / "unset.yaml").write_text(MINIMAL.read_text().replace("name: minimal", "name: solo"))
    assert run(capsys, "team-a.yaml", "unset.yaml", "-o", "deploy")[:2] == (0, "")
    deploy = tree / "deploy"
    before = {p.relative_to(deploy): p.stat().st_ino for p in deploy.rglob("*") if p.is_file()}
    assert {str(p.parent) for p in before} == {".", "solo", "team-a/minimal"}
    # The same name in a second namespace used to move every base to <namespace>/<name>.
    (tree / "team-b.yaml").write_text(MINIMAL.read_text() + "namespace: team-b\n")
    assert run(capsys, "team-a.yaml", "unset.yaml", "team-b.yaml", "-o", "deploy") == (
        0,
        "",
        "elastic-compile: 3 specs, 3 files written to deploy, 6 unchanged, 0 warnings, 0 errors\n",
    )
    after = {p.relative_to(deploy): p.stat().st_ino for p in deploy.rglob("*") if p.is_file()}
    moved = {rel: ino for rel, ino in before.items() if rel != Path(output.MANIFEST) and after.get(rel) != ino}
    assert moved == {}, "no file of the first two bases was moved or rewritten"
    assert sorted(str(p.parent) for p in set(after) - set(before)) == ["team-b/minimal"] * 3


def test_a_base_at_its_old_place_moves_and_what_is_yours_stays(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An older version wrote a namespaced job's base at DIR/<name>/: ours goes, yours stays."""
    (tree / "job.yaml").write_text(MINIMAL.read_text())
    assert run(capsys, "job.yaml", EXAMPLE, "-o", "deploy")[0] == 0
    old = tree / "deploy" / "minimal"
    (old / "patch.yaml").write_text("# mine\n")
    (tree / "job.yaml").write_text(MINIMAL.read_text() + "namespace: team-a\n")
    code, out, _ = run(capsys, "job.yaml", EXAMPLE, "-o", "deploy", "--check")
    assert code == 1
    assert sorted(set(re.findall(r"^\+\+\+ (\S+)", out, re.MULTILINE))) == [
        "/dev/null",
        f"b/deploy/{output.MANIFEST}",
        *(f"b/deploy/team-a/minimal/{f}" for f in BASE_FILES[1:]),
    ]
    assert run(capsys, "job.yaml", EXAMPLE, "-o", "deploy") == (
        0,
        "",
        "elastic-compile: 2 specs, 3 files written to deploy, 3 unchanged, 3 removed, 0 warnings, 0 errors\n",
    )
    assert sorted(p.name for p in old.iterdir()) == ["patch.yaml"]
    assert (old / "patch.yaml").read_text() == "# mine\n"
    assert sorted(p.name for p in (tree / "deploy" / "team-a" / "minimal").iterdir()) == BASE_FILES[1:]


def test_bases_that_would_collide_are_refused_at_the_name(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tree / "team-a.yaml").write_text(MINIMAL.read_text() + "namespace: team-a\n")
    (tree / "copy.yaml").write_text(MINIMAL.read_text() + "namespace: team-a\n")
    (tree / "unset.yaml").write_text(MINIMAL.read_text().replace("name: minimal", "name: team-a"))
    code, out, err = run(capsys, "team-a.yaml", "copy.yaml", "unset.yaml", "-o", "deploy")
    assert (code, out) == (2, "")
    line = MINIMAL.read_text().splitlines().index("name: minimal") + 1
    assert err.splitlines() == [
        f"copy.yaml:{line}:7: name: its base team-a/minimal/ is also the base of team-a.yaml; "
        "give each job its own name in a namespace (given: minimal)",
        f"unset.yaml:{line}:7: name: its base team-a/ would hold the bases of namespace team-a (team-a.yaml); "
        "set this job's namespace or rename it (given: team-a)",
        "elastic-compile: 3 specs, nothing written, 0 warnings, 2 errors",  # a run of several specs ends so
    ]
    assert not (tree / "deploy").exists()
    assert run(capsys, "team-a.yaml", "copy.yaml", "-o", "deploy", "--check")[0] == 2


def test_umask_decides_the_modes(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old = os.umask(0o027)
    try:
        assert run(capsys, "train.yaml", EXAMPLE, "-o", "deploy")[0] == 0
    finally:
        os.umask(old)
    deploy = tree / "deploy"
    assert stat.S_IMODE(deploy.stat().st_mode) == 0o750
    assert stat.S_IMODE((deploy / "minimal").stat().st_mode) == 0o750
    assert {stat.S_IMODE(p.stat().st_mode) for p in deploy.rglob("*") if p.is_file()} == {0o640}


# --------------------------------------------------------------------------- symbolic links


def test_a_symlinked_directory_inside_is_written_through(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tree / "generated").mkdir()
    (tree / "deploy").symlink_to("generated")
    assert run(capsys, "train.yaml", "-o", "deploy/base") == (0, "", "")
    assert (tree / "deploy").is_symlink(), "the link is kept, not replaced by a directory"
    assert sorted(p.name for p in (tree / "generated" / "base").iterdir()) == BASE_FILES
    assert run(capsys, "train.yaml", "-o", "deploy/base", "--check")[:2] == (0, "")
    (tree / "base").symlink_to("generated/base")  # DIR itself a link
    assert run(capsys, "train.yaml", "-o", "base", "--check")[:2] == (0, "")


def test_a_link_leading_out_is_refused_and_never_followed(
    tree: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's first hostile PR: a committed `deploy -> ../elsewhere` made -o write outside."""
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "base").mkdir(parents=True)
    (elsewhere / "base" / "pytorchjob.yaml").write_text(SECRET)
    (tree / "deploy").symlink_to(elsewhere)
    for args in (["-o", "deploy/base"], ["-o", "deploy/base", "--check"], ["--check", "deploy/base/pytorchjob.yaml"]):
        code, out, err = run(capsys, "train.yaml", *args)
        assert (code, out) == (2, "")
        assert err == f"elastic-compile: error: deploy: a symbolic link that leads outside {tree}; not followed\n"
        assert str(elsewhere) not in err and SECRET not in err
    assert sorted(p.name for p in (elsewhere / "base").iterdir()) == ["pytorchjob.yaml"]


@pytest.mark.parametrize("name", ["pytorchjob.yaml", output.MANIFEST])
def test_links_inside_the_directory_are_never_followed(
    tree: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    """A link where our file goes (even one we listed), to a secret: refused by name, never read."""
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET)
    assert run(capsys, "train.yaml", "-o", "deploy/base")[0] == 0
    link = tree / "deploy" / "base" / name
    link.unlink()
    link.symlink_to(secret)
    for extra in ([], ["--check"]):
        code, out, err = run(capsys, "train.yaml", "-o", "deploy/base", *extra)
        assert (code, out) == (2, "")
        assert err == (
            f"elastic-compile: error: deploy/base/{name}: a symbolic link, not a file elastic-compile wrote\n"
        )
    assert secret.read_text() == SECRET and link.is_symlink()


def test_a_link_for_a_base_directory_is_refused(tree: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tree / "deploy").mkdir()
    (tree / "deploy" / "minimal").symlink_to(tmp_path)
    code, _, err = run(capsys, "train.yaml", EXAMPLE, "-o", "deploy")
    assert code == 2
    assert err == (
        "elastic-compile: error: deploy/minimal: a symbolic link where elastic-compile needs a directory of its own\n"
        "elastic-compile: 2 specs, nothing written, 0 warnings, 1 error\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["repo"]


def test_check_file_refuses_links_and_special_files(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tree / "job.yaml").symlink_to("README.md")
    code, out, err = run(capsys, "train.yaml", "--check", "job.yaml")
    assert (code, out) == (2, "")
    assert err == "elastic-compile: error: job.yaml: a symbolic link, not a file elastic-compile wrote\n"
    os.mkfifo(tree / "fifo.yaml")  # a FIFO must not hang the check
    code, _, err = run(capsys, "train.yaml", "--check", "fifo.yaml")
    assert code == 2 and "fifo.yaml: a special file" in err


@pytest.mark.parametrize("directory", [".", "./", "sub/..", "deploy"])
def test_check_file_that_is_a_directory_is_refused(
    tree: Path, capsys: pytest.CaptureFixture[str], directory: str
) -> None:
    """``--check .`` was "stale: a write would create it" (exit 1): the empty name read as absent (red team 2)."""
    (tree / "sub").mkdir()
    (tree / "deploy").mkdir()
    code, out, err = run(capsys, "train.yaml", "--check", directory)
    assert (code, out) == (2, "")
    assert err == f"elastic-compile: error: {Path(directory)}: a directory, not a file elastic-compile wrote\n"


def test_a_link_swapped_after_the_check_is_caught(
    tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The race: the link pointed inside when it was checked, outside when it was opened.

    Simulated by a realpath that reports the old, harmless target; the descriptor that was
    really opened is checked again (/proc/self/fd), so the write still never happens.
    """
    if safefs._opened_path(os.open(".", os.O_RDONLY)) is None:
        pytest.skip("this platform cannot say where an open descriptor points")
    outside = tmp_path / "outside"
    outside.mkdir()
    (tree / "deploy").symlink_to(outside)
    real_realpath = os.path.realpath

    def stale_realpath(path: str | os.PathLike[str], **kwargs: object) -> str:
        return str(tree / "generated") if Path(path) == tree / "deploy" else real_realpath(path)

    monkeypatch.setattr(safefs.os.path, "realpath", stale_realpath)
    code, _, err = run(capsys, "train.yaml", "-o", "deploy/base")
    monkeypatch.undo()
    assert code == 2 and "deploy: a symbolic link that leads outside" in err
    assert list(outside.iterdir()) == []


def test_check_never_prints_foreign_content(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "train.yaml", "-o", "deploy/base")[0] == 0
    (tree / "deploy" / "base" / "creds.env").write_text(f"TOKEN={SECRET}\n")
    code, out, err = run(capsys, EXAMPLE, "-o", "deploy/base", "--check")
    assert code == 1 and SECRET not in out + err
    assert "left alone: deploy/base/creds.env" in err


def test_boundary_walk_bounds() -> None:
    assert safefs.inside(Path("/a/b"), Path("/a")) and not safefs.inside(Path("/ab"), Path("/a"))


@pytest.fixture(autouse=True)
def _no_stray_outside(tmp_path: Path) -> Iterator[None]:
    yield
    assert not Path("/tmp/elastic-compile-outside").exists()
