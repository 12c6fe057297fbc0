/* posenc rotary kernel: rotate (a, b) pairs of q/k rows by per-position angles.

   Built and loaded by posenc/kernels/build.py (ctypes), called from posenc/kernels/rotary.py.
   fp32 or bf16 rows, math in fp32 without fused multiply-add, so results equal the plain
   tensor-op reference bit for bit. Threads: torch's own OpenMP workers when built with
   -fopenmp (against the runtime torch already loaded), POSIX threads otherwise. */

#include <stdint.h>
#include <string.h>
#include <pthread.h>
#if defined(__AVX2__)
#include <immintrin.h>
#endif
#define MAXD 1024
#define PREFETCH_ROWS 16

typedef struct {
  const char *x; char *out; const float *cos, *sin;
  int64_t size[4], stride[4];       /* row dims of x (outermost first), strides in elements */
  int64_t angle_stride[4];          /* strides of cos/sin rows over the same dims (0: shared) */
  int64_t dim, rot;                 /* row width, rotated width */
  int bf16, interleaved, stream, prefetch;  /* stream: aligned streaming stores; prefetch:
                                               rows of x are not densely packed */
  int64_t rows, chunk, next;        /* threads take chunks of rows from next (atomic) */
} job_t;

static inline float bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f;
}
static inline uint16_t f32_to_bf16(float f) {          /* round to nearest even, as c10 */
  uint32_t u; memcpy(&u, &f, 4);
  if (f != f) return 0x7FC0;
  return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

#if defined(__AVX2__)
static inline __m256 load8(const char *p, int bf16) {
  if (!bf16) return _mm256_loadu_ps((const float *)p);
  __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
static inline void store8(char *p, __m256 v, int bf16, int stream) {
  if (!bf16) {
    if (stream) _mm256_stream_ps((float *)p, v); else _mm256_storeu_ps((float *)p, v);
    return;
  }
  __m256i u = _mm256_castps_si256(v);
  __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i r = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7FFF)), lsb);
  r = _mm256_srli_epi32(r, 16);
  __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  r = _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7FC0), nan);
  r = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0xD8);   /* 8 x u16 in low half */
  __m128i h = _mm256_castsi256_si128(r);
  if (stream) _mm_stream_si128((__m128i *)p, h); else _mm_storeu_si128((__m128i *)p, h);
}
#endif

/* Called with constant bf16 and interleaved (see rotate_rows), so each combination compiles
   to its own loop without per-element branches on them. */
static inline __attribute__((always_inline)) void rotate_rows_with(
    const job_t *j, int64_t row_begin, int64_t row_end, const int bf16, const int interleaved,
    const int stream, const int prefetch) {
  const int64_t d = j->dim, h = j->rot / 2, es = bf16 ? 2 : 4;
  float xf[MAXD], of[MAXD];
  int64_t idx[4], rest = row_begin;             /* row index as an odometer, no divisions */
  for (int k = 3; k >= 0; k--) { idx[k] = rest % j->size[k]; rest /= j->size[k]; }
  int64_t ahead[4];                             /* the row PREFETCH_ROWS - 1 further on */
  rest = row_begin + PREFETCH_ROWS - 1;
  for (int k = 3; k >= 0; k--) { ahead[k] = rest % j->size[k]; rest /= j->size[k]; }
  for (int64_t r = row_begin; r < row_end; r++) {
    if (r > row_begin)
      for (int k = 3; k >= 0 && ++idx[k] == j->size[k]; k--) idx[k] = 0;
    if (prefetch && r + PREFETCH_ROWS < row_end) {   /* rows of a strided x */
      for (int k = 3; k >= 0 && ++ahead[k] == j->size[k]; k--) ahead[k] = 0;
      const char *p = j->x + es * (ahead[0] * j->stride[0] + ahead[1] * j->stride[1] +
                                   ahead[2] * j->stride[2] + ahead[3] * j->stride[3]);
      for (int64_t off = 0; off < d * es; off += 64) __builtin_prefetch(p + off);
    }
    const char *src = j->x + es * (idx[0] * j->stride[0] + idx[1] * j->stride[1] +
                                   idx[2] * j->stride[2] + idx[3] * j->stride[3]);
    char *dst = j->out + r * d * es;
    const int64_t at = idx[0] * j->angle_stride[0] + idx[1] * j->angle_stride[1] +
                       idx[2] * j->angle_stride[2] + idx[3] * j->angle_stride[3];
    const float *c = j->cos + at, *s = j->sin + at;
    int64_t done = 0;                 /* pairs handled by the vector loop */
#if defined(__AVX2__)
    if (!interleaved && h % 8 == 0) {
      for (int64_t i = 0; i < h; i += 8) {
        __m256 a = load8(src + es * i, bf16), b = load8(src + es * (h + i), bf16);
        __m256 cc = _mm256_loadu_ps(c + i), ss = _mm256_loadu_ps(s + i);
        __m256 first = _mm256_sub_ps(_mm256_mul_ps(a, cc), _mm256_mul_ps(b, ss));
        __m256 second = _mm256_add_ps(_mm256_mul_ps(b, cc), _mm256_mul_ps(a, ss));
        store8(dst + es * i, first, bf16, stream);
        store8(dst + es * (h + i), second, bf16, stream);
      }
      done = h;
    } else if (interleaved && h % 4 == 0) {
      /* 4 pairs per vector: cos/sin broadcast to both lanes, then spread in-lane */
      const __m256i spread = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
      for (int64_t i = 0; i < h; i += 4) {
        __m256 cc = _mm256_permutevar_ps(_mm256_broadcast_ps((const __m128 *)(c + i)), spread);
        __m256 ss = _mm256_permutevar_ps(_mm256_broadcast_ps((const __m128 *)(s + i)), spread);
        __m256 v = load8(src + es * 2 * i, bf16);
        __m256 sw = _mm256_permute_ps(v, 0xB1);                 /* (b, a) pairs */
        /* even lanes a*c - b*s, odd lanes b*c + a*s */
        __m256 rotated = _mm256_addsub_ps(_mm256_mul_ps(v, cc), _mm256_mul_ps(sw, ss));
        store8(dst + es * 2 * i, rotated, bf16, stream);
      }
      done = h;
    }
#endif
    if (done == h && j->rot == d) continue;
    /* scalar path: the whole row (or just the pass-through tail) */
    for (int64_t i = 0; i < d; i++)
      xf[i] = bf16 ? bf16_to_f32(((const uint16_t *)src)[i]) : ((const float *)src)[i];
    if (done < h) {
      for (int64_t i = 0; i < h; i++) {
        const int64_t p = interleaved ? 2 * i : i, q = interleaved ? 2 * i + 1 : h + i;
        of[p] = xf[p] * c[i] - xf[q] * s[i];
        of[q] = xf[p] * s[i] + xf[q] * c[i];
      }
    }
    const int64_t from = done < h ? 0 : j->rot;
    for (int64_t i = j->rot; i < d; i++) of[i] = xf[i];
    for (int64_t i = from; i < d; i++) {
      if (bf16) ((uint16_t *)dst)[i] = f32_to_bf16(of[i]);
      else ((float *)dst)[i] = of[i];
    }
  }
}

static void rotate_rows(const job_t *j, int64_t row_begin, int64_t row_end) {
#define ROWS(B, I) \
  case B * 2 + I: rotate_rows_with(j, row_begin, row_end, B, I, j->stream, j->prefetch); break;
  switch (j->bf16 * 2 + j->interleaved) { ROWS(0, 0) ROWS(0, 1) ROWS(1, 0) ROWS(1, 1) }
#undef ROWS
}

/* Take chunks until none is left: a thread that starts late (a busy machine) takes less. */
static void *run_job(void *arg) {
  job_t *j = (job_t *)arg;
  for (;;) {
    const int64_t begin = __atomic_fetch_add(&j->next, j->chunk, __ATOMIC_RELAXED);
    if (begin >= j->rows) break;
    rotate_rows(j, begin, begin + j->chunk < j->rows ? begin + j->chunk : j->rows);
  }
#if defined(__AVX2__)
  if (j->stream) _mm_sfence();
#endif
  return NULL;
}

/* x: rows indexed by 4 dims (sizes s0..s3, strides t0..t3 in elements), each row dim
   elements with unit stride; out: the same rows, contiguous, in the same order.
   cos, sin: fp32, rot/2 angles per row with unit stride, the row of x's row (i0..i3) at
   element offset i0 a0 + i1 a1 + i2 a2 + i3 a3 (a stride 0 where rows share angles: over
   heads, or over the batch when every sequence has the same positions).
   Returns 0, or -1 on bad arguments. */
int posenc_rotary(const void *x, void *out, const float *cos, const float *sin,
                  int64_t s0, int64_t s1, int64_t s2, int64_t s3,
                  int64_t t0, int64_t t1, int64_t t2, int64_t t3,
                  int64_t a0, int64_t a1, int64_t a2, int64_t a3, int64_t dim,
                  int64_t rot, int bf16, int interleaved, int stream, int n_threads) {
  const int64_t size[4] = {s0, s1, s2, s3}, stride[4] = {t0, t1, t2, t3};
  if (dim > MAXD || rot > dim || rot % 2 || n_threads < 1 || n_threads > 256) return -1;
  int64_t rows = 1;
  for (int k = 0; k < 4; k++) {
    if (size[k] < 1) return -1;
    rows *= size[k];
  }
  int64_t chunk = rows / (8 * n_threads);
  chunk = chunk < 64 ? 64 : chunk > 4096 ? 4096 : chunk;
  const int64_t row_bytes = dim * (bf16 ? 2 : 4);
  stream = stream && ((uintptr_t)out & 31) == 0 && (row_bytes & 31) == 0;
  int dense = 1;
  for (int64_t k = 3, packed = dim; k >= 0; packed *= size[k], k--)
    if (size[k] > 1 && stride[k] != packed) dense = 0;
  job_t job = {(const char *)x, (char *)out, cos, sin, {size[0], size[1], size[2], size[3]},
               {stride[0], stride[1], stride[2], stride[3]}, {a0, a1, a2, a3}, dim, rot,
               bf16 != 0, interleaved != 0, stream != 0, !dense, rows, chunk, 0};
#ifdef _OPENMP
  /* torch's own OpenMP runtime (same soname, already loaded): its worker threads, still
     spinning after the previous torch op, take the chunks; threads of our own would compete
     with them for the cores */
  if (n_threads > 1) {
#pragma omp parallel num_threads(n_threads)
    run_job(&job);
  } else {
    run_job(&job);
  }
#else
  pthread_t tids[256];
  int started[256];
  for (int t = 1; t < n_threads; t++)
    started[t] = pthread_create(&tids[t], NULL, run_job, &job) == 0;
  run_job(&job);                    /* a thread that failed to start leaves its share here */
  for (int t = 1; t < n_threads; t++)
    if (started[t]) pthread_join(tids[t], NULL);
#endif
  return 0;
}
