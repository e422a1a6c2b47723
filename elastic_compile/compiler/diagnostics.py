"""How problems are printed: ``--message-format text|json|github``, grouped warnings, the summary line.

``text`` (the default) is the located line people read, ``file:line:col: field.path: message``.
``json`` is one JSON object per line (JSON Lines) that a program reads, in a versioned shape
(:data:`JSON_VERSION`, docs/lints.md lists the fields); ``github`` is GitHub Actions' workflow
commands (``::error file=...,line=...,col=...::message``), which put each problem on the
pull request's line. The name and the three values are cargo's.

Problems go where the command has always printed them (compile errors and lints to stderr,
doctor's findings to stdout); GitHub's runner reads workflow commands from both streams.

Big runs: in ``text``, a lint that fires in more than :data:`GROUP_AFTER` places is one line
with its count and the first places (``json`` and ``github`` list each one: a program and the
pull request want every line), and a run of several specs or with ``-o`` ends with one summary
line (``text`` and ``github``; a JSON reader counts the objects).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Sequence
from typing import Final, TextIO

from elastic_compile.core.errors import Problem, printable, show_given

#: The values of ``--message-format``.
FORMATS: Final = ("text", "json", "github")
#: The version of the JSON object's shape; a new field keeps it, a changed or removed one bumps it.
JSON_VERSION: Final = 1
#: A lint code that fires in more places than this prints as one grouped line (``text`` only).
GROUP_AFTER: Final = 3
#: Places named in a grouped line.
GROUP_SHOWN: Final = 3
#: The file a usage error is reported against (no file of the user's).
USAGE_FILE: Final = "elastic-compile"


def wanted(argv: Sequence[str]) -> str:
    """The ``--message-format`` ``argv`` asks for (``text`` when none or an unknown one).

    Read before the arguments are parsed, so that a usage error is reported in that format.
    """
    chosen = "text"
    for i, word in enumerate(argv):
        if word == "--":
            break
        if word.startswith("--message-format="):
            chosen = word.partition("=")[2]
        elif word == "--message-format" and i + 1 < len(argv):
            chosen = argv[i + 1]
    return chosen if chosen in FORMATS else "text"


def _message(problem: Problem) -> str:
    """The problem's words without what the JSON object carries in fields of its own."""
    text = problem.shown_message
    for prefix in (f"{problem.severity} {problem.code}: ", f"{problem.code} "):
        if problem.code and text.startswith(prefix):
            text = text[len(prefix) :]
            break
    else:
        if problem.severity != "error" and text.startswith(f"{problem.severity}: "):  # import's notes
            text = text[len(problem.severity) + 2 :]
    if problem.given is not None:
        text += f" (given: {show_given(problem.given)})"
    return text


def normal_path(path: str) -> str:
    """``path`` as GitHub and programs match it: no ``./``, no ``a/../``, no doubled ``/``.

    ``elastic-compile .`` finds ``./job.elastic.yaml``; GitHub drops an annotation whose path
    is not the repository's own spelling of it.
    """
    return os.path.normpath(path) if path else path


#: A lone surrogate: a byte of a file name that is not UTF-8, as Python decodes it (surrogateescape).
#: Compiled by ``re`` when ``--message-format json`` first needs it.
_SURROGATE: Final = "[\ud800-\udfff]"


def json_line(obj: object) -> str:
    """``obj`` as one line of JSON that is valid UTF-8 whatever the strings hold.

    A file name that is not UTF-8 (``bad\xff.yaml``) reaches us as a string with a lone
    surrogate (``bad\udcff.yaml``), which no UTF-8 stream can carry: it is written as its
    JSON escape (``"bad\\udcff.yaml"``), the same six characters ``text`` shows. A JSON reader
    in Python gets the surrogate back, and ``os.fsencode`` the original bytes.
    """
    text = json.dumps(obj, ensure_ascii=False)
    return re.sub(_SURROGATE, lambda m: f"\\u{ord(m.group()):04x}", text)


def record(problem: Problem) -> dict[str, object]:
    """The JSON object of one problem (version :data:`JSON_VERSION`)."""
    located = problem.file != USAGE_FILE or problem.line > 0
    usage = problem.path == "usage"
    return {
        "version": JSON_VERSION,
        "severity": problem.severity,
        "code": "usage" if usage else problem.code,
        "file": normal_path(problem.file) if located else None,
        "line": problem.line if located else None,
        "column": problem.col if located else None,
        "field": None if usage or not located or problem.path == "status" else problem.shown_path,
        "message": _message(problem),
    }


def _escape_data(text: str) -> str:
    # GitHub's workflow-command encoding (actions/toolkit, packages/core/src/command.ts escapeData).
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    # ... and escapeProperty: a property value also ends at ':' and ','.
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def github_line(problem: Problem) -> str:
    """One workflow command: ``::error file=F,line=L,col=C,title=CODE::field: message``."""
    command = {"error": "error", "warning": "warning"}.get(problem.severity, "notice")
    record_ = record(problem)
    properties = []
    if record_["file"] is not None:
        properties += [f"file={_escape_property(str(record_['file']))}", f"line={problem.line}", f"col={problem.col}"]
    if record_["code"] is not None:
        properties.append(f"title={_escape_property(str(record_['code']))}")
    words = _message(problem) if record_["field"] is None else f"{problem.shown_path}: {_message(problem)}"
    head = f"::{command} {','.join(properties)}" if properties else f"::{command}"
    return printable(f"{head}::{_escape_data(words)}")


def text_line(problem: Problem) -> str:
    """The located line people read; one of no file as ``elastic-compile: error: ...``."""
    if problem.file == USAGE_FILE and problem.line == 0:
        label = "" if problem.path == "status" else f"{problem.severity}: "
        return printable(f"elastic-compile: {label}{problem.shown_message}")
    return str(problem)


class Reporter:
    """Prints problems in one format, keeps the counts for the summary, groups repeated lints."""

    __slots__ = ("_held", "errors", "format", "stream", "warnings")

    def __init__(self, format: str = "text", stream: TextIO | None = None) -> None:
        self.format = format
        self.stream = stream  # None: sys.stderr at the time of printing
        self.errors = 0
        self.warnings = 0
        self._held: list[Problem] = []

    def _out(self) -> TextIO:
        import sys

        return self.stream if self.stream is not None else sys.stderr

    def problem(self, problem: Problem, *, stream: TextIO | None = None) -> None:
        """Print ``problem`` now (``stream``: another one than the reporter's)."""
        if problem.severity == "error":
            self.errors += 1
        elif problem.severity == "warning":
            self.warnings += 1
        out = stream if stream is not None else self._out()
        if self.format == "json":
            print(json_line(record(problem)), file=out)
        elif self.format == "github":
            print(github_line(problem), file=out)
        else:
            print(text_line(problem), file=out)

    def problems(self, problems: Iterable[Problem]) -> None:
        """Print each of ``problems``."""
        for problem in problems:
            self.problem(problem)

    def error(self, message: str, code: str | None = None) -> None:
        """An error that belongs to no file (a directory that cannot be written, a bug's one line)."""
        self.problem(Problem(USAGE_FILE, 0, 0, "", message, code=code))

    def note(self, message: str) -> None:
        """A note that belongs to no file (``elastic-compile: note: ...`` in ``text``)."""
        self.problem(Problem(USAGE_FILE, 0, 0, "", message, severity="note"))

    def status(self, message: str, *, severity: str, code: str) -> None:
        """The run's outcome in words (``elastic-compile: MESSAGE`` in ``text``), e.g. stale files."""
        self.problem(Problem(USAGE_FILE, 0, 0, "status", message, code=code, severity=severity))

    def lint(self, problem: Problem) -> None:
        """A lint: held until :meth:`flush_lints`, which groups repeated codes in ``text``."""
        self._held.append(problem)

    def flush_lints(self) -> None:
        """Print the held lints: each one, or in ``text`` one line per code that fired too often."""
        held, self._held = self._held, []
        if self.format != "text":
            self.problems(held)
            return
        by_code: dict[str | None, list[Problem]] = {}
        for problem in held:
            by_code.setdefault(problem.code, []).append(problem)
        grouped: set[str] = set()
        for problem in held:
            same = by_code[problem.code]
            # A lint under --strict is an error: 300 of them group as 300 warnings do.
            if problem.code is None or problem.severity not in ("warning", "error") or len(same) <= GROUP_AFTER:
                self.problem(problem)
            elif problem.code not in grouped:
                grouped.add(problem.code)
                self._group(problem.code, same)

    def _group(self, code: str, same: Sequence[Problem]) -> None:
        from elastic_compile.compiler.lint import RULES

        severity = same[0].severity
        if severity == "error":
            self.errors += len(same)
        else:
            self.warnings += len(same)
        files = len({p.file for p in same})
        places = ", ".join(f"{p.file}:{p.line}:{p.col}" for p in same[:GROUP_SHOWN])
        more = f" and {len(same) - GROUP_SHOWN} more" if len(same) > GROUP_SHOWN else ""
        rule = RULES.get(code)
        why = f"; {rule.why}" if rule is not None else ""
        print(
            printable(
                f"elastic-compile: {severity} {code}: {len(same)} times in {counted(files, 'file')}: "
                f"{places}{more}{why} (--message-format json lists each)"
            ),
            file=self._out(),
        )

    def summary(self, text: str) -> None:
        """The run's last line (``text`` and ``github``; a JSON reader counts objects instead)."""
        if self.format != "json":
            print(f"elastic-compile: {text}", file=self._out())


def counted(n: int, word: str) -> str:
    """``1 spec``, ``2 specs``."""
    return f"{n} {word}" + ("" if n == 1 else "s")


#: Progress shows once a run has taken this long (seconds): a quick run never flickers.
PROGRESS_AFTER: float = 1.0
#: At most one progress update per this many seconds: a terminal is slower than compiling.
_PROGRESS_EVERY: Final = 0.1


class Progress:
    """``compiling 120/500 specs`` on one line of a terminal's stderr, erased when the run ends.

    Shown only when stderr is a terminal, the format is ``text``, there is more than one spec
    and the run has taken :data:`PROGRESS_AFTER` seconds; it never shows a time (the output
    stays the same from run to run), and a pipe or a file never gets it.
    """

    def __init__(self, total: int, *, fmt: str = "text", stream: TextIO | None = None) -> None:
        """``total``: the specs to compile; ``stream``: stderr unless given."""
        import sys
        import time

        self.total = total
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = fmt == "text" and total > 1 and _is_terminal(self.stream)
        self.start = time.monotonic()
        self.last = 0.0
        self.shown = False

    def step(self, done: int) -> None:
        """``done`` specs are compiled."""
        if not self.enabled:
            return
        import time

        now = time.monotonic()
        if now - self.start < PROGRESS_AFTER or (self.shown and now - self.last < _PROGRESS_EVERY):
            return
        self.last = now
        self.shown = True
        self.stream.write(f"\relastic-compile: compiling {done}/{self.total} specs\x1b[K")
        self.stream.flush()

    def clear(self) -> None:
        """Erase the progress line, before anything else is printed."""
        if self.shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self.shown = False


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed, or no descriptor
        return False
