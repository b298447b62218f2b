/*
 * GPU test of the grouped expert GEMM (kernels/moe): mkx_moe_gemm_run
 * against an fp64 reference of this file's own, on fresh random inputs and
 * row counts: experts with no rows, one row, exactly a tile, a tile and
 * one; skewed counts; many experts; plain and SwiGLU; row scales; bf16 and
 * fp16; C in bf16, fp16 and fp32; both tile widths; padded leading
 * dimensions; rows outside the experts' range; offsets that are out of
 * range or decreasing (no write may leave C).  C is poisoned before each
 * run and guarded past its end.  Then routing, gather and combine against
 * the host, the several-rank placement simulated on one GPU, the verdict
 * without a host wait (records of simulated ranks settled into offsets,
 * row bases, gate and input record; an fp8 scales' scan with a bad value
 * taking precedence over a bad id) and the gate stopping every kernel.
 * One check (tests/common/check.h) per case.  Exit 77 without an sm_90
 * GPU, 1 on any failure.
 *   --bench       also time the expert GEMMs of four layer shapes (the
 *                 DeepSeek-like and Mixtral-like layers, and two of 256 and
 *                 384 rows per expert), in bf16 and, by the swapped kernel,
 *                 in e4m3
 *   --bench-only  the timings alone
 *   --profile     no timings: the DeepSeek-like W1 and W2, three runs each,
 *                 for ncu (ci/gpu-check with MKX_GPU_CHECK_PROFILE=1)
 */
#define _POSIX_C_SOURCE 200809L
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "engine_check.h"
#include "cuda_check.h"
#include "gemm/gemm_engine.h"
#include "fused/fused.h"
#include "moe/moe_engine.h"
#include "num16.h"

/* The summary ci/gpu-check shows, then check.h's verdict and status. */
static int engine_finish(void) {
  printf("# %d ok, %d failed\n", check_count() - check_failed(),
         check_failed());
  return check_done("test_moe_engine");
}

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static uint64_t rnd_u64(void) {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return g_rng;
}
static double rnd(void) { /* [-1, 1) */
  return (double)(rnd_u64() >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

typedef struct {
  const char *name;
  int experts, k, n, swiglu, f16, c_type, block_n, scale;
  int lda_pad, ldw_pad, ldc_pad;
  int first, spare; /* rows before the first expert's, after the last's */
  int bad;          /* 1: offsets out of range and decreasing */
  int counts[8];    /* counts of the first experts (-1: random) */
  int max_rows;     /* random counts in [0, max_rows] */
} tcase;

static uint16_t to16(double v, int f16) {
  return f16 ? mt_f32_to_f16((float)v) : mt_f32_to_bf16((float)v);
}
static double from16(uint16_t h, int f16) {
  return f16 ? mt_f16_to_f32(h) : mt_bf16_to_f32(h);
}
static int esize(int t) { return t == MKX_GEMM_FP32 ? 4 : 2; }
static double c_value(const void *c, int64_t i, int t) {
  if (t == MKX_GEMM_FP32) return ((const float *)c)[i];
  return from16(((const uint16_t *)c)[i], t == MKX_GEMM_FP16);
}
static int is_poison(const void *c, int64_t i, int t) {
  if (t == MKX_GEMM_FP32) return ((const uint32_t *)c)[i] == 0xFFFFFFFFu;
  return ((const uint16_t *)c)[i] == 0xFFFFu;
}

enum { GUARD_ROWS = 3 };

static const char *kernel_name(int kernel) {
  return kernel == MKX_MOE_GEMM_SWAP ? "swap" : "rows";
}

static void run_case(const tcase *t, int kernel) {
  const int E = t->experts, k = t->k, n = t->n, f16 = t->f16;
  /* SwiGLU: the up half at the next multiple of 8 columns after n */
  const int up = t->swiglu ? (n + 7) / 8 * 8 : 0;
  const int wcols = t->swiglu ? up + n : n;
  const int64_t lda = k + t->lda_pad, ldw = wcols + t->ldw_pad,
                ldc = n + t->ldc_pad;
  snprintf(g_case, sizeof g_case, "%s [%s]", t->name, kernel_name(kernel));
  int *off = host_alloc(sizeof(int) * (size_t)(E + 1));
  off[0] = t->first;
  for (int e = 0; e < E; ++e) {
    const int c = e < 8 && t->counts[e] >= 0
                      ? t->counts[e]
                      : (int)(rnd_u64() % (uint64_t)(t->max_rows + 1));
    off[e + 1] = off[e] + c;
  }
  const int64_t a_rows = off[E] + t->spare;
  if (t->bad &&
      E >= 3) { /* an end past a_rows, a decreasing pair, a negative start */
    off[E] = (int)a_rows + 1000;
    off[1] = off[2] + 5;
    off[0] = -7;
  }
  const int64_t arows_alloc = a_rows > 0 ? a_rows : 1;
  uint16_t *a = host_alloc(2 * (size_t)(arows_alloc * lda));
  uint16_t *w = host_alloc(2 * (size_t)E * k * ldw);
  float *sc = host_alloc(sizeof(float) * (size_t)arows_alloc);
  for (int64_t i = 0; i < arows_alloc * lda; ++i) a[i] = to16(rnd(), f16);
  for (int64_t i = 0; i < (int64_t)E * k * ldw; ++i) w[i] = to16(rnd(), f16);
  for (int64_t i = 0; i < arows_alloc; ++i)
    sc[i] = (float)(0.25 + rnd() * rnd());
  const int cs = esize(t->c_type);
  const size_t cbytes = (size_t)((a_rows + GUARD_ROWS) * ldc) * (size_t)cs;
  void *da = upload(a, 2 * (size_t)(arows_alloc * lda));
  void *dw = upload(w, 2 * (size_t)E * k * ldw);
  float *dsc = upload(sc, sizeof(float) * (size_t)arows_alloc);
  int *doff = upload(off, sizeof(int) * (size_t)(E + 1));
  int *work = NULL;
  CUDA(cudaMalloc((void **)&work,
                  sizeof(int) * (size_t)mkx_moe_gemm_work_ints(E)));
  void *dc = NULL;
  CUDA(cudaMalloc(&dc, cbytes));
  CUDA(cudaMemset(dc, 0xFF, cbytes));
  mkx_moe_gemm_desc d;
  memset(&d, 0, sizeof d);
  d.experts = E;
  d.k = k;
  d.n = n;
  d.a = da;
  d.lda = lda;
  d.a_rows = a_rows;
  d.offsets = doff;
  d.w = dw;
  d.ldw = ldw;
  d.c = dc;
  d.ldc = ldc;
  d.row_scale = t->scale ? dsc : NULL;
  d.ab_type = f16 ? MKX_GEMM_FP16 : MKX_GEMM_BF16;
  d.c_type = t->c_type;
  d.swiglu = t->swiglu;
  d.up_col = up;
  d.block_n = t->block_n;
  d.work = work;
  d.kernel = kernel;
  const char *why = NULL;
  if (!mkx_moe_gemm_supported(&d, &why)) {
    CHECK(0, "%s: unsupported: %s", g_case, why);
    goto out;
  }
  const int rc = mkx_moe_gemm_run(&d, 0);
  const cudaError_t se = cudaDeviceSynchronize();
  if (rc || se != cudaSuccess) {
    CHECK(0, "%s: run %d, sync %s", g_case, rc, cudaGetErrorString(se));
    goto out;
  }
  uint8_t *c = host_alloc(cbytes);
  CUDA(cudaMemcpy(c, dc, cbytes, cudaMemcpyDeviceToHost));
  /* which expert each row belongs to (-1: none), as the header clamps */
  int *owner = host_alloc(sizeof(int) * (size_t)(a_rows + GUARD_ROWS));
  for (int64_t r = 0; r < a_rows + GUARD_ROWS; ++r) owner[r] = -1;
  for (int e = 0; e < E; ++e) {
    int64_t lo = off[e] < 0 ? 0 : off[e] > a_rows ? a_rows : off[e];
    int64_t hi = off[e + 1] < 0 ? 0 : off[e + 1] > a_rows ? a_rows : off[e + 1];
    for (int64_t r = lo; r < hi; ++r) owner[r] = owner[r] < 0 ? e : -2;
  }
  double worst = 0;
  int64_t bad = 0, stray = 0, checked = 0;
  for (int64_t r = 0; r < a_rows + GUARD_ROWS; ++r) {
    const int e = owner[r];
    for (int64_t j = 0; j < ldc; ++j) {
      const int64_t i = r * ldc + j;
      if (e == -1 || j >= n) { /* nothing may be written here */
        if (!is_poison(c, i, t->c_type)) stray++;
        continue;
      }
      if (e == -2 || t->bad)
        continue; /* overlapping or bad ranges: unspecified */
      double g = 0, u = 0;
      for (int q = 0; q < k; ++q) {
        const double x = from16(a[r * lda + q], f16);
        g += x * from16(w[((int64_t)e * k + q) * ldw + j], f16);
        if (t->swiglu)
          u += x * from16(w[((int64_t)e * k + q) * ldw + up + j], f16);
      }
      double ref = t->swiglu ? g / (1 + exp(-g)) * u : g;
      if (t->scale) ref *= sc[r];
      const double got = c_value(c, i, t->c_type);
      const double tol =
          2e-2 * fabs(ref) +
          2e-3 * sqrt((double)k) * (t->swiglu ? sqrt((double)k) : 1);
      const double err = fabs(got - ref);
      checked++;
      if (!(err <= tol)) {
        if (bad < 3)
          printf("# %s: row %lld (expert %d) col %lld: got %g want %g\n",
                 g_case, (long long)r, e, (long long)j, got, ref);
        bad++;
      }
      if (err / (fabs(ref) + 1) > worst) worst = err / (fabs(ref) + 1);
    }
  }
  CHECK(!bad && !stray,
        "%s: %lld wrong of %lld values, %lld stray writes, worst %.2e, rows "
        "%lld",
        g_case, (long long)bad, (long long)checked, (long long)stray, worst,
        (long long)a_rows);
  free(owner);
  free(c);
out:
  CUDA(cudaFree(da));
  CUDA(cudaFree(dw));
  CUDA(cudaFree(dsc));
  CUDA(cudaFree(doff));
  CUDA(cudaFree(work));
  CUDA(cudaFree(dc));
  free(a);
  free(w);
  free(sc);
  free(off);
}

#define R8                                                                     \
  { -1, -1, -1, -1, -1, -1, -1, -1 }
static const tcase cases[] = {
    /* name, E, k, n, swiglu, f16, c_type, block_n, scale, pads(lda, ldw, ldc), first, spare, bad, counts, max */
    {"one expert, 77 rows",
     1,
     64,
     8,
     0,
     0,
     MKX_GEMM_BF16,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     {77, -1, -1, -1, -1, -1, -1, -1},
     0},
    {"tile edges, scaled",
     8,
     256,
     200,
     0,
     0,
     MKX_GEMM_BF16,
     0,
     1,
     0,
     0,
     0,
     0,
     0,
     0,
     {0, 1, 127, 128, 129, 300, 0, 5},
     0},
    {"block edges (swap: 128, 256 rows), scaled",
     8,
     192,
     384,
     0,
     0,
     MKX_GEMM_BF16,
     0,
     1,
     0,
     0,
     0,
     0,
     0,
     0,
     {255, 256, 257, 136, 200, 8, 9, 513},
     0},
    {"block edges, SwiGLU",
     8,
     128,
     136,
     1,
     0,
     MKX_GEMM_BF16,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     {255, 256, 257, 130, 7, 0, 384, 129},
     0},
    {"tile edges, SwiGLU, fp32 C",
     8,
     192,
     136,
     1,
     0,
     MKX_GEMM_FP32,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     {0, 1, 127, 128, 129, 300, 0, 5},
     0},
    {"64 experts, 128 wide", 64, 512, 384, 0, 0, MKX_GEMM_BF16, 128, 0, 0, 0, 0,
     0, 0, 0, R8, 150},
    {"64 experts, 256 wide", 64, 512, 384, 0, 0, MKX_GEMM_BF16, 256, 0, 0, 0, 0,
     0, 0, 0, R8, 150},
    {"64 experts, SwiGLU 256 wide, scaled", 64, 256, 264, 1, 0, MKX_GEMM_BF16,
     256, 1, 0, 0, 0, 0, 0, 0, R8, 100},
    {"256 experts, skewed",
     256,
     128,
     2048,
     1,
     0,
     MKX_GEMM_BF16,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     {1000, 0, 3, -1, -1, -1, -1, -1},
     3},
    {"fp16, fp16 C", 8, 320, 96, 0, 1, MKX_GEMM_FP16, 0, 1, 0, 0, 0, 0, 0, 0,
     R8, 260},
    {"fp16 SwiGLU, fp32 C", 8, 128, 64, 1, 1, MKX_GEMM_FP32, 128, 0, 0, 0, 0, 0,
     0, 0, R8, 200},
    {"padded leading dims, spare rows", 5, 136, 72, 0, 0, MKX_GEMM_BF16, 0, 1,
     24, 40, 6, 9, 33, 0, R8, 140},
    {"padded, SwiGLU, spare rows", 5, 136, 72, 1, 0, MKX_GEMM_BF16, 0, 0, 8, 16,
     2, 130, 5, 0, R8, 140},
    {"no rows at all",
     8,
     64,
     64,
     0,
     0,
     MKX_GEMM_BF16,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     {0, 0, 0, 0, 0, 0, 0, 0},
     0},
    {"no rows, spare rows",
     8,
     64,
     64,
     1,
     0,
     MKX_GEMM_BF16,
     0,
     0,
     0,
     0,
     0,
     3,
     200,
     0,
     {0, 0, 0, 0, 0, 0, 0, 0},
     0},
    {"odd sizes: k 77, n 13, odd ldc", 7, 77, 13, 0, 0, MKX_GEMM_BF16, 0, 1, 3,
     3, 0, 2, 4, 0, R8, 150},
    {"odd sizes, SwiGLU: k 77, n 77, odd ldc", 7, 77, 77, 1, 0, MKX_GEMM_FP32,
     0, 0, 3, 3, 0, 0, 0, 0, R8, 150},
    {"bad offsets stay inside C", 6, 64, 64, 0, 0, MKX_GEMM_BF16, 0, 0, 0, 0, 0,
     0, 10, 1, R8, 90},
};

/* ---- routing ------------------------------------------------------------ */

/* tokens x topk expert ids, topk distinct uniformly random ones of E per
 * token (room for one more, for guard checks). */
static int32_t *random_ids(int64_t tokens, int topk, int E) {
  int32_t *ids = host_alloc(sizeof(int32_t) * (size_t)(tokens * topk + 1));
  for (int64_t t = 0; t < tokens; ++t)
    for (int j = 0; j < topk; ++j) {
      int e, dup;
      do {
        e = (int)(rnd_u64() % (uint64_t)E);
        dup = 0;
        for (int q = 0; q < j; ++q) dup |= ids[t * topk + q] == e;
      } while (dup);
      ids[t * topk + j] = e;
    }
  return ids;
}

/* Route `tokens` tokens of topk distinct random ids among E experts, the
 * local ones [first, first + local); bad: 0 none, 1 an id out of range,
 * 2 a repeat within a token (at random slots, the least one expected);
 * then gather (with weights and origins) and combine against the host. */
static void route_case(int64_t tokens, int topk, int E, int first, int local,
                       int bad) {
  const char *name = g_case;
  snprintf(g_case, sizeof g_case,
           "route %lld tokens, top-%d of %d, local [%d, %d), bad %d",
           (long long)tokens, topk, E, first, first + local, bad);
  const int64_t N = tokens * topk;
  int32_t *ids = random_ids(tokens, topk, E);
  int64_t want_bad = MKX_MOE_NO_BAD_SLOT;
  for (int k = 0; bad && k < 3 && N > 1; ++k) {
    const int64_t i = (int64_t)(rnd_u64() % (uint64_t)N);
    if (bad == 2 && i % topk == 0) continue;
    ids[i] = bad == 1 ? (k & 1 ? -1 : E + k) : ids[i - 1];
    if (i < want_bad) want_bad = i;
  }
  /* host: expected offsets and rows (stable counting sort) */
  int *off = host_zeroed((size_t)local + 1, sizeof(int));
  int *rows = host_alloc(sizeof(int) * (size_t)(N + 1));
  for (int64_t i = 0; i < N; ++i) {
    const int e = ids[i];
    if (e >= first && e < first + local) off[e - first + 1]++;
  }
  for (int le = 0; le < local; ++le) off[le + 1] += off[le];
  int *fill = host_alloc(sizeof(int) * (size_t)local);
  memcpy(fill, off, sizeof(int) * (size_t)local);
  for (int64_t i = 0; i < N; ++i) {
    const int e = ids[i];
    rows[i] = e >= first && e < first + local ? fill[e - first]++ : -1;
  }
  int32_t *dids = upload(ids, sizeof(int32_t) * (size_t)(N + 1));
  int *doff = NULL, *drows = NULL, *dstatus = NULL, *work = NULL;
  CUDA(cudaMalloc((void **)&doff, sizeof(int) * (size_t)(local + 1)));
  CUDA(cudaMalloc((void **)&drows, sizeof(int) * (size_t)(N + 1)));
  CUDA(cudaMalloc((void **)&dstatus, 2 * sizeof(int)));
  CUDA(cudaMalloc((void **)&work, sizeof(int) * (size_t)mkx_moe_route_work_ints(
                                                    tokens, topk, local)));
  mkx_moe_route_desc d = {tokens, topk, E,     first,   local,
                          dids,   doff, drows, dstatus, work};
  int fails = 0;
  int status[2] = {0, 0};
  for (int rep = 0; rep < 2 && !fails; ++rep) { /* twice: the same rows */
    CUDA(cudaMemset(drows, 0x55, sizeof(int) * (size_t)(N + 1)));
    const int rc = mkx_moe_route_run(&d, 0);
    CUDA(cudaDeviceSynchronize());
    int *got_off = host_alloc(sizeof(int) * (size_t)(local + 1)),
        *got_rows = host_alloc(sizeof(int) * (size_t)(N + 1));
    CUDA(cudaMemcpy(status, dstatus, sizeof status, cudaMemcpyDeviceToHost));
    CUDA(cudaMemcpy(got_off, doff, sizeof(int) * (size_t)(local + 1),
                    cudaMemcpyDeviceToHost));
    CUDA(cudaMemcpy(got_rows, drows, sizeof(int) * (size_t)(N + 1),
                    cudaMemcpyDeviceToHost));
    if (rc) {
      printf("# %s: run %d\n", name, rc);
      fails++;
    }
    if (status[0] != (int)want_bad) {
      printf("# %s: first bad slot %d, want %lld\n", name, status[0],
             (long long)want_bad);
      fails++;
    }
    if (!bad) {
      if (status[1] != off[local] ||
          memcmp(got_off, off, sizeof(int) * (size_t)(local + 1))) {
        printf("# %s: offsets differ (total %d, want %d)\n", name, status[1],
               off[local]);
        fails++;
      }
      for (int64_t i = 0; i < N && fails < 4; ++i)
        if (got_rows[i] != rows[i]) {
          printf("# %s: slot %lld row %d, want %d\n", name, (long long)i,
                 got_rows[i], rows[i]);
          fails++;
        }
      if (got_rows[N] != 0x55555555) {
        printf("# %s: row_of_slot written past its end\n", name);
        fails++;
      }
    }
    free(got_off);
    free(got_rows);
  }
  /* gather and combine: every slot's row carries its token, combine of
   * rows y[row][h] = token + h gives sum_j w_j (t + h) */
  if (!bad && !fails && N > 0) {
    const int64_t H = 24, lda = 32, R = off[local];
    uint16_t *x = host_alloc(2 * (size_t)(tokens * H));
    for (int64_t i = 0; i < tokens * H; ++i)
      x[i] = mt_f32_to_bf16((float)(i % 251));
    float *w = host_alloc(sizeof(float) * (size_t)N);
    for (int64_t i = 0; i < N; ++i) w[i] = (float)rnd();
    void *dx = upload(x, 2 * (size_t)(tokens * H));
    float *dw = upload(w, sizeof(float) * (size_t)N);
    uint16_t *da = NULL;
    float *dsc = NULL, *dy = NULL;
    int32_t *dorig = NULL;
    CUDA(cudaMalloc((void **)&da, 2 * (size_t)((R + 1) * lda)));
    CUDA(cudaMalloc((void **)&dsc, sizeof(float) * (size_t)(R + 1)));
    CUDA(cudaMalloc((void **)&dorig, 3 * sizeof(int32_t) * (size_t)(R + 1)));
    CUDA(cudaMemset(da, 0xFF, 2 * (size_t)((R + 1) * lda)));
    const mkx_moe_place one = {NULL, NULL, NULL, NULL, 1, 1, NULL};
    const mkx_moe_rows_at at = {{da}, {dsc}, {dorig}, lda};
    int rc = mkx_moe_gather_run(dx, tokens, topk, H, 2, drows, dw, 5, &one, &at,
                                NULL, NULL, 0);
    uint16_t *a = host_alloc(2 * (size_t)((R + 1) * lda));
    float *sc = host_alloc(sizeof(float) * (size_t)(R + 1));
    int32_t *orig = host_alloc(3 * sizeof(int32_t) * (size_t)(R + 1));
    CUDA(cudaDeviceSynchronize());
    CUDA(
        cudaMemcpy(a, da, 2 * (size_t)((R + 1) * lda), cudaMemcpyDeviceToHost));
    CUDA(
        cudaMemcpy(sc, dsc, sizeof(float) * (size_t)R, cudaMemcpyDeviceToHost));
    CUDA(cudaMemcpy(orig, dorig, 3 * sizeof(int32_t) * (size_t)R,
                    cudaMemcpyDeviceToHost));
    for (int64_t i = 0; i < N && !rc && fails < 4; ++i) {
      const int r = rows[i];
      if (r < 0) continue;
      const int64_t t = i / topk;
      for (int64_t h = 0; h < lda; ++h)
        if (a[r * lda + h] != (h < H ? x[t * H + h] : 0)) {
          printf("# %s: gathered row %d col %lld\n", name, r, (long long)h);
          fails++;
          break;
        }
      if (sc[r] != w[i] || orig[3 * r] != 5 || orig[3 * r + 1] != t ||
          orig[3 * r + 2] != i % topk) {
        printf("# %s: row %d scale or origin\n", name, r);
        fails++;
      }
    }
    if (a[R * lda] != 0xFFFF) {
      printf("# %s: gather wrote past the rows\n", name);
      fails++;
    }
    float *y = host_alloc(sizeof(float) * (size_t)((R + 1) * H));
    for (int64_t r = 0; r < R; ++r)
      for (int64_t h = 0; h < H; ++h) y[r * H + h] = 0;
    for (int64_t i = 0; i < N; ++i)
      if (rows[i] >= 0)
        for (int64_t h = 0; h < H; ++h)
          y[rows[i] * H + h] = (float)(i / topk + h);
    dy = upload(y, sizeof(float) * (size_t)((R + 1) * H));
    void *dout = NULL;
    CUDA(cudaMalloc(&dout, 2 * (size_t)(tokens * H + 1)));
    CUDA(cudaMemset(dout, 0xFF, 2 * (size_t)(tokens * H + 1)));
    const mkx_moe_outs_at ys = {{dy}, H};
    if (!rc)
      rc = mkx_moe_combine_run(&one, &ys, drows, dw, tokens, topk, H, dout,
                               MKX_GEMM_BF16, 0);
    uint16_t *out = host_alloc(2 * (size_t)(tokens * H + 1));
    CUDA(cudaDeviceSynchronize());
    CUDA(cudaMemcpy(out, dout, 2 * (size_t)(tokens * H + 1),
                    cudaMemcpyDeviceToHost));
    for (int64_t t = 0; t < tokens && !rc && fails < 4; ++t)
      for (int64_t h = 0; h < H; ++h) {
        double ref = 0;
        for (int j = 0; j < topk; ++j)
          if (rows[t * topk + j] >= 0)
            ref += (double)w[t * topk + j] * (double)(t + h);
        const double got = mt_bf16_to_f32(out[t * H + h]);
        if (fabs(got - ref) > 1e-2 * fabs(ref) + 1e-3 * (t + h + 1)) {
          printf("# %s: combine token %lld col %lld: %g, want %g\n", name,
                 (long long)t, (long long)h, got, ref);
          fails++;
          break;
        }
      }
    if (out[tokens * H] != 0xFFFF) {
      printf("# %s: combine wrote past out\n", name);
      fails++;
    }
    if (rc) {
      printf("# %s: gather/combine %d\n", name, rc);
      fails++;
    }
    CUDA(cudaFree(dx));
    CUDA(cudaFree(dw));
    CUDA(cudaFree(da));
    CUDA(cudaFree(dsc));
    CUDA(cudaFree(dorig));
    CUDA(cudaFree(dy));
    CUDA(cudaFree(dout));
    free(x);
    free(w);
    free(a);
    free(sc);
    free(orig);
    free(y);
    free(out);
  }
  CHECK(!fails, "%s", name);
  CUDA(cudaFree(dids));
  CUDA(cudaFree(doff));
  CUDA(cudaFree(drows));
  CUDA(cudaFree(dstatus));
  CUDA(cudaFree(work));
  free(ids);
  free(off);
  free(rows);
  free(fill);
}

/* Several ranks' placement, simulated on one GPU: this rank (me of P)
 * routes its slots over every expert, the other ranks' counts per expert
 * are drawn, and the rows must land in owner q's buffer at base[e] plus
 * their rank among this rank's slots of e; rows for the other sources stay
 * untouched; the combine reads each slot's output from its owner. */
/* release: the same rows walked expert by expert (mkx_moe_release), and
 * every owner's flag of each of its experts for this rank at the epoch
 * (the other ranks' flags untouched). */
static void place_case(int64_t tokens, int topk, int P, int me, int ep,
                       int release) {
  const char *name = g_case;
  const int E = P * ep;
  snprintf(g_case, sizeof g_case,
           "placement: rank %d of %d, %lld tokens, top-%d, %d experts%s", me, P,
           (long long)tokens, topk, E,
           release ? ", rows released expert by expert" : "");
  const int64_t N = tokens * topk, H = 40, lda = 48;
  int32_t *ids = random_ids(tokens, topk, E);
  /* counts per (source rank, expert): mine from ids, the others drawn */
  int64_t *cnt = host_zeroed((size_t)P * (size_t)E, sizeof *cnt);
  for (int64_t i = 0; i < N; ++i)
    cnt[(size_t)me * (size_t)E + (size_t)ids[i]]++;
  for (int q = 0; q < P; ++q)
    if (q != me)
      for (int e = 0; e < E; ++e)
        cnt[(size_t)q * (size_t)E + (size_t)e] = (int64_t)(rnd_u64() % 60);
  int *base = host_alloc(sizeof(int) * (size_t)E);
  int64_t *owner_rows = host_zeroed((size_t)P, sizeof *owner_rows);
  for (int d = 0; d < P; ++d)
    for (int le = 0; le < ep; ++le) {
      const int e = d * ep + le;
      int64_t before = 0;
      for (int q = 0; q < P; ++q) {
        if (q < me) before += cnt[(size_t)q * (size_t)E + (size_t)e];
      }
      base[e] = (int)(owner_rows[d] + before);
      for (int q = 0; q < P; ++q)
        owner_rows[d] += cnt[(size_t)q * (size_t)E + (size_t)e];
    }
  int32_t *dids = upload(ids, sizeof(int32_t) * (size_t)(N + 1));
  int *dbase = upload(base, sizeof(int) * (size_t)E);
  int *down = NULL, *drows = NULL, *dstatus = NULL, *work = NULL, *ddest = NULL;
  CUDA(cudaMalloc((void **)&down, sizeof(int) * (size_t)(E + 1)));
  CUDA(cudaMalloc((void **)&drows, sizeof(int) * (size_t)(N + 1)));
  CUDA(cudaMalloc((void **)&ddest, sizeof(int) * (size_t)(N + 1)));
  CUDA(cudaMalloc((void **)&dstatus, 2 * sizeof(int)));
  CUDA(cudaMalloc((void **)&work, sizeof(int) * (size_t)mkx_moe_route_work_ints(
                                                    tokens, topk, E)));
  mkx_moe_route_desc r = {tokens, topk, E,     0,       E,
                          dids,   down, drows, dstatus, work};
  uint16_t *x = host_alloc(2 * (size_t)(tokens * H));
  for (int64_t i = 0; i < tokens * H; ++i)
    x[i] = mt_f32_to_bf16((float)((i * 7) % 251));
  float *wt = host_alloc(sizeof(float) * (size_t)N);
  for (int64_t i = 0; i < N; ++i) wt[i] = (float)rnd();
  void *dx = upload(x, 2 * (size_t)(tokens * H));
  float *dw = upload(wt, sizeof(float) * (size_t)N);
  mkx_moe_rows_at at;
  mkx_moe_outs_at ys;
  memset(&at, 0, sizeof at);
  memset(&ys, 0, sizeof ys);
  at.lda = lda;
  ys.ldy = H;
  float *yh[MKX_MOE_MAX_RANKS];
  for (int q = 0; q < P; ++q) {
    const size_t rows = (size_t)owner_rows[q] + 1;
    CUDA(cudaMalloc(&at.a[q], 2 * rows * (size_t)lda));
    CUDA(cudaMemset(at.a[q], 0xFF, 2 * rows * (size_t)lda));
    yh[q] = host_alloc(sizeof(float) * rows * (size_t)H);
    for (size_t k = 0; k < rows * (size_t)H; ++k)
      yh[q][k] = (float)(q * 1000 + (int)(k % 977));
    ys.y[q] = upload(yh[q], sizeof(float) * rows * (size_t)H);
  }
  const mkx_moe_place pl = {dids, dbase, down, NULL, ep, P, NULL};
  const int epoch = 7;
  mkx_moe_release rel;
  memset(&rel, 0, sizeof rel);
  for (int q = 0; release && q < P; ++q) {
    CUDA(cudaMalloc((void **)&rel.ready[q], sizeof(int) * (size_t)E));
    CUDA(cudaMemset(rel.ready[q], 0, sizeof(int) * (size_t)E));
  }
  if (release) {
    CUDA(cudaMalloc((void **)&rel.done, sizeof(int) * (size_t)E));
    CUDA(cudaMemset(rel.done, 0x7F, sizeof(int) * (size_t)E)); /* zeroed */
    CUDA(cudaMalloc((void **)&rel.order, sizeof(int) * (size_t)(E + 1)));
    CUDA(cudaMalloc((void **)&rel.slot_at, sizeof(int) * (size_t)(N + 1)));
    rel.epoch = upload(&epoch, sizeof epoch);
    rel.rank = me;
    rel.ranks = P;
  }
  int rc = mkx_moe_route_run(&r, 0);
  if (!rc && release) rc = mkx_moe_release_prepare_run(&rel, &pl, drows, N, 0);
  if (!rc)
    rc = mkx_moe_gather_run(dx, tokens, topk, H, 2, drows, dw, me, &pl, &at,
                            ddest, release ? &rel : NULL, 0);
  void *dout = NULL;
  CUDA(cudaMalloc(&dout, 2 * (size_t)(tokens * H)));
  if (!rc)
    rc = mkx_moe_combine_run(&pl, &ys, ddest, dw, tokens, topk, H, dout,
                             MKX_GEMM_BF16, 0);
  CUDA(cudaDeviceSynchronize());
  int fails = rc != 0;
  int *dest = host_alloc(sizeof(int) * (size_t)N);
  CUDA(
      cudaMemcpy(dest, ddest, sizeof(int) * (size_t)N, cudaMemcpyDeviceToHost));
  /* expected rows: base[e] + rank of the slot among my slots of e */
  int *seen = host_zeroed((size_t)E, sizeof *seen);
  for (int64_t i = 0; i < N && fails < 4; ++i) {
    const int e = ids[i], want = base[e] + seen[e]++;
    if (dest[i] != want) {
      printf("# %s: slot %lld row %d, want %d\n", name, (long long)i, dest[i],
             want);
      fails++;
    }
  }
  for (int q = 0; q < P && fails < 4;
       ++q) { /* my rows carry the token, the rest untouched */
    const size_t rows = (size_t)owner_rows[q];
    uint16_t *a = host_alloc(2 * (rows + 1) * (size_t)lda);
    CUDA(cudaMemcpy(a, at.a[q], 2 * (rows + 1) * (size_t)lda,
                    cudaMemcpyDeviceToHost));
    char *mine = host_zeroed(rows + 1, 1);
    for (int64_t i = 0; i < N; ++i)
      if (ids[i] / ep == q) {
        mine[dest[i]] = 1;
        for (int64_t h = 0; h < lda; ++h)
          if (a[(size_t)dest[i] * (size_t)lda + (size_t)h] !=
              (h < H ? x[(i / topk) * H + h] : 0)) {
            printf("# %s: owner %d row %d col %lld\n", name, q, dest[i],
                   (long long)h);
            fails++;
            break;
          }
      }
    for (size_t rw = 0; rw <= rows; ++rw)
      if (!mine[rw] && a[rw * (size_t)lda] != 0xFFFF) {
        printf("# %s: owner %d row %zu written by the wrong source\n", name, q,
               rw);
        fails++;
        break;
      }
    free(a);
    free(mine);
  }
  uint16_t *out = host_alloc(2 * (size_t)(tokens * H));
  CUDA(cudaMemcpy(out, dout, 2 * (size_t)(tokens * H), cudaMemcpyDeviceToHost));
  for (int64_t t = 0; t < tokens && fails < 4; ++t)
    for (int64_t h = 0; h < H; ++h) {
      double ref = 0;
      for (int j = 0; j < topk; ++j) {
        const int64_t i = t * topk + j;
        ref += (double)wt[i] *
               yh[ids[i] / ep][(size_t)dest[i] * (size_t)H + (size_t)h];
      }
      const double got = mt_bf16_to_f32(out[t * H + h]);
      if (fabs(got - ref) > 1e-2 * fabs(ref) + 1e-2) {
        printf("# %s: combine token %lld col %lld: %g, want %g\n", name,
               (long long)t, (long long)h, got, ref);
        fails++;
        break;
      }
    }
  for (int q = 0; release && q < P && fails < 4; ++q) {
    int *flag = host_alloc(sizeof(int) * (size_t)E);
    CUDA(cudaMemcpy(flag, rel.ready[q], sizeof(int) * (size_t)E,
                    cudaMemcpyDeviceToHost));
    for (int j = 0; j < E; ++j)
      if (flag[j] != (j % P == me ? epoch : 0)) {
        printf("# %s: owner %d flag of expert %d, rank %d: %d\n", name, q,
               j / P, j % P, flag[j]);
        fails++;
        break;
      }
    free(flag);
    CUDA(cudaFree(rel.ready[q]));
  }
  if (release) {
    CUDA(cudaFree(rel.done));
    CUDA(cudaFree(rel.order));
    CUDA(cudaFree(rel.slot_at));
    CUDA(cudaFree((void *)rel.epoch));
  }
  CHECK(!fails, "%s", name);
  for (int q = 0; q < P; ++q) {
    CUDA(cudaFree(at.a[q]));
    CUDA(cudaFree((void *)ys.y[q]));
    free(yh[q]);
  }
  CUDA(cudaFree(dids));
  CUDA(cudaFree(dbase));
  CUDA(cudaFree(down));
  CUDA(cudaFree(drows));
  CUDA(cudaFree(ddest));
  CUDA(cudaFree(dstatus));
  CUDA(cudaFree(work));
  CUDA(cudaFree(dx));
  CUDA(cudaFree(dw));
  CUDA(cudaFree(dout));
  free(ids);
  free(cnt);
  free(base);
  free(owner_rows);
  free(x);
  free(wt);
  free(dest);
  free(seen);
  free(out);
}

/* ---- the verdict without a host wait ------------------------------------
 * P simulated ranks: random per-expert counts (route over every expert),
 * records stored into every rank's area, then each rank settles: its
 * offsets, row bases and gate against the host, and the input record
 * (host-mapped) naming the first bad rank, else the first truncated one;
 * a record already there is kept. */
static void *dev_fill_random(size_t n);

static int *dev_ints(const int *h, int64_t n) {
  return upload(h, sizeof(int) * (size_t)n);
}

static void settle_case(int P, int ep, int topk, int bad_rank, int trunc_rank,
                        int preset) {
  const char *name = g_case;
  const int E = P * ep;
  snprintf(g_case, sizeof g_case,
           "settle: %d ranks, %d experts each, bad rank %d, truncated rank "
           "%d%s",
           P, ep, bad_rank, trunc_rank, preset ? ", record already set" : "");
  int *cnt = host_alloc(sizeof(int) * (size_t)(P * E));
  for (int i = 0; i < P * E; ++i) cnt[i] = (int)(rnd_u64() % 40);
  int64_t *owner = host_zeroed((size_t)P, sizeof *owner);
  for (int q = 0; q < P; ++q)
    for (int e = 0; e < E; ++e) owner[e / ep] += cnt[q * E + e];
  int fails = 0;
  mkx_moe_records recs;
  int *down[MKX_MOE_MAX_RANKS], *dstat[MKX_MOE_MAX_RANKS];
  int32_t *dids[MKX_MOE_MAX_RANKS];
  const int64_t rec_ints = mkx_moe_records_ints(P, E);
  for (int q = 0; q < P; ++q) {
    CUDA(cudaMalloc((void **)&recs.rec[q], sizeof(int) * (size_t)rec_ints));
    CUDA(cudaMemset(recs.rec[q], 0xFF, sizeof(int) * (size_t)rec_ints));
    int *own = host_alloc(sizeof(int) * (size_t)(E + 1));
    own[0] = 0;
    for (int e = 0; e < E; ++e) own[e + 1] = own[e] + cnt[q * E + e];
    const int bad_slot = q == bad_rank ? 5 : MKX_MOE_NO_BAD_SLOT;
    int status[2] = {bad_slot, own[E]};
    int32_t ids[8] = {0, 1, 2, 3, 4, E + q, 0, 0}; /* slot 5: out of range */
    down[q] = dev_ints(own, E + 1);
    dstat[q] = dev_ints(status, 2);
    dids[q] = upload(ids, sizeof ids);
    free(own);
  }
  /* y_rows: room for what each owner receives, one less on trunc_rank */
  for (int q = 0; q < P && !fails; ++q)
    fails += mkx_moe_record_run(&recs, P, q, E, down[q], dstat[q], dids[q],
                                owner[q] - (q == trunc_rank), NULL, 0) != 0;
  int *err = NULL, *derr = NULL;
  CUDA(cudaHostAlloc((void **)&err, 16 * sizeof(int), cudaHostAllocMapped));
  CUDA(cudaHostGetDevicePointer((void **)&derr, err, 0));
  int *doff = NULL, *dbase = NULL, *dgate = NULL;
  CUDA(cudaMalloc((void **)&doff, sizeof(int) * (size_t)(ep + 1)));
  CUDA(cudaMalloc((void **)&dbase, sizeof(int) * (size_t)E));
  CUDA(cudaMalloc((void **)&dgate, sizeof(int)));
  const int want_gate = bad_rank >= 0     ? MKX_MOE_GATE_BAD
                        : trunc_rank >= 0 ? MKX_MOE_GATE_TRUNC
                                          : 0;
  for (int me = 0; me < P && fails < 4; ++me) {
    memset(err, 0, 16 * sizeof(int));
    if (preset) err[0] = 99;
    if (mkx_moe_settle_run(recs.rec[me], P, me, E, topk, doff, dbase, dgate,
                           derr, 0)) {
      fails++;
      break;
    }
    CUDA(cudaDeviceSynchronize());
    int *off = host_alloc(sizeof(int) * (size_t)(ep + 1));
    int *base = host_alloc(sizeof(int) * (size_t)E), gate = -1;
    CUDA(cudaMemcpy(off, doff, sizeof(int) * (size_t)(ep + 1),
                    cudaMemcpyDeviceToHost));
    CUDA(cudaMemcpy(base, dbase, sizeof(int) * (size_t)E,
                    cudaMemcpyDeviceToHost));
    CUDA(cudaMemcpy(&gate, dgate, sizeof gate, cudaMemcpyDeviceToHost));
    int run = 0;
    for (int le = 0; le <= ep && fails < 4; ++le) {
      if (off[le] != run) {
        printf("# %s: rank %d offsets[%d] = %d, want %d\n", name, me, le,
               off[le], run);
        fails++;
      }
      if (le < ep)
        for (int q = 0; q < P; ++q) run += cnt[q * E + me * ep + le];
    }
    for (int e = 0; e < E && fails < 4; ++e) {
      int want = 0;
      for (int f = e / ep * ep; f < e; ++f)
        for (int q = 0; q < P; ++q) want += cnt[q * E + f];
      for (int q = 0; q < me; ++q) want += cnt[q * E + e];
      if (base[e] != want) {
        printf("# %s: rank %d base[%d] = %d, want %d\n", name, me, e, base[e],
               want);
        fails++;
      }
    }
    int rec_ok;
    if (preset)
      rec_ok = err[0] == 99;
    else if (bad_rank >= 0)
      rec_ok = err[0] == MKX_MOE_ERR_ID && err[1] == bad_rank &&
               err[2] == 5 / topk && err[3] == 5 % topk &&
               err[4] == E + bad_rank && err[5] == 0;
    else if (trunc_rank >= 0)
      rec_ok = err[0] == MKX_MOE_ERR_TRUNC && err[1] == trunc_rank &&
               err[2] == (int)owner[trunc_rank] &&
               err[3] == (int)owner[trunc_rank] - 1;
    else
      rec_ok = err[0] == 0;
    if (gate != want_gate || !rec_ok) {
      printf("# %s: rank %d gate %d (want %d), record %d %d %d %d %d %d\n",
             name, me, gate, want_gate, err[0], err[1], err[2], err[3], err[4],
             err[5]);
      fails++;
    }
    free(off);
    free(base);
  }
  CHECK(!fails, "%s", name);
  for (int q = 0; q < P; ++q) {
    CUDA(cudaFree(recs.rec[q]));
    CUDA(cudaFree(down[q]));
    CUDA(cudaFree(dstat[q]));
    CUDA(cudaFree(dids[q]));
  }
  CUDA(cudaFree(doff));
  CUDA(cudaFree(dbase));
  CUDA(cudaFree(dgate));
  CUDA(cudaFreeHost(err));
  free(cnt);
  free(owner);
}

/* 1 (after a message) if any byte of the device buffer is no longer the
 * 0x7F it was set to. */
static int written(const void *dev, size_t bytes, const char *name,
                   const char *what) {
  unsigned char *h = host_alloc(bytes);
  CUDA(cudaMemcpy(h, dev, bytes, cudaMemcpyDeviceToHost));
  size_t i = 0;
  while (i < bytes && h[i] == 0x7F) ++i;
  free(h);
  if (i == bytes) return 0;
  printf("# %s: %s written at byte %zu with the gate set\n", name, what, i);
  return 1;
}

/* The verdict (one rank) on an fp8 scales' scan (fused/fused.h): array 1's
 * blocks found indices 17 and 9 (its first bad: 9, a NaN), with a bad id
 * in the status too; the scale goes first: gate bad, a MKX_MOE_ERR_SCALE
 * record naming rank 3, array 1, index 9 and the NaN's bits.  Then the
 * same scan clean: gate 0, no record. */
static int scale_verdict(const int32_t *dids, int *dgate, int *err, int *derr) {
  int fails = 0;
  long long *first = NULL, *dfirst = NULL;
  const size_t nfirst = (size_t)MKX_MOE_SCAN_ARRAYS * MKX_FUSED_SCAN_BLOCKS;
  CUDA(cudaHostAlloc((void **)&first, nfirst * sizeof *first,
                     cudaHostAllocMapped));
  CUDA(cudaHostGetDevicePointer((void **)&dfirst, first, 0));
  float vals[20];
  for (int i = 0; i < 20; ++i) vals[i] = 1.0f + (float)i;
  vals[9] = NAN, vals[17] = 0.0f;
  float *dvals = upload(vals, sizeof vals);
  int nan_bits;
  memcpy(&nan_bits, &vals[9], sizeof nan_bits);
  mkx_moe_scan scan = {dfirst, {dvals, dvals, dvals}, MKX_MOE_SCAN_ARRAYS};
  for (int clean = 0; clean < 2; ++clean) {
    for (size_t i = 0; i < nfirst; ++i) first[i] = -1;
    if (!clean) {
      first[MKX_FUSED_SCAN_BLOCKS + 5] = 17;
      first[MKX_FUSED_SCAN_BLOCKS + 20] = 9;
    }
    memset(err, 0, 16 * sizeof(int));
    int st[2] = {3, 3}, gate = -1; /* slot 3: a bad id */
    if (clean) st[0] = MKX_MOE_NO_BAD_SLOT;
    int *dst = dev_ints(st, 2);
    fails +=
        mkx_moe_verdict_run(dst, dids, 2, 4, 4, 3, &scan, dgate, derr, 0) != 0;
    CUDA(cudaMemcpy(&gate, dgate, sizeof gate, cudaMemcpyDeviceToHost));
    const int ok = clean ? gate == 0 && err[0] == 0
                         : gate == MKX_MOE_GATE_BAD &&
                               err[0] == MKX_MOE_ERR_SCALE && err[1] == 3 &&
                               err[2] == 1 && err[3] == 0 && err[4] == 9 &&
                               err[5] == nan_bits;
    if (!ok) {
      printf("# scale verdict%s: gate %d, record %d %d %d %d %d %#x\n",
             clean ? " (clean)" : "", gate, err[0], err[1], err[2], err[3],
             err[4], (unsigned)err[5]);
      fails++;
    }
    CUDA(cudaFree(dst));
  }
  CUDA(cudaFree(dvals));
  CUDA(cudaFreeHost(first));
  return fails;
}

/* One rank's verdict, and the gate stopping the grouped GEMM, the gather,
 * the combine and the counts (truncation: counts only), nothing written. */
static void gate_case(void) {
  const char *name =
      "verdict and gate: one rank; GEMM, gather, combine, "
      "counts and origins stopped";
  snprintf(g_case, sizeof g_case, "%s", name);
  int fails = 0;
  int *err = NULL, *derr = NULL, *dgate = NULL;
  CUDA(cudaHostAlloc((void **)&err, 16 * sizeof(int), cudaHostAllocMapped));
  CUDA(cudaHostGetDevicePointer((void **)&derr, err, 0));
  CUDA(cudaMalloc((void **)&dgate, sizeof(int)));
  const int32_t ids[4] = {0, 1, 1, 1}; /* slot 3 repeats expert 1 */
  int32_t *dids = upload(ids, sizeof ids);
  /* {status, y_rows, want gate, want record} */
  struct {
    int bad, total;
    int64_t y_rows;
    int gate, code, a, b, c;
  } v[4] = {{MKX_MOE_NO_BAD_SLOT, 4, 4, 0, 0, 0, 0, 0},
            {MKX_MOE_NO_BAD_SLOT, 4, -1, 0, 0, 0, 0, 0},
            {MKX_MOE_NO_BAD_SLOT, 5, 4, MKX_MOE_GATE_TRUNC, MKX_MOE_ERR_TRUNC,
             3, 5, 4},
            {3, 3, 4, MKX_MOE_GATE_BAD, MKX_MOE_ERR_ID, 3, 1, 1}};
  for (int k = 0; k < 4; ++k) {
    memset(err, 0, 16 * sizeof(int));
    int st[2] = {v[k].bad, v[k].total}, gate = -1;
    int *dst = dev_ints(st, 2);
    fails += mkx_moe_verdict_run(dst, dids, 2, 4, v[k].y_rows, 3, NULL, dgate,
                                 derr, 0) != 0;
    CUDA(cudaMemcpy(&gate, dgate, sizeof gate, cudaMemcpyDeviceToHost));
    const int rec_ok =
        err[0] == v[k].code &&
        (!v[k].code ||
         (err[1] == v[k].a && err[2] == v[k].b && err[3] == v[k].c)) &&
        (v[k].code != MKX_MOE_ERR_ID || (err[4] == 1 && err[5] == 1));
    if (gate != v[k].gate || !rec_ok) {
      printf("# %s: verdict %d: gate %d, record %d %d %d %d %d %d\n", name, k,
             gate, err[0], err[1], err[2], err[3], err[4], err[5]);
      fails++;
    }
    CUDA(cudaFree(dst));
  }
  fails += scale_verdict(dids, dgate, err, derr);
  /* gate set: a GEMM of 2 experts x 64 rows (both kernels), the gather,
   * the combine and the origin copy leave their poisoned outputs as they
   * were */
  const int64_t rows = 128, k = 64, n = 64;
  const int off[3] = {0, 64, 128}, one = MKX_MOE_GATE_BAD;
  int *doffs = dev_ints(off, 3), *dwork = NULL;
  CUDA(cudaMemcpy(dgate, &one, sizeof one, cudaMemcpyHostToDevice));
  CUDA(cudaMalloc((void **)&dwork, sizeof(int) * 8));
  void *da = dev_fill_random((size_t)(rows * k)),
       *dw = dev_fill_random((size_t)(2 * k * n)), *dc = NULL;
  CUDA(cudaMalloc(&dc, 2 * (size_t)(rows * n)));
  CUDA(cudaMemset(dc, 0x7F, 2 * (size_t)(rows * n)));
  mkx_moe_gemm_desc g = {2,  k, n,  da,    k,    rows,          doffs,
                         dw, n, dc, n,     NULL, MKX_GEMM_BF16, MKX_GEMM_BF16,
                         0,  0, 0,  dwork, 0,    dgate};
  for (g.kernel = MKX_MOE_GEMM_ROWS; g.kernel <= MKX_MOE_GEMM_SWAP; g.kernel++)
    fails += mkx_moe_gemm_run(&g, 0) != 0;
  int64_t counts[2] = {-5, -5};
  int64_t *dcounts = upload(counts, sizeof counts);
  fails += mkx_moe_counts_run(doffs, 2, dcounts, dgate, 0) != 0;
  int rows_of_slot[4] = {0, 1, 2, 3};
  int *drs = dev_ints(rows_of_slot, 4);
  const float w4[4] = {1, 1, 1, 1};
  float *dw4 = upload(w4, sizeof w4);
  const mkx_moe_place pl = {NULL, NULL, NULL, NULL, 1, 1, dgate};
  mkx_moe_rows_at at;
  memset(&at, 0, sizeof at);
  at.a[0] = dc;
  at.lda = n;
  fails += mkx_moe_gather_run(da, 2, 2, n, 2, drs, dw4, 0, &pl, &at, NULL, NULL,
                              0) != 0;
  mkx_moe_outs_at ys;
  memset(&ys, 0, sizeof ys);
  float *dy = NULL;
  CUDA(cudaMalloc((void **)&dy, sizeof(float) * 4 * (size_t)n));
  ys.y[0] = dy;
  ys.ldy = n;
  void *dout = NULL;
  CUDA(cudaMalloc(&dout, 2 * 2 * (size_t)n));
  CUDA(cudaMemset(dout, 0x7F, 2 * 2 * (size_t)n));
  fails += mkx_moe_combine_run(&pl, &ys, drs, dw4, 2, 2, n, dout, MKX_GEMM_BF16,
                               0) != 0;
  int32_t *dorig = NULL;
  CUDA(cudaMalloc((void **)&dorig, sizeof(int32_t) * 3 * 128));
  CUDA(cudaMemset(dorig, 0x7F, sizeof(int32_t) * 3 * 128));
  int32_t *dsrc = NULL; /* what the copy would take: 128 rows' origins */
  CUDA(cudaMalloc((void **)&dsrc, sizeof(int32_t) * 3 * 128));
  CUDA(cudaMemset(dsrc, 0, sizeof(int32_t) * 3 * 128));
  fails += mkx_moe_origin_copy_run(dsrc, dorig, doffs, 2, dgate, 0) != 0;
  CUDA(cudaDeviceSynchronize());
  fails += written(dc, 2 * (size_t)(rows * n), name, "C (GEMM, gather)");
  fails += written(dout, 2 * 2 * (size_t)n, name, "the combine's out");
  fails += written(dorig, sizeof(int32_t) * 3 * 128, name, "the origins");
  CUDA(cudaMemcpy(counts, dcounts, sizeof counts, cudaMemcpyDeviceToHost));
  if (counts[0] != -5 || counts[1] != -5) {
    printf("# %s: counts written on a bad run\n", name);
    fails++;
  }
  const int trunc = MKX_MOE_GATE_TRUNC;
  CUDA(cudaMemcpy(dgate, &trunc, sizeof trunc, cudaMemcpyHostToDevice));
  fails += mkx_moe_counts_run(doffs, 2, dcounts, dgate, 0) != 0;
  CUDA(cudaMemcpy(counts, dcounts, sizeof counts, cudaMemcpyDeviceToHost));
  if (counts[0] != 64 || counts[1] != 64) {
    printf("# %s: counts on a truncated run %lld %lld, want 64 64\n", name,
           (long long)counts[0], (long long)counts[1]);
    fails++;
  }
  CHECK(!fails, "%s", name);
  CUDA(cudaFree(dids));
  CUDA(cudaFree(doffs));
  CUDA(cudaFree(dwork));
  CUDA(cudaFree(da));
  CUDA(cudaFree(dw));
  CUDA(cudaFree(dc));
  CUDA(cudaFree(dcounts));
  CUDA(cudaFree(drs));
  CUDA(cudaFree(dw4));
  CUDA(cudaFree(dy));
  CUDA(cudaFree(dout));
  CUDA(cudaFree(dorig));
  CUDA(cudaFree(dsrc));
  CUDA(cudaFree(dgate));
  CUDA(cudaFreeHost(err));
}

static void route_cases(void) {
  route_case(1, 1, 1, 0, 1, 0);
  route_case(0, 2, 8, 0, 8, 0);
  route_case(4096, 8, 256, 0, 256, 0);
  route_case(4096, 2, 8, 0, 8, 0);
  route_case(3000, 4, 64, 16, 16, 0); /* one rank of four */
  route_case(20000, 8, 9000, 0, 8192, 0);
  route_case(1500, 3, 12, 0, 12, 1);
  route_case(1500, 3, 12, 0, 6, 2);
  for (int release = 0; release < 2; ++release) {
    place_case(500, 3, 3, 1, 4, release);
    place_case(2000, 8, 2, 0, 32, release);
    place_case(64, 2, 8, 7, 2, release);
    place_case(3, 1, 4, 2, 8, release); /* most experts without rows */
  }
  settle_case(3, 5, 3, -1, -1, 0);
  settle_case(8, 1024, 8, -1, -1, 0);
  settle_case(4, 7, 2, 2, 1, 0);
  settle_case(2, 3, 4, -1, 1, 0);
  settle_case(2, 3, 4, 0, -1, 1);
  gate_case();
}

/* ---- benchmark --------------------------------------------------------- */

/* n random 16-bit values: a 32 MB random block repeated (random values
 * draw the power the comparison runs at; constant ones run faster). */
static void *dev_fill_random(size_t n) {
  const size_t blk = (size_t)16 << 20;
  uint16_t *h = host_alloc(2 * blk);
  for (size_t i = 0; i < blk; ++i) h[i] = to16(rnd(), 0);
  void *d = NULL;
  CUDA(cudaMalloc(&d, 2 * n));
  for (size_t at = 0; at < n; at += blk) {
    const size_t m = n - at < blk ? n - at : blk;
    CUDA(cudaMemcpy((uint16_t *)d + at, h, 2 * m, cudaMemcpyHostToDevice));
  }
  free(h);
  return d;
}

/* Row counts of `tokens` tokens routed uniformly to topk distinct experts. */
static void route(int tokens, int topk, int E, int *off) {
  int32_t *ids = random_ids(tokens, topk, E);
  int *cnt = host_zeroed((size_t)E, sizeof(int));
  for (int64_t i = 0; i < (int64_t)tokens * topk; ++i) cnt[ids[i]]++;
  off[0] = 0;
  for (int e = 0; e < E; ++e) off[e + 1] = off[e] + cnt[e];
  free(cnt);
  free(ids);
}

static int run_once(const void *d) { return mkx_moe_gemm_run(d, 0); }

/* Median time (ms) of `reps` runs of d after two warm-ups; 0 on failure. */
static float time_runs(const mkx_moe_gemm_desc *d, int reps) {
  const float ms = mt_gpu_median_ms(run_once, d, reps);
  if (ms < 0) {
    CHECK(0, "%s: bench run failed", g_case);
    return 0;
  }
  return ms;
}

/* --profile: three plain runs for a profiler to pick from (no timing). */
static float measure(const mkx_moe_gemm_desc *d, int profile) {
  if (!profile) return time_runs(d, 10);
  for (int i = 0; i < 3; ++i)
    if (mkx_moe_gemm_run(d, 0) != 0) {
      CHECK(0, "%s: profile run failed", g_case);
      break;
    }
  CUDA(cudaDeviceSynchronize());
  return 0;
}

/* n fp32 scales of one value (device). */
static float *dev_scales(size_t n, float v) {
  float *h = host_alloc(sizeof(float) * n);
  for (size_t i = 0; i < n; ++i) h[i] = v;
  float *d = upload(h, sizeof(float) * n);
  free(h);
  return d;
}

/* The same expert GEMM in fp8 as the layer's GPU path runs it (e4m3, the
 * swapped kernel, W stored K-major [E][n][k], block scales of A's rows
 * and W's 128 x 128 blocks; the bytes of d's random 16-bit A and W read as
 * e4m3, NaN among them: the timing does not depend on the values).  Its
 * time in ms. */
static float time_fp8(const mkx_moe_gemm_desc *d16, int profile) {
  mkx_moe_gemm_desc d = *d16;
  const int64_t wrows = d.swiglu ? 2 * d.n : d.n, kb = (d.k + 127) / 128,
                nb = (wrows + 127) / 128;
  d.ab_type = MKX_GEMM_E4M3;
  d.kernel = MKX_MOE_GEMM_SWAP;
  d.lda = d.k;
  d.ldw = d.k;
  d.up_col = d.swiglu ? d.n : 0;
  float *sa = dev_scales((size_t)(d.a_rows * kb), 1.0f / 64),
        *sw = dev_scales((size_t)(d.experts * nb * kb), 1.0f / 64);
  d.fp8 = (mkx_moe_fp8_scales){MKX_GEMM_SCALE_BLOCK,
                               MKX_GEMM_SCALE_BLOCK,
                               sa,
                               sw,
                               kb,
                               1,
                               nb * kb,
                               kb,
                               1};
  const float ms = measure(&d, profile);
  CUDA(cudaFree(sa));
  CUDA(cudaFree(sw));
  return ms;
}

/* The kernels a bench times: the rows kernel at 128 and 256 W columns per
 * tile, and the swapped kernel. */
static const struct {
  int kernel, block_n;
} variants[] = {
    {MKX_MOE_GEMM_ROWS, 128}, {MKX_MOE_GEMM_ROWS, 256}, {MKX_MOE_GEMM_SWAP, 0}};
enum { NV = 3 };

/* The timing under way as g_case: layer `shape`'s W1 or W2 (w), variant v. */
static void name_timing(const char *shape, int w, int v) {
  snprintf(g_case, sizeof g_case, "bench %s W%d, %s kernel, block_n %d", shape,
           w, kernel_name(variants[v].kernel), variants[v].block_n);
}

/* The shapes' expert GEMMs under each variant; profile: the
 * DeepSeek-like shape alone, W1 and W2 under the swapped kernel, three runs
 * each (ncu --kernel-name regex:mkx_moe --launch-skip 2 --launch-count 2
 * takes the third W1 and the first W2). */
static void bench(int profile) {
  /* name, tokens, topk, experts, hidden, ffn */
  static const struct {
    const char *name;
    int tokens, topk, E, hidden, ffn;
  } shapes[] = {{"DeepSeek-V3-like", 4096, 8, 256, 7168, 2048},
                {"Mixtral-like", 4096, 2, 8, 4096, 14336},
                {"Qwen3-30B-A3B-like", 4096, 8, 128, 2048, 768},
                {"DeepSeek-V2-Lite-like", 4096, 6, 64, 2048, 1408}};
  printf(
      "# grouped expert GEMMs, bf16, random inputs and routing: TFLOP/s (ms) "
      "of W1 with SwiGLU, of W2; "
      "each by the rows kernel at 128 / 256 W columns per tile, then the "
      "swapped kernel; then the swapped kernel in e4m3 with 128 x 128 block "
      "scales (the fp8 layer's GEMMs)\n");
  for (int s = 0; s < (profile ? 1 : 4); ++s) {
    const int E = shapes[s].E, H = shapes[s].hidden, F = shapes[s].ffn;
    snprintf(g_case, sizeof g_case, "bench %s", shapes[s].name);
    int *off = host_alloc(sizeof(int) * (size_t)(E + 1));
    route(shapes[s].tokens, shapes[s].topk, E, off);
    const int64_t rows = off[E];
    int *doff = upload(off, sizeof(int) * (size_t)(E + 1)), *work = NULL;
    CUDA(cudaMalloc((void **)&work,
                    sizeof(int) * (size_t)mkx_moe_gemm_work_ints(E)));
    void *x = dev_fill_random((size_t)rows * H);
    void *w1 = dev_fill_random((size_t)E * H * 2 * F);
    void *act = dev_fill_random((size_t)rows * F);
    void *y = NULL;
    CUDA(cudaMalloc(&y, 4 * (size_t)rows * H));
    double tf[2][NV + 1] = {{0}}, msv[2][NV + 1] = {{0}};
    const int v0 = profile ? NV - 1 : 0;
    for (int v = v0; v < NV; ++v) { /* W1 */
      mkx_moe_gemm_desc d = {E,
                             H,
                             F,
                             x,
                             H,
                             rows,
                             doff,
                             w1,
                             2 * F,
                             act,
                             F,
                             NULL,
                             MKX_GEMM_BF16,
                             MKX_GEMM_BF16,
                             1,
                             0,
                             variants[v].block_n,
                             work};
      d.kernel = variants[v].kernel;
      name_timing(shapes[s].name, 1, v);
      const float ms = measure(&d, profile);
      msv[0][v] = ms;
      if (ms > 0) tf[0][v] = 2.0 * rows * H * 2.0 * F / (ms * 1e-3) / 1e12;
      if (v == NV - 1) {
        snprintf(g_case, sizeof g_case, "bench %s W1, e4m3", shapes[s].name);
        const float ms8 = time_fp8(&d, profile);
        msv[0][NV] = ms8;
        if (ms8 > 0) tf[0][NV] = 2.0 * rows * H * 2.0 * F / (ms8 * 1e-3) / 1e12;
      }
    }
    CUDA(cudaFree(w1));
    void *w2 = dev_fill_random((size_t)E * F * H);
    for (int v = v0; v < NV; ++v) { /* W2, fp32 out */
      mkx_moe_gemm_desc d = {E,
                             F,
                             H,
                             act,
                             F,
                             rows,
                             doff,
                             w2,
                             H,
                             y,
                             H,
                             NULL,
                             MKX_GEMM_BF16,
                             MKX_GEMM_FP32,
                             0,
                             0,
                             variants[v].block_n,
                             work};
      d.kernel = variants[v].kernel;
      name_timing(shapes[s].name, 2, v);
      const float ms = measure(&d, profile);
      msv[1][v] = ms;
      if (ms > 0) tf[1][v] = 2.0 * rows * F * H / (ms * 1e-3) / 1e12;
      if (v == NV - 1) {
        snprintf(g_case, sizeof g_case, "bench %s W2, e4m3", shapes[s].name);
        const float ms8 = time_fp8(&d, profile);
        msv[1][NV] = ms8;
        if (ms8 > 0) tf[1][NV] = 2.0 * rows * F * H / (ms8 * 1e-3) / 1e12;
      }
    }
    if (!profile)
      for (int g = 0; g < 2; ++g)
        printf(
            "# %s (%lld rows, %d experts, hidden %d, ffn %d): W%d %.0f "
            "(%.3f) / %.0f (%.3f) / %.0f (%.3f); e4m3 %.0f (%.3f)\n",
            shapes[s].name, (long long)rows, E, H, F, g + 1, tf[g][0],
            msv[g][0], tf[g][1], msv[g][1], tf[g][2], msv[g][2], tf[g][NV],
            msv[g][NV]);
    CUDA(cudaFree(w2));
    CUDA(cudaFree(x));
    CUDA(cudaFree(act));
    CUDA(cudaFree(y));
    CUDA(cudaFree(doff));
    CUDA(cudaFree(work));
    free(off);
  }
}

int main(int argc, char **argv) {
  if (!mt_sm90_here()) return CHECK_SKIP;
  g_rng ^= (uint64_t)time(NULL);
  printf("# seed %llu\n", (unsigned long long)g_rng);
  check_set_note("seed %llu", (unsigned long long)g_rng);
  check_show_passes(1);
  const int profile = argc > 1 && !strcmp(argv[1], "--profile");
  const int only = profile || (argc > 1 && !strcmp(argv[1], "--bench-only"));
  if (!only)
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i)
      for (int kernel = MKX_MOE_GEMM_ROWS; kernel <= MKX_MOE_GEMM_SWAP;
           ++kernel)
        run_case(&cases[i], kernel);
  if (!only) route_cases();
  if (only || (argc > 1 && !strcmp(argv[1], "--bench"))) bench(profile);
  return engine_finish();
}
