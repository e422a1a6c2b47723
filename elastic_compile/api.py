"""elastic.yaml from Python: load a spec, compile it for one target or several, get plain data back.

For platform tooling (a CI check, a submit service, a repository of many specs) and
notebooks; ``elastic-compile`` compiles through the same functions. docs/api.md has examples::

    from elastic_compile import api

    result = api.compile_file("elastic.yaml", "all")
    for name, doc in result.files.items():
        print(name, doc["kind"])

Every function takes its input first, then the targets, then keyword-only options.
``targets`` is one ``-t`` name (``"trainjob"``), a list of them, ``"all"`` (every target
that takes the spec), or None (the spec's own ``target``). Errors:

* :class:`SpecError` for a bad spec or one a target cannot carry: ``str()`` is one
  ``file:line:col: field.path: what is wrong (given: X)`` line per problem, ``problems``
  the located problems;
* :class:`CompileError` when a custom template fails or renders something wrong;
* :class:`UnknownTargetError` (a ``ValueError``) for a target name no target has; it
  lists the valid names.

Importing this module is cheap: nothing of the compiler is imported until a function is
called. Only the spec models, Jinja2 and PyYAML are imported then: no torch, no kubernetes
client, no flytekit.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from elastic_compile.core.errors import CompileError, Problem, SpecError, UnknownTargetError

if TYPE_CHECKING:
    from elastic_compile.compiler.pipeline import Compiled
    from elastic_compile.core.extends import Resolver
    from elastic_compile.schema import ElasticSpec

#: ``targets="all"``: every target whose ``in_all`` takes the spec (one job per spec).
ALL = "all"

Targets = str | Sequence[str] | None
PathLike = str | os.PathLike[str]

__all__ = [
    "ALL",
    "CompileError",
    "Compiled",
    "Problem",
    "SpecError",
    "UnknownTargetError",
    "bases",
    "compile_file",
    "compile_spec",
    "compile_text",
    "load",
    "load_text",
    "target_names",
]


def target_names() -> tuple[str, ...]:
    """Every target's name, in ``all`` order: the built-in ones and those registered (docs/architecture.md)."""
    from elastic_compile import targets

    return targets.names()


def load(path: PathLike, *, bases: Resolver | None = None) -> ElasticSpec:
    """The validated spec in the file at ``path`` (``"-"``: standard input), merged onto its bases (``extends:``).

    ``bases``: see :func:`bases`. Raises :class:`SpecError` with every problem of the spec
    and its bases.
    """
    from elastic_compile.schema.extends import load_spec

    return load_spec(_path(path), bases)[1]


def load_text(text: str | bytes, *, file: str = "<string>") -> ElasticSpec:
    """The validated spec in ``text``; ``file`` names it in messages. A spec given as text has no bases.

    Raises :class:`SpecError` (``extends:`` is one of its problems: a base is found beside a file).
    """
    from elastic_compile.core import extends
    from elastic_compile.core.loader import load_text as load
    from elastic_compile.schema.validate import validate

    loaded = load(text, file)
    extends.refuse(loaded)
    return validate(loaded)


def compile_file(
    path: PathLike, targets: Targets = None, *, templates: PathLike | None = None, bases: Resolver | None = None
) -> Compiled:
    """Compile the spec file at ``path`` (``"-"``: standard input) for ``targets``.

    ``templates``: a directory of custom templates that replace the built-in ones by name
    (sandboxed: docs/security.md). ``bases``: see :func:`bases`.
    """
    from elastic_compile.compiler.pipeline import compile_spec
    from elastic_compile.schema.extends import load_spec

    names = _names(targets)  # a wrong name is said before the file is read
    loaded, spec = load_spec(_path(path), bases, names)
    return compile_spec(spec, names, _directory(templates), loaded)


def compile_text(
    text: str | bytes, targets: Targets = None, *, file: str = "<string>", templates: PathLike | None = None
) -> Compiled:
    """Compile the spec in ``text`` for ``targets``; ``file`` names it in messages (no bases: see :func:`load_text`)."""
    from elastic_compile.compiler.pipeline import compile_spec
    from elastic_compile.core import extends
    from elastic_compile.core.loader import load_text as load
    from elastic_compile.schema.validate import validate

    names = _names(targets)
    loaded = load(text, file)
    extends.refuse(loaded)
    return compile_spec(validate(loaded, names), names, _directory(templates), loaded)


def compile_spec(spec: ElasticSpec, targets: Targets = None, *, templates: PathLike | None = None) -> Compiled:
    """Compile a spec built in Python (``ElasticSpec.model_validate({...})``); messages name no file."""
    from elastic_compile.compiler.pipeline import compile_spec as compile_

    return compile_(spec, _names(targets), _directory(templates))


def bases(root: PathLike | None = None) -> Resolver:
    """The bases of a run: the specs of a repository compiled with one of these read each base once.

    ``root``: where bases may be read, never through a link out of it (default: the git
    working tree of the current directory, else the current directory).
    """
    from elastic_compile.schema.extends import resolver

    return resolver(None if root is None else Path(root))


def _names(targets: Targets) -> tuple[str, ...] | None:
    from elastic_compile.compiler.pipeline import target_names

    return target_names(targets)


def _path(path: PathLike) -> str | Path:
    return path if isinstance(path, str) else Path(path)


def _directory(path: PathLike | None) -> Path | None:
    return None if path is None else Path(path)


def __getattr__(name: str) -> object:
    # The result type, for annotations (`api.Compiled`), without importing the compiler here.
    if name == "Compiled":
        from elastic_compile.compiler.pipeline import Compiled

        return Compiled
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
