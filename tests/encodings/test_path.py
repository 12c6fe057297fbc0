"""PaTH and PaTH-FoX (Yang et al., 2025): fla's plain-PyTorch reference ``naive_path_attn`` as
the oracle (weights mapped across), the blockwise form against the token-by-token reference,
the keys a KV cache keeps, causality, the bidirectional extension, and context errors."""

from __future__ import annotations

import glob
import importlib.util
import math
import sys

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from posenc.attention import AttentionContext, MultiHeadAttention
from posenc.encodings import build_encoding
from posenc.encodings.context import HookContext
from posenc.encodings.householder_products import (
    carry_keys,
    path_logits,
    path_logits_reference,
)
from tests.encodings.helpers import assert_backend_grads_agree
from tests.helpers import decode_in_steps, raises_one_line, sharpen, tiny_lm_factory

pytestmark = pytest.mark.usefixtures("single_thread")

H, D = 2, 8
C = H * D


def _fla_naive():
    """fla's ``naive_path_attn`` loaded by path (fla-core imports Triton at package level);
    skipped when fla-core is not installed."""
    paths = [p for root in sys.path for p in
             glob.glob(f"{root}/fla/ops/path_attn/naive.py")]
    if not paths:
        pytest.skip("fla-core (flash-linear-attention) is not installed")
    pytest.importorskip("einops")
    spec = importlib.util.spec_from_file_location("fla_path_naive", paths[0])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.naive_path_attn


def _factors(b, h, n, d, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(b, h, n, d, generator=gen) for _ in range(2))
    w = F.normalize(torch.randn(b, h, n, d, generator=gen), dim=-1)
    beta = 2.0 * torch.rand(b, h, n, generator=gen)          # negative eigenvalues too
    return q, k, w, beta


def _reference_by_matrices(q, k, w, beta):
    """s_ij = q_i^T H_i ... H_{j+1} k_j with the (D, D) matrices multiplied out."""
    eye = torch.eye(q.shape[-1])
    hh = eye - beta[..., None, None] * w[..., :, None] * w[..., None, :]     # (B, H, L, D, D)
    n = q.shape[2]
    out = torch.zeros(*q.shape[:2], n, n)
    for i in range(n):
        product = eye.expand(*q.shape[:2], -1, -1)
        for j in range(i, -1, -1):                                 # product = H_i ... H_{j+1}
            out[:, :, i, j] = (q[:, :, i, None, :] @ product @ k[:, :, j, :, None])[..., 0, 0]
            product = product @ hh[:, :, j]
    return out


# ------------------------------------------------------------------ the blockwise form
def test_reference_is_the_product_of_householder_matrices():
    q, k, w, beta = _factors(1, 2, 7, 4)
    assert_close(path_logits_reference(q, k, w, beta), _reference_by_matrices(q, k, w, beta),
                 atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("chunk", [1, 3, 8, 64])
def test_blockwise_logits_and_gradients_equal_the_reference(chunk):
    q, k, w, beta = (t.requires_grad_() for t in _factors(2, 2, 19, D))
    ref = path_logits_reference(q, k, w, beta)
    out, before = path_logits(q, k, w, beta, None, chunk)
    assert before is None
    assert_close(out, ref, atol=1e-5, rtol=1e-5)
    assert out.triu(1).eq(0).all()
    grad = torch.randn(ref.shape, generator=torch.Generator().manual_seed(5)).tril()
    for a, b in zip(torch.autograd.grad(out, (q, k, w, beta), grad),
                    torch.autograd.grad(ref, (q, k, w, beta), grad)):
        assert_close(a, b, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("split", [1, 6, 13])
def test_a_block_after_carried_keys_equals_the_rows_of_the_whole(split):
    """A cache's keys carried past every earlier token, then a block of queries: the block's
    rows of the whole sequence's scores (before and within the block)."""
    q, k, w, beta = _factors(2, 2, 17, D, seed=1)
    ref = path_logits_reference(q, k, w, beta)
    carried = carry_keys(k[:, :, :split], w[:, :, :split], beta[:, :, :split], None, 4)
    block, before = path_logits(q[:, :, split:], k[:, :, split:], w[:, :, split:],
                                beta[:, :, split:], carried, 4)
    assert_close(before, ref[:, :, split:, :split], atol=1e-5, rtol=1e-5)
    assert_close(block, ref[:, :, split:, split:], atol=1e-5, rtol=1e-5)
    # carrying in two steps equals carrying at once (a cache grown call by call)
    again = carry_keys(k[:, :, split:], w[:, :, split:], beta[:, :, split:], carried, 5)
    assert_close(again, carry_keys(k, w, beta, None, 3), atol=1e-5, rtol=1e-5)
    # chunks as wide as the head cross by a (D, D) product, narrower ones by rank C
    assert_close(carry_keys(k, w, beta, None, D), again, atol=1e-5, rtol=1e-5)


# ------------------------------------------------------------------- fla's oracle
def _fla_layer_terms(x, weights, forget_gate):
    """fla's ``PaTHAttention.forward`` (flash-linear-attention 0.6, fla/layers/path_attn.py,
    use_w_shortconv=False): w = l2_norm(w_proj(x)) per head, beta = 2 sigmoid(bt_proj(x)),
    g = logsigmoid(g_proj(x)), each (B, T, H[, D])."""
    w = F.linear(F.linear(x, weights["w_proj.0"]), weights["w_proj.1"]).unflatten(-1, (H, D))
    w = w * torch.rsqrt((w * w).sum(-1, keepdim=True) + 1e-6)
    beta = torch.sigmoid(F.linear(x, weights["bt_proj.weight"], weights["bt_proj.bias"])) * 2
    g = F.logsigmoid(F.linear(x, weights["g_proj.weight"], weights["g_proj.bias"])) \
        if forget_gate else torch.zeros(*x.shape[:2], H)
    return w, beta, g


@pytest.mark.parametrize("name", ["path", "path_fox"])
@pytest.mark.parametrize("chunk_size", [4, 64])
@torch.no_grad()
def test_layer_equals_fla_naive_path_attention_with_mapped_weights(name, chunk_size):
    """The weights mapped across (fla's PaTHAttention <- posenc's layer and encoding):
    q_proj, k_proj, v_proj <- the thirds of MultiHeadAttention.qkv_proj; o_proj <- out_proj;
    w_proj[0], w_proj[1] <- pe.w_proj[0], pe.w_proj[1]; bt_proj <- pe.beta_proj; g_proj <-
    pe.gate_proj (PaTH-FoX; PaTH passes g = 0). scale = 1/sqrt(D), fla's default."""
    naive = _fla_naive()
    torch.manual_seed(0)
    pe = sharpen(build_encoding(name, n_heads=H, head_dim=D, chunk_size=chunk_size), 0.4)
    attn = sharpen(MultiHeadAttention(C, H), 0.4, seed=1)
    x = torch.randn(2, 21, C)
    out, _ = attn(x, AttentionContext(torch.arange(21), causal=True), pe)
    weights = {"w_proj.0": pe.w_proj[0].weight, "w_proj.1": pe.w_proj[1].weight,
               "bt_proj.weight": pe.beta_proj.weight, "bt_proj.bias": pe.beta_proj.bias}
    if name == "path_fox":
        weights.update({"g_proj.weight": pe.gate_proj.weight, "g_proj.bias": pe.gate_proj.bias})
    w, beta, g = _fla_layer_terms(x, weights, name == "path_fox")
    q, k, v = (t.unflatten(-1, (H, D)) for t in attn.qkv_proj(x).chunk(3, dim=-1))
    o = naive(q, k, v, w, beta, g, 1.0 / math.sqrt(D), chunk_size=8)       # (B, T, H, D)
    assert_close(out, attn.out_proj(o.flatten(2)), atol=1e-5, rtol=1e-5)


# -------------------------------------------------------------------- the KV cache
@pytest.mark.parametrize("name", ["path", "path_fox"])
@torch.no_grad()
def test_cached_decoding_equals_the_full_forward(name):
    model = tiny_lm_factory(name, {"chunk_size": 4}, max_len=40, n_heads=2)
    ids = torch.randint(0, 48, (2, 23), generator=torch.Generator().manual_seed(3))
    full = model(ids)
    assert_close(decode_in_steps(model, ids, prompt=9), full, atol=1e-5, rtol=1e-5)
    caches = model.make_caches(2, 23)                  # blocks of several tokens after a cache
    blocks = [model(ids[:, a:b], caches=caches) for a, b in ((0, 5), (5, 12), (12, 23))]
    assert_close(torch.cat(blocks, 1), full, atol=1e-5, rtol=1e-5)


@torch.no_grad()
def test_the_cache_keeps_keys_carried_past_every_later_token():
    """After decoding, each layer's cached keys are H_n ... H_{j+1} k_j: the keys a full
    pass projects, carried by the factors of every token after them (one rank-one update
    a key and token while decoding)."""
    model = tiny_lm_factory("path", max_len=16, n_heads=2, n_layers=1)
    ids = torch.randint(0, 48, (1, 10), generator=torch.Generator().manual_seed(4))
    caches = model.make_caches(1, 10)
    for i in range(10):
        model(ids[:, i:i + 1], caches=caches)
    block = model.blocks[0]
    pe = block.layer_pe
    seen = {}
    hook = block.attn.register_forward_hook(lambda m, a, o: seen.update(x=a[0]))
    model(ids)
    hook.remove()
    x = seen["x"]
    k = block.attn.heads(block.attn.qkv_proj(x).chunk(3, dim=-1)[1])
    terms = pe.token_terms(x)
    d = pe.head_dim
    expected = carry_keys(k, terms[..., :d], terms[..., d], None, 64)
    assert_close(caches[0].k[:, :, :10], expected, atol=1e-5, rtol=1e-5)


# ------------------------------------------------------------------------ causality
@pytest.mark.parametrize("name", ["path", "path_fox"])
@torch.no_grad()
def test_a_later_token_changes_no_earlier_output(name):
    model = tiny_lm_factory(name, {"chunk_size": 4}, max_len=32, n_heads=2)
    ids = torch.randint(0, 48, (1, 18), generator=torch.Generator().manual_seed(6))
    changed = ids.clone()
    changed[0, 11] = (ids[0, 11] + 7) % 48
    before, after = model(ids), model(changed)
    assert_close(after[:, :11], before[:, :11])
    assert (after[:, 11:] - before[:, 11:]).abs().amax() > 1e-3


@torch.no_grad()
def test_the_transform_reads_the_tokens_between_key_and_query():
    """PaTH's data dependence: changing what a token in between wrote (its w) changes the
    logit of a pair around it, not of a pair before it; reversing w's direction changes
    nothing (H = I - beta w w^T)."""
    q, k, w, beta = _factors(1, 1, 9, D, seed=2)
    base = path_logits(q, k, w, beta)[0]
    w2 = w.clone()
    w2[:, :, 5] = F.normalize(torch.randn(D, generator=torch.Generator().manual_seed(1)), dim=0)
    moved = path_logits(q, k, w2, beta)[0]
    assert (moved[0, 0, 7, 2] - base[0, 0, 7, 2]).abs() > 1e-3       # 2 < 5 <= 7
    assert_close(moved[0, 0, :5], base[0, 0, :5])                     # queries before 5
    assert_close(moved[0, 0, 7, 5:], base[0, 0, 7, 5:])               # keys from 5 on
    w3 = w.clone()
    w3[:, :, 5] = -w3[:, :, 5]
    assert_close(path_logits(q, k, w3, beta)[0], base)


# ------------------------------------------------------------------- bidirectional
@torch.no_grad()
def test_bidirectional_reads_the_same_path_backwards():
    """A key after the query: q_i^T H_{i+1} ... H_j k_j, the transpose of the causal
    transform between the same two tokens; before it: the causal logits."""
    pe = sharpen(build_encoding("path", n_heads=H, head_dim=D, bidirectional=True,
                                chunk_size=4), 0.4)
    x = torch.randn(1, 9, C)
    q, k = torch.randn(1, H, 9, D), torch.randn(1, H, 9, D)
    terms = pe.token_terms(x)
    pos = torch.arange(9)
    bias = pe.score_bias(q, k, HookContext.for_positions(pos, pos, key_terms=terms))
    w, beta = terms[..., :D], terms[..., D]
    causal = path_logits_reference(q, k, w, beta)
    eye = torch.eye(D)
    for i, j in ((1, 6), (0, 8), (4, 5)):
        product = eye.expand(1, H, D, D)
        for t in range(i + 1, j + 1):
            product = product @ (eye - beta[:, :, t, None, None] * w[:, :, t, :, None]
                                 * w[:, :, t, None, :])
        expected = (q[:, :, i, None] @ product @ k[:, :, j, :, None])[..., 0, 0]
        assert_close(bias[:, :, i, j], expected / math.sqrt(D), atol=1e-5, rtol=1e-5)
    assert_close(bias.tril(), causal.tril() / math.sqrt(D), atol=1e-5, rtol=1e-5)


# ------------------------------------------------------------------------- errors
def test_context_and_option_errors_are_one_line():
    pe = build_encoding("path", n_heads=H, head_dim=D)
    pos = torch.arange(4)
    q = torch.randn(1, H, 4, D)
    raises_one_line(r"path reads the attention's input: its hooks need at.key_terms",
                    pe.score_bias, q, q, HookContext.for_positions(pos, pos, causal=True))
    raises_one_line(r"path reads the attention input x \(batch, length, 16\)",
                    pe.token_terms, torch.randn(1, 4, 8))
    terms = pe.token_terms(torch.randn(1, 4, C))
    raises_one_line(r"built for causal attention", pe.score_bias, q, q,
                    HookContext.for_positions(pos, pos, key_terms=terms))
    fox = build_encoding("path_fox", n_heads=H, head_dim=D)
    raises_one_line(r"at.key_terms must be \(batch, 2, 4, 10\)", fox.score_bias, q, q,
                    HookContext.for_positions(pos, pos, causal=True, key_terms=terms))
    raises_one_line(r"chunk_size must be", build_encoding, "path", n_heads=H, head_dim=D,
                    chunk_size=0)
    raises_one_line(r"unknown option\(s\) gate_bias_init", build_encoding, "path",
                    n_heads=H, head_dim=D, gate_bias_init=2.0)


@pytest.mark.parametrize("name", ["path", "path_fox"])
def test_fused_training_attention_gets_the_eager_gradients(name):
    """The whole logit is a bias (sm_scale 0): the fused CPU attention of training and eager
    give the input, the projections and the w, beta and gate projections the same gradients."""
    pe = sharpen(build_encoding(name, n_heads=H, head_dim=D, chunk_size=8), 0.4)
    assert pe.sm_scale() == 0.0 and pe.backends() == ("sdpa", "eager")
    assert_backend_grads_agree(pe)
