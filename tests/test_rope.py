"""RoPE properties: relative q.k, preserved norms, both layouts, partial rotary, fp32 angles."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from posenc import build_encoding

pytestmark = pytest.mark.usefixtures("single_thread")

D = 16
LAYOUT_DIMS = [(layout, rot) for layout in ("half", "interleaved") for rot in (16, 8)]


def _rope(layout="half", rotary_dim=None, **options):
    return build_encoding("rope", n_heads=2, head_dim=D, layout=layout, rotary_dim=rotary_dim,
                          **options)


def _reference_rotation(x: torch.Tensor, pos: torch.Tensor, layout: str, rot: int,
                        theta: float = 10000.0) -> torch.Tensor:
    """Independent float64 rotation by explicit 2x2 matrices. x (L, D), pos (L,)."""
    x = x.double()
    out = x.clone()
    half = rot // 2
    for i in range(half):
        angle = pos.double() * theta ** (-2.0 * i / rot)
        a, b = (i, i + half) if layout == "half" else (2 * i, 2 * i + 1)
        c, s = torch.cos(angle), torch.sin(angle)
        out[:, a] = c * x[:, a] - s * x[:, b]
        out[:, b] = s * x[:, a] + c * x[:, b]
    return out


@pytest.mark.parametrize("layout,rot", LAYOUT_DIMS)
def test_matches_explicit_rotation(layout, rot):
    pe = _rope(layout, rot)
    pos = torch.tensor([0, 1, 5, 63, 1000, 4097])
    x = torch.randn(1, 1, len(pos), D, dtype=torch.float64).float()
    got, _ = pe.transform_qk(x, x, pos, pos)
    want = _reference_rotation(x[0, 0], pos, layout, rot)
    # fp32 angles at position ~4000 carry ~4000 * 2^-24 rad of rounding
    assert_close(got[0, 0].double(), want, atol=2e-4, rtol=1e-5)
    assert torch.equal(got[..., rot:], x[..., rot:])            # partial rotary: rest untouched


@pytest.mark.parametrize("layout,rot", LAYOUT_DIMS)
def test_qk_depends_only_on_relative_position(layout, rot):
    pe = _rope(layout, rot)
    q = torch.randn(1, 2, 1, D).expand(1, 2, 12, D)            # same vector at every position
    k = torch.randn(1, 2, 1, D).expand(1, 2, 12, D)
    pos = torch.arange(12)

    def scores(offset):
        qr, kr = pe.transform_qk(q, k, pos + offset, pos + offset)
        return qr @ kr.transpose(-1, -2)                         # (1, 2, 12, 12): m, n

    s = scores(0)
    for offset in (1, 37, 2000):
        assert_close(scores(offset), s, atol=2e-4, rtol=1e-4)
    # along each diagonal (fixed m - n) every entry is the same
    for d in range(-11, 12):
        diag = torch.diagonal(s, offset=d, dim1=-2, dim2=-1)
        assert_close(diag, diag[..., :1].expand_as(diag), atol=2e-5, rtol=1e-5)
    # and the scores really change with m - n (not a constant)
    assert (s[..., 0, 0] - s[..., 5, 0]).abs().max() > 1e-2


@pytest.mark.parametrize("layout,rot", LAYOUT_DIMS)
def test_preserves_norms(layout, rot):
    pe = _rope(layout, rot)
    x = torch.randn(2, 2, 9, D)
    pos = torch.tensor([0, 3, 7, 100, 511, 1024, 5000, 65535, 7])
    q, k = pe.transform_qk(x, x * 2, pos, pos)
    assert_close(q.norm(dim=-1), x.norm(dim=-1))
    assert_close(k.norm(dim=-1), 2 * x.norm(dim=-1))


def test_attention_factor_scales_norms():
    """YaRN's attention factor multiplies cos and sin, so norms scale by it."""
    pe = _rope(scaling={"rope_type": "yarn", "factor": 8.0,
                        "original_max_position_embeddings": 64})
    factor = 0.1 * math.log(8.0) + 1.0
    assert pe.attention_factor == pytest.approx(factor)
    x = torch.randn(1, 2, 5, D)
    q, _ = pe.transform_qk(x, x, torch.arange(5), torch.arange(5))
    assert_close(q.norm(dim=-1), factor * x.norm(dim=-1))


def test_layouts_are_a_permutation_of_each_other():
    """Interleaved pairs (2i, 2i+1) are half's pairs (i, i + D/2) after a fixed permutation."""
    perm = torch.cat([torch.arange(0, D, 2), torch.arange(1, D, 2)])   # interleaved -> half
    x = torch.randn(1, 2, 7, D)
    pos = torch.arange(3, 10)
    inter, _ = _rope("interleaved").transform_qk(x, x, pos, pos)
    half, _ = _rope("half").transform_qk(x[..., perm], x[..., perm], pos, pos)
    assert_close(inter[..., perm], half)


def test_queries_and_keys_at_different_positions():
    """A decode step (1 query, many keys) rotates like the matching rows of a full pass."""
    pe = _rope()
    q, k = torch.randn(1, 2, 8, D), torch.randn(1, 2, 8, D)
    pos = torch.arange(8)
    q_full, k_full = pe.transform_qk(q, k, pos, pos)
    q_step, k_step = pe.transform_qk(q[:, :, -1:], k, pos[-1:], pos)
    assert_close(q_step, q_full[:, :, -1:])
    assert_close(k_step, k_full)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_angles_are_fp32_for_low_precision_inputs(dtype):
    """At large positions the angle must be computed in fp32: the result equals the fp32
    computation rounded once, not a computation in the low-precision dtype."""
    pe = _rope()
    pos = torch.tensor([100_000, 100_001, 250_003])
    x = torch.randn(1, 2, 3, D).to(dtype)
    got, _ = pe.transform_qk(x, x, pos, pos)
    want, _ = pe.transform_qk(x.float(), x.float(), pos, pos)
    assert got.dtype == dtype
    assert torch.equal(got, want.to(dtype))


def test_inv_freq_buffer_is_fp32_and_not_saved():
    pe = _rope(rotary_dim=8)
    assert pe.inv_freq.dtype == torch.float32 and pe.inv_freq.shape == (4,)
    pe = pe.to(torch.bfloat16)
    x = torch.randn(1, 2, 3, D)
    assert "inv_freq" not in pe.state_dict()
    assert_close(pe.transform_qk(x, x, torch.arange(3), torch.arange(3))[0],
                 _rope(rotary_dim=8).transform_qk(x, x, torch.arange(3), torch.arange(3))[0])


def test_theta_changes_frequencies():
    x = torch.randn(1, 1, 4, D)
    pos = torch.arange(4) * 50
    a, _ = _rope(theta=10000.0).transform_qk(x, x, pos, pos)
    b, _ = _rope(theta=500000.0).transform_qk(x, x, pos, pos)
    want = _reference_rotation(x[0, 0], pos, "half", D, theta=500000.0)
    assert_close(b[0, 0].double(), want, atol=2e-5, rtol=1e-5)
    assert (a - b).abs().max() > 1e-2
