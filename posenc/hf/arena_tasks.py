"""The arena's retrieval tasks on real text: needles in a haystack of essays, and passkeys.

Needle in a haystack (Kamradt 2023; the depth x length picture of Gemini 1.5 and Llama 3.1
reports): a sentence with a random fact, "The secret ingredient of the Zorvan stew is
saffron.", is put at a relative ``depth`` of a haystack of real text (0 = its start, 1 = just
before the question) and the prompt ends with "What is the secret ingredient of the Zorvan
stew? The secret ingredient of the Zorvan stew is". A needle is found when greedy decoding
continues with exactly the ingredient's tokens; as in :mod:`posenc.hf.passkey` this is one
teacher-forced forward checking the argmax at every answer position, which equals greedy
decoding of the answer.

Needle ``t`` (0, 1, ...) is the same fact at every length, depth and method, and its haystack
starts at the beginning of document ``t`` of the text (cycling through the documents), so
resampling needles also resamples the text around them (the arena's bootstrap). Passkey trials
reuse :func:`posenc.hf.passkey.build_prompt` with the keys :func:`posenc.hf.passkey.passkey_cell`
draws, one result per trial.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from ..errors import UserError
from .passkey import build_prompt, passkey_correct

DISHES = ("Zorvan stew", "Quillet pie", "Marrowind soup", "Tessaly bread", "Orkney tart",
          "Vellum cake", "Brasko curry", "Halden pudding", "Syrren salad", "Pellucid broth",
          "Krenner dumplings", "Ashgrove roast")
INGREDIENTS = ("saffron", "cardamom", "honey", "ginger", "walnuts", "lemon", "garlic",
               "cinnamon", "vanilla", "paprika", "mustard", "coconut", "basil", "almonds")
NEEDLE = " The secret ingredient of the {dish} is {ingredient}. "
QUESTION = "\n\nWhat is the secret ingredient of the {dish}? The secret ingredient of the " \
           "{dish} is"


@dataclass(frozen=True)
class Needle:
    """One fact: the dish named in the question and the ingredient that answers it."""

    dish: str
    ingredient: str


def needle_fact(index: int, seed: int = 0) -> Needle:
    """Needle ``index``'s fact; depends only on ``seed`` and ``index``."""
    rng = random.Random(f"{seed}:needle:{index}")
    return Needle(rng.choice(DISHES), rng.choice(INGREDIENTS))


@dataclass(frozen=True)
class Haystack:
    """Real text as one token stream: ``tokens`` (N,) and where each document starts."""

    tokens: Tensor
    starts: tuple[int, ...]

    @classmethod
    def of(cls, tokenizer: Any, documents: Sequence[str]) -> Haystack:
        """The documents tokenized and joined by blank lines."""
        ids: list[int] = []
        starts = []
        for doc in documents:
            starts.append(len(ids))
            ids.extend(tokenizer(doc.strip() + "\n\n", add_special_tokens=False)["input_ids"])
        return cls(torch.tensor(ids, dtype=torch.long), tuple(starts))

    def stretch(self, index: int, n: int) -> list[int]:
        """``n`` tokens from the start of document ``index`` (mod the number of documents),
        wrapping around the end of the stream."""
        if n <= 0:
            return []
        total = int(self.tokens.numel())
        start = self.starts[index % len(self.starts)]
        reps = (start + n + total - 1) // total
        stream = self.tokens.repeat(reps) if reps > 1 else self.tokens
        return stream[start:start + n].tolist()


@dataclass(frozen=True)
class NeedlePrompt:
    """Token ids of one needle trial; the last ``n_answer`` ids are the answer."""

    ids: tuple[int, ...]
    n_answer: int
    needle_start: int


def _ids(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def _bos(tokenizer: Any) -> list[int]:
    """The tokenizer's own start tokens (a BOS where it adds one), as passkey prompts have."""
    with_special = list(tokenizer("a")["input_ids"])
    plain = _ids(tokenizer, "a")
    return with_special[:len(with_special) - len(plain)] if with_special[-len(plain):] == plain \
        else []


def needle_prompt(tokenizer: Any, haystack: Haystack, length: int, depth: float, index: int,
                  seed: int = 0) -> NeedlePrompt:
    """A prompt of exactly ``length`` tokens: needle ``index`` at ``depth`` of a haystack that
    starts at document ``index``, then the question and the answer."""
    if not 0.0 <= depth <= 1.0:
        raise UserError(f"needle depth must be in [0, 1], got {depth!r}")
    bos, needle, question, answer = _parts(tokenizer, index, seed)
    room = length - len(bos) - len(needle) - len(question) - len(answer)
    if room < 0:
        raise UserError(f"needle length {length} is shorter than the prompt without haystack "
                        f"({length - room} tokens)")
    hay = haystack.stretch(index, room)
    cut = round(depth * room)
    ids = bos + hay[:cut] + needle + hay[cut:] + question + answer
    return NeedlePrompt(tuple(ids), len(answer), len(bos) + cut)


def _parts(tokenizer: Any, index: int, seed: int) -> tuple[list[int], ...]:
    """(start tokens, needle, question, answer) of needle ``index``."""
    fact = needle_fact(index, seed)
    return (_bos(tokenizer),
            _ids(tokenizer, NEEDLE.format(dish=fact.dish, ingredient=fact.ingredient)),
            _ids(tokenizer, QUESTION.format(dish=fact.dish)),
            _ids(tokenizer, " " + fact.ingredient))


def min_needle_length(tokenizer: Any, needles: int = 1, seed: int = 0) -> int:
    """The longest of the first ``needles`` prompts without haystack, in tokens."""
    return max(sum(len(p) for p in _parts(tokenizer, t, seed)) for t in range(needles))


@torch.no_grad()
def needle_hits(model: nn.Module, tokenizer: Any, haystack: Haystack, length: int,
                depth: float, needles: int, seed: int = 0,
                progress: Callable[[int], None] | None = None) -> list[int]:
    """1 or 0 for each of needles 0..``needles``-1 at ``length`` tokens and ``depth``."""
    hits = []
    for t in range(needles):
        prompt = needle_prompt(tokenizer, haystack, length, depth, t, seed)
        hits.append(int(_answers(model, prompt.ids, prompt.n_answer)))
        if progress is not None:
            progress(1)
    return hits


def _answers(model: nn.Module, ids_: Sequence[int], n: int) -> bool:
    device = next(model.parameters()).device
    ids = torch.tensor(ids_, dtype=torch.long, device=device)[None]          # (1, T)
    logits = model(input_ids=ids[:, :-1], use_cache=False, logits_to_keep=n).logits
    return bool((logits[0].argmax(-1) == ids[0, -n:]).all())


def passkey_hits(model: nn.Module, tokenizer: Any, length: int, depth: float,
                 cell: tuple[int, int], trials: int, seed: int = 0,
                 progress: Callable[[int], None] | None = None) -> list[int]:
    """1 or 0 for each passkey trial of ``cell`` (depth index, length index): the keys
    :func:`posenc.hf.passkey.passkey_cell` draws, one result per trial."""
    i, j = cell
    hits = []
    for t in range(trials):
        key = str(random.Random(f"{seed}:{i}:{j}:{t}").randint(10000, 99999))
        hits.append(int(passkey_correct(model, build_prompt(tokenizer, length, depth, key))))
        if progress is not None:
            progress(1)
    return hits
