"""RULER's needle families on the essays (Hsieh et al. 2024, Sec. 3.1 "Retrieval: Needle-in-a-
haystack"; the configurations niah_multikey_1, niah_multivalue and niah_multiquery of RULER's
released scripts/synthetic.yaml).

Each needle is "One of the special magic numbers for KEY is: VALUE." with a key of two words
of the text joined by a hyphen (RULER joins an adjective and a noun) and a 7-digit value; the
needles are shuffled and inserted at depths drawn from RULER's 40 depths into a haystack of
essay text that starts at document ``index`` (so samples also resample the text):

- ``multikey`` (MK-NIAH): 4 keys with one value each; one key is asked, the other three
  needles are distractors;
- ``multivalue`` (MV-NIAH): one key with 4 values; every value must be recalled;
- ``multiquery`` (MQ-NIAH): 4 keys with one value each, all 4 asked at once.

The prompt is RULER's NIAH template (singular when one value is asked) ending with its answer
prefix; the score is string match over all references.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from .prompt import RulerSample, RulerText, insert_at_depths, start_ids, token_ids, too_short

#: RULER's generation budget for its needle tasks (tokens)
MAX_NEW = 128
NEEDLE = " One of the special magic numbers for {key} is: {value}. "
HEAD = ("{some} special magic {numbers} {are} hidden within the following text. Make sure to "
        "memorize it. I will quiz you about the {numbers} afterwards.\n")
QUESTION = ("\nWhat {are_all} the special magic {numbers} for {query} mentioned in the "
            "provided text? The special magic {numbers} for {query} mentioned in the provided "
            "text {are}")


@dataclass(frozen=True)
class NeedleShape:
    """How many keys are in the text, values per key, and keys asked."""

    keys: int
    values: int
    queries: int


SHAPES = {"multikey": NeedleShape(4, 1, 1), "multivalue": NeedleShape(1, 4, 1),
          "multiquery": NeedleShape(4, 1, 4)}


def _key(rng: random.Random, text: RulerText) -> str:
    first, second = rng.sample(text.words, 2)
    return f"{first}-{second}"


def needle_sample(family: str, tokenizer: Any, text: RulerText, length: int,
                  rng: random.Random, index: int) -> RulerSample:
    """Sample ``index`` of needle family ``family`` in ``length`` tokens."""
    shape = SHAPES[family]
    keys: list[str] = []
    while len(keys) < shape.keys:
        key = _key(rng, text)
        keys += [] if key in keys else [key]
    values = {k: [str(rng.randint(10**6, 10**7 - 1)) for _ in range(shape.values)]
              for k in keys}
    needles = [NEEDLE.format(key=k, value=v) for k in keys for v in values[k]]
    rng.shuffle(needles)
    asked = rng.sample(keys, shape.queries)
    query = asked[0] if len(asked) == 1 else ", ".join(asked[:-1]) + ", and " + asked[-1]
    one = shape.queries * shape.values == 1
    words = dict(some="A" if one else "Some", numbers="number" if one else "numbers",
                 are="is" if one else "are", are_all="is" if one else "are all")
    head = start_ids(tokenizer) + token_ids(tokenizer, HEAD.format(**words))
    tail = token_ids(tokenizer, QUESTION.format(query=query, **words))
    pieces = [token_ids(tokenizer, n) for n in needles]
    fixed = len(head) + len(tail) + sum(map(len, pieces)) + MAX_NEW
    if fixed >= length:
        raise too_short(family, length, fixed)
    hay = text.haystack.stretch(index, length - fixed)
    ids = head + insert_at_depths(hay, pieces, rng) + tail
    return RulerSample(tuple(ids), tuple(v for k in asked for v in values[k]), MAX_NEW)
