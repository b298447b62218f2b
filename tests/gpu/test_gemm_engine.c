/*
 * GPU test of the MKX Hopper GEMM engine (kernels/gemm): compares mkx_gemm_run against cuBLAS
 * (cublasGemmEx, fp32 output, CUBLAS_COMPUTE_32F) on fresh random inputs for every dtype/layout
 * combination over many shapes, with C poisoned (0xFF bytes = NaN) and surrounded by a guard
 * band.  One check (tests/common/check.h) per case.  Exit 77 (skip) without a
 * usable GPU, 1 on any failure.
 */
#define _POSIX_C_SOURCE 200809L
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "engine_check.h"
#include "gemm_engine.h"
#include "num16.h"

static uint64_t g_rng;
static inline uint32_t rnd32(void) {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return (uint32_t)(g_rng >> 16);
}
static inline float rndf(void) {
  return (float)(rnd32() & 0xffffff) * (2.0f / 16777216.0f) - 1.0f;
}

/* rows x cols matrix with leading dimension ld (elements), random in [-1, 1]; padding random too */
static void fill16(uint16_t *h, int64_t rows, int64_t ld, int fp16) {
  for (int64_t i = 0; i < rows * ld; ++i)
    h[i] = fp16 ? mt_f32_to_f16(rndf()) : mt_f32_to_bf16(rndf());
}

static const char *tname(int t) {
  return t == MKX_GEMM_BF16 ? "bf16" : t == MKX_GEMM_FP16 ? "fp16" : "fp32";
}

typedef struct {
  int64_t m, n, k;
  int ab, ct, bkm;
  int64_t pad_a, pad_b, pad_c; /* extra elements per row (multiples of 8) */
  int tile, ctas;
} tcase;

static cublasHandle_t g_blas;
static const int64_t kGuard = 4096; /* bytes of guard band on each side of C */

static int engine_finish(void) { return check_done("test_gemm_engine"); }

/* A failing cuBLAS call ends the test as a failing CUDA call does. */
#define BLAS(x)                                                                \
  do {                                                                         \
    const cublasStatus_t s_ = (x);                                             \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                         \
      CHECK(0, "%s: %s: cublas status %d", g_case, #x, (int)s_);               \
      exit(engine_finish());                                                   \
    }                                                                          \
  } while (0)

/* Compare C (inside a guard band of kGuard bytes each side, poisoned 0xFF) with the fp32
 * reference: the case's check. */
static void compare_c(const tcase *tc, const mkx_gemm_desc *d, void *dCbuf,
                      size_t cbytes, const float *dRef) {
  const int64_t m = tc->m, n = tc->n;
  const int64_t ldc = d->ldc, lda = d->lda, ldb = d->ldb;
  const int esz = tc->ct == MKX_GEMM_FP32 ? 4 : 2;
  const size_t cbuf_bytes = cbytes + 2 * kGuard;
  {
    unsigned char *hC = (unsigned char *)host_alloc(cbuf_bytes);
    float *hR = (float *)host_alloc((size_t)(m * n) * 4 + 4);
    CUDA(cudaMemcpy(hC, dCbuf, cbuf_bytes, cudaMemcpyDeviceToHost));
    CUDA(cudaMemcpy(hR, dRef, (size_t)(m * n) * 4, cudaMemcpyDeviceToHost));
    int64_t guard_bad = 0, nan_bad = 0;
    for (int64_t i = 0; i < kGuard; ++i) {
      guard_bad += hC[i] != 0xFF;
      guard_bad += hC[kGuard + cbytes + i] != 0xFF;
    }
    const unsigned char *cp = hC + kGuard;
    double num = 0, den = 0, maxerr = 0, maxref = 0;
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t c = n; c < ldc; ++c)
        for (int b = 0; b < esz; ++b)
          guard_bad += cp[(r * ldc + c) * esz + b] != 0xFF;
      for (int64_t c = 0; c < n; ++c) {
        float v;
        const unsigned char *e = cp + (r * ldc + c) * esz;
        if (esz == 4)
          memcpy(&v, e, 4);
        else {
          uint16_t h;
          memcpy(&h, e, 2);
          v = tc->ct == MKX_GEMM_BF16 ? mt_bf16_to_f32(h) : mt_f16_to_f32(h);
        }
        const double ref = hR[r * n + c];
        if (!isfinite(v)) {
          nan_bad++;
          continue;
        }
        const double df = (double)v - ref;
        num += df * df;
        den += ref * ref;
        if (fabs(df) > maxerr) maxerr = fabs(df);
        if (fabs(ref) > maxref) maxref = fabs(ref);
      }
    }
    const double rel = den > 0 ? sqrt(num / den) : sqrt(num);
    const double tol = esz == 4 ? 2e-3 : 1e-2;
    const double maxtol =
        esz == 4 ? 2e-3 * maxref + 1e-5 : 2e-2 * maxref + 1e-3;
    CHECK(!guard_bad && !nan_bad && rel < tol && maxerr <= maxtol &&
              isfinite(rel),
          "%s lda=%lld ldb=%lld ldc=%lld tile=%d(%s) ctas=%d rel=%.3e "
          "maxabs=%.3e (maxref %.3e) nan=%lld guard=%lld",
          g_case, (long long)lda, (long long)ldb, (long long)ldc, tc->tile,
          mkx_gemm_pick_tile(d, 132) == MKX_GEMM_TILE_128x256 ? "128x256"
                                                              : "128x128",
          tc->ctas, rel, maxerr, maxref, (long long)nan_bad,
          (long long)guard_bad);
    free(hC);
    free(hR);
  }
}

/* The case's name in its lines: the engine's view of the problem. */
static void name_case(const tcase *tc, const char *label) {
  snprintf(g_case, sizeof g_case,
           "%sm=%-6lld n=%-6lld k=%-6lld ab=%s c=%s B=%s", label,
           (long long)tc->m, (long long)tc->n, (long long)tc->k, tname(tc->ab),
           tname(tc->ct), tc->bkm ? "kmaj" : "nmaj");
}

static void run_case(const tcase *tc) {
  const int64_t m = tc->m, n = tc->n, k = tc->k;
  const int64_t lda = k + tc->pad_a, ldc = n + tc->pad_c;
  const int64_t ldb = (tc->bkm ? k : n) + tc->pad_b;
  const int64_t brows = tc->bkm ? n : k;
  const int fp16 = tc->ab == MKX_GEMM_FP16;
  const int esz = tc->ct == MKX_GEMM_FP32 ? 4 : 2;
  name_case(tc, "");

  uint16_t *hA = (uint16_t *)host_alloc((size_t)(m * lda) * 2 + 2);
  uint16_t *hB = (uint16_t *)host_alloc((size_t)(brows * ldb) * 2 + 2);
  fill16(hA, m, lda, fp16);
  fill16(hB, brows, ldb, fp16);

  void *dA, *dB, *dCbuf;
  float *dRef;
  const size_t cbytes = (size_t)(m * ldc) * esz;
  const size_t cbuf_bytes = cbytes + 2 * kGuard;
  CUDA(cudaMalloc(&dA, (size_t)(m * lda) * 2 + 16));
  CUDA(cudaMalloc(&dB, (size_t)(brows * ldb) * 2 + 16));
  CUDA(cudaMalloc(&dCbuf, cbuf_bytes));
  CUDA(cudaMalloc((void **)&dRef, (size_t)(m * n) * 4 + 16));
  CUDA(cudaMemcpy(dA, hA, (size_t)(m * lda) * 2, cudaMemcpyHostToDevice));
  CUDA(cudaMemcpy(dB, hB, (size_t)(brows * ldb) * 2, cudaMemcpyHostToDevice));
  CUDA(cudaMemset(dCbuf, 0xFF, cbuf_bytes));
  CUDA(cudaMemset(dRef, 0xFF, (size_t)(m * n) * 4));
  void *dC = (char *)dCbuf + kGuard;

  /* reference: row-major C = A B  <=>  column-major C^T (n x m) = op(B') A' */
  const float one = 1.0f, zero = 0.0f;
  cudaDataType_t dt = fp16 ? CUDA_R_16F : CUDA_R_16BF;
  BLAS(cublasGemmEx(g_blas, tc->bkm ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N,
                    (int)n, (int)m, (int)k, &one, dB, dt, (int)ldb, dA, dt,
                    (int)lda, &zero, dRef, CUDA_R_32F, (int)n,
                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  CUDA(cudaGetLastError());

  mkx_gemm_desc d;
  memset(&d, 0, sizeof d);
  d.m = m;
  d.n = n;
  d.k = k;
  d.a = dA;
  d.lda = lda;
  d.b = dB;
  d.ldb = ldb;
  d.b_kmajor = tc->bkm;
  d.c = dC;
  d.ldc = ldc;
  d.ab_type = tc->ab;
  d.c_type = tc->ct;
  d.num_ctas = tc->ctas;
  d.tile_override = tc->tile;
  const char *why = NULL;
  if (!mkx_gemm_supported(&d, &why)) {
    CHECK(0, "%s: unsupported: %s", g_case, why);
    goto out;
  }
  int rc = mkx_gemm_run(&d, 0);
  if (rc != 0) {
    CHECK(0, "%s: mkx_gemm_run returned %d", g_case, rc);
    goto out;
  }
  CUDA(cudaGetLastError());
  CUDA(cudaDeviceSynchronize());

  compare_c(tc, &d, dCbuf, cbytes, dRef);
out:
  CUDA(cudaFree(dA));
  CUDA(cudaFree(dB));
  CUDA(cudaFree(dCbuf));
  CUDA(cudaFree(dRef));
  free(hA);
  free(hB);
}

/* Gated variant: A starts poisoned (NaN) on the device; while the GEMM runs on one stream, a
 * second stream copies A in 128-row blocks from pinned host memory (copy engine), each followed
 * by its ready flag, in the reverse of the GEMM's tile-row order.  A tile that loaded A before its
 * flag would show NaN. */
static void run_gated_case(int64_t m, int64_t n, int64_t k, int first_tile_m,
                           int tile, int ct) {
  tcase tc;
  memset(&tc, 0, sizeof tc);
  tc.m = m;
  tc.n = n;
  tc.k = k;
  tc.ab = MKX_GEMM_BF16;
  tc.ct = ct;
  tc.bkm = 1;
  tc.tile = tile;
  name_case(&tc, "gated ");
  const int64_t lda = k, ldb = k, ldc = n;
  const int esz = ct == MKX_GEMM_FP32 ? 4 : 2;
  const int tiles_m = (int)((m + 127) / 128);
  uint16_t *hA, *hB;
  int *hOnes;
  CUDA(cudaMallocHost((void **)&hA, (size_t)(m * lda) * 2));
  CUDA(cudaMallocHost((void **)&hOnes, (size_t)tiles_m * sizeof(int)));
  hB = (uint16_t *)host_alloc((size_t)(n * ldb) * 2);
  fill16(hA, m, lda, 0);
  fill16(hB, n, ldb, 0);
  for (int i = 0; i < tiles_m; ++i) hOnes[i] = 1;
  void *dA, *dB, *dCbuf;
  float *dRef;
  int *dFlags;
  const size_t cbytes = (size_t)(m * ldc) * esz;
  CUDA(cudaMalloc(&dA, (size_t)(m * lda) * 2));
  CUDA(cudaMalloc(&dB, (size_t)(n * ldb) * 2));
  CUDA(cudaMalloc(&dCbuf, cbytes + 2 * kGuard));
  CUDA(cudaMalloc((void **)&dRef, (size_t)(m * n) * 4));
  CUDA(cudaMalloc((void **)&dFlags, (size_t)tiles_m * sizeof(int)));
  CUDA(cudaMemset(dA, 0xFF, (size_t)(m * lda) * 2));
  CUDA(cudaMemset(dFlags, 0, (size_t)tiles_m * sizeof(int)));
  CUDA(cudaMemset(dCbuf, 0xFF, cbytes + 2 * kGuard));
  CUDA(cudaMemcpy(dB, hB, (size_t)(n * ldb) * 2, cudaMemcpyHostToDevice));
  CUDA(cudaDeviceSynchronize());
  cudaStream_t s1, s2;
  CUDA(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CUDA(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  mkx_gemm_desc d;
  memset(&d, 0, sizeof d);
  d.m = m;
  d.n = n;
  d.k = k;
  d.a = dA;
  d.lda = lda;
  d.b = dB;
  d.ldb = ldb;
  d.b_kmajor = 1;
  d.c = (char *)dCbuf + kGuard;
  d.ldc = ldc;
  d.ab_type = MKX_GEMM_BF16;
  d.c_type = ct;
  d.tile_override = tile;
  int rc = mkx_gemm_run_gated(&d, dFlags, 1, first_tile_m, s1);
  if (rc) CHECK(0, "%s: mkx_gemm_run_gated returned %d", g_case, rc);
  for (int i = 0; i < tiles_m; ++i) {
    const int t = (first_tile_m + tiles_m - 1 - i) %
                  tiles_m; /* reverse of the GEMM's order */
    const int64_t r0 = (int64_t)t * 128, nr = m - r0 < 128 ? m - r0 : 128;
    CUDA(cudaMemcpyAsync((uint16_t *)dA + r0 * lda, hA + r0 * lda,
                         (size_t)(nr * lda) * 2, cudaMemcpyHostToDevice, s2));
    CUDA(cudaMemcpyAsync(dFlags + t, hOnes + t, sizeof(int),
                         cudaMemcpyHostToDevice, s2));
  }
  CUDA(cudaStreamSynchronize(s2));
  CUDA(cudaStreamSynchronize(s1));
  CUDA(cudaGetLastError());
  const float one = 1.0f, zero = 0.0f;
  BLAS(cublasGemmEx(g_blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)n, (int)m, (int)k,
                    &one, dB, CUDA_R_16BF, (int)ldb, dA, CUDA_R_16BF, (int)lda,
                    &zero, dRef, CUDA_R_32F, (int)n, CUBLAS_COMPUTE_32F,
                    CUBLAS_GEMM_DEFAULT));
  CUDA(cudaDeviceSynchronize());
  if (!rc) compare_c(&tc, &d, dCbuf, cbytes, dRef);
  CUDA(cudaStreamDestroy(s1));
  CUDA(cudaStreamDestroy(s2));
  CUDA(cudaFree(dA));
  CUDA(cudaFree(dB));
  CUDA(cudaFree(dCbuf));
  CUDA(cudaFree(dRef));
  CUDA(cudaFree(dFlags));
  CUDA(cudaFreeHost(hA));
  CUDA(cudaFreeHost(hOnes));
  free(hB);
}

/* Column-major caller served by operand swapping (see gemm_engine.h): Cc = op(Ac) * Bc, all
 * column-major, computed as Cc^T = Bc^T * op(Ac)^T by the row-major engine. */
static void run_colmajor_case(int64_t m, int64_t n, int64_t k, int opA_T,
                              int ct) {
  tcase tc; /* the engine's view: m' = n, n' = m */
  memset(&tc, 0, sizeof tc);
  tc.m = n;
  tc.n = m;
  tc.k = k;
  tc.ab = MKX_GEMM_FP16;
  tc.ct = ct;
  tc.bkm = opA_T;
  name_case(&tc, opA_T ? "colmajor(A^T) " : "colmajor ");
  const int64_t lda = (opA_T ? k : m) + 8, ldb = k + 16,
                ldc = m + 8;            /* column-major leading dims */
  const int64_t a_cols = opA_T ? m : k; /* Ac stored lda x a_cols */
  const int esz = ct == MKX_GEMM_FP32 ? 4 : 2;
  uint16_t *hA = (uint16_t *)host_alloc((size_t)(a_cols * lda) * 2),
           *hB = (uint16_t *)host_alloc((size_t)(n * ldb) * 2);
  fill16(hA, a_cols, lda, 1);
  fill16(hB, n, ldb, 1);
  void *dA, *dB, *dCbuf;
  float *dRef;
  const size_t cbytes = (size_t)(n * ldc) * esz;
  CUDA(cudaMalloc(&dA, (size_t)(a_cols * lda) * 2));
  CUDA(cudaMalloc(&dB, (size_t)(n * ldb) * 2));
  CUDA(cudaMalloc(&dCbuf, cbytes + 2 * kGuard));
  CUDA(cudaMalloc((void **)&dRef, (size_t)(m * n) * 4));
  CUDA(cudaMemcpy(dA, hA, (size_t)(a_cols * lda) * 2, cudaMemcpyHostToDevice));
  CUDA(cudaMemcpy(dB, hB, (size_t)(n * ldb) * 2, cudaMemcpyHostToDevice));
  CUDA(cudaMemset(dCbuf, 0xFF, cbytes + 2 * kGuard));
  const float one = 1.0f, zero = 0.0f;
  /* reference, column-major m x n with ld m */
  BLAS(cublasGemmEx(g_blas, opA_T ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N,
                    (int)m, (int)n, (int)k, &one, dA, CUDA_R_16F, (int)lda, dB,
                    CUDA_R_16F, (int)ldb, &zero, dRef, CUDA_R_32F, (int)m,
                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  mkx_gemm_desc d;
  memset(&d, 0, sizeof d);
  d.m = n;
  d.n = m;
  d.k = k;
  d.a = dB;
  d.lda = ldb;
  d.b = dA;
  d.ldb = lda;
  d.b_kmajor = opA_T;
  d.c = (char *)dCbuf + kGuard;
  d.ldc = ldc;
  d.ab_type = MKX_GEMM_FP16;
  d.c_type = ct;
  int rc = mkx_gemm_run(&d, 0);
  if (rc) CHECK(0, "%s: mkx_gemm_run returned %d", g_case, rc);
  CUDA(cudaGetLastError());
  CUDA(cudaDeviceSynchronize());
  if (!rc) compare_c(&tc, &d, dCbuf, cbytes, dRef);
  CUDA(cudaFree(dA));
  CUDA(cudaFree(dB));
  CUDA(cudaFree(dCbuf));
  CUDA(cudaFree(dRef));
  free(hA);
  free(hB);
}

static void check_rejects(void) {
  mkx_gemm_desc d;
  memset(&d, 0, sizeof d);
  d.m = 16;
  d.n = 12;
  d.k = 16;
  d.lda = 16;
  d.ldb = 16;
  d.ldc = 16;
  d.b_kmajor = 1;
  d.a = d.b = d.c = (void *)(uintptr_t)256;
  d.ab_type = MKX_GEMM_BF16;
  d.c_type = MKX_GEMM_BF16;
  const char *why = NULL;
  const char *wrong = NULL; /* the first thing the engine got wrong */
  if (mkx_gemm_supported(&d, &why)) wrong = "n % 8 != 0 accepted";
  d.n = 16;
  if (!mkx_gemm_supported(&d, &why) && !wrong)
    wrong = "a valid problem refused";
  d.ab_type = MKX_GEMM_FP32;
  if (mkx_gemm_supported(&d, &why) && !wrong) wrong = "fp32 operands accepted";
  d.ab_type = MKX_GEMM_BF16;
  d.lda = 20;
  if (mkx_gemm_supported(&d, &why) && !wrong) wrong = "lda % 8 != 0 accepted";
  d.lda = 16;
  d.a = (void *)(uintptr_t)258;
  if (mkx_gemm_supported(&d, &why) && !wrong) wrong = "misaligned A accepted";
  const int rc = mkx_gemm_run(&d, 0);
  if (rc != MKX_GEMM_EINVAL && !wrong) wrong = "misaligned A run, not refused";
  CHECK(!wrong, "argument checks: %s (the misaligned run returned %d, want %d)",
        wrong ? wrong : "all as expected", rc, MKX_GEMM_EINVAL);
}

int main(int argc, char **argv) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev <= 0) {
    printf("# skip: no CUDA device\n");
    return CHECK_SKIP;
  }
  struct cudaDeviceProp prop;
  CUDA(cudaGetDeviceProperties(&prop, 0));
  if (prop.major != 9) {
    printf("# skip: device %s is sm_%d%d, engine needs sm_90\n", prop.name,
           prop.major, prop.minor);
    return CHECK_SKIP;
  }
  int quick = 0,
      small =
          0; /* --quick: a quarter of the cases; --small: no shape over 2^31 flop (for compute-sanitizer) */
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--quick"))
      quick = 1;
    else if (!strcmp(argv[i], "--small"))
      small = 1;
    else {
      fprintf(stderr, "usage: %s [--quick] [--small]\n", argv[0]);
      return 2;
    }
  }
  g_rng = 0x9E3779B97F4A7C15ull ^ (uint64_t)time(NULL);
  printf("# device: %s, %d SMs, seed %llu\n", prop.name,
         prop.multiProcessorCount, (unsigned long long)g_rng);
  check_set_note("seed %llu", (unsigned long long)g_rng);
  check_show_passes(1);
  BLAS(cublasCreate(&g_blas));

  check_rejects();

  /* every dtype/layout combination */
  const int abs_[2] = {MKX_GEMM_BF16, MKX_GEMM_FP16};
  const int cts[3] = {MKX_GEMM_BF16, MKX_GEMM_FP16, MKX_GEMM_FP32};
  static const int64_t shapes[][3] = {
      {1, 8, 8},          {8, 64, 64},       {17, 136, 72},
      {1, 4096, 4096},    {8, 8192, 1024},   {17, 1000, 520},
      {128, 128, 64},     {128, 256, 64},    {129, 264, 200},
      {255, 392, 136},    {256, 256, 256},   {300, 520, 1000},
      {1000, 1000, 1000}, {1024, 2048, 512}, {2000, 3000, 808},
      {777, 8192, 2048},  {4096, 1032, 8},   {513, 128, 4096},
      {64, 24, 4104},     {3000, 4104, 16},  {2048, 2048, 2048},
      {4096, 4096, 4096}, {1, 256, 8192},    {200, 40, 64}};
  const int nshapes = (int)(sizeof shapes / sizeof shapes[0]);
  int ci = 0;
  for (int s = 0; s < nshapes; ++s) {
    for (int a = 0; a < 2; ++a)
      for (int c = 0; c < 3; ++c)
        for (int bk = 1; bk >= 0; --bk) {
          if ((quick && ((ci + s) % 4)) ||
              (small && shapes[s][0] * shapes[s][1] * shapes[s][2] >
                            ((int64_t)1 << 30))) {
            ++ci;
            continue;
          }
          tcase t;
          memset(&t, 0, sizeof t);
          t.m = shapes[s][0];
          t.n = shapes[s][1];
          t.k = shapes[s][2];
          t.ab = abs_[a];
          t.ct = cts[c];
          t.bkm = bk;
          t.pad_a = (ci % 3 == 1) ? 8 : 0;
          t.pad_b = (ci % 4 == 2) ? 24 : 0;
          t.pad_c = (ci % 3 == 2) ? 8 * (1 + ci % 5) : 0;
          t.tile = ci % 3; /* heuristic, forced 128x128, forced 128x256 */
          t.ctas = (ci % 7 == 3) ? 5 : 0; /* few CTAs: many tiles per CTA */
          run_case(&t);
          ++ci;
        }
  }
  /* large */
  if (!small) {
    tcase t;
    memset(&t, 0, sizeof t);
    t.m = 16384;
    t.n = 8192;
    t.k = 8192;
    t.ab = MKX_GEMM_BF16;
    t.ct = MKX_GEMM_BF16;
    t.bkm = 1;
    run_case(&t);
    if (!quick) {
      t.ab = MKX_GEMM_FP16;
      t.ct = MKX_GEMM_FP32;
      t.bkm = 0;
      t.pad_c = 8;
      run_case(&t);
      t.ab = MKX_GEMM_BF16;
      t.ct = MKX_GEMM_FP16;
      t.bkm = 0;
      t.pad_c = 0;
      t.tile = MKX_GEMM_TILE_128x128;
      run_case(&t);
    }
  }
  /* column-major callers through operand swapping */
  run_colmajor_case(1000, 520, 264, 0, MKX_GEMM_FP32);
  run_colmajor_case(336, 1000, 200, 1, MKX_GEMM_FP16);
  /* composition hooks: flag gate + rotated tile order */
  run_gated_case(4096, 4096, 4096, 5, 0, MKX_GEMM_BF16);
  run_gated_case(1000, 2056, 1032, 3, MKX_GEMM_TILE_128x128, MKX_GEMM_FP32);
  if (!small) run_gated_case(8192, 8192, 8192, 17, 0, MKX_GEMM_BF16);
  BLAS(cublasDestroy(g_blas));
  return engine_finish();
}
