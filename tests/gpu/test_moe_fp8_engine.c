/*
 * GPU test of the grouped expert GEMM with fp8 operands (mkx_moe_gemm_run, the swapped kernel's
 * fp8 form, kernels/moe/grouped_gemm_swap.cu) against an fp64 host reference on fresh random
 * inputs, C poisoned (0xFF bytes) everywhere the kernel must not write:
 *  - experts with 0, 1, 7, 12, 20, 40, 64 and 65 rows (narrow tiles: 64 rows or fewer a
 *    warpgroup, two column pairs a tile, the wgmma as wide as the rows rounded up to 8; wide:
 *    more), 97, 128 and 129 (a second block of rows), 300;
 *  - plain and SwiGLU (the up half at n, or further), n not a multiple of 64, k not a multiple
 *    of 128 (a last K block of 16), padded lda, ldw and ldc, a row scale or none;
 *  - both fp8 types, C in bf16, fp16 and fp32, every scale layout (block scales of W stored
 *    either way round, a stride of 0 for one value over a dimension);
 *  - exact cases: operands in {0, +-0.5, +-1, +-1.5, +-2} and power-of-two scales, so that each K
 *    block's sum and the scaled total are exact in fp32: a plain fp32 C equals the reference
 *    bit for bit;
 *  - random cases within eps_c |ref| + 2^-10 sum |terms| per product (the tensor cores sum a K
 *    block of fp8 products in fewer bits than fp32), carried through SwiGLU;
 *  - arguments the fp8 form refuses (MKX_GEMM_EINVAL), and no rows with
 *    no A scales, which it runs (nothing to do);
 *  - mkx_moe_quant_run, the layer's activation to fp8: each group's scale
 *    and every byte within half a unit of the value's last place, rows
 *    past the count untouched.
 * Exit 77 without an sm_90 GPU; a run past 180 s fails (a kernel that hangs).
 *
 *   test_moe_fp8_engine [--seed N]
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
#include "gemm/gemm_engine.h"
#include "moe/moe_engine.h"
#include "mkx_test.h"
#include "fp8_check.h"
#include "num16.h"

static mt_rng g_rng;

static int engine_finish(void) { return check_done("test_moe_fp8_engine"); }

typedef struct {
  int experts;
  const int *rows; /* per expert */
  int64_t n, k, up, pad;
  int swiglu, ab, ct, layout, exact, w_kb_fast, row_scale;
  int w_layout; /* W's scale layout, or -1: layout (A's) */
} mcase;

static int w_layout_of(const mcase *c) {
  return c->w_layout >= 0 ? c->w_layout : c->layout;
}

typedef struct {
  int64_t rows, up, wcols, kbs, nbs, lda, ldw, ldc;
  int *off;
  uint8_t *A, *W;
  float *sa, *sw, *rs;
  int64_t nsa, nsw;
  mkx_moe_fp8_scales s; /* strides; pointers set to device copies */
} inputs;

static void make_inputs(const mcase *c, inputs *in) {
  const MKX_Datatype t = c->ab == MKX_GEMM_E4M3 ? MKX_FP8_E4M3 : MKX_FP8_E5M2;
  in->off = host_alloc(sizeof(int) * (size_t)(c->experts + 1));
  in->off[0] = 0;
  for (int e = 0; e < c->experts; e++) in->off[e + 1] = in->off[e] + c->rows[e];
  in->rows = in->off[c->experts];
  in->up = c->swiglu ? (c->up ? c->up : c->n) : 0; /* up_col 0: n */
  in->wcols = c->swiglu ? in->up + c->n : c->n;
  in->kbs = (c->k + 127) / 128;
  in->nbs = (in->wcols + 127) / 128;
  in->lda = c->k + c->pad, in->ldw = c->k + c->pad, in->ldc = c->n + c->pad;
  in->A = host_alloc((size_t)(in->rows * in->lda));
  in->W = host_alloc((size_t)(c->experts * in->wcols * in->ldw));
  /* fp16's range holds the random sums with operands up to 4, and SwiGLU's
   * products of two sums with operands up to 0.5 */
  const double limit = c->swiglu ? 0.5 : c->ct == MKX_GEMM_FP16 ? 4 : 16;
  for (int64_t i = 0; i < in->rows * in->lda; i++)
    in->A[i] = c->exact ? fp8_exact_byte(c->ab, (int)(mt_rng_next(&g_rng) % 9))
                        : mt_rand_fp8(&g_rng, t, limit);
  for (int64_t i = 0; i < c->experts * in->wcols * in->ldw; i++)
    in->W[i] = c->exact ? fp8_exact_byte(c->ab, (int)(mt_rng_next(&g_rng) % 9))
                        : mt_rand_fp8(&g_rng, t, limit);
  memset(&in->s, 0, sizeof in->s);
  in->s.a_layout = c->layout;
  in->s.w_layout = w_layout_of(c);
  const int64_t E = c->experts;
  switch (c->layout) {
    case MKX_GEMM_SCALE_TENSOR:
    case MKX_GEMM_SCALE_ROW: /* one A scale for every row (stride 0) */
      in->nsa = 1;
      break;
    case MKX_GEMM_SCALE_BLOCK: /* a padded row of scales per row of A */
      in->nsa = in->rows * (in->kbs + 1);
      in->s.a_row = in->kbs + 1, in->s.a_kb = 1;
      break;
    default:
      in->nsa = 0;
  }
  switch (in->s.w_layout) {
    case MKX_GEMM_SCALE_TENSOR:
      in->nsw = E, in->s.w_e = 1;
      break;
    case MKX_GEMM_SCALE_ROW:
      in->nsw = E * in->wcols, in->s.w_e = in->wcols, in->s.w_col = 1;
      break;
    case MKX_GEMM_SCALE_BLOCK:
      in->nsw = E * in->nbs * in->kbs, in->s.w_e = in->nbs * in->kbs;
      if (c->w_kb_fast)
        in->s.w_col = in->kbs, in->s.w_kb = 1;
      else
        in->s.w_col = 1, in->s.w_kb = in->nbs;
      break;
    default:
      in->nsw = 0;
  }
  in->sa = host_alloc(sizeof(float) * (size_t)(in->nsa ? in->nsa : 1));
  in->sw = host_alloc(sizeof(float) * (size_t)(in->nsw ? in->nsw : 1));
  for (int64_t i = 0; i < in->nsa; i++)
    in->sa[i] = fp8_rand_scale(&g_rng, c->exact);
  for (int64_t i = 0; i < in->nsw; i++)
    in->sw[i] = fp8_rand_scale(&g_rng, c->exact);
  in->rs = host_alloc(sizeof(float) * (size_t)(in->rows ? in->rows : 1));
  for (int64_t i = 0; i < in->rows; i++)
    in->rs[i] = c->exact ? 1.f : (float)(0.5 + mt_rng_unit(&g_rng));
}

static double scale_of(const inputs *in, int e, int64_t r, int64_t j,
                       int64_t kb) {
  const mkx_moe_fp8_scales *s = &in->s;
  double a = 1, w = 1;
  switch (s->a_layout) {
    case MKX_GEMM_SCALE_TENSOR:
      a = in->sa[0];
      break;
    case MKX_GEMM_SCALE_ROW:
      a = in->sa[r * s->a_row];
      break;
    case MKX_GEMM_SCALE_BLOCK:
      a = in->sa[r * s->a_row + kb * s->a_kb];
  }
  switch (s->w_layout) {
    case MKX_GEMM_SCALE_TENSOR:
      w = in->sw[e * s->w_e];
      break;
    case MKX_GEMM_SCALE_ROW:
      w = in->sw[e * s->w_e + j * s->w_col];
      break;
    case MKX_GEMM_SCALE_BLOCK:
      w = in->sw[e * s->w_e + (j / 128) * s->w_col + kb * s->w_kb];
  }
  return a * w;
}

/* Row r (of expert e) times W column j: the value and the bound on its error (2^-10 of each
 * block's sum of |products|, scaled). */
static void dot(const mcase *c, const inputs *in, const double *lut, int e,
                int64_t r, int64_t j, double *v, double *err) {
  double ref = 0, mag = 0;
  const uint8_t *a = in->A + r * in->lda,
                *w = in->W + ((int64_t)e * in->wcols + j) * in->ldw;
  for (int64_t k0 = 0; k0 < c->k; k0 += 128) {
    double blk = 0, bmag = 0;
    for (int64_t k = k0; k < c->k && k < k0 + 128; k++) {
      const double p = lut[a[k]] * lut[w[k]];
      blk += p;
      bmag += fabs(p);
    }
    const double s = scale_of(in, e, r, j, k0 / 128);
    ref += s * blk;
    mag += s * bmag;
  }
  *v = ref;
  *err = c->exact ? 0 : 0x1p-10 * mag + 0x1p-22 * fabs(ref);
}

static double silu(double x) { return x / (1 + exp(-x)); }

/* Every element of C against the reference; nothing else written. */
static void compare(const mcase *c, const inputs *in, const unsigned char *hC,
                    int64_t c_rows) {
  const MKX_Datatype t = c->ab == MKX_GEMM_E4M3 ? MKX_FP8_E4M3 : MKX_FP8_E5M2;
  const int esz = c->ct == MKX_GEMM_FP32 ? 4 : 2;
  double lut[256];
  for (int b = 0; b < 256; b++) lut[b] = mt_fp8_decode(t, (uint8_t)b);
  int64_t bad = 0, stray = 0;
  double worst = 0;
  for (int64_t r = 0; r < c_rows; r++) {
    int e = -1;
    for (int q = 0; q < c->experts; q++)
      if (r >= in->off[q] && r < in->off[q + 1]) e = q;
    for (int64_t j = 0; j < in->ldc; j++) {
      const unsigned char *p = hC + (r * in->ldc + j) * esz;
      if (e < 0 || j >= c->n) {
        for (int b = 0; b < esz; b++) stray += p[b] != 0xFF;
        continue;
      }
      double ref, err;
      dot(c, in, lut, e, r, j, &ref, &err);
      if (c->swiglu) {
        double u, eu;
        dot(c, in, lut, e, r, in->up + j, &u, &eu);
        const double g = ref, sg = silu(g);
        ref = sg * u;
        /* |silu'| <= 1.1; the GPU's exponential and division */
        err = 1.1 * err * (fabs(u) + eu) + fabs(sg) * eu + 0x1p-16 * fabs(ref) +
              1e-6;
      }
      const double rs = c->row_scale ? in->rs[r] : 1.0;
      ref *= rs, err *= rs;
      const double v = fp8_c_value(c->ct, p);
      const double bound = fp8_c_eps(c->ct) * fabs(ref) + err;
      const double d = fabs(v - ref);
      if (!(d <= bound)) {
        if (bad < 3)
          printf("#   row %lld col %lld: %.9g, reference %.9g, bound %.3g\n",
                 (long long)r, (long long)j, v, ref, bound);
        bad++;
      }
      if (bound > 0 && d / bound > worst) worst = d / bound;
    }
  }
  CHECK(bad == 0,
        "%s: %lld elements off the reference (worst %.2f of the bound)", g_case,
        (long long)bad, worst);
  CHECK(stray == 0, "%s: %lld bytes written outside the experts' rows and n",
        g_case, (long long)stray);
}

static void run_case(const mcase *c) {
  snprintf(
      g_case, sizeof g_case,
      "%d experts, n=%lld k=%lld%s %s -> %s, scales %d/%d%s, %s%s, pad %lld",
      c->experts, (long long)c->n, (long long)c->k, c->swiglu ? " SwiGLU" : "",
      fp8_type_name(c->ab), fp8_type_name(c->ct), c->layout, w_layout_of(c),
      w_layout_of(c) == MKX_GEMM_SCALE_BLOCK
          ? (c->w_kb_fast ? " (w [nb][kb])" : " (w [kb][nb])")
          : "",
      c->exact ? "exact" : "random", c->row_scale ? ", row scale" : "",
      (long long)c->pad);
  inputs in;
  make_inputs(c, &in);
  const int esz = c->ct == MKX_GEMM_FP32 ? 4 : 2;
  const int64_t c_rows = in.rows + 3; /* rows past the last expert's */
  const size_t cbytes = (size_t)(c_rows * in.ldc * esz);
  void *dA = upload(in.A, (size_t)(in.rows * in.lda)),
       *dW = upload(in.W, (size_t)(c->experts * in.wcols * in.ldw));
  float *dsa = upload(in.sa, sizeof(float) * (size_t)in.nsa),
        *dsw = upload(in.sw, sizeof(float) * (size_t)in.nsw),
        *drs = upload(in.rs, sizeof(float) * (size_t)in.rows);
  int *doff = upload(in.off, sizeof(int) * (size_t)(c->experts + 1)), *work;
  CUDA(cudaMalloc((void **)&work,
                  sizeof(int) * (size_t)mkx_moe_gemm_work_ints(c->experts)));
  unsigned char *dC = NULL;
  CUDA(cudaMalloc((void **)&dC, cbytes));
  CUDA(cudaMemset(dC, 0xFF, cbytes));
  mkx_moe_gemm_desc d;
  memset(&d, 0, sizeof d);
  d.experts = c->experts;
  d.k = c->k;
  d.n = c->n;
  d.a = dA;
  d.lda = in.lda;
  d.a_rows = in.rows;
  d.offsets = doff;
  d.w = dW;
  d.ldw = in.ldw;
  d.c = dC;
  d.ldc = in.ldc;
  d.row_scale = c->row_scale ? drs : NULL;
  d.ab_type = c->ab;
  d.c_type = c->ct;
  d.swiglu = c->swiglu;
  d.up_col = c->swiglu ? c->up : 0;
  d.work = work;
  d.fp8 = in.s;
  if (c->layout != MKX_GEMM_SCALE_NONE) d.fp8.a = dsa;
  if (w_layout_of(c) != MKX_GEMM_SCALE_NONE) d.fp8.w = dsw;
  const char *why = NULL;
  const int ok = mkx_moe_gemm_supported(&d, &why);
  CHECK(ok, "%s: supported (%s)", g_case, why);
  if (ok) {
    const int rc = mkx_moe_gemm_run(&d, 0);
    CHECK(rc == 0, "%s: mkx_moe_gemm_run returned %d", g_case, rc);
    CUDA(cudaDeviceSynchronize());
    unsigned char *hC = host_alloc(cbytes);
    CUDA(cudaMemcpy(hC, dC, cbytes, cudaMemcpyDeviceToHost));
    if (rc == 0) compare(c, &in, hC, c_rows);
    free(hC);
  }
  cudaFree(dA), cudaFree(dW), cudaFree(dsa), cudaFree(dsw), cudaFree(drs);
  cudaFree(doff), cudaFree(work), cudaFree(dC);
  free(in.off), free(in.A), free(in.W), free(in.sa), free(in.sw), free(in.rs);
}

/* mkx_moe_quant_run: random bf16 rows (magnitudes spread over 2^-20 to 2^4,
 * a group of zeros), rows_end below the buffer's rows: each group's scale
 * is its largest magnitude over the type's largest finite value (1 for
 * zeros), each byte the value divided by it and rounded to nearest (so
 * within half a unit in the last place, or half the least subnormal, of
 * the value), the byte is finite, and rows past rows_end stay poison. */
static void quant_case(int t, int64_t rows, int64_t used, int64_t cols,
                       int64_t pad) {
  snprintf(g_case, sizeof g_case, "quant %s: %lld of %lld rows x %lld",
           fp8_type_name(t), (long long)used, (long long)rows, (long long)cols);
  const MKX_Datatype mt = t == MKX_GEMM_E4M3 ? MKX_FP8_E4M3 : MKX_FP8_E5M2;
  const int64_t ldx = cols + pad, ldq = cols + pad, gs = (cols + 127) / 128,
                lds = gs + 1;
  uint16_t *x = host_alloc(sizeof(uint16_t) * (size_t)(rows * ldx));
  for (int64_t i = 0; i < rows * ldx; i++) {
    const double m =
        ldexp(mt_rng_unit(&g_rng), (int)(mt_rng_next(&g_rng) % 24) - 20);
    x[i] = mt_f32_to_bf16((float)(mt_rng_next(&g_rng) & 1 ? -m : m));
  }
  for (int64_t c = 0; c < 128 && c < cols; c++) x[c] = 0; /* row 0, group 0 */
  uint16_t *dx = upload(x, sizeof(uint16_t) * (size_t)(rows * ldx));
  const int end = (int)used;
  int *dend = upload(&end, sizeof end);
  uint8_t *dq;
  float *ds;
  CUDA(cudaMalloc((void **)&dq, (size_t)(rows * ldq)));
  CUDA(cudaMalloc((void **)&ds, sizeof(float) * (size_t)(rows * lds)));
  CUDA(cudaMemset(dq, 0xFF, (size_t)(rows * ldq)));
  CUDA(cudaMemset(ds, 0xFF, sizeof(float) * (size_t)(rows * lds)));
  const mkx_moe_quant_desc d = {dx,  ldx, MKX_GEMM_BF16, dend, rows, cols, dq,
                                ldq, ds,  lds,           t};
  const int rc = mkx_moe_quant_run(&d, 0);
  CHECK(rc == 0, "%s: mkx_moe_quant_run returned %d", g_case, rc);
  CUDA(cudaDeviceSynchronize());
  uint8_t *q = host_alloc((size_t)(rows * ldq));
  float *sc = host_alloc(sizeof(float) * (size_t)(rows * lds));
  CUDA(cudaMemcpy(q, dq, (size_t)(rows * ldq), cudaMemcpyDeviceToHost));
  CUDA(cudaMemcpy(sc, ds, sizeof(float) * (size_t)(rows * lds),
                  cudaMemcpyDeviceToHost));
  const double top = t == MKX_GEMM_E4M3 ? 448 : 57344,
               rel = t == MKX_GEMM_E4M3 ? 0x1p-4 : 0x1p-3,
               sub = t == MKX_GEMM_E4M3 ? 0x1p-10 : 0x1p-17;
  int64_t bad = 0, stray = 0;
  for (int64_t r = 0; r < rows; r++)
    for (int64_t g = 0; g < gs; g++) {
      double amax = 0;
      for (int64_t c = 128 * g; c < cols && c < 128 * g + 128; c++)
        amax = fmax(amax, fabs(mt_bf16_to_f32(x[r * ldx + c])));
      const double want = amax > 0 ? (double)(float)(amax / top) : 1.0;
      const float s = sc[r * lds + g];
      if (r >= used) {
        uint32_t bits;
        memcpy(&bits, &s, 4);
        stray += bits != 0xFFFFFFFFu;
        for (int64_t c = 128 * g; c < cols && c < 128 * g + 128; c++)
          stray += q[r * ldq + c] != 0xFF;
        continue;
      }
      if (!(fabs(s - want) <= 0x1p-22 * want)) bad++;
      for (int64_t c = 128 * g; c < cols && c < 128 * g + 128; c++) {
        const double v = mt_bf16_to_f32(x[r * ldx + c]) / s,
                     got = mt_fp8_decode(mt, q[r * ldq + c]);
        if (!isfinite(got) || !(fabs(got - v) <= rel * fabs(v) + sub)) bad++;
      }
    }
  CHECK(bad == 0, "%s: %lld scales or bytes off", g_case, (long long)bad);
  CHECK(stray == 0, "%s: %lld bytes written past rows_end", g_case,
        (long long)stray);
  cudaFree(dx), cudaFree(dend), cudaFree(dq), cudaFree(ds);
  free(x), free(q), free(sc);
}

/* What the fp8 form refuses: MKX_GEMM_EINVAL, nothing launched. */
static void refusals(void) {
  snprintf(g_case, sizeof g_case, "refusals");
  static char buf[4096] __attribute__((aligned(16)));
  static int off[3] = {0, 8, 8};
  const float one = 1.f;
  mkx_moe_gemm_desc good;
  memset(&good, 0, sizeof good);
  good.experts = 2, good.k = 32, good.n = 16, good.a = buf, good.lda = 32;
  good.a_rows = 8, good.offsets = off, good.w = buf, good.ldw = 32;
  good.c = buf, good.ldc = 16, good.ab_type = MKX_GEMM_E4M3;
  good.c_type = MKX_GEMM_FP32, good.work = off;
  const char *why = NULL;
  CHECK(mkx_moe_gemm_supported(&good, &why),
        "the good arguments are supported (%s)", why);
  mkx_moe_gemm_desc r[7];
  const char *what[7] = {"k = 24",
                         "lda = 40",
                         "ldw < k",
                         "the rows kernel",
                         "scale layout 7",
                         "a NULL scale array",
                         "a negative scale stride"};
  for (int i = 0; i < 7; i++) r[i] = good;
  r[0].k = 24;
  r[1].lda = 40;
  r[2].ldw = 16;
  r[3].kernel = MKX_MOE_GEMM_ROWS;
  r[4].fp8.w_layout = 7;
  r[5].fp8.a_layout = r[5].fp8.w_layout = MKX_GEMM_SCALE_ROW;
  r[5].fp8.a = &one;
  r[6].fp8.a_layout = r[6].fp8.w_layout = MKX_GEMM_SCALE_ROW;
  r[6].fp8.a = &one, r[6].fp8.w = &one;
  r[6].fp8.w_col = -1;
  for (int i = 0; i < 7; i++) {
    const int sup = mkx_moe_gemm_supported(&r[i], &why);
    const int rc = mkx_moe_gemm_run(&r[i], 0);
    CHECK(!sup && rc == MKX_GEMM_EINVAL,
          "%s: refused (supported %d, \"%s\"; run returned %d)", what[i], sup,
          why, rc);
  }
  /* no rows: A's scales may be NULL (a rank without tokens has none), and
   * the run has nothing to do */
  mkx_moe_gemm_desc none = good;
  none.a_rows = 0;
  none.fp8.a_layout = none.fp8.w_layout = MKX_GEMM_SCALE_BLOCK;
  none.fp8.w = &one;
  const int sup = mkx_moe_gemm_supported(&none, &why);
  const int rc = mkx_moe_gemm_run(&none, 0);
  CHECK(sup && rc == 0,
        "no rows and no A scales: runs (supported %d, \"%s\"; run returned "
        "%d)",
        sup, why, rc);
}

int main(int argc, char **argv) {
  uint64_t seed;
  const int skip = engine_start("test_moe_fp8_engine", argc, argv, &seed);
  if (skip) return skip;
  mt_guard("test_moe_fp8_engine", 180);
  mt_rng_init(&g_rng, seed, 0, 0);
  refusals();
  static const int rows_a[8] = {0, 1, 7, 64, 65, 128, 129, 300};
  static const int rows_b[5] = {40, 0, 97, 12, 20};
  const int abs[2] = {MKX_GEMM_E4M3, MKX_GEMM_E5M2};
  const int cts[3] = {MKX_GEMM_BF16, MKX_GEMM_FP16, MKX_GEMM_FP32};
  /* n, k, up (SwiGLU), pad */
  const int64_t shapes[4][4] = {
      {128, 256, 0, 0}, {200, 272, 0, 16}, {64, 128, 192, 0}, {72, 400, 0, 32}};
  int i = 0;
  for (int sw = 0; sw < 2; sw++)
    for (int ct = 0; ct < 3; ct++)
      for (int l = MKX_GEMM_SCALE_NONE; l <= MKX_GEMM_SCALE_BLOCK; l++, i++) {
        const int64_t *sh = shapes[i % 4];
        const int many = i % 2 == 0;
        const mcase c = {
            .experts = many ? 8 : 5,
            .rows = many ? rows_a : rows_b,
            .n = sh[0],
            .k = sh[1],
            .up = sw ? sh[2] : 0,
            .pad = sh[3],
            .swiglu = sw,
            .ab = abs[(i / 2) % 2],
            .ct = cts[ct],
            .layout = l,
            .exact = i % 3 == 0 && !(sw && cts[ct] == MKX_GEMM_FP16),
            .w_kb_fast = i % 2,
            .row_scale = i % 5 == 1,
            .w_layout = -1};
        run_case(&c);
      }
  /* A's and W's scales in different layouts (the layer's second GEMM:
   * block scales of its activation, any of W2's) */
  static const int mixed[3][2] = {{MKX_GEMM_SCALE_BLOCK, MKX_GEMM_SCALE_TENSOR},
                                  {MKX_GEMM_SCALE_BLOCK, MKX_GEMM_SCALE_ROW},
                                  {MKX_GEMM_SCALE_NONE, MKX_GEMM_SCALE_BLOCK}};
  for (int m = 0; m < 3; m++) {
    const mcase c = {.experts = 8,
                     .rows = rows_a,
                     .n = 200,
                     .k = 272,
                     .pad = 16,
                     .ab = MKX_GEMM_E4M3,
                     .ct = MKX_GEMM_FP32,
                     .layout = mixed[m][0],
                     .exact = m == 2,
                     .w_kb_fast = 1,
                     .w_layout = mixed[m][1]};
    run_case(&c);
  }
  quant_case(MKX_GEMM_E4M3, 40, 37, 272, 16);
  quant_case(MKX_GEMM_E5M2, 9, 9, 128, 0);
  /* long K: 40 blocks promoted, SwiGLU with the block scales */
  static const int rows_long[2] = {129, 33};
  const mcase long_k = {.experts = 2,
                        .rows = rows_long,
                        .n = 256,
                        .k = 5120,
                        .up = 256,
                        .swiglu = 1,
                        .ab = MKX_GEMM_E4M3,
                        .ct = MKX_GEMM_FP32,
                        .layout = MKX_GEMM_SCALE_BLOCK,
                        .w_kb_fast = 1,
                        .w_layout = -1};
  run_case(&long_k);
  return engine_finish();
}
