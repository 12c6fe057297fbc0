"""Pure functions that rotate query/key pairs: the hot path of every rotary encoding.

:func:`apply_rotary` computes, per pair ``(a, b)`` of rotated dimensions and angle ``t``,
``(a cos t - b sin t, a sin t + b cos t)`` in fp32, then casts to the input dtype. Pairs are
``(i, i + R/2)`` for ``layout="half"`` and ``(2i, 2i + 1)`` for ``layout="interleaved"``.

Two implementations give bit-identical results:

- :func:`apply_rotary_reference`: plain tensor ops (one rounding per multiply and add, no
  fused multiply-add). Used under ``torch.compile``/tracing/functorch, for other devices and
  dtypes, and wherever the native kernel is unavailable.
- a small C kernel (compiled once with the system C compiler, cached in posenc's cache
  folder (:mod:`posenc.paths`), loaded with ctypes) for CPU fp32/bf16: one
  pass over the input, one over the output (streaming stores for large outputs), any strides
  with a unit last stride, all intra-op threads (torch's own OpenMP workers where torch runs
  on libgomp: threads of its own would compete with them, still spinning after the previous
  op, for the cores; POSIX threads otherwise). A plain copy of q and k makes the same two
  passes, so this is the memory floor (see BENCHMARKS.md). Gradients go through an autograd
  function whose backward is the inverse rotation (the same kernel with ``-sin``).

Set ``POSENC_NATIVE_KERNELS=0`` to force the reference path.
"""

from __future__ import annotations

import ctypes
import math

import torch
from torch import Tensor

from . import build as native_build

LAYOUTS = ("half", "interleaved")
#: outputs at least this large are written with streaming (cache-bypassing) stores
STREAM_MIN_BYTES = 4 << 20
#: elements of work per kernel thread, so small calls stay single-threaded
_ELEMS_PER_THREAD = 1 << 16


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
    """Angles pos * inv_freq (modulo 2 pi from EXACT_FROM on), fp32. pos (L,), inv_freq
    (R/2,) -> (L, R/2).

    Below ``EXACT_FROM`` = 2^16 (and for floating-point positions) this is the plain fp32
    product. From there on, where that product is off by up to pos * 2^-24 rad (0.03 at
    position 1e6), integer positions get an exact one: ``pos * fixed`` in int64 keeps the
    low 32 bits (the fraction of a turn) and ``pos * rest`` adds the remainder, within about
    1e-6 rad of the exact pos * inv_freq for |pos| < 2^31. ``turns`` is
    :func:`frequency_turns` (inv_freq) if already computed.
    """
    p_float = pos.to(torch.float32)[:, None]                                # (L, 1)
    plain = p_float * inv_freq.to(pos.device, torch.float32)[None, :]     # (L, R/2)
    if pos.is_floating_point():
        return plain
    fixed, rest = frequency_turns(inv_freq) if turns is None else turns
    p = pos.to(torch.int64)[:, None]                                        # (L, 1)
    units = (p * fixed.to(pos.device)).bitwise_and_((1 << TURN_BITS) - 1).to(torch.float32)
    units.addcmul_(p_float, rest.to(pos.device))                # (L, R/2), 2^-32 turns
    exact = units.mul_(2.0 * math.pi * 2.0 ** -TURN_BITS)
    return torch.where(p.abs() < EXACT_FROM, plain, exact)


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor, layout: str = "half") -> Tensor:
    """Rotate the first R dims of x. x (..., L, D); cos, sin (L, R/2) fp32 -> (..., L, D).

    ``cos``/``sin`` may carry an attention factor (they then have norm != 1). The output is a
    new dense tensor in x's dtype (x is not modified): the native kernel lays it out in x's
    memory order of dimensions, as torch's elementwise ops do (contiguous for a contiguous x);
    the reference path returns it contiguous.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if 2 * cos.shape[-1] > x.shape[-1]:
        raise ValueError(f"cos/sin cover {2 * cos.shape[-1]} rotated dims, more than the "
                         f"head_dim={x.shape[-1]} of x")
    if not _native_eligible(x, cos, sin):
        return apply_rotary_reference(x, cos, sin, layout)
    if torch.is_grad_enabled() and (cos.requires_grad or sin.requires_grad):
        return apply_rotary_reference(x, cos, sin, layout)
    if torch.is_grad_enabled() and x.requires_grad:
        return _RotaryFunction.apply(x, cos, sin, layout)
    return _native_rotary(x, cos, sin, layout)


def apply_rotary_reference(x: Tensor, cos: Tensor, sin: Tensor, layout: str = "half"
                           ) -> Tensor:
    """:func:`apply_rotary` with plain tensor ops (any device, dtype and broadcastable cos)."""
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
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    rotated = rotated.to(x.dtype)                                        # (..., L, R)
    return rotated if x_pass.shape[-1] == 0 else torch.cat((rotated, x_pass), dim=-1)


class _RotaryFunction(torch.autograd.Function):
    """Native forward; backward rotates the gradient back (R(t)^T = R(-t))."""

    @staticmethod
    def forward(ctx, x: Tensor, cos: Tensor, sin: Tensor, layout: str) -> Tensor:
        ctx.save_for_backward(cos, sin)
        ctx.layout = layout
        return _native_rotary(x, cos, sin, layout)

    @staticmethod
    def backward(ctx, grad: Tensor):
        cos, sin = ctx.saved_tensors
        return apply_rotary(grad, cos, -sin, ctx.layout), None, None, None


# ------------------------------------------------------------------------ native kernel


_MAX_DIM = 1024


def native_rotary_status() -> str:
    """"ready", "disabled" (POSENC_NATIVE_KERNELS=0) or why the kernel could not be built.
    Builds the kernel on first use."""
    return _KERNEL.status()


_NATIVE_DTYPES = (torch.float32, torch.bfloat16)


def _native_eligible(x: Tensor, cos: Tensor, sin: Tensor) -> bool:
    """Whether the kernel can take this call."""
    if not native_build.plain_eager(x, cos, sin):
        return False
    if x.dtype not in _NATIVE_DTYPES or x.device.type != "cpu" or x.stride(-1) != 1:
        return False
    shape = x.shape
    if not 2 <= len(shape) <= 5 or shape[-1] > _MAX_DIM or x.numel() == 0:
        return False
    expected = (shape[-2], cos.shape[-1])
    for t in (cos, sin):
        if t.dtype != torch.float32 or t.device.type != "cpu" or t.shape != expected:
            return False
    if not native_build.native_enabled():
        return False
    return _load() is not None


def _native_rotary(x: Tensor, cos: Tensor, sin: Tensor, layout: str) -> Tensor:
    """The kernel call; the caller checked :func:`_native_eligible`."""
    cos = cos if cos.is_contiguous() else cos.contiguous()
    sin = sin if sin.is_contiguous() else sin.contiguous()
    shape, strides = x.shape, x.stride()
    rows = len(shape) - 1
    # Visit rows in x's memory order and lay the output out in that order too (as torch's
    # elementwise ops do), so reads and writes both stream: for q as a (B, H, T, D) view of
    # a (B, T, 3C) projection, rows go b, t, h.
    order = sorted(range(rows), key=strides.__getitem__, reverse=True)   # stable for ties
    identity = order == list(range(rows))
    walk_shape = shape if identity else [shape[i] for i in order] + [shape[-1]]
    out = torch.empty(walk_shape, dtype=x.dtype)                      # contiguous in walk order
    pad = 4 - rows
    size = [1] * pad + [walk_shape[i] for i in range(rows)]
    stride = [0] * pad + [strides[i] for i in order]
    nbytes = out.numel() * out.element_size()
    threads = max(1, min(torch.get_num_threads(), out.numel() // _ELEMS_PER_THREAD))
    code = _state["lib"].posenc_rotary(
        x.data_ptr(), out.data_ptr(), cos.data_ptr(), sin.data_ptr(), *size, *stride,
        pad + order.index(rows - 1), shape[-1], 2 * cos.shape[-1], x.dtype == torch.bfloat16,
        layout == "interleaved", nbytes >= STREAM_MIN_BYTES, threads)
    if code != 0:
        raise RuntimeError(f"posenc rotary kernel rejected its arguments (code {code})")
    if identity:
        return out
    return out.permute(*[order.index(i) for i in range(rows)], rows)   # (..., L, D)


def _declare(lib):
    """Declare the kernel's C signature on the loaded library."""
    fn = lib.posenc_rotary
    fn.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int64] * 11 + [ctypes.c_int] * 4
    fn.restype = ctypes.c_int
    return lib


def _compile_and_load(compiler: str, flags: list[str]):
    """Build (or reuse) the kernel with these flags and declare its signature."""
    return _declare(native_build.compile_and_load(native_build.kernel_source("rotary"),
                                                  "rotary", compiler, flags))


def _build_and_load():
    compiler = native_build.find_compiler()
    flags = native_build.compiler_flags()
    if native_build.openmp_decision()[0]:
        try:
            return _compile_and_load(compiler, [*flags, "-fopenmp"])
        except RuntimeError:
            pass                           # no OpenMP support in this compiler: pthreads
    return _compile_and_load(compiler, flags)


_KERNEL = native_build.LazyKernel("rotary", _build_and_load)
_state = _KERNEL.state              # "lib": the loaded kernel, or "error": why there is none
_load = _KERNEL.load
