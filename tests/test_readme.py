"""The README and docs cannot drift: their generated parts are checked against the code."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from elastic_compile.schema.reference import END, START, reference_markdown

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SPEC_DOC = ROOT / "docs" / "spec.md"
REGEN = os.environ.get("ELASTIC_COMPILE_REGEN") == "1"


def _replace_block(text: str, start: str, end: str, body: str) -> str:
    i, j = text.index(start), text.index(end) + len(end)
    return text[:i] + body.rstrip("\n") + text[j:]


def test_opens_with_the_two_commands() -> None:
    head = README.read_text().splitlines()[:40]
    assert any("make demo" in line for line in head) and any("make test" in line for line in head)


def test_stays_a_front_page() -> None:
    """Under 16 KB, with an install section; the reference lives in docs/."""
    assert README.stat().st_size < 16 * 1024
    assert "\n## Install\n" in README.read_text()


def test_spec_reference_is_current() -> None:
    text = SPEC_DOC.read_text()
    fresh = reference_markdown()
    if REGEN:
        SPEC_DOC.write_text(_replace_block(text, START, END, fresh))
        text = SPEC_DOC.read_text()
    assert fresh.strip() in text, "docs/spec.md is stale: ELASTIC_COMPILE_REGEN=1 pytest tests/test_readme.py"


def test_docs_links_stay_inside_the_repository() -> None:
    """Every relative link in the README and docs/ names a file of this repository."""
    for page in [README, *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" in target:
                continue
            resolved = (page.parent / target).resolve()
            assert resolved.is_relative_to(ROOT) and resolved.exists(), f"{page.name}: {target}"


def test_error_example_is_real_output() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "elastic_compile.compiler.cli", "tests/readme/bad.yaml"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2 and result.stdout == ""
    block = "$ elastic-compile tests/readme/bad.yaml\n" + result.stderr
    text = README.read_text()
    if REGEN:
        pattern = re.compile(r"\$ elastic-compile tests/readme/bad\.yaml\n.*?(?=```)", re.S)
        README.write_text(pattern.sub(lambda _: block, text))
        text = README.read_text()
    assert block in text, "README error example is stale: ELASTIC_COMPILE_REGEN=1 pytest tests/test_readme.py"


def test_adopt_example_is_real_output() -> None:
    """The README's before/after of `elastic-compile import` is what the command prints."""
    from elastic_compile.compiler.importer import import_stream

    text = README.read_text()
    blocks = {}
    for marker in ("adopt-before", "adopt-after"):
        start = text.index(f"<!-- {marker} -->\n```yaml\n") + len(f"<!-- {marker} -->\n```yaml\n")
        blocks[marker] = text[start : text.index("```\n", start)]
    source = ROOT / "tests" / "readme" / "handwritten-job.yaml"
    assert blocks["adopt-before"] == source.read_text()
    (imported,) = import_stream(source.read_bytes(), "handwritten-job.yaml")
    assert blocks["adopt-after"] == imported.text
