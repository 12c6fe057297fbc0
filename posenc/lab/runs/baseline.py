"""The unigram baseline: what a model that ignores context scores, and whether a run learned.

A unigram model predicts every token from its frequency in the training split (add-one
smoothed over the vocabulary). A trained run whose in-length perplexity is not clearly below
the unigram perplexity on the same held-out tokens has not learned to use context, and no
claim is decided from it.
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import UserError

#: a run has learned when ppl(L) <= LEARNED_FRACTION x the unigram perplexity
LEARNED_FRACTION = 0.7


def unigram_ppl(train_tokens, test_tokens, vocab_size: int) -> float:
    """Perplexity on ``test_tokens`` of add-one-smoothed unigram counts from ``train_tokens``."""
    train = np.asarray(train_tokens).astype(np.int64, copy=False)
    test = np.asarray(test_tokens).astype(np.int64, copy=False)
    if test.size == 0:
        raise UserError("the unigram baseline needs at least one test token")
    counts = np.bincount(train, minlength=vocab_size).astype(float) + 1.0
    logp = np.log(counts / counts.sum())
    return float(math.exp(-logp[test].mean()))


def baseline_entry(train_tokens, test_tokens, vocab_size: int, max_tokens: int) -> dict:
    """results.json's ``baseline``: the unigram perplexity on the first ``max_tokens`` test
    tokens (the stretch every evaluation length scores)."""
    test = np.asarray(test_tokens[:max_tokens])
    return {"unigram_ppl": unigram_ppl(train_tokens, test, vocab_size),
            "tokens": int(test.size), "learned_fraction": LEARNED_FRACTION}


def has_learned(ppl_at_train_len: float | None, unigram: float | None) -> bool | None:
    """Whether a run's in-length perplexity is clearly below the unigram baseline (None: not
    known, a number is missing)."""
    if ppl_at_train_len is None or unigram is None or not math.isfinite(unigram):
        return None
    return math.isfinite(ppl_at_train_len) and ppl_at_train_len <= LEARNED_FRACTION * unigram
