/*
 * GPU test of the engine's fp8 GEMM (mkx_gemm_run_fp8, kernels/gemm/gemm_fp8.cu) against an
 * fp64 host reference on fresh random inputs, C poisoned (0xFF bytes) inside a guard band:
 *  - exact cases: operands in {0, +-0.5, +-1, +-1.5, +-2} and power-of-two scales, so that each
 *    K block's sum and the scaled total are exact in fp32: an fp32 C equals the reference bit
 *    for bit, a 16-bit C is within one rounding of it (a wrong index, scale, block or row
 *    shows at once);
 *  - random cases: fp8 values of the whole range up to 16 in magnitude (4 for an fp16 C),
 *    scales in [0.25, 4),
 *    within eps_c |ref| + 2^-10 sum |terms| (the tensor cores sum a K block of fp8 products in
 *    fewer bits than fp32; the engine adds the blocks in fp32);
 * both fp8 types, C in bf16, fp16 and fp32, every scale layout (block scales of B stored either
 * way round; row scales with one B scale for all columns, stride 0), awkward m, n and k (partial tiles, a last K block of 16), long K (many promoted
 * blocks), padded leading dimensions; the grid each case would launch (mkx_gemm_fp8_grid: at
 * least a tile's CTAs, no more than asked or than the tiles); and arguments the engine refuses
 * (MKX_GEMM_EINVAL).
 * Exit 77 without a usable sm_90 GPU; a run past 180 s fails (a kernel that hangs).
 *
 *   test_gemm_fp8 [--seed N]
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
#include "gemm_engine.h"
#include "mkx_test.h"
#include "fp8_check.h"
#include "num16.h"

static mt_rng g_rng;
static const size_t kGuard = 4096; /* bytes of guard band on each side of C */

static int engine_finish(void) { return check_done("test_gemm_fp8"); }

typedef struct {
  int64_t m, n, k,
      pad; /* pad: extra elements per row of A, B and C (multiples of 16) */
  int ab, ct, layout, exact;
  int b_kb_fast;  /* BLOCK: B's scales stored [nb][kb] (1) or [kb][nb] (0);
                    ROW: one per column (1) or one for all (0, stride 0) */
  int tile, ctas; /* tile_override, num_ctas */
} fcase;

static const char *tile_name(int t) {
  return t == MKX_GEMM_TILE_128x128        ? "one CTA a tile"
         : t == MKX_GEMM_TILE_128x128_PAIR ? "clusters of 2"
                                           : "tiles picked";
}

static const char *lname(int l) {
  static const char *const n[] = {"none", "tensor", "row", "block"};
  return n[l];
}

typedef struct {
  uint8_t *A, *B;    /* host, m x lda and n x ldb */
  float *sa, *sb;    /* host scales */
  int64_t nsa, nsb;  /* their counts */
  mkx_gemm_scales s; /* strides (pointers set to device copies) */
} inputs;

static void make_inputs(const fcase *c, int64_t lda, int64_t ldb, inputs *in) {
  const MKX_Datatype t = c->ab == MKX_GEMM_E4M3 ? MKX_FP8_E4M3 : MKX_FP8_E5M2;
  in->A = host_alloc((size_t)(c->m * lda));
  in->B = host_alloc((size_t)(c->n * ldb));
  /* fp16's range (65504) holds the random sums with operands up to 4 */
  const double limit = c->ct == MKX_GEMM_FP16 ? 4 : 16;
  for (int64_t i = 0; i < c->m * lda; i++)
    in->A[i] = c->exact ? fp8_exact_byte(c->ab, (int)(mt_rng_next(&g_rng) % 9))
                        : mt_rand_fp8(&g_rng, t, limit);
  for (int64_t i = 0; i < c->n * ldb; i++)
    in->B[i] = c->exact ? fp8_exact_byte(c->ab, (int)(mt_rng_next(&g_rng) % 9))
                        : mt_rand_fp8(&g_rng, t, limit);
  const int64_t kbs = (c->k + 127) / 128, nbs = (c->n + 127) / 128;
  memset(&in->s, 0, sizeof in->s);
  in->s.layout = c->layout;
  const int64_t counts[4][2] = {
      {0, 0}, {1, 1}, {c->m, c->n}, {c->m * (kbs + 1), nbs * kbs}};
  in->nsa = counts[c->layout][0];
  in->nsb = counts[c->layout][1];
  if (c->layout == MKX_GEMM_SCALE_ROW) {
    in->s.a_row = 1, in->s.b_col = c->b_kb_fast;
    if (!c->b_kb_fast) in->nsb = 1;
  }
  if (c->layout == MKX_GEMM_SCALE_BLOCK) {
    in->s.a_row = kbs + 1, in->s.a_kb = 1; /* a padded row per row of A */
    if (c->b_kb_fast)
      in->s.b_col = kbs, in->s.b_kb = 1;
    else
      in->s.b_col = 1, in->s.b_kb = nbs;
  }
  in->sa = host_alloc(sizeof(float) * (size_t)(in->nsa ? in->nsa : 1));
  in->sb = host_alloc(sizeof(float) * (size_t)(in->nsb ? in->nsb : 1));
  for (int64_t i = 0; i < in->nsa; i++)
    in->sa[i] = fp8_rand_scale(&g_rng, c->exact);
  for (int64_t i = 0; i < in->nsb; i++)
    in->sb[i] = fp8_rand_scale(&g_rng, c->exact);
}

/* The scale of element (i, j) in K block kb. */
static double scale_of(const fcase *c, const inputs *in, int64_t i, int64_t j,
                       int64_t kb) {
  const mkx_gemm_scales *s = &in->s;
  switch (c->layout) {
    case MKX_GEMM_SCALE_TENSOR:
      return (double)in->sa[0] * in->sb[0];
    case MKX_GEMM_SCALE_ROW:
      return (double)in->sa[i * s->a_row] * in->sb[j * s->b_col];
    case MKX_GEMM_SCALE_BLOCK:
      return (double)in->sa[i * s->a_row + kb * s->a_kb] *
             in->sb[(j / 128) * s->b_col + kb * s->b_kb];
  }
  return 1.0;
}

/* The case's check: every element of C against the reference, nothing outside C written. */
static void compare(const fcase *c, const inputs *in, int64_t lda, int64_t ldb,
                    int64_t ldc, const unsigned char *hC, size_t cbytes) {
  const MKX_Datatype t = c->ab == MKX_GEMM_E4M3 ? MKX_FP8_E4M3 : MKX_FP8_E5M2;
  const int esz = c->ct == MKX_GEMM_FP32 ? 4 : 2;
  double lut[256];
  for (int b = 0; b < 256; b++) lut[b] = mt_fp8_decode(t, (uint8_t)b);
  int64_t guard_bad = 0, bad = 0;
  double worst = 0;
  for (size_t i = 0; i < kGuard; i++)
    guard_bad += (hC[i] != 0xFF) + (hC[kGuard + cbytes + i] != 0xFF);
  const unsigned char *cp = hC + kGuard;
  for (int64_t i = 0; i < c->m; i++) {
    for (int64_t j = c->n; j < ldc; j++)
      for (int b = 0; b < esz; b++)
        guard_bad += cp[(i * ldc + j) * esz + b] != 0xFF;
    for (int64_t j = 0; j < c->n; j++) {
      double ref = 0, mag = 0;
      for (int64_t k0 = 0; k0 < c->k; k0 += 128) {
        double blk = 0, bmag = 0;
        for (int64_t k = k0; k < c->k && k < k0 + 128; k++) {
          const double p = lut[in->A[i * lda + k]] * lut[in->B[j * ldb + k]];
          blk += p;
          bmag += fabs(p);
        }
        const double s = scale_of(c, in, i, j, k0 / 128);
        ref += s * blk;
        mag += s * bmag;
      }
      const double v = fp8_c_value(c->ct, cp + (i * ldc + j) * esz);
      const double err = fabs(v - ref);
      const double bound =
          c->exact && c->ct == MKX_GEMM_FP32
              ? 0
              : fp8_c_eps(c->ct) * fabs(ref) + (c->exact ? 0 : 0x1p-10 * mag);
      if (!(err <= bound)) bad++;
      if (bound > 0 && err / bound > worst) worst = err / bound;
    }
  }
  CHECK(!bad && !guard_bad,
        "%s: %lld of %lld elements of C outside the bound (worst at %.2f of "
        "it), %lld bytes written outside C",
        g_case, (long long)bad, (long long)(c->m * c->n), worst,
        (long long)guard_bad);
}

/* mkx_gemm_fp8_grid: at least one CTA (a cluster: 2), none past the
 * CTAs asked for (0: the SMs) or the tiles (pairs of tile rows). */
static void grid_check(const fcase *c, const mkx_gemm_desc *d,
                       const mkx_gemm_scales *s) {
  int sms = 0, dev = 0, grid = -1;
  CUDA(cudaGetDevice(&dev));
  CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  const int pair =
      mkx_gemm_fp8_pick_tile(d, c->ctas) == MKX_GEMM_TILE_128x128_PAIR;
  const int64_t rows = (c->m + 127) / 128, cols = (c->n + 127) / 128;
  const int64_t tiles = (pair ? (rows + 1) / 2 * 2 : rows) * cols;
  const int asked = c->ctas > 0 ? c->ctas : sms;
  const int rc = mkx_gemm_fp8_grid(d, s, &grid);
  CHECK(rc == 0 && grid >= (pair ? 2 : 1) && grid <= asked && grid <= tiles &&
            (!pair || grid % 2 == 0),
        "%s: mkx_gemm_fp8_grid returned %d, %d CTAs (asked %d, %lld tiles)",
        g_case, rc, grid, asked, (long long)tiles);
}

static void run_case(const fcase *c) {
  const int64_t lda = c->k + c->pad, ldb = c->k + c->pad, ldc = c->n + c->pad;
  snprintf(g_case, sizeof g_case,
           "m=%lld n=%lld k=%lld %s -> %s, scales %s%s, %s, pad %lld, %s, "
           "%d CTAs",
           (long long)c->m, (long long)c->n, (long long)c->k,
           fp8_type_name(c->ab), fp8_type_name(c->ct), lname(c->layout),
           c->layout == MKX_GEMM_SCALE_BLOCK
               ? (c->b_kb_fast ? " (b [nb][kb])" : " (b [kb][nb])")
               : "",
           c->exact ? "exact" : "random", (long long)c->pad, tile_name(c->tile),
           c->ctas);
  inputs in;
  make_inputs(c, lda, ldb, &in);
  const int esz = c->ct == MKX_GEMM_FP32 ? 4 : 2;
  const size_t cbytes = (size_t)(c->m * ldc * esz);
  void *dA = upload(in.A, (size_t)(c->m * lda)),
       *dB = upload(in.B, (size_t)(c->n * ldb));
  float *dsa = upload(in.sa, sizeof(float) * (size_t)in.nsa),
        *dsb = upload(in.sb, sizeof(float) * (size_t)in.nsb);
  unsigned char *dC = NULL;
  CUDA(cudaMalloc((void **)&dC, cbytes + 2 * kGuard));
  CUDA(cudaMemset(dC, 0xFF, cbytes + 2 * kGuard));
  const mkx_gemm_desc d = {.m = c->m,
                           .n = c->n,
                           .k = c->k,
                           .a = dA,
                           .lda = lda,
                           .b = dB,
                           .ldb = ldb,
                           .b_kmajor = 1,
                           .c = dC + kGuard,
                           .ldc = ldc,
                           .ab_type = c->ab,
                           .c_type = c->ct,
                           .num_ctas = c->ctas,
                           .tile_override = c->tile};
  mkx_gemm_scales s = in.s;
  if (c->layout != MKX_GEMM_SCALE_NONE) s.a = dsa, s.b = dsb;
  const char *why = NULL;
  const int ok = mkx_gemm_fp8_supported(&d, &s, &why);
  CHECK(ok, "%s: supported (%s)", g_case, why);
  if (ok) {
    grid_check(c, &d, &s);
    const int rc = mkx_gemm_run_fp8(&d, &s, 0);
    CHECK(rc == 0, "%s: mkx_gemm_run_fp8 returned %d", g_case, rc);
    CUDA(cudaDeviceSynchronize());
    unsigned char *hC = host_alloc(cbytes + 2 * kGuard);
    CUDA(cudaMemcpy(hC, dC, cbytes + 2 * kGuard, cudaMemcpyDeviceToHost));
    if (rc == 0) compare(c, &in, lda, ldb, ldc, hC, cbytes);
    free(hC);
  }
  cudaFree(dA), cudaFree(dB), cudaFree(dsa), cudaFree(dsb), cudaFree(dC);
  free(in.A), free(in.B), free(in.sa), free(in.sb);
}

/* What the engine refuses: MKX_GEMM_EINVAL, nothing launched. */
static void refusals(void) {
  snprintf(g_case, sizeof g_case, "refusals");
  static char buf[1024] __attribute__((aligned(16)));
  const float one = 1.f;
  const mkx_gemm_desc good = {.m = 8,
                              .n = 8,
                              .k = 16,
                              .a = buf,
                              .lda = 16,
                              .b = buf,
                              .ldb = 16,
                              .b_kmajor = 1,
                              .c = buf,
                              .ldc = 8,
                              .ab_type = MKX_GEMM_E4M3,
                              .c_type = MKX_GEMM_FP32};
  const mkx_gemm_scales none = {0},
                        row = {
                            .layout = MKX_GEMM_SCALE_ROW, .a = &one, .b = NULL};
  const mkx_gemm_scales bad_layout = {.layout = 7},
                        row_neg = {.layout = MKX_GEMM_SCALE_ROW,
                                   .a = &one,
                                   .b = &one,
                                   .a_row = -1};
  struct {
    const char *what;
    mkx_gemm_desc d;
    const mkx_gemm_scales *s;
  } r[] = {{"bf16 operands", good, &none},
           {"B stored k x n", good, &none},
           {"k = 24", good, &none},
           {"lda = 24", good, &none},
           {"an fp8 C", good, &none},
           {"a NULL scale array", good, &row},
           {"layout 7", good, &bad_layout},
           {"NULL scales", good, NULL},
           {"a negative row stride", good, &row_neg},
           {"tiles of 128 x 256", good, &none},
           {"clusters of 2 on one CTA", good, &none}};
  r[0].d.ab_type = MKX_GEMM_BF16;
  r[1].d.b_kmajor = 0;
  r[2].d.k = 24, r[2].d.lda = 32, r[2].d.ldb = 32;
  r[3].d.lda = 24;
  r[4].d.c_type = MKX_GEMM_E4M3;
  r[9].d.tile_override = MKX_GEMM_TILE_128x256;
  r[10].d.tile_override = MKX_GEMM_TILE_128x128_PAIR, r[10].d.num_ctas = 1;
  const char *why = NULL;
  CHECK(mkx_gemm_fp8_supported(&good, &none, &why),
        "the good arguments are supported (%s)", why);
  for (size_t i = 0; i < sizeof r / sizeof r[0]; i++) {
    const int sup = mkx_gemm_fp8_supported(&r[i].d, r[i].s, &why);
    const int rc = mkx_gemm_run_fp8(&r[i].d, r[i].s, 0);
    CHECK(!sup && rc == MKX_GEMM_EINVAL,
          "%s: refused (supported %d, \"%s\"; run returned %d)", r[i].what, sup,
          why, rc);
  }
}

int main(int argc, char **argv) {
  uint64_t seed;
  const int skip = engine_start("test_gemm_fp8", argc, argv, &seed);
  if (skip) return skip;
  mt_guard("test_gemm_fp8", 180); /* a kernel that never ends fails the test */
  mt_rng_init(&g_rng, seed, 0, 0);
  refusals();
  const int abs[2] = {MKX_GEMM_E4M3, MKX_GEMM_E5M2};
  const int cts[3] = {MKX_GEMM_BF16, MKX_GEMM_FP16, MKX_GEMM_FP32};
  /* shapes: a full tile, partial tiles and a last K block of 16, several tiles and blocks
   * (3 tile rows: a cluster of 2 with a CTA past the last); each case on the tiles picked, one
   * CTA a tile or clusters of 2, on every SM or on 2 or 3 CTAs that walk many tiles */
  const int tiles[3] = {MKX_GEMM_TILE_AUTO, MKX_GEMM_TILE_128x128,
                        MKX_GEMM_TILE_128x128_PAIR};
  const int ctas[3] = {0, 2, 3};
  const int64_t shapes[4][3] = {
      {128, 128, 128}, {1, 8, 16}, {200, 136, 272}, {300, 264, 1040}};
  int i = 0;
  for (int a = 0; a < 2; a++)
    for (int ct = 0; ct < 3; ct++)
      for (int l = MKX_GEMM_SCALE_NONE; l <= MKX_GEMM_SCALE_BLOCK; l++)
        for (int e = 0; e < 2; e++, i++) {
          const int64_t *sh = shapes[i % 4];
          const fcase c = {sh[0],
                           sh[1],
                           sh[2],
                           (i % 3 == 0) ? 16 : 0,
                           abs[a],
                           cts[ct],
                           l,
                           !e,
                           i % 2,
                           tiles[i % 3],
                           ctas[(i / 3) % 3]};
          run_case(&c);
        }
  /* long K: 32 blocks promoted; both orders of B's block scales, one CTA a
   * tile and clusters of 2 */
  for (int b = 0; b < 2; b++) {
    const fcase c = {256,
                     256,
                     4096,
                     0,
                     MKX_GEMM_E4M3,
                     MKX_GEMM_FP32,
                     MKX_GEMM_SCALE_BLOCK,
                     0,
                     b,
                     tiles[1 + b]};
    run_case(&c);
  }
  /* many tiles per cluster, 9 tile rows (the last pair's second past the end) */
  const fcase many = {1100,
                      1024,
                      512,
                      0,
                      MKX_GEMM_E4M3,
                      MKX_GEMM_BF16,
                      MKX_GEMM_SCALE_ROW,
                      0,
                      1,
                      MKX_GEMM_TILE_128x128_PAIR,
                      6};
  run_case(&many);
  const fcase exact_long = {
      128, 256, 1024, 16, MKX_GEMM_E5M2, MKX_GEMM_FP32, MKX_GEMM_SCALE_BLOCK,
      1,   1};
  run_case(&exact_long);
  return engine_finish();
}
