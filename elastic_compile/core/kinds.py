"""The manifest kinds ``elastic-compile import`` reads, as the layers below the targets see them.

The loader and the schema point a manifest given where a spec goes to ``import`` when it
can read it. They sit below the targets and cannot ask them: the target registry
(:mod:`elastic_compile.targets`) hands this module its answer when it is imported, which
every command and the public API do before they load a spec. Until then, no kind is named.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

_provider: Callable[[], Collection[str]] = tuple


def set_importable(provider: Callable[[], Collection[str]]) -> None:
    """Where :func:`importable` asks (the target registry's ``importable_kinds``)."""
    global _provider  # noqa: PLW0603 - the one registration point below the targets
    _provider = provider


def importable() -> Collection[str]:
    """The kinds some target reads back into a spec."""
    return _provider()
