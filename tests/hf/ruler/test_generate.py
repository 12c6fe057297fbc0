"""Greedy decoding with the KV cache equals transformers' own greedy ``generate`` on a tiny
Llama, and stops as soon as the answer already scores 1."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from posenc.hf.extend import extend, restore  # noqa: E402
from posenc.hf.ruler.generate import greedy_answer  # noqa: E402
from tests.hf.helpers import byte_bpe_tokenizer, peaked_model, tiny_config  # noqa: E402


@pytest.fixture(scope="module")
def model_and_tok():
    tok = byte_bpe_tokenizer()
    config = tiny_config()
    config.vocab_size = len(tok)
    config.eos_token_id = None
    return peaked_model(config), tok


def _reference(model, tok, prompt, n):
    out = model.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False,
                         eos_token_id=None, pad_token_id=0)
    return tok.decode(out[0, len(prompt):].tolist(), skip_special_tokens=True)


@pytest.mark.parametrize("method", ["none", "self_extend"])
def test_greedy_answer_is_transformers_greedy_generation(model_and_tok, method):
    model, tok = model_and_tok
    prompt = tok("The special magic numbers for tapping-lamp are", add_special_tokens=False
                 )["input_ids"] * 3
    extend(model, method, None, 16)
    try:
        text, score = greedy_answer(model, tok, prompt, 12, lambda said: 0.0)
        expected = _reference(model, tok, prompt, 12)
    finally:
        restore(model)
    assert text == expected and len(tok(text, add_special_tokens=False)["input_ids"]) >= 10
    assert score == 0.0


def test_decoding_stops_once_the_answer_scores_one(model_and_tok):
    model, tok = model_and_tok
    prompt = tok("VAR ABCDE = 12345", add_special_tokens=False)["input_ids"]
    full = _reference(model, tok, prompt, 12)
    target = full[:4]
    text, score = greedy_answer(model, tok, prompt, 12, lambda said: float(target in said))
    assert score == 1.0 and target in text and full.startswith(text) and len(text) < len(full)
