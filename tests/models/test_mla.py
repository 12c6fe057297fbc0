"""A TransformerLM with multi-head latent attention (``LMConfig.mla``): the encoding works on
each head's rotary part, cached decoding equals the full forward (also for left-padded
prompts and a length-dependent scaling), the config saves and loads, and encodings that need
full per-head keys are refused."""

from __future__ import annotations

import pytest
import torch

from posenc.errors import UserError
from posenc.models import LMConfig, TransformerLM

MLA = {"kv_lora_rank": 12, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8, "v_head_dim": 12,
       "q_lora_rank": 16}


def _model(**kw):
    torch.manual_seed(0)
    config = LMConfig(**{**dict(vocab_size=50, d_model=32, n_heads=4, n_layers=2, max_len=16,
                                mla=MLA), **kw})
    return TransformerLM(config).eval()


def _stepwise(model, ids, prefill=5, attention_mask=None):
    caches = model.make_caches(ids.shape[0], ids.shape[1])
    with torch.no_grad():
        out = [model(ids[:, :prefill], caches=caches,
                     attention_mask=None if attention_mask is None
                     else attention_mask[:, :prefill])]
        for t in range(prefill, ids.shape[1]):
            out.append(model(ids[:, t:t + 1], caches=caches,
                             attention_mask=None if attention_mask is None
                             else attention_mask[:, t:t + 1]))
    return torch.cat(out, 1)


@pytest.mark.parametrize("pe,options", [
    ("rope", {}), ("rope", {"scaling": {"rope_type": "dynamic", "factor": 2.0}}),
    ("rope", {"scaling": {"rope_type": "yarn", "factor": 2.0, "mscale": 1.0,
                          "mscale_all_dim": 1.0}}), ("nope", {}), ("learned", {})])
def test_cached_decoding_equals_the_full_forward(pe, options):
    model = _model(pe=pe, pe_options=options, max_len=32 if pe == "learned" else 16)
    ids = torch.randint(0, 50, (2, 30), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = model(ids)
    stepped = _stepwise(model, ids)
    if model.pe.length_dependent:   # each step's frequencies follow its own length
        stepped, full = stepped[:, -1], full[:, -1]
    torch.testing.assert_close(stepped, full, atol=1e-5, rtol=1e-5)


def test_left_padded_prompts_decode_as_alone():
    model = _model()
    ids = torch.randint(1, 50, (2, 20), generator=torch.Generator().manual_seed(2))
    mask = torch.ones(2, 20, dtype=torch.long)
    mask[1, :4] = 0
    with torch.no_grad():
        alone = model(ids[1:, 4:])
    torch.testing.assert_close(_stepwise(model, ids, 8, mask)[1:, 4:], alone, atol=1e-5,
                               rtol=1e-5)


def test_the_rotary_part_carries_the_positions():
    """Rope on the rotary part: shifting every position leaves the logits (relative);
    stretching them changes them; the cache holds one latent and one rotary key per token."""
    model = _model()
    ids = torch.randint(0, 50, (1, 12), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        base = model(ids)
        shifted = model(ids, positions=torch.arange(12) + 7)
        stretched = model(ids, positions=torch.arange(12) * 3)
    torch.testing.assert_close(shifted, base, atol=1e-5, rtol=1e-5)
    assert (stretched - base).abs().max() > 1e-3
    assert model.pe.head_dim == 8
    assert tuple(model.make_caches(1, 12)[0].k.shape) == (1, 1, 12, 12 + 8)


def test_trains_and_round_trips_its_config():
    model = _model().train()
    ids = torch.randint(0, 50, (2, 16))
    logits = model(ids)
    torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids.flatten()).backward()
    assert model.blocks[0].attn.kv_b_proj.weight.grad is not None
    data = model.config.to_dict()
    assert data["mla"] == {**MLA}
    assert LMConfig.from_dict(data) == model.config
    assert "mla" not in LMConfig().to_dict()


@pytest.mark.parametrize("kw,message", [
    ({"pe": "alibi"}, "latent attention .* takes encodings with only"),
    ({"attn_sinks": True}, "no plan and no attn_sinks"),
    ({"mla": {"kv_lora_rank": 4, "rope_dim": 2}}, "unknown mla key")])
def test_refusals(kw, message):
    config = dict(vocab_size=50, d_model=32, n_heads=4, mla=MLA) | kw
    with pytest.raises(UserError, match=message):
        LMConfig(**config)
