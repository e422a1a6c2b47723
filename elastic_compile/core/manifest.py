"""Reading a manifest's values: what the targets' checks, doctors and importers share.

Their input is any mapping a user or a template wrote, so a value of the wrong type counts
as unset here: the schema checks report the type.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from elastic_compile.core import names

_SIMPLE_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


def as_int(value: Any) -> int | None:
    """``value`` when it is an integer (not a boolean), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def as_mapping(value: Any) -> Mapping[str, Any]:
    """``value`` when it is a mapping, else an empty one."""
    return value if isinstance(value, Mapping) else {}


def join_path(path: str, key: str | int) -> str:
    """``path`` extended by ``key``: ``a.b``, ``a[0]``, ``labels["app.kubernetes.io/name"]``."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    if _SIMPLE_KEY.match(key):
        return f"{path}.{key}" if path else key
    # Label keys such as app.kubernetes.io/name would be ambiguous with dots.
    return f"{path}[{json.dumps(key)}]"


def show(value: Any, limit: int = 80) -> str:
    """``value`` as JSON for a message, cut at ``limit`` characters."""
    text = json.dumps(value, default=repr)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def name_errors(obj: Mapping[str, Any]) -> list[str]:
    """metadata.name must be a DNS-1035 label of at most 63 characters.

    The CRD only says ``metadata: {type: object}``; the PyTorchJob webhook (and the
    TrainJob CEL rule) require a DNS-1035 label, stricter than the generic DNS-1123
    subdomain (no leading digit, no dots).
    """
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        return ["metadata: required field is missing"]
    name = meta.get("name")
    if name is None:
        if meta.get("generateName"):
            return []  # the server generates the name before validating it
        return ["metadata.name: required field is missing"]
    if not isinstance(name, str):
        return [f"metadata.name: must be of type string (given: {show(name)})"]
    errors = []
    if len(name) > names.DNS1035_LABEL_MAX:
        errors.append(f"metadata.name: must be no more than {names.DNS1035_LABEL_MAX} characters (given: {len(name)})")
    if not names.DNS1035_LABEL.match(name):
        errors.append(
            "metadata.name: must be a DNS-1035 label: lower-case letters, digits and '-', "
            f"starting with a letter and ending with a letter or digit (given: {show(name)})"
        )
    return errors
