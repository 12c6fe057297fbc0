"""M-RoPE (Qwen2-VL): against transformers' ``Qwen2VLRotaryEmbedding`` and
``apply_rotary_pos_emb`` with the same sections, text (three equal axes) equals RoPE, each
section follows its own axis, option errors."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from posenc.encodings import build_encoding
from posenc.encodings.context import HookContext

pytestmark = pytest.mark.usefixtures("single_thread")


def _mrope(head_dim=16, **options):
    return build_encoding("mrope", n_heads=2, head_dim=head_dim, **options)


def _qk(head_dim=16, length=6, batch=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, 2, length, head_dim, generator=g),
            torch.randn(batch, 2, length, head_dim, generator=g))


def _at(axes):
    return HookContext.for_positions(axes[0], axes=axes)


@pytest.mark.parametrize("head_dim,sections,theta", [
    (16, [2, 3, 3], 10000.0), (16, [4, 0, 4], 1e6), (128, None, 10000.0)])
def test_matches_transformers_qwen2_vl(head_dim, sections, theta):
    qwen = pytest.importorskip("transformers.models.qwen2_vl.modeling_qwen2_vl")
    from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLTextConfig
    rope = {"rope_type": "default", "rope_theta": theta}
    if sections is not None:
        rope["mrope_section"] = sections
    config = Qwen2VLTextConfig(hidden_size=2 * head_dim, num_attention_heads=2,
                               num_key_value_heads=2, rope_parameters=rope)
    rotary = qwen.Qwen2VLRotaryEmbedding(config)
    pe = _mrope(head_dim, theta=theta, **({} if sections is None else
                                          {"mrope_section": sections}))
    assert pe.mrope_section == rotary.mrope_section
    q, k = _qk(head_dim)
    for axes in (torch.randint(0, 4000, (3, 2, 6), generator=torch.Generator().manual_seed(1)),
                 torch.arange(6).expand(3, 2, 6)):
        cos, sin = rotary(q, axes)
        want = qwen.apply_rotary_pos_emb(q, k, cos, sin)
        got = pe.transform_qk(q, k, _at(axes))
        assert_close(got[0], want[0], atol=1e-5, rtol=1e-5)
        assert_close(got[1], want[1], atol=1e-5, rtol=1e-5)


def test_text_is_rope():
    """Equal axes (and no axes at all) give RoPE's rotation."""
    pe, rope = _mrope(), build_encoding("rope", n_heads=2, head_dim=16)
    q, k = _qk()
    pos = torch.tensor([[3, 4, 5, 9, 10, 11], [0, 1, 2, 3, 4, 5]])
    want = rope.transform_qk(q, k, HookContext.for_positions(pos))
    for got in (pe.transform_qk(q, k, _at(pos.expand(3, 2, 6))),
                pe.transform_qk(q, k, HookContext.for_positions(pos))):
        assert_close(got[0], want[0], rtol=0, atol=0)
        assert_close(got[1], want[1], rtol=0, atol=0)


@pytest.mark.parametrize("options", [
    {"scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}},
    {"partial": 0.5}, {"rotary_dim": 8}, {"layout": "interleaved", "theta": 1e6}])
def test_text_is_rope_with_its_options(options):
    """Equal axes give RoPE's rotation bit for bit under RoPE's options too: a scaling with an
    attention factor (yarn), p-RoPE, a partial rotary_dim; positions past 2^16 included."""
    pe, rope = _mrope(**options), build_encoding("rope", n_heads=2, head_dim=16, **options)
    q, k = _qk()
    pos = torch.tensor([[3, 4, 5, 9, 10, 11], [0, 1, 2**16, 2**16 + 1, 2**20, 2**20 + 7]])
    want = rope.transform_qk(q, k, HookContext.for_positions(pos))
    got = pe.transform_qk(q, k, _at(pos.expand(3, 2, 6)))
    assert_close(got[0], want[0], rtol=0, atol=0)
    assert_close(got[1], want[1], rtol=0, atol=0)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_each_section_follows_its_axis(layout):
    """Moving one axis changes exactly the pairs of its section."""
    pe = _mrope(mrope_section=[2, 3, 3], layout=layout)
    q, _ = _qk()
    base = torch.randint(0, 50, (3, 2, 6), generator=torch.Generator().manual_seed(2))
    ref = pe.transform_qk(q, q, _at(base))[0]
    starts = [0, 2, 5, 8]
    for axis in range(3):
        moved = base.clone()
        moved[axis] += 7
        diff = (pe.transform_qk(q, q, _at(moved))[0] - ref).abs().amax((0, 1, 2))     # (D,)
        pairs = torch.zeros(8, dtype=torch.bool)
        pairs[starts[axis]:starts[axis + 1]] = True
        dims = torch.cat([pairs, pairs]) if layout == "half" else pairs.repeat_interleave(2)
        assert (diff[dims] > 1e-3).all() and (diff[~dims] == 0).all()


def test_default_sections_are_qwen2_vl_proportions():
    assert _mrope(128).mrope_section == [16, 24, 24]
    assert _mrope(16).mrope_section == [2, 3, 3]
    assert sum(_mrope(8).mrope_section) == 4


@pytest.mark.parametrize("sections", [[2, 3, 2], [8, 0], [2, 3, 3, 0], [-1, 5, 4], "233",
                                      [2.0, 3, 3]])
def test_sections_not_summing_to_the_pairs_are_refused(sections):
    with pytest.raises(ValueError, match=r"mrope_section must be 3 integers >= 0 summing to "
                                         r"the rotary pairs rotary_dim/2=8, got"):
        _mrope(mrope_section=sections)


def test_sections_follow_rotary_dim_and_refuse_length_dependent_scalings():
    assert _mrope(rotary_dim=8, mrope_section=[2, 1, 1]).mrope_section == [2, 1, 1]
    with pytest.raises(ValueError, match="mrope does not support the scaling 'dynamic'"):
        _mrope(max_len=32, scaling={"rope_type": "dynamic", "factor": 2.0})


def test_axes_are_checked():
    q, k = _qk()
    with pytest.raises(ValueError, match=r"reads 3 position axes, got axes of shape \(2, 2, 6\)"):
        _mrope().transform_qk(q, k, _at(torch.zeros(2, 2, 6, dtype=torch.long)))
    with pytest.raises(ValueError, match="axes must have shape"):
        HookContext.for_positions(torch.arange(6), axes=torch.zeros(3, 2, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="need k_pos to be q_pos"):
        HookContext.for_positions(torch.arange(6), torch.arange(6),
                                  axes=torch.zeros(3, 6, dtype=torch.long))
