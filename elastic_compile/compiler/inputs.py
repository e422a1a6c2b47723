"""What one run compiles: the spec files named, and every spec under the directories named.

A spec is a file named ``elastic.yaml``, ``elastic.yml``, ``<anything>.elastic.yaml`` or
``<anything>.elastic.yml``: the names the pre-commit hook's ``files:`` pattern matches. A
file of that form whose name starts with ``_`` (``_defaults.elastic.yaml``) is a *base*:
it is only extended, never compiled into a job of its own, and is checked as a fragment
(Sass partials and Helm's ``_helpers.tpl`` use the same mark). The name decides, not the
content or the other files: a spec that forgot its ``name`` is reported as such rather
than silently taken for a base, and extending a job from another file never stops it
being a job.

Under a directory, specs are found in a stable order (by path, component by component);
hidden entries (``.git``, ``.venv``) are skipped, symbolic links are never followed (a
link named like a spec that leads outside the boundary is an error, any other one a
note), and the walk is bounded (:data:`MAX_ENTRIES`, :data:`MAX_DEPTH`). A spec named
itself is read where its links lead, unless it is inside the boundary as written and a
link leads it out: then it is an error, and the file is never opened (a pull request can
turn a spec a CI command names into a link to a secret, whose first line an error would
quote). A path outside the boundary as written is the command's own choice, and is read.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from elastic_compile.core import safefs, source
from elastic_compile.core.errors import Problem

#: A spec's file name (the pre-commit hook's ``files:`` pattern, on a name).
SPEC_NAME: Final = re.compile(r"^([^/]+\.)?elastic\.ya?ml$")
#: A base's file name starts with this.
BASE_PREFIX: Final = "_"
#: Entries looked at under one directory named, at most: a hostile tree may hold millions.
MAX_ENTRIES: Final = 100_000
#: Directory levels walked below one directory named, at most.
MAX_DEPTH: Final = 32


def is_spec_name(name: str) -> bool:
    """True for a file name the walk takes as a spec (a job or a base)."""
    return SPEC_NAME.match(name) is not None


def is_base_name(name: str) -> bool:
    """True for a base's file name (``_*.elastic.yaml``): extended by jobs, never a job itself."""
    return name.startswith(BASE_PREFIX) and is_spec_name(name)


class Inputs:
    """The files of one run, in order."""

    __slots__ = ("bases", "directories", "jobs", "notes", "problems")

    def __init__(self) -> None:
        self.jobs: list[str] = []
        self.bases: list[str] = []
        #: True when a directory was named: ``-o`` then gives every job a directory of its own.
        self.directories = False
        self.problems: list[Problem] = []
        self.notes: list[str] = []


def _usage(message: str) -> Problem:
    return Problem("elastic-compile", 0, 0, "usage", message)


class _Walk:
    def __init__(self, inputs: Inputs, boundary: Path) -> None:
        self.inputs, self.boundary = inputs, boundary
        self.seen: set[str] = set()

    def add(self, path: str) -> None:
        real = os.path.realpath(path) if path != "-" else path
        if real in self.seen:
            return
        self.seen.add(real)
        (self.inputs.bases if is_base_name(os.path.basename(path)) else self.inputs.jobs).append(path)

    def directory(self, top: str) -> None:
        found: list[str] = []
        problems = len(self.inputs.problems)
        entries = 0
        stack: list[tuple[str, int]] = [(top, 0)]
        while stack:
            directory, depth = stack.pop()
            try:
                with os.scandir(directory) as it:
                    listed = []
                    for entry in it:
                        entries += 1
                        if entries > MAX_ENTRIES:
                            self.inputs.problems.append(
                                _usage(f"{top}: more than {MAX_ENTRIES} entries to look at; name a smaller directory")
                            )
                            return
                        listed.append(entry)
            except OSError as e:
                self.inputs.problems.append(Problem(directory, 1, 1, "spec", f"cannot list: {e.strerror or e}"))
                continue
            for entry in listed:
                if not entry.name.startswith("."):
                    self.entry(entry, depth, stack, found)
        if not found and len(self.inputs.problems) == problems:
            self.inputs.problems.append(_usage(f"{top}: no specs found (elastic.yaml, *.elastic.yaml)"))
        for path in sorted(found, key=lambda p: Path(p).parts):  # by path, whatever order the disk lists
            self.add(path)

    def entry(self, entry: os.DirEntry[str], depth: int, below: list[tuple[str, int]], found: list[str]) -> None:
        path = entry.path
        if entry.is_symlink():
            if not is_spec_name(entry.name):
                return
            if not safefs.inside(Path(os.path.realpath(path)), self.boundary):
                self.inputs.problems.append(Problem(path, 1, 1, "spec", _leads_out(self.boundary)))
            else:
                self.inputs.notes.append(f"{path}: a symbolic link, not followed; name the file it points to")
            return
        if entry.is_dir(follow_symlinks=False):
            if depth + 1 > MAX_DEPTH:
                self.inputs.problems.append(_usage(f"{path}: more than {MAX_DEPTH} directory levels; not walked"))
            else:
                below.append((path, depth + 1))
            return
        if not is_spec_name(entry.name):
            return
        if not entry.is_file(follow_symlinks=False):
            self.inputs.problems.append(Problem(path, 1, 1, "spec", "not a regular file; not read"))
            return
        found.append(path)


def collect(args: Sequence[str], boundary: Path) -> Inputs:
    """The jobs and bases of ``args`` (files and directories), in order; problems instead of exceptions.

    ``boundary``: links named like a spec that lead outside it are errors.
    """
    inputs = Inputs()
    walk = _Walk(inputs, Path(os.path.realpath(boundary)))
    for arg in args:
        if (refusal := refused(arg, boundary)) is not None:
            # A directory as much as a file: a link out of the tree is refused by name, never walked.
            inputs.problems.append(refusal)
        elif arg != "-" and os.path.isdir(arg):
            inputs.directories = True
            walk.directory(arg)
        else:
            walk.add(arg)
    return inputs


def refused(path: str, boundary: Path) -> Problem | None:
    """Why the file or directory ``path`` named on the command line is not read, or None.

    The one check every command makes (:func:`elastic_compile.core.source.refused`): a path
    inside ``boundary`` as written that a link on its way leads out of is never opened.
    """
    return source.refused(path, boundary)


def _leads_out(root: Path) -> str:
    return source.leads_out(root)


__all__ = [
    "BASE_PREFIX",
    "MAX_DEPTH",
    "MAX_ENTRIES",
    "SPEC_NAME",
    "Inputs",
    "collect",
    "is_base_name",
    "is_spec_name",
    "refused",
]
