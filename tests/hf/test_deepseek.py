"""DeepSeek-V3-family models (multi-head latent attention) in ``posenc.hf.extend``: YaRN with
DeepSeek's mscale equals transformers' own model configured with the same rope scaling, region
methods go through the same adapter as Llama's and equal their definition computed pair by
pair, cached decoding equals a full forward, and DroPE removes the rotary slice."""

from __future__ import annotations

import copy

import pytest
import torch

transformers = pytest.importorskip("transformers")

from posenc.errors import UserError  # noqa: E402
from posenc.hf import extend, restore  # noqa: E402
from posenc.methods import build_method, relative_positions  # noqa: E402
from tests.hf.helpers import logits_of  # noqa: E402

ORIG, VOCAB, T = 32, 97, 80
H, DN, DR, DV, R = 4, 12, 8, 10, 16          # heads, no-rotary, rotary, value dims, KV latent


def deepseek_config(**kw):
    """A tiny dense DeepSeek-V3 (every layer before ``first_k_dense_replace``: no experts)."""
    settings = dict(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
        num_hidden_layers=2, num_attention_heads=H, num_key_value_heads=H,
        n_routed_experts=4, num_experts_per_tok=2, n_group=1, topk_group=1,
        first_k_dense_replace=2, kv_lora_rank=R, q_lora_rank=24, qk_rope_head_dim=DR,
        qk_nope_head_dim=DN, v_head_dim=DV, max_position_embeddings=ORIG,
        attn_implementation="eager")
    return transformers.DeepseekV3Config(**{**settings, **kw})


def deepseek_model(**kw):
    """Random weights large enough that attention is peaked (positions matter)."""
    torch.manual_seed(0)
    model = transformers.DeepseekV3ForCausalLM(deepseek_config(**kw)).eval()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            noise = torch.randn(p.shape, generator=gen)
            p.copy_(1.0 + 0.01 * noise if p.dim() == 1 else 0.3 * noise)
    return model


@pytest.fixture
def ids():
    return torch.randint(0, VOCAB, (1, T), generator=torch.Generator().manual_seed(2))


@pytest.mark.parametrize("interleave", [True, False])
def test_yarn_with_mscale_equals_transformers(interleave, ids):
    """mscale sets the cos/sin factor and mscale_all_dim (squared) the softmax scale: both
    differ from 1 here, so leaving either out fails."""
    model = deepseek_model(rope_interleave=interleave)
    scaling = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": ORIG,
               "mscale": 1.0, "mscale_all_dim": 0.8, "rope_theta": 10000.0}
    oracle = transformers.DeepseekV3ForCausalLM(deepseek_config(
        rope_interleave=interleave, rope_parameters=scaling)).eval()
    oracle.load_state_dict(model.state_dict())
    plain = logits_of(model, ids)
    scale = model.model.layers[0].self_attn.scaling
    extend(model, "yarn", 4.0, mscale=1.0, mscale_all_dim=0.8)
    assert model.model.layers[0].self_attn.scaling == oracle.model.layers[0].self_attn.scaling
    torch.testing.assert_close(logits_of(model, ids), logits_of(oracle, ids), atol=1e-5,
                               rtol=1e-5)
    assert (logits_of(model, ids) - plain)[:, ORIG:].abs().max() > 1e-2
    restore(model)
    assert model.model.layers[0].self_attn.scaling == scale
    torch.testing.assert_close(logits_of(model, ids), plain, atol=0, rtol=0)


def _decode(model, ids, prefill=17):
    cache = transformers.DynamicCache(config=model.config)
    with torch.no_grad():
        out = [model(input_ids=ids[:, :prefill], cache=cache, use_cache=True).logits]
        for t in range(prefill, ids.shape[1]):
            out.append(model(input_ids=ids[:, t:t + 1], cache=cache, use_cache=True).logits)
    return torch.cat(out, 1)


def _reference_attention(attn, hidden, method):
    """One layer's output by the definition: each pair's relative position from the position
    map rotates the query's rotary part (transformers' interleaved helper), the shared rotary
    key stays at 0, the no-rotary parts as they are; one softmax at the layer's scale."""
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import (
        apply_rotary_pos_emb_interleave,
    )
    q = attn.q_b_proj(attn.q_a_layernorm(attn.q_a_proj(hidden))).view(1, T, H, DN + DR)
    q = q.transpose(1, 2)                                                 # (1, H, T, DN+DR)
    latent, k_rot = attn.kv_a_proj_with_mqa(hidden).split([R, DR], -1)
    kv = attn.kv_b_proj(attn.kv_a_layernorm(latent)).view(1, T, H, DN + DV).transpose(1, 2)
    k_nope, v = kv.split([DN, DV], -1)
    pos = torch.arange(T)
    rel = relative_positions(method, pos, pos)                            # (T, T)
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, DR, 2).float() / DR))
    zero = torch.zeros(1, T, DR)
    _, k_rot = apply_rotary_pos_emb_interleave(k_rot[:, None], k_rot[:, None], zero.cos(),
                                               zero.sin())                # layout only
    out = torch.zeros(1, H, T, DV)
    for i in range(T):
        seen = (~rel[i].isnan()).nonzero()[:, 0]
        angles = rel[i, seen][:, None] * inv_freq
        emb = torch.cat((angles, angles), -1)[None]                       # (1, n, DR)
        qi = q[:, :, i:i + 1, DN:].expand(-1, -1, seen.numel(), -1)
        qr, _ = apply_rotary_pos_emb_interleave(qi, qi, emb.cos(), emb.sin())
        score = (q[:, :, i:i + 1, :DN] * k_nope[:, :, seen]).sum(-1) + \
            (qr * k_rot[:, :, seen]).sum(-1)
        w = (score * attn.scaling).softmax(-1)                            # (1, H, n)
        out[:, :, i] = (w[..., None] * v[:, :, seen]).sum(2)
    return attn.o_proj(out.transpose(1, 2).reshape(1, T, H * DV))


@pytest.mark.parametrize("method,options", [("self_extend", {"window": 6, "group": 3}),
                                            ("rerope", {"window": 7})])
def test_region_methods_equal_their_definition(method, options, ids):
    model = deepseek_model(num_hidden_layers=1, first_k_dense_replace=1)
    plain = logits_of(model, ids)
    extend(model, method, 2.0, **options)
    attn = model.model.layers[0].self_attn
    seen = {}
    attn.register_forward_hook(lambda mod, args, kwargs, out: seen.update(
        hidden=kwargs.get("hidden_states", args[0] if args else None), out=out[0]),
        with_kwargs=True)
    full = logits_of(model, ids)
    with torch.no_grad():
        ref = _reference_attention(attn, seen["hidden"], build_method(method, ORIG, 2.0,
                                                                      **options))
    torch.testing.assert_close(seen["out"], ref, atol=1e-5, rtol=1e-5)
    assert (full - plain).abs().max() > 1e-2


@pytest.mark.parametrize("method,options", [("self_extend", {"window": 6, "group": 3}),
                                            ("streaming", {"sinks": 3, "window": 20})])
def test_cached_decoding_equals_full_forward(method, options, ids):
    model = deepseek_model()
    extend(model, method, 2.0, **options)
    # logits of size ~10: float32 summation order differs between one pass and 64 steps
    torch.testing.assert_close(_decode(model, ids), logits_of(model, ids), atol=1e-4,
                               rtol=1e-4)


def test_degenerate_self_extend_is_the_native_model(ids):
    model = deepseek_model()
    plain = logits_of(model, ids)
    extend(model, "self_extend", 1.0, window=6, group=1)
    torch.testing.assert_close(logits_of(model, ids), plain, atol=1e-5, rtol=1e-5)


def test_drope_removes_the_rotary_slice(ids):
    model = deepseek_model()
    reference = copy.deepcopy(model)
    reference.model.rotary_emb.inv_freq.zero_()
    extend(model, "drope")
    torch.testing.assert_close(logits_of(model, ids), logits_of(reference, ids), atol=0,
                               rtol=0)


def test_add_ons_are_refused():
    with pytest.raises(UserError, match="latent attention"):
        extend(deepseek_model(), "yarn:4+logn")
