"""The result cache: a stored run is reused only while everything it depends on is unchanged.

Each test runs the CLI as a user does, in a git working tree of its own, twice or more:
the first run compiles and stores, a later one must print, write and exit exactly as a
compile would. Whether a run compiled is observed by replacing the compile step with one
that records the call (a hit never reaches it).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from elastic_compile.compiler import cache, cachedir, cli
from elastic_compile.core import crdcheck

ROOT = Path(__file__).resolve().parents[1]
MANY = ROOT / "examples" / "many-jobs"
EXAMPLE = ROOT / "examples" / "ddp-2x8-gpu.yaml"

Run = Callable[..., tuple[int, str, str, bool]]


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working tree holding the many-jobs specs and their bases; the current directory."""
    monkeypatch.delenv(crdcheck.CRDS_ENV, raising=False)  # in the key: the same run with and without it
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    shutil.copytree(MANY / "teams", root / "teams")
    shutil.copytree(MANY / "platform", root / "platform")
    shutil.copy(EXAMPLE, root / "train.yaml")
    monkeypatch.chdir(root)
    return root


@pytest.fixture
def run(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Run:
    """``run(*argv)``: exit code, stdout, stderr, and whether the compiler ran."""
    real = cli._compile

    def run(*argv: str) -> tuple[int, str, str, bool]:
        compiled = []

        def compile_step(*args: object, **kwargs: object) -> int:
            compiled.append(True)
            return real(*args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(cli, "_compile", compile_step)
        code = cli.main(list(argv))
        out, err = capsys.readouterr()
        return code, out, err, bool(compiled)

    return run


def entries() -> list[Path]:
    where = cache.directory()
    assert where is not None
    return sorted(where.glob("*.json")) if where.is_dir() else []


def relink(link: Path, target: str | Path) -> None:
    """Point the symbolic link ``link`` somewhere else (as a pull request may)."""
    link.unlink()
    link.symlink_to(target)


def two_bases(repo: Path, *, link: str, **bases: str) -> None:
    """A ``_base.elastic.yaml`` holding each text in a directory of its name; ``link`` leads to the first."""
    for directory, text in bases.items():
        (repo / directory).mkdir()
        (repo / directory / "_base.elastic.yaml").write_text(text)
    (repo / link).symlink_to(next(iter(bases)))


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# --------------------------------------------------------------------------- same result


@pytest.mark.parametrize(
    "argv",
    [
        ["train.yaml"],
        ["train.yaml", "--format", "json", "-t", "all"],
        ["teams"],  # a directory: bases, several jobs, lint lines on stderr
        ["teams/nlp/llm-finetune.elastic.yaml", "--ignore", "EC104"],
    ],
)
def test_a_hit_prints_what_the_compile_printed(repo: Path, run: Run, argv: list[str]) -> None:
    first = run(*argv)
    assert first[0] == 0 and first[3]
    assert len(entries()) == 1
    second = run(*argv)
    assert second[:3] == first[:3]
    assert not second[3]
    assert run("--no-cache", *argv)[:3] == first[:3]


def test_a_hit_writes_and_checks_the_directory_as_a_compile_does(repo: Path, run: Run) -> None:
    code, _, err, compiled = run("-o", "deploy", "teams")
    assert (code, compiled) == (0, True)
    written = tree(repo / "deploy")
    shutil.rmtree(repo / "deploy")
    assert run("-o", "deploy", "teams") == (0, "", err, False)
    assert tree(repo / "deploy") == written
    check = run("-o", "deploy", "--check", "teams")
    assert check[0] == 0 and check[3]  # another command line: compiled once, then stored
    assert run("-o", "deploy", "--check", "teams")[:3] == check[:3]
    # The disk is always read afresh: an edit of a written file is drift on a hit too.
    job = next((repo / "deploy").rglob("pytorchjob.yaml"))
    job.write_text(job.read_text() + "# edited\n")
    code, out, _, compiled = run("-o", "deploy", "--check", "teams")
    assert (code, compiled) == (1, False)
    assert "-# edited" in out
    # And a file that is not ours is still refused where we would write.
    shutil.rmtree(repo / "deploy")
    (repo / "deploy").mkdir()
    (repo / "deploy" / "vision").write_text("mine\n")
    code, _, err, compiled = run("-o", "deploy", "teams")
    assert (code, compiled) == (2, False)
    assert "deploy/vision" in err
    assert (repo / "deploy" / "vision").read_text() == "mine\n"


def test_check_file_on_a_hit(repo: Path, run: Run) -> None:
    out = run("train.yaml")[1]
    (repo / "job.yaml").write_text(out)
    assert run("train.yaml", "--check", "job.yaml")[0] == 0
    assert run("train.yaml", "--check", "job.yaml") == (0, "", "", False)
    (repo / "job.yaml").write_text(out.replace("replicas: 2", "replicas: 3"))
    code, diff, _, compiled = run("train.yaml", "--check", "job.yaml")
    assert (code, compiled) == (1, False)
    assert "+    replicas: 2" in diff or "replicas: 2" in diff


# --------------------------------------------------------------------------- what invalidates


def test_a_changed_spec_compiles_again(repo: Path, run: Run) -> None:
    before = run("train.yaml")[1]
    spec = repo / "train.yaml"
    info = spec.stat()
    spec.write_text(spec.read_text().replace("name: ", "name: x", 1))
    os.utime(spec, ns=(info.st_atime_ns, info.st_mtime_ns))  # the same time: bytes decide
    code, after, _, compiled = run("train.yaml")
    assert (code, compiled) == (0, True)
    assert after != before
    assert run("train.yaml")[1:3] == (after, "")


def test_a_changed_base_compiles_again(repo: Path, run: Run) -> None:
    before = run("teams")[1]
    base = repo / "platform" / "_defaults.elastic.yaml"
    base.write_text(base.read_text().replace("NCCL_DEBUG: WARN", "NCCL_DEBUG: INFO"))
    code, after, _, compiled = run("teams")
    assert (code, compiled) == (0, True)
    assert after == before.replace("value: WARN", "value: INFO")
    assert after != before


def test_a_new_spec_in_a_directory_compiles_again(repo: Path, run: Run) -> None:
    before = run("teams")[1]
    shutil.copy(repo / "train.yaml", repo / "teams" / "extra.elastic.yaml")
    code, after, _, compiled = run("teams")
    assert (code, compiled) == (0, True)
    assert after.count("kind: PyTorchJob") == before.count("kind: PyTorchJob") + 1


def test_a_base_reached_through_a_relinked_directory_compiles_again(repo: Path, run: Run) -> None:
    two_bases(repo, a="env: {TEAM_MARKER: team-a}\n", b="env: {TEAM_MARKER: team-b}\n", link="current")
    (repo / "job.yaml").write_text("extends: current/_base.elastic.yaml\n" + (repo / "train.yaml").read_text())
    assert "value: team-a" in run("job.yaml")[1]
    relink(repo / "current", "b")
    code, out, _, compiled = run("job.yaml")
    assert (code, compiled) == (0, True)
    assert "value: team-b" in out and "team-a" not in out


def test_a_base_turned_into_a_link_out_of_the_tree_is_refused_not_replayed(
    repo: Path, run: Run, tmp_path: Path
) -> None:
    (repo / "_base.elastic.yaml").write_text("namespace: team-a\n")
    (repo / "job.yaml").write_text("extends: _base.elastic.yaml\n" + (repo / "train.yaml").read_text())
    assert run("job.yaml")[0] == 0
    outside = tmp_path / "outside.elastic.yaml"
    outside.write_text("namespace: team-a\n")  # the very same bytes
    relink(repo / "_base.elastic.yaml", outside)
    code, out, err, compiled = run("job.yaml")
    assert (code, out, compiled) == (2, "", True)
    assert "leads outside" in err


def test_the_environment_the_directory_and_the_compiler_key_a_run(
    repo: Path, run: Run, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert run("train.yaml")[3]
    monkeypatch.setenv("ELASTIC_COMPILE_SOMETHING", "1")
    assert run("train.yaml")[3]
    assert not run("train.yaml")[3]
    (repo / "sub").mkdir()
    monkeypatch.chdir(repo / "sub")
    assert run("../train.yaml")[3]
    # The compiler's own files, by content: a changed one is another compiler, a new time is not.
    package = tmp_path / "elastic_compile"
    shutil.copytree(Path(cache.__file__).parents[1], package, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(cache, "_PACKAGE", package)
    assert not run("../train.yaml")[3]  # a copy of the same files: the same compiler
    source = package / "compiler" / "cache.py"
    os.utime(source, ns=(0, 0))
    assert not run("../train.yaml")[3]
    source.write_bytes(source.read_bytes() + b"\n")
    assert run("../train.yaml")[3]


def test_runs_the_cache_cannot_see_are_never_stored(repo: Path, run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    (repo / "bad.yaml").write_text("name: x\nworkers: -1\n")
    assert run("bad.yaml")[0] == 2
    assert run("train.yaml", "--explain")[0] == 0
    assert run("--no-cache", "train.yaml")[0] == 0
    assert run("--strict", "teams")[0] in (0, 2)
    templates = repo / "templates"
    shutil.copytree(ROOT / "elastic_compile" / "templates", templates)
    assert run("train.yaml", "--templates", "templates")[0] == 0
    monkeypatch.setattr(sys, "stdin", open(repo / "train.yaml"))  # noqa: SIM115
    assert run("-")[0] == 0
    strict = run("--strict", "teams")
    stored = 1 if strict[0] == 0 else 0
    assert len(entries()) == stored
    monkeypatch.setenv(cache.DIR_ENV, "")
    assert cache.directory() is None
    assert run("train.yaml")[3] and run("train.yaml")[3]


# --------------------------------------------------------------------------- the directory


def test_a_directory_others_may_write_is_not_used(
    repo: Path, run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    where = tmp_path / "shared-cache"
    where.mkdir(mode=0o777)
    where.chmod(0o777)
    monkeypatch.setenv(cache.DIR_ENV, str(where))
    code, _, err, _ = run("train.yaml")
    assert code == 0
    assert f"the cache {where} is not used" in err
    assert list(where.iterdir()) == []


def test_a_linked_directory_or_entry_is_not_followed(
    repo: Path, run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = tmp_path / "real-cache"
    real.mkdir(mode=0o700)
    link = tmp_path / "link-cache"
    link.symlink_to(real)
    monkeypatch.setenv(cache.DIR_ENV, str(link))
    assert run("train.yaml")[3] and run("train.yaml")[3]
    assert list(real.iterdir()) == []
    monkeypatch.setenv(cache.DIR_ENV, str(real))
    run("train.yaml")
    (entry,) = real.iterdir()
    elsewhere = tmp_path / "elsewhere.json"
    entry.rename(elsewhere)
    entry.symlink_to(elsewhere)
    assert run("train.yaml")[3]  # compiled: the link is not read, and the entry is written anew
    assert not entry.is_symlink()


def test_a_damaged_entry_compiles_again(repo: Path, run: Run) -> None:
    first = run("train.yaml")
    (entry,) = entries()
    data = bytearray(entry.read_bytes())
    at = data.index(b"replicas")
    data[at : at + 8] = b"REPLICAS"
    entry.write_bytes(bytes(data))
    second = run("train.yaml")
    assert second[3] and second[:3] == first[:3]
    entry.write_bytes(b"")
    assert run("train.yaml")[:3] == first[:3]


def test_entries_are_private_and_bounded(repo: Path, run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cache, "MAX_ENTRIES", 4)
    for index in range(7):
        assert run("train.yaml", *["--ignore", "EC104"] * (index + 1))[0] == 0  # 7 command lines
    where = cache.directory()
    assert where is not None
    assert stat.S_IMODE(where.stat().st_mode) == 0o700
    kept = entries()
    assert 3 <= len(kept) <= 4
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in kept)
    assert not [p for p in where.iterdir() if p.name.startswith(".")]  # no temporary file left


def test_a_hit_loads_no_compiler(repo: Path) -> None:
    """The point of the cache: a hit imports neither PyYAML, Jinja2 nor pydantic (counted, not timed)."""
    probe = (
        "import sys; from elastic_compile.compiler.cli import main; code = main(['train.yaml']); "
        "print(code, sorted(m for m in ('yaml', 'jinja2', 'pydantic') if m in sys.modules), file=sys.stderr)"
    )
    env = {**os.environ}
    first = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    second = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    assert first.stderr.splitlines()[-1] == "0 ['jinja2', 'pydantic', 'yaml']"
    assert second.stderr.splitlines()[-1] == "0 []"
    assert second.stdout == first.stdout


# --------------------------------------------------------------------------- found by the red-team


def test_a_second_way_to_a_base_relinked_compiles_again(repo: Path, run: Run) -> None:
    two_bases(repo, bases="max_restarts: 3\n", alt="max_restarts: 5\n", link="link")
    job = "name: {name}\nimage: x:1\ncommand: [python, t.py]\n"
    (repo / "j1.elastic.yaml").write_text("extends: bases/_base.elastic.yaml\n" + job.format(name="j1"))
    (repo / "j2.elastic.yaml").write_text("extends: link/_base.elastic.yaml\n" + job.format(name="j2"))
    before = run("j1.elastic.yaml", "j2.elastic.yaml")[1]
    relink(repo / "link", "alt")
    code, after, _, compiled = run("j1.elastic.yaml", "j2.elastic.yaml")
    assert (code, compiled) == (0, True)
    assert after != before
    assert after == run("--no-cache", "j1.elastic.yaml", "j2.elastic.yaml")[1]


def test_a_base_named_through_a_relinked_alias_is_checked_again(repo: Path, run: Run) -> None:
    (repo / "a.elastic.yaml").write_text("extends: _base.elastic.yaml\nname: a\nimage: x:1\ncommand: [python, t.py]\n")
    (repo / "_base.elastic.yaml").write_text("max_restarts: 3\n")
    (repo / "_bad.elastic.yaml").write_text("max_restarts: -7\n")
    (repo / "_alias.elastic.yaml").symlink_to("_base.elastic.yaml")
    assert run("a.elastic.yaml", "_alias.elastic.yaml")[0] == 0
    relink(repo / "_alias.elastic.yaml", "_bad.elastic.yaml")
    code, out, err, compiled = run("a.elastic.yaml", "_alias.elastic.yaml")
    assert (code, out, compiled) == (2, "", True)
    assert "_alias.elastic.yaml:1:15: max_restarts" in err


def test_a_spec_from_a_pipe_is_read_once(repo: Path) -> None:
    command = [sys.executable, "-m", "elastic_compile.compiler.cli", "/dev/stdin"]
    first = subprocess.run(command, input=(repo / "train.yaml").read_bytes(), capture_output=True, check=True)
    other = (repo / "train.yaml").read_text().replace("name: ", "name: other-", 1)
    second = subprocess.run(command, input=other.encode(), capture_output=True, check=False)
    assert (second.returncode, second.stderr) == (0, b"")
    assert b"name: other-" in second.stdout and second.stdout != first.stdout
    assert entries() == []  # never stored: checking it again would consume the pipe


def test_any_bytes_in_a_path(repo: Path, run: Run) -> None:
    odd = os.fsdecode(b"jobs-\xff")
    (repo / odd).mkdir()
    shutil.copy(repo / "train.yaml", repo / odd / "train.elastic.yaml")
    first = run(odd)
    assert first[0] == 0 and first[3]
    assert run(odd) == (*first[:3], False)


def test_only_our_entries_are_pruned(repo: Path, run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    run("train.yaml")
    where = cache.directory()
    assert where is not None
    mine = [where / f"record{i}.json" for i in range(6)]
    for path in mine:
        path.write_text("{}")
    monkeypatch.setattr(cache, "MAX_ENTRIES", 4)
    for index in range(6):
        run("train.yaml", *["--ignore", "EC104"] * (index + 1))
    assert all(path.exists() for path in mine)
    assert len(entries()) - len(mine) <= 4


def test_all_entries_together_are_bounded(repo: Path, run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    run("train.yaml")
    (one,) = entries()
    size = one.stat().st_size
    monkeypatch.setattr(cache, "MAX_TOTAL_BYTES", 3 * size)
    for index in range(6):
        run("train.yaml", *["--ignore", "EC104"] * (index + 1))
    kept = entries()
    assert 1 <= len(kept) <= 3
    assert sum(p.stat().st_size for p in kept) <= 3 * size


def _forge(entry_path: Path, change: Callable[[dict[str, object]], None]) -> None:
    """Rewrite a stored entry with a valid digest: what only the cache's owner could do."""
    import hashlib
    import json

    body = json.loads(entry_path.read_bytes().partition(b"\n")[2])
    change(body)
    data = json.dumps(body).encode()
    entry_path.write_bytes(hashlib.sha256(data).hexdigest().encode() + b"\n" + data)


def test_a_forged_entry_never_writes_outside_dir(repo: Path, run: Run, tmp_path: Path) -> None:
    assert run("-o", "out", "train.yaml")[0] == 0
    (entry,) = entries()
    escape = tmp_path / "escaped.txt"

    def outside(body: dict[str, object]) -> None:
        files = body["files"]
        assert isinstance(files, dict)
        files["../" * 8 + str(escape).lstrip("/")] = 0
        files[str(escape)] = 0

    _forge(entry, outside)
    code, _, err, compiled = run("-o", "out", "train.yaml")
    assert (code, compiled) == (2, False)
    assert err.count("not a name elastic-compile writes") == 2
    assert not escape.exists()


@pytest.mark.parametrize(
    "change",
    [
        lambda body: body.update(texts=[]),  # an index out of range
        lambda body: body["options"]["values"].pop("check"),
        lambda body: body["options"]["values"].update(specs="train.yaml"),
        lambda body: body.update(sources=[["spec", "train.yaml"]]),
        lambda body: body.update(files=None),
        lambda body: body.update(stderr=[1] * 300_000),
    ],
)
def test_an_entry_of_another_shape_compiles_again(
    repo: Path, run: Run, change: Callable[[dict[str, object]], None]
) -> None:
    first = run("-o", "out", "train.yaml")
    (entry,) = entries()
    _forge(entry, change)
    assert run("-o", "out", "train.yaml") == (*first[:3], True)


def test_a_deeply_nested_entry_compiles_again(repo: Path, run: Run) -> None:
    import hashlib

    first = run("train.yaml")
    (entry,) = entries()
    data = b"[" * 200_000 + b"]" * 200_000
    entry.write_bytes(hashlib.sha256(data).hexdigest().encode() + b"\n" + data)
    assert run("train.yaml") == (*first[:3], True)


def test_a_link_in_the_package_and_a_removed_directory(
    repo: Path, run: Run, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    package = tmp_path / "elastic_compile"
    shutil.copytree(Path(cache.__file__).parents[1], package, ignore=shutil.ignore_patterns("__pycache__"))
    (package / "compiler" / ".#cli.py").symlink_to("user@host.1234:1700000000")  # an editor's lock
    monkeypatch.setattr(cache, "_PACKAGE", package)
    assert run("train.yaml")[:1] == (0,) and not run("train.yaml")[3]
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    code, out, _, _ = run("--root", str(repo), str(repo / "train.yaml"))
    assert code == 0 and "kind: PyTorchJob" in out


def test_a_relative_directory_is_not_used_and_said_once(repo: Path, run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    # ELASTIC_COMPILE_CACHE_DIR=cache would be a new cache under each directory a run starts in.
    before = sorted(p.name for p in repo.iterdir())
    for relative in ("cache", "./cache", "~/cache"):
        monkeypatch.setenv(cache.DIR_ENV, relative)
        monkeypatch.setattr(cachedir, "_refused", set())
        first, second = run("train.yaml"), run("train.yaml")
        assert first[0] == second[0] == 0 and first[3] and second[3]  # each compiled: nothing stored
        assert first[2] == (
            f"elastic-compile: note: the cache {Path(relative)} is not used: it must be an absolute path, "
            f"or set {cache.DIR_ENV}\n"
        )
        assert second[2] == ""  # said once per process (a run is one)
        assert cache.directory() is None
    assert sorted(p.name for p in repo.iterdir()) == before and not Path("~").exists()
    monkeypatch.setenv(cache.DIR_ENV, "")  # empty: off, without a note
    monkeypatch.setattr(cachedir, "_refused", set())
    assert cache.directory() is None and run("train.yaml")[2] == ""


def test_an_unusable_directory_is_named_once(
    repo: Path, run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(real)
    monkeypatch.setenv(cache.DIR_ENV, str(tmp_path / "link"))
    monkeypatch.setattr(cachedir, "_refused", set())
    err = run("train.yaml")[2]
    assert err.count("is not used") == 1 and "symbolic link" in err
    for home in ("", "relative/home"):
        monkeypatch.delenv(cache.DIR_ENV)
        monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
        monkeypatch.setenv("HOME", home)
        assert cache.directory() is None
        monkeypatch.setenv(cache.DIR_ENV, "x")


def test_a_base_named_through_a_relinked_directory_before_another_extends_it(repo: Path, run: Run) -> None:
    (repo / "bases" / "v1").mkdir(parents=True)
    (repo / "bases" / "v2").mkdir()
    (repo / "legacy").mkdir()
    (repo / "bases" / "v1" / "_p.elastic.yaml").write_text("image: img:1\n")
    (repo / "current").symlink_to("bases/v1")
    (repo / "legacy" / "_legacy.elastic.yaml").write_text("extends: ../bases/v1/_p.elastic.yaml\nmax_restarts: 2\n")
    (repo / "job.elastic.yaml").write_text("name: job\nimage: img:1\ncommand: [python, t.py]\n")
    assert run("job.elastic.yaml", "current", "legacy")[0] == 0
    shutil.copy(repo / "bases" / "v1" / "_p.elastic.yaml", repo / "bases" / "v2")
    relink(repo / "current", "bases/v2")
    (repo / "bases" / "v1" / "_p.elastic.yaml").write_text("image: img:1\nshared_memory: lots\n")
    code, _, err, compiled = run("job.elastic.yaml", "current", "legacy")
    assert (code, compiled) == (2, True)
    assert "bases/v1/_p.elastic.yaml:2:16: shared_memory" in err


def test_a_directory_turned_into_a_link_that_a_base_path_goes_up_out_of_compiles_again(repo: Path, run: Run) -> None:
    # u/sub/../_b is u/_b as written; once u/sub is a link to t/sub the system reaches t/_b,
    # which the compile refuses: the replay must not hold because the spec and u/_b are unchanged.
    for directory, restarts in (("t", 5), ("u", 3)):
        (repo / directory / "sub").mkdir(parents=True)
        (repo / directory / "_b.elastic.yaml").write_text(f"max_restarts: {restarts}\n")
    (repo / "u" / "k.elastic.yaml").write_text(
        "extends: sub/../_b.elastic.yaml\nname: k\nimage: x:1\ncommand: [python, t.py]\n"
    )
    assert run("u/k.elastic.yaml")[0] == 0
    (repo / "u" / "sub").rmdir()
    (repo / "u" / "sub").symlink_to("../t/sub")
    code, out, err, compiled = run("u/k.elastic.yaml")
    assert (code, out, compiled) == (2, "", True)
    assert err.startswith("u/k.elastic.yaml:1:10: extends: goes up (..) out of a symbolic link")


def _package_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    package = tmp_path / "elastic_compile"
    shutil.copytree(Path(cache.__file__).parents[1], package, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(cache, "_PACKAGE", package)
    return package


def test_the_package_is_read_as_python_imports_it(
    repo: Path, run: Run, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    package = _package_copy(tmp_path, monkeypatch)
    # An install that links each file (Bazel's runfiles), and a file name of any bytes.
    real = tmp_path / "output_real.py"
    (package / "compiler" / "output.py").rename(real)
    (package / "compiler" / "output.py").symlink_to(real)
    (package / "templates" / os.fsdecode(b"notes\xff.txt")).write_text("")
    assert run("train.yaml")[3] and not run("train.yaml")[3]
    real.write_text(real.read_text() + "\n")
    assert run("train.yaml")[3]


def test_a_compiler_changed_during_the_run_is_not_stored(
    repo: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    package = _package_copy(tmp_path, monkeypatch)
    real = cli._compile

    def checkout_meanwhile(*args: object, **kwargs: object) -> int:
        (package / "compiler" / "output.py").write_text("# another version\n")
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(cli, "_compile", checkout_meanwhile)
    assert cli.main(["train.yaml"]) == 0
    assert entries() == []
    capsys.readouterr()
