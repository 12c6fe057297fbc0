"""Region methods (Self-Extend, ReRoPE, Leaky ReRoPE, Dual Chunk, StreamingLLM) on tiny Hugging
Face models: cached decoding equals a full forward, the patched attention equals the definition
computed pair by pair, degenerate options give the native model, StreamingLLM's cache stays
bounded, and what they refuse."""

from __future__ import annotations

import math

import pytest
import torch

from tests.hf.helpers import ORIG, T
from tests.hf.helpers import logits_of as _logits
from tests.hf.helpers import peaked_model as _model
from tests.hf.helpers import tiny_config as _config

transformers = pytest.importorskip("transformers")

from posenc.hf import extend, hf_rope_parameters, restore  # noqa: E402
from posenc.hf.extend import make_extension  # noqa: E402
from posenc.hf.patched_attention import adapter_of  # noqa: E402
from posenc.methods import build_method, relative_positions  # noqa: E402

REGION = ["self_extend", "rerope", "leaky_rerope", "dual_chunk", "streaming"]
#: small windows so that every region occurs within T = 80 tokens
OPTIONS = {"self_extend": {"window": 6, "group": 3}, "rerope": {"window": 7},
           "leaky_rerope": {"window": 7, "leak": 4.0},
           "dual_chunk": {"chunk_size": 20, "local_window": 4},
           "streaming": {"sinks": 3, "window": 20}}


def _decode(model, ids, prefill=17, cache=None):
    """Logits of a prefill then one token at a time through a DynamicCache (by default one
    built from the model's config): (1, T, V)."""
    cache = transformers.DynamicCache(config=model.config) if cache is None else cache
    with torch.no_grad():
        out = [model(input_ids=ids[:, :prefill], cache=cache, use_cache=True).logits]
        for t in range(prefill, ids.shape[1]):
            out.append(model(input_ids=ids[:, t:t + 1], cache=cache, use_cache=True).logits)
    return torch.cat(out, 1), cache


@pytest.mark.parametrize("method", REGION)
@pytest.mark.parametrize("kind", ["llama", "qwen3", "gemma3_text", "smollm3", "phi3"])
def test_cached_decoding_equals_full_forward(kind, method, ids):
    """Positions depend on (query, key) only, so even a 2-layer model decodes exactly."""
    if kind == "gemma3_text" and method == "streaming":
        pytest.skip("refused: sliding layers keep their own cache (test_refusals)")
    model = _model(_config(kind))
    plain = _logits(model, ids)
    extend(model, method, 2.0, **OPTIONS[method])
    full = _logits(model, ids)
    stepped, cache = _decode(model, ids)
    torch.testing.assert_close(stepped, full, atol=2e-4, rtol=1e-4)
    assert (full - plain).abs().max() > 1e-2                 # the method changes the model
    if method == "streaming":                                  # sinks + window - 1 kept
        assert cache.layers[0].keys.shape[2] == 3 + 20 - 1


@pytest.mark.parametrize("method", ["self_extend", "streaming"])
def test_cache_without_config_grows_its_layers(method, ids):
    """A DynamicCache() without a config adds its layers on the first update: a full forward
    and cached decoding through it equal the runs with the model's own cache."""
    model = _model(_config())
    extend(model, method, 2.0, **OPTIONS[method])
    with torch.no_grad():
        own = model(input_ids=ids, use_cache=True).logits
        lazy = model(input_ids=ids, cache=transformers.DynamicCache(), use_cache=True).logits
    torch.testing.assert_close(lazy, own, atol=0, rtol=0)
    stepped, cache = _decode(model, ids, cache=transformers.DynamicCache())
    torch.testing.assert_close(stepped, _decode(model, ids)[0], atol=0, rtol=0)
    if method == "streaming":                                  # sinks + window - 1 kept
        assert cache.layers[0].keys.shape[2] == 3 + 20 - 1


def test_a_reset_streaming_cache_decodes_like_a_new_one(ids):
    """Cache.reset() empties the layers that counted evicted tokens: the next sequence starts
    at position 0 again."""
    model = _model(_config())
    extend(model, "streaming", 2.0, **OPTIONS["streaming"])
    fresh, cache = _decode(model, ids)
    adapter = adapter_of(model.model.layers[0].self_attn)
    assert adapter.evicted[cache.layers[0]] > 0
    cache.reset()
    again, _ = _decode(model, ids, cache=cache)
    torch.testing.assert_close(again, fresh, atol=0, rtol=0)


def test_layers_share_one_rotary_table(ids):
    model = _model(_config(layers=3))
    extend(model, "self_extend", 2.0, **OPTIONS["self_extend"])
    _logits(model, ids)
    patches = [adapter_of(layer.self_attn) for layer in model.model.layers]
    assert all(p.tables is patches[0].tables for p in patches)
    assert list(patches[0].tables) == [ids.device]


def _reference_attention(attn, hidden, method):
    """One layer's attention output by the definition: for each pair its relative position
    from the position map, q rotated by it (Hugging Face's own rotary helper), one softmax."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb
    q = attn.q_proj(hidden).view(1, T, 4, 16).transpose(1, 2)
    k = attn.k_proj(hidden).view(1, T, 2, 16).transpose(1, 2).repeat_interleave(2, 1)
    v = attn.v_proj(hidden).view(1, T, 2, 16).transpose(1, 2).repeat_interleave(2, 1)
    pos = torch.arange(T)
    rel = relative_positions(method, pos, pos)                          # (T, T)
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, 16, 2).float() / 16))
    out = torch.zeros_like(q)
    for i in range(T):
        seen = (~rel[i].isnan()).nonzero()[:, 0]
        angles = rel[i, seen][:, None] * inv_freq                      # (n, 8)
        emb = torch.cat((angles, angles), -1)[None]
        qi = q[:, :, i:i + 1].expand(-1, -1, seen.numel(), -1)
        qr, _ = apply_rotary_pos_emb(qi, qi, emb.cos(), emb.sin())
        w = ((qr * k[:, :, seen]).sum(-1) / 4.0).softmax(-1)            # (1, H, n)
        out[:, :, i] = (w[..., None] * v[:, :, seen]).sum(2)
    return attn.o_proj(out.transpose(1, 2).reshape(1, T, 64))


@pytest.mark.parametrize("method", REGION)
def test_patched_attention_equals_the_definition(method, ids):
    model = _model(_config(layers=1))
    extend(model, method, 2.0, **OPTIONS[method])
    attn = model.model.layers[0].self_attn
    seen = {}
    attn.register_forward_hook(lambda mod, args, kwargs, out: seen.update(
        hidden=kwargs.get("hidden_states", args[0] if args else None), out=out[0]),
        with_kwargs=True)
    _logits(model, ids)
    region = build_method(method, ORIG, 2.0, **OPTIONS[method])
    with torch.no_grad():
        ref = _reference_attention(attn, seen["hidden"], region)
    torch.testing.assert_close(seen["out"], ref, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("method,options", [
    ("self_extend", {"window": 6, "group": 1}), ("rerope", {"window": T}),
    ("leaky_rerope", {"window": T, "leak": 2.0}),
    ("dual_chunk", {"chunk_size": T + 4, "local_window": 4}),
    ("streaming", {"sinks": 2, "window": T})])
def test_degenerate_options_give_the_native_model(method, options, ids):
    model = _model(_config())
    plain = _logits(model, ids)
    extend(model, method, 1.0, **options)
    torch.testing.assert_close(_logits(model, ids), plain, atol=2e-5, rtol=1e-5)


def test_region_methods_come_from_the_registry():
    from posenc.methods import list_methods, method_class
    assert set(REGION) <= set(list_methods("region"))
    assert method_class("dual_chunk").option_names() == ("chunk_size", "local_window")


def test_defaults_follow_the_factor():
    config = _config()
    ext = make_extension(config, "self_extend", 4.0)
    # the largest window up to ORIG / 4 = 8 that its group divides: 8, 7, 6 need G = 6, 5,
    # 5; W = 5 needs G = ceil((4 ORIG - 1 - 5) / (ORIG - 1 - 5)) = 5, a divisor
    assert ext.attention == {"name": "self_extend", "window": 5,
                             "group": math.ceil((4 * ORIG - 1 - 5) / (ORIG - 1 - 5))}
    assert make_extension(config, "streaming").attention == {"name": "streaming", "sinks": 4,
                                                             "window": ORIG - 4}
    assert hf_rope_parameters(ext, strict=False) == ({"rope_type": "default",
                                                      "rope_theta": 10000.0}, ORIG)


def test_refusals(ids):
    model = _model(_config())
    with pytest.raises(ValueError, match="goes alone: it remaps positions itself"):
        extend(model, "self_extend+logn", 2.0)
    with pytest.raises(ValueError, match="unknown option.*valid options: .*window, group"):
        extend(model, "self_extend", 2.0, groups=3)
    with pytest.raises(ValueError, match=r"leak must be a number > 1"):
        extend(model, "leaky_rerope", 2.0, leak=0.5)
    extend(model, "rerope", 2.0)
    mask = torch.ones(1, T, dtype=torch.long)
    mask[0, :3] = 0                                                    # left padding
    with torch.no_grad(), pytest.raises(ValueError, match="need positions 0..n-1"):
        model(input_ids=ids, attention_mask=mask)
    restore(model)
    gemma = _model(_config("gemma3_text"))
    with pytest.raises(ValueError, match="'streaming' needs every layer's cache to evict"):
        extend(gemma, "streaming", 2.0)
    assert not hasattr(gemma.model.layers[1].self_attn, "_posenc_attention")

