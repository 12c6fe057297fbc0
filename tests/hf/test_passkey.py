"""Passkey prompts and their scoring by greedy decoding, on a tiny random Llama."""

from __future__ import annotations

import pytest
import torch

from tests.hf.helpers import (byte_bpe_tokenizer as _tokenizer, peaked_model as _model,
                              tiny_config as _config)

transformers = pytest.importorskip("transformers")

from posenc.hf.passkey import build_prompt, min_length, passkey_correct  # noqa: E402


def test_passkey_prompt_and_retrieval():
    tok = _tokenizer()
    prompt = build_prompt(tok, 300, 0.5, "48213")
    assert len(prompt.ids) == 300
    text = tok.decode(list(prompt.ids))
    assert text.endswith("What is the pass key? The pass key is 48213")
    assert text.count("48213") == 3
    assert 0.35 < prompt.needle_start / 300 < 0.65
    assert build_prompt(tok, 300, 0.0, "1").needle_start < build_prompt(tok, 300, 1.0, "1") \
        .needle_start
    assert min_length(tok) < 300
    with pytest.raises(ValueError, match="shorter than the prompt"):
        build_prompt(tok, min_length(tok) - 1, 0.5, "12345")
    model = _model(_config())
    model.resize_token_embeddings(len(tok))
    assert passkey_correct(model, prompt) in (True, False)


def test_passkey_scoring_is_greedy_decoding():
    """A model that copies the previous-but-five token gets the answer iff greedy does."""
    tok = _tokenizer()
    prompt = build_prompt(tok, 200, 0.5, "777")
    model = _model(_config())
    model.resize_token_embeddings(len(tok))
    ids = torch.tensor(prompt.ids)[None]
    n = prompt.n_answer
    with torch.no_grad():
        out = model.generate(ids[:, :-n], max_new_tokens=n, do_sample=False)
    assert passkey_correct(model, prompt) == bool((out[0, -n:] == ids[0, -n:]).all())
