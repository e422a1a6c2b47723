"""OpenAPI ``pattern`` as the API server applies it (Go's RE2), with Python's ``re``.

The syntax CRDs use is the same in both; the one difference that matters is ``$``:
in Go it matches only at the end of the text, in Python also before a final newline, so
``"2\\n"`` would pass ``^[0-9]+$`` here and fail on the cluster.
"""

from __future__ import annotations

import re
from functools import cache


@cache
def _compiled(pattern: str) -> re.Pattern[str]:
    # Go's end-of-text "$" is Python's "\Z" (outside character classes; CRD patterns do
    # not put "$" in classes).
    return re.compile(re.sub(r"(?<!\\)\$", r"\\Z", pattern))


def pattern_matches(pattern: str, text: str) -> bool:
    """True when ``text`` matches ``pattern`` somewhere, as an OpenAPI/Go pattern does."""
    return _compiled(pattern).search(text) is not None
