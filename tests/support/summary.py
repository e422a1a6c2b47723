"""The line that ends a CLI run of several specs (tests/test_first_contact.py pins its words)."""

from __future__ import annotations

import re

SUMMARY = re.compile(r"elastic-compile: \d+ specs?( and \d+ bases?)?, [^\n]*, \d+ warnings?, \d+ errors?\n\Z")


def without_summary(err: str) -> str:
    """``err`` without its last line when that is the summary: for tests that read the problems."""
    return SUMMARY.sub("", err)
