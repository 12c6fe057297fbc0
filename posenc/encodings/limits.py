"""The largest position an encoding serves, declared instead of discovered by catching errors.

An encoding whose positions stop somewhere (a learned table, the hierarchical extension of
one, xPos's scales before they overflow) returns a :class:`PositionLimit` from its
``position_limit`` property; the others return None. A model serves what its tightest
encoding serves (:func:`tightest_limit`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class PositionLimit:
    """Positions 0..``max_position`` are served, ``max_position + 1`` is refused.

    ``kind`` and ``bound`` name what ends there, read as "past the <kind> <bound>" ("learned"
    "table", "xpos" "range in float32"); ``encoding`` is the registry name of the encoding
    that declares it.
    """

    max_position: int
    kind: str
    bound: str = "table"
    encoding: str = ""

    @property
    def positions(self) -> int:
        """How many positions are served (``max_position + 1``): the longest sequence."""
        return self.max_position + 1

    def serves(self, length: int) -> bool:
        """Whether a sequence of ``length`` tokens (positions 0..length-1) fits."""
        return length <= self.positions


def learned_table(rows: int, encoding: str) -> PositionLimit:
    """The limit of a learned table of ``rows`` positions (its last row)."""
    return PositionLimit(rows - 1, "learned", encoding=encoding)


def tightest_limit(limits: Iterable[PositionLimit | None]) -> PositionLimit | None:
    """The smallest of the declared limits (None ignored), or None when none is declared."""
    declared = [limit for limit in limits if limit is not None]
    return min(declared, key=lambda limit: limit.max_position, default=None)
