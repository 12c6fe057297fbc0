"""Every attention backend an encoding offers agrees with eager softmax attention; the
automatic choice for real tensors; the flex backend's causal mask: the BlockMask built from
block index ranges (queries are the last keys) equals the one ``create_block_mask`` builds
from every (query, key) pair, and flex agrees with eager for any cache offset without a
recompile.

The loops run over ``list_encodings()``, so encodings added later are covered without an
edit here. FlexAttention compiles on CPU (seconds per new shape), so its cases share one
small non-square shape (queries at the end of a longer key range, as in cached decoding).
"""

from __future__ import annotations

import pytest
import torch
from torch.nn.attention import flex_attention
from torch.testing import assert_close

from posenc import LMConfig, TransformerLM, build_encoding, list_encodings
from posenc.attention import attend, route
from posenc.attention.backends import _causal_block_mask
from posenc.attention.context import AttentionCall
from posenc.encodings import encoding_options
from posenc.encodings.context import HookContext
from tests.helpers import context_options, hook_context

pytestmark = pytest.mark.usefixtures("single_thread")

H, D, LK = 2, 8, 16


def _encoding(name: str, **options):
    return build_encoding(name, n_heads=H, head_dim=D, max_len=64,
                          **{**context_options(name), **options})


def _qkv(lq: int, lk: int, batch: int = 2):
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(batch, H, lq, D, generator=gen) * 2.0
    k = torch.randn(batch, H, lk, D, generator=gen) * 2.0
    v = torch.randn(batch, H, lk, D, generator=gen)
    return q, k, v


def _sharpen_parameters(pe) -> None:
    """Give learned position tables visible magnitude (default init is tiny)."""
    gen = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for p in pe.parameters():
            p.copy_(torch.randn(p.shape, generator=gen))


def _run(pe, backend, q, k, v, q_pos, k_pos, causal):
    q, k = pe.transform_qk(q, k, HookContext.for_positions(q_pos, k_pos))
    at = hook_context(pe, q_pos, k_pos, batch=q.shape[0], causal=causal)
    return attend(q, k, v, pe, AttentionCall(at, backend=backend))[0]


CASES = [(name, {}) for name in list_encodings()] + [
    ("alibi", {"logn_base_len": 4}),
    ("alibi", {"bidirectional": True}),
    ("t5", {"bidirectional": True, "num_buckets": 8, "max_distance": 12}),
    ("rope", {"layout": "interleaved", "rotary_dim": 4, "logn_base_len": 4}),
]


#: (queries, keys): the queries are the last of the keys
LENGTHS = [(512, 512),      # aligned, whole blocks
           (257, 257),      # a one-position tail block
           (1, 301),        # one decoded query
           (300, 400),      # queries after a cache
           (200, 330),      # partial blocks on both sides
           (333, 517)]


def _attend_both(pe, q_pos, k_pos):
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(1, 2, q_pos.numel(), 8, generator=gen)
    k, v = (torch.randn(1, 2, k_pos.numel(), 8, generator=gen) for _ in range(2))
    with torch.no_grad():
        out = attend(q, k, v, pe,
                     AttentionCall.for_positions(q_pos, k_pos, causal=True, backend="flex"))[0]
        ref = attend(q, k, v, pe,
                     AttentionCall.for_positions(q_pos, k_pos, causal=True, backend="eager"))[0]
    return out, ref


@pytest.mark.parametrize("name,options", CASES, ids=lambda x: str(x))
@pytest.mark.parametrize("causal", [True, False])
def test_sdpa_matches_eager(name, options, causal):
    if not causal and "bidirectional" in encoding_options(name):   # the encoder form
        options = {"bidirectional": True, **options}
    pe = _encoding(name, **options)
    _sharpen_parameters(pe)
    if "sdpa" not in pe.backends():
        pytest.skip(f"{name} does not offer sdpa")
    q, k, v = _qkv(5, LK)
    k_pos, q_pos = torch.arange(LK), torch.arange(LK - 5, LK)
    ref = _run(pe, "eager", q, k, v, q_pos, k_pos, causal)
    assert_close(_run(pe, "sdpa", q, k, v, q_pos, k_pos, causal), ref, atol=1e-5, rtol=1e-5)
    # square, aligned positions (the is_causal fast path)
    q, k, v = _qkv(LK, LK)
    ref = _run(pe, "eager", q, k, v, k_pos, k_pos, causal)
    assert_close(_run(pe, "sdpa", q, k, v, k_pos, k_pos, causal), ref, atol=1e-5, rtol=1e-5)


def test_flex_matches_eager_for_every_encoding():
    """One compiled shape shared by every encoding that offers flex (forward-only on CPU)."""
    names = [n for n in list_encodings() if "flex" in _encoding(n).backends()]
    assert {"alibi", "t5", "rope", "nope"} <= set(names)
    q, k, v = _qkv(5, LK, batch=1)
    k_pos, q_pos = torch.arange(LK), torch.arange(LK - 5, LK)
    for name in names:
        pe = _encoding(name)
        _sharpen_parameters(pe)
        with torch.no_grad():
            ref = _run(pe, "eager", q, k, v, q_pos, k_pos, True)
            out = _run(pe, "flex", q, k, v, q_pos, k_pos, True)
        assert_close(out, ref, atol=1e-5, rtol=1e-5, msg=lambda m: f"{name}: {m}")


def test_score_mod_equals_score_bias():
    """The flex score_mod and the materialized bias describe the same term (no compile)."""
    q, k, _ = _qkv(5, LK, batch=1)
    k_pos, q_pos = torch.arange(LK) + 3, torch.arange(LK - 5, LK) + 3
    for name in list_encodings():
        pe = _encoding(name)
        at = hook_context(pe, q_pos, k_pos, causal=True)
        if not pe.has_bias or pe.score_mod(q, k, at) is None:
            continue
        _sharpen_parameters(pe)
        bias = pe.score_bias(q, k, at).expand(1, H, 5, LK)
        mod = pe.score_mod(q, k, at)
        b, h, qi, ki = torch.meshgrid(torch.arange(1), torch.arange(H), torch.arange(5),
                                      torch.arange(LK), indexing="ij")
        got = mod(torch.zeros(b.shape), b, h, qi, ki)
        assert_close(got, bias.float(), msg=lambda m: f"{name}: {m}")


@pytest.mark.parametrize("name", list_encodings())
def test_model_backends_agree(name, tiny_lm):
    """Whole-model logits through sdpa equal those through eager."""
    model = tiny_lm(name, max_len=32)
    ids = torch.randint(0, 48, (2, 12))
    ref = model(ids, backend="eager")
    for backend in model.pe.backends():
        if backend != "flex":
            assert_close(model(ids, backend=backend), ref, atol=1e-5, rtol=1e-5)


def test_t5_bias_gets_gradients_through_sdpa(tiny_lm):
    """Training through sdpa's materialized bias reaches the T5 bucket table, as eager does."""
    model = tiny_lm("t5", {"num_buckets": 8, "max_distance": 16}).train()
    ids = torch.randint(0, 48, (2, 12))
    grads = {}
    for backend in ("sdpa", "eager"):
        model.zero_grad()
        model(ids, backend=backend).logsumexp(-1).mean().backward()
        grads[backend] = model.pe.bias.weight.grad.clone()
    assert grads["sdpa"].abs().sum() > 0
    assert_close(grads["sdpa"], grads["eager"], atol=1e-6, rtol=1e-4)


def _request(q: torch.Tensor, **options) -> AttentionCall:
    """A call over q's positions 0..Lq-1 with ``options`` (what routing reads of it)."""
    pos = torch.arange(q.shape[2])
    return AttentionCall.for_positions(pos, pos, **options)


def test_auto_backend_choice():
    pe = _encoding("alibi")
    q = torch.zeros(1, H, 4096, D, requires_grad=True)
    with torch.no_grad():
        assert route(pe, q, q, q) == "flex"
        assert route(pe, q[:, :, :16], q[:, :, :16], q[:, :, :16]) == "sdpa"
        assert route(pe, q[:, :, :1], q, q) == "sdpa"                # decoding
    assert route(pe, q, q, q) == "fused"                 # gradients needed, CPU fp32
    assert route(pe, q.bfloat16(), q.bfloat16(), q.bfloat16()) == "sdpa"
    assert route(_encoding("rope"), q, q, q) == "sdpa"
    assert route(pe, q, q, q, _request(q, need_weights=True)) == "eager"


def test_flex_refuses_gradients_on_cpu():
    pe = _encoding("alibi")
    q = torch.zeros(1, H, 16, D, requires_grad=True)
    with pytest.raises(ValueError, match="encoding 'alibi'.*forward-only on cpu.*no_grad"):
        route(pe, q, q, q, _request(q, backend="flex"))


def test_unknown_backend_lists_valid_ones():
    q = torch.zeros(1, H, 16, D)
    with pytest.raises(ValueError, match="'cuda-magic'; valid: auto, sdpa, flex, eager"):
        route(_encoding("rope"), q, q, q, _request(q, backend="cuda-magic"))


def test_backend_the_encoding_cannot_run_is_refused():
    model = TransformerLM(LMConfig(d_model=16, n_heads=2, n_layers=1, pe="alibi"))
    with pytest.raises(ValueError, match="backend 'fast'.*valid: auto, sdpa, flex, eager"):
        model(torch.zeros(1, 3, dtype=torch.long), backend="fast")


# ---------------------------------------------------------------- the flex causal mask
@pytest.mark.parametrize("lq,lk", LENGTHS)
def test_block_mask_equals_create_block_mask(lq, lk):
    def mask_mod(b, h, q_idx, kv_idx):
        return kv_idx <= q_idx + (lk - lq)

    ours = _causal_block_mask(lq, lk, "cpu")
    ref = flex_attention.create_block_mask(mask_mod, None, None, lq, lk, device="cpu")
    assert ours.seq_lengths == ref.seq_lengths
    for field in ("kv_num_blocks", "kv_indices", "full_kv_num_blocks", "full_kv_indices",
                  "q_num_blocks", "q_indices", "full_q_num_blocks", "full_q_indices"):
        assert torch.equal(getattr(ours, field), getattr(ref, field)), field
    assert torch.equal(ours.to_dense(), ref.to_dense())


def test_flex_causal_masks_match_eager():
    """Queries after two cache lengths; positions are what the encoding reads (here
    restarting, as in packed documents), never what the mask is built from."""
    pe = build_encoding("alibi", n_heads=2, head_dim=8)
    k_pos = torch.arange(24)
    for start in (8, 13):                                     # two cache lengths
        out, ref = _attend_both(pe, torch.arange(start, start + 11), k_pos[:start + 11])
        assert_close(out, ref, atol=1e-5, rtol=1e-5)
    packed = torch.cat((torch.arange(12), torch.arange(12)))  # restarting positions
    out, ref = _attend_both(pe, packed[-11:], packed)
    assert_close(out, ref, atol=1e-5, rtol=1e-5)


def test_bidirectional_flex_matches_eager_when_lengths_are_not_block_multiples():
    """Bidirectional flex (no block mask) with an incomplete last query and key block."""
    torch.manual_seed(0)
    pe = build_encoding("alibi", n_heads=2, head_dim=32, bidirectional=True)
    q, k, v = torch.randn(1, 2, 128, 32), torch.randn(1, 2, 200, 32), torch.randn(1, 2, 200, 32)
    q_pos, k_pos = torch.arange(128), torch.arange(200)
    with torch.no_grad():
        flex, _ = attend(q, k, v, pe,
                         AttentionCall.for_positions(q_pos, k_pos, causal=False, backend="flex"))
        eager, _ = attend(q, k, v, pe,
                          AttentionCall.for_positions(q_pos, k_pos, causal=False, backend="eager"))
    torch.testing.assert_close(flex, eager, atol=1e-5, rtol=1e-5)


# ------------------------------------------------------- padding and document masks
def _masks():
    """Left and right padding in row 0 (two of its queries are padding, which see their own
    key only), two packed documents in row 1 (queries: the last 5 keys)."""
    from posenc.attention.masks import Masks
    key_valid = torch.ones(2, LK, dtype=torch.bool)
    key_valid[0, :4] = False
    key_valid[0, -2:] = False
    documents = torch.zeros(2, LK, dtype=torch.long)
    documents[1, 9:] = 1
    return Masks(key_valid=key_valid, documents=documents)


@pytest.mark.parametrize("name", list_encodings())
@pytest.mark.parametrize("grad", [False, True], ids=["eval", "train"])
def test_every_backend_applies_padding_and_document_masks(name, grad, monkeypatch):
    """sdpa, the fused CPU attention (with gradients), FlexAttention (uncompiled here: the
    same score_mod and mask_mod; one compiled run is below) and eager agree under padding
    and document masks, queries at the end of the keys, positions per sequence."""
    from posenc.attention import backends
    monkeypatch.setattr(backends, "_compiled_flex", lambda: flex_attention.flex_attention)
    pe = _encoding(name)
    _sharpen_parameters(pe)
    masks = _masks()
    k_pos = torch.stack([torch.arange(LK), torch.arange(LK) + 3])           # (B, Lk)
    q_pos = k_pos[:, -5:]
    q, k, v = _qkv(5, LK)
    if grad:
        q.requires_grad_(True)
    outs = {}
    with torch.set_grad_enabled(grad):
        for backend in pe.backends():
            if backend == "flex" and grad:
                continue
            q2, k2 = pe.transform_qk(q, k,
                                     HookContext.for_positions(q_pos, k_pos, backend=backend))
            call = AttentionCall(hook_context(pe, q_pos, k_pos, batch=2, causal=True),
                                 backend=backend, masks=masks)
            outs[backend] = attend(q2, k2, v, pe, call)[0]
    for backend, out in outs.items():
        assert_close(out, outs["eager"], atol=1e-5, rtol=1e-5, msg=lambda m: f"{backend}: {m}")
    if grad and pe.has_bias and "sdpa" in outs:                 # "sdpa" ran as "fused"
        assert backends.route(pe, q, k, v, _request(q, backend="sdpa")) == "fused"


def test_compiled_flex_applies_padding_and_document_masks():
    pe = _encoding("alibi")
    masks = _masks()
    q, k, v = _qkv(5, LK)
    pos = torch.arange(LK)
    with torch.no_grad():
        out = attend(q, k, v, pe,
                     AttentionCall.for_positions(pos[-5:], pos, causal=True, backend="flex",
                                                 masks=masks))[0]
        ref = attend(q, k, v, pe,
                     AttentionCall.for_positions(pos[-5:], pos, causal=True, backend="eager",
                                                 masks=masks))[0]
    assert_close(out, ref, atol=1e-5, rtol=1e-5)
