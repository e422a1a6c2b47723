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


def is_quantity(text: str) -> bool:
    """True when ``text`` matches the Kubernetes quantity grammar."""
    # fullmatch: Python's "$" also matches before a final newline, Go's does not ("2\n").
    return _QUANTITY.fullmatch(text) is not None


def parse_quantity(text: str) -> Decimal:
    """Exact value of a quantity (``"64Gi"`` -> 68719476736, ``"500m"`` -> 0.5).

    Raises ``ValueError`` when ``text`` is not a quantity.
    """
    value = quantity_value(text)
    if value is None:
        raise ValueError(f"not a Kubernetes quantity: {text!r}")
    return value


def quantity_value(text: str) -> Decimal | None:
    """Exact value of a quantity, or None when ``text`` is not one."""
    if not is_quantity(text):
        return None
    match = _SUFFIX.search(text)
    suffix = match.group(1) if match else ""
    number = text[: len(text) - len(suffix)]
    try:
        value = Decimal(number)
    except InvalidOperation:  # unreachable after the regex, kept for safety
        return None
    if suffix in _BINARY:
        return value * (Decimal(1024) ** _BINARY[suffix])
    return value.scaleb(_DECIMAL[suffix])
