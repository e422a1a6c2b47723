"""Bad bases: one located line per problem, in the file that has it, through the CLI as a user runs it.

Bases arrive in pull requests like specs: a base outside the working tree, a symbolic link
that leads out, a FIFO, a cycle or an endless chain are refused with one line, never
followed, never printed, and never read past the loader's limits.
"""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path

import pytest
from extends_helpers import JOB, Write
from support.cli import run_cli
from support.summary import without_summary

from elastic_compile.compiler.pipeline import compile_text
from elastic_compile.core import extends
from elastic_compile.core.errors import SpecError
from elastic_compile.core.loader import MAX_EXPANDED_CHARS, MAX_VALUES
from elastic_compile.core.source import MAX_BYTES

SECRET = "s3cr3t-outside-the-tree"


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code, out, err = run_cli(capsys, *args)
    return code, out, without_summary(err)  # these tests read the problems


def lines(err: str) -> list[str]:
    return err.splitlines()


def test_errors_in_a_base_are_located_in_the_base(write: Write, capsys: pytest.CaptureFixture[str]) -> None:
    write(
        {
            "platform/_defaults.elastic.yaml": """
                image: reg/t:1
                max_restarts: -1
                resources:
                  requests: {cpu: 2x}
            """,
            "job.elastic.yaml": "extends: platform/_defaults.elastic.yaml\n" + JOB + "nnodes: 0\n",
        }
    )
    code, out, err = run(capsys, "job.elastic.yaml")
    assert (code, out) == (2, "")
    assert lines(err) == [
        "job.elastic.yaml:4:9: nnodes: expected N or MIN:MAX with 1 <= MIN <= MAX, e.g. 2 or 1:4 (given: 0)",
        "platform/_defaults.elastic.yaml:3:15: max_restarts: must be >= 0 (given: -1)",
        "platform/_defaults.elastic.yaml:5:19: resources.requests.cpu: not a Kubernetes quantity; use a number with "
        "an optional suffix: 500m, 8, 64Gi, 1e3 (given: 2x)",
    ]


def test_a_base_is_a_fragment_that_needs_no_name_and_is_checked_alone(
    write: Write, capsys: pytest.CaptureFixture[str]
) -> None:
    # Nothing is required in a base, and nothing that spans fields is judged there: the
    # sidecar gets its image, and the request its limit, from the specs that extend it.
    write(
        {
            "_team.elastic.yaml": """
                resources: {requests: {gpu: 8}, limits: {gpu: 4}}
                rdzv: {backend: etcd-v2}
                pod_template:
                  spec:
                    containers:
                      - name: log-shipper
                        volumeMounts: [{name: logs, mountPath: /logs}]
                    topologySpreadConstraints:
                      - {topologyKey: topology.kubernetes.io/zone}
            """,
            "_bad.elastic.yaml": "shared_memory: maybe\npod_template: {spec: {nodeSelectr: {a: b}}}\n",
        }
    )
    code, _, err = run(capsys, "_team.elastic.yaml", "_bad.elastic.yaml")
    assert code == 2
    assert lines(err) == [
        "_bad.elastic.yaml:1:16: shared_memory: not a Kubernetes "
        "quantity; use a number with an optional suffix: 500m, 8, 64Gi, 1e3 (given: maybe)",
        "_bad.elastic.yaml:2:23: pod_template.spec.nodeSelectr: unknown field; did you mean nodeSelector? "
        "(given: nodeSelectr)",
    ]


def test_a_base_whose_values_a_spec_completes_compiles(write: Write, capsys: pytest.CaptureFixture[str]) -> None:
    write(
        {
            "_team.elastic.yaml": """
                image: reg/t:1
                resources: {requests: {gpu: 8}}
                pod_template:
                  spec:
                    volumes: [{name: logs, emptyDir: {}}]
                    containers:
                      - name: log-shipper
                        volumeMounts: [{name: logs, mountPath: /logs}]
            """,
            "job.elastic.yaml": "extends: _team.elastic.yaml\n"
            + JOB
            + "pod_template: {spec: {containers: [{name: log-shipper, image: fluent/fluent-bit:3.0}]}}\n",
        }
    )
    assert run(capsys, "job.elastic.yaml", "_team.elastic.yaml")[0] == 0


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        pytest.param(
            {"job.elastic.yaml": "extends: job.elastic.yaml\n" + JOB},
            "job.elastic.yaml:1:10: extends: a cycle of bases: job.elastic.yaml -> job.elastic.yaml "
            "(given: job.elastic.yaml)",
            id="itself",
        ),
        pytest.param(
            {
                "a/_a.elastic.yaml": "extends: ../b/_b.elastic.yaml\n",
                "b/_b.elastic.yaml": "extends: ../a/_a.elastic.yaml\n",
                "job.elastic.yaml": "extends: a/_a.elastic.yaml\n" + JOB,
            },
            "b/_b.elastic.yaml:1:10: extends: a cycle of bases: a/_a.elastic.yaml -> b/_b.elastic.yaml -> "
            "a/_a.elastic.yaml (given: ../a/_a.elastic.yaml)",
            id="two bases",
        ),
        pytest.param(
            {"job.elastic.yaml": "extends: _missing.elastic.yaml\n" + JOB},
            "job.elastic.yaml:1:10: extends: no such file (given: _missing.elastic.yaml)",
            id="missing",
        ),
        pytest.param(
            {"job.elastic.yaml": "extends: ../_outside.elastic.yaml\n" + JOB},
            "job.elastic.yaml:1:10: extends: outside {tree}, where elastic-compile reads bases (see --root) "
            "(given: ../_outside.elastic.yaml)",
            id="outside the tree",
        ),
        pytest.param(
            {"job.elastic.yaml": "extends: /etc/passwd\n" + JOB},
            "job.elastic.yaml:1:10: extends: must be a path relative to this file, so the repository can move "
            "(given: /etc/passwd)",
            id="absolute",
        ),
        pytest.param(
            {"job.elastic.yaml": "extends: [a.yaml, b.yaml]\n" + JOB},
            "job.elastic.yaml:1:10: extends: expected the path of a base spec, relative to this file",
            id="a list",
        ),
        pytest.param(
            {"job.elastic.yaml": "extends: bases\n" + JOB, "bases/x": ""},
            "job.elastic.yaml:1:10: extends: a directory, not a regular file; not read (given: bases)",
            id="a directory",
        ),
        pytest.param(
            {"_base.elastic.yaml": "image: [unclosed\n", "job.elastic.yaml": "extends: _base.elastic.yaml\n" + JOB},
            "_base.elastic.yaml:1:8: yaml: this '[' starts a list that is never closed: YAML reads on to the end of "
            "the file, where it gives up; end the list with ']' on the line it belongs to, or write it in block "
            "style, one entry a line",
            id="bad YAML in the base",
        ),
    ],
)
def test_chain_errors_are_one_located_line(
    write: Write, tree: Path, capsys: pytest.CaptureFixture[str], files: dict[str, str], expected: str
) -> None:
    write(files)
    (tree.parent / "_outside.elastic.yaml").write_text("image: reg/t:1\n")
    code, out, err = run(capsys, "job.elastic.yaml")
    assert (code, out, lines(err)) == (2, "", [expected.format(tree=tree)])


def test_the_chain_is_bounded(write: Write, capsys: pytest.CaptureFixture[str]) -> None:
    # job extends MAX_BASES + 1 bases (_0 ... _8), ok the last MAX_BASES of them.
    chain = {f"_{i}.elastic.yaml": f"extends: _{i + 1}.elastic.yaml\n" for i in range(extends.MAX_BASES)}
    chain[f"_{extends.MAX_BASES}.elastic.yaml"] = "image: reg/t:1\n"
    write(
        {
            **chain,
            "job.elastic.yaml": "extends: _0.elastic.yaml\n" + JOB,
            "ok.elastic.yaml": "extends: _1.elastic.yaml\n" + JOB.replace("job", "ok"),
        }
    )
    code, _, err = run(capsys, "job.elastic.yaml")
    assert (code, lines(err)) == (
        2,
        [f"job.elastic.yaml:1:10: extends: more than {extends.MAX_BASES} bases in one chain (given: _0.elastic.yaml)"],
    )
    # One base nearer, the same files are fine: a chain that is too long is never cached as an error.
    assert run(capsys, "ok.elastic.yaml", "job.elastic.yaml")[2].count("more than") == 1
    assert run(capsys, "ok.elastic.yaml")[0] == 0


def test_the_bytes_of_a_chain_are_bounded(write: Write, tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Each file may hold up to the loader's 1 MiB; their sum is bounded too.
    padding = "# " + "x" * 1000 + "\n"
    big = padding * ((MAX_BYTES - 2000) // len(padding))
    write(
        {
            "_a.elastic.yaml": big + "extends: _b.elastic.yaml\n",
            "_b.elastic.yaml": big + "extends: _c.elastic.yaml\n",
            "_c.elastic.yaml": big + "image: reg/t:1\n",
            "job.elastic.yaml": "extends: _a.elastic.yaml\n" + JOB,
        }
    )
    code, _, err = run(capsys, "job.elastic.yaml")
    line = big.count("\n") + 1
    assert (code, lines(err)) == (
        2,
        [
            f"_a.elastic.yaml:{line}:10: extends: this base and its own bases hold more than {extends.MAX_CHAIN_BYTES} "
            "bytes of YAML together (given: _b.elastic.yaml)"
        ],
    )


def _expanding(chars: int, values: int) -> str:
    """An ignored ``x-`` key expanding to about ``chars`` characters (aliases), or to ``values`` values."""
    if values:
        return "x-bulk: [" + ", ".join(["0"] * values) + "]\n"
    text = "y" * 40_000
    return f"x-text: &t {text}\nx-bulk: [" + ", ".join(["*t"] * (chars // len(text))) + "]\n"


@pytest.mark.parametrize(
    ("half", "bound"),
    [
        # Each file expands to a little over half the loader's bound, so each alone is accepted.
        (_expanding(MAX_EXPANDED_CHARS // 2 + 100_000, 0), f"{MAX_EXPANDED_CHARS} characters"),
        (_expanding(0, MAX_VALUES // 2 + 100), f"{MAX_VALUES} values"),
    ],
    ids=["characters", "values"],
)
def test_a_spec_merged_with_its_bases_is_held_to_the_bounds_of_one_document(
    write: Write, capsys: pytest.CaptureFixture[str], half: str, bound: str
) -> None:
    # The loader bounds what one file expands to (aliases counted again); a base's expansion
    # counts against the spec that extends it, so a chain cannot multiply the bound.
    assert len(half.encode()) < MAX_BYTES // 2
    write(
        {
            "_base.elastic.yaml": "image: reg/t:1\n" + half,
            "_twice.elastic.yaml": "extends: _base.elastic.yaml\n" + half,
            "job.elastic.yaml": "extends: _base.elastic.yaml\n" + JOB + half,
            "deep.elastic.yaml": "extends: _twice.elastic.yaml\n" + JOB.replace("job", "deep"),
            "lean.elastic.yaml": "extends: _base.elastic.yaml\n" + JOB.replace("job", "lean"),
            "alone.elastic.yaml": "image: reg/t:1\n" + JOB.replace("job", "alone") + half,
        }
    )
    message = f"extends: with its bases, the document expands to more than {bound} (an alias bomb?)"
    code, _, err = run(capsys, "job.elastic.yaml", "deep.elastic.yaml")
    assert (code, lines(err)) == (
        2,
        [
            f"job.elastic.yaml:1:10: {message} (given: _base.elastic.yaml)",
            f"_twice.elastic.yaml:1:10: {message} (given: _base.elastic.yaml)",  # for deep.elastic.yaml
        ],
    )
    # Each file alone is within the bounds, and so is a spec that adds little to its base.
    code, out, err = run(capsys, "lean.elastic.yaml", "alone.elastic.yaml")
    assert (code, err, out.count("kind: PyTorchJob")) == (0, "", 2)


def test_a_symbolic_link_that_leads_out_is_refused_unread(
    write: Write, tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outside = tree.parent / "elsewhere"
    outside.mkdir()
    (outside / "_secret.elastic.yaml").write_text(f"image: {SECRET}\nnnodes: {SECRET}\n")
    os.symlink(outside / "_secret.elastic.yaml", tree / "_base.elastic.yaml")
    os.symlink(outside, tree / "shared")
    write(
        {
            "a.elastic.yaml": "extends: _base.elastic.yaml\n" + JOB,
            "b.elastic.yaml": "extends: shared/_secret.elastic.yaml\n" + JOB.replace("job", "b"),
        }
    )
    code, out, err = run(capsys, "a.elastic.yaml", "b.elastic.yaml")
    assert (code, out) == (2, "")
    assert lines(err) == [
        f"a.elastic.yaml:1:10: extends: a symbolic link that leads outside {tree}; not followed "
        "(given: _base.elastic.yaml)",
        f"b.elastic.yaml:1:10: extends: a symbolic link that leads outside {tree}; not followed "
        "(given: shared/_secret.elastic.yaml)",
    ]
    assert SECRET not in err and str(outside) not in err


def test_a_symbolic_link_inside_the_tree_is_read_where_it_leads(
    write: Write, tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(
        {
            "platform/_defaults.elastic.yaml": "image: reg/t:1\n",
            "job.elastic.yaml": "extends: _base.elastic.yaml\n" + JOB,
        }
    )
    os.symlink("platform/_defaults.elastic.yaml", tree / "_base.elastic.yaml")
    assert run(capsys, "job.elastic.yaml")[0] == 0


GOES_UP = (
    "extends: goes up (..) out of a symbolic link, so the system reaches another file than this path names "
    "as written; write the path without going up through a link (given: ../_b.elastic.yaml)"
)


def test_going_up_out_of_a_linked_directory_to_another_file_is_refused(
    write: Write, tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # u/sub -> ../t/sub stays inside, but u/sub/.. is t for the system and u as written.
    write(
        {
            "t/_b.elastic.yaml": "image: reg/t:1\n",
            "u/_b.elastic.yaml": "image: reg/u:1\n",
            "t/sub/j.elastic.yaml": "extends: ../_b.elastic.yaml\n" + JOB,
            "u/other/k.elastic.yaml": "extends: ../sub/../_b.elastic.yaml\n" + JOB.replace("job", "k"),
        }
    )
    os.symlink("../t/sub", tree / "u/sub")
    code, out, err = run(capsys, "u/sub/j.elastic.yaml", "u/other/k.elastic.yaml")
    assert (code, out) == (2, "")
    assert lines(err) == [
        f"u/sub/j.elastic.yaml:1:10: {GOES_UP}",
        "u/other/k.elastic.yaml:1:10: " + GOES_UP.replace("../_b", "../sub/../_b"),
    ]
    # Where the link leads, the same spec reads its neighbour; only the way up through the link is refused.
    code, out, err = run(capsys, "t/sub/j.elastic.yaml")
    assert (code, err, out.count("image: reg/t:1")) == (0, "", 1)
    # Both ways reaching one file (u/_b is a link to t/_b) is read as before, and so is ".." over no link.
    os.remove(tree / "u/_b.elastic.yaml")
    os.symlink("../t/_b.elastic.yaml", tree / "u/_b.elastic.yaml")
    code, out, err = run(capsys, "u/sub/j.elastic.yaml", "u/other/k.elastic.yaml")
    assert (code, err, out.count("image: reg/t:1")) == (0, "", 2)


def test_going_up_to_a_base_missing_as_written_is_refused_the_same(
    write: Write, tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The system would find t/_b; as written u/_b does not exist: the same line, not "no such file".
    write({"t/_b.elastic.yaml": "image: reg/t:1\n", "t/sub/j.elastic.yaml": "extends: ../_b.elastic.yaml\n" + JOB})
    (tree / "u").mkdir()
    os.symlink("../t/sub", tree / "u/sub")
    code, out, err = run(capsys, "u/sub/j.elastic.yaml")
    assert (code, out, lines(err)) == (2, "", [f"u/sub/j.elastic.yaml:1:10: {GOES_UP}"])


def test_root_widens_the_boundary(write: Write, tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tree.parent / "_shared.elastic.yaml").write_text("image: reg/t:1\n")
    write({"job.elastic.yaml": "extends: ../_shared.elastic.yaml\n" + JOB})
    assert run(capsys, "job.elastic.yaml")[0] == 2
    assert run(capsys, "--root", str(tree.parent), "job.elastic.yaml")[0] == 0


def test_a_fifo_base_is_refused_without_blocking(write: Write, tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    os.mkfifo(tree / "_base.elastic.yaml")
    write({"job.elastic.yaml": "extends: _base.elastic.yaml\n" + JOB})
    code, _, err = run(capsys, "job.elastic.yaml")
    assert (code, lines(err)) == (
        2,
        ["job.elastic.yaml:1:10: extends: a special file, not a regular file; not read (given: _base.elastic.yaml)"],
    )


def test_a_base_larger_than_the_limit_is_not_read_past_it(
    write: Write, tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tree / "_big.elastic.yaml").write_text("# " + "x" * MAX_BYTES + "\n")
    write({"job.elastic.yaml": "extends: _big.elastic.yaml\n" + JOB})
    code, _, err = run(capsys, "job.elastic.yaml")
    assert (code, lines(err)) == (2, [f"_big.elastic.yaml:1:1: spec: the file is larger than {MAX_BYTES} bytes"])


def test_a_spec_without_a_file_cannot_extend(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tree: Path
) -> None:
    text = "extends: _base.elastic.yaml\n" + JOB
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
    code, _, err = run(capsys, "-")
    assert (code, lines(err)) == (
        2,
        [
            "<stdin>:1:10: extends: a spec that is not read from a file cannot extend one (its base is found "
            "relative to the spec's file); name the file instead (given: _base.elastic.yaml)"
        ],
    )
    with pytest.raises(SpecError):
        compile_text(text)
