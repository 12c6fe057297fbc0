"""One verdict type for every claim a study checks."""

from __future__ import annotations

from dataclasses import asdict, dataclass

SUPPORTED, NOT_SUPPORTED, INCONCLUSIVE, NOT_TESTED = (
    "supported", "not supported", "inconclusive", "not tested")
STATUSES = (SUPPORTED, NOT_SUPPORTED, INCONCLUSIVE, NOT_TESTED)


@dataclass(frozen=True)
class Verdict:
    """A claim, where it is published (``source``: authors, year, place), the rule the study
    applied to decide it (``rule``, may be empty), the outcome (one of :data:`STATUSES`) and
    the numbers it rests on with their noise (``evidence``)."""

    claim: str
    source: str
    verdict: str
    evidence: str
    rule: str = ""

    def __post_init__(self) -> None:
        if self.verdict not in STATUSES:
            raise ValueError(f"verdict must be one of {STATUSES}, got {self.verdict!r}")

    def to_dict(self) -> dict[str, str]:
        return asdict(self)
