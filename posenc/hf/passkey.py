"""Passkey retrieval (Mohtashami & Jaggi 2023; used by the PI and YaRN papers).

A random number is hidden at a chosen depth inside repeated filler text; the model must say
it after "What is the pass key? The pass key is". The prompt has exactly ``length`` tokens
(answer included). A trial is correct when greedy decoding would produce every answer token:
one teacher-forced forward, checking the argmax at each answer position, which equals greedy
decoding of the answer without generating.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..errors import UserError
from .measure import check_memory

INTRO = ("There is an important info hidden inside a lot of irrelevant text. Find it and "
         "memorize it. I will quiz you about the important information there.\n")
FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back " \
         "again. "
NEEDLE = "The pass key is {key}. Remember it. {key} is the pass key. "
QUESTION = "What is the pass key? The pass key is"


@dataclass(frozen=True)
class PasskeyPrompt:
    """Token ids of one trial; the last ``n_answer`` ids are the answer."""

    ids: tuple[int, ...]
    n_answer: int
    key: str
    depth: float
    needle_start: int          # token index where the needle begins


def _ids(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def min_length(tokenizer: Any) -> int:
    """The shortest passkey prompt (no filler) for this tokenizer, in tokens."""
    return len(build_prompt(tokenizer, None, 0.0, "12345").ids)


def build_prompt(tokenizer: Any, length: int | None, depth: float, key: str) -> PasskeyPrompt:
    """A prompt of exactly ``length`` tokens with the needle at ``depth`` (0 = start of the
    filler, 1 = just before the question); ``length=None``: no filler."""
    if not 0.0 <= depth <= 1.0:
        raise UserError(f"passkey depth must be in [0, 1], got {depth!r}")
    if not key.isdigit():
        raise UserError(f"passkey must be digits, got {key!r}")
    intro = list(tokenizer(INTRO)["input_ids"])       # with the tokenizer's own BOS, if any
    filler = _ids(tokenizer, FILLER)
    needle = _ids(tokenizer, NEEDLE.format(key=key))
    question, answer = _ids(tokenizer, QUESTION), _ids(tokenizer, " " + key)
    fixed = len(intro) + len(needle) + len(question) + len(answer)
    room = 0 if length is None else length - fixed
    if room < 0:
        raise UserError(f"passkey length {length} is shorter than the prompt without filler "
                         f"({fixed} tokens)")
    blocks, extra = divmod(room, len(filler))
    before = round(depth * blocks)
    hay_before = filler * before
    hay_after = filler * (blocks - before) + filler[:extra]
    ids = intro + hay_before + needle + hay_after + question + answer
    return PasskeyPrompt(tuple(ids), len(answer), key, depth, len(intro) + len(hay_before))


@torch.no_grad()
def passkey_correct(model: nn.Module, prompt: PasskeyPrompt) -> bool:
    """True when the model's greedy continuation of the question is the answer."""
    device = next(model.parameters()).device
    ids = torch.tensor(prompt.ids, dtype=torch.long, device=device)[None]     # (1, T)
    n = prompt.n_answer
    logits = model(input_ids=ids[:, :-1], use_cache=False, logits_to_keep=n).logits
    return bool((logits[0].argmax(-1) == ids[0, -n:]).all())


@dataclass(frozen=True)
class PasskeyGrid:
    """Accuracy[d][l] at depth ``depths[d]`` and length ``lengths[l]`` over ``trials`` keys."""

    lengths: tuple[int, ...]
    depths: tuple[float, ...]
    trials: int
    accuracy: tuple[tuple[float, ...], ...]

    def mean(self) -> float:
        cells = [a for row in self.accuracy for a in row]
        return sum(cells) / len(cells)

    def by_length(self) -> dict[int, float]:
        return {n: sum(row[j] for row in self.accuracy) / len(self.depths)
                for j, n in enumerate(self.lengths)}


def passkey_grid(model: nn.Module, tokenizer: Any, lengths: Sequence[int],
                 depths: Sequence[float], trials: int = 3, seed: int = 0,
                 progress: Callable[[int], None] | None = None,
                 memory_limit: int | None = None,
                 done: Mapping[str, float] | None = None,
                 on_cell: Callable[[str, float], None] | None = None) -> PasskeyGrid:
    """Passkey accuracy on a grid of lengths x depths, ``trials`` random 5-digit keys per cell.

    The keys depend only on ``seed``, the cell and the trial number, so every method sees the
    same prompts. ``progress`` is called with 1 after each trial, ``on_cell("i:j", accuracy)``
    after each cell (depth i, length j); cells in ``done`` are taken from it, not measured.
    """
    if trials < 1:
        raise UserError(f"passkey trials must be >= 1, got {trials}")
    for length in lengths:
        check_memory(model.config, length, next(model.parameters()).dtype, memory_limit,
                     next(model.parameters()).device)
    acc = []
    for i, depth in enumerate(depths):
        row = []
        for j, length in enumerate(lengths):
            if done and f"{i}:{j}" in done:
                row.append(float(done[f"{i}:{j}"]))
                if progress is not None:
                    progress(trials)
                continue
            row.append(passkey_cell(model, tokenizer, length, depth, (i, j), trials, seed,
                                    progress))
            if on_cell is not None:
                on_cell(f"{i}:{j}", row[-1])
        acc.append(tuple(row))
    return PasskeyGrid(tuple(lengths), tuple(float(d) for d in depths), trials, tuple(acc))


def passkey_cell(model: nn.Module, tokenizer: Any, length: int, depth: float,
                 cell: tuple[int, int], trials: int, seed: int = 0,
                 progress: Callable[[int], None] | None = None) -> float:
    """Accuracy of one cell of :func:`passkey_grid`: ``trials`` keys at ``length`` tokens and
    ``depth``; ``cell`` = (depth index, length index) in the grid picks the keys, so a cell
    measured alone sees the keys it sees inside the grid."""
    if trials < 1:
        raise UserError(f"passkey trials must be >= 1, got {trials}")
    i, j = cell
    hits = 0
    for t in range(trials):
        rng = random.Random(f"{seed}:{i}:{j}:{t}")
        key = str(rng.randint(10000, 99999))
        hits += passkey_correct(model, build_prompt(tokenizer, length, depth, key))
        if progress is not None:
            progress(1)
    return hits / trials
