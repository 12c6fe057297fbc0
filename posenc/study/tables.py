"""One markdown table helper for every report."""

from __future__ import annotations

from collections.abc import Sequence


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """The lines of a markdown table: header, separator, one line per row.

    Every row must have as many cells as the header (a ValueError otherwise: a report bug).
    """
    for row in rows:
        if len(row) != len(header):
            raise ValueError(f"a table row has {len(row)} cells, the header {len(header)}")
    return (["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows])
