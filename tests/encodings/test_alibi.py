"""ALiBi: slopes (against BLOOM's as well), the bias and its position checks, and the bias
at 131072 positions in fp16."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from posenc import build_encoding
from posenc.encodings.alibi import alibi_slopes
from posenc.encodings.context import HookContext
from tests.helpers import needs_transformers
from tests.helpers import raises_one_line as _raises

pytestmark = pytest.mark.usefixtures("single_thread")

LONG = 131072


def test_alibi_slopes_power_of_two():
    assert_close(alibi_slopes(8), torch.tensor([2.0 ** -(i + 1) for i in range(8)]))
    assert_close(alibi_slopes(4), torch.tensor([2.0 ** -(2 * (i + 1)) for i in range(4)]))
    assert_close(alibi_slopes(1), torch.tensor([2.0 ** -8]))


@pytest.mark.parametrize("n", [3, 5, 6, 12, 24, 40])
def test_alibi_slopes_other_head_counts(n):
    """The closest smaller power of two c, then every other slope of 2c (the paper, BLOOM)."""
    c = 2 ** (n.bit_length() - 1)
    want = [2.0 ** (-8 * (i + 1) / c) for i in range(c)]
    want += [2.0 ** (-8 * (i + 1) / (2 * c)) for i in range(0, 2 * (n - c), 2)]
    assert_close(alibi_slopes(n), torch.tensor(want))
    assert len(set(alibi_slopes(n).tolist())) == n            # all distinct


@pytest.mark.parametrize("bidirectional", [False, True])
def test_alibi_bias_values(bidirectional):
    pe = build_encoding("alibi", n_heads=4, head_dim=8, bidirectional=bidirectional)
    pos = torch.arange(6)
    bias = pe.score_bias(None, None,
                         HookContext.for_positions(pos, pos,
                                                   causal=not bidirectional))[0]  # (H, Lq, Lk)
    rel = (pos[None, :] - pos[:, None]).float()                # j - i
    dist = -rel.abs() if bidirectional else rel
    assert_close(bias, alibi_slopes(4)[:, None, None] * dist)
    if bidirectional:
        assert_close(bias, bias.transpose(-1, -2))             # symmetric


def test_alibi_bias_checks_positions():
    enc = build_encoding("alibi", n_heads=2, head_dim=8)
    q = torch.randn(1, 2, 3, 8)
    _raises(r"k_pos must have shape \(3,\)", enc.score_bias, q, q,
            HookContext.for_positions(torch.arange(3), torch.arange(5)))
    _raises(r"q_pos must be an integer tensor", HookContext.for_positions, torch.arange(3.0),
            torch.arange(3))


# ------------------------------------------------------------ 131072 positions in fp16
@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("n_heads", [8, 12])
def test_alibi_fp16_bias_stays_finite_at_131072_positions(n_heads, bidirectional):
    """Every bias ALiBi hands attention in fp16 is finite: the sdpa term (the last query
    against all keys, and the first query against all keys for the causal form's hidden
    pairs), the (H, N) bias of every distance and the flex score_mod."""
    pe = build_encoding("alibi", n_heads=n_heads, head_dim=32, bidirectional=bidirectional)
    pos = torch.arange(LONG)
    q = torch.zeros(1, n_heads, 1, 32, dtype=torch.float16)
    k = q.expand(1, n_heads, LONG, 32)                          # a view: no memory
    for q_pos in (pos[-1:], pos[:1]):
        bias = pe.score_bias(q, k,
                             HookContext.for_positions(q_pos, pos,
                                                       causal=not bidirectional)).to(torch.float16)
        assert bias.shape == (1, n_heads, 1, LONG)
        assert torch.isfinite(bias).all()
        if q_pos.item() == LONG - 1:             # the farthest key keeps a large penalty
            assert (bias[..., 0] <= -500).all()
    table = pe.distance_bias(torch.arange(-LONG + 1, LONG))
    assert torch.isfinite(table.to(torch.float16)).all()
    raw = pe.slopes[:, None] * torch.arange(-LONG + 1, LONG).float()[None, :]
    assert not torch.isfinite(raw.to(torch.float16)).all()             # the check can fail
    score_mod = pe.score_mod(k, k, HookContext.for_positions(pos, pos, causal=not bidirectional))
    heads, keys = torch.arange(n_heads)[:, None], pos[None, :]
    for q_idx in (torch.tensor(LONG - 1), torch.tensor(0)):
        score = score_mod(torch.zeros((), dtype=torch.float16), 0, heads, q_idx, keys)
        assert score.dtype == torch.float16 and torch.isfinite(score).all()


def test_alibi_clip_changes_no_attention_weight():
    """Clipping the bias at -2^15 changes nothing a softmax can see: the far keys' weights
    are exactly zero either way (fp32)."""
    pe = build_encoding("alibi", n_heads=8, head_dim=8)
    k_pos = torch.arange(LONG)
    q_pos = k_pos[-1:]
    q = torch.zeros(1, 8, 1, 8)
    bias = pe.score_bias(q, q.expand(1, 8, LONG, 8),
                         HookContext.for_positions(q_pos, k_pos, causal=True))[0, :, 0]
    raw = pe.slopes[:, None] * (k_pos - q_pos).float()[None, :]
    assert (bias != raw).any()
    logits = 5.0 * torch.randn(8, LONG)
    assert torch.equal((logits + bias).softmax(-1), (logits + raw).softmax(-1))


# ----------------------------------------------------------------------- against BLOOM
@needs_transformers
@pytest.mark.parametrize("n_heads", list(range(1, 17)) + [24, 48])
def test_alibi_slopes_match_bloom(n_heads):
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor
    alibi = build_alibi_tensor(torch.ones(1, 2, dtype=torch.long), n_heads, torch.float32)
    want = alibi[:, 0, 1]                                      # slope * position 1
    assert_close(alibi_slopes(n_heads), want)
