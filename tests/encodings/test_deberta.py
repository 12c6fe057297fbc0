"""DeBERTa: absolute query positions, the strided bias against the gathered one, a compiled
FlexAttention run, and the disentangled attention against Hugging Face DeBERTa-v2 with copied
weights (skipped when transformers is not installed)."""

import math

import pytest
import torch

from posenc.attention import AttentionContext, MultiHeadAttention, attend
from posenc.attention.context import AttentionCall
from posenc.encodings import build_encoding
from posenc.encodings.context import HookContext
from posenc.encodings.deberta import log_bucket_position
from tests.encodings.helpers import K_POS, Q_POS, D, H, make, qkv
from tests.helpers import needs_transformers


def deberta_gathered_bias(pe, q, k, q_pos, k_pos):
    """The gather formulation over the 2 span table rows (the path for any positions)."""
    r = pe.pair_rows(q_pos, k_pos)                                             # (Lq, Lk)
    c2p, p2c = pe.term_tables(q, k)
    bias = 0
    if c2p is not None:
        bias = bias + c2p[:, :, torch.arange(len(q_pos))[:, None], r]
    if p2c is not None:
        bias = bias + p2c[:, :, torch.arange(len(k_pos))[None, :], r]
    return bias


try:
    import transformers
    from transformers.models.deberta_v2 import modeling_deberta_v2 as hf
except ImportError:                           # the tests against Hugging Face are skipped
    transformers = hf = None

D_MODEL, N_HEADS, SEQ = 16, 2, 40


def hf_encoder(pos_att_type: str, position_buckets: int, max_relative_positions: int):
    config = transformers.DebertaV2Config(
        hidden_size=D_MODEL, num_attention_heads=N_HEADS, num_hidden_layers=1,
        intermediate_size=32, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
        relative_attention=True, pos_att_type=pos_att_type, share_att_key=False,
        position_buckets=position_buckets, max_relative_positions=max_relative_positions,
        norm_rel_ebd="layer_norm", max_position_embeddings=64)
    torch.manual_seed(0)
    encoder = hf.DebertaV2Encoder(config).eval()
    with torch.no_grad():                 # move every weight off its init (LayerNorm too)
        for p in encoder.parameters():
            p.normal_(0.0, 0.5)
    return encoder


def copy_into_posenc(encoder, pos_att_type, position_buckets, max_relative_positions):
    attn = encoder.layer[0].attention.self
    mha = MultiHeadAttention(D_MODEL, N_HEADS, bias=True)
    pe = build_encoding("deberta", n_heads=N_HEADS, head_dim=D_MODEL // N_HEADS,
                        pos_att_type=pos_att_type,
                        position_buckets=position_buckets if position_buckets > 0 else None,
                        max_relative_positions=max_relative_positions)
    with torch.no_grad():
        mha.qkv_proj.weight.copy_(torch.cat([attn.query_proj.weight, attn.key_proj.weight,
                                             attn.value_proj.weight]))
        mha.qkv_proj.bias.copy_(torch.cat([attn.query_proj.bias, attn.key_proj.bias,
                                           attn.value_proj.bias]))
        mha.out_proj.weight.copy_(torch.eye(D_MODEL))    # compare the context itself
        mha.out_proj.bias.zero_()
        pe.rel_embeddings.copy_(encoder.rel_embeddings.weight)
        pe.rel_norm.load_state_dict(encoder.LayerNorm.state_dict())
        if "c2p" in pos_att_type:
            pe.pos_key_proj.load_state_dict(attn.pos_key_proj.state_dict())
        if "p2c" in pos_att_type:
            pe.pos_query_proj.load_state_dict(attn.pos_query_proj.state_dict())
    return mha, pe


def test_deberta_absolute_query_adds_a_learned_position_to_queries_only():
    pe = make("deberta", {"position_buckets": 4, "max_relative_positions": 8,
                          "absolute_query": True}, max_len=16)
    q, k, _ = qkv(3, 7)
    q2, k2 = pe.transform_qk(q, k, HookContext.for_positions(Q_POS, K_POS))
    torch.testing.assert_close(q2, q + pe.absolute.table[Q_POS].view(3, H, D).transpose(0, 1))
    assert k2 is k
    with pytest.raises(ValueError, match="max_len=16"):
        pe.transform_qk(q, k, HookContext.for_positions(torch.tensor([16]), K_POS))
    assert pe.sm_scale() == pytest.approx(1 / math.sqrt(3 * D))
    one_term = make("deberta", {"pos_att_type": "p2c"})
    assert one_term.sm_scale() == pytest.approx(1 / math.sqrt(2 * D))


def test_compiled_flex_agrees_with_eager_for_deberta():
    """One compiled FlexAttention run (CPU compiles cost seconds): the DeBERTa score_mod
    gathers c2p and p2c through the distance table inside the kernel. Lengths are
    multiples of 128, the CPU kernel's block size."""
    pe = make("deberta", {"position_buckets": 8, "max_relative_positions": 64})
    q, k, v = qkv(128, 256, batch=1)
    q_pos, k_pos = torch.arange(128, 256), torch.arange(256)
    with torch.no_grad():
        want, _ = attend(q, k, v, pe,
                         AttentionCall.for_positions(q_pos, k_pos, causal=True, backend="eager"))
        got, _ = attend(q, k, v, pe,
                        AttentionCall.for_positions(q_pos, k_pos, causal=True, backend="flex"))
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("options", [
    {"position_buckets": 8, "max_relative_positions": 16},
    {"position_buckets": None, "max_relative_positions": 9, "pos_att_type": "c2p"},
    {"position_buckets": 8, "max_relative_positions": 16, "pos_att_type": "p2c"},
], ids=["both", "c2p-raw", "p2c"])
def test_deberta_strided_bias_equals_the_gathered_one(options):
    """Positions the caller promises consecutive read the bias through strided views of
    distance tables; values and gradients equal the gather formulation (also what the hook
    computes without the promise), prefill with an offset included."""
    pe = make("deberta", options)
    for lq, lk, q0, k0 in [(7, 7, 0, 0), (3, 7, 4, 0), (1, 9, 8, 0), (6, 4, 2, 5)]:
        q, k, _ = qkv(lq, lk)
        q.requires_grad_(True)
        k.requires_grad_(True)
        q_pos, k_pos = torch.arange(q0, q0 + lq), torch.arange(k0, k0 + lk)
        assert lq + lk - 1 <= 2 * pe.span                               # the strided path
        grad = torch.randn(2, H, lq, lk)
        got = pe.score_bias(q, k, HookContext.for_positions(q_pos, k_pos, consecutive=True))
        want = deberta_gathered_bias(pe, q, k, q_pos, k_pos)
        torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(pe.score_bias(q, k, HookContext.for_positions(q_pos, k_pos)),
                                   want, atol=1e-6,
                                   rtol=1e-5)
        got_grads = torch.autograd.grad(got, [q, k, *pe.parameters()], grad, allow_unused=True)
        want_grads = torch.autograd.grad(want, [q, k, *pe.parameters()], grad, allow_unused=True)
        for g, w in zip(got_grads, want_grads):
            if w is None:
                assert g is None
            else:
                torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)


def test_deberta_normalizes_its_table_once_for_both_terms():
    """c2p and p2c read the same rows of the LayerNorm-ed table: where they read 2 span rows
    or more between them (every row over any positions), one normalization of the whole
    table serves both; fewer rows are normalized per term. The bias is the same."""
    pe = make("deberta", {"position_buckets": 8, "max_relative_positions": 16})   # span 8
    rows_normalized = []
    pe.rel_norm.register_forward_hook(lambda m, args, out: rows_normalized.append(len(out)))
    for lq, lk, consecutive, want_rows in [(7, 7, False, [16]), (7, 7, True, [16]),
                                           (3, 2, True, [4, 4]), (1, 4, True, [4, 4])]:
        q, k, _ = qkv(lq, lk)
        q_pos, k_pos = torch.arange(lk - lq, lk), torch.arange(lk)
        rows_normalized.clear()
        got = pe.score_bias(q, k, HookContext.for_positions(q_pos, k_pos,
                                                            consecutive=consecutive))
        assert rows_normalized == want_rows
        torch.testing.assert_close(got, deberta_gathered_bias(pe, q, k, q_pos, k_pos),
                                   atol=1e-6, rtol=1e-5)


# ----------------------------------------------------- against Hugging Face DeBERTa-v2
@needs_transformers
@pytest.mark.parametrize("pos_att_type,position_buckets,max_relative_positions", [
    ("c2p|p2c", 8, 16),          # log buckets; SEQ > max_relative_positions reaches the clamp
    ("c2p", 8, 16),
    ("p2c", 8, 16),
    ("c2p|p2c", -1, 12),         # raw distances clamped to [-12, 11]
])
def test_matches_hf_disentangled_self_attention(pos_att_type, position_buckets,
                                                max_relative_positions):
    encoder = hf_encoder(pos_att_type, position_buckets, max_relative_positions)
    mha, pe = copy_into_posenc(encoder, pos_att_type, position_buckets, max_relative_positions)
    x = torch.randn(2, SEQ, D_MODEL)
    mask = encoder.get_attention_mask(torch.ones(2, SEQ, dtype=torch.long))
    with torch.no_grad():
        want, want_weights = encoder.layer[0].attention.self(
            x, mask, output_attentions=True, relative_pos=encoder.get_rel_pos(x),
            rel_embeddings=encoder.get_rel_embedding())
        pos = torch.arange(SEQ)
        for backend in ("eager", "sdpa"):
            got, _ = mha(x, AttentionContext(pos, causal=False, backend=backend), pe)
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        _, weights = mha(x, AttentionContext(pos, causal=False, need_weights=True), pe)
    torch.testing.assert_close(weights, want_weights, atol=1e-6, rtol=1e-5)


@needs_transformers
@pytest.mark.parametrize("buckets,max_position", [(8, 16), (256, 512), (6, 5), (32, 100)])
def test_log_buckets_match_hf(buckets, max_position):
    rel = torch.arange(-3000, 3001)
    torch.testing.assert_close(log_bucket_position(rel, buckets, max_position),
                               hf.make_log_bucket_position(rel, buckets, max_position).long())
