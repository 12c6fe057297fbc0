"""Perplexity at evaluation lengths: a token budget, memory-mapped streams, lengths past a
declared position limit (n/a exactly where the forward raises), refusals no limit declares (a
note when asked), bad lengths."""

import numpy as np
import pytest
import torch

from posenc.encodings import list_encodings
from posenc.encodings.limits import PositionLimit
from posenc.eval.entropy import entropy_at_lengths
from posenc.eval.lengths import (
    NotEvaluated,
    not_served,
    note_reason,
    perplexity_at_lengths,
    position_limit,
)
from tests.eval.helpers import stream, tiny
from tests.helpers import context_options


def test_perplexity_at_lengths_limits_tokens_and_marks_learned_table():
    tokens = stream(400)
    results = perplexity_at_lengths(tiny("learned"), tokens, [32, 16], max_tokens=64)
    assert [r.length for r in results] == [16, 32]
    assert results[0].n_windows == 4 and results[0].ppl is not None
    assert results[1].ppl is None and results[1].value == "n/a (past learned table of 16)"
    assert results[1].skipped == NotEvaluated(PositionLimit(15, "learned", encoding="learned"))
    assert not_served(tiny("rope"), 10_000) is None and position_limit(tiny("rope")) is None


@pytest.mark.parametrize("pe", list_encodings())
def test_not_served_is_exactly_what_the_model_refuses(pe):
    """Every encoding: n/a past max_len exactly when a forward there raises ValueError."""
    options = {"positions": "learned"} if pe == "multiplicative" else {}
    model = tiny(pe, max_len=8, **context_options(pe, vocab_size=32), **options)
    note = not_served(model, 12)
    assert not_served(model, 8) is None
    if note is None:
        with torch.no_grad():
            assert torch.isfinite(model(stream(12)[None])).all()
    else:
        with pytest.raises(ValueError):
            model(stream(12)[None])


def test_perplexity_at_lengths_reads_memory_mapped_arrays(tmp_path):
    tokens = stream(200)
    path = tmp_path / "tokens.npy"
    np.save(path, tokens.numpy().astype(np.uint16))
    mapped = np.load(path, mmap_mode="r")
    model = tiny("t5")
    a = perplexity_at_lengths(model, mapped, [16, 64], max_tokens=128)
    b = perplexity_at_lengths(model, tokens, [16, 64], max_tokens=128)
    assert [r.ppl for r in a] == pytest.approx([r.ppl for r in b], rel=1e-6)


def test_bad_lengths_raise():
    with pytest.raises(ValueError, match="longer than the held-out data"):
        perplexity_at_lengths(tiny("rope"), stream(50), [64])
    with pytest.raises(ValueError, match="integers >= 2"):
        perplexity_at_lengths(tiny("rope"), stream(50), [1])


def test_declared_limits_are_not_run_and_say_why():
    model = tiny("hierarchical", n_positions=20)
    assert position_limit(model).max_position == 19
    results = perplexity_at_lengths(model, stream(100), [16, 32])
    assert results[0].ppl is not None
    assert results[1].ppl is None and results[1].note == "n/a (past hierarchical table of 20)"
    ent = entropy_at_lengths(model, stream(100), [16, 32])
    assert ent[0].tail is not None and ent[1].note == results[1].note


class RefusesLong(torch.nn.Module):
    """A model that refuses sequences longer than 16 in its forward and declares no limit."""

    def __init__(self):
        super().__init__()
        self.inner = tiny("rope")

    def forward(self, ids, **kw):
        if ids.shape[-1] > 16:
            raise ValueError("too long for this test; really")
        return self.inner(ids, **kw)


def test_refusals_no_limit_declares_become_notes_when_asked():
    model = RefusesLong()
    with pytest.raises(ValueError):
        perplexity_at_lengths(model, stream(100), [16, 32])
    results = perplexity_at_lengths(model, stream(100), [16, 32], errors="note")
    assert results[0].ppl is not None
    assert results[1].skipped == NotEvaluated(refusal="too long for this test")
    assert results[1].value == "n/a (too long for this test)"
    assert note_reason(results[1].note) == "too long for this test"
