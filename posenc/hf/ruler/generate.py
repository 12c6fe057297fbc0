"""Greedy decoding of a RULER answer with the KV cache (one prefill, then one token a step).

Decoding stops at the end-of-sequence token, after ``max_new`` tokens, or as soon as the text
so far already scores 1: RULER's scores only ask whether each reference occurs in the
prediction, so more text cannot change a full score, and stopping there gives the score
decoding to ``max_new`` tokens would (it saves most steps on a model that answers well).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn


@torch.no_grad()
def greedy_answer(model: nn.Module, tokenizer: Any, prompt: Sequence[int], max_new: int,
                  score: Callable[[str], float]) -> tuple[str, float]:
    """(the decoded continuation, its score) of ``prompt`` (token ids) under greedy decoding
    of at most ``max_new`` tokens; ``score(text)`` scores a continuation in [0, 1]."""
    device = next(model.parameters()).device
    ids = torch.tensor(list(prompt), dtype=torch.long, device=device)[None]     # (1, T)
    eos = _eos_ids(model, tokenizer)
    cache = _new_cache(model)
    out = model(input_ids=ids, use_cache=True, logits_to_keep=1, **cache)
    new: list[int] = []
    text, value = "", 0.0
    for _ in range(max_new):
        token = int(out.logits[0, -1].argmax())
        if token in eos:
            break
        new.append(token)
        text = tokenizer.decode(new, skip_special_tokens=True)
        value = score(text)
        if value >= 1.0:
            break
        step = torch.tensor([[token]], dtype=torch.long, device=device)          # (1, 1)
        out = model(input_ids=step, use_cache=True, **cache)
    return text, value


def _new_cache(model: nn.Module) -> dict[str, Any]:
    """An empty KV cache under the keyword the model's forward takes (``cache`` in
    transformers 5, ``past_key_values`` before)."""
    from transformers import DynamicCache

    name = "cache" if "cache" in inspect.signature(model.forward).parameters \
        else "past_key_values"
    return {name: DynamicCache()}


def _eos_ids(model: nn.Module, tokenizer: Any) -> set[int]:
    """The end-of-sequence ids of the tokenizer and of the model's generation config."""
    config = getattr(model, "generation_config", None)
    found: set[int] = set()
    for ids in (tokenizer.eos_token_id, getattr(config, "eos_token_id", None)):
        found.update(ids if isinstance(ids, (list, tuple)) else [] if ids is None else [ids])
    return found
