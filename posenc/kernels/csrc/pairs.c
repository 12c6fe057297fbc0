/* posenc pair kernels: passes between distance tables and the pairs of a causal square
   block (DeBERTa's fused causal bias). Layout and contract: posenc/kernels/pairs.py.

   Built and loaded by posenc/kernels/build.py (ctypes). fp32; matrices (b, h) are shared
   among torch's OpenMP workers (built with -fopenmp against the runtime torch loaded). */

#include <stdint.h>
#include <string.h>
#if defined(__AVX2__)
#include <immintrin.h>
#endif

#define TILE 32
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

/* a table: groups[4 g ..] = byte address of group g's matrix (0, 0), its row, batch and
   head strides (elements); rows[r] = the group of row r, rows[n + r] its row in the group,
   rows[2 n + r] the shift of its element "0" */
typedef struct { const int64_t *groups, *rows; int64_t n, b, h; } rows_t;

static inline float *row(rows_t t, int64_t r) {
  const int64_t *g = t.groups + 4 * t.rows[r];
  return (float *)(intptr_t)(g[0] + (int64_t)sizeof(float) *
                             (t.rows[t.n + r] * g[1] + t.rows[2 * t.n + r] + t.b * g[2] +
                              t.h * g[3]));
}

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

/* out row i (pointer orow(i)) <- C(i, j) + P(j, i) over i0 <= i < i1, j0 <= j < j1, j <= i */
static void write_block(rows_t c, rows_t p, float *out, int64_t ors, int64_t r0, int64_t i0,
                        int64_t i1, int64_t j0, int64_t j1) {
#if defined(__AVX2__)
  if (i1 - i0 == 8 && j1 - j0 == 8 && j0 + 7 <= i0) {      /* every pair visible */
    __m256 r[8];
    for (int k = 0; k < 8; k++) r[k] = _mm256_loadu_ps(row(p, j0 + k) + i0);
    transpose8(r);                                          /* r[k]: i = i0 + k, lanes j */
    for (int k = 0; k < 8; k++) {
      const int64_t i = i0 + k;
      _mm256_storeu_ps(out + (i - r0) * ors + j0,
                       _mm256_add_ps(_mm256_loadu_ps(row(c, i) + j0), r[k]));
    }
    return;
  }
#endif
  for (int64_t i = MAX(i0, j0); i < i1; i++) {
    const float *ci = row(c, i);
    for (int64_t j = j0; j < MIN(j1, i + 1); j++) out[(i - r0) * ors + j] = ci[j] + row(p, j)[i];
  }
}

/* gP(j, i) <- g(i, j) over the block, i >= j */
static void split_block(rows_t g, rows_t gp, int64_t i0, int64_t i1, int64_t j0,
                        int64_t j1) {
#if defined(__AVX2__)
  if (i1 - i0 == 8 && j1 - j0 == 8 && j0 + 7 <= i0) {
    __m256 r[8];
    for (int k = 0; k < 8; k++) r[k] = _mm256_loadu_ps(row(g, i0 + k) + j0);
    transpose8(r);                                          /* r[k]: j = j0 + k, lanes i */
    for (int k = 0; k < 8; k++) _mm256_storeu_ps(row(gp, j0 + k) + i0, r[k]);
    return;
  }
#endif
  for (int64_t j = j0; j < j1; j++) {
    float *gj = row(gp, j);
    for (int64_t i = MAX(i0, j); i < i1; i++) gj[i] = row(g, i)[j];
  }
}

static void write_matrix(rows_t c, rows_t p, float *out, int64_t ors, int64_t r0, int64_t r1,
                         int64_t keys, float fill) {
  const int64_t seen = MIN(keys, r1);                     /* keys any row of the block sees */
  for (int64_t j0 = 0; j0 < seen; j0 += TILE) {           /* P rows j0.. stream along i */
    const int64_t j1 = MIN(j0 + TILE, seen);
    for (int64_t i0 = r0 + MAX(0, (j0 - r0) / TILE * TILE); i0 < r1; i0 += TILE)
      for (int64_t b = j0; b < j1; b += 8)
        for (int64_t a = i0; a < MIN(i0 + TILE, r1); a += 8)
          if (a + 7 >= b)
            write_block(c, p, out, ors, r0, a, MIN(a + 8, MIN(i0 + TILE, r1)), b,
                        MIN(b + 8, j1));
  }
  for (int64_t i = r0; i < r1; i++)
    for (int64_t j = i + 1; j < keys; j++) out[(i - r0) * ors + j] = fill;
}

static void split_matrix(rows_t g, rows_t gc, const int64_t *czero, rows_t gp,
                         const int64_t *pzero, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    float *gi = row(gc, i);
    memset(gi - czero[i], 0, (size_t)czero[i] * sizeof(float));
    memcpy(gi, row(g, i), (size_t)(i + 1) * sizeof(float));
  }
  for (int64_t j0 = 0; j0 < n; j0 += TILE)
    for (int64_t i0 = j0; i0 < n; i0 += TILE)
      for (int64_t b = j0; b < MIN(j0 + TILE, n); b += 8)
        for (int64_t a = MAX(i0, b); a < MIN(i0 + TILE, n); a += 8)
          split_block(g, gp, a, MIN(a + 8, MIN(i0 + TILE, n)), b, MIN(b + 8, n));
  for (int64_t j = 0; j < n; j++)
    memset(row(gp, j) + n, 0, (size_t)pzero[j] * sizeof(float));
}

/* Matrices (b, h), b < nb, h < nh; each table is (groups, rows) as in rows_t; out is
   row-contiguous with row stride ors and leading strides obs, ohs (elements). Returns 0, or
   -1 on bad arguments. */
int posenc_pair_write(const int64_t *cg, const int64_t *cr, const int64_t *pg,
                      const int64_t *pr, float *out, int64_t obs, int64_t ohs, int64_t ors,
                      int64_t n, int64_t r0, int64_t r1, int64_t keys, int64_t nb, int64_t nh,
                      float fill, int n_threads) {
  if (nb < 1 || nh < 1 || n < 1 || r0 < 0 || r1 > n || r0 >= r1 || keys < 1 || keys > n ||
      ors < keys || n_threads < 1)
    return -1;
#pragma omp parallel for schedule(dynamic, 1) num_threads(n_threads) if (n_threads > 1)
  for (int64_t m = 0; m < nb * nh; m++) {
    const int64_t b = m / nh, h = m % nh;
    rows_t c = {cg, cr, n, b, h}, p = {pg, pr, n, b, h};
    write_matrix(c, p, out + b * obs + h * ohs, ors, r0, r1, keys, fill);
  }
  return 0;
}

int posenc_pair_split(const int64_t *dg, const int64_t *dr, const int64_t *cg,
                      const int64_t *cr, const int64_t *czero, const int64_t *pg,
                      const int64_t *pr, const int64_t *pzero, int64_t n, int64_t nb,
                      int64_t nh, int n_threads) {
  if (nb < 1 || nh < 1 || n < 1 || n_threads < 1) return -1;
#pragma omp parallel for schedule(dynamic, 1) num_threads(n_threads) if (n_threads > 1)
  for (int64_t m = 0; m < nb * nh; m++) {
    const int64_t b = m / nh, h = m % nh;
    rows_t g = {dg, dr, n, b, h}, gc = {cg, cr, n, b, h}, gp = {pg, pr, n, b, h};
    split_matrix(g, gc, czero, gp, pzero, n);
  }
  return 0;
}
