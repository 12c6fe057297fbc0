"""Noise in a comparison: mean and spread over seeds, bootstrap over evaluation windows, and
the one rule every verdict, ranking and table uses to decide whether a difference is real.

A measured quantity is a set of *samples*: one value per seed when a comparison has two or
more seeds, else bootstrap replicates of the one seed's value, resampling its evaluation
windows with replacement (Efron and Tibshirani, 1993). Its spread is the sample standard
deviation of those samples. Two quantities differ *beyond noise* when their intervals
``mean ± spread`` do not overlap; a quantity is beyond a threshold when the threshold lies
outside ``mean ± spread``. Bootstrap estimates of two runs resample the same blocks of the
same held-out text, so their difference is judged against the spread of the paired
differences (text difficulty, shared by both, cancels).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ...errors import UserError

#: bootstrap replicates per quantity, and the fixed seed that makes them deterministic
BOOTSTRAP_REPLICATES = 400
BOOTSTRAP_SEED = 0
#: how a spread was measured (stored in results.json and named in the report)
SEEDS, BOOTSTRAP = "seeds", "bootstrap"


@dataclass(frozen=True)
class Estimate:
    """A quantity's mean over its samples and its spread (sample std, 0 for one sample)."""

    mean: float
    spread: float
    kind: str = SEEDS          # SEEDS or BOOTSTRAP
    n: int = 1                 # seeds, or bootstrap replicates
    #: bootstrap replicates, kept so two estimates drawn on the same blocks can be paired
    samples: np.ndarray | None = field(default=None, compare=False, repr=False)
    #: the independent units a bootstrap resampled (windows or blocks of text); None for seeds
    units: int | None = None

    @classmethod
    def of(cls, samples: Sequence[float] | np.ndarray, kind: str = SEEDS) -> Estimate:
        """Mean and spread of finite samples (NaN mean if none are finite)."""
        arr = np.asarray(samples, dtype=float)
        arr = arr[np.isfinite(arr)]
        if arr.size == 0:
            return cls(math.nan, math.nan, kind, 0)
        spread = float(arr.std(ddof=1)) if arr.size > 1 else 0.0
        return cls(float(arr.mean()), spread, kind, int(arr.size))

    @property
    def low(self) -> float:
        return self.mean - self.spread

    @property
    def high(self) -> float:
        return self.mean + self.spread


def bootstrap_ppl(window_nll: Sequence[float], window_tokens: Sequence[int],
                  replicates: int = BOOTSTRAP_REPLICATES, seed: int = BOOTSTRAP_SEED
                  ) -> np.ndarray:
    """Perplexity replicates (replicates,) from resampled windows.

    ``window_nll[i]`` is window i's mean negative log-likelihood (nats/token) over
    ``window_tokens[i]`` scored tokens; each replicate draws as many windows with replacement
    and returns exp(total nll / total tokens).
    """
    nll = np.asarray(window_nll, dtype=float)
    tok = np.asarray(window_tokens, dtype=float)
    if nll.size == 0 or nll.shape != tok.shape:
        raise UserError(f"need one token count per window, got {nll.size} windows and "
                         f"{tok.size} counts")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, nll.size, size=(replicates, nll.size))
    total = (nll * tok)[idx].sum(axis=1) / tok[idx].sum(axis=1)
    with np.errstate(over="ignore"):
        return np.exp(total)


def block_bootstrap_ppl(window_nll: Sequence[float], window_tokens: Sequence[int],
                        block_of: Sequence[int], n_blocks: int,
                        replicates: int = BOOTSTRAP_REPLICATES, seed: int = BOOTSTRAP_SEED
                        ) -> np.ndarray:
    """Perplexity replicates (replicates,) resampling blocks of text rather than windows.

    ``block_of[i]`` is the block (a stretch of the held-out stream, e.g. one window of the
    longest length) that window i lies in. Every call with the same ``n_blocks`` and seed
    draws the same blocks, so replicates at different lengths (and of different runs) see the
    same text: a ratio ppl(n) / ppl(L) of two such replicate arrays is a paired bootstrap in
    which the difficulty of the text cancels.
    """
    nll = np.asarray(window_nll, dtype=float) * np.asarray(window_tokens, dtype=float)
    blocks = np.asarray(block_of, dtype=int)
    if nll.size == 0 or blocks.shape != nll.shape or n_blocks < 1 or blocks.max() >= n_blocks:
        raise UserError(f"need one block index in [0, {n_blocks}) per window")
    block_nll = np.bincount(blocks, weights=nll, minlength=n_blocks)
    block_tok = np.bincount(blocks, weights=np.asarray(window_tokens, dtype=float),
                            minlength=n_blocks)
    idx = np.random.default_rng(seed).integers(0, n_blocks, size=(replicates, n_blocks))
    tok = block_tok[idx].sum(axis=1)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        return np.exp(block_nll[idx].sum(axis=1) / tok)


def bootstrap_samples(seed: dict, length: str, blocked: bool = True):
    """Bootstrap perplexity replicates of one seed entry at ``length`` (None without window
    losses). ``blocked`` (non-overlapping windows from the stream's start): resample blocks
    of text the size of the longest window, the same blocks at every length and for every
    run (a paired bootstrap); else resample the windows of this length independently."""
    nll = (seed.get("window_nll") or {}).get(length)
    tokens = (seed.get("window_tokens") or {}).get(length)
    if not nll:
        return None
    if not blocked:
        return bootstrap_ppl(nll, tokens)
    longest = max(int(n) for n in seed.get("ppl", {}))
    n = int(length)
    return block_bootstrap_ppl(nll, tokens, [(i * n) // longest for i in range(len(nll))],
                               _n_blocks(seed))


def bootstrap_units(seed: dict, length: str, blocked: bool = True) -> int | None:
    """How many independent units :func:`bootstrap_samples` resamples at ``length``: blocks of
    text (``blocked``) or windows; None without window losses."""
    nll = (seed.get("window_nll") or {}).get(length)
    if not nll:
        return None
    return _n_blocks(seed) if blocked else len(nll)


def _n_blocks(seed: dict) -> int:
    """Blocks of text the size of the longest window that the windows of every length span."""
    counts = {int(n): len(w) for n, w in (seed.get("window_nll") or {}).items() if w}
    longest = max(int(n) for n in seed.get("ppl", {}))
    return max(-(-c * n // longest) for n, c in counts.items())


#: blocks of consecutive queries a bootstrap over queries resamples (neighbouring queries of
#: one window see nearly the same keys, so they are resampled together)
QUERY_BLOCKS = 16


def bootstrap_query_mean(values: Sequence[float], n_blocks: int = QUERY_BLOCKS,
                         replicates: int = BOOTSTRAP_REPLICATES, seed: int = BOOTSTRAP_SEED
                         ) -> np.ndarray:
    """Replicates (replicates,) of the mean of per-query values (e.g. tail attention
    entropies), resampling ``n_blocks`` contiguous blocks of queries with replacement.

    Every call with as many blocks and the same seed draws the same block indices, so two
    runs measured on the same text windows are paired (:func:`separated` then judges their
    difference against the spread of the replicates' differences)."""
    v = np.asarray(values, dtype=float)
    if v.size == 0:
        raise UserError("need at least one value to bootstrap")
    n_blocks = max(1, min(n_blocks, v.size))
    edges = (np.arange(n_blocks + 1) * v.size) // n_blocks
    sums = np.add.reduceat(v, edges[:-1])
    sizes = np.diff(edges).astype(float)
    idx = np.random.default_rng(seed).integers(0, n_blocks, size=(replicates, n_blocks))
    return sums[idx].sum(axis=1) / sizes[idx].sum(axis=1)


def paired(a: Estimate, b: Estimate) -> bool:
    """Whether ``a`` and ``b`` are bootstrap replicates on the same resampled text blocks."""
    return (a.kind == b.kind == BOOTSTRAP and a.samples is not None and b.samples is not None
            and a.samples.shape == b.samples.shape)


def separated(a: Estimate, b: Estimate) -> bool:
    """True when ``a`` and ``b`` differ beyond noise: their mean ± spread intervals do not
    overlap; for paired bootstrap estimates (the same text blocks resampled), when their
    difference exceeds the standard deviation of the replicates' differences."""
    if not (math.isfinite(a.mean) and math.isfinite(b.mean)):
        return math.isfinite(a.mean) != math.isfinite(b.mean) or a.mean != b.mean
    if paired(a, b):
        diff = a.samples - b.samples
        diff = diff[np.isfinite(diff)]
        if diff.size > 1:
            return abs(a.mean - b.mean) > float(diff.std(ddof=1))
    return a.high < b.low or b.high < a.low


def beyond(a: Estimate, threshold: float) -> bool:
    """True when ``threshold`` lies outside ``a``'s mean ± spread interval."""
    if not math.isfinite(a.mean):
        return True
    return threshold < a.low or threshold > a.high


def paired_spread(a: Estimate, b: Estimate) -> float | None:
    """The standard deviation of the paired bootstrap differences a - b that
    :func:`separated` compares |a - b| with (None unless ``a`` and ``b`` are paired)."""
    if not paired(a, b):
        return None
    diff = a.samples - b.samples
    diff = diff[np.isfinite(diff)]
    return float(diff.std(ddof=1)) if diff.size > 1 else None


def tie_groups(estimates: Sequence[Estimate]) -> list[int]:
    """For estimates sorted best (lowest) first: the group number of each. A group holds
    only estimates that do not differ from each other: a new group starts as soon as an
    estimate is separated from any member of the current one, so ties never chain (a, b
    within noise and b, c within noise does not put a and c together when they differ)."""
    groups: list[int] = []
    members: list[Estimate] = []
    for est in estimates:
        if members and any(separated(est, m) for m in members):
            members = []
        if not members:
            groups.append((groups[-1] + 1) if groups else 1)
        else:
            groups.append(groups[-1])
        members.append(est)
    return groups
