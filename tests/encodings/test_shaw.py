"""Shaw et al.: the paper's formula, clipping past K, the causal key and value terms, and
training through the fused attention."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from posenc.attention import attend
from posenc.attention.context import AttentionCall
from posenc.encodings import build_encoding
from posenc.encodings.context import HookContext
from posenc.encodings.sinusoidal import sinusoidal_at
from tests.encodings.helpers import K_POS, Q_POS, D, H, make, qkv
from tests.helpers import sharpen

pytestmark = pytest.mark.usefixtures("single_thread")


def test_shaw_matches_the_paper_formula():
    k_clip = 3
    for table in ("learned", "sinusoidal"):
        pe = make("shaw", {"max_relative_position": k_clip, "table": table})
        q, k, v = qkv(3, 7)
        out, _ = attend(q, k, v, pe,
                        AttentionCall.for_positions(Q_POS, K_POS, causal=True, backend="eager"))
        rel = (K_POS[None, :] - Q_POS[:, None]).clamp(-k_clip, k_clip) + k_clip   # (Lq, Lk)
        a_k = pe.key_table[rel]                                                   # (Lq, Lk, D)
        a_v = a_k if table == "sinusoidal" else pe.value_table[rel]
        if table == "sinusoidal":
            torch.testing.assert_close(pe.key_table,
                                       sinusoidal_at(torch.arange(-k_clip, k_clip + 1), D))
        logits = (q @ k.transpose(-2, -1) + torch.einsum("bhid,ijd->bhij", q, a_k)) / math.sqrt(D)
        logits = logits.masked_fill(K_POS[None, :] > Q_POS[:, None], float("-inf"))
        w = logits.softmax(-1)
        want = w @ v + torch.einsum("bhij,ijd->bhid", w, a_v)
        torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)


def test_shaw_clips_distances_beyond_k():
    k_clip = 3
    pe = make("shaw", {"max_relative_position": k_clip})
    q = torch.randn(1, H, 1, D)
    q_pos, k_pos = torch.tensor([20]), torch.arange(41)
    at = HookContext.for_positions(q_pos, k_pos)
    bias = pe.score_bias(q, q, at)[0, :, 0]                                  # (H, 41)
    dist = k_pos - 20
    for far in (dist <= -k_clip, dist >= k_clip):
        torch.testing.assert_close(bias[:, far], bias[:, far][:, :1].expand(-1, int(far.sum())))
    inside = bias[:, (dist > -k_clip - 1) & (dist < k_clip + 1)]              # 2K+1 distinct
    assert all(len(set(row.tolist())) == 2 * k_clip + 1 for row in inside)
    # value term: all weight on one key gives that key's clipped value embedding
    for j in (0, 18, 20, 23, 40):
        w = torch.zeros(1, H, 1, 41)
        w[..., j] = 1.0
        want = pe.value_table[max(-k_clip, min(k_clip, j - 20)) + k_clip]
        torch.testing.assert_close(pe.value_term(w, at)[0, :, 0], want.expand(H, D))


# ------------------------------------------------------- the causal terms and training
@pytest.mark.parametrize("clip", [3, 16])
def test_shaw_causal_value_term_equals_the_scatter(clip):
    pe = sharpen(build_encoding("shaw", n_heads=2, head_dim=8, max_relative_position=clip),
                 std=0.5)
    pos = torch.arange(5, 14)
    seen = pos[None, :] <= pos[:, None]
    gen = torch.Generator().manual_seed(3)
    logits = torch.randn(2, 2, 9, 9, generator=gen).masked_fill(~seen, float("-inf"))
    weights = logits.softmax(-1).requires_grad_()
    grad = torch.randn(2, 2, 9, 8, generator=gen)
    results = []
    for causal in (False, True):
        out = pe.value_term(weights, HookContext.for_positions(pos, pos, causal=causal))
        results.append((out, torch.autograd.grad(out, [weights, pe.value_table], grad)))
    (full, (gw_full, gt_full)), (part, (gw_part, gt_part)) = results
    assert_close(part, full)
    assert_close(gt_part, gt_full)
    assert_close(gw_part[..., seen], gw_full[..., seen])


def test_shaw_causal_key_term_past_the_clip():
    """The shared far column (distances >= K) as well as the diagonals."""
    pe = sharpen(build_encoding("shaw", n_heads=2, head_dim=8, max_relative_position=3),
                 std=0.5)
    pos = torch.arange(12)
    q = torch.randn(2, 2, 12, 8, generator=torch.Generator().manual_seed(4))
    seen = pos[None, :] <= pos[:, None]
    assert_close(pe.score_bias(q, q, HookContext.for_positions(pos, pos, causal=True))[..., seen],
                 pe.score_bias(q, q, HookContext.for_positions(pos, pos, causal=False))[..., seen])


@pytest.mark.parametrize("causal", [True, False])
def test_shaw_training_path_equals_plain_eager(causal):
    """Shaw trains through the fused attention (weights handed to its value term); asking
    for the weights forces the plain eager path: same output, same gradients."""
    from posenc.attention import attend
    pe = sharpen(build_encoding("shaw", n_heads=2, head_dim=8, max_relative_position=3),
                 std=0.5)
    pos = torch.arange(10)
    gen = torch.Generator().manual_seed(6)
    qkv = [torch.randn(2, 2, 10, 8, generator=gen) for _ in range(3)]
    grad = torch.randn(2, 2, 10, 8, generator=gen)
    results = []
    for need_weights in (False, True):
        leaves = [t.clone().requires_grad_() for t in qkv]
        out = attend(*leaves, pe,
                     AttentionCall.for_positions(pos, pos, causal=causal, backend="eager",
                                                 need_weights=need_weights))[0]
        params = list(pe.parameters())
        results.append((out, torch.autograd.grad(out, leaves + params, grad)))
    (fused, fused_grads), (plain, plain_grads) = results
    assert_close(fused, plain, atol=1e-5, rtol=1e-5)
    for g, w in zip(fused_grads, plain_grads):
        assert_close(g, w, atol=1e-5, rtol=1e-5)
