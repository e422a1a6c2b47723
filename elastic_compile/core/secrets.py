"""Whether a value is a secret: the one judgement EC107 makes and every printer of a value consults.

A lint or an error that quotes a value (the ``(given: X)`` suffix, through
:func:`elastic_compile.core.errors.show_given`) asks :func:`secret_kind` first and shows
what the value looks like instead of the value. EC107 (``compiler/lint.py``) reports the
same values, and ``doctor``'s DR028 the same in manifests.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from typing import Any

# Env names that look like secrets: a word of the name (split on _ . -) is KEY/KEYS or
# ends with one of these (HFTOKEN, APIKEY). Whole-word matching keeps MONKEY_COUNT,
# KEYBOARD and TOKENIZERS_PARALLELISM (Hugging Face, set in most training images) out.
_SECRET_WORDS = ("TOKEN", "PASSWORD", "PASSWD", "SECRET", "APIKEY", "ACCESSKEY", "CREDENTIAL")
_WORD_SPLIT = re.compile(r"[^A-Za-z0-9]+")


def secret_like(name: str) -> bool:
    """True when an env name looks like it holds a secret (API_TOKEN, DB_PASSWORD, AWS_SECRET_ACCESS_KEY)."""
    for word in _WORD_SPLIT.split(name.upper()):
        if word in ("KEY", "KEYS") or any(word.endswith((m, m + "S")) for m in _SECRET_WORDS):
            return True
    return False


# A reference the kubelet expands ($(VAR)) or a shell does (${VAR}, $VAR) is not a secret.
_REFERENCE = re.compile(r"^\$(?:\([A-Za-z_][A-Za-z0-9_]*\)|\{[A-Za-z_][A-Za-z0-9_]*\}|[A-Za-z_][A-Za-z0-9_]*)$")
# Shapes that are secrets wherever they appear, each with what the warning calls it. Every
# pattern starts at a literal or at the start of a run (the URL's lookbehind): a search then
# tries each position once, instead of backtracking through a whole run of scheme characters
# from every one of its positions (quadratic: 40,000 letters took 2.75 s of CPU).
# tests/hostile/test_secret_values.py checks that shape.
_SECRET_SHAPES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("a private key (PEM)", re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----")),
    ("a JSON Web Token", re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")),
    (
        "a URL with a password",
        re.compile(r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*://[^\s/:@]*:(?!\$\(|\$\{)[^\s/@]+@"),
    ),
    ("a bearer or basic credential", re.compile(r"\b(?:Bearer|Basic|token)\s+[A-Za-z0-9._~+/-]{16,}=*")),
    ("a GitHub token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{40,})")),
    ("a GitLab token", re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}")),
    ("a Slack token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}")),
    ("a webhook URL", re.compile(r"https://(?:hooks\.slack\.com/services|discord(?:app)?\.com/api/webhooks)/\S+")),
    ("an API key (sk-)", re.compile(r"\b(?:sk|rk)[-_](?:live_|test_|proj-|ant-)?[A-Za-z0-9_-]{20,}")),
    ("an AWS access key", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("a Hugging Face token", re.compile(r"\bhf_[A-Za-z0-9]{30,}")),
    ("a Google API key", re.compile(r"\bAIza[0-9A-Za-z_-]{35}")),
    ("a package registry token", re.compile(r"\b(?:npm_[A-Za-z0-9]{36}|pypi-AgE[A-Za-z0-9_-]{50,})")),
)
#: Bits of entropy per character above which a string next to a secret-like name is a secret.
MIN_SECRET_ENTROPY = 3.0
MIN_SECRET_CHARS = 12


def _entropy(text: str) -> float:
    counts: dict[str, int] = {}
    for char in text:
        counts[char] = counts.get(char, 0) + 1
    return -sum(n / len(text) * math.log2(n / len(text)) for n in counts.values())


def _random_looking(text: str) -> bool:
    return (
        len(text) >= MIN_SECRET_CHARS
        and not any(c.isspace() for c in text)
        and not _REFERENCE.match(text)
        and _entropy(text) >= MIN_SECRET_ENTROPY
    )


def secret_shape(text: str) -> str | None:
    """What secret ``text`` looks like (a PEM key, a JWT, ...), or None."""
    for kind, pattern in _SECRET_SHAPES:
        if pattern.search(text):
            return kind
    stripped = text.strip()
    if stripped.startswith("{") and len(stripped) <= 1 << 20:
        try:
            data = json.loads(stripped)
        except ValueError:
            return None
        for key, value in _json_fields(data):
            if secret_like(key) and (_random_looking(value) or secret_shape(value) is not None):
                return f"JSON with a {json.dumps(key)} field"
    return None


def _json_fields(node: Any) -> Iterator[tuple[str, str]]:
    """Every ``(key, string value)`` pair in parsed JSON, at any depth."""
    if isinstance(node, dict):
        for key, value in node.items():
            if isinstance(value, str):
                yield str(key), value
            else:
                yield from _json_fields(value)
    elif isinstance(node, list):
        for item in node:
            yield from _json_fields(item)


def redact(text: str) -> str:
    """``text`` with each run shaped like a secret replaced by what it looks like (``<a GitHub token, not shown>``).

    For what a message quotes besides its ``(given: X)``: a field path holds the keys the user
    wrote, and a key can be a pasted token (``resources.requests.ghp_...: unknown resource``).
    """
    for kind, pattern in _SECRET_SHAPES:
        text = pattern.sub(f"<{kind}, not shown>", text)
    return text


#: What :func:`secret_kind` says of a random-looking value next to a secret-like name.
NEXT_TO_NAME = "a secret next to a secret-like name"


def secret_kind(text: str, name: str | None = None) -> str | None:
    """What secret ``text`` looks like, or None: by its shape, or random-looking next to a secret-like ``name``.

    ``name``: what the value is assigned to (a flag, an annotation key, a JSON key).
    """
    kind = secret_shape(text)
    if kind is None and name is not None and secret_like(name) and _random_looking(text):
        return NEXT_TO_NAME
    return kind


__all__ = [
    "MIN_SECRET_CHARS",
    "MIN_SECRET_ENTROPY",
    "NEXT_TO_NAME",
    "redact",
    "secret_kind",
    "secret_like",
    "secret_shape",
]
