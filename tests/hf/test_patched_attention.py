"""The patched Llama-family attention: log-n query scaling against a hand-computed softmax, the
exact dynamic cache against full forwards, and what it refuses (tiny random models)."""

from __future__ import annotations

import inspect
import math

import pytest
import torch

from tests.hf.helpers import ORIG, T
from tests.hf.helpers import peaked_model as _model
from tests.hf.helpers import tiny_config as _config

transformers = pytest.importorskip("transformers")

from posenc.hf import extend, restore  # noqa: E402
from posenc.hf.patched_attention import patch_attention  # noqa: E402


def test_logn_multiplies_logits_of_late_queries(ids):
    """Eager attention weights of the patched model == softmax(max(1, log_L(p+1)) q.k/sqrt d)."""
    config = _config(layers=1)
    config._attn_implementation = "eager"
    model = _model(config)
    captured = {}
    attn = model.model.layers[0].self_attn
    hooks = [getattr(attn, n).register_forward_hook(
        lambda mod, inp, out, n=n: captured.__setitem__(n, out)) for n in ("q_proj", "k_proj")]
    extend(model, "logn")
    with torch.no_grad():
        weights = model(input_ids=ids, output_attentions=True).attentions[0]    # (1, H, T, T)
    for h in hooks:
        h.remove()
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb, repeat_kv
    q = captured["q_proj"].view(1, T, 4, 16).transpose(1, 2)
    k = captured["k_proj"].view(1, T, 2, 16).transpose(1, 2)
    cos, sin = model.model.rotary_emb(q, torch.arange(T)[None])
    q, k = apply_rotary_pos_emb(q, k, cos, sin)
    scale = (torch.log(torch.arange(T) + 1.0) / math.log(ORIG)).clamp(min=1.0)
    scores = (q @ repeat_kv(k, 2).transpose(-1, -2)) / 4.0 * scale[:, None]
    scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    torch.testing.assert_close(weights, scores.softmax(-1), atol=1e-5, rtol=1e-4)


def _cached_vs_prefix(model, ids, prefill=20):
    """Largest gap between cached decoding and a full forward of each prefix."""
    cache = transformers.DynamicCache(config=model.config)
    # transformers 5 names the cache argument ``cache``; 4.x ``past_key_values``
    name = "cache" if "cache" in inspect.signature(model.forward).parameters \
        else "past_key_values"
    gap = 0.0
    with torch.no_grad():
        model(input_ids=ids[:, :prefill], use_cache=True, **{name: cache})
        for t in range(prefill, ids.shape[1]):
            step = model(input_ids=ids[:, t:t + 1], use_cache=True,
                         **{name: cache}).logits[:, -1]
            full = model(input_ids=ids[:, :t + 1], use_cache=False).logits[:, -1]
            gap = max(gap, (step - full).abs().max().item())
    return gap


def test_exact_cache_rerotates_cached_keys(ids):
    """With one layer, exact-cache decoding equals a full forward; HF's dynamic cache keeps
    keys rotated at the length they were cached at (transformers #25104) and does not."""
    model = _model(_config(layers=1))
    extend(model, "dynamic+exact", 2.0)
    assert _cached_vs_prefix(model, ids[:, :48]) < 1e-4
    restore(model)
    extend(model, "dynamic", 2.0)
    assert _cached_vs_prefix(model, ids[:, :48]) > 1e-3


def test_exact_cache_refuses_custom_positions(ids):
    """Raw keys are rotated by their cache slot, so positions other than 0..n-1 are refused."""
    model = _model(_config(layers=1))
    extend(model, "dynamic+exact", 2.0)
    shifted = torch.arange(3, 3 + T)[None]
    with torch.no_grad(), pytest.raises(ValueError, match="exact_cache needs positions 0..n-1"):
        model(input_ids=ids, position_ids=shifted)


def test_attention_without_llama_layout_is_refused():
    """A module whose family has no apply_rotary_pos_emb / projections cannot be patched."""
    config = _config(layers=1)
    model = _model(config)
    enc = model.model.rotary_emb                      # any module: refused before it is used
    with pytest.raises(ValueError, match="does not have the Llama layout"):
        patch_attention(torch.nn.Linear(2, 2), enc, exact_cache=False)
