"""Per-sample angles: cos/sin (B, L, R/2), one row of angles per sequence, broadcast over heads.
Each sequence's result equals rotating it alone with shared (L, R/2) angles, on the kernel and
on the reference, for values and gradients."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from posenc.kernels import rotary as rk
from posenc.kernels import rotary_native as rn

EXACT = dict(rtol=0.0, atol=0.0)


def qkv_view(b, h, t, d, dtype):
    """q as the attention layer makes it: a (B, H, T, D) view of a (B, T, 3*H*D) projection."""
    qkv = torch.randn(b, t, 3 * h * d).to(dtype)
    return qkv[..., : h * d].view(b, t, h, d).transpose(1, 2)


def per_sample_angles(batch, length, rot):
    """(B, L, R/2) cos, sin: each sequence at its own positions (offsets, gaps, a repeat)."""
    inv_freq = 1.0 / 10000.0 ** (torch.arange(0, rot, 2, dtype=torch.float32) / rot)
    pos = torch.stack([torch.arange(length) * (b + 1) + 7 * b for b in range(batch)])
    pos[-1] = 3                                                   # one sequence: one position
    theta = rk.rotary_angles(pos, inv_freq)                       # (B, L, R/2)
    return theta.cos() * 1.1, theta.sin() * 1.1


def row_by_row(x, cos, sin, layout, fn):
    """Each sequence rotated alone with its (L, R/2) angles."""
    return torch.stack([fn(x[b], cos[b], sin[b], layout) for b in range(x.shape[0])])


@pytest.fixture
def kernel_calls(monkeypatch):
    """The calls apply_rotary makes to the kernel."""
    calls = []
    monkeypatch.setattr(rk, "rotate_native", lambda *a: calls.append(a) or rn.rotate_native(*a))
    return calls


@pytest.mark.parametrize("layout", rk.LAYOUTS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape,rot,make", [
    ((3, 4, 9, 32), 32, "qkv"),           # vector loop, q as a view of a qkv projection
    ((3, 4, 9, 40), 24, "qkv"),           # partial rotary, scalar loop
    ((3, 4, 9, 32), 16, "batch_inner"),   # batch inside heads in memory
    ((2, 5, 16), 16, "dense"),            # (B, L, D): no head dim
    ((2, 2, 3, 5, 16), 8, "dense"),       # (B, G, H, L, D): broadcast over two dims
])
def test_per_sample_equals_rotating_each_sequence_alone(native_rotary, kernel_calls, shape,
                                                        rot, make, dtype, layout):
    if make == "qkv":
        x = qkv_view(*shape, dtype)
    elif make == "batch_inner":                                  # (H, B, L, D) in memory
        x = torch.randn(shape[1], shape[0], *shape[2:]).to(dtype).transpose(0, 1)
    else:
        x = torch.randn(shape).to(dtype)
    cos, sin = per_sample_angles(shape[0], shape[-2], rot)
    fast = rk.apply_rotary(x, cos, sin, layout)
    assert len(kernel_calls) == 1 and fast.shape == x.shape and fast.dtype == dtype
    reference = rk.apply_rotary_reference(x, cos, sin, layout)
    assert_close(fast, reference, **EXACT)
    assert_close(fast, row_by_row(x, cos, sin, layout, rk.apply_rotary_reference), **EXACT)
    assert_close(fast, row_by_row(x, cos, sin, layout, rk.apply_rotary), **EXACT)


@pytest.mark.parametrize("layout", rk.LAYOUTS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_per_sample_gradients(native_rotary, kernel_calls, layout, dtype):
    base = qkv_view(3, 2, 7, 24, dtype)
    cos, sin = per_sample_angles(3, 7, 16)
    grad_out = torch.randn(base.shape).to(dtype)
    x = base.detach().requires_grad_()
    rk.apply_rotary(x, cos, sin, layout).backward(grad_out)
    assert len(kernel_calls) == 2                                   # forward and backward
    x_ref = base.detach().requires_grad_()
    rk.apply_rotary_reference(x_ref, cos, sin, layout).backward(grad_out)
    assert_close(x.grad, x_ref.grad, **EXACT)
    rows = [base[b].detach().requires_grad_() for b in range(3)]
    for b, row in enumerate(rows):
        rk.apply_rotary_reference(row, cos[b], sin[b], layout).backward(grad_out[b])
    assert_close(x.grad, torch.stack([r.grad for r in rows]), **EXACT)


def test_learnable_per_sample_angles_get_their_gradients():
    x = torch.randn(2, 3, 5, 8)
    cos, sin = (t.clone().requires_grad_() for t in per_sample_angles(2, 5, 8))
    out = rk.apply_rotary(x, cos, sin)
    (gc, gs) = torch.autograd.grad(out.square().sum(), (cos, sin))
    ref_cos, ref_sin = (t.detach().clone().requires_grad_() for t in (cos, sin))
    (rc, rs) = torch.autograd.grad(rk.apply_rotary_reference(
        x, ref_cos[:, None], ref_sin[:, None]).square().sum(), (ref_cos, ref_sin))
    assert gc.shape == (2, 5, 4)
    assert_close(gc, rc, **EXACT)
    assert_close(gs, rs, **EXACT)


def test_one_row_broadcasts_over_the_batch(native_rotary, kernel_calls):
    """(1, L, R/2) angles serve every sequence: the same as shared (L, R/2) angles."""
    x = qkv_view(3, 2, 6, 16, torch.float32)
    cos, sin = per_sample_angles(1, 6, 16)
    assert_close(rk.apply_rotary(x, cos, sin), rk.apply_rotary(x, cos[0], sin[0]), **EXACT)
    assert len(kernel_calls) == 2


def test_fallback_without_native_kernels(monkeypatch, kernel_calls):
    monkeypatch.setenv("POSENC_NATIVE_KERNELS", "0")
    x = qkv_view(3, 2, 6, 16, torch.float32)
    cos, sin = per_sample_angles(3, 6, 16)
    assert_close(rk.apply_rotary(x, cos, sin, "interleaved"),
                 row_by_row(x, cos, sin, "interleaved", rk.apply_rotary_reference), **EXACT)
    assert kernel_calls == []


def test_batch_of_angles_must_match():
    x = torch.randn(3, 2, 6, 16)
    cos, sin = per_sample_angles(2, 6, 16)
    with pytest.raises(ValueError, match=r"need B = 3 \(x's batch\), got \(2, 6, 8\)"):
        rk.apply_rotary(x, cos, sin)


def test_rotary_angles_of_per_sample_positions():
    inv_freq = torch.tensor([1.0, 0.01, 1e-4])
    pos = torch.tensor([[0, 5, 70_000], [9, 2**31 - 1, 3]])
    theta = rk.rotary_angles(pos, inv_freq)
    assert theta.shape == (2, 3, 3)
    for b in range(2):
        assert_close(theta[b], rk.rotary_angles(pos[b], inv_freq), **EXACT)
