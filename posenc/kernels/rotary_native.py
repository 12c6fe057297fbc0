"""The rotary C kernel (``csrc/rotary.c``), loaded with ctypes: which calls it takes, and the
call itself.

The kernel rotates rows of x (..., L, D), fp32 or bf16 on the CPU, any strides with a unit
last stride, up to four row dims, D <= 1024, by angles cos/sin of any shape that broadcasts
to (..., L, R/2) (fp32; a stride 0 where rows share angles: over heads, or over the batch
when every sequence has the same positions). One pass over the input, one over the output,
streaming stores for outputs of ``STREAM_MIN_BYTES`` or more, rows split over the intra-op
threads (torch's own OpenMP workers where :func:`posenc.kernels.build.openmp_decision` says
so, POSIX threads otherwise).

The output is dense in x's memory order of dimensions (:func:`output_like`), as torch's
elementwise ops lay theirs out: rows are written in the order they are read.
"""

from __future__ import annotations

import ctypes

import torch
from torch import Tensor

from . import build as native_build

#: outputs at least this large are written with streaming (cache-bypassing) stores
STREAM_MIN_BYTES = 4 << 20
#: the widest row the kernel takes (its stack buffers)
MAX_DIM = 1024
#: elements of work per kernel thread, so small calls stay single-threaded
ELEMS_PER_THREAD = 1 << 16
DTYPES = (torch.float32, torch.bfloat16)


def fits_kernel(x: Tensor, cos: Tensor, sin: Tensor) -> bool:
    """Whether the kernel can take these tensors, from their metadata only (dtype, device,
    shape, strides), so the answer is the same for fake tensors under torch.compile."""
    if x.dtype not in DTYPES or cos.dtype != torch.float32 or sin.dtype != torch.float32:
        return False
    if not (x.is_cpu and cos.is_cpu and sin.is_cpu):
        return False
    shape, angles = x.shape, cos.shape
    if not 2 <= len(shape) <= 5 or not 1 <= len(angles) <= len(shape) or angles != sin.shape:
        return False
    if x.stride(-1) != 1 or shape[-1] > MAX_DIM or x.numel() == 0:
        return False
    for k in range(2, len(angles) + 1):             # broadcastable to x's rows
        if angles[-k] != 1 and angles[-k] != shape[-k]:
            return False
    return True


def row_order(x: Tensor) -> list[int]:
    """x's row dims (all but the last) from the outermost in memory to the innermost (a
    stable sort by stride): for q as a (B, H, T, D) view of a (B, T, 3C) projection, b, t, h."""
    strides = x.stride()
    return sorted(range(x.dim() - 1), key=strides.__getitem__, reverse=True)


def output_like(x: Tensor) -> Tensor:
    """An empty tensor shaped and typed like x, dense in x's memory order of dimensions."""
    return torch.empty_permuted(x.shape, (*row_order(x), x.dim() - 1), dtype=x.dtype,
                                device=x.device)


def rotate_native(x: Tensor, cos: Tensor, sin: Tensor, layout: str) -> Tensor:
    """The kernel call: x rotated by angles cos, sin; :func:`fits_kernel` holds and the
    kernel is loaded (:func:`load`). The output as :func:`output_like` makes it."""
    if cos.stride(-1) != 1 or sin.stride() != cos.stride():
        cos, sin = cos.contiguous(), sin.contiguous()
    shape, strides = x.shape, x.stride()
    rows = len(shape) - 1
    order = sorted(range(rows), key=strides.__getitem__, reverse=True)   # row_order(x)
    out = torch.empty_permuted(shape, (*order, rows), dtype=x.dtype)
    # strides of cos/sin rows along x's row dims (aligned from the right), 0 where broadcast
    angles, angle_strides = cos.shape, cos.stride()
    skip = rows + 1 - len(angles)
    angle_stride = [0 if i < skip or angles[i - skip] == 1 else angle_strides[i - skip]
                    for i in order]
    ones, zeros = _PADS[4 - rows]                   # pad the row dims to the kernel's four
    numel = out.numel()
    threads = max(1, min(torch.get_num_threads(), numel // ELEMS_PER_THREAD))
    bf16 = x.dtype == torch.bfloat16
    code = _KERNEL.state["lib"].posenc_rotary(
        x.data_ptr(), out.data_ptr(), cos.data_ptr(), sin.data_ptr(),
        *ones, *[shape[i] for i in order], *zeros, *[strides[i] for i in order],
        *zeros, *angle_stride, shape[-1], 2 * angles[-1], bf16, layout == "interleaved",
        numel * (2 if bf16 else 4) >= STREAM_MIN_BYTES, threads)
    if code != 0:
        raise RuntimeError(f"posenc rotary kernel rejected its arguments (code {code})")
    return out


#: leading sizes (1) and strides (0) that pad x's row dims to four
_PADS = [((1,) * n, (0,) * n) for n in range(4)]


def native_rotary_status() -> str:
    """"ready", "disabled" (POSENC_NATIVE_KERNELS=0) or why the kernel could not be built.
    Builds the kernel on first use."""
    return _KERNEL.status()


def _declare(lib):
    """Declare the kernel's C signature on the loaded library."""
    fn = lib.posenc_rotary
    fn.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int64] * 14 + [ctypes.c_int] * 4
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
#: the loaded kernel, or None (why: :func:`native_rotary_status`); builds it on first use
load = _KERNEL.load
