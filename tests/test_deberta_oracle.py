"""``deberta`` against Hugging Face DeBERTa-v2 disentangled attention with copied weights."""

import pytest
import torch

from posenc.attention import MultiHeadAttention
from posenc.encodings import build_encoding
from posenc.encodings.deberta import log_bucket_position

transformers = pytest.importorskip("transformers")
hf = pytest.importorskip("transformers.models.deberta_v2.modeling_deberta_v2")

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
            got, _ = mha(x, pos, pe, causal=False, backend=backend)
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        _, weights = mha(x, pos, pe, causal=False, need_weights=True)
    torch.testing.assert_close(weights, want_weights, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("buckets,max_position", [(8, 16), (256, 512), (6, 5), (32, 100)])
def test_log_buckets_match_hf(buckets, max_position):
    rel = torch.arange(-3000, 3001)
    torch.testing.assert_close(log_bucket_position(rel, buckets, max_position),
                               hf.make_log_bucket_position(rel, buckets, max_position).long())
