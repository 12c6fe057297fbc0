"""The evidence claims are decided on: a comparison's runs looked up by label, with noise.

Verdicts: ``supported`` / ``not supported`` when the numbers differ beyond noise (see
:mod:`posenc.lab.claims.stats`: intervals mean ± spread do not overlap; the spread is the
seed-to-seed standard deviation with two or more seeds, else the bootstrap standard deviation
over evaluation windows); ``inconclusive`` when the difference is within noise, there is no
noise estimate, or a run the claim needs has not clearly beaten the unigram baseline;
``too few samples`` when a bootstrap spread a verdict needs rests on fewer than
:data:`~posenc.study.MIN_SAMPLES` windows (blocks of text) at a length (one window resamples to
itself and has no spread); ``not tested`` when a run it needs is missing or n/a.

The claims are about named encodings (ALiBi, RoPE, ...), so this module looks runs up by
encoding name; model and attention code never do.
"""

from __future__ import annotations

import math

import numpy as np

from ...eval.inference_scaling import run_label
from ...study.verdict import (  # noqa: F401
    INCONCLUSIVE,
    MIN_SAMPLES,
    NOT_SUPPORTED,
    NOT_TESTED,
    SUPPORTED,
    TOO_FEW,
)
from ..runs.baseline import has_learned
from .stats import (
    BOOTSTRAP,
    QUERY_BLOCKS,
    SEEDS,
    Estimate,
    beyond,
    bootstrap_query_mean,
    bootstrap_samples,
    bootstrap_units,
    paired_spread,
    separated,
)


class Runs:
    """Lookup of a results.json's runs by label (``rope``, ``rope+yarn:4``), with noise."""

    def __init__(self, results: dict) -> None:
        self.results = results
        self.config = results.get("config", {})
        self.by_label = {run_label(r): r for r in results.get("runs", [])}
        lengths = self.config.get("lengths") or sorted(
            {int(k) for r in results.get("runs", []) for k in r.get("ppl", {})})
        self.lengths = [int(n) for n in lengths]
        self.train_len = int((self.config.get("train") or {}).get(
            "train_len", self.lengths[0] if self.lengths else 0))
        # the claims' probe length: 8L as in the ALiBi paper's plots, else the longest
        probe = 8 * self.train_len
        self.probe = probe if probe in self.lengths else max(self.lengths, default=0)
        self.unigram = (results.get("baseline") or {}).get("unigram_ppl")

    def get(self, label: str) -> dict | None:
        return self.by_label.get(label)

    def ppl(self, label: str, length: int) -> float | None:
        run = self.get(label)
        value = None if run is None else run.get("ppl", {}).get(str(length))
        if value == "inf":
            return float("inf")
        return float(value) if isinstance(value, (int, float)) else None

    def note(self, label: str, length: int) -> str | None:
        run = self.get(label)
        value = None if run is None else run.get("ppl", {}).get(str(length))
        return value if isinstance(value, str) and value != "inf" else None

    def ratio(self, label: str, length: int) -> float | None:
        a, b = self.ppl(label, length), self.ppl(label, self.train_len)
        return None if a is None or b is None or b == 0 else a / b

    # -------------------------------------------------------------- noise
    def samples(self, label: str, length: int) -> tuple[np.ndarray, str] | None:
        """Perplexity samples at ``length``: one per seed (two or more seeds), else bootstrap
        replicates over windows; kind "none" (a single value) when neither is available."""
        run = self.get(label)
        if run is None or self.ppl(label, length) is None:
            return None
        seeds = run.get("seeds") or []
        key = str(length)
        values = [s.get("ppl", {}).get(key) for s in seeds]
        if len(seeds) >= 2 and all(isinstance(v, (int, float)) for v in values):
            return np.asarray(values, dtype=float), SEEDS
        if len(seeds) == 1:
            boot = bootstrap_samples(seeds[0], key, blocked=not self.config.get("stride"))
            if boot is not None:
                return boot, BOOTSTRAP
        return np.asarray([self.ppl(label, length)]), "none"

    def units(self, label: str, length: int) -> int | None:
        """The windows (blocks of text) a one-seed bootstrap at ``length`` resamples; None
        with seeds or without window losses."""
        seeds = (self.get(label) or {}).get("seeds") or []
        if len(seeds) != 1:
            return None
        return bootstrap_units(seeds[0], str(length), blocked=not self.config.get("stride"))

    def ppl_est(self, label: str, length: int) -> Estimate | None:
        """Mean ± spread; with the bootstrap, the mean is the measured perplexity itself."""
        found = self.samples(label, length)
        return None if found is None else _estimate(*found, point=self.ppl(label, length),
                                                    units=self.units(label, length))

    def ratio_est(self, label: str, length: int) -> Estimate | None:
        a, b = self.samples(label, length), self.samples(label, self.train_len)
        if a is None or b is None or a[1] != b[1] or a[0].shape != b[0].shape:
            return None
        units = [u for u in (self.units(label, length), self.units(label, self.train_len))
                 if u is not None]
        return _estimate(a[0] / b[0], a[1], point=self.ratio(label, length),
                         units=min(units) if units else None)

    def entropy_est(self, label: str, length: int) -> Estimate | None:
        """Tail attention entropy: mean ± spread over seeds; with one seed a bootstrap over
        blocks of tail queries (:func:`~posenc.lab.claims.stats.bootstrap_query_mean`), paired
        between runs measured on the same windows; no noise estimate ("none") when the
        per-query values were not kept (results of older versions)."""
        run = self.get(label) or {}
        seeds = run.get("seeds") or [run]
        entries = [((s.get("entropy") or {}).get(str(length)) or {}) for s in seeds]
        entries = [t if isinstance(t, dict) else {} for t in entries]
        tails = [t.get("tail") for t in entries]
        if not tails or any(t is None for t in tails):
            return None
        if len(tails) >= 2:
            return _estimate(np.asarray(tails, dtype=float), SEEDS)
        queries = entries[0].get("tail_queries")
        if queries:
            return _estimate(bootstrap_query_mean(queries), BOOTSTRAP, point=float(tails[0]),
                             units=min(QUERY_BLOCKS, len(queries)))
        return _estimate(np.asarray(tails, dtype=float), "none")

    def learned(self, label: str) -> bool | None:
        """Whether the trained run behind ``label`` clearly beat the unigram baseline."""
        base = label.partition("+")[0]
        return has_learned(self.ppl(base, self.train_len), self.unigram)

    def scaled(self, kind: str) -> str | None:
        """Label of the RoPE run with an inference scaling of ``kind`` (``linear``), if any."""
        for label, run in self.by_label.items():
            spec = run.get("inference_scaling") or ""
            if run.get("encoding") == "rope" and spec.split("+")[0].split(":")[0] == kind \
                    and "+" not in spec:
                return label
        return None

    def step_time(self, encoding: str) -> Estimate | None:
        """Seconds per training step relative to each round's median, over timing rounds."""
        rel = ((self.results.get("timing") or {}).get("relative_to_median") or {}).get(
            encoding)
        return _estimate(np.asarray(rel, dtype=float), "rounds") if rel else None


def _estimate(samples: np.ndarray, kind: str, point: float | None = None,
              units: int | None = None) -> Estimate:
    """Estimate of samples; bootstrap replicates keep the measured ``point`` as their mean
    (their own mean carries the bootstrap's bias) and the ``units`` they resampled, "none"
    has an unknown (NaN) spread."""
    est = Estimate.of(samples, kind)
    if kind == "none":
        return Estimate(est.mean, math.nan, kind, est.n)
    if kind == BOOTSTRAP:
        return Estimate(est.mean if point is None else point, est.spread, kind, est.n,
                        np.asarray(samples, dtype=float), units)
    return est


def factor_of(label: str) -> float | None:
    """The factor of a scaled label (``rope+yarn:4`` -> 4.0), None without one."""
    _, _, spec = label.partition("+")
    _, _, factor = spec.partition(":")
    try:
        return float(factor) if factor else None
    except ValueError:
        return None


def fmt(x: float | None) -> str:
    if x is None:
        return "n/a"
    if x == float("inf"):
        return "inf"
    if isinstance(x, float) and math.isnan(x):
        return "nan"
    if abs(x) >= 1e6:
        return f"{x:.2e}"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    return f"{x:.2f}" if abs(x) >= 10 else f"{x:.3f}"


def fmt_est(est: Estimate | None) -> str:
    """``5.23 ± 0.04`` (``± ?`` without a noise estimate; ``[2 windows]`` after it when a
    bootstrap rests on too few, :func:`too_few`)."""
    if est is None:
        return "n/a"
    if too_few(est):
        return _fmt_est(est) + f" [{est.units} window{'' if est.units == 1 else 's'}]"
    return _fmt_est(est)


def _fmt_est(est: Estimate) -> str:
    if not math.isfinite(est.spread):
        return f"{fmt(est.mean)} ± ?"
    if not math.isfinite(est.mean) or abs(est.mean) >= 1e6:
        return f"{fmt(est.mean)} ± {fmt(est.spread)}"
    digits = 0 if abs(est.mean) >= 100 else (2 if abs(est.mean) >= 10 else 3)
    return f"{fmt(est.mean)} ± {est.spread:,.{digits}f}"


def _missing(*pairs: tuple[str, object]) -> str | None:
    gone = [name for name, value in pairs if value is None]
    return f"missing or n/a: {', '.join(gone)}" if gone else None


def runs_not_run(r: Runs, evidence: str) -> list[str]:
    """What a "not tested" verdict's ``evidence`` (:func:`_missing`, or ``missing: ...``)
    says is missing because this comparison did not run it: labels without a run, or the
    described run; empty when the runs exist and only a value is n/a."""
    if evidence.startswith("missing or n/a: "):
        names = evidence.removeprefix("missing or n/a: ").split(" (")[0].split(", ")
        return [name for name in (n.split("@")[0] for n in names) if r.get(name) is None]
    if evidence.startswith("missing: entropy of "):       # the runs, or only their entropy
        labels = evidence.removeprefix("missing: entropy of ").split(" past")[0].split(" and ")
        return [label for label in labels if r.get(label) is None]
    if evidence.startswith("missing: "):
        return [evidence.removeprefix("missing: ")]
    return []


def _not_learned(r: Runs, *labels: str) -> str | None:
    bad = [lab for lab in labels if r.learned(lab) is False]
    if not bad:
        return None
    return (f"{', '.join(bad)} did not clearly beat the unigram baseline (ppl "
            f"{fmt(r.unigram)}) at L: no verdict from a model that has not learned")


def difference_text(a: Estimate | None, b: Estimate | None) -> str:
    """The difference a - b and the noise a verdict on it is decided against: with one seed
    the paired spread (``difference 0.47 vs paired spread 0.12``); empty with seeds, whose
    mean ± spread intervals are printed beside it already."""
    if a is None or b is None:
        return ""
    spread = paired_spread(a, b)
    if spread is None or not (math.isfinite(a.mean) and math.isfinite(b.mean)):
        return ""
    return f"difference {fmt(a.mean - b.mean)} vs paired spread {fmt(spread)}"


def too_few(*estimates: Estimate) -> bool:
    """Whether a bootstrap among ``estimates`` resampled fewer than MIN_SAMPLES units."""
    return any(e.units is not None and e.units < MIN_SAMPLES for e in estimates)


#: what a "too few samples" verdict's evidence starts with
TOO_FEW_TEXT = (f"{TOO_FEW}: a bootstrap spread here rests on fewer than {MIN_SAMPLES} "
                "evaluation windows (blocks of text) at a length, counted in brackets below "
                f"(a verdict needs at least {MIN_SAMPLES}: score more tokens, or run seeds)")


def less(a: Estimate, b: Estimate) -> str:
    """Verdict on "a < b": decided only when the two differ beyond noise, on enough
    samples."""
    if too_few(a, b):
        return TOO_FEW
    if not separated(a, b):
        return INCONCLUSIVE
    return SUPPORTED if a.mean < b.mean else NOT_SUPPORTED


def above(a: Estimate, threshold: float) -> str:
    """Verdict on "a > threshold": decided only when the threshold is outside a's noise, on
    enough samples."""
    if too_few(a):
        return TOO_FEW
    if not beyond(a, threshold):
        return INCONCLUSIVE
    return SUPPORTED if a.mean > threshold else NOT_SUPPORTED


def _flip(verdict: str) -> str:
    return {SUPPORTED: NOT_SUPPORTED, NOT_SUPPORTED: SUPPORTED}.get(verdict, verdict)


def _all(verdicts: list[str]) -> str:
    """Combined verdict of a conjunction of decided parts (a part on too few samples leaves
    the whole undecided unless another part already refutes it)."""
    if NOT_SUPPORTED in verdicts:
        return NOT_SUPPORTED
    if TOO_FEW in verdicts:
        return TOO_FEW
    return SUPPORTED if verdicts and all(v == SUPPORTED for v in verdicts) else INCONCLUSIVE

