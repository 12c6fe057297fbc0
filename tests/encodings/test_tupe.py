"""TUPE: the paper's formula (untied absolute terms plus T5 buckets), its bidirectional
buckets, and position heads per sequence."""

import math

import pytest
import torch
from torch.testing import assert_close

from posenc.encodings import build_encoding
from posenc.encodings.context import HookContext
from posenc.encodings.t5 import relative_position_bucket
from tests.encodings.helpers import K_POS, Q_POS, D, H, make, qkv, weights
from tests.helpers import sharpen


@pytest.mark.parametrize("bidirectional", [False, True])
def test_tupe_matches_the_paper_formula(bidirectional):
    pe = make("tupe", {"num_buckets": 8, "max_distance": 16, "bidirectional": bidirectional})
    q, k, v = qkv(3, 7)
    got = weights(pe, q, k, v, Q_POS, K_POS, causal=not bidirectional)

    def untied(pos, proj_rows):
        p = torch.nn.functional.layer_norm(pe.absolute.table[pos], (H * D,),
                                           pe.pos_norm.weight, pe.pos_norm.bias)
        out = p @ pe.pos_proj.weight[proj_rows].t() + pe.pos_proj.bias[proj_rows]
        return out.view(-1, H, D).transpose(0, 1)                            # (H, L, D)

    pq, pk = untied(Q_POS, slice(0, H * D)), untied(K_POS, slice(H * D, 2 * H * D))
    bucket = relative_position_bucket(K_POS[None, :] - Q_POS[:, None], bidirectional, 8, 16)
    logits = ((q @ k.transpose(-2, -1) + pq @ pk.transpose(-2, -1)) / math.sqrt(2 * D)
              + pe.bias.weight[bucket].permute(2, 0, 1))
    if not bidirectional:                                    # the decoder form: causal
        logits = logits.masked_fill(K_POS[None, :] > Q_POS[:, None], float("-inf"))
    torch.testing.assert_close(got, logits.softmax(-1), atol=1e-6, rtol=1e-5)


def test_tupe_bidirectional_gives_keys_after_the_query_buckets_of_their_own():
    """The decoder form serves causal attention only (it refuses causal=False); the encoder
    form spends half its buckets on keys after the query, so the others move too."""
    q, k, _ = qkv(3, 7)
    decoder = make("tupe", {"num_buckets": 8, "max_distance": 16})
    uni = decoder.score_bias(q, k, HookContext.for_positions(Q_POS, K_POS, causal=True))
    bi = make("tupe", {"num_buckets": 8, "max_distance": 16,
                       "bidirectional": True}).score_bias(q, k,
                                                          HookContext.for_positions(Q_POS, K_POS))
    after = (K_POS[None, :] > Q_POS[:, None]).expand_as(uni[0])
    assert after.any() and torch.isfinite(bi[0][after]).all()
    assert not torch.allclose(uni[0][~after], bi[0][~after])   # buckets move too (halved)
    with pytest.raises(ValueError, match="built for causal attention"):
        decoder.score_bias(q, k, HookContext.for_positions(Q_POS, K_POS))


@pytest.mark.parametrize("max_len", [8, 64], ids=["table-gathered", "per-token"])
def test_position_heads_per_sequence_equal_each_row_alone(max_len):
    """(B, L) positions as many as the table's rows or more read the projected table; fewer
    project each token. Either way each row equals its own (L,) positions, with gradients."""
    pe = sharpen(build_encoding("tupe", n_heads=2, head_dim=4, max_len=max_len))
    pos = torch.tensor([[0, 1, 2, 3, 4, 5], [2, 2, 3, 4, 5, 7]])          # 12 positions
    got = pe.position_heads(pos, 1, torch.float32)                        # (B, H, L, D)
    rows = torch.stack([pe.position_heads(p, 1, torch.float32) for p in pos])
    assert_close(got, rows, atol=1e-6, rtol=1e-6)
    upstream = torch.randn(got.shape, generator=torch.Generator().manual_seed(0))
    params = list(pe.parameters())
    grads = torch.autograd.grad((got * upstream).sum(), params, allow_unused=True)
    expected = torch.autograd.grad((rows * upstream).sum(), params, allow_unused=True)
    for g, e in zip(grads, expected):
        assert (g is None) == (e is None)
        if g is not None:
            assert_close(g, e, atol=1e-5, rtol=1e-5)
