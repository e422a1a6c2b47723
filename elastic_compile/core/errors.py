"""The one user-facing error type: located problems, all reported in one run.

Every message has the shape ``file:line:col: field.path: what is wrong (given: X)``;
error text is product surface and is pinned by the
catalogue in ``tests/errors/``.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from elastic_compile.core import secrets

MAX_PROBLEMS = 50  # reported per run; the rest are counted

# Long or multi-line values are shortened in messages so that one problem stays one line.
_GIVEN_MAX = 60


def printable(text: str, keep: str = "") -> str:
    """``text`` with every character a terminal would not print as itself escaped (``\\u202e``).

    Control sequences (ESC, CSI), bidi controls, invisible and line-separator characters
    become escapes, so user text cannot move the cursor, recolour or reorder what a
    terminal shows. Characters in ``keep`` (a tab, say) stay.
    """
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c in keep else c.encode("unicode_escape").decode("ascii") for c in text)


def _looks_empty(char: str) -> bool:
    """A printable character that shows as nothing or as blank (U+3164 HANGUL FILLER, U+2800, a mark)."""
    if char.isascii():
        return False
    if char.isspace() or unicodedata.category(char) in ("Mn", "Me", "Cf", "Co", "Cn"):
        return True
    return unicodedata.name(char, "").endswith((" BLANK", " FILLER"))


def show_given(value: str) -> str:
    """Render a user value for the ``(given: X)`` suffix on a single short line.

    A value that EC107 would judge a secret (:func:`secrets.secret_kind`) is never shown,
    whatever the error or lint: only what it looks like. A value holding a character that
    shows as nothing (``a\u3164b``: a label that reads ``a b``) is shown escaped.
    """
    kind = secrets.secret_kind(value)
    if kind is not None:
        return f"<{kind}, not shown>"
    hidden = not value.isprintable() or (not value.isascii() and any(map(_looks_empty, value)))
    text = value.encode("unicode_escape").decode("ascii") if hidden else value
    if len(text) > _GIVEN_MAX:
        text = text[: _GIVEN_MAX - 3] + "..."
    return text if text.strip() else repr(value)


class Problem(NamedTuple):
    """One located problem in an input file.

    A NamedTuple, not a frozen dataclass: as immutable, equal, hashable and ordered by its
    fields, and about 3 M instructions cheaper to create at import (the dataclass decorator
    compiles each generated method from text).
    """

    file: str
    line: int
    col: int
    path: str
    message: str
    given: str | None = None
    #: The stable code of a lint or doctor rule (``EC102``, ``DR004``); None for an error in the input.
    code: str | None = None
    #: ``error``, ``warning`` or ``note``: what ``--message-format json|github`` reports.
    severity: str = "error"

    def __str__(self) -> str:
        suffix = f" (given: {show_given(self.given)})" if self.given is not None else ""
        # The path and message quote user keys (an annotation name, an unknown field), which
        # may hold bidi or control characters, or be a pasted secret: escaped and hidden here,
        # so every caller prints a safe line.
        return printable(f"{self.file}:{self.line}:{self.col}: {self.shown_path}: {self.shown_message}{suffix}")

    @property
    def shown_path(self) -> str:
        """The field path as printed: a key shaped like a secret shows what it looks like, never itself."""
        return secrets.redact(self.path)

    @property
    def shown_message(self) -> str:
        """The message as printed, a key it quotes hidden as in :attr:`shown_path`."""
        return secrets.redact(self.message)


class SpecError(Exception):
    """Bad input: one or more located problems. The CLI prints them and exits 2."""

    def __init__(self, problems: Iterable[Problem]) -> None:
        listed: list[Problem] = []
        per_file: dict[str, int] = {}
        for problem in problems:
            # 200,000 duplicate keys should not print 200,000 lines: MAX_PROBLEMS per file.
            seen = per_file[problem.file] = per_file.get(problem.file, 0) + 1
            if seen <= MAX_PROBLEMS:
                listed.append(problem)
            elif seen == MAX_PROBLEMS + 1:
                listed.append(Problem(problem.file, problem.line, problem.col, problem.path, "more problems follow"))
        for i, problem in enumerate(listed):
            if problem.message == "more problems follow":
                extra = per_file[problem.file] - MAX_PROBLEMS
                listed[i] = Problem(
                    problem.file,
                    problem.line,
                    problem.col,
                    problem.path,
                    f"and {extra} more problems in this file, not shown",
                )
        self.problems: Sequence[Problem] = tuple(listed)
        super().__init__("\n".join(str(p) for p in self.problems))


class CompileError(Exception):
    """The compiler produced something invalid: a bug in a template or in the compiler.

    Carries the template name (or stage) so that a platform team's custom template is
    named in the message.
    """

    def __init__(self, where: str, message: str) -> None:
        self.where = where
        super().__init__(f"{where}: {message}")


class UnknownTargetError(ValueError):
    """A target name that no registered target has (from Python; the CLI's ``-t`` offers only valid ones).

    The message lists the valid names: ``unknown target 'pytorchjbo'; valid targets:
    pytorchjob, trainjob, podtemplate, flyte, flyte2, all``.
    """

    def __init__(self, name: object, valid: Sequence[str]) -> None:
        self.name = name
        self.valid = tuple(valid)
        what = f"unknown target {name!r}" if name != "" else "no target given"
        super().__init__(f"{what}; valid targets: {', '.join(self.valid)}")
