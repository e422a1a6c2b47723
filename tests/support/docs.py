"""What a doc shows of a command's output, held against what the command printed."""

from __future__ import annotations

#: A line of its own in a doc's output (indented as the lines around it): lines were left out here.
ELLIPSIS = "..."


def is_excerpt(shown: str) -> bool:
    """Whether the doc shows only some of the lines (a line ``...`` among them)."""
    return any(line.strip() == ELLIPSIS for line in shown.splitlines())


def not_printed(shown: str, printed: str) -> list[str]:
    """The lines of the excerpt ``shown`` that ``printed`` lacks, or has out of order; [] when true."""
    lines = iter(printed.splitlines())
    return [line for line in shown.splitlines() if line.strip() != ELLIPSIS and line not in lines]
