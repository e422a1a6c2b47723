"""Every shell block and YAML example of the README and docs/ runs here as it is written.

The blocks are read from the Markdown files themselves (no copy to fall out of date):

* a block whose lines start with ``$ `` is a terminal session: its commands run in order in
  one bash, in a scratch copy of the repository, and what each prints (stdout and stderr,
  as a terminal shows them) must be the lines the doc shows under it, when it shows any;
* in a ``sh`` block, every ``elastic-compile`` line runs the same way and must exit 0
  (``make``, ``pip`` and the like are named there for the reader: they are counted, not run);
* a ``python`` block runs as a module (it defines a task; nothing calls it);
* a ``yaml`` block must parse; one whose first line names a file of the repository
  (``# examples/ddp-2x8-gpu.yaml``) must be that file, and one that is a whole spec
  (``name``, ``image``) must compile.

A line ``<!-- docs-test: cd DIR -->`` before a block runs it in DIR (a path of the
repository), where the doc's words (``teams``, ``elastic.yaml``) name real files; a shown
output with a line ``...`` is an excerpt: its other lines must be printed, in that order.

A block that cannot run here says so in the doc, on the line before it:
``<!-- docs-test: skip: REASON -->``. ``test_counts`` prints how many blocks of each kind
ran (``pytest -s tests/test_docs_run.py -k counts``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from support import docs

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BIN = Path(sys.executable).parent
FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.S | re.M)
SKIP = re.compile(r"<!-- docs-test: skip: ([^>]+) -->\n\Z")
CD = re.compile(r"<!-- docs-test: cd ([^ >]+) -->\n\Z")
#: What a session's command prints before its output: a line no doc holds.
MARK = "\x1eDOCS-TEST-COMMAND\x1e"
#: Copied into the scratch directory: every file a documented command names.
COPIED = ("examples", "tests/readme", "elastic.schema.json")


@dataclass(frozen=True)
class Block:
    """One fenced block of a page."""

    page: Path
    line: int  # of the opening fence, 1-based
    lang: str
    body: str
    skip: str | None  # the reason the doc gives for not running it
    cd: str  # where its commands run, from the repository's root (the doc's ``docs-test: cd``)

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def kind(self) -> str:
        """``session``, ``sh``, ``yaml``, ``python`` or ``other`` (text, Dockerfile, JSON: read, not run)."""
        if self.body.startswith("$ "):
            return "session"
        if self.lang in ("sh", "bash", "console", "shell"):
            return "sh"
        if self.lang in ("yaml", "python"):
            return self.lang
        return "other"


def blocks() -> list[Block]:
    out = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for m in FENCE.finditer(text):
            skip, cd = SKIP.search(text, 0, m.start()), CD.search(text, 0, m.start())
            line = text.count("\n", 0, m.start()) + 1
            out.append(
                Block(page, line, m.group(1), m.group(2), skip.group(1) if skip else None, cd.group(1) if cd else ".")
            )
    return out


BLOCKS = blocks()


def _ids(kind: str) -> list[Block]:
    return [b for b in BLOCKS if b.kind == kind]


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    """A copy of the repository's files that the documented commands read, to write into freely."""
    for name in COPIED:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, tmp_path / name)
    (tmp_path / ".git").mkdir()  # the working tree's root, as in a clone: -o stays inside it
    return tmp_path


def _bash(script: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "COLUMNS": "100"}
    env.pop("GITHUB_ACTIONS", None)
    return subprocess.run(
        ["bash", "-c", "exec 2>&1\n" + script],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def _session(body: str) -> list[tuple[str, str | None]]:
    """A session's commands, each with the output the doc shows (None: it shows none)."""
    steps: list[tuple[str, list[str]]] = []
    for line in body.splitlines(keepends=True):
        if line.startswith("$ "):
            steps.append((line[2:].rstrip("\n"), []))
        else:
            steps[-1][1].append(line)
    return [(command, "".join(shown) if shown else None) for command, shown in steps]


@pytest.mark.parametrize("block", _ids("session"), ids=lambda b: b.where)
def test_session_prints_what_the_doc_shows(block: Block, scratch: Path) -> None:
    if block.skip:
        pytest.skip(block.skip)
    steps = _session(block.body)
    # the mark between commands keeps $? the previous command's (the docs show `echo $?`)
    script = "rc=0\n" + "".join(f"printf '%s\\n' '{MARK}'; (exit $rc)\n{command}\nrc=$?\n" for command, _ in steps)
    result = _bash(script, scratch / block.cd)
    printed = result.stdout.split(MARK + "\n")[1:]
    assert len(printed) == len(steps), result.stdout
    for (command, shown), actual in zip(steps, printed, strict=True):
        if shown is not None and docs.is_excerpt(shown):
            missing = docs.not_printed(shown, actual)
            assert not missing, f"{block.where}: $ {command}: not printed (in this order): {missing}"
        elif shown is not None:
            assert actual == shown, f"{block.where}: $ {command}"


def _commands(body: str) -> list[str]:
    """The elastic-compile lines of a sh block (a trailing backslash continues a line)."""
    joined = re.sub(r"\\\n\s*", " ", body)
    return [line for line in joined.splitlines() if line.startswith("elastic-compile ")]


@pytest.mark.parametrize("block", [b for b in _ids("sh") if _commands(b.body)], ids=lambda b: b.where)
def test_sh_block_runs(block: Block, scratch: Path) -> None:
    if block.skip:
        pytest.skip(block.skip)
    for command in _commands(block.body):
        result = _bash(command, scratch / block.cd)
        assert result.returncode == 0, f"{block.where}: {command}\n{result.stdout[-3000:]}"


def _named_file(block: Block) -> Path | None:
    first = block.body.split("\n", 1)[0]
    if not first.startswith("# "):
        return None
    path = ROOT / first[2:].split()[0]
    return path if path.is_file() and path.is_relative_to(ROOT) else None


def _without_leading_comments(text: str) -> str:
    lines = text.splitlines(keepends=True)
    while lines and lines[0].startswith("#"):
        lines.pop(0)
    return "".join(lines)


def _is_spec(document: object) -> bool:
    return isinstance(document, dict) and "name" in document and "image" in document and "apiVersion" not in document


@pytest.mark.parametrize("block", _ids("yaml"), ids=lambda b: b.where)
def test_yaml_example(block: Block, scratch: Path) -> None:
    if block.skip:
        pytest.skip(block.skip)
    documents = list(yaml.safe_load_all(block.body))
    named = _named_file(block)
    if named is not None:
        assert _without_leading_comments(block.body) == _without_leading_comments(named.read_text()), (
            f"{block.where} shows {named.relative_to(ROOT)}, which now differs"
        )
    if len(documents) == 1 and _is_spec(documents[0]):
        spec = scratch / "doc-example.elastic.yaml"
        spec.write_text(block.body)
        result = _bash(f"elastic-compile {spec.name} > /dev/null", scratch)
        assert result.returncode == 0, f"{block.where}: the spec does not compile:\n{result.stdout}"


@pytest.mark.parametrize("block", _ids("python"), ids=lambda b: b.where)
def test_python_example_runs(block: Block, scratch: Path) -> None:
    """A Python example runs as a module (its definitions: a task is defined, not called)."""
    if block.skip:
        pytest.skip(block.skip)
    module = scratch / block.cd / "doc_example.py"
    module.write_text(block.body)
    result = subprocess.run(
        [sys.executable, module.name], cwd=module.parent, capture_output=True, text=True, timeout=240, check=False
    )
    assert result.returncode == 0, f"{block.where}:\n{result.stderr[-3000:]}"


def test_counts() -> None:
    """How many blocks the docs hold and how many of them run (printed with -s, for the issue's note)."""
    ran = Counter(b.kind for b in BLOCKS if not b.skip and (b.kind != "sh" or _commands(b.body)) and b.kind != "other")
    skipped = sum(1 for b in BLOCKS if b.skip)
    read = len(BLOCKS) - sum(ran.values()) - skipped
    print(
        f"\ndocs blocks: {len(BLOCKS)}; run or checked: {sum(ran.values())} ("
        + ", ".join(f"{kind} {n}" for kind, n in sorted(ran.items()))
        + f"); skipped with a reason in the doc: {skipped}; read only (output shown, placeholders, make, pip): {read}"
    )
    assert ran["session"] > 0 and ran["yaml"] > 0 and ran["sh"] > 0 and ran["python"] > 0
