"""What the arena's verdicts share with RULER's (:mod:`posenc.hf.ruler.report`): the bar a
task must clear at the original length to count, the bootstrap estimate of a hit rate and the
decision between two estimates, and the verdict "a method beats none" built from them."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ..study import INCONCLUSIVE, NOT_SUPPORTED, NOT_TESTED, SUPPORTED, TOO_FEW, Verdict

REPLICATES, SEED = 400, 0
#: the unextended model's accuracy at the original length a task must reach to count
SOLVED_AT = 0.5


def draws(n: int) -> np.ndarray:
    """(REPLICATES, n) indices in [0, n): the same draws for every method (paired text)."""
    return np.random.default_rng(SEED).integers(0, n, size=(REPLICATES, n))


def hit_estimate(cells: dict[str, list[int]], keys: list[str]) -> tuple[float, float] | None:
    """(mean, spread) of the hits of ``cells[k]`` for ``keys`` (cells "length:depth index",
    each a 0/1 per needle): the bootstrap std resampling needles, at least the smoothed
    binomial standard error (module docstring); None if a cell is missing."""
    if not keys or any(k not in cells for k in keys):
        return None
    hits = np.asarray([cells[k] for k in keys], dtype=float)          # (cells, needles)
    mean, n = float(hits.mean()), hits.size
    smoothed = (mean * n + 1) / (n + 2)
    floor = math.sqrt(smoothed * (1 - smoothed) / n)
    if hits.shape[1] < 2:
        return mean, floor
    reps = hits[:, draws(hits.shape[1])].mean(axis=(0, 2))            # (REPLICATES,)
    return mean, max(floor, float(reps.std(ddof=1)))


def decide(a: tuple[float, float], b: tuple[float, float], lower_better: bool) -> str:
    (ma, sa), (mb, sb) = a, b
    if not (math.isfinite(ma) and math.isfinite(mb)):
        if math.isfinite(ma) == math.isfinite(mb):
            return INCONCLUSIVE
        return SUPPORTED if math.isfinite(ma) == lower_better else NOT_SUPPORTED
    if ma - sa > mb + sb:
        return NOT_SUPPORTED if lower_better else SUPPORTED
    if ma + sa < mb - sb:
        return SUPPORTED if lower_better else NOT_SUPPORTED
    return INCONCLUSIVE


def against_none(claim: str, source: str, rule: str, counted: tuple[bool, str],
                 no_beyond: str | None, a, b, few: Callable[[], str | None],
                 evidence: Callable[[bool], str], lower_better: bool) -> Verdict:
    """The verdict "a method beats 'none'" on one task: not tested when the task does not
    count (``counted`` = (counts, why); ``no_beyond``: why no length lies beyond the original,
    None when some do) or is not measured yet (``a``/``b`` None: the method's and none's
    (mean, spread)); too few samples when ``few()`` says so (then ``evidence(False)``, the
    means alone); else decided by :func:`decide` with ``evidence(True)``."""
    ok, why = counted
    if not ok or no_beyond:
        return Verdict(claim, source, NOT_TESTED,
                       f"does not count: {why if not ok else no_beyond}")
    if a is None or b is None:
        return Verdict(claim, source, NOT_TESTED, "not measured yet")
    short = few()
    if short:
        return Verdict(claim, source, TOO_FEW, f"{short}; {evidence(False)}", rule)
    return Verdict(claim, source, decide(a, b, lower_better), evidence(True), rule)
