"""One verdict type for every claim a study checks, and the one rule by which a verdict
abstains on too few samples."""

from __future__ import annotations

from dataclasses import asdict, dataclass

SUPPORTED, NOT_SUPPORTED, INCONCLUSIVE, TOO_FEW, NOT_TESTED = (
    "supported", "not supported", "inconclusive", "too few samples", "not tested")
STATUSES = (SUPPORTED, NOT_SUPPORTED, INCONCLUSIVE, TOO_FEW, NOT_TESTED)

#: the fewest independent samples (evaluation windows or blocks of text per length, needles,
#: passkeys) a verdict is decided on: below it a bootstrap spread is zero or meaningless (one
#: window resamples to itself; one needle per cell is 0 % or 100 %), so the verdict abstains
MIN_SAMPLES = 5


def too_few_samples(count: int, unit: str) -> str | None:
    """The abstention text when ``count`` samples (``unit``: "window per length",
    "needle") are fewer than :data:`MIN_SAMPLES`, e.g. ``too few samples: 1 window per length
    (a verdict needs at least 5)``; None when there are enough."""
    if count >= MIN_SAMPLES:
        return None
    return f"{TOO_FEW}: {count} {unit} (a verdict needs at least {MIN_SAMPLES})"


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
