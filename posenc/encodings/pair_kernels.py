"""The sum of a query-row and a key-row distance table over a causal square block, in one pass.

For the ``"causal"`` pair layout (relative_shift.py), a term read from a query-row table is a
strided view of it, but a term read from a key-row table is a *transposed* strided view: row i
of the pair matrix walks down a column of the table, L - 1 elements apart. Adding the two
(DeBERTa's c2p + p2c) with tensor ops streams one table and gathers the other, and the
backward makes two more such passes over the (B, H, L, L) gradient. Here a small C kernel
does each in one tiled pass per matrix (32 x 32 tiles of 8 x 8 blocks, each transposed in
AVX2 registers, so the transposed side is read from cache lines already loaded):

    forward:   out[i, j] = qt[i, L - 1 - i + j] + kt[j, i - j]   (j <= i; 0 for j > i)
    backward:  gqt[i, c] = g[i, c + i - (L - 1)] for c >= L - 1 - i, else 0
               gkt[j, c] = g[j + c, j]           for c <= L - 1 - j, else 0

with qt, kt, g (B, H, L, L) fp32 on the CPU, each matrix row-contiguous, any leading strides
(the gradient of each table is laid out like the table). Hidden pairs (j > i) read 0 and get
no gradient, as the layout's views promise. Matrices are shared among torch's own OpenMP
workers (the kernel is only built with -fopenmp against the runtime torch already loaded);
where that is not possible, or for other dtypes, devices, shapes, tracing, vmap or
``POSENC_NATIVE_KERNELS=0``, :func:`causal_pair_sum` returns None and callers use the views.
"""

from __future__ import annotations

import ctypes

import torch
from torch import Tensor

from . import native_build

_KERNEL_SOURCE = r"""
#include <stdint.h>
#include <string.h>
#if defined(__AVX2__)
#include <immintrin.h>
#endif

#define TILE 32
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

#if defined(__AVX2__)
/* r[k] <- column k of the 8 x 8 block whose rows are r[0..7] */
static inline void transpose8(__m256 r[8]) {
  __m256 t[8], u[8];
  for (int k = 0; k < 8; k += 2) {
    t[k] = _mm256_unpacklo_ps(r[k], r[k + 1]);
    t[k + 1] = _mm256_unpackhi_ps(r[k], r[k + 1]);
  }
  for (int k = 0; k < 8; k += 4) {
    u[k] = _mm256_shuffle_ps(t[k], t[k + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[k + 1] = _mm256_shuffle_ps(t[k], t[k + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[k + 2] = _mm256_shuffle_ps(t[k + 1], t[k + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[k + 3] = _mm256_shuffle_ps(t[k + 1], t[k + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int k = 0; k < 4; k++) {
    r[k] = _mm256_permute2f128_ps(u[k], u[k + 4], 0x20);
    r[k + 4] = _mm256_permute2f128_ps(u[k], u[k + 4], 0x31);
  }
}
#endif

/* out[i, j] = qt[i, n-1-i+j] + kt[j, i-j] over the block i0 <= i < i1, j0 <= j < j1, j <= i */
static void sum_block(const float *restrict qt, const float *restrict kt, float *restrict out,
                      int64_t n, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
#if defined(__AVX2__)
  if (i1 - i0 == 8 && j1 - j0 == 8 && j1 <= i0 + 1) {       /* every pair visible */
    __m256 r[8];
    for (int k = 0; k < 8; k++) r[k] = _mm256_loadu_ps(kt + (j0 + k) * (n - 1) + i0);
    transpose8(r);                                           /* r[k]: i = i0 + k, lanes j */
    for (int k = 0; k < 8; k++) {
      const int64_t i = i0 + k;
      _mm256_storeu_ps(out + i * n + j0,
                       _mm256_add_ps(_mm256_loadu_ps(qt + i * n + (n - 1 - i) + j0), r[k]));
    }
    return;
  }
#endif
  for (int64_t i = MAX(i0, j0); i < i1; i++) {
    const int64_t end = MIN(j1, i + 1);
    for (int64_t j = j0; j < end; j++)
      out[i * n + j] = qt[i * n + (n - 1 - i) + j] + kt[j * (n - 1) + i];
  }
}

/* gkt[j, i-j] = g[i, j] over the block, i >= j */
static void split_block(const float *restrict g, float *restrict gkt, int64_t n, int64_t i0,
                        int64_t i1, int64_t j0, int64_t j1) {
#if defined(__AVX2__)
  if (i1 - i0 == 8 && j1 - j0 == 8 && j1 <= i0 + 1) {
    __m256 r[8];
    for (int k = 0; k < 8; k++) r[k] = _mm256_loadu_ps(g + (i0 + k) * n + j0);
    transpose8(r);                                           /* r[k]: j = j0 + k, lanes i */
    for (int k = 0; k < 8; k++) _mm256_storeu_ps(gkt + (j0 + k) * (n - 1) + i0, r[k]);
    return;
  }
#endif
  for (int64_t j = j0; j < j1; j++)
    for (int64_t i = MAX(i0, j); i < i1; i++) gkt[j * (n - 1) + i] = g[i * n + j];
}

static void sum_matrix(const float *restrict qt, const float *restrict kt,
                       float *restrict out, int64_t n) {
  for (int64_t j0 = 0; j0 < n; j0 += TILE) {             /* kt rows j0.. stream along i */
    const int64_t j1 = MIN(j0 + TILE, n);
    for (int64_t i0 = j0; i0 < n; i0 += TILE)
      for (int64_t b = j0; b < j1; b += 8)
        for (int64_t a = MAX(i0, b); a < MIN(i0 + TILE, n); a += 8)
          sum_block(qt, kt, out, n, a, MIN(a + 8, MIN(i0 + TILE, n)), b, MIN(b + 8, j1));
  }
  for (int64_t i = 0; i < n; i++)
    memset(out + i * n + i + 1, 0, (size_t)(n - 1 - i) * sizeof(float));
}

static void split_matrix(const float *restrict g, float *restrict gqt,
                         float *restrict gkt, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    memset(gqt + i * n, 0, (size_t)(n - 1 - i) * sizeof(float));
    memcpy(gqt + i * n + (n - 1 - i), g + i * n, (size_t)(i + 1) * sizeof(float));
  }
  for (int64_t j0 = 0; j0 < n; j0 += TILE)
    for (int64_t i0 = j0; i0 < n; i0 += TILE)
      for (int64_t b = j0; b < MIN(j0 + TILE, n); b += 8)
        for (int64_t a = MAX(i0, b); a < MIN(i0 + TILE, n); a += 8)
          split_block(g, gkt, n, a, MIN(a + 8, MIN(i0 + TILE, n)), b, MIN(b + 8, n));
  for (int64_t j = 1; j < n; j++)                        /* columns c > n - 1 - j */
    memset(gkt + j * n + (n - j), 0, (size_t)j * sizeof(float));
}

/* Matrices m = (a, b) for a < s0, b < s1; each tensor's matrix starts at a * t0 + b * t1
   (its own leading strides, in elements). forward: x = qt, y = kt, z = out;
   backward: x = g, y = gqt, z = gkt. Returns 0, or -1 on bad arguments. */
int posenc_causal_pair(int backward, const float *x, float *y, float *z, int64_t s0,
                       int64_t s1, int64_t n, int64_t xt0, int64_t xt1, int64_t yt0,
                       int64_t yt1, int64_t zt0, int64_t zt1, int n_threads) {
  if (s0 < 1 || s1 < 1 || n < 1 || n_threads < 1) return -1;
  const int64_t m = s0 * s1;
#pragma omp parallel for schedule(dynamic, 1) num_threads(n_threads) if (n_threads > 1)
  for (int64_t t = 0; t < m; t++) {
    const int64_t a = t / s1, b = t % s1;
    const float *xm = x + a * xt0 + b * xt1;
    float *ym = y + a * yt0 + b * yt1, *zm = z + a * zt0 + b * zt1;
    if (backward)
      split_matrix(xm, ym, zm, n);
    else
      sum_matrix(xm, ym, zm, n);
  }
  return 0;
}
"""



def native_pair_status() -> str:
    """"ready", "disabled" (POSENC_NATIVE_KERNELS=0) or why the kernel is unavailable.
    Builds the kernel on first use."""
    return _KERNEL.status()


def _eligible(*tables: Tensor) -> bool:
    if not native_build.plain_eager(*tables):
        return False
    n = tables[0].shape[-1]
    for t in tables:
        if t.dtype != torch.float32 or t.device.type != "cpu" or t.dim() != 4:
            return False
        if t.shape != tables[0].shape or t.shape[-2] != n or t.stride()[-2:] != (n, 1):
            return False
    if not native_build.native_enabled():
        return False
    return _KERNEL.load() is not None


def _run(backward: bool, x: Tensor, y: Tensor, z: Tensor) -> None:
    s0, s1, n = x.shape[0], x.shape[1], x.shape[-1]
    threads = max(1, min(torch.get_num_threads(), s0 * s1))
    code = _KERNEL.state["lib"].posenc_causal_pair(
        int(backward), x.data_ptr(), y.data_ptr(), z.data_ptr(), s0, s1, n,
        *x.stride()[:2], *y.stride()[:2], *z.stride()[:2], threads)
    if code != 0:
        raise RuntimeError(f"posenc pair kernel rejected its arguments (code {code})")


class _CausalPairSum(torch.autograd.Function):
    @staticmethod
    def forward(ctx, query_table: Tensor, key_table: Tensor) -> Tensor:
        out = torch.empty(query_table.shape, dtype=query_table.dtype)
        _run(False, query_table, key_table, out)
        ctx.metas = (torch.empty_like(query_table, device="meta"),
                     torch.empty_like(key_table, device="meta"))
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):
        if grad.stride()[-2:] != (grad.shape[-1], 1):
            grad = grad.contiguous()
        grad_query, grad_key = (torch.empty_like(m, device=grad.device) for m in ctx.metas)
        _run(True, grad, grad_query, grad_key)
        return grad_query, grad_key


def causal_pair_sum(query_table: Tensor, key_table: Tensor) -> Tensor | None:
    """The causal layout's query_rows(query_table) + key_rows(key_table) in one pass, zero at
    hidden pairs: both (B, H, L, L) -> (B, H, L, L), differentiable. None where the kernel
    cannot take these tensors (see the module docstring)."""
    if not _eligible(query_table, key_table):
        return None
    return _CausalPairSum.apply(query_table, key_table)


def _build():
    if not native_build.openmp_runtime_loaded():
        raise RuntimeError("torch does not run on GNU OpenMP in this process")
    lib = native_build.compile_and_load(_KERNEL_SOURCE, "causal_pair",
                                        native_build.find_compiler(),
                                        [*native_build.compiler_flags(), "-fopenmp"])
    fn = lib.posenc_causal_pair
    fn.argtypes = [ctypes.c_int] + [ctypes.c_void_p] * 3 + [ctypes.c_int64] * 9 + [ctypes.c_int]
    fn.restype = ctypes.c_int
    return lib


_KERNEL = native_build.LazyKernel("pair", _build)
