"""Kubernetes resource quantities: the API server's grammar and an exact parser.

We do not depend on the ``kubernetes`` package for this: importing it costs ~0.4 s and
its ``parse_quantity`` is looser than the API server (it accepts ``1K``, ``NaN`` and
``1_000``; kubernetes/utils/quantity.py). The regex below is the one the CRD and the API server
use (k8s.io/apimachinery/pkg/api/resource/quantity.go).
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
_QUANTITY = re.compile(QUANTITY_PATTERN)

_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_SUFFIX = re.compile(r"([KMGTPE]i|[numkMGTPE])$")


#: The largest value a quantity may have, as a power of ten: 10**30, far above any resource
#: (8Ei of memory is about 9.2e18 bytes) and far below what an exponent can write: ``1e1000000``
#: matches the grammar but overflows arithmetic, and ``int()`` of it holds a million digits.
MAX_EXPONENT = 30
#: What an error says of a quantity that matches the grammar but is beyond :data:`MAX_EXPONENT`.
OUT_OF_RANGE = f"too large: a quantity must be below 1e{MAX_EXPONENT}"


def is_quantity(text: str) -> bool:
    """True when ``text`` matches the Kubernetes quantity grammar and is below ``10**MAX_EXPONENT``."""
    return quantity_value(text) is not None


def out_of_range(text: str) -> bool:
    """True when ``text`` matches the grammar but is too large to be one (:data:`OUT_OF_RANGE`)."""
    return _QUANTITY.fullmatch(text) is not None and quantity_value(text) is None


def parse_quantity(text: str) -> Decimal:
    """Exact value of a quantity (``"64Gi"`` -> 68719476736, ``"500m"`` -> 0.5).

    Raises ``ValueError`` when ``text`` is not a quantity.
    """
    value = quantity_value(text)
    if value is None:
        raise ValueError(f"not a Kubernetes quantity: {text!r}")
    return value


def quantity_value(text: str) -> Decimal | None:
    """Exact value of a quantity, or None when ``text`` is not one (or is too large: :data:`MAX_EXPONENT`)."""
    # fullmatch: Python's "$" also matches before a final newline, Go's does not ("2\n").
    if _QUANTITY.fullmatch(text) is None:
        return None
    match = _SUFFIX.search(text)
    suffix = match.group(1) if match else ""
    number = text[: len(text) - len(suffix)]
    try:
        value = Decimal(number)
    except InvalidOperation:  # unreachable after the regex, kept for safety
        return None
    # Checked before any arithmetic: scaleb and ** raise decimal.Overflow past the context's Emax
    # (1e1000000). 1024**k is below 10**(3k + 1).
    shift = 3 * _BINARY[suffix] + 1 if suffix in _BINARY else _DECIMAL[suffix]
    if value and value.adjusted() + shift > MAX_EXPONENT:
        return None
    value = value * (Decimal(1024) ** _BINARY[suffix]) if suffix in _BINARY else value.scaleb(_DECIMAL[suffix])
    return None if abs(value) >= _LIMIT else value


_LIMIT = Decimal(10) ** MAX_EXPONENT
