"""A stream of manifests is bounded per document and in total, separately (red-team item 15).

``doctor`` and ``import`` once held a whole ``kubectl kustomize`` stream to the bound of one
document: 200 compiled PyTorchJobs (480 KB) were "more than 20000 values in the document".
Each document now has the bounds of one spec, and the stream has bounds of its own
(:data:`MAX_STREAM_VALUES`, :data:`MAX_STREAM_EXPANDED_CHARS`), so that many small alias
bombs cannot add up to many times what one document may expand to.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from elastic_compile.compiler.cli import main
from elastic_compile.compiler.pipeline import compile_path
from elastic_compile.core.emit import to_yaml
from elastic_compile.core.errors import SpecError
from elastic_compile.core.loader import (
    MAX_STREAM_DOCUMENTS,
    MAX_STREAM_EXPANDED_CHARS,
    MAX_STREAM_VALUES,
    MAX_VALUES,
    load_stream,
    pure_python,
)

ROOT = Path(__file__).resolve().parents[2]


def _stream(jobs: int) -> str:
    doc = compile_path(ROOT / "examples" / "cpu-ddp.yaml").outputs[0].doc
    text = to_yaml([doc])
    name = doc["metadata"]["name"]
    return "---\n".join(text.replace(f"name: {name}\n", f"name: {name}-{i}\n") for i in range(jobs))


def test_a_stream_of_200_jobs_is_read_document_by_document(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = _stream(200)
    docs = load_stream(text, "stream.yaml")
    assert len(docs) == 200
    values = sum(_count(d.data) for d in docs)
    assert MAX_VALUES < values < MAX_STREAM_VALUES  # beyond one document's bound, within the stream's
    (tmp_path / "stream.yaml").write_text(text)
    assert main(["doctor", str(tmp_path / "stream.yaml")]) in (0, 1)
    assert "more than" not in capsys.readouterr().err


def _count(node: object) -> int:
    if isinstance(node, dict):
        return 1 + sum(1 + _count(v) for v in node.values())
    if isinstance(node, list):
        return 1 + sum(_count(v) for v in node)
    return 1


def _bomb(values: int) -> str:
    """A document just under one document's bound: an anchor of 100 items, aliased."""
    aliases = values // 101
    return "a: &a [" + ", ".join(["1"] * 100) + "]\nb: [" + ", ".join(["*a"] * aliases) + "]\n"


@pytest.mark.parametrize("command", [["doctor"], ["import"]])
def test_documents_that_each_pass_cannot_add_up_past_the_stream_bound(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    one = _bomb(MAX_VALUES - 1000)
    load_stream(one, "one.yaml")  # a single one is within the bounds
    copies = MAX_STREAM_VALUES // (MAX_VALUES - 1000) + 1
    path = tmp_path / "bombs.yaml"
    path.write_text("---\n".join([one] * copies))
    assert main([*command, str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"yaml: the stream expands to more than {MAX_STREAM_VALUES} values" in err, err


def test_characters_are_bounded_per_stream_too() -> None:
    long = "x" * 100_000
    per_doc = (MAX_STREAM_EXPANDED_CHARS // 4) // len(long)  # a quarter of the stream's bound per document
    doc = f"a: &a {long}\nb: [" + ", ".join(["*a"] * per_doc) + "]\n"
    load_stream(doc, "one.yaml")
    with pytest.raises(SpecError, match=f"the stream expands to more than {MAX_STREAM_EXPANDED_CHARS} characters"):
        load_stream("---\n".join([doc] * 5), "five.yaml")


@pytest.mark.parametrize("document", ["{}\n", "\n", "a: 1\n"], ids=["empty-mapping", "empty", "one-key"])
def test_documents_are_counted_before_they_are_composed(document: str) -> None:
    """Red team 2, item 8: 149,000 empty mappings (894 KB) took seconds of CPU to reach the value bound.

    The stream's documents are counted as they start, so the 10,001st stops the read, located
    where it starts, by libyaml's events and by PyYAML's parser alike.
    """
    start = "--- " if document == "{}\n" else "---\n"
    text = "".join(start + document for _ in range(MAX_STREAM_DOCUMENTS + 5))
    messages = []
    for pure in (False, True):
        with pytest.raises(SpecError) as e:
            if pure:
                with pure_python():
                    load_stream(text, "many.yaml")
            else:
                load_stream(text, "many.yaml")
        messages.append([str(p) for p in e.value.problems])
    assert messages[0] == messages[1]
    (message,) = messages[0]
    assert message.endswith(f"yaml: the stream holds more than {MAX_STREAM_DOCUMENTS} documents"), message
    within = "---\n".join(["a: 1\n"] * MAX_STREAM_DOCUMENTS)
    assert len(load_stream(within, "within.yaml")) == MAX_STREAM_DOCUMENTS
