"""The rotary kernels: the fast path equals a plain reference bit for bit, in both layouts,
with partial rotary, strided inputs, bf16 and gradients; and RoPE's accuracy at long positions.

RoPE measurement: q (bf16) rotated at one position, against a float64 reference that rotates
the same bf16 values by the float64 angle ``pos * inv_freq`` (the encoding's own fp32
frequencies, as in Hugging Face). The "bf16 rounding floor" is the error of rounding that
exact float64 result to bf16, the least any bf16 output can have; the ratio is the RMS error
over the RMS floor.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from posenc import build_encoding
from posenc.encodings.context import HookContext
from posenc.kernels import rotary as rk
from posenc.kernels import rotary_native as rn
from posenc.kernels.rotary import apply_rotary

EXACT = dict(rtol=0.0, atol=0.0)


def plain_rotary(x, cos, sin, layout):
    """Independent reference: pairs gathered by index, rotated in fp32, cast back."""
    rot = 2 * cos.shape[-1]
    if layout == "half":
        first = torch.arange(rot // 2)
        second = first + rot // 2
    else:
        first = torch.arange(0, rot, 2)
        second = first + 1
    a, b = x.float()[..., first], x.float()[..., second]
    out = x.float().clone()
    out[..., first] = a * cos - b * sin
    out[..., second] = a * sin + b * cos
    return out.to(x.dtype)


def angles(length, rot, factor=1.0, offset=0):
    inv_freq = 1.0 / 10000.0 ** (torch.arange(0, rot, 2, dtype=torch.float32) / rot)
    theta = rk.rotary_angles(torch.arange(offset, offset + length), inv_freq)
    return theta.cos() * factor, theta.sin() * factor


def model_like(b, h, t, d, dtype=torch.float32):
    """q as the attention layer makes it: a (B, H, T, D) view of a (B, T, 3*H*D) projection."""
    qkv = torch.randn(b, t, 3 * h * d).to(dtype)
    return qkv[..., : h * d].view(b, t, h, d).transpose(1, 2)


CASES = [  # (shape, rotary dims, strided like the model)
    ((2, 3, 17, 16), 16, False),         # vector loop (R/2 a multiple of 8)
    ((2, 3, 17, 48), 32, True),          # vector loop + pass-through tail
    ((2, 3, 17, 40), 24, True),          # partial rotary, scalar loop, odd length
    ((5, 8), 8, False),                  # (L, D) only
    ((2, 2, 3, 9, 12), 4, False),        # five dims
]

HEAD_DIM = 128
N_VECTORS = 2048


def _exact_rotation(x: torch.Tensor, pos: int, inv_freq: torch.Tensor) -> torch.Tensor:
    """x (..., D) rotated at position ``pos`` in float64, "half" layout."""
    angles = float(pos) * inv_freq.double()                              # (D/2,)
    a, b = x.double().chunk(2, dim=-1)
    return torch.cat((a * angles.cos() - b * angles.sin(),
                      b * angles.cos() + a * angles.sin()), dim=-1)


def _error_ratio(got: torch.Tensor, exact: torch.Tensor) -> float:
    """RMS error of ``got`` over the RMS error of rounding ``exact`` to got's dtype."""
    floor = exact.to(got.dtype).double() - exact
    return ((got.double() - exact).pow(2).mean().sqrt() / floor.pow(2).mean().sqrt()).item()


@pytest.mark.parametrize("layout", rk.LAYOUTS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape,rot,strided", CASES)
def test_fast_path_equals_references(native_rotary, shape, rot, strided, dtype, layout):
    x = model_like(*shape, dtype=dtype) if strided else torch.randn(shape).to(dtype)
    cos, sin = angles(shape[-2], rot, factor=1.3, offset=5)
    assert rn.fits_kernel(x, cos, sin)
    fast = rk.apply_rotary(x, cos, sin, layout)
    assert fast.dtype == dtype and fast.shape == x.shape
    assert_close(fast, rk.apply_rotary_reference(x, cos, sin, layout), **EXACT)
    assert_close(fast, plain_rotary(x, cos, sin, layout), **EXACT)


@pytest.mark.parametrize("layout", rk.LAYOUTS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_large_threaded_streaming_call(native_rotary, layout, dtype):
    x = model_like(4, 4, 1024, 128, dtype=dtype)       # >= 4 MiB out: streaming stores
    cos, sin = angles(1024, 128)
    fast = rk.apply_rotary(x, cos, sin, layout)
    assert fast.numel() * fast.element_size() >= rn.STREAM_MIN_BYTES
    assert_close(fast, plain_rotary(x, cos, sin, layout), **EXACT)


@pytest.mark.parametrize("openmp", [True, False], ids=["openmp", "pthreads"])
def test_both_threading_builds_agree(native_rotary, openmp, monkeypatch):
    """The kernel runs its threads on torch's OpenMP runtime where torch uses libgomp, and
    on threads of its own otherwise; both builds give the reference's numbers."""
    build = rk.native_build
    if openmp and not build.openmp_decision()[0]:
        pytest.skip(f"no OpenMP build here: {build.openmp_decision()[1]}")
    flags = build.compiler_flags() + (["-fopenmp"] if openmp else [])
    lib = rn._compile_and_load(build.find_compiler(), flags)
    monkeypatch.setitem(rn._KERNEL.state, "lib", lib)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    x = model_like(4, 4, 1024, 64)
    cos, sin = angles(1024, 64)
    assert_close(rk.apply_rotary(x, cos, sin, "half"), plain_rotary(x, cos, sin, "half"),
                 **EXACT)


@pytest.mark.parametrize("layout", rk.LAYOUTS)
def test_reference_rotates_like_complex_numbers(layout):
    """The formula itself, against float64 complex multiplication."""
    x = torch.randn(3, 11, 10, dtype=torch.float64)
    cos, sin = angles(11, 8)
    out = rk.apply_rotary_reference(x.float(), cos, sin, layout).double()
    first, second = ((torch.arange(4), torch.arange(4, 8)) if layout == "half"
                     else (torch.arange(0, 8, 2), torch.arange(1, 8, 2)))
    z = torch.complex(x[..., first], x[..., second]) * torch.complex(cos.double(), sin.double())
    assert_close(out[..., first], z.real, rtol=1e-5, atol=1e-5)
    assert_close(out[..., second], z.imag, rtol=1e-5, atol=1e-5)
    assert_close(out[..., 8:], x[..., 8:], rtol=1e-6, atol=1e-6)


def test_half_layout_equals_hugging_face():
    llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    q, k = model_like(2, 4, 33, 16), model_like(2, 4, 33, 16)
    cos, sin = angles(33, 16)
    hf_cos = torch.cat((cos, cos), dim=-1)[None].expand(2, 33, 16)     # (B, T, D)
    hf_sin = torch.cat((sin, sin), dim=-1)[None].expand(2, 33, 16)
    hf_q, hf_k = llama.apply_rotary_pos_emb(q, k, hf_cos, hf_sin)
    assert_close(rk.apply_rotary(q, cos, sin, "half"), hf_q, **EXACT)
    assert_close(rk.apply_rotary(k, cos, sin, "half"), hf_k, **EXACT)


@pytest.mark.parametrize("layout", rk.LAYOUTS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gradients_equal_reference(native_rotary, layout, dtype):
    base = model_like(2, 3, 13, 24, dtype=dtype)
    cos, sin = angles(13, 16, factor=0.9)
    grad_out = torch.randn(base.shape).to(dtype)
    x_fast = base.detach().clone().requires_grad_()
    x_ref = base.detach().clone().requires_grad_()
    rk.apply_rotary(x_fast, cos, sin, layout).backward(grad_out)
    plain_rotary(x_ref, cos, sin, layout).backward(grad_out)
    assert x_fast.grad.dtype == dtype
    assert_close(x_fast.grad, x_ref.grad, **EXACT)


@pytest.mark.parametrize("layout", rk.LAYOUTS)
def test_gradient_is_the_inverse_rotation(layout):
    """The backward applies R(-t) = R(t)^T: <R x, g> = <x, R^T g> and R^T R x = x."""
    x = torch.randn(2, 5, 8, requires_grad=True)
    cos, sin = angles(5, 8)
    out = rk.apply_rotary(x, cos, sin, layout)
    g = torch.randn(out.shape)
    (grad,) = torch.autograd.grad(out, x, grad_outputs=g)
    assert_close(grad, plain_rotary(g, cos, -sin, layout), **EXACT)
    assert_close((out.double() * g.double()).sum(), (x.double() * grad.double()).sum(),
                 rtol=1e-6, atol=1e-6)
    assert_close(rk.apply_rotary(out.detach(), cos, -sin, layout), x.detach(),
                 rtol=1e-5, atol=1e-5)


def test_double_backward_through_fast_path(native_rotary):
    x = torch.randn(2, 7, 8, requires_grad=True)
    cos, sin = angles(7, 8)
    (g,) = torch.autograd.grad(rk.apply_rotary(x, cos, sin).pow(2).sum(), x, create_graph=True)
    (gg,) = torch.autograd.grad(g.sum(), x)
    x_ref = x.detach().clone().requires_grad_()
    (g_ref,) = torch.autograd.grad(plain_rotary(x_ref, cos, sin, "half").pow(2).sum(), x_ref,
                                   create_graph=True)
    (gg_ref,) = torch.autograd.grad(g_ref.sum(), x_ref)
    assert_close(g, g_ref, rtol=1e-6, atol=1e-6)
    assert_close(gg, gg_ref, rtol=1e-6, atol=1e-6)


def test_learnable_angles_get_gradients():
    """cos/sin that require grad take the reference path, which differentiates them."""
    x = torch.randn(2, 6, 8)
    cos, sin = (t.clone().requires_grad_() for t in angles(6, 8))
    rk.apply_rotary(x, cos, sin).sum().backward()
    assert cos.grad is not None and sin.grad is not None and cos.grad.abs().sum() > 0


def test_input_untouched_and_output_fresh(native_rotary):
    x = torch.randn(2, 9, 8)
    before = x.clone()
    cos, sin = angles(9, 8)
    out = rk.apply_rotary(x, cos, sin, "interleaved")
    assert_close(x, before, **EXACT)
    assert out.data_ptr() != x.data_ptr()


def test_fallbacks_give_the_same_numbers(monkeypatch):
    """What the kernel does not take (a strided last dim, fp16, angles of another shape)
    and ``POSENC_NATIVE_KERNELS=0`` go to the reference, with the same numbers."""
    calls = []
    monkeypatch.setattr(rk, "rotate_native", lambda *a: calls.append(a) or rn.rotate_native(*a))
    cos, sin = angles(6, 8)
    x = torch.randn(3, 6, 16)
    expected = plain_rotary(x, cos, sin, "half")
    strided_last = torch.randn(3, 6, 32)[..., ::2]           # last stride 2: not eligible
    assert not rn.fits_kernel(strided_last, cos, sin)
    assert_close(rk.apply_rotary(strided_last, cos, sin),
                 plain_rotary(strided_last, cos, sin, "half"), **EXACT)
    half = x.half()
    assert_close(rk.apply_rotary(half, cos, sin), plain_rotary(half, cos, sin, "half"), **EXACT)
    shared_sin = sin[:1]                                      # (1, R/2): sin broadcast
    assert not rn.fits_kernel(x, cos, shared_sin)
    assert_close(rk.apply_rotary(x, cos, shared_sin), plain_rotary(x, cos, shared_sin, "half"),
                 **EXACT)
    assert calls == []
    monkeypatch.setenv("POSENC_NATIVE_KERNELS", "0")
    assert rk.native_rotary_status() == "disabled"
    assert_close(rk.apply_rotary(x, cos, sin), expected, **EXACT)
    assert calls == []


def test_functorch_transforms_use_the_reference():
    cos, sin = angles(6, 8)
    x = torch.randn(4, 6, 8)
    batched = torch.func.vmap(lambda t: rk.apply_rotary(t, cos, sin))(x)
    assert_close(batched, plain_rotary(x, cos, sin, "half"), **EXACT)
    grad = torch.func.grad(lambda t: rk.apply_rotary(t, cos, sin, "interleaved").sum())(x[0])
    assert_close(grad, rk.apply_rotary(torch.ones(6, 8), cos, -sin, "interleaved"),
                 rtol=1e-6, atol=1e-6)


def test_bad_arguments():
    cos, sin = angles(4, 8)
    with pytest.raises(ValueError, match="layout"):
        rk.apply_rotary(torch.randn(4, 8), cos, sin, "neox")
    with pytest.raises(ValueError, match="head_dim=6"):
        rk.apply_rotary(torch.randn(4, 6), cos, sin)


def test_rotary_angles_are_exact_products_modulo_two_pi():
    """Integer positions from 2^16 to 2^31 - 1 (and negative ones): the fp32 angle is the
    float64 product pos * inv_freq reduced modulo 2 pi, to 1e-6 rad (a plain fp32 product is
    off by up to 0.03 rad at position 1e6, 64 rad at 2^31). Below 2^16 (and for float
    positions) it is the plain fp32 product, bit for bit, as Hugging Face computes it."""
    inv_freq = torch.tensor([1.0, 0.5, 0.01, 0.7498942, 1e-4, 3.0], dtype=torch.float32)
    far = torch.tensor([65_536, 65_537, 1_000_000, 123_456_789, 2**31 - 1, -65_536,
                        -1_000_001])
    theta = rk.rotary_angles(far, inv_freq)
    assert theta.dtype == torch.float32 and theta.shape == (7, 6)
    want = far.double()[:, None] * inv_freq.double()[None, :]
    gap = torch.remainder(theta.double() - want + math.pi, 2 * math.pi) - math.pi
    assert gap.abs().max() < 1e-6
    plain = far.float()[:, None] * inv_freq[None, :]
    assert (torch.remainder(plain.double() - want + math.pi, 2 * math.pi) - math.pi
            ).abs().max() > 1e-3                                    # the test can fail
    for near in (torch.tensor([0, 1, 6, 4097, 65_535, -3, -65_535]),
                 torch.arange(7, dtype=torch.float32)):
        assert_close(rk.rotary_angles(near, inv_freq),
                     near.float()[:, None] * inv_freq[None, :], **EXACT)


def test_output_follows_the_input_memory_order(native_rotary):
    """Rows are written in the order they are read: q as a view of a qkv projection
    (B, T, H, D in memory) gives an output dense in (B, T, H, D); a contiguous q, a
    contiguous output."""
    cos, sin = angles(9, 16)
    strided = model_like(2, 3, 9, 16)
    out = rk.apply_rotary(strided, cos, sin)
    assert out.transpose(1, 2).is_contiguous()
    assert rk.apply_rotary(strided.contiguous(), cos, sin).is_contiguous()


# -------------------------------------------------------------- RoPE at long positions
@pytest.mark.parametrize("options", [
    {"theta": 10000.0},
    {"theta": 500000.0},
    {"theta": 500000.0, "scaling": {"rope_type": "llama3", "factor": 8.0,
                                    "original_max_position_embeddings": 8192,
                                    "low_freq_factor": 1.0, "high_freq_factor": 4.0}},
], ids=["theta1e4", "theta5e5", "llama3"])
@pytest.mark.parametrize("position", [32_771, 70_001, 1_000_000, 16_777_213, 2**31 - 1])
def test_rope_bf16_error_at_long_positions_is_near_the_rounding_floor(options, position):
    pe = build_encoding("rope", n_heads=1, head_dim=HEAD_DIM, **options)
    q = torch.randn(1, N_VECTORS, 1, HEAD_DIM).to(torch.bfloat16)   # one position per vector
    pos = torch.tensor([position])
    got, _ = pe.transform_qk(q, q, HookContext.for_positions(pos, pos))
    exact = _exact_rotation(q, position, pe.inv_freq)
    assert _error_ratio(got, exact) <= 2.0
    # the check can fail: angles as a plain fp32 product are too coarse from 1e6 on
    plain = pos.float()[:, None] * pe.inv_freq[None, :]
    coarse = apply_rotary(q, plain.cos(), plain.sin())
    if position >= 1_000_000:
        assert _error_ratio(coarse, exact) > 2.0


def test_rope_fp32_angles_error_at_a_million_is_tiny():
    """fp32 outputs: the rotation error is fp32 rounding, not angle error (< 1e-5 relative)."""
    pe = build_encoding("rope", n_heads=1, head_dim=HEAD_DIM)
    q = torch.randn(1, 64, 1, HEAD_DIM)
    pos = torch.tensor([1_000_000])
    got, _ = pe.transform_qk(q, q, HookContext.for_positions(pos, pos))
    exact = _exact_rotation(q, 1_000_000, pe.inv_freq)
    assert (got.double() - exact).abs().max() < 1e-5 * exact.abs().max()
