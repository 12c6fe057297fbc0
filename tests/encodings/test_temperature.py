"""Llama 4's attention temperature tuning, an option of every encoding: its factor against
transformers' ``Llama4TextAttention`` (a NoPE layer of a tiny config), its option errors and
how it combines with log-n scaling."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from posenc.attention import attend
from posenc.attention.context import AttentionCall
from posenc.encodings import build_encoding
from posenc.encodings.context import HookContext
from tests.helpers import decode_in_steps

pytestmark = pytest.mark.usefixtures("single_thread")


def _factor(pe, q_pos, causal=True):
    return pe.attn_scale(HookContext.for_positions(q_pos, q_pos, causal=causal))


def test_factor_is_llama4_formula_by_hand():
    pe = build_encoding("nope", n_heads=2, head_dim=8, temperature_floor=4,
                        temperature_scale=0.5)
    pos = torch.tensor([0, 2, 3, 6, 7, 11, 99_999])
    expected = [1 + 0.5 * math.log(1 + (p + 1) // 4) for p in pos.tolist()]
    assert_close(_factor(pe, pos), torch.tensor(expected), rtol=1e-6, atol=0)
    assert _factor(pe, pos)[:2].tolist() == [1.0, 1.0]        # below the first floor step


class _PastTokens:
    """A stand-in cache for HF's attention: ``past`` tokens already seen, none returned."""

    def __init__(self, past):
        self.past = past

    def get_seq_length(self, layer_idx=0):
        return self.past

    def update(self, k, v, layer_idx, **kwargs):
        return k, v


@pytest.mark.parametrize("floor_scale,attn_scale", [(8192, 0.1), (3, 0.7)])
def test_matches_transformers_llama4_nope_layer(floor_scale, attn_scale):
    llama4 = pytest.importorskip("transformers.models.llama4.modeling_llama4")
    from transformers.models.llama4.configuration_llama4 import Llama4TextConfig
    config = Llama4TextConfig(hidden_size=16, num_attention_heads=2, num_key_value_heads=2,
                              head_dim=8, num_hidden_layers=1, no_rope_layers=[0],
                              attn_temperature_tuning=True, floor_scale=floor_scale,
                              attn_scale=attn_scale, use_qk_norm=False)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    layer = llama4.Llama4TextAttention(config, 0).eval()
    assert not layer.use_rope
    pe = build_encoding("nope", n_heads=2, head_dim=8, temperature_floor=floor_scale,
                        temperature_scale=attn_scale)
    t = 6
    x = torch.randn(1, t, 16)
    causal = torch.full((t, t), float("-inf")).triu(1)[None, None]
    for past in (0, 40_000, 99_994):
        with torch.no_grad():
            ours_in = [p(x).view(1, t, 2, 8).transpose(1, 2)
                       for p in (layer.q_proj, layer.k_proj, layer.v_proj)]
            pos = torch.arange(past, past + t)
            out, _ = attend(*ours_in, pe, AttentionCall.for_positions(
                pos, pos, causal=True, backend="eager"))
            ours = layer.o_proj(out.transpose(1, 2).reshape(1, t, 16))
            theirs, _ = layer(x, None, causal, cache=_PastTokens(past))
        assert_close(ours, theirs, atol=1e-5, rtol=1e-5)


def test_multiplies_the_logn_factor_and_breaks_translation_invariance():
    pos = torch.tensor([0, 5, 20, 300])
    both = build_encoding("alibi", n_heads=2, head_dim=8, logn_base_len=8, temperature_floor=4)
    logn = build_encoding("alibi", n_heads=2, head_dim=8, logn_base_len=8)
    tuned = build_encoding("alibi", n_heads=2, head_dim=8, temperature_floor=4)
    assert_close(_factor(both, pos), _factor(logn, pos) * _factor(tuned, pos))
    assert build_encoding("alibi", n_heads=2, head_dim=8).translation_invariant
    assert not tuned.translation_invariant
    assert tuned.temperature_scale == 0.1


def test_per_sequence_positions_and_bidirectional_read_the_query_position():
    pe = build_encoding("rope", n_heads=2, head_dim=8, temperature_floor=2)
    pos = torch.tensor([[0, 1, 2, 3], [7, 8, 9, 10]])
    for causal in (True, False):
        got = _factor(pe, pos, causal)
        assert got.shape == (2, 4)
        assert_close(got[1], _factor(pe, pos[1], causal))


def test_off_by_default():
    assert _factor(build_encoding("nope", n_heads=2, head_dim=8), torch.arange(9)) is None


@pytest.mark.parametrize("options,message", [
    ({"temperature_floor": 0}, "temperature_floor must be an integer >= 1"),
    ({"temperature_floor": 2.5}, "temperature_floor must be an integer >= 1"),
    ({"temperature_floor": 8, "temperature_scale": -0.1}, r"temperature_scale must be a "
                                                          r"number in \[0.0, inf\)"),
    ({"temperature_scale": 0.1}, "temperature_scale needs temperature_floor"),
])
def test_bad_options_are_named(options, message):
    with pytest.raises(ValueError, match=message):
        build_encoding("rope", n_heads=2, head_dim=8, **options)


@pytest.mark.parametrize("name", ["nope", "rope", "alibi"])
@torch.no_grad()
def test_in_a_model_cached_padded_and_packed_runs_equal_full_ones(name, tiny_lm):
    """The factor reads the query's own position: cached decoding equals a full forward, a
    left-padded row equals the row alone, a packed document equals the document alone."""
    options = {"temperature_floor": 2, "temperature_scale": 0.8}
    model = tiny_lm(name, options, max_len=32)
    ids = torch.randint(0, 48, (2, 12), generator=torch.Generator().manual_seed(0))
    full = model(ids)
    assert_close(decode_in_steps(model, ids, 5), full, atol=2e-5, rtol=1e-5)
    padded = torch.cat([torch.zeros(1, 3, dtype=torch.long), ids[:1]], 1)
    mask = torch.cat([torch.zeros(1, 3), torch.ones(1, 12)], 1).long()
    assert_close(model(padded, attention_mask=mask)[:, 3:], full[:1], atol=2e-5, rtol=1e-5)
    packed = model(ids.reshape(1, 24), document_ids=torch.arange(2).repeat_interleave(12)[None])
    assert_close(packed.reshape(2, 12, -1), full, atol=2e-5, rtol=1e-5)
    plain = tiny_lm(name, max_len=32)
    assert (plain(ids) - full).abs().max() > 1e-3              # the option changes logits
