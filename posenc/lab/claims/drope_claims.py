"""DroPE's claims (Gelberg, Eguchi, Akiba & Cetin 2026, "Extending the Context of Pretrained
LLMs by Dropping Their Positional Embeddings", ICLR 2026), read on the lab's ``drope`` variant
(RoPE for most of the steps, then no positional encoding: :mod:`posenc.lab.runs.variants`):
within the training length it keeps RoPE's quality, and past it it beats RoPE with YaRN.

Each entry is (claim, source with its place and numbers, rule, function) as in :mod:`.claims`,
decided by the same rules against the same noise; without a ``drope`` run (or a rope+yarn:F
run) a claim is "not tested".
"""

from __future__ import annotations

from dataclasses import replace

from .evidence import (
    INCONCLUSIVE,
    NOT_TESTED,
    Runs,
    _flip,
    _missing,
    difference_text,
    fmt_est,
    less,
)
from .rules import TOLERANCE, ClaimFn, _guard, _lower_ppl, _with

GELBERG = ("Gelberg, Eguchi, Akiba and Cetin (2026), Extending the Context of Pretrained LLMs "
           "by Dropping Their Positional Embeddings, ICLR")


def drope_keeps_rope_quality(r: Runs) -> tuple[str, str]:
    """drope's ppl(L) is not above 1.10 x rope's ppl(L) beyond the noise."""
    drope, rope = r.ppl_est("drope", r.train_len), r.ppl_est("rope", r.train_len)
    miss = _missing((f"drope@{r.train_len}", drope), (f"rope@{r.train_len}", rope))
    if miss:
        return NOT_TESTED, miss
    bar = replace(rope, mean=TOLERANCE * rope.mean, spread=TOLERANCE * rope.spread,
                  samples=None if rope.samples is None else TOLERANCE * rope.samples)
    text = (f"at {r.train_len}: drope ppl {fmt_est(drope)} vs 1.10 x rope {fmt_est(bar)} "
            f"(rope {fmt_est(rope)})" + _with(difference_text(drope, bar)))
    guard = _guard(r, "drope", "rope")
    return (INCONCLUSIVE, f"{guard}; {text}") if guard else (_flip(less(bar, drope)), text)


def drope_beats_yarn(r: Runs) -> tuple[str, str]:
    label = r.scaled("yarn")
    if label is None:
        return NOT_TESTED, "missing: a rope+yarn:F run"
    return _lower_ppl(r, "drope", label, r.probe, ("drope", "rope"))


DROPE_CLAIMS: tuple[tuple[str, str, str, ClaimFn], ...] = (
    ("DroPE keeps RoPE's quality within the training length",
     f"{GELBERG}, abstract: DroPE adapts pretrained LMs \"without compromising their "
     "capabilities in the original training context\" (their in-context benchmark tables "
     "are not quoted here: they could not be checked); the lab drops RoPE after 3/4 of its "
     "steps, the paper recalibrates for a small fraction of the pretraining tokens",
     "drope ppl(L) <= 1.10 x rope ppl(L)", drope_keeps_rope_quality),
    ("DroPE beats RoPE with YaRN past the training length",
     f"{GELBERG}, Fig. 1: needle-in-a-haystack retrieval at 2x the training context with no "
     "long-context training, 28-42 % for DroPE against 0-22 % for RoPE with PI, NTK and "
     "YaRN (the perplexity rule at the probe length is this lab's reading)",
     "drope ppl(P) < rope+yarn:F ppl(P)", drope_beats_yarn),
)
