"""Native passes between distance tables and the pairs of a causal square block.

A query-row table holds, per query i, one value per distance i - j; a key-row table, per key
j. Over a causal square block (keys and queries at the same positions 0..L-1, pairs j <= i)
DeBERTa adds the two: bias[i, j] = C(i, j) + P(j, i). Tensor ops read the key-row side as a
*transposed* strided view (row i of the pairs walks down a column of the table), and the
backward makes two more such passes. These kernels do each in one tiled pass (32 x 32 tiles
of 8 x 8 blocks, each transposed in AVX2 registers, so the transposed side is read from cache
lines already loaded).

Tables may be split into row groups of different widths (only the distances a group's rows
see), so rows are addressed through a *row spec*: groups (G, 4) int64, per group the byte
address of its matrix (b, h) = (0, 0) and its row, batch and head strides in elements (from
the tensors, per call), and rows (3, L) int64, per row its group, its row in the group and the
shift of its element "0" (fixed for a layout, cached). Shifts are chosen so that

    C(i, j) = query row i, element j          P(j, i) = key row j, element i

for every visible pair; the elements themselves lie inside the tables. Results are:

    write:  out[b, h, i - r0, j] = C(i, j) + P(j, i) for j <= i, ``fill`` for j > i
            (rows r0 <= i < r1, keys j < out.shape[-1]; out row-contiguous)
    split:  gC(i, j) = g(i, j) and gP(j, i) = g(i, j) for every pair j <= i, where the
            gradient rows g(i, .) come from a row spec too (the attention's row blocks), and
            the rest of each table row is zeroed: ``query_zero[i]`` elements before
            gC(i, 0), ``key_zero[j]`` elements after gP(j, L - 1).

fp32 on the CPU. Matrices are shared among torch's own OpenMP workers (the kernel is only
built with -fopenmp against the runtime torch already loaded); :func:`pair_kernel_ready`
says whether the kernel can run on given tensors (dtype, device, tracing, vmap,
``POSENC_NATIVE_KERNELS=0``).

Why these are ctypes calls and not torch.library custom ops (as the rotary kernel is): a
tensor-only signature is possible (the tables as lists of tensors, their addresses taken
inside the op; it passed these tests), but nothing would call it. Under torch.compile the
callers cannot be traced: the bias is a Python object that fused attention
(posenc/attention/biased.py) carries through its own autograd function and has write its
logits block by block (DeBERTa's materialized path wraps the same object), so tracing
means reworking fused attention, not these kernels. In eager mode the op's dispatch
(torch.library's Python layers, tensor lists, a mutated output) made a call take 100-180 us
against 7-68 us for the direct call (write and split at L = 40 and 130, B <= 2, H = 2, one
thread), so eager calls would stay on ctypes anyway. :func:`pair_kernel_ready` therefore
declines while compiling, and compiled DeBERTa computes its bias with tensor ops
(tests/kernels/test_pairs.py checks both).
"""

from __future__ import annotations

import ctypes

import torch
from torch import Tensor

from ..errors import UserError
from . import build as native_build


def native_pair_status() -> str:
    """"ready", "disabled" (POSENC_NATIVE_KERNELS=0) or why the kernel is unavailable.
    Builds the kernel on first use."""
    return _KERNEL.status()


def pair_kernel_ready(*tensors: Tensor) -> bool:
    """Whether the kernels can read and write these tensors: fp32 on the CPU, plain eager
    tensors, native kernels enabled and built."""
    if not native_build.plain_eager(*tensors):
        return False
    if any(t.dtype != torch.float32 or t.device.type != "cpu" for t in tensors):
        return False
    return native_build.native_enabled() and _KERNEL.load() is not None


def _threads(matrices: int) -> int:
    return max(1, min(torch.get_num_threads(), matrices))


def _check(code: int) -> None:
    if code != 0:
        raise RuntimeError(f"posenc pair kernel rejected its arguments (code {code})")


def table_groups(groups: list[Tensor]) -> Tensor:
    """The (G, 4) int64 group spec of a table split into row groups, each a (B, H, rows, W)
    tensor with contiguous rows: address, row, batch and head strides."""
    return torch.tensor([[t.data_ptr(), t.stride(2), t.stride(0), t.stride(1)] for t in groups],
                        dtype=torch.int64)


def write_pairs(query: tuple[Tensor, Tensor], key: tuple[Tensor, Tensor], out: Tensor,
                first_row: int, fill: float) -> None:
    """out (B, H, rows, keys), row-contiguous <- C(i, j) + P(j, i) for rows first_row <= i <
    first_row + rows, ``fill`` at j > i. query, key: (groups (G, 4), rows (3, L)) of tables
    holding B x H matrices (module docstring)."""
    nb, nh, rows, keys = out.shape
    n = query[1].shape[1]
    if out.stride(-1) != 1 or query[1].shape != (3, n) or key[1].shape != (3, n):
        raise UserError("write_pairs needs a row-contiguous out and (3, L) row specs")
    _check(_KERNEL.state["lib"].posenc_pair_write(
        query[0].data_ptr(), query[1].data_ptr(), key[0].data_ptr(), key[1].data_ptr(),
        out.data_ptr(), out.stride(0), out.stride(1), out.stride(2), n, first_row,
        first_row + rows, keys, nb, nh, ctypes.c_float(fill), _threads(nb * nh)))


def split_pairs(grad: tuple[Tensor, Tensor], query_grad: tuple[Tensor, Tensor],
                query_zero: Tensor, key_grad: tuple[Tensor, Tensor], key_zero: Tensor,
                batch: int, heads: int) -> None:
    """The gradients of both tables from the pairs' gradient rows (module docstring): each
    a (groups (G, 4), rows (3, L)) spec, the zero counts (L,) int64."""
    n = grad[1].shape[1]
    _check(_KERNEL.state["lib"].posenc_pair_split(
        grad[0].data_ptr(), grad[1].data_ptr(), query_grad[0].data_ptr(),
        query_grad[1].data_ptr(), query_zero.data_ptr(), key_grad[0].data_ptr(),
        key_grad[1].data_ptr(), key_zero.data_ptr(), n, batch, heads, _threads(batch * heads)))


def _declare(lib):
    """Declare the kernels' C signatures on the loaded library."""
    lib.posenc_pair_write.argtypes = ([ctypes.c_void_p] * 5 + [ctypes.c_int64] * 9
                                      + [ctypes.c_float, ctypes.c_int])
    lib.posenc_pair_split.argtypes = [ctypes.c_void_p] * 8 + [ctypes.c_int64] * 3 + [ctypes.c_int]
    for fn in (lib.posenc_pair_write, lib.posenc_pair_split):
        fn.restype = ctypes.c_int
    return lib


def _build():
    openmp, why = native_build.openmp_decision()
    if not openmp:                  # the matrices are shared among torch's OpenMP workers
        raise RuntimeError(f"not built: {why}")
    return _declare(native_build.compile_and_load(
        native_build.kernel_source("pairs"), "pairs", native_build.find_compiler(),
        [*native_build.compiler_flags(), "-fopenmp"]))


_KERNEL = native_build.LazyKernel("pair", _build)
