"""Numbers that remember how they were written.

The loader reads a plain ``10`` or ``1e-4`` as a number, but in a string field (an
argument, an env value) the user meant the text. These subclasses carry the source text
so that string fields keep exactly what was written, while number fields use them as
plain ``int``/``float`` (pydantic's strict mode accepts subclasses).
"""

from __future__ import annotations


class SourceInt(int):
    """An ``int`` read from YAML, with its source text."""

    text: str

    def __new__(cls, value: int, text: str) -> SourceInt:
        self = super().__new__(cls, value)
        self.text = text
        return self

    def __reduce__(self) -> tuple[type[SourceInt], tuple[int, str]]:
        # copy.deepcopy and pickle rebuild through __new__, which needs the text too.
        return (type(self), (int(self), self.text))


class SourceFloat(float):
    """A ``float`` read from YAML, with its source text."""

    text: str

    def __new__(cls, value: float, text: str) -> SourceFloat:
        self = super().__new__(cls, value)
        self.text = text
        return self

    def __reduce__(self) -> tuple[type[SourceFloat], tuple[float, str]]:
        return (type(self), (float(self), self.text))


def source_text(value: object) -> str | None:
    """The text a user wrote for a scalar: strings as is, numbers as written.

    Returns ``None`` for booleans, nulls and collections, which have no faithful text.
    """
    if isinstance(value, str):
        return value
    if isinstance(value, (SourceInt, SourceFloat)):
        return value.text
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):  # built in Python (API users), not read from YAML
        return str(value)
    if isinstance(value, float):
        return repr(value)
    return None
