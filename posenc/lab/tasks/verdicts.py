"""Noise-aware summaries and verdicts of a task study.

A run is one (part, task, encoding, seed); its numbers are exact-match rates at each length.
Over seeds a number is reported as mean ± spread, where the spread is the sample standard
deviation across seeds or, when larger (always with a single seed), the binomial standard
error of the mean rate over the test examples (:func:`eval_error`). Two encodings differ
only when their means are further apart than the sum of their spreads (and than
:data:`MIN_EFFECT`); otherwise the comparison is inconclusive.

An encoding's length generalisation on a task is its mean exact match over the lengths
longer than the training length; the same mean of token accuracy (the share of answer
tokens right) is a secondary measure that still separates encodings once every exact match
has fallen to zero. Its single-seed spread counts examples, not tokens (tokens of one
example are not independent), so it is conservative. A comparison between encodings is
decided only when both learned the task at the training length (exact match at least
:data:`LEARNED_AT`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ...errors import UserError
from ...study import INCONCLUSIVE, NOT_SUPPORTED, SUPPORTED, Verdict
from ..claims.kazemnejad import KAZEMNEJAD_PAIRS

#: exact match at the training length below which an encoding gets no verdict
LEARNED_AT = 0.5
#: rate differences this small are ties however precisely measured (a few examples in a
#: thousand right is not length generalisation)
MIN_EFFECT = 0.02
#: the source of :data:`~posenc.lab.claims.kazemnejad.KAZEMNEJAD_PAIRS`, the published
#: ordering every decoder-only task is checked against
PAPER = "Kazemnejad et al. (2023)"
#: Golovneva et al. (2024): positions counted by content (CoPE) solve selective copy where
#: token positions fail; each pair reads "the first beats the second" on that task
COPE_SOURCE = ("Golovneva et al. (2024), Contextual Position Encoding: Learning to Count "
               "What's Important, abstract: CoPE solves the selective copy, counting and "
               "Flip-Flop tasks where popular position embeddings fail")
COPE_TASK = "selective_copy"
COPE_PAIRS = (("cope", "rope"), ("cope", "nope"))
#: Yang et al. (2025): RoPE's position transform does not depend on the input, which keeps a
#: RoPE transformer from tracking state; PaTH's data-dependent transform can. Checked on the
#: flip-flop language, the state-tracking task the paper names
PATH_STATE_SOURCE = ("Yang et al. (2025), PaTH Attention: Position Encoding via Accumulating "
                     "Householder Transformations, NeurIPS 2025, Sec. 1 and the synthetic "
                     "tasks of Sec. 4: RoPE transformers fail flip-flop language modeling and "
                     "state tracking, which PaTH's data-dependent transform solves")
STATE_TASKS = ("flip_flop", "flip_flop_sparse")
PATH_STATE_PAIRS = (("path", "rope"),)


@dataclass(frozen=True)
class Score:
    """Mean ± spread of one number over seeds; ``values`` holds each seed's number."""

    mean: float
    spread: float
    spread_kind: str            # "seed std" | "eval s.e."
    values: tuple[float, ...]

    def to_dict(self) -> dict:
        return {"mean": self.mean, "spread": self.spread, "spread_kind": self.spread_kind,
                "values": list(self.values)}

    def text(self, digits: int = 2) -> str:
        return f"{self.mean:.{digits}f} ± {self.spread:.{digits}f}"


def eval_error(rate: float, n: int) -> float:
    """Standard error of a rate measured on ``n`` examples, with the rate smoothed as
    (k + 1) / (n + 2) so that 0 of n or n of n still carries the resolution of n examples."""
    smoothed = (rate * n + 1) / (n + 2)
    return math.sqrt(smoothed * (1 - smoothed) / max(n, 1))


def score(values: list[float], n_examples: int) -> Score:
    """Mean and spread of per-seed rates, each measured on ``n_examples`` examples.

    The spread is the larger of the sample standard deviation across seeds and the
    evaluation standard error of the mean (:func:`eval_error` over all seeds' examples);
    with one seed only the latter exists.
    """
    if not values:
        raise UserError("score needs at least one value")
    mean = sum(values) / len(values)
    error = eval_error(mean, n_examples * len(values))
    if len(values) >= 2:
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
        if std >= error:
            return Score(mean, std, "seed std", tuple(values))
    return Score(mean, error, "eval s.e.", tuple(values))


def decide(a: Score, b: Score) -> int:
    """+1 if ``a`` is higher beyond the noise, -1 if ``b`` is, 0 when within the noise
    (or under :data:`MIN_EFFECT`)."""
    gap = a.mean - b.mean
    if abs(gap) <= max(a.spread + b.spread, MIN_EFFECT):
        return 0
    return 1 if gap > 0 else -1


# ------------------------------------------------------------ reading results
def runs_of(results: dict, part: str, task: str, encoding: str) -> list[dict]:
    return sorted((r for r in results["runs"] if r["part"] == part and r["task"] == task
                   and r["encoding"] == encoding), key=lambda r: r["seed"])


def value_at(run: dict, length: int, metric: str = "exact_match") -> float | None:
    entry = run["lengths"].get(str(length))
    return None if entry is None else entry.get(metric)


def length_score(results: dict, part: str, task: str, encoding: str, length: int,
                 metric: str = "exact_match") -> Score | None:
    """``metric`` at ``length`` over the seeds (None when no run could be scored there)."""
    runs = runs_of(results, part, task, encoding)
    values = [value_at(r, length, metric) for r in runs]
    if not runs or any(v is None for v in values):
        return None
    return score(values, runs[0]["lengths"][str(length)]["n_examples"])


def generalisation_score(results: dict, part: str, task: str, encoding: str,
                         metric: str = "exact_match") -> Score | None:
    """Mean ``metric`` over the lengths past training, over the seeds."""
    runs = runs_of(results, part, task, encoding)
    if not runs:
        return None
    base = runs[0]["train_len"]
    longer = [int(n) for n in runs[0]["lengths"] if int(n) > base]
    per_seed = []
    for run in runs:
        values = [value_at(run, n, metric) for n in longer]
        values = [v for v in values if v is not None]
        if not values:
            return None
        per_seed.append(sum(values) / len(values))
    n = runs[0]["lengths"][str(longer[0])]["n_examples"] * len(longer)
    return score(per_seed, n)


def learned(results: dict, part: str, task: str, encoding: str) -> Score | None:
    """Exact match at the training length (the in-length score)."""
    runs = runs_of(results, part, task, encoding)
    return length_score(results, part, task, encoding, runs[0]["train_len"]) if runs else None


# ------------------------------------------------------------ rankings and claims
@dataclass(frozen=True)
class Ranked:
    """One row of a ranking; ``tied`` means within noise of the row above."""

    encoding: str
    score: Score | None
    in_length: Score | None
    tied: bool
    note: str | None = None


def ranking(results: dict, part: str, task: str, encodings: list[str],
            metric: str = "exact_match") -> list[Ranked]:
    """Encodings by generalisation score, best first; a row within noise of the one above
    is marked tied; encodings that did not learn the task come last, unranked."""
    rows, unlearned = [], []
    for enc in encodings:
        gen, inside = (generalisation_score(results, part, task, enc, metric),
                       learned(results, part, task, enc))
        if gen is None or inside is None:
            continue
        if inside.mean < LEARNED_AT:
            unlearned.append(Ranked(enc, gen, inside, False,
                                    f"did not learn at L (exact {inside.text()})"))
        else:
            rows.append((enc, gen, inside))
    rows.sort(key=lambda r: -r[1].mean)
    out = [Ranked(enc, gen, inside, i > 0 and decide(rows[i - 1][1], gen) == 0)
           for i, (enc, gen, inside) in enumerate(rows)]
    return out + unlearned


def pair_verdict(results: dict, part: str, task: str, better: str, worse: str,
                 source: str = PAPER, metric: str = "exact_match") -> Verdict | None:
    """Does ``better`` generalise better than ``worse`` on ``task`` by ``metric``? None if
    either is missing from the results."""
    claim = f"{task}: {better} generalises better than {worse}"
    scores = {e: (generalisation_score(results, part, task, e, metric),
                  learned(results, part, task, e)) for e in (better, worse)}
    if any(g is None or i is None for g, i in scores.values()):
        return None
    weak = [f"{e} (exact match at L {i.text()})" for e, (_, i) in scores.items()
            if i.mean < LEARNED_AT]
    (g_better, _), (g_worse, _) = scores[better], scores[worse]
    evidence = f"past L: {better} {g_better.text()} vs {worse} {g_worse.text()}"
    if weak:
        return Verdict(claim, source, INCONCLUSIVE,
                       f"{evidence}; did not learn the task at L: {', '.join(weak)}")
    outcome = decide(g_better, g_worse)
    if outcome == 0:
        return Verdict(claim, source, INCONCLUSIVE,
                       f"{evidence}; the difference is within the summed spreads "
                       f"({better}: {g_better.spread_kind}, {worse}: {g_worse.spread_kind}) "
                       f"or under {MIN_EFFECT:g}")
    return Verdict(claim, source, SUPPORTED if outcome > 0 else NOT_SUPPORTED, evidence)


def paper_verdicts(results: dict, metric: str = "exact_match") -> list[Verdict]:
    """The published ordering's pairwise claims, for every decoder-only task studied, CoPE's
    on selective copy and PaTH's against RoPE on the flip-flop language."""
    out = []
    for task in results["config"]["lm_tasks"]:
        pairs = [(b, w, PAPER) for b, w in KAZEMNEJAD_PAIRS]
        if task == COPE_TASK:
            pairs += [(b, w, COPE_SOURCE) for b, w in COPE_PAIRS]
        if task in STATE_TASKS:
            pairs += [(b, w, PATH_STATE_SOURCE) for b, w in PATH_STATE_PAIRS]
        for better, worse, source in pairs:
            v = pair_verdict(results, "lm", task, better, worse, source, metric=metric)
            if v is not None:
                out.append(v)
    return out
