"""RULER's synthetic task families for the arena (Hsieh, Sun, Kriman, Acharya, Rekesh, Jia,
Zhang & Ginsburg 2024, "RULER: What's the Real Context Size of Your Long-Context Language
Models?", COLM 2024; the tasks of Sec. 3, with the prompt templates, generation budgets,
configurations and string-match scores of RULER's released code, github.com/NVIDIA/RULER:
scripts/synthetic.yaml, scripts/data/synthetic/constants.py and
scripts/eval/synthetic/constants.py), built offline: the needles' haystack and the common
words come from the arena's text (the Paul Graham essays by default, as RULER's essay
haystack), variable tracking uses RULER's noise sentence, frequent words are random coded
words.

- :mod:`.needles`: ``multikey``, ``multivalue``, ``multiquery`` (MK-, MV-, MQ-NIAH);
- :mod:`.variable_tracking`: ``vt``;
- :mod:`.word_counts`: ``cwe`` and ``fwe``;
- :mod:`.scoring`: string_match_all / string_match_part; :mod:`.generate`: greedy decoding.

:func:`ruler_sample` builds sample ``index`` of a family at a length; it depends only on the
seed, the family, the length and the index, so every method answers the same prompts.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...errors import UserError
from .needles import needle_sample
from .prompt import RulerSample, RulerText
from .variable_tracking import vt_sample
from .word_counts import cwe_sample, fwe_sample


@dataclass(frozen=True)
class Family:
    """One RULER task family: its configuration's name in RULER's
    scripts/synthetic.yaml and how a sample is built."""

    title: str
    ruler_name: str
    build: Callable[[str, Any, RulerText, int, random.Random, int], RulerSample]


FAMILIES: dict[str, Family] = {
    "multikey": Family("multi-key needles (MK-NIAH)", "niah_multikey_1", needle_sample),
    "multivalue": Family("multi-value needles (MV-NIAH)", "niah_multivalue", needle_sample),
    "multiquery": Family("multi-query needles (MQ-NIAH)", "niah_multiquery", needle_sample),
    "vt": Family("variable tracking (VT)", "vt", vt_sample),
    "cwe": Family("common words extraction (CWE)", "cwe", cwe_sample),
    "fwe": Family("frequent words extraction (FWE)", "fwe", fwe_sample),
}
#: the published source every RULER verdict cites
SOURCE = ("Hsieh et al. 2024, RULER: What's the Real Context Size of Your Long-Context "
          "Language Models?, COLM 2024, Sec. 3")


def check_families(names: tuple[str, ...]) -> None:
    """UserError naming the valid families when ``names`` holds an unknown or repeated one."""
    for name in names:
        if name not in FAMILIES:
            raise UserError(f"unknown RULER task {name!r}; valid tasks: {', '.join(FAMILIES)}")
    if len(set(names)) != len(names):
        raise UserError(f"RULER tasks are repeated: {', '.join(names)}")


def ruler_sample(family: str, tokenizer: Any, text: RulerText, length: int, index: int,
                 seed: int = 0) -> RulerSample:
    """Sample ``index`` of ``family`` in ``length`` tokens (prompt plus answer budget)."""
    check_families((family,))
    rng = random.Random(f"{seed}:ruler:{family}:{length}:{index}")
    return FAMILIES[family].build(family, tokenizer, text, length, rng, index)


__all__ = ["FAMILIES", "SOURCE", "Family", "RulerSample", "RulerText", "check_families",
           "ruler_sample"]
