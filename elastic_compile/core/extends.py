"""``extends: PATH``: a spec merged onto its chain of bases, each read once and only inside the boundary.

A spec names one base, relative to its own file; a base may extend another. The chain is
merged from the last base to the spec with :func:`elastic_compile.core.merge.merge`, so
every value keeps the file, line and column it was written at.

Bases arrive in pull requests like specs, so reading them is confined as ``-o`` is
(:mod:`elastic_compile.core.safefs`): a base must be inside the boundary (``--root``, by
default the git working tree), as written and once every symbolic link on its path is
resolved; a link that leads out is refused with one located line, and its target is never
opened or printed. A ``..`` that goes up out of a linked directory, where the system reaches
another file than the path names as written, is refused too. The file itself is opened
without following a link, relative to its directory's descriptor, only when it is a regular
file, and read up to the loader's limit.
A chain holds at most :data:`MAX_BASES` bases and :data:`MAX_CHAIN_BYTES` of YAML
together, and a spec merged with its bases expands to no more values and characters than
the loader allows one document (aliases counted in every file); a cycle, a missing file and
a path that is not relative are located errors.

One :class:`Resolver` serves a whole run: a base shared by 500 specs is read, checked and
merged with its own bases once.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final, NamedTuple

from elastic_compile.core import safefs
from elastic_compile.core.errors import Problem, SpecError
from elastic_compile.core.loader import Loaded, expansion_problem, load_text
from elastic_compile.core.merge import Rules, merge, strip
from elastic_compile.core.source import MAX_BYTES, read_input

#: The key naming a spec's base.
KEY: Final = "extends"
#: Bases in one chain, at most: platform defaults, a team's base and a variant need three.
MAX_BASES: Final = 8
#: The YAML of one chain's bases together, at most (each file is also held to the loader's 1 MiB).
MAX_CHAIN_BYTES: Final = 2 * MAX_BYTES

#: Checks a base's own values as a fragment of a spec (the schema's, given by the compiler).
Check = Callable[[Loaded], list[Problem]]


class _Base(NamedTuple):
    """A base merged with its own chain; ``loaded`` is None when the chain cannot be built.

    ``unreadable`` says why the file itself cannot be read: that is located at each
    ``extends:`` naming it, while the problems of its content are located in the base.
    """

    loaded: Loaded | None
    problems: tuple[Problem, ...]
    depth: int = 0  # bases in the chain from this one down
    size: int = 0  # their bytes
    unreadable: str | None = None


#: The bases being resolved, from the spec: (resolved path, path as shown).
_Stack = tuple[tuple[str, str], ...]


def _no_check(loaded: Loaded) -> list[Problem]:
    return []


def _dedupe(problems: Sequence[Problem]) -> list[Problem]:
    return list(dict.fromkeys(problems))


def refuse(loaded: Loaded) -> None:
    """Raise a located error when ``loaded`` (text without a file: stdin, a string) names a base."""
    if isinstance(loaded.data, dict) and KEY in loaded.data:
        raise SpecError(
            [
                loaded.problem(
                    (KEY,),
                    "a spec that is not read from a file cannot extend one (its base is found relative to "
                    "the spec's file); name the file instead",
                )
            ]
        )


class Resolver:
    """Specs with their bases, for one run (see the module docstring)."""

    def __init__(self, boundary: safefs.Boundary | Path, rules: Rules, check: Check = _no_check) -> None:
        """``boundary``: where bases may be read; ``rules``: lists merged by key; ``check``: a base's fragment check."""
        self.boundary = boundary if isinstance(boundary, safefs.Boundary) else safefs.Boundary(boundary)
        self.rules, self.check = rules, check
        self._bases: dict[str, _Base] = {}

    def _named(self, path: str | Path) -> Loaded:
        raw, file = read_input(path, boundary=self.boundary.root)
        return load_text(raw, file)

    def load(self, path: str | Path) -> tuple[Loaded, list[Problem]]:
        """The spec at ``path`` merged onto its bases, and the problems found in them.

        Raises ``SpecError`` when the spec or its chain cannot be read or merged. The
        problems returned are the bases' own (their fragment checks, the directives of the
        files that extend): the caller validates the merged spec and reports both.
        """
        loaded = self._named(path)
        if str(path) == "-":
            refuse(loaded)
            return loaded, []
        real = os.path.realpath(path)  # the chain's cycles are found by resolved paths
        try:
            merged, problems, _ = self._extend(loaded, ((real, str(path)),))
        except _TooDeep as e:
            raise SpecError([self._at(loaded, str(e))]) from e
        return merged, _dedupe(problems)

    def base_problems(self, path: str | Path) -> list[Problem]:
        """Every problem of the base file at ``path`` on its own: its chain's, and its values as a fragment."""
        real = os.path.realpath(path)
        base = self._bases.get(real)
        if base is None:
            try:
                loaded = self._named(path)
            except SpecError as e:
                return list(e.problems)
            try:
                base = self._bases[real] = self._resolve(loaded, ((real, str(path)),))
            except _TooDeep as e:
                return [self._at(loaded, str(e))]
        return list(base.problems)

    # ------------------------------------------------------------------ the chain

    def _extend(self, loaded: Loaded, stack: _Stack) -> tuple[Loaded, list[Problem], _Base | None]:
        """``loaded`` (the last file of ``stack``) merged onto its base's chain; the problems; the base."""
        if not isinstance(loaded.data, dict) or KEY not in loaded.data:
            return loaded, [], None
        if len(stack) > MAX_BASES:
            raise _TooDeep(f"more than {MAX_BASES} bases in one chain")
        real, shown = self._target(loaded, stack[-1][1])
        reals = [r for r, _ in stack]
        if real in reals:
            cycle = [name for _, name in stack[reals.index(real) :]]
            raise SpecError([self._at(loaded, "a cycle of bases: " + " -> ".join([*cycle, cycle[0]]))])
        base = self._bases.get(real)
        if base is None:
            base = self._bases[real] = self._read(real, (*stack, (real, shown)))
        if base.unreadable is not None:
            raise SpecError([self._at(loaded, base.unreadable)])
        if base.loaded is None:
            raise SpecError(base.problems)
        if len(stack) - 1 + base.depth > MAX_BASES:
            # Not cached on the way up: the same base may be near enough to another spec.
            raise _TooDeep(f"more than {MAX_BASES} bases in one chain")
        merged, problems = merge(base.loaded, loaded, self.rules)
        too_big = expansion_problem(merged.expanded)
        if too_big is not None:
            # Each file is within the loader's bounds alone; the merged spec is held to them too.
            raise SpecError([self._at(loaded, f"with its bases, {too_big}")])
        return merged, [*base.problems, *problems], base

    def _read(self, real: str, stack: _Stack) -> _Base:
        """The base file at ``real`` (checked to be inside), read and merged."""
        shown = stack[-1][1]
        try:
            raw = self._bytes(real)
        except _Unreadable as e:
            return _Base(None, (), unreadable=str(e))
        try:
            loaded = load_text(raw, shown)
        except SpecError as e:
            return _Base(None, tuple(e.problems))
        return self._resolve(loaded, stack, len(raw))

    def _resolve(self, loaded: Loaded, stack: _Stack, size: int = 0) -> _Base:
        """A base file merged with its own chain, with its problems and its values checked as a fragment."""
        try:
            merged, problems, below = self._extend(loaded, stack)
        except SpecError as e:
            return _Base(None, tuple(e.problems))
        depth = (below.depth if below else 0) + 1
        size += below.size if below else 0
        if size > MAX_CHAIN_BYTES:
            message = f"this base and its own bases hold more than {MAX_CHAIN_BYTES} bytes of YAML together"
            return _Base(None, (self._at(loaded, message),))
        own, directives = strip(loaded, self.rules) if below is not None else (loaded, [])
        problems = [*problems, *directives, *self.check(own)]
        return _Base(merged, tuple(_dedupe(problems)), depth, size)

    # ------------------------------------------------------------------ paths

    @staticmethod
    def _at(loaded: Loaded, message: str) -> Problem:
        return loaded.problem((KEY,), message)

    def _target(self, loaded: Loaded, shown: str) -> tuple[str, str]:
        """The resolved path of the base ``loaded`` (shown as ``shown``) names, and how to show it.

        A located error when it may not be read: not a relative path, outside the boundary as
        written, or once its links are resolved (the link's target is never shown).
        """
        value = loaded.data[KEY]
        if not isinstance(value, str) or not value.strip():
            raise SpecError([self._at(loaded, "expected the path of a base spec, relative to this file")])
        if os.path.isabs(value) or value.startswith("~"):
            raise SpecError([self._at(loaded, "must be a path relative to this file, so the repository can move")])
        base_shown = os.path.normpath(os.path.join(os.path.dirname(shown), value))
        # As written, before anything is normalised: the system resolves each link before the
        # ``..`` after it, where ``absolute`` takes ``..`` away with the name before it.
        joined = os.path.join(os.getcwd(), os.path.dirname(shown), value)
        absolute = Path(os.path.normpath(joined))
        root = self.boundary.root
        if not safefs.inside(absolute, root):
            raise SpecError(
                [self._at(loaded, f"outside {safefs.display(root)}, where elastic-compile reads bases (see --root)")]
            )
        real = os.path.realpath(absolute)
        if not safefs.inside(Path(real), root):
            raise SpecError(
                [self._at(loaded, f"a symbolic link that leads outside {safefs.display(root)}; not followed")]
            )
        if os.pardir in joined.split(os.sep):
            self._through(loaded, joined, real)
        return real, base_shown

    def _through(self, loaded: Loaded, joined: str, real: str) -> None:
        """Refuse a path whose ``..`` goes up out of a symbolic link to another file than as written.

        ``u/sub/../_b.elastic.yaml`` is ``u/_b.elastic.yaml`` as written, but when ``u/sub``
        is a link to ``t/sub`` the system (and ``cat``) reach ``t/_b.elastic.yaml``. Either
        reading would surprise whoever reads the other way, so neither is chosen; where both
        ways lead to the one file, the path is read as before.
        """
        if os.path.realpath(joined) != real:
            raise SpecError(
                [
                    self._at(
                        loaded,
                        "goes up (..) out of a symbolic link, so the system reaches another file than this "
                        "path names as written; write the path without going up through a link",
                    )
                ]
            )

    def _bytes(self, real: str) -> bytes:
        """The base's bytes, reached inside the boundary without following a link (:meth:`safefs.Boundary.read`)."""
        try:
            data = self.boundary.read(Path(real), MAX_BYTES)
        except safefs.NotRegular as e:
            raise _Unreadable(f"{e.kind}, not a regular file; not read") from e
        except safefs.Refused as e:  # a link on the way, swapped after we resolved it
            raise _Unreadable(f"a symbolic link on its way leads outside {safefs.display(self.boundary.root)}") from e
        except OSError as e:
            raise _Unreadable(f"cannot read the file: {e.strerror or e}") from e
        if data is None:
            raise _Unreadable("no such file")
        return data


class _TooDeep(Exception):
    """The chain is longer than :data:`MAX_BASES` (located at the spec's ``extends:``)."""


class _Unreadable(Exception):
    """Why a base file cannot be read (located at each ``extends:`` naming it)."""


__all__ = ["KEY", "MAX_BASES", "MAX_CHAIN_BYTES", "Check", "Resolver", "refuse"]
