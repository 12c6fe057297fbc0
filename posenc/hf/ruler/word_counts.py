"""RULER's aggregation families (Hsieh et al. 2024, Sec. 3.3 "Aggregation"; the configurations
cwe and fwe of RULER's released scripts/synthetic.yaml): the model must count words over the
whole context.

- ``cwe`` (common words extraction): a numbered list of words of the text ("1. word 2. word
  ..."), 10 of them repeated 30 times and every other word 3 times (6 and 1 below 4096 tokens,
  where RULER shrinks the task), shuffled; the 10 common words must all be named. As in RULER,
  one solved example with 40 words (10 repeated 10 times, 30 three times; 20 words, 3 and 1
  below 4096) comes first.
- ``fwe`` (frequent words extraction): random 6-letter coded words drawn from a vocabulary of
  (length - budget) / 50 words, word k (1-based) repeated floor(N k^-2 / zeta(2)) times (a
  Zipf distribution with alpha = 2); the most frequent word is the noise "..." and the next
  three must all be named.

The number of distinct words (``cwe``) or of draws N (``fwe``) is the largest whose prompt
fits the length; the score is string match over all references.
"""

from __future__ import annotations

import math
import random
import string
from typing import Any

from .prompt import RulerSample, RulerText, largest_fitting, start_ids, token_ids, too_short

CWE_NEW, FWE_NEW = 120, 50
COMMON = 10
#: RULER shrinks the common-words task below this length (tokens)
SHORT = 4096
CWE_TEMPLATE = ("Below is a numbered list of words. In these words, some appear more often than "
                "others. Memorize the ones that appear most often.\n{context}\nQuestion: What "
                "are the 10 most common words in the above list? Answer: The top 10 words that "
                "appear most often in the list are:")
FWE_TEMPLATE = ("Read the following coded text and track the frequency of each coded word. "
                "Find the three most frequently appeared coded words. {context}\nQuestion: Do "
                "not provide any explanation. Please ignore the dots '....'. What are the three "
                "most frequently appeared words in the above coded text? Answer: According to "
                "the coded text above, the three most frequently appeared words are:")
ALPHA = 2.0
ZETA = math.pi ** 2 / 6               # zeta(2), the normaliser of the Zipf counts
NOISE_WORD = "..."


def _numbered(words: list[str]) -> str:
    return " ".join(f"{i + 1}. {w}" for i, w in enumerate(words))


def _word_list(text: RulerText, rng: random.Random, n: int, common: int, rare: int
               ) -> tuple[list[str], list[str]]:
    """(the shuffled list, its common words) of ``n`` distinct words."""
    words = text.distinct_words(rng, n)
    listed = words[:COMMON] * common + words[COMMON:] * rare
    rng.shuffle(listed)
    return listed, words[:COMMON]


def cwe_sample(family: str, tokenizer: Any, text: RulerText, length: int,
               rng: random.Random, index: int) -> RulerSample:
    """Sample ``index`` of common words extraction in ``length`` tokens."""
    short = length < SHORT
    shot, main = ((20, 3, 1), (6, 1)) if short else ((40, 10, 3), (30, 3))
    seed = rng.random()
    listed, answer = _word_list(text, random.Random(seed), shot[0], *shot[1:])
    example = CWE_TEMPLATE.format(context=_numbered(listed)) + " " + _numbered(answer) + "\n"
    head = start_ids(tokenizer) + token_ids(tokenizer, example)

    def build(n: int) -> list[int]:
        listed, _ = _word_list(text, random.Random(f"{seed}:{n}"), n, *main)
        return head + token_ids(tokenizer, CWE_TEMPLATE.format(context=_numbered(listed)))

    n = largest_fitting(build, length - CWE_NEW, COMMON + 1)
    if n <= COMMON:
        raise too_short(family, length, len(build(COMMON + 1)) + CWE_NEW)
    _, common = _word_list(text, random.Random(f"{seed}:{n}"), n, *main)
    return RulerSample(tuple(build(n)), tuple(common), CWE_NEW)


def zipf_counts(draws: int, vocab: int) -> list[int]:
    """How often each of ``vocab`` ranked words occurs among ``draws``: floor(draws k^-alpha /
    zeta(alpha)) for k = 1..vocab."""
    return [int(draws * k ** -ALPHA / ZETA) for k in range(1, vocab + 1)]


def coded_vocabulary(rng: random.Random, size: int) -> list[str]:
    """``size`` distinct random 6-letter words, the first replaced by the noise word."""
    vocab: list[str] = []
    seen: set[str] = set()
    while len(vocab) < size:
        word = "".join(rng.choices(string.ascii_lowercase, k=6))
        if word not in seen:
            seen.add(word)
            vocab.append(word)
    return [NOISE_WORD] + vocab[1:]


def fwe_sample(family: str, tokenizer: Any, text: RulerText, length: int,
               rng: random.Random, index: int) -> RulerSample:
    """Sample ``index`` of frequent words extraction in ``length`` tokens (``text`` is not
    used: the words are coded)."""
    vocab = coded_vocabulary(rng, max(5, (length - FWE_NEW) // 50))
    seed = rng.random()

    def build(draws: int) -> list[int]:
        words = [w for w, c in zip(vocab, zipf_counts(draws, len(vocab))) for _ in range(c)]
        random.Random(f"{seed}:{draws}").shuffle(words)
        return start_ids(tokenizer) + token_ids(tokenizer,
                                                FWE_TEMPLATE.format(context=" ".join(words)))

    # the three answers must each occur more often than the word ranked after them
    low = next(d for d in range(4, 10**6) if len(set(zipf_counts(d, 5)[1:])) == 4)
    draws = largest_fitting(build, length - FWE_NEW, low)
    if draws < low:
        raise too_short(family, length, len(build(low)) + FWE_NEW)
    return RulerSample(tuple(build(draws)), tuple(vocab[1:4]), FWE_NEW)
