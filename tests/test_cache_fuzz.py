"""The result cache, searched for stale replays: a run with the cache is exactly the run without it.

A differential, property-based test. Each example builds a small git working tree: jobs
(``*.elastic.yaml``) named directly and found by a walk, bases (``_*.elastic.yaml``) whose
``extends:`` chains run through a linked directory (``current``), through linked files, out
of the tree, into cycles and to missing files, with values that are sometimes invalid. Then
it changes the tree step by step (a file's bytes, with or without keeping its size and
time; a file turned into a link to another one and back; the directory link moved; a spec
added, removed or renamed under a walked directory; ``.git`` added or removed here and
above; the current directory; an ``ELASTIC_COMPILE_*`` variable; the files under ``-o``
DIR), and after each step runs one of a few fixed command lines twice, in process and on the
same state: with a cache of the example's own, and with ``--no-cache``. Both must exit,
print and leave the files on disk alike (a ``-o`` run writes into its own copy of DIR's
state). A replay that differs from the compile is a wrong manifest: the worst bug this
product can have.

The cached side must really replay: commands repeat and many steps change nothing they
read, the replays are counted, and the test fails when too few happen (it cannot pass by
never hitting). The work is bounded by counts: :data:`EXAMPLES` derandomized examples (the
same ones on every run, so CI is stable) of at most :data:`MAX_STEPS` steps.
``ELASTIC_COMPILE_FUZZ_EXAMPLES=5000`` runs that many random examples instead; Hypothesis
prints the smallest failing example it finds, and the failure lists the steps to replay.
"""

from __future__ import annotations

import os
import posixpath
import shutil
import stat
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from elastic_compile.compiler import cache, cli
from elastic_compile.core import crdcheck

#: Set to a number to run that many random (not derandomized) examples, e.g. for an hour locally.
EXAMPLES_ENV = "ELASTIC_COMPILE_FUZZ_EXAMPLES"
#: Examples in ``make test`` (about 6 s on a shared 2-core machine).
EXAMPLES = int(os.environ.get(EXAMPLES_ENV) or 60)
#: Steps of one example, at most (each runs one command line with and without the cache).
MAX_STEPS = 8
#: An ``ELASTIC_COMPILE_*`` variable that nothing reads: the cache keys every one of them.
TOGGLE_ENV = "ELASTIC_COMPILE_FUZZ_TOGGLE"

# The tree, as paths relative to the working tree ``repo`` (``../outside`` is beside it).
JOBS = ("top.elastic.yaml", "jobs/a.elastic.yaml", "jobs/b.elastic.yaml", "jobs/deep/c.elastic.yaml")
#: A job that is not there at the start: a spec added to a walked directory.
NEW = "jobs/deep/new.elastic.yaml"
BASES = (
    "_root.elastic.yaml",
    "_alias.elastic.yaml",
    "jobs/_local.elastic.yaml",
    "bases/v1/_p.elastic.yaml",
    "bases/v1/_q.elastic.yaml",
    "bases/v2/_p.elastic.yaml",
    "bases/v2/_q.elastic.yaml",
    "../outside/_p.elastic.yaml",
)
FILES = (*JOBS, NEW, *BASES)
DIRECTORIES = ("jobs/deep", "bases/v1", "bases/v2", "../outside")
#: ``current`` links to one of these (``missing``: a dangling link; ``../outside``: out of the tree).
CURRENT = ("bases/v1", "bases/v2", "../outside", "missing")
#: What ``extends:`` names: a base in the tree, directly or through ``current`` (twice as often as the
#: rest: a base out of the tree, a job, a file that is not there).
EXTENDS = (
    *(b for b in BASES if not b.startswith("..")),
    "current/_p.elastic.yaml",
    "current/_q.elastic.yaml",
) * 2 + ("../outside/_p.elastic.yaml", "jobs/a.elastic.yaml", "missing.elastic.yaml")
#: The two current directories (the command lines name the same files from each).
CWDS = (".", "jobs")
#: Optional values (one drawing a lint: EC107, a secret's literal value).
EXTRAS: dict[str, tuple[str, ...]] = {
    "max_restarts": ("2", "7"),
    "namespace": ("team-a", "team-b"),
    "env": ("{MARK: one}", "{MARK: two}", "{API_TOKEN: hunter2}"),
    "target": ("podtemplate", "trainjob"),
}
#: What makes a spec invalid, now and then: a compile that fails stores nothing.
INVALID = ("max_restarts: -1\n", "shared_memory: lots\n", "name: null\n", "[not, a, mapping]\n")
#: The command lines; a word starting with ``@`` is a path relative to ``repo``, written from the current directory.
COMMANDS: tuple[tuple[str, ...], ...] = (
    ("@top.elastic.yaml",),
    ("@jobs", "-t", "all"),
    ("@jobs/a.elastic.yaml", "@current/_p.elastic.yaml", "--format", "json"),
    ("@jobs", "@current", "@_alias.elastic.yaml"),
    ("-o", "@out", "@jobs"),
    ("-o", "@out", "--check", "@jobs"),
    ("@top.elastic.yaml", "@jobs/b.elastic.yaml", "--check", "@expected.yaml"),
    ("--root", "@jobs", "@jobs/a.elastic.yaml", "@jobs/deep/c.elastic.yaml"),
)
#: What ``--check @expected.yaml`` compares with is written from this command line's stream.
EXPECTED_FROM = ("@top.elastic.yaml", "@jobs/b.elastic.yaml")


def _relative(target: str, start: str) -> str:
    """``target`` as written in a file (or link) in directory ``start``, both relative to ``repo``."""
    anchor = "/tree/repo"
    return posixpath.relpath(posixpath.join(anchor, target), posixpath.join(anchor, start))


def _sometimes(values: tuple[str, ...], weight: int = 3) -> st.SearchStrategy[str | None]:
    """One of ``values``, or None ``weight`` times as often: most specs must compile, or nothing is stored."""
    return st.sampled_from((None,) * weight * len(values) + values)


@st.composite
def spec_text(draw: st.DrawFn, slot: str, broken: bool = True) -> str:
    """A spec for the file ``slot``: a job (name, image, command) or a base, maybe extending another.

    ``broken``: now and then invalid (the files at the start are not: changes break them).
    """
    lines = []
    extends = draw(_sometimes(tuple(e for e in EXTENDS if e != slot), 1))
    if extends is not None:
        lines.append(f"extends: {_relative(extends, posixpath.dirname(slot))}")
    if not posixpath.basename(slot).startswith("_"):
        own = posixpath.basename(slot).split(".")[0]
        # Now and then another job's name: two jobs in one -o DIR are an error.
        lines.append(f"name: {draw(st.sampled_from((own, own, own, 'a')))}")
        lines.append(f"image: {draw(st.sampled_from(('img:1', 'img:latest')))}")  # latest: lint EC105
        lines.append("command: [python, train.py]")
    elif draw(st.booleans()):
        lines.append("image: img:2")
    for key, values in EXTRAS.items():
        value = draw(_sometimes(values))
        if value is not None:
            lines.append(f"{key}: {value}")
    text = "".join(line + "\n" for line in lines) or "{}\n"
    # About one spec in 20 is invalid: a later key wins no argument (duplicates are errors too).
    invalid = draw(_sometimes(INVALID, 5)) if broken else None
    return text if invalid is None else (invalid if invalid.startswith("[") else text + invalid)


def _write(slot: str) -> st.SearchStrategy[tuple[Any, ...]]:
    # replace: a new regular file where a link was (else written through it); keep: size aside, the old times.
    return st.tuples(st.just("write"), st.just(slot), spec_text(slot), st.booleans(), st.booleans())


def _maybe(strategy: st.SearchStrategy[str]) -> st.SearchStrategy[str | None]:
    """``strategy``'s value four times in five, else None (a file that is not there at the start)."""
    return st.sampled_from((True, True, True, True, False)).flatmap(lambda there: strategy if there else st.none())


slots = st.sampled_from(FILES)
#: Changes to what a compile reads: specs, bases, links, the boundary.
inputs = st.one_of(
    slots.flatmap(_write),
    st.tuples(st.just("flip"), slots, st.integers(0, 15)),
    st.tuples(st.just("link"), slots, st.sampled_from((*FILES, "current/_p.elastic.yaml"))),
    st.tuples(st.just("remove"), slots),
    st.tuples(st.just("mkdir"), slots),
    st.tuples(st.just("rename"), slots, slots),
    st.tuples(st.just("relink"), st.sampled_from(CURRENT)),
    st.tuples(st.just("git"), st.sampled_from(("repo", "above", "jobs"))),
)
#: Changes to the rest: times, the current directory, the environment, what --check compares with.
others = st.one_of(
    st.tuples(st.just("touch"), slots),
    st.tuples(st.just("cwd"), st.sampled_from(CWDS)),
    st.tuples(st.just("env"), st.sampled_from((None, "1", "2"))),
    st.just(("expect",)),
    st.tuples(st.just("flip"), st.just("expected.yaml"), st.integers(0, 15)),
    st.tuples(st.just("drift"), st.integers(0, 15)),
    st.tuples(st.just("foreign"), st.sampled_from(("alpha", "notes.yaml"))),
)
mutations = st.one_of(inputs, inputs, others)
#: A step: a change (nothing, a third of the time), then a command line (three times in four None:
#: the previous step's). A run repeated on an unchanged tree must replay; one repeated after a
#: change is where a stale replay would show.
steps = st.tuples(
    st.one_of(st.just(("nothing",)), mutations, mutations),
    st.sampled_from((None,) * 3 * len(COMMANDS) + tuple(range(len(COMMANDS)))),
)
#: The files at the start (None: absent); then steps applied before the first run; then the steps.
scenarios = st.tuples(
    st.tuples(
        *(
            spec_text(slot, False) if slot in JOBS else st.none() if slot == NEW else _maybe(spec_text(slot, False))
            for slot in FILES
        )
    ),
    st.lists(mutations, max_size=3),
    st.lists(steps, min_size=3, max_size=MAX_STEPS),
)


JOB = "name: {}\nimage: img:1\ncommand: [python, train.py]\n"


def _known(files: dict[str, str], setup: list[tuple[Any, ...]], plan: list[tuple[tuple[Any, ...], int | None]]) -> Any:
    """A scenario written by hand: ``files`` over a tree of plain jobs and empty bases."""
    texts = tuple(
        files.get(slot, JOB.format(posixpath.basename(slot).split(".")[0]) if slot in JOBS else "{}\n")
        if slot != NEW
        else None
        for slot in FILES
    )
    return texts, setup, plan


#: Stale replays a cache could make, written out: the three found by hand before this test
#: existed (tests/test_cache.py has them as example tests), the plain edits, and one that only the
#: cache's check of the boundary prevents. Every run of this test plays them first, so it is known
#: to catch each (each was checked by removing that check from the cache). A run, the same run (a
#: replay), a change, the run again.
KNOWN = (
    # A base reached through a relinked directory.
    _known(
        {
            "top.elastic.yaml": "extends: current/_p.elastic.yaml\n" + JOB.format("top"),
            "bases/v2/_p.elastic.yaml": "max_restarts: 7\n",
        },
        [],
        [(("nothing",), 0), (("nothing",), None), (("relink", "bases/v2"), None)],
    ),
    # A second way to a base already read (a walk: a reads it directly, b through the link).
    _known(
        {
            "jobs/a.elastic.yaml": "extends: ../bases/v1/_p.elastic.yaml\n" + JOB.format("a"),
            "jobs/b.elastic.yaml": "extends: ../current/_p.elastic.yaml\n" + JOB.format("b"),
            "bases/v2/_p.elastic.yaml": "max_restarts: 7\n",
        },
        [],
        [(("nothing",), 1), (("nothing",), None), (("relink", "bases/v2"), None)],
    ),
    # A base named through an alias, after a job read the file it leads to; the alias then moved.
    _known(
        {
            "jobs/a.elastic.yaml": "extends: ../bases/v2/_p.elastic.yaml\n" + JOB.format("a"),
            "bases/v2/_q.elastic.yaml": "max_restarts: -1\n",
        },
        [("link", "_alias.elastic.yaml", "bases/v2/_p.elastic.yaml")],
        [(("nothing",), 3), (("nothing",), None), (("link", "_alias.elastic.yaml", "bases/v2/_q.elastic.yaml"), None)],
    ),
    # A spec edited in place, its size and times kept (img:1 -> img:2).
    _known({}, [], [(("nothing",), 0), (("nothing",), None), (("flip", "top.elastic.yaml", 0), None)]),
    # A base edited in place, its size and times kept.
    _known(
        {
            "top.elastic.yaml": "extends: _root.elastic.yaml\n" + JOB.format("top"),
            "_root.elastic.yaml": "max_restarts: 2\n",
        },
        [],
        [(("nothing",), 0), (("nothing",), None), (("flip", "_root.elastic.yaml", 0), None)],
    ),
    # A spec added under a walked directory.
    _known({}, [], [(("nothing",), 1), (("nothing",), None), (("write", NEW, JOB.format("new"), False, False), None)]),
    # A base out of the working tree by its path, in it by its link: allowed while the boundary is
    # the directory above (its .git), refused once the working tree has its own .git again.
    _known(
        {"top.elastic.yaml": "extends: ../outside/_p.elastic.yaml\n" + JOB.format("top")},
        [("git", "repo"), ("git", "above"), ("link", "../outside/_p.elastic.yaml", "_root.elastic.yaml")],
        [(("nothing",), 0), (("nothing",), None), (("git", "repo"), None)],
    ),
)


def _examples(test: Callable[..., None]) -> Callable[..., None]:
    for scenario in reversed(KNOWN):
        test = example(scenario)(test)
    return test


@dataclass(frozen=True)
class Outcome:
    """What one run did: its exit code, its output, whether it compiled, the files left on disk."""

    code: int
    out: str
    err: str
    compiled: bool
    disk: dict[str, tuple[Any, ...]]

    def seen(self) -> tuple[int, str, str, dict[str, tuple[Any, ...]]]:
        """Everything a user sees (whether the compiler ran is not: that is the point of the cache)."""
        return self.code, self.out, self.err, self.disk


def _disk(top: Path) -> dict[str, tuple[Any, ...]]:
    """Every file, directory and link below ``top``: kind, mode, content or target (not times: they differ)."""
    found: dict[str, tuple[Any, ...]] = {}
    for where, dirs, files in os.walk(top):
        for name in dirs + files:
            path = os.path.join(where, name)
            info = os.lstat(path)
            rel = os.path.relpath(path, top)
            if stat.S_ISLNK(info.st_mode):
                found[rel] = ("link", os.readlink(path))
            elif stat.S_ISDIR(info.st_mode):
                found[rel] = ("dir", stat.S_IMODE(info.st_mode))
            else:
                found[rel] = ("file", stat.S_IMODE(info.st_mode), Path(path).read_bytes())
    return found


@dataclass
class Sandbox:
    """One example's tree, current directory, environment and cache, and a log of what was done."""

    top: Path
    patch: pytest.MonkeyPatch
    capsys: pytest.CaptureFixture[str]
    compiled: list[bool]
    cwd: str = "."
    log: list[str] = field(default_factory=list)

    @property
    def above(self) -> Path:
        return self.top / "tree"

    @property
    def repo(self) -> Path:
        return self.above / "repo"

    def path(self, slot: str) -> Path:
        return self.repo / slot

    def build(self, texts: tuple[str | None, ...]) -> None:
        (self.repo / ".git").mkdir(parents=True)
        for directory in DIRECTORIES:
            self.path(directory).mkdir(parents=True)
        self.path("current").symlink_to("bases/v1")
        self.log.append("a tree: .git, current -> bases/v1, and these files:")
        for slot, text in zip(FILES, texts, strict=True):
            if text is not None:
                self.path(slot).write_text(text)
                self.log.append(f"  {slot}: {text!r}")
        self.patch.chdir(self.repo)

    # ------------------------------------------------------------------ the changes

    def apply(self, change: tuple[Any, ...]) -> None:
        kind, *args = change
        self.log.append(f"change: {change!r}")
        getattr(self, f"_{kind}")(*args)

    def _nothing(self) -> None:
        pass

    def _clear(self, slot: str) -> None:
        """Nothing at ``slot`` any more: no file, link or directory."""
        path = self.path(slot)
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif os.path.lexists(path):
            path.unlink()

    def _write(self, slot: str, text: str, replace: bool, keep: bool) -> None:
        path = self.path(slot)
        before = os.stat(path) if keep and path.exists() else None
        if replace or path.is_dir():
            self._clear(slot)
        try:
            path.write_text(text)  # through a link when one is there: its target changes
        except OSError:  # a link into a directory that is not there, or to a link that loops
            self._clear(slot)
            path.write_text(text)
        if before is not None:
            os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))

    def _flip(self, slot: str, index: int) -> None:
        """One digit changed in place: the same size and the same times, other bytes."""
        path = self.path(slot)
        if not path.is_file():
            return
        before = path.stat()
        data = bytearray(path.read_bytes())
        digits = [i for i, b in enumerate(data) if chr(b).isdigit()]
        if not digits:
            return
        at = digits[index % len(digits)]
        data[at] = ord(str((int(chr(data[at])) + 1) % 10))
        path.write_bytes(bytes(data))
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))

    def _touch(self, slot: str) -> None:
        if self.path(slot).exists():
            os.utime(self.path(slot), ns=(1_000_000_000_000_000_000, 1_000_000_000_000_000_000))

    def _link(self, slot: str, target: str) -> None:
        self._clear(slot)
        self.path(slot).symlink_to(_relative(target, posixpath.dirname(slot)))

    def _remove(self, slot: str) -> None:
        self._clear(slot)

    def _mkdir(self, slot: str) -> None:
        """A directory where a spec was, holding one: named, it is walked."""
        self._clear(slot)
        self.path(slot).mkdir()
        (self.path(slot) / "inner.elastic.yaml").write_text(JOB.format("inner"))

    def _rename(self, slot: str, other: str) -> None:
        if os.path.lexists(self.path(slot)) and slot != other:
            self._clear(other)
            os.replace(self.path(slot), self.path(other))

    def _relink(self, target: str) -> None:
        self.path("current").unlink()
        self.path("current").symlink_to(target)

    def _git(self, where: str) -> None:
        git = {"repo": self.repo, "above": self.above, "jobs": self.repo / "jobs"}[where] / ".git"
        if git.exists():
            git.rmdir()
        else:
            git.mkdir()

    def _cwd(self, where: str) -> None:
        self.cwd = where
        self.patch.chdir(self.repo / where)

    def _env(self, value: str | None) -> None:
        if value is None:
            self.patch.delenv(TOGGLE_ENV, raising=False)
        else:
            self.patch.setenv(TOGGLE_ENV, value)

    def _expect(self) -> None:
        """``expected.yaml``: what the stream is now (so that ``--check FILE`` is sometimes clean)."""
        self.capsys.readouterr()
        cli.main(["--no-cache", *self.argv(EXPECTED_FROM)])
        self.path("expected.yaml").write_text(self.capsys.readouterr().out)

    def _outputs(self) -> list[Path]:
        out = self.path("out")
        return sorted(p for p in out.rglob("*") if p.is_file() and not p.is_symlink()) if out.is_dir() else []

    def _drift(self, index: int) -> None:
        """A file elastic-compile wrote, edited by hand: ``--check`` must see it, on a replay too."""
        written = self._outputs()
        if written:
            path = written[index % len(written)]
            path.write_bytes(path.read_bytes() + b"# edited\n")

    def _foreign(self, name: str) -> None:
        """A file of the user's where ``-o`` writes (``alpha``: where a job's directory would go)."""
        path = self.path("out") / name
        if not os.path.lexists(path):
            path.parent.mkdir(exist_ok=True)
            path.write_text("mine\n")

    # ------------------------------------------------------------------ the runs

    def argv(self, words: tuple[str, ...]) -> list[str]:
        return [_relative(w[1:], self.cwd) if w.startswith("@") else w for w in words]

    def run(self, argv: list[str]) -> Outcome:
        self.capsys.readouterr()
        self.compiled.clear()
        code = cli.main(argv)
        out, err = self.capsys.readouterr()
        return Outcome(code, out, err, bool(self.compiled), _disk(self.above))

    def both(self, words: tuple[str, ...]) -> tuple[Outcome, Outcome]:
        """The command line with the cache and then with ``--no-cache``, each on the same state of ``out``."""
        argv = self.argv(words)
        out, saved = self.path("out"), self.top / "saved"
        if os.path.lexists(saved):
            shutil.rmtree(saved)
        if out.is_dir():
            shutil.copytree(out, saved, symlinks=True)
        cached = self.run(argv)
        if out.is_dir():
            shutil.rmtree(out)
        if saved.is_dir():
            shutil.copytree(saved, out, symlinks=True)
        plain = self.run(["--no-cache", *argv])
        self.log.append(f"run in {self.cwd}: {argv} -> {cached.code} ({'compiled' if cached.compiled else 'replayed'})")
        return cached, plain


def _report(box: Sandbox, cached: Outcome, plain: Outcome) -> str:
    lines = ["the run with the cache differs from the run without it", *box.log]
    for name, a, b in (
        ("exit", cached.code, plain.code),
        ("stdout", cached.out, plain.out),
        ("stderr", cached.err, plain.err),
    ):
        if a != b:
            lines += [f"{name} with the cache:", str(a), f"{name} without:", str(b)]
    for rel in sorted(set(cached.disk) | set(plain.disk)):
        if cached.disk.get(rel) != plain.disk.get(rel):
            lines.append(f"on disk, {rel}: {cached.disk.get(rel)!r} with the cache, {plain.disk.get(rel)!r} without")
    return "\n".join(lines)


def _play(scenario: Any, box: Sandbox, counts: Counter[str]) -> None:
    texts, setup, plan = scenario
    box.build(texts)
    for change in setup:
        box.apply(change)
    command, stored = 0, False
    for change, chosen in plan:
        box.apply(change)
        again = chosen is None or chosen == command
        command = command if chosen is None else chosen
        cached, plain = box.both(COMMANDS[command])
        for outcome in (cached, plain):
            assert outcome.code != cli.EXIT_INTERNAL, "\n".join([*box.log, outcome.err])
            assert "--no-cache" not in outcome.out + outcome.err
        assert plain.compiled
        assert cached.seen() == plain.seen(), _report(box, cached, plain)
        # The same command line on the same tree, right after a run that stored (or replayed): a replay.
        if stored and again and change == ("nothing",):
            assert not cached.compiled, "\n".join(["compiled again, on unchanged inputs:", *box.log])
        if stored and again and change != ("nothing",):
            counts["probes"] += 1  # a changed tree under a stored run: where a stale replay would show
            counts[f"probe {change[0]}"] += 1
        stored = cached.code in (cli.EXIT_OK, cli.EXIT_DRIFT)
        counts["runs"] += 1
        counts["replays"] += not cached.compiled
        counts[f"exit {cached.code}"] += 1


def test_a_run_with_the_cache_is_the_run_without_it(
    capsys: pytest.CaptureFixture[str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    counts: Counter[str] = Counter()
    scratch = tmp_path_factory.mktemp("fuzz")
    real: Callable[..., int] = cli._compile

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        # The same examples on every run in CI; random ones when asked for more.
        derandomize=not os.environ.get(EXAMPLES_ENV),
        database=None,
        # capsys is shared by the examples on purpose: each run reads what it printed.
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(scenarios)
    @_examples
    def check(scenario: Any) -> None:
        with tempfile.TemporaryDirectory(dir=scratch) as tmp, pytest.MonkeyPatch.context() as patch:
            top = Path(os.path.realpath(tmp))
            compiled: list[bool] = []

            def compile_step(*args: Any, **kwargs: Any) -> int:
                compiled.append(True)  # a replay never gets here
                return real(*args, **kwargs)

            patch.setattr(cli, "_compile", compile_step)
            patch.setenv(cache.DIR_ENV, str(top / "cache" / "elastic-compile"))
            patch.delenv(crdcheck.CRDS_ENV, raising=False)
            patch.delenv(TOGGLE_ENV, raising=False)
            _play(scenario, Sandbox(top, patch, capsys, compiled), counts)

    check()
    if os.environ.get(EXAMPLES_ENV):  # a long run says what it did
        with capsys.disabled():
            print(f"\n{EXAMPLES} examples: {dict(sorted(counts.items()))}")
    # Not vacuous: replays happened (a quarter to a third of the runs), changes under a stored run
    # were tried, and compiles both succeeded and failed.
    assert counts["replays"] >= counts["runs"] // 10, counts
    assert counts["probes"] and counts["exit 0"] and counts["exit 2"], counts
