"""Choosing the next token: sampling arguments checked, reproducible with a generator,
top-k respected."""

from __future__ import annotations

import pytest
import torch

from posenc import LMConfig, TransformerLM
from posenc.models.generate import select_next

from tests.helpers import raises_one_line as _raises

pytestmark = pytest.mark.usefixtures("single_thread")

VOCAB = 16


def _learned_model(max_len=8):
    return TransformerLM(LMConfig(vocab_size=16, d_model=16, n_heads=2, n_layers=1,
                                  max_len=max_len, pe="learned")).eval()


@pytest.mark.parametrize("kwargs,message", [
    ({"temperature": "1"}, "temperature must be a number"),
    ({"temperature": float("nan")}, "temperature must be a number"),
    ({"temperature": 1.0, "top_k": True}, "top_k must be a positive int"),
])
def test_sampling_arguments_are_checked(kwargs, message):
    _raises(message, select_next, torch.randn(1, VOCAB), **kwargs)


@pytest.mark.parametrize("kwargs,message", [
    ({"max_new_tokens": -1}, "max_new_tokens"),
    ({"max_new_tokens": 2, "temperature": -0.5}, "temperature"),
    ({"max_new_tokens": 2, "temperature": 1.0, "top_k": 0}, "top_k"),
])
def test_bad_generation_arguments(kwargs, message):
    model = _learned_model()
    with pytest.raises(ValueError, match=message):
        model.generate(torch.zeros(1, 2, dtype=torch.long), **kwargs)


@torch.no_grad()
def test_sampling_is_reproducible_and_respects_top_k(tiny_lm):
    model = tiny_lm("rope")
    prompt = torch.randint(0, 48, (1, 4))
    runs = [model.generate(prompt, 8, temperature=1.0, top_k=3,
                           generator=torch.Generator().manual_seed(5)) for _ in range(2)]
    assert torch.equal(runs[0], runs[1])
    ids = runs[0]
    logits = model(ids[:, :-1])[0, 3:]                      # logits that chose tokens 4..11
    top3 = logits.topk(3, dim=-1).indices
    assert all(int(t) in top3[i].tolist() for i, t in enumerate(ids[0, 4:]))
