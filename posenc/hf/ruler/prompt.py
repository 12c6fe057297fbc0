"""What every RULER family builds from: the text (haystack tokens and a word list drawn from
it), one sample's token ids and references, and the token-level helpers that fit a prompt to
a length.

A sample's prompt plus its generation budget fits the requested length, as RULER's
``max_seq_length`` counts the prompt and the tokens to generate (Hsieh et al. 2024, Sec. 3).
Prompts are built from separately tokenized pieces (as the arena's needles are), so a needle
inserted into the haystack keeps its own tokens.
"""

from __future__ import annotations

import random
import re
import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ...errors import UserError
from ..arena_tasks import Haystack

#: RULER's needle depths: 40 evenly spaced percentages from 0 to 100, drawn without replacement
DEPTHS = tuple(round(100 * i / 39) / 100 for i in range(40))
#: words shorter than this are left out of the word list (they occur inside other words too)
MIN_WORD = 4


@dataclass(frozen=True)
class RulerSample:
    """One prompt (token ids, generation budget included in its length) and what answers it.

    ids: prompt token ids, ending with the answer prefix; references: the strings the
    prediction must contain (scored by ``metric`` of :mod:`.scoring`); max_new: the tokens
    generated at most."""

    ids: tuple[int, ...]
    references: tuple[str, ...]
    max_new: int
    metric: str = "string_match_all"


@dataclass(frozen=True)
class RulerText:
    """The text the families build from: the haystack (token stream of the documents) and its
    distinct lowercase words of at least :data:`MIN_WORD` letters, sorted."""

    haystack: Haystack
    words: tuple[str, ...]

    @classmethod
    def of(cls, tokenizer: Any, documents: Sequence[str], haystack: Haystack | None = None
           ) -> RulerText:
        """From ``documents`` (``haystack``: their token stream, if already made)."""
        words = sorted({w.lower() for doc in documents for w in re.findall(r"[A-Za-z]+", doc)
                        if len(w) >= MIN_WORD})
        return cls(haystack or Haystack.of(tokenizer, documents), tuple(words))

    def distinct_words(self, rng: random.Random, n: int) -> list[str]:
        """``n`` distinct words in random order: from the text's words, and beyond them
        random six-letter words (as RULER falls back to a larger list)."""
        if n <= len(self.words):
            return rng.sample(self.words, n)
        chosen, seen = list(self.words), set(self.words)
        rng.shuffle(chosen)
        while len(chosen) < n:
            word = "".join(rng.choices(string.ascii_lowercase, k=6))
            if word not in seen:
                seen.add(word)
                chosen.append(word)
        return chosen


def token_ids(tokenizer: Any, text: str) -> list[int]:
    """``text``'s token ids without special tokens."""
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def start_ids(tokenizer: Any) -> list[int]:
    """The tokenizer's own start tokens (a BOS where it adds one)."""
    with_special = list(tokenizer("a")["input_ids"])
    plain = token_ids(tokenizer, "a")
    return with_special[:len(with_special) - len(plain)] \
        if with_special[-len(plain):] == plain else []


def too_short(family: str, length: int, fixed: int) -> UserError:
    """The refusal when ``length`` leaves no room next to ``fixed`` tokens."""
    return UserError(f"RULER {family} needs more than {fixed} tokens (prompt without filler "
                     f"and answer budget); length {length} is too short")


def insert_at_depths(hay: list[int], pieces: Sequence[list[int]], rng: random.Random
                     ) -> list[int]:
    """``hay`` with ``pieces`` inserted in order at depths drawn from :data:`DEPTHS` without
    replacement (sorted, so pieces keep their order)."""
    cuts = sorted(round(d * len(hay)) for d in rng.sample(DEPTHS, len(pieces)))
    out, last = [], 0
    for cut, piece in zip(cuts, pieces):
        out += hay[last:cut] + piece
        last = cut
    return out + hay[last:]


def largest_fitting(build: Callable[[int], list[int]], room: int, low: int) -> int:
    """The largest ``n >= low`` whose ``build(n)`` has at most ``room`` tokens (token counts
    grow with ``n``), or ``low - 1`` when even ``low`` does not fit."""
    if len(build(low)) > room:
        return low - 1
    hi = low
    while len(build(hi * 2)) <= room:
        hi *= 2
    lo, hi = hi, hi * 2          # build(lo) fits, build(hi) does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if len(build(mid)) <= room else (lo, mid)
    return lo
