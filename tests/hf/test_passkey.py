"""Passkey prompts and their scoring by greedy decoding, on a tiny random Llama."""

from __future__ import annotations

import pytest
import torch

from tests.hf.helpers import byte_bpe_tokenizer as _tokenizer
from tests.hf.helpers import peaked_model as _model
from tests.hf.helpers import tiny_config as _config

transformers = pytest.importorskip("transformers")

from posenc.hf.passkey import build_prompt, min_length, passkey_cell, passkey_correct, passkey_grid  # noqa: E402


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


def test_a_cell_measured_alone_sees_the_keys_of_its_grid(monkeypatch):
    """The keys depend on the cell's place in the grid, so a study measuring one cell per
    unit scores the prompts passkey_grid scores."""
    from posenc.hf import passkey
    seen = []
    monkeypatch.setattr(passkey, "passkey_correct",
                        lambda model, prompt: seen.append(prompt.key) or True)
    model, tok = _model(_config()), _tokenizer()
    grid = passkey_grid(model, tok, [250, 300], [0.0, 1.0], trials=2, seed=7)
    from_grid, seen[:] = list(seen), []
    for i, depth in enumerate([0.0, 1.0]):
        for j, length in enumerate([250, 300]):
            assert passkey_cell(model, tok, length, depth, (i, j), 2, 7) == 1.0
    assert seen == from_grid and len(set(seen)) == 8 and grid.mean() == 1.0
