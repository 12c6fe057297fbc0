"""Multi-head latent attention with decoupled RoPE (DeepSeek-V2, Sec. 2.1.3) equals
transformers' ``DeepseekV3Attention`` on a tiny config with its weights copied (float32,
within 1e-5), with and without the query bottleneck, interleaved or half rotary pairs, plain
RoPE and YaRN with DeepSeek's mscale; the cache holds the latent and one rotary key per
token, and cached decoding equals the full forward."""

from __future__ import annotations

import pytest
import torch

from posenc.attention import AttentionContext
from posenc.attention.latent import LatentAttention, LatentShape, make_latent_cache
from posenc.encodings import build_encoding
from posenc.errors import UserError

transformers = pytest.importorskip("transformers")

C, H, T, ORIG = 48, 3, 40, 16
SHAPE = dict(kv_lora_rank=12, qk_rope_head_dim=8, qk_nope_head_dim=10, v_head_dim=14)
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": ORIG,
        "mscale": 1.0, "mscale_all_dim": 0.7}


def _hf_attention(q_lora_rank, interleave, scaling):
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import (
        DeepseekV3Attention,
        DeepseekV3RotaryEmbedding,
    )
    config = transformers.DeepseekV3Config(
        hidden_size=C, num_attention_heads=H, num_key_value_heads=H, q_lora_rank=q_lora_rank,
        rope_interleave=interleave, max_position_embeddings=ORIG, rms_norm_eps=1e-6,
        rope_parameters={"rope_theta": 10000.0, **(scaling or {"rope_type": "default"})},
        attn_implementation="eager", **SHAPE)
    torch.manual_seed(0)
    attn = DeepseekV3Attention(config, 0).eval()
    with torch.no_grad():
        for p in attn.parameters():
            p.copy_(torch.randn(p.shape) * (0.1 if p.dim() == 1 else 0.4) + (p.dim() == 1))
    return attn, DeepseekV3RotaryEmbedding(config)


def _posenc_attention(hf, q_lora_rank):
    ours = LatentAttention(C, H, LatentShape(q_lora_rank=q_lora_rank, **SHAPE), norm_eps=1e-6)
    names = {"q_a_layernorm": "q_a_norm", "kv_a_proj_with_mqa": "kv_a_proj",
             "kv_a_layernorm": "kv_a_norm", "o_proj": "out_proj"}
    state = {}
    for key, value in hf.state_dict().items():
        module, _, leaf = key.partition(".")
        state[f"{names.get(module, module)}.{leaf}"] = value
    ours.load_state_dict(state)
    return ours.eval()


def _rope(interleave, scaling):
    return build_encoding("rope", n_heads=H, head_dim=SHAPE["qk_rope_head_dim"], max_len=ORIG,
                          layout="interleaved" if interleave else "half", scaling=scaling)


@pytest.mark.parametrize("q_lora_rank", [None, 20])
@pytest.mark.parametrize("interleave", [True, False])
@pytest.mark.parametrize("scaling", [None, YARN], ids=["rope", "yarn"])
def test_equals_deepseek_v3_attention(q_lora_rank, interleave, scaling):
    hf, rotary = _hf_attention(q_lora_rank, interleave, scaling)
    ours = _posenc_attention(hf, q_lora_rank)
    x = torch.randn(2, T, C, generator=torch.Generator().manual_seed(1))
    pos = torch.arange(T)
    mask = torch.full((T, T), float("-inf")).triu(1)[None, None]
    with torch.no_grad():
        want = hf(x, rotary(x, pos[None].expand(2, T)), mask)[0]
        got, _ = ours(x, AttentionContext(pos, causal=True, consecutive=True),
                      _rope(interleave, scaling))
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert (want[:, 1:] - want[:, :1]).abs().max() > 1e-2        # not a constant output


def test_cached_decoding_equals_the_full_forward():
    hf, _ = _hf_attention(20, True, YARN)
    ours, pe = _posenc_attention(hf, 20), _rope(True, YARN)
    x = torch.randn(2, T, C, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        full, _ = ours(x, AttentionContext(torch.arange(T), causal=True, consecutive=True), pe)
        cache = make_latent_cache(2, ours.shape, T, torch.float32, "cpu")
        steps = [ours(x[:, :9], AttentionContext(torch.arange(9), causal=True,
                                                  consecutive=True), pe, cache)[0]]
        for i in range(9, T):
            steps.append(ours(x[:, i:i + 1], AttentionContext(torch.arange(i, i + 1),
                                                              causal=True, consecutive=True),
                              pe, cache)[0])
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)
    # the cache holds the latent and one shared rotary key per token, nothing per head
    assert tuple(cache.k.shape) == (2, 1, T, 12 + 8) and cache.v.numel() == 0


def test_shape_checks():
    with pytest.raises(UserError, match="qk_rope_head_dim must be even"):
        LatentShape(qk_rope_head_dim=7)
    with pytest.raises(UserError, match="unknown mla key"):
        LatentShape.from_dict({"kv_rank": 4})
