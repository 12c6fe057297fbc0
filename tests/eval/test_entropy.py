"""Attention entropy: log n for uniform attention and for a model whose queries see
nothing, lengths past a learned table."""

import numpy as np
import pytest
import torch

from posenc.eval.entropy import attention_entropy, entropy_at_lengths, uniform_tail_entropy
from tests.eval.helpers import stream, tiny


def test_entropy_of_uniform_attention_is_log_n():
    n = 12
    weights = torch.tril(torch.ones(n, n))
    weights = weights / weights.sum(-1, keepdim=True)            # uniform over visible keys
    torch.testing.assert_close(attention_entropy(weights[None, None])[0, 0],
                               torch.log(torch.arange(1, n + 1, dtype=torch.float32)))
    one_hot = torch.eye(n)
    torch.testing.assert_close(attention_entropy(one_hot), torch.zeros(n))


def test_model_with_blind_queries_has_uniform_entropy():
    model = tiny("nope")
    with torch.no_grad():
        for block in model.blocks:                 # q = k = 0: every visible key weighs 1/n
            block.attn.qkv_proj.weight[:64] = 0
    results = entropy_at_lengths(model, stream(200), [16, 64], eval_windows=2)
    for r in results:
        assert r.tail == pytest.approx(uniform_tail_entropy(r.length), rel=1e-5)
        assert r.mean == pytest.approx(
            float(np.mean(np.log(np.arange(1, r.length + 1)))), rel=1e-5)


def test_entropy_marks_learned_table():
    results = entropy_at_lengths(tiny("learned"), stream(100), [16, 32])
    assert results[0].mean is not None and results[1].note.startswith("n/a")


def test_kept_tail_queries_average_to_the_tail_and_leave_it_unchanged():
    model = tiny("rope")
    plain = entropy_at_lengths(model, stream(200), [16, 32], eval_windows=2)
    kept = entropy_at_lengths(model, stream(200), [16, 32], eval_windows=2, keep_queries=True)
    for a, b in zip(plain, kept):
        assert (a.tail, a.mean) == (b.tail, b.mean) and a.tail_queries is None
        assert len(b.tail_queries) == 2 * (b.length // 4)
        assert float(np.mean(b.tail_queries)) == pytest.approx(b.tail, rel=1e-5)
        assert "tail_queries" not in a.to_dict() and len(b.to_dict()["tail_queries"]) == 2 * (
            b.length // 4)
