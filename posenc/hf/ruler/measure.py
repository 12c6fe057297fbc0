"""One arena cell of a RULER family: ``samples`` prompts at one length, each answered by
greedy decoding and scored as RULER scores the family."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

from . import ruler_sample
from .generate import greedy_answer
from .prompt import RulerText
from .scoring import METRICS


def ruler_scores(model: nn.Module, tokenizer: Any, text: RulerText, family: str, length: int,
                 samples: int, seed: int = 0,
                 progress: Callable[[int], None] | None = None) -> list[float]:
    """The score in [0, 1] of each of samples 0..``samples``-1 of ``family`` at ``length``."""
    scores = []
    for index in range(samples):
        sample = ruler_sample(family, tokenizer, text, length, index, seed)
        metric = METRICS[sample.metric]
        _, score = greedy_answer(model, tokenizer, sample.ids, sample.max_new,
                                 lambda said: metric(said, sample.references))
        scores.append(score)
        if progress is not None:
            progress(1)
    return scores
