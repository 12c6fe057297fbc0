"""Pure functions that rotate query/key pairs: the hot path of every rotary encoding.

:func:`apply_rotary` computes, per pair ``(a, b)`` of rotated dimensions and angle ``t``,
``(a cos t - b sin t, a sin t + b cos t)`` in fp32, then casts to the input dtype. Pairs are
``(i, i + R/2)`` for ``layout="half"`` and ``(2i, 2i + 1)`` for ``layout="interleaved"``.
Angles are shared by every sequence, cos/sin (L, R/2), or per sample, (B, L, R/2): one row
of angles per sequence (its own positions), broadcast over heads.

Two implementations give bit-identical results:

- :func:`apply_rotary_reference`: plain tensor ops (one rounding per multiply and add, no
  fused multiply-add). Used for other devices and dtypes, learnable angles, torch.func
  transforms and jit tracing, and wherever the native kernel is unavailable (compiled code
  included).
- a small C kernel (:mod:`.rotary_native`, ``csrc/rotary.c``) for CPU fp32/bf16: one pass
  over the input, one over the output, so a plain copy of q and k is its floor (see
  BENCHMARKS.md). Eager calls reach it directly through ctypes, gradients through an
  autograd function whose backward is the inverse rotation (the same kernel with ``-sin``).
  Under torch.compile (and torch.export) it is the custom op ``posenc::rotary`` (fake
  implementation and autograd registered), which the compiler traces as one opaque call: no
  graph break, the same numbers as eager.

Which one runs (measurements in BENCHMARKS.md, "RoPE apply"): eager calls skip the op, whose
dispatch added 51-145 us a call in the benchmark's interleaved rounds, more than a whole
decode-sized call (about 25 us). Compiled code uses the op for outputs of
``COMPILED_OP_MIN_BYTES`` (8 MiB) or more and the reference below: inductor compiles the
reference into one fused loop with the kernel's results bit for bit (tested) and less fixed
cost than an opaque call, faster up to 6 MiB here; from 8 MiB on the op is on par, and at
16 MiB faster (0.93x the time).

Set ``POSENC_NATIVE_KERNELS=0`` to force the reference path (decided when a graph is
traced, for compiled code).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..errors import UserError
from . import build as native_build
from .rotary_native import (
    fits_kernel,
    load,
    native_rotary_status,  # noqa: F401  (re-exported)
    output_like,
    rotate_native,
)

LAYOUTS = ("half", "interleaved")
#: under torch.compile, outputs at least this large go through the op (the kernel); smaller
#: ones through the reference, which inductor fuses with less fixed cost (BENCHMARKS.md)
COMPILED_OP_MIN_BYTES = 8 << 20


#: fixed-point bits of a frequency's turns per position in :func:`rotary_angles`
TURN_BITS = 32
#: positions below this get the plain fp32 product, as Hugging Face and Meta's Llama code
#: compute it (off by at most 2^-9 rad there), so patched models match them bit for bit
EXACT_FROM = 1 << 16


def frequency_turns(inv_freq: Tensor) -> tuple[Tensor, Tensor]:
    """inv_freq (R/2,) as turns per position, split for :func:`rotary_angles`.

    Returns ``fixed`` (R/2,) int64 = round(frac(f / 2 pi) * 2^32) and ``rest`` (R/2,) fp32,
    the remainder in units of 2^-32 turns (|rest| <= 1/2). Computed in float64, on the CPU
    for devices other than CUDA (a copy: precompute it where that matters, as RoPE does).
    """
    device = inv_freq.device
    work = inv_freq if device.type in ("cpu", "cuda") else inv_freq.cpu()
    turns = work.to(torch.float64) / (2.0 * math.pi)
    units = (turns - turns.floor()) * 2.0 ** TURN_BITS
    fixed = torch.round(units)
    return fixed.to(device, torch.int64), (units - fixed).to(device, torch.float32)


def rotary_angles(pos: Tensor, inv_freq: Tensor,
                  turns: tuple[Tensor, Tensor] | None = None) -> Tensor:
    """Angles pos * inv_freq (modulo 2 pi from EXACT_FROM on), fp32. pos (L,) or (B, L)
    (per-sample positions), inv_freq (R/2,) -> (L, R/2) or (B, L, R/2).

    Below ``EXACT_FROM`` = 2^16 (and for floating-point positions) this is the plain fp32
    product. From there on, where that product is off by up to pos * 2^-24 rad (0.03 at
    position 1e6), integer positions get an exact one: ``pos * fixed`` in int64 keeps the
    low 32 bits (the fraction of a turn) and ``pos * rest`` adds the remainder, within about
    1e-6 rad of the exact pos * inv_freq for |pos| < 2^31. ``turns`` is
    :func:`frequency_turns` (inv_freq) if already computed.
    """
    p_float = pos.to(torch.float32)[..., None]                              # (..., L, 1)
    plain = p_float * inv_freq.to(pos.device, torch.float32)                # (..., L, R/2)
    if pos.is_floating_point():
        return plain
    fixed, rest = frequency_turns(inv_freq) if turns is None else turns
    p = pos.to(torch.int64)[..., None]                                      # (..., L, 1)
    units = (p * fixed.to(pos.device)).bitwise_and_((1 << TURN_BITS) - 1).to(torch.float32)
    units.addcmul_(p_float, rest.to(pos.device))           # (..., L, R/2), 2^-32 turns
    exact = units.mul_(2.0 * math.pi * 2.0 ** -TURN_BITS)
    return torch.where(p.abs() < EXACT_FROM, plain, exact)


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor, layout: str = "half") -> Tensor:
    """Rotate the first R dims of x. x (B, ..., L, D); cos, sin fp32, shared (L, R/2) or per
    sample (B, L, R/2) -> (B, ..., L, D).

    ``cos``/``sin`` may carry an attention factor (they then have norm != 1). The output is a
    new dense tensor in x's dtype (x is not modified): the native kernel lays it out in x's
    memory order of dimensions, as torch's elementwise ops do (contiguous for a contiguous x);
    the reference path returns it contiguous.
    """
    _check(x, cos, layout)
    if cos.dim() == 3 and x.dim() > 3:                       # per sample: over heads too
        cos, sin = _per_sample(x, cos), _per_sample(x, sin)
    if torch.is_grad_enabled() and (cos.requires_grad or sin.requires_grad) or \
            not fits_kernel(x, cos, sin) or not _native_usable():
        return apply_rotary_reference(x, cos, sin, layout)
    if torch.compiler.is_compiling():                 # traced: the op, for large outputs
        if x.numel() * x.element_size() >= COMPILED_OP_MIN_BYTES:
            return torch.ops.posenc.rotary(x, cos, sin, layout)
        return apply_rotary_reference(x, cos, sin, layout)
    if not native_build.plain_eager(x, cos, sin):    # jit tracing, subclasses, torch.func
        return apply_rotary_reference(x, cos, sin, layout)
    if x.requires_grad and torch.is_grad_enabled():
        return _RotaryFunction.apply(x, cos, sin, layout)
    return rotate_native(x, cos, sin, layout)


def _check(x: Tensor, cos: Tensor, layout: str) -> None:
    if layout not in LAYOUTS:
        raise UserError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if 2 * cos.shape[-1] > x.shape[-1]:
        raise UserError(f"cos/sin cover {2 * cos.shape[-1]} rotated dims, more than the "
                         f"head_dim={x.shape[-1]} of x")
    if cos.dim() == 3 and x.dim() > 3 and cos.shape[0] not in (1, x.shape[0]):
        raise UserError(f"per-sample cos/sin (B, L, R/2) need B = {x.shape[0]} (x's batch), "
                         f"got {tuple(cos.shape)}")


def _per_sample(x: Tensor, angles: Tensor) -> Tensor:
    """Per-sample angles (B, L, R/2) for x (B, ..., L, D) with dims between B and L (heads)
    get size-1 dims there: (B, 1, .., L, R/2). Others broadcast as they are."""
    if angles.dim() != 3 or x.dim() <= 3:
        return angles
    return angles[(slice(None),) + (None,) * (x.dim() - 3)]


def _native_usable() -> bool:
    """Native kernels are enabled and the rotary kernel is built (building it on first use).
    A constant for torch.compile: read once, when a graph is traced."""
    return native_build.native_enabled() and load() is not None


# what torch.compiler.assume_constant_result does, without importing torch._dynamo (seconds)
# at import time: a compiled graph reads the result once (tests/train/test_compile.py)
_native_usable._dynamo_marked_constant = True


def apply_rotary_reference(x: Tensor, cos: Tensor, sin: Tensor, layout: str = "half"
                           ) -> Tensor:
    """:func:`apply_rotary` with plain tensor ops: any device and dtype, cos/sin (L, R/2),
    per sample (B, L, R/2), or any shape that broadcasts to x's (..., L, R/2)."""
    cos, sin = _per_sample(x, cos), _per_sample(x, sin)
    rot = 2 * cos.shape[-1]
    x_rot, x_pass = x[..., :rot], x[..., rot:]
    if layout == "interleaved":
        pairs = x_rot.float().unflatten(-1, (rot // 2, 2))              # (..., L, R/2, 2)
        a, b = pairs[..., 0], pairs[..., 1]                              # (..., L, R/2) each
        rotated = torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)
    elif layout == "half":
        a, b = x_rot.float().chunk(2, dim=-1)                            # (..., L, R/2) each
        rotated = torch.cat((a * cos - b * sin, b * cos + a * sin), dim=-1)
    else:
        raise UserError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    rotated = rotated.to(x.dtype)                                        # (..., L, R)
    return rotated if x_pass.shape[-1] == 0 else torch.cat((rotated, x_pass), dim=-1)


class _RotaryFunction(torch.autograd.Function):
    """Native forward; backward rotates the gradient back (R(t)^T = R(-t))."""

    @staticmethod
    def forward(ctx, x: Tensor, cos: Tensor, sin: Tensor, layout: str) -> Tensor:
        ctx.save_for_backward(cos, sin)
        ctx.layout = layout
        return rotate_native(x, cos, sin, layout)

    @staticmethod
    def backward(ctx, grad: Tensor):
        cos, sin = ctx.saved_tensors
        return apply_rotary(grad, cos, -sin, ctx.layout), None, None, None


# ------------------------------------------------------------- the custom op posenc::rotary

@torch.library.custom_op("posenc::rotary", mutates_args=())
def rotary_op(x: Tensor, cos: Tensor, sin: Tensor, layout: str) -> Tensor:
    """:func:`apply_rotary` as one operator: the kernel where it takes the call, else the
    reference; the output dense in x's memory order (:func:`.rotary_native.output_like`)."""
    _check(x, cos, layout)
    cos, sin = _per_sample(x, cos), _per_sample(x, sin)
    if fits_kernel(x, cos, sin) and _native_usable():
        return rotate_native(x, cos, sin, layout)
    return output_like(x).copy_(apply_rotary_reference(x, cos, sin, layout))


@rotary_op.register_fake
def _rotary_fake(x: Tensor, cos: Tensor, sin: Tensor, layout: str) -> Tensor:
    return output_like(x)


def _rotary_setup_context(ctx, inputs, output) -> None:
    x, cos, sin, layout = inputs
    ctx.layout = layout
    ctx.save_for_backward(cos, sin, x if cos.requires_grad or sin.requires_grad else None)


def _rotary_backward(ctx, grad: Tensor):
    """x's gradient is grad rotated back (the op with -sin); the angles', where they need
    one, from plain tensor ops."""
    cos, sin, x = ctx.saved_tensors
    grad_x = torch.ops.posenc.rotary(grad, cos, -sin, ctx.layout) \
        if ctx.needs_input_grad[0] else None
    grad_cos = grad_sin = None
    if x is not None:
        a, b = _pairs(x, cos.shape[-1], ctx.layout)                     # (..., L, R/2) each
        ga, gb = _pairs(grad, cos.shape[-1], ctx.layout)
        grad_cos = _sum_to(a * ga + b * gb, x, cos)
        grad_sin = _sum_to(a * gb - b * ga, x, sin)
    return grad_x, grad_cos, grad_sin, None


def _sum_to(grad: Tensor, x: Tensor, angles: Tensor) -> Tensor:
    """grad (..., L, R/2) summed over the dims the angles broadcast over, in their shape."""
    return grad.sum_to_size(_per_sample(x, angles).shape).reshape(angles.shape)


def _pairs(t: Tensor, half: int, layout: str) -> tuple[Tensor, Tensor]:
    """The two members of every rotated pair of t (..., L, D), fp32: (..., L, R/2) each."""
    rotated = t[..., :2 * half].float()
    if layout == "interleaved":
        return rotated[..., 0::2], rotated[..., 1::2]
    return rotated[..., :half], rotated[..., half:]


rotary_op.register_autograd(_rotary_backward, setup_context=_rotary_setup_context)
