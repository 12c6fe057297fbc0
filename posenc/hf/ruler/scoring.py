"""RULER's scores of one generated answer (Hsieh et al. 2024, "RULER: What's the Real Context
Size of Your Long-Context Language Models?", COLM 2024; RULER's released
scripts/eval/synthetic/constants.py).

A prediction is the model's greedy continuation, stripped, with control characters turned into
line breaks. A reference is found when it occurs in the prediction, ignoring case. RULER scores
every synthetic task (needles, variable tracking, common and frequent words) by
:func:`string_match_all`, the share of references found, and its QA tasks by
:func:`string_match_part`, 1 when any reference is found. Both return a score in [0, 1] per
sample; RULER's task score is their mean x 100.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

_CONTROL = re.compile(r"[\x00-\x1f]")


def clean_prediction(text: str) -> str:
    """``text`` stripped, control characters replaced by line breaks (RULER's evaluation)."""
    return _CONTROL.sub("\n", text.strip()).strip()


def _found(prediction: str, references: Sequence[str]) -> list[bool]:
    if not references:
        raise ValueError("a sample needs at least one reference")
    said = clean_prediction(prediction).lower()
    return [ref.lower() in said for ref in references]


def string_match_all(prediction: str, references: Sequence[str]) -> float:
    """The share of ``references`` that occur in ``prediction`` (all must, for a score of 1)."""
    found = _found(prediction, references)
    return sum(found) / len(found)


def string_match_part(prediction: str, references: Sequence[str]) -> float:
    """1.0 when any of ``references`` occurs in ``prediction``, else 0.0."""
    return float(any(_found(prediction, references)))


#: metric name -> function (prediction, references) -> score in [0, 1]
METRICS: dict[str, Callable[[str, Sequence[str]], float]] = {
    "string_match_all": string_match_all, "string_match_part": string_match_part}
