/*
 * test_fp8_moe.c - MKX_Moe_dispatch_gemm_scaled and its _init, written
 * from include/mkx.h alone: a client's reading of the contract.
 *
 * Every rank regenerates every rank's tokens, routing, gate weights and
 * scales (streams seeded per rank and tensor), so each computes the rows
 * its own experts must receive, in double, from the fp8 bytes decoded by
 * the test's own OCP FP8 decoder.  Y, expert_rows and origin are poisoned
 * (0xFF) before every call; rows past the last received, and a guard
 * after every output, must stay poison.  Covered:
 *  - both fp8 types x Y in bf16, fp16, fp32 x every layout (NONE, TENSOR,
 *    ROW, BLOCK), hidden 129 and 300 (partial scale blocks), n 1 and 130,
 *    with and without gate weights, a rank without tokens (its X and
 *    scales->a NULL), every element within the bound the contract gives;
 *  - layout NONE with a bf16 dtype and Y: the same bits as
 *    MKX_Moe_dispatch_gemm (on device buffers: the same path);
 *  - a plan (_scaled_init): two starts with the scale values changed in
 *    between and the MKX_Scales struct scribbled over after _init;
 *  - errors, on the rank at fault (MKX_ERR_PEER elsewhere), no output
 *    written: a NaN or zero scale (the message names the array and the
 *    index), a NULL scale array, a layout not an enumerator or with a
 *    non-fp8 dtype, an fp8 or mixed-fp64 ytype, the plain call with fp8,
 *    ranks disagreeing on ytype or the layout (MKX_ERR_SHAPE_MISMATCH);
 *  - MKX_Moe_layer_scaled and its _init: both fp8 types, out in bf16 or
 *    fp32, X/W1 and W2 layouts alike or not, each out element within the
 *    bound that fp32 steps (two GEMMs, SwiGLU, the weighted sum) allow,
 *    computed beside the reference; a NaN in scales2->b;
 *  - transw: for both fp8 types and every layout, the weights (and block
 *    scales) stored transposed with MKX_TRANS give the bits of
 *    MKX_NO_TRANS, for dispatch (Y, expert_rows, origin; a call and a
 *    plan) and the layer (out; a call and a plan); a transw that is not an
 *    enumerator (MKX_ERR_INVALID_ARG naming it, for both calls), ranks
 *    disagreeing on it (MKX_ERR_SHAPE_MISMATCH); bf16 with MKX_TRANS
 *    within the bound, on the host path, or with --device the staged one;
 *  - dispatch with weights transposed and hidden a multiple of 16, every
 *    layout (on one node with device buffers and MKX_MOE_FP8=yes the GPU's
 *    fp8 dispatch, but for per-tensor scales on several ranks), within the
 *    bound (on the GPU's fp8 path plus 2^-10 of the sum of the products'
 *    magnitudes: mkx.h, the tensor cores' block sums);
 *  - the layer with weights transposed, hidden and ffn multiples of 16 and
 *    out in bf16 (a call and a plan): on one node with device
 *    buffers and MKX_MOE_FP8=yes the GPU's fp8 layer, whose activation is
 *    rounded to dtype by row and 128 columns, within the bound widened by
 *    that rounding;
 *  - option moe_sync=no (with blocking): the GPU fp8 dispatch cases again;
 *    a NaN or a zero in scales->b on the last rank fails every rank
 *    (MKX_ERR_INVALID_ARG naming index and rank where the GPU's verdict
 *    took it, else MKX_ERR_PEER on the others), nothing written; on a GPU
 *    path the call captured in a CUDA graph replays with its bits, and a
 *    replay with a NaN scale writes nothing and is reported by
 *    MKX_Comm_get_async_error;
 *  - --device: the cases on device buffers (fp8: the staged path, but for
 *    the fp8 layer's GPU path on one rank).
 *
 *   mpirun -np P ./test_fp8_moe [--seed N] [--device] [-v]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mkx_test.h"
#ifdef MKX_TEST_CUDA
#include "cuda_check.h"
#endif

#define BS MKX_SCALE_BLOCK_SIZE
#define GUARD 5   /* rows of poison after Y and origin */
#define MAXTOK 24 /* tokens on a rank, at most */

static MKX_Comm comm;

/* Tensors of the PRNG streams (mt_rng_init). */
enum { T_X = 1, T_IDS, T_GATE, T_SA, T_W, T_SB };

typedef struct mcase {
  MKX_Datatype dt, yt;
  MKX_Scale_layout lay;
  int64_t hidden, n, topk, ep; /* ep: experts per rank */
  int gate;                    /* topk_weight given */
  int empty;                   /* rank without tokens (-1: none) */
  int version;                 /* picks the scale values */
  int trans; /* 1: W and its block scales passed transposed (MKX_TRANS);
                0: MKX_NO_TRANS; another value is passed as transw */
} mcase;

/* One rank's inputs as the call takes them. */
typedef struct rin {
  int64_t T, kb, nb;
  uint8_t *X; /* T x hidden bytes (fp8) or uint16 bf16 values */
  int32_t *ids;
  float *gate, *sa, *sb; /* sb: this rank's experts' */
  uint8_t *W;            /* ep x hidden x n */
  int64_t na, nbs;       /* scale counts */
} rin;

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

static MKX_Trans transw_of(int trans) {
  return trans == 0 ? MKX_NO_TRANS : trans == 1 ? MKX_TRANS : (MKX_Trans)trans;
}

/* count rows x cols matrices of es-byte elements, each transposed. */
static void transpose_each(const void *src, void *dst, int64_t count,
                           int64_t rows, int64_t cols, size_t es) {
  const size_t m = (size_t)(rows * cols) * es;
  for (int64_t e = 0; e < count; e++)
    for (int64_t i = 0; i < rows; i++)
      for (int64_t j = 0; j < cols; j++)
        memcpy((char *)dst + (size_t)e * m + (size_t)(j * rows + i) * es,
               (const char *)src + (size_t)e * m + (size_t)(i * cols + j) * es,
               es);
}

/* Weights of ep experts (rows x cols each) and their scales (layout l, n
 * of them), into the call's buffers as transw says (trans == 1: mkx.h's
 * MKX_TRANS, each weight cols x rows and its block scales nb x kb). */
static void put_weights(int trans, MKX_Scale_layout l, int64_t ep, int64_t rows,
                        int64_t cols, size_t es, const void *w, void *wdst,
                        const float *sc, int64_t n, float *sdst) {
  if (trans != 1) {
    memcpy(wdst, w, (size_t)(ep * rows * cols) * es);
    memcpy(sdst, sc, sizeof(float) * (size_t)n);
    return;
  }
  transpose_each(w, wdst, ep, rows, cols, es);
  if (l == MKX_SCALE_BLOCK)
    transpose_each(sc, sdst, ep, cdiv(rows, BS), cdiv(cols, BS), sizeof(float));
  else
    memcpy(sdst, sc, sizeof(float) * (size_t)n);
}

static int64_t tokens_of(const mcase *c, int q) {
  return q == c->empty ? 0 : 3 + (q * 7 + c->hidden + c->n) % (MAXTOK - 3);
}

static int64_t count_a(const mcase *c, int64_t T, int64_t kb) {
  if (T == 0) return 0;
  return c->lay == MKX_SCALE_TENSOR  ? 1
         : c->lay == MKX_SCALE_ROW   ? T
         : c->lay == MKX_SCALE_BLOCK ? T * kb
                                     : 0;
}
static int64_t count_w(MKX_Scale_layout l, int64_t ep, int64_t rows,
                       int64_t cols) {
  return l == MKX_SCALE_TENSOR  ? ep
         : l == MKX_SCALE_ROW   ? ep * cols
         : l == MKX_SCALE_BLOCK ? ep * cdiv(rows, BS) * cdiv(cols, BS)
                                : 0;
}

/* The scale of element (i, j) of local expert e's rows x cols weight. */
static double sw_of(MKX_Scale_layout l, const float *s, int64_t e, int64_t rows,
                    int64_t cols, int64_t i, int64_t j) {
  const int64_t kb = cdiv(rows, BS), nb = cdiv(cols, BS);
  switch (l) {
    case MKX_SCALE_TENSOR:
      return s[e];
    case MKX_SCALE_ROW:
      return s[e * cols + j];
    case MKX_SCALE_BLOCK:
      return s[e * kb * nb + (i / BS) * nb + j / BS];
    default:
      return 1.0;
  }
}

static float rand_scale(mt_rng *g) {
  return (float)ldexp(1.0 + mt_rng_unit(g), (int)mt_rng_int(g, -2, 1));
}

/* A value of dtype t as stored bytes at p (fp8: a random finite byte;
 * bf16: a random value rounded). */
static void rand_elem(mt_rng *g, MKX_Datatype t, uint8_t *p) {
  if (t == MKX_BF16) {
    const uint16_t h = mt_f32_to_bf16((float)(mt_rng_sym(g) * 2.0));
    memcpy(p, &h, 2);
  } else {
    *p = mt_rand_fp8(g, t, 16.0);
  }
}
static double elem(MKX_Datatype t, const uint8_t *p) {
  if (t == MKX_BF16) {
    uint16_t h;
    memcpy(&h, p, 2);
    return mt_bf16_to_f32(h);
  }
  return mt_fp8_decode(t, *p);
}

/* Rank q's inputs (every rank can make every rank's). */
static void gen(const mcase *c, int q, rin *r) {
  const int64_t E = c->ep * mt.size, H = c->hidden;
  const size_t es = mt_type_size(c->dt);
  mt_rng g;
  memset(r, 0, sizeof *r);
  r->T = tokens_of(c, q);
  r->kb = cdiv(H, BS);
  r->nb = cdiv(c->n, BS);
  r->X = malloc((size_t)(r->T * H) * es + 1);
  mt_rng_init(&g, mt.seed, q, T_X);
  for (int64_t i = 0; i < r->T * H; i++) rand_elem(&g, c->dt, r->X + i * es);
  r->ids = malloc(sizeof(int32_t) * (size_t)(r->T * c->topk) + 1);
  mt_rng_init(&g, mt.seed, q, T_IDS);
  for (int64_t t = 0; t < r->T; t++)
    for (int64_t j = 0; j < c->topk; j++) {
      int32_t e;
      int dup;
      do { /* distinct within a token */
        e = (int32_t)mt_rng_int(&g, 0, E - 1);
        dup = 0;
        for (int64_t k = 0; k < j; k++) dup |= r->ids[t * c->topk + k] == e;
      } while (dup);
      r->ids[t * c->topk + j] = e;
    }
  r->gate = malloc(sizeof(float) * (size_t)(r->T * c->topk) + 1);
  mt_rng_init(&g, mt.seed, q, T_GATE);
  for (int64_t i = 0; i < r->T * c->topk; i++)
    r->gate[i] = (float)(0.25 + mt_rng_unit(&g));
  r->na = count_a(c, r->T, r->kb);
  r->nbs = count_w(c->lay, c->ep, H, c->n);
  r->sa = malloc(sizeof(float) * (size_t)r->na + 1);
  r->sb = malloc(sizeof(float) * (size_t)r->nbs + 1);
  mt_rng_init(&g, mt.seed + (uint64_t)c->version, q, T_SA);
  for (int64_t i = 0; i < r->na; i++) r->sa[i] = rand_scale(&g);
  mt_rng_init(&g, mt.seed + (uint64_t)c->version, q, T_SB);
  for (int64_t i = 0; i < r->nbs; i++) r->sb[i] = rand_scale(&g);
  const int64_t wn = c->ep * H * c->n;
  r->W = malloc((size_t)wn * es + 1);
  mt_rng_init(&g, mt.seed, q, T_W);
  for (int64_t i = 0; i < wn; i++) rand_elem(&g, c->dt, r->W + i * es);
}

static void rin_free(rin *r) {
  free(r->X), free(r->ids), free(r->gate), free(r->sa), free(r->sb);
  free(r->W);
}

/* The scale of token t's element h on rank r, of local expert e's (h, j). */
static double sa_of(const mcase *c, const rin *r, int64_t t, int64_t h) {
  switch (c->lay) {
    case MKX_SCALE_TENSOR:
      return r->sa[0];
    case MKX_SCALE_ROW:
      return r->sa[t];
    case MKX_SCALE_BLOCK:
      return r->sa[t * r->kb + h / BS];
    default:
      return 1.0;
  }
}
static double sb_of(const mcase *c, const rin *r, int64_t e, int64_t h,
                    int64_t j) {
  return sw_of(c->lay, r->sb, e, c->hidden, c->n, h, j);
}

/* What this rank must receive: rows grouped by local expert, each in
 * (source rank, token, slot) order, with the reference value and the size
 * of its rounding errors. */
typedef struct expect {
  int64_t rows, counts[64];
  int32_t *origin;   /* rows x 3 */
  double *ref, *abs; /* rows x n */
} expect;

static void expect_make(const mcase *c, const rin *all, const rin *me,
                        expect *x) {
  const int64_t H = c->hidden, n = c->n, first = (int64_t)mt.rank * c->ep;
  const size_t es = mt_type_size(c->dt);
  int64_t cap = 0;
  for (int q = 0; q < mt.size; q++) cap += all[q].T * c->topk;
  x->rows = 0;
  x->origin = malloc(sizeof(int32_t) * (size_t)(3 * cap) + 1);
  x->ref = malloc(sizeof(double) * (size_t)(cap * n) + 1);
  x->abs = malloc(sizeof(double) * (size_t)(cap * n) + 1);
  for (int64_t e = 0; e < c->ep; e++) {
    x->counts[e] = 0;
    for (int q = 0; q < mt.size; q++)
      for (int64_t t = 0; t < all[q].T; t++)
        for (int64_t j = 0; j < c->topk; j++) {
          if (all[q].ids[t * c->topk + j] != first + e) continue;
          const double w = c->gate ? all[q].gate[t * c->topk + j] : 1.0;
          const int64_t row = x->rows++;
          x->counts[e]++;
          x->origin[3 * row] = q;
          x->origin[3 * row + 1] = (int32_t)t;
          x->origin[3 * row + 2] = (int32_t)j;
          for (int64_t col = 0; col < n; col++) {
            double s = 0, a = 0;
            for (int64_t h = 0; h < H; h++) {
              const double xv = elem(c->dt, all[q].X + (t * H + h) * es) *
                                sa_of(c, &all[q], t, h);
              const double wv =
                  elem(c->dt, me->W + ((e * H + h) * n + col) * es) *
                  sb_of(c, me, e, h, col);
              s += xv * wv;
              a += fabs(xv * wv);
            }
            x->ref[row * n + col] = w * s;
            x->abs[row * n + col] = fabs(w) * a;
          }
        }
  }
}

static void expect_free(expect *x) {
  free(x->origin), free(x->ref), free(x->abs);
}

/* mkx.h: each element times its scale rounded to fp32, fp32
 * accumulation, the gate weight applied in fp32, one rounding to ytype:
 * |Y - ref| <= eps_y |ref| + (1 + eps_y) (hidden + 12) 2^-23 S + tiny_y,
 * S the sum of the products' magnitudes (times |w|); eps_y twice ytype's
 * unit roundoff, tiny_y its subnormal spacing. */
static double bound_of(MKX_Datatype yt, double ref, double S, int64_t H) {
  const double e = yt == MKX_BF16   ? ldexp(1, -8)
                   : yt == MKX_FP16 ? ldexp(1, -10)
                                    : ldexp(1, -23);
  const double tiny = yt == MKX_FP16 ? ldexp(1, -24) : ldexp(1, -133);
  return e * fabs(ref) + (1 + e) * (double)(H + 12) * ldexp(1, -23) * S + tiny;
}

/* ---- one call ------------------------------------------------------------ */

typedef struct bufs {
  tbuf X, ids, gate, W, Y, rows, origin, sa, sb;
  int64_t y_rows;
} bufs;

static void bufs_make(const mcase *c, const rin *me, int64_t y_rows, bufs *b) {
  const size_t es = mt_type_size(c->dt), ys = mt_type_size(c->yt);
  memset(b, 0, sizeof *b);
  b->y_rows = y_rows;
  tbuf_alloc(&b->X, (size_t)(me->T * c->hidden) * es);
  tbuf_alloc(&b->ids, sizeof(int32_t) * (size_t)(me->T * c->topk));
  tbuf_alloc(&b->gate, sizeof(float) * (size_t)(me->T * c->topk));
  tbuf_alloc(&b->W, (size_t)(c->ep * c->hidden * c->n) * es);
  tbuf_alloc(&b->Y, (size_t)((y_rows + GUARD) * c->n) * ys);
  tbuf_alloc(&b->rows, sizeof(int64_t) * (size_t)(c->ep + GUARD));
  tbuf_alloc(&b->origin, sizeof(int32_t) * 3 * (size_t)(y_rows + GUARD));
  tbuf_alloc(&b->sa, sizeof(float) * (size_t)(me->na + GUARD));
  tbuf_alloc(&b->sb, sizeof(float) * (size_t)(me->nbs + GUARD));
  memcpy(b->X.host, me->X, b->X.bytes);
  memcpy(b->ids.host, me->ids, b->ids.bytes);
  memcpy(b->gate.host, me->gate, b->gate.bytes);
  memcpy(b->sa.host, me->sa, sizeof(float) * (size_t)me->na);
  put_weights(c->trans, c->lay, c->ep, c->hidden, c->n, es, me->W, b->W.host,
              me->sb, me->nbs, b->sb.host);
  tbuf_upload(&b->X), tbuf_upload(&b->ids), tbuf_upload(&b->gate);
  tbuf_upload(&b->W), tbuf_upload(&b->sa), tbuf_upload(&b->sb);
}

static void bufs_free(bufs *b) {
  tbuf_free(&b->X), tbuf_free(&b->ids), tbuf_free(&b->gate);
  tbuf_free(&b->W), tbuf_free(&b->Y), tbuf_free(&b->rows);
  tbuf_free(&b->origin), tbuf_free(&b->sa), tbuf_free(&b->sb);
}

static void poison_outputs(bufs *b) {
  tbuf_poison(&b->Y), tbuf_poison(&b->rows), tbuf_poison(&b->origin);
}

static MKX_Scales scales_of(const mcase *c, const rin *me, const bufs *b) {
  MKX_Scales s = {c->lay, NULL, NULL, NULL};
  if (c->lay == MKX_SCALE_NONE) return s;
  s.a = me->na ? tbuf_ptr(&b->sa) : NULL; /* NULL: a rank without tokens */
  s.b = tbuf_ptr(&b->sb);
  return s;
}

static int call_on(const mcase *c, const rin *me, bufs *b, const MKX_Scales *s,
                   MKX_Stream st) {
  return MKX_Moe_dispatch_gemm_scaled(
      me->T ? tbuf_ptr(&b->X) : NULL, me->T, c->hidden,
      me->T ? tbuf_ptr(&b->ids) : NULL,
      c->gate && me->T ? tbuf_ptr(&b->gate) : NULL, c->topk, c->ep * mt.size,
      tbuf_ptr(&b->W), c->n, transw_of(c->trans), tbuf_ptr(&b->Y), b->y_rows,
      tbuf_ptr(&b->rows), tbuf_ptr(&b->origin), c->dt, c->yt, s, comm, st);
}

static int call(const mcase *c, const rin *me, bufs *b, const MKX_Scales *s) {
  return call_on(c, me, b, s, NULL);
}

static const char *lname(MKX_Scale_layout l) {
  static const char *const n[] = {"NONE", "TENSOR", "ROW", "BLOCK"};
  return l >= MKX_SCALE_NONE && l <= MKX_SCALE_BLOCK ? n[l] : "?";
}

static void describe(const mcase *c, char *s, size_t len) {
  snprintf(s, len, "%s -> %s, %s, hidden %lld, n %lld, %lld experts/rank%s%s%s",
           mt_type_name(c->dt), mt_type_name(c->yt), lname(c->lay),
           (long long)c->hidden, (long long)c->n, (long long)c->ep,
           c->gate ? ", gates" : "",
           c->empty >= 0 ? ", a rank without tokens" : "",
           c->trans == 1 ? ", MKX_TRANS" : "");
}

/* mkx.h: on the GPU's fp8 path each 128-deep K block of products is
 * summed by the tensor cores in fewer bits than fp32, within 2^-10 of the
 * block's sum of magnitudes: the last call on comm took it. */
static int gpu_fp8(const mcase *c) {
  const char *name = NULL;
  int cap = 0, ctas = 0;
  if (c->dt != MKX_FP8_E4M3 && c->dt != MKX_FP8_E5M2) return 0;
  if (MKX_Comm_get_last_path(comm, &name, &cap, &ctas) != MKX_SUCCESS || !name)
    return 0;
  return strcmp(name, "host") && strcmp(name, "staged");
}

/* Y, expert_rows and origin against the expectation; the rest poison. */
static void check_outputs(const mcase *c, bufs *b, const expect *x,
                          const char *what) {
  const double tc = gpu_fp8(c) ? ldexp(1, -10) : 0;
  tbuf_download(&b->Y), tbuf_download(&b->rows), tbuf_download(&b->origin);
  const int64_t *rows = b->rows.host;
  const int32_t *org = b->origin.host;
  int bad_counts = 0, bad_org = 0, bad_y = 0, written = 0;
  double worst = 0;
  for (int64_t e = 0; e < c->ep; e++) bad_counts += rows[e] != x->counts[e];
  for (int64_t e = c->ep; e < c->ep + GUARD; e++)
    written += !mt_is_poison(b->rows.host, MKX_FP64, (size_t)e);
  for (int64_t i = 0; i < 3 * x->rows; i++) bad_org += org[i] != x->origin[i];
  for (int64_t i = 0; i < x->rows * c->n; i++) {
    const double y = mt_get(b->Y.host, c->yt, (size_t)i);
    const double d = fabs(y - x->ref[i]);
    const double lim =
        bound_of(c->yt, x->ref[i], x->abs[i], c->hidden) + tc * x->abs[i];
    if (!(d <= lim)) bad_y++;
    if (lim > 0 && d / lim > worst) worst = d / lim;
  }
  for (int64_t i = x->rows * c->n; i < (b->y_rows + GUARD) * c->n; i++)
    written += !mt_is_poison(b->Y.host, c->yt, (size_t)i);
  for (int64_t i = 3 * x->rows; i < 3 * (b->y_rows + GUARD); i++)
    written += org[i] != -1;
  CHECK(!bad_counts && !bad_org && !bad_y && !written,
        "%s: %lld rows: %d counts, %d origin entries, %d elements of Y "
        "wrong (worst at %.2f of the bound), %d written past the rows",
        what, (long long)x->rows, bad_counts, bad_org, bad_y, worst, written);
}

static void run_case(const mcase *c) {
  char what[256];
  describe(c, what, sizeof what);
  rin *all = calloc((size_t)mt.size, sizeof *all);
  for (int q = 0; q < mt.size; q++) gen(c, q, &all[q]);
  const rin *me = &all[mt.rank];
  expect x;
  expect_make(c, all, me, &x);
  bufs b;
  bufs_make(c, me, x.rows + 2, &b);
  poison_outputs(&b);
  const MKX_Scales s = scales_of(c, me, &b);
  const int rc = call(c, me, &b, &s);
  CHECK_RC(rc, MKX_SUCCESS, "%s: %s", what, MKX_Get_last_error());
  if (rc == MKX_SUCCESS) check_outputs(c, &b, &x, what);
  bufs_free(&b);
  expect_free(&x);
  for (int q = 0; q < mt.size; q++) rin_free(&all[q]);
  free(all);
}

static void matrix(int stride) {
  const MKX_Datatype dts[2] = {MKX_FP8_E4M3, MKX_FP8_E5M2};
  const MKX_Datatype yts[3] = {MKX_BF16, MKX_FP16, MKX_FP32};
  const int64_t hs[2] = {129, 300}, ns[2] = {130, 1};
  int i = 0;
  for (int d = 0; d < 2; d++)
    for (int y = 0; y < 3; y++)
      for (int L = MKX_SCALE_NONE; L <= MKX_SCALE_BLOCK; L++)
        for (int v = 0; v < 2; v++, i++) {
          if (i % stride) continue;
          const mcase c = {
              dts[d], yts[y],          (MKX_Scale_layout)L,
              hs[v],  ns[(i / 2) % 2], 2,
              2 + v,  (i / 3) % 2,     i % 5 == 0 ? mt.size - 1 : -1,
              0};
          run_case(&c);
        }
}

/* Weights transposed, hidden a multiple of 16: on one node with device
 * buffers and MKX_MOE_FP8=yes the GPU's fp8 dispatch, elsewhere the host's
 * or the staged path; every layout and Y type, within the same bound. */
static void gpu8_matrix(void) {
  const MKX_Datatype yts[3] = {MKX_BF16, MKX_FP16, MKX_FP32};
  for (int L = MKX_SCALE_NONE; L <= MKX_SCALE_BLOCK; L++) {
    const mcase c = {.dt = L == MKX_SCALE_ROW ? MKX_FP8_E5M2 : MKX_FP8_E4M3,
                     .yt = yts[L % 3],
                     .lay = (MKX_Scale_layout)L,
                     .hidden = L % 2 ? 256 : 400,
                     .n = L % 2 ? 130 : 72,
                     .topk = 2,
                     .ep = 3,
                     .gate = L != MKX_SCALE_TENSOR,
                     .empty = L == MKX_SCALE_BLOCK ? mt.size - 1 : -1,
                     .trans = 1};
    run_case(&c);
  }
}

/* ---- the same bits as the plain call ------------------------------------- */

static void same_as_plain(void) {
  const mcase c = {MKX_BF16, MKX_BF16, MKX_SCALE_NONE, 200, 70, 2, 2, 1, -1, 0};
  rin *all = calloc((size_t)mt.size, sizeof *all);
  for (int q = 0; q < mt.size; q++) gen(&c, q, &all[q]);
  const rin *me = &all[mt.rank];
  int64_t cap = 0;
  for (int q = 0; q < mt.size; q++) cap += all[q].T * c.topk;
  bufs b1, b2;
  bufs_make(&c, me, cap, &b1);
  bufs_make(&c, me, cap, &b2);
  poison_outputs(&b1), poison_outputs(&b2);
  const int rc1 = call(&c, me, &b1, NULL);
  const int rc2 = MKX_Moe_dispatch_gemm(
      tbuf_ptr(&b2.X), me->T, c.hidden, tbuf_ptr(&b2.ids), tbuf_ptr(&b2.gate),
      c.topk, c.ep * mt.size, tbuf_ptr(&b2.W), c.n, tbuf_ptr(&b2.Y), cap,
      tbuf_ptr(&b2.rows), tbuf_ptr(&b2.origin), c.dt, comm, NULL);
  tbuf_download(&b1.Y), tbuf_download(&b2.Y);
  CHECK(rc1 == MKX_SUCCESS && rc2 == MKX_SUCCESS &&
            !memcmp(b1.Y.host, b2.Y.host, b1.Y.bytes),
        "bf16, layout NONE (scales NULL), Y bf16: the same bits as "
        "MKX_Moe_dispatch_gemm (rc %d, %d)",
        rc1, rc2);
  bufs_free(&b1), bufs_free(&b2);
  for (int q = 0; q < mt.size; q++) rin_free(&all[q]);
  free(all);
}

/* ---- transposed weights --------------------------------------------------- */

/* Case c's call on fresh buffers (outputs poisoned first), its outputs
 * downloaded into b. */
static int run_into(const mcase *c, const rin *me, int64_t y_rows, bufs *b) {
  bufs_make(c, me, y_rows, b);
  poison_outputs(b);
  const MKX_Scales s = scales_of(c, me, b);
  const int rc = call(c, me, b, &s);
  tbuf_download(&b->Y), tbuf_download(&b->rows), tbuf_download(&b->origin);
  return rc;
}

/* mkx.h: each expert's weight stored n x hidden (and its block scales nb
 * x kb) with MKX_TRANS gives the bits of MKX_NO_TRANS.  Y in fp32, where
 * a difference in the products shows. */
static void trans_case(MKX_Datatype dt, MKX_Scale_layout lay, int empty) {
  mcase c = {dt, MKX_FP32, lay, 300, 130, 2, 2, 1, empty, 0, 0};
  char what[256];
  rin *all = calloc((size_t)mt.size, sizeof *all);
  for (int q = 0; q < mt.size; q++) gen(&c, q, &all[q]);
  const rin *me = &all[mt.rank];
  expect x;
  expect_make(&c, all, me, &x);
  bufs b0, b1;
  const int rc0 = run_into(&c, me, x.rows + 2, &b0);
  c.trans = 1;
  describe(&c, what, sizeof what);
  const int rc1 = run_into(&c, me, x.rows + 2, &b1);
  CHECK_RC(rc1, MKX_SUCCESS, "%s: %s", what, MKX_Get_last_error());
  if (rc1 == MKX_SUCCESS) check_outputs(&c, &b1, &x, what);
  CHECK(rc0 == MKX_SUCCESS && rc1 == MKX_SUCCESS &&
            !memcmp(b0.Y.host, b1.Y.host, b0.Y.bytes) &&
            !memcmp(b0.rows.host, b1.rows.host, b0.rows.bytes) &&
            !memcmp(b0.origin.host, b1.origin.host, b0.origin.bytes),
        "%s: the bits of MKX_NO_TRANS (rc %d, %d)", what, rc0, rc1);
  bufs_free(&b0), bufs_free(&b1);
  expect_free(&x);
  for (int q = 0; q < mt.size; q++) rin_free(&all[q]);
  free(all);
}

static void trans_matrix(void) {
  for (int d = 0; d < 2; d++)
    for (int L = MKX_SCALE_NONE; L <= MKX_SCALE_BLOCK; L++)
      trans_case(d ? MKX_FP8_E5M2 : MKX_FP8_E4M3, (MKX_Scale_layout)L,
                 L == MKX_SCALE_ROW ? mt.size - 1 : -1);
}

/* The path the last call on comm took is `want`. */
static void check_path(const char *want, const char *what) {
  const char *name = NULL;
  int cap = -1, ctas = -1;
  const int rc = MKX_Comm_get_last_path(comm, &name, &cap, &ctas);
  CHECK(rc == MKX_SUCCESS && name && !strcmp(name, want),
        "%s: the %s path (took \"%s\")", what, want, name ? name : "(null)");
}

/* ---- plans ---------------------------------------------------------------- */

static void plan_case(MKX_Scale_layout lay, int trans) {
  mcase c = {MKX_FP8_E4M3, MKX_BF16, lay, 300, 130, 2, 2, 1, -1, 0, trans};
  char what[256];
  rin *all = calloc((size_t)mt.size, sizeof *all);
  for (int q = 0; q < mt.size; q++) gen(&c, q, &all[q]);
  expect x;
  expect_make(&c, all, &all[mt.rank], &x);
  bufs b;
  bufs_make(&c, &all[mt.rank], x.rows + 2, &b);
  MKX_Scales s = scales_of(&c, &all[mt.rank], &b);
  const rin *me = &all[mt.rank];
  MKX_Request rq = NULL;
  int rc = MKX_Moe_dispatch_gemm_scaled_init(
      me->T ? tbuf_ptr(&b.X) : NULL, me->T, c.hidden,
      me->T ? tbuf_ptr(&b.ids) : NULL, me->T ? tbuf_ptr(&b.gate) : NULL, c.topk,
      c.ep * mt.size, tbuf_ptr(&b.W), c.n, transw_of(c.trans), tbuf_ptr(&b.Y),
      b.y_rows, tbuf_ptr(&b.rows), tbuf_ptr(&b.origin), c.dt, c.yt, &s, comm,
      MPI_INFO_NULL, &rq);
  CHECK_RC(rc, MKX_SUCCESS, "MKX_Moe_dispatch_gemm_scaled_init (%s%s): %s",
           lname(lay), trans ? ", MKX_TRANS" : "", MKX_Get_last_error());
  memset(&s, 0xA5, sizeof s); /* copied at _init: never read again */
  for (int v = 0; rc == MKX_SUCCESS && v < 2; v++) {
    if (v == 1) { /* new scale values in the bound arrays */
      c.version = 1;
      for (int q = 0; q < mt.size; q++) rin_free(&all[q]), gen(&c, q, &all[q]);
      expect_free(&x);
      expect_make(&c, all, &all[mt.rank], &x);
      const rin *r = &all[mt.rank];
      memcpy(b.sa.host, r->sa, sizeof(float) * (size_t)r->na);
      put_weights(c.trans, c.lay, c.ep, c.hidden, c.n, mt_type_size(c.dt), r->W,
                  b.W.host, r->sb, r->nbs, b.sb.host);
      tbuf_upload(&b.sa), tbuf_upload(&b.sb);
    }
    poison_outputs(&b);
    const int src = MKX_Start(rq, NULL);
    CHECK_RC(src, MKX_SUCCESS, "MKX_Start %d of the %s plan: %s", v + 1,
             lname(lay), MKX_Get_last_error());
    snprintf(what, sizeof what, "the %s plan%s, start %d%s", lname(lay),
             trans ? " (MKX_TRANS)" : "", v + 1,
             v ? " (scale values changed)" : "");
    if (src == MKX_SUCCESS) check_outputs(&c, &b, &x, what);
  }
  if (rq) CHECK_RC(MKX_Request_free(&rq), MKX_SUCCESS, "MKX_Request_free");
  bufs_free(&b);
  expect_free(&x);
  for (int q = 0; q < mt.size; q++) rin_free(&all[q]);
  free(all);
}

/* ---- errors ---------------------------------------------------------------- */

enum {
  BAD_NAN_A,
  BAD_ZERO_B,
  BAD_NULL_A,
  BAD_LAYOUT,
  BAD_LAYOUT_BF16,
  BAD_YTYPE_FP8,
  BAD_YTYPE_FP64,
  BAD_PLAIN_FP8,
  BAD_YTYPE_DISAGREE,
  BAD_LAYOUT_DISAGREE,
  BAD_TRANSW,
  BAD_TRANSW_DISAGREE,
  BAD_COUNT
};

static const char *const bad_names[] = {"a NaN in scales->a",
                                        "a zero in scales->b",
                                        "scales->a NULL",
                                        "a layout not an enumerator",
                                        "a layout with a bf16 dtype",
                                        "an fp8 ytype",
                                        "ytype fp64 with fp8",
                                        "the plain call with fp8",
                                        "ranks disagreeing on ytype",
                                        "ranks disagreeing on the layout",
                                        "a transw not an enumerator",
                                        "ranks disagreeing on transw"};

/* The case's call made bad on rank `bad` (every rank for the kinds that
 * every rank makes alike); the codes and messages expected, nothing
 * written. */
static void bad_case(int kind) {
  const int agreed = kind == BAD_YTYPE_DISAGREE ||
                     kind == BAD_LAYOUT_DISAGREE || kind == BAD_TRANSW_DISAGREE;
  const int all_bad = kind == BAD_LAYOUT || kind == BAD_LAYOUT_BF16 ||
                      kind == BAD_YTYPE_FP8 || kind == BAD_YTYPE_FP64 ||
                      kind == BAD_PLAIN_FP8;
  if (agreed && mt.size < 2) return;
  const int bad = mt.size - 1;
  mcase c = {MKX_FP8_E5M2, MKX_FP32, MKX_SCALE_BLOCK, 150, 300, 2, 2, 1, -1, 0};
  if (kind == BAD_LAYOUT_BF16) c.dt = MKX_BF16;
  if (kind == BAD_NULL_A) c.lay = MKX_SCALE_ROW;
  rin *all = calloc((size_t)mt.size, sizeof *all);
  for (int q = 0; q < mt.size; q++) gen(&c, q, &all[q]);
  rin *me = &all[mt.rank];
  bufs b;
  bufs_make(&c, me, 4 * MAXTOK * mt.size, &b);
  poison_outputs(&b);
  MKX_Scales s = scales_of(&c, me, &b);
  mcase cc = c;
  const int mine = agreed ? mt.rank == 0 : all_bad || mt.rank == bad;
  int want = MKX_ERR_PEER, rc;
  const char *needle = NULL;
  char transw_msg[64];
  snprintf(transw_msg, sizeof transw_msg, "transw = 7 on rank %d", bad);
  if (mine) switch (kind) {
      case BAD_NAN_A:
        ((float *)b.sa.host)[0] = NAN;
        tbuf_upload(&b.sa);
        want = MKX_ERR_INVALID_ARG, needle = "scales->a[0]";
        break;
      case BAD_ZERO_B:
        ((float *)b.sb.host)[5] = 0.0f;
        tbuf_upload(&b.sb);
        want = MKX_ERR_INVALID_ARG, needle = "scales->b[5]";
        break;
      case BAD_NULL_A:
        s.a = NULL;
        want = MKX_ERR_NULL_POINTER, needle = "scales->a";
        break;
      case BAD_LAYOUT:
        s.layout = (MKX_Scale_layout)7;
        want = MKX_ERR_INVALID_ARG, needle = "layout";
        break;
      case BAD_LAYOUT_BF16:
        want = MKX_ERR_INVALID_ARG, needle = "fp8";
        break;
      case BAD_YTYPE_FP8:
        cc.yt = MKX_FP8_E4M3;
        want = MKX_ERR_UNSUPPORTED, needle = "ytype";
        break;
      case BAD_YTYPE_FP64:
        cc.yt = MKX_FP64;
        want = MKX_ERR_UNSUPPORTED, needle = "ytype";
        break;
      case BAD_PLAIN_FP8:
        want = MKX_ERR_UNSUPPORTED, needle = "fp8";
        break;
      case BAD_YTYPE_DISAGREE:
        cc.yt = MKX_BF16;
        break;
      case BAD_LAYOUT_DISAGREE:
        s.layout = MKX_SCALE_TENSOR;
        break;
      case BAD_TRANSW:
        cc.trans = 7;
        want = MKX_ERR_INVALID_ARG, needle = transw_msg;
        break;
      case BAD_TRANSW_DISAGREE:
        cc.trans = 1;
        break;
    }
  if (agreed) want = MKX_ERR_SHAPE_MISMATCH, needle = NULL;
  if (kind == BAD_PLAIN_FP8)
    rc = MKX_Moe_dispatch_gemm(
        tbuf_ptr(&b.X), me->T, c.hidden, tbuf_ptr(&b.ids), NULL, c.topk,
        c.ep * mt.size, tbuf_ptr(&b.W), c.n, tbuf_ptr(&b.Y), b.y_rows,
        tbuf_ptr(&b.rows), tbuf_ptr(&b.origin), c.dt, comm, NULL);
  else
    rc = call(&cc, me, &b, &s);
  const char *msg = MKX_Get_last_error();
  tbuf_download(&b.Y), tbuf_download(&b.rows), tbuf_download(&b.origin);
  int written = 0;
  for (size_t i = 0; i < b.Y.bytes; i++)
    written += ((uint8_t *)b.Y.host)[i] != 0xFF;
  for (size_t i = 0; i < b.rows.bytes; i++)
    written += ((uint8_t *)b.rows.host)[i] != 0xFF;
  for (size_t i = 0; i < b.origin.bytes; i++)
    written += ((uint8_t *)b.origin.host)[i] != 0xFF;
  CHECK(rc == want && (!needle || strstr(msg, needle)) && !written,
        "%s (on %s): rc %d (want %d), message \"%s\" (naming %s), %d bytes "
        "written",
        bad_names[kind],
        all_bad  ? "every rank"
        : agreed ? "rank 0"
                 : "the last rank",
        rc, want, msg, needle ? needle : "-", written);
  bufs_free(&b);
  for (int q = 0; q < mt.size; q++) rin_free(&all[q]);
  free(all);
}

/* ---- the layer ------------------------------------------------------------ */

typedef struct lcase {
  MKX_Datatype dt, ot;
  MKX_Scale_layout lay, lay2;
  int64_t hidden, ffn, topk, ep;
  int empty; /* rank without tokens (-1: none) */
  int trans; /* as mcase's: W1, W2 and their block scales transposed */
  int act8;  /* the activation may be rounded to dt, a scale per row and
                128 columns (mkx.h: the fp8 layer's GPU path) */
} lcase;

/* Rank q's layer inputs: its tokens (as the dispatch's, n = 2 ffn for
 * W1 and its scales) and W2 with scales2's b. */
typedef struct lin {
  rin r; /* X, ids, gate, sa; W = W1, sb = W1's scales */
  uint8_t *W2;
  float *sb2;
  int64_t nb2;
} lin;

static mcase dispatch_view(const lcase *c) {
  return (mcase){c->dt, c->ot, c->lay,   c->hidden, 2 * c->ffn, c->topk,
                 c->ep, 1,     c->empty, 0,         c->trans};
}

static void lgen(const lcase *c, int q, lin *l) {
  const mcase d = dispatch_view(c);
  const size_t es = mt_type_size(c->dt);
  mt_rng g;
  gen(&d, q, &l->r);
  const int64_t n = c->ep * c->ffn * c->hidden;
  l->W2 = malloc((size_t)n * es + 1);
  mt_rng_init(&g, mt.seed, q, T_SB + 1);
  for (int64_t i = 0; i < n; i++) rand_elem(&g, c->dt, l->W2 + i * es);
  l->nb2 = count_w(c->lay2, c->ep, c->ffn, c->hidden);
  l->sb2 = malloc(sizeof(float) * (size_t)l->nb2 + 1);
  mt_rng_init(&g, mt.seed, q, T_SB + 2);
  for (int64_t i = 0; i < l->nb2; i++) l->sb2[i] = rand_scale(&g);
}

static void lin_free(lin *l) {
  rin_free(&l->r);
  free(l->W2), free(l->sb2);
}

/* Local expert e of rank q's W1' and W2' (values times scales), dense. */
static void dequant(const lcase *c, const lin *l, int64_t e, double *w1,
                    double *w2) {
  const int64_t H = c->hidden, F = c->ffn;
  const size_t es = mt_type_size(c->dt);
  for (int64_t h = 0; h < H; h++)
    for (int64_t j = 0; j < 2 * F; j++)
      w1[h * 2 * F + j] = elem(c->dt, l->r.W + ((e * H + h) * 2 * F + j) * es) *
                          sw_of(c->lay, l->r.sb, e, H, 2 * F, h, j);
  for (int64_t f = 0; f < F; f++)
    for (int64_t h = 0; h < H; h++)
      w2[f * H + h] = elem(c->dt, l->W2 + ((e * F + f) * H + h) * es) *
                      sw_of(c->lay2, l->sb2, e, F, H, f, h);
}

/* The activation (act[0, F), its error bound in act[F, 2F)) rounded to
 * out's type, then to dt with a scale per 128 columns, s = the group's
 * largest magnitude / dt's largest finite value: half a unit in the last
 * place of each (relative 2^-4 for e4m3, 2^-3 for e5m2; 2^-9 for bf16,
 * 2^-11 for fp16), or half of dt's least subnormal times s. */
static void act8_error(const lcase *c, double *act) {
  const int64_t F = c->ffn;
  const int e4 = c->dt == MKX_FP8_E4M3;
  const double rel = ldexp(1, e4 ? -4 : -3) +
                     ldexp(1, c->ot == MKX_FP16 ? -11 : -9),
               top = e4 ? 448 : 57344, sub = ldexp(1, e4 ? -10 : -17);
  for (int64_t g0 = 0; g0 < F; g0 += 128) {
    double amax = 0;
    for (int64_t f = g0; f < F && f < g0 + 128; f++)
      amax = fmax(amax, fabs(act[f]) + act[F + f]);
    for (int64_t f = g0; f < F && f < g0 + 128; f++)
      act[F + f] += rel * (fabs(act[f]) + act[F + f]) + sub * amax / top;
  }
}

/* out of this rank's tokens, and the bound of each element: the fp32
 * steps' errors carried beside the values (u = 2^-24): x W1 within
 * (hidden + 4) u S; the SwiGLU within |silu'(g)| eg |up| + |silu(g)| eu +
 * 4 u |act| (|silu'| <= 1.1); x W2 within the sum of those times |w2|
 * plus (ffn + 4) u S; the weighted sum within its terms' bounds plus
 * (topk + 2) u S.  Twice that, and out's rounding, are allowed. */
static void layer_ref(const lcase *c, const lin *all, double *ref,
                      double *bound) {
  const int64_t H = c->hidden, F = c->ffn;
  const double u = ldexp(1, -24);
  const lin *me = &all[mt.rank];
  const mcase d = dispatch_view(c);
  double *w1 = malloc(sizeof(double) * (size_t)(H * 2 * F));
  double *w2 = malloc(sizeof(double) * (size_t)(F * H));
  double *hv = malloc(sizeof(double) * (size_t)(2 * F) * 2);
  double *act = malloc(sizeof(double) * (size_t)F * 2);
  double *xv = malloc(sizeof(double) * (size_t)H);
  for (int64_t i = 0; i < me->r.T * H; i++) ref[i] = bound[i] = 0;
  double *esum = calloc((size_t)(H + 1), sizeof(double));
  for (int64_t t = 0; t < me->r.T; t++) {
    for (int64_t h = 0; h < H; h++)
      xv[h] = elem(c->dt, me->r.X + (t * H + h) * mt_type_size(c->dt)) *
              sa_of(&d, &me->r, t, h);
    for (int64_t h = 0; h < H; h++) esum[h] = 0;
    for (int64_t j = 0; j < c->topk; j++) {
      const int32_t ge = me->r.ids[t * c->topk + j];
      const double w = me->r.gate[t * c->topk + j];
      dequant(c, &all[ge / c->ep], ge % c->ep, w1, w2);
      for (int64_t k = 0; k < 2 * F; k++) {
        double v = 0, a = 0;
        for (int64_t h = 0; h < H; h++) {
          v += xv[h] * w1[h * 2 * F + k];
          a += fabs(xv[h] * w1[h * 2 * F + k]);
        }
        hv[k] = v;
        hv[2 * F + k] = (double)(H + 4) * u * a;
      }
      for (int64_t f = 0; f < F; f++) {
        const double g = hv[f], up = hv[F + f];
        const double sg = 1.0 / (1.0 + exp(-g)), si = g * sg;
        act[f] = si * up;
        act[F + f] = 1.1 * hv[2 * F + f] * fabs(up) + fabs(si) * hv[3 * F + f] +
                     4 * u * fabs(act[f]);
      }
      if (c->act8) act8_error(c, act);
      for (int64_t h = 0; h < H; h++) {
        double y = 0, a = 0, e = 0;
        for (int64_t f = 0; f < F; f++) {
          y += act[f] * w2[f * H + h];
          a += fabs(act[f] * w2[f * H + h]);
          e += act[F + f] * fabs(w2[f * H + h]);
        }
        e += (double)(F + 4) * u * a;
        ref[t * H + h] += w * y;
        esum[h] += fabs(w) * e + (double)(c->topk + 2) * u * fabs(w * y);
      }
    }
    for (int64_t h = 0; h < H; h++) bound[t * H + h] = 2 * esum[h];
  }
  free(w1), free(w2), free(hv), free(act), free(xv), free(esum);
}

/* Case c's layer call (or a plan's start) on fresh buffers, the weights
 * passed as c->trans says; out (T + GUARD rows, poisoned first)
 * downloaded into *out, which the caller frees. */
static int layer_run(const lcase *c, const lin *me, int plan, tbuf *out) {
  const mcase d = dispatch_view(c);
  const int64_t H = c->hidden, T = me->r.T;
  const size_t es = mt_type_size(c->dt);
  bufs b;
  bufs_make(&d, &me->r, 0, &b);
  tbuf W2, sb2;
  tbuf_alloc(&W2, (size_t)(c->ep * c->ffn * H) * es);
  tbuf_alloc(&sb2, sizeof(float) * (size_t)(me->nb2 + GUARD));
  tbuf_alloc(out, (size_t)((T + GUARD) * H) * mt_type_size(c->ot));
  put_weights(c->trans, c->lay2, c->ep, c->ffn, H, es, me->W2, W2.host, me->sb2,
              me->nb2, sb2.host);
  tbuf_upload(&W2), tbuf_upload(&sb2), tbuf_poison(out);
  const MKX_Scales s = scales_of(&d, &me->r, &b);
  const MKX_Scales s2 = {
      c->lay2, NULL, c->lay2 == MKX_SCALE_NONE ? NULL : tbuf_ptr(&sb2), NULL};
  const void *X = T ? tbuf_ptr(&b.X) : NULL;
  const int32_t *ids = T ? tbuf_ptr(&b.ids) : NULL;
  const float *gate = T ? tbuf_ptr(&b.gate) : NULL;
  void *o = T ? tbuf_ptr(out) : NULL;
  int rc;
  if (plan) {
    MKX_Request rq = NULL;
    rc = MKX_Moe_layer_scaled_init(X, T, H, ids, gate, c->topk, c->ep * mt.size,
                                   tbuf_ptr(&b.W), tbuf_ptr(&W2), c->ffn,
                                   transw_of(c->trans), o, c->dt, c->ot, &s,
                                   &s2, comm, MPI_INFO_NULL, &rq);
    if (rc == MKX_SUCCESS) rc = MKX_Start(rq, NULL);
    if (rq) MKX_Request_free(&rq);
  } else {
    rc = MKX_Moe_layer_scaled(X, T, H, ids, gate, c->topk, c->ep * mt.size,
                              tbuf_ptr(&b.W), tbuf_ptr(&W2), c->ffn,
                              transw_of(c->trans), o, c->dt, c->ot, &s, &s2,
                              comm, NULL);
  }
  tbuf_download(out);
  bufs_free(&b);
  tbuf_free(&W2), tbuf_free(&sb2);
  return rc;
}

static void layer_describe(const lcase *c, int plan, char *s, size_t len) {
  snprintf(s, len, "layer%s %s -> %s, %s / %s, hidden %lld, ffn %lld%s%s",
           plan ? " plan" : "", mt_type_name(c->dt), mt_type_name(c->ot),
           lname(c->lay), lname(c->lay2), (long long)c->hidden,
           (long long)c->ffn, c->empty >= 0 ? ", a rank without tokens" : "",
           c->trans == 1 ? ", MKX_TRANS" : "");
}

static void layer_case(const lcase *c, int plan) {
  char what[256];
  layer_describe(c, plan, what, sizeof what);
  lin *all = calloc((size_t)mt.size, sizeof *all);
  for (int q = 0; q < mt.size; q++) lgen(c, q, &all[q]);
  const lin *me = &all[mt.rank];
  const int64_t H = c->hidden, T = me->r.T;
  double *ref = malloc(sizeof(double) * (size_t)(T * H) + 1);
  double *bnd = malloc(sizeof(double) * (size_t)(T * H) + 1);
  layer_ref(c, all, ref, bnd);
  tbuf out;
  const int rc = layer_run(c, me, plan, &out);
  CHECK_RC(rc, MKX_SUCCESS, "%s: %s", what, MKX_Get_last_error());
  if (rc == MKX_SUCCESS) {
    int bad = 0, written = 0;
    double worst = 0;
    const double e = c->ot == MKX_BF16   ? ldexp(1, -8)
                     : c->ot == MKX_FP16 ? ldexp(1, -11)
                                         : ldexp(1, -23);
    for (int64_t i = 0; i < T * H; i++) {
      const double d2 = fabs(mt_get(out.host, c->ot, (size_t)i) - ref[i]);
      const double lim = bnd[i] + e * fabs(ref[i]) + ldexp(1, -133);
      if (!(d2 <= lim)) bad++;
      if (d2 / lim > worst) worst = d2 / lim;
    }
    for (int64_t i = T * H; i < (T + GUARD) * H; i++)
      written += !mt_is_poison(out.host, c->ot, (size_t)i);
    CHECK(!bad && !written,
          "%s: %d of %lld elements of out outside the bound (worst at %.2f "
          "of it), %d written past out",
          what, bad, (long long)(T * H), worst, written);
  }
  tbuf_free(&out);
  free(ref), free(bnd);
  for (int q = 0; q < mt.size; q++) lin_free(&all[q]);
  free(all);
}

/* As trans_case for the layer: W1 stored 2 ffn x hidden, W2 hidden x ffn,
 * their block scales likewise, give the bits of MKX_NO_TRANS in out. */
static void layer_trans_case(MKX_Datatype dt, MKX_Scale_layout lay,
                             MKX_Scale_layout lay2, int empty) {
  lcase c = {dt, MKX_FP32, lay, lay2, 300, 70, 2, 2, empty, 0};
  char what[256];
  lin *all = calloc((size_t)mt.size, sizeof *all);
  for (int q = 0; q < mt.size; q++) lgen(&c, q, &all[q]);
  tbuf o0, o1;
  const int rc0 = layer_run(&c, &all[mt.rank], 0, &o0);
  c.trans = 1;
  layer_describe(&c, 0, what, sizeof what);
  const int rc1 = layer_run(&c, &all[mt.rank], 0, &o1);
  CHECK(rc0 == MKX_SUCCESS && rc1 == MKX_SUCCESS &&
            !memcmp(o0.host, o1.host, o0.bytes),
        "%s: the bits of MKX_NO_TRANS in out (rc %d, %d: %s)", what, rc0, rc1,
        MKX_Get_last_error());
  tbuf_free(&o0), tbuf_free(&o1);
  for (int q = 0; q < mt.size; q++) lin_free(&all[q]);
  free(all);
}

static void layer_trans_matrix(void) {
  for (int d = 0; d < 2; d++)
    for (int L = MKX_SCALE_NONE; L <= MKX_SCALE_BLOCK; L++)
      layer_trans_case(d ? MKX_FP8_E5M2 : MKX_FP8_E4M3, (MKX_Scale_layout)L,
                       (MKX_Scale_layout)(d ? MKX_SCALE_BLOCK - L : L),
                       L == MKX_SCALE_TENSOR ? mt.size - 1 : -1);
}

/* Weights transposed, hidden and ffn multiples of 16, out in bf16: on one
 * node with device buffers and MKX_MOE_FP8=yes the GPU's fp8 layer (its
 * activation rounded to dt, act8_error), elsewhere the host's or the
 * staged path. */
static void layer_act8_matrix(void) {
  static const MKX_Scale_layout pairs[4][2] = {
      {MKX_SCALE_BLOCK, MKX_SCALE_BLOCK},
      {MKX_SCALE_TENSOR, MKX_SCALE_ROW},
      {MKX_SCALE_ROW, MKX_SCALE_TENSOR},
      {MKX_SCALE_NONE, MKX_SCALE_BLOCK}};
  for (int p = 0; p < 4; p++) {
    const lcase c = {.dt = p == 2 ? MKX_FP8_E5M2 : MKX_FP8_E4M3,
                     .ot = MKX_BF16,
                     .lay = pairs[p][0],
                     .lay2 = pairs[p][1],
                     .hidden = p % 2 ? 256 : 384,
                     .ffn = p % 2 ? 128 : 272,
                     .topk = 2,
                     .ep = 3,
                     .empty = p == 1 ? mt.size - 1 : -1,
                     .trans = 1,
                     .act8 = 1};
    layer_case(&c, p == 3);
  }
}

static void layer_matrix(int stride) {
  static const MKX_Scale_layout pairs[5][2] = {
      {MKX_SCALE_NONE, MKX_SCALE_NONE},
      {MKX_SCALE_TENSOR, MKX_SCALE_ROW},
      {MKX_SCALE_ROW, MKX_SCALE_BLOCK},
      {MKX_SCALE_BLOCK, MKX_SCALE_BLOCK},
      {MKX_SCALE_BLOCK, MKX_SCALE_TENSOR}};
  int i = 0;
  for (int d = 0; d < 2; d++)
    for (int p = 0; p < 5; p++, i++) {
      if (i % stride) continue;
      const lcase c = {d ? MKX_FP8_E5M2 : MKX_FP8_E4M3,
                       i % 2 ? MKX_FP32 : MKX_BF16,
                       pairs[p][0],
                       pairs[p][1],
                       p % 2 ? 200 : 129,
                       p % 3 ? 130 : 70,
                       2,
                       2,
                       i % 4 == 3 ? mt.size - 1 : -1};
      layer_case(&c, 0);
    }
  const lcase pc = {MKX_FP8_E4M3,
                    MKX_BF16,
                    MKX_SCALE_BLOCK,
                    MKX_SCALE_BLOCK,
                    256,
                    130,
                    2,
                    2,
                    -1};
  layer_case(&pc, 1);
  lcase pt = pc;
  pt.trans = 1;
  layer_case(&pt, 1);
}

/* A NaN in scales2->b on the last rank. */
static void layer_bad_scale2(void) {
  const lcase c = {MKX_FP8_E4M3,
                   MKX_FP32,
                   MKX_SCALE_ROW,
                   MKX_SCALE_BLOCK,
                   129,
                   70,
                   2,
                   2,
                   -1};
  lin *all = calloc((size_t)mt.size, sizeof *all);
  for (int q = 0; q < mt.size; q++) lgen(&c, q, &all[q]);
  lin *me = &all[mt.rank];
  const mcase d = dispatch_view(&c);
  bufs b;
  bufs_make(&d, &me->r, 0, &b);
  const int bad = mt.rank == mt.size - 1;
  if (bad) me->sb2[1] = NAN;
  const MKX_Scales s = scales_of(&d, &me->r, &b);
  const MKX_Scales s2 = {c.lay2, NULL, me->sb2, NULL};
  float *out = malloc(sizeof(float) * (size_t)(me->r.T * c.hidden) + 4);
  mt_poison(out, sizeof(float) * (size_t)(me->r.T * c.hidden));
  int rc = MKX_ERR_INTERNAL;
  if (!mt.device)
    rc = MKX_Moe_layer_scaled(me->r.X, me->r.T, c.hidden, me->r.ids, me->r.gate,
                              c.topk, c.ep * mt.size, me->r.W, me->W2, c.ffn,
                              MKX_NO_TRANS, out, c.dt, c.ot, &s, &s2, comm,
                              NULL);
  const char *msg = MKX_Get_last_error();
  int written = 0;
  for (int64_t i = 0; i < me->r.T * c.hidden; i++)
    written += !mt_is_poison(out, MKX_FP32, (size_t)i);
  if (!mt.device)
    CHECK(rc == (bad ? MKX_ERR_INVALID_ARG : MKX_ERR_PEER) &&
              (!bad || strstr(msg, "scales2->b[1]")) && !written,
          "layer, a NaN in scales2->b on the last rank: rc %d, \"%s\", %d "
          "written",
          rc, msg, written);
  free(out);
  bufs_free(&b);
  for (int q = 0; q < mt.size; q++) lin_free(&all[q]);
  free(all);
}

/* A transw not an enumerator on the last rank: MKX_ERR_INVALID_ARG there,
 * naming it and the rank, MKX_ERR_PEER elsewhere, out not written. */
static void layer_bad_transw(void) {
  lcase c = {
      MKX_FP8_E4M3, MKX_FP32, MKX_SCALE_BLOCK, MKX_SCALE_BLOCK, 129, 70, 2, 2,
      -1,           0};
  const int bad = mt.size - 1;
  if (mt.rank == bad) c.trans = 7;
  lin *all = calloc((size_t)mt.size, sizeof *all);
  for (int q = 0; q < mt.size; q++) lgen(&c, q, &all[q]);
  tbuf out;
  const int rc = layer_run(&c, &all[mt.rank], 0, &out);
  const char *msg = MKX_Get_last_error();
  char needle[64];
  snprintf(needle, sizeof needle, "transw = 7 on rank %d", bad);
  int written = 0;
  for (size_t i = 0; i < out.bytes; i++)
    written += ((uint8_t *)out.host)[i] != 0xFF;
  CHECK(rc == (mt.rank == bad ? MKX_ERR_INVALID_ARG : MKX_ERR_PEER) &&
            (mt.rank != bad || strstr(msg, needle)) && !written,
        "layer, transw 7 on the last rank: rc %d, \"%s\", %d bytes written", rc,
        msg, written);
  tbuf_free(&out);
  for (int q = 0; q < mt.size; q++) lin_free(&all[q]);
  free(all);
}

/* bf16 with MKX_TRANS, dispatch and layer: within the bound, on the host
 * path, or with device buffers on the staged one (mkx.h: the plain
 * calls' GPU kernels read W hidden x n). */
static void trans_bf16(void) {
  const char *want = mt.device ? "staged" : "host";
  const mcase c = {MKX_BF16, MKX_BF16, MKX_SCALE_NONE, 200, 70, 2, 2, 1, -1,
                   0,        1};
  run_case(&c);
  check_path(want, "dispatch, bf16 with MKX_TRANS");
  const lcase l = {
      MKX_BF16, MKX_BF16, MKX_SCALE_NONE, MKX_SCALE_NONE, 200, 70, 2, 2, -1, 1};
  layer_case(&l, 0);
  check_path(want, "layer, bf16 with MKX_TRANS");
}

#ifdef MKX_TEST_CUDA
/* Y, expert_rows and origin as bytes, for comparing runs. */
static unsigned char *outputs_copy(bufs *b) {
  tbuf_download(&b->Y), tbuf_download(&b->rows), tbuf_download(&b->origin);
  unsigned char *h = malloc(b->Y.bytes + b->rows.bytes + b->origin.bytes);
  memcpy(h, b->Y.host, b->Y.bytes);
  memcpy(h + b->Y.bytes, b->rows.host, b->rows.bytes);
  memcpy(h + b->Y.bytes + b->rows.bytes, b->origin.host, b->origin.bytes);
  return h;
}

/* mkx.h, moe_sync=no on the GPU fp8 path: the call captured in a CUDA
 * graph (after a call outside the capture made its workspace) replays
 * with the call's bits, twice; a replay after a NaN went into scales->b
 * on the last rank writes nothing, and MKX_Comm_get_async_error returns
 * MKX_ERR_INVALID_ARG naming it on every rank; the good values replay
 * right again. */
static void async_capture(const mcase *c, const char *path) {
  const int last = mt.size - 1;
  cudaStream_t st;
  MT_CUDA(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  rin *all = calloc((size_t)mt.size, sizeof *all);
  for (int q = 0; q < mt.size; q++) gen(c, q, &all[q]);
  const rin *me = &all[mt.rank];
  bufs b;
  bufs_make(c, me, 4 * MAXTOK * mt.size, &b);
  const MKX_Scales s = scales_of(c, me, &b);
  char what[160];
  snprintf(what, sizeof what, "moe_sync=no, %s path, captured", path);
  poison_outputs(&b);
  int rc = call_on(c, me, &b, &s, (MKX_Stream)st);
  MT_CUDA(cudaStreamSynchronize(st));
  CHECK_RC(rc, MKX_SUCCESS, "%s [the call before]: %s", what,
           MKX_Get_last_error());
  unsigned char *h0 = outputs_copy(&b);
  const size_t bytes = b.Y.bytes + b.rows.bytes + b.origin.bytes;
  cudaGraph_t g = NULL;
  cudaGraphExec_t x = NULL;
  MT_CUDA(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
  rc = call_on(c, me, &b, &s, (MKX_Stream)st);
  const cudaError_t e = cudaStreamEndCapture(st, &g);
  CHECK(rc == MKX_SUCCESS && e == cudaSuccess, "%s: %s (capture: %s)", what,
        rc ? MKX_Get_last_error() : "the call is captured",
        cudaGetErrorString(e));
  if (mt_all(rc == MKX_SUCCESS && e == cudaSuccess)) {
    MT_CUDA(cudaGraphInstantiate(&x, g, 0));
    const int64_t idx = all[last].nbs - 2;
    char needle[48], who[32];
    snprintf(needle, sizeof needle, "scales->b[%lld]", (long long)idx);
    snprintf(who, sizeof who, "on rank %d", last);
    for (int rep = 0; rep < 4; rep++) {
      const int bad = rep == 2;
      const float keep = ((float *)b.sb.host)[idx];
      if (bad && mt.rank == last) {
        ((float *)b.sb.host)[idx] = NAN;
        tbuf_upload(&b.sb);
      }
      poison_outputs(&b);
      MPI_Barrier(MPI_COMM_WORLD);
      MT_CUDA(cudaGraphLaunch(x, st));
      MT_CUDA(cudaStreamSynchronize(st));
      int arc = -1;
      CHECK_RC(MKX_Comm_get_async_error(comm, &arc), MKX_SUCCESS,
               "%s: MKX_Comm_get_async_error", what);
      unsigned char *h = outputs_copy(&b);
      if (bad) {
        const char *msg = MKX_Get_last_error();
        CHECK(arc == MKX_ERR_INVALID_ARG && strstr(msg, needle) &&
                  strstr(msg, who),
              "%s, replay %d with %s = NaN on rank %d: its error later (got "
              "%s: \"%s\")",
              what, rep + 1, needle, last, MKX_Error_string(arc), msg);
        int written = 0;
        for (int64_t i = 0; i < (b.y_rows + GUARD) * c->n; i++)
          written += !mt_is_poison(b.Y.host, c->yt, (size_t)i);
        for (int64_t i = 0; i < c->ep + GUARD; i++)
          written += !mt_is_poison(b.rows.host, MKX_FP64, (size_t)i);
        CHECK(written == 0, "%s, replay %d with a NaN: nothing written (%d)",
              what, rep + 1, written);
        ((float *)b.sb.host)[idx] = keep;
        tbuf_upload(&b.sb);
      } else {
        CHECK_RC(arc, MKX_SUCCESS, "%s, replay %d: no error", what, rep + 1);
        CHECK(!memcmp(h, h0, bytes), "%s, replay %d: the call's bits", what,
              rep + 1);
      }
      free(h);
    }
    MT_CUDA(cudaGraphExecDestroy(x));
  }
  if (g) MT_CUDA(cudaGraphDestroy(g));
  free(h0);
  bufs_free(&b);
  for (int q = 0; q < mt.size; q++) rin_free(&all[q]);
  free(all);
  MT_CUDA(cudaStreamDestroy(st));
}
#endif

/* ---- moe_sync=no ------------------------------------------------------------
 * mkx.h: with option moe_sync=no the fp8 GPU path checks the scales with
 * the routing's verdict: a bad one writes nothing and its error (naming
 * the array, the index and the rank) is reported later, here by the call
 * itself under option blocking.  On a communicator with both: the GPU fp8
 * dispatch cases again, then a NaN and a zero in scales->b on the last
 * rank: MKX_ERR_INVALID_ARG there naming the index; on the others the
 * same where the call took a GPU path (the verdict is every rank's), or
 * MKX_ERR_PEER where the host checked; Y, expert_rows and origin left
 * poisoned; then the good values again. */
static void async_scales(void) {
  const char *kv[] = {"mkx_moe_sync", "no", "mkx_blocking", "yes", "mkx_path",
                      "gpu",          NULL};
  if (!mt.device) kv[4] = NULL; /* host buffers: no mkx_path */
  MKX_Comm ac = mt_comm_with(kv), keep = comm;
  if (!ac) return;
  int rc;
  comm = ac;
  gpu8_matrix();
  const mcase c = {.dt = MKX_FP8_E4M3,
                   .yt = MKX_BF16,
                   .lay = MKX_SCALE_BLOCK,
                   .hidden = 400,
                   .n = 72,
                   .topk = 2,
                   .ep = 3,
                   .gate = 1,
                   .empty = -1,
                   .trans = 1};
  run_case(&c);
  const char *path = NULL;
  int cap = -1, ctas = -1;
  MKX_Comm_get_last_path(comm, &path, &cap, &ctas);
  const int gpu = path && strcmp(path, "host") && strcmp(path, "staged");
  const int last = mt.size - 1;
  rin *all = calloc((size_t)mt.size, sizeof *all);
  for (int q = 0; q < mt.size; q++) gen(&c, q, &all[q]);
  const rin *me = &all[mt.rank];
  bufs b;
  bufs_make(&c, me, 4 * MAXTOK * mt.size, &b);
  const int64_t idx = all[last].nbs - 2;
  const float vals[2] = {NAN, 0.0f};
  char needle[48], who[32], what[200];
  snprintf(needle, sizeof needle, "scales->b[%lld]", (long long)idx);
  snprintf(who, sizeof who, "on rank %d", last);
  for (int v = 0; v < 2; v++) {
    snprintf(what, sizeof what, "moe_sync=no, %s path: %s = %s on rank %d",
             path ? path : "?", needle, v ? "0" : "NaN", last);
    poison_outputs(&b);
    const float keep_v = ((float *)b.sb.host)[idx];
    if (mt.rank == last) {
      ((float *)b.sb.host)[idx] = vals[v];
      tbuf_upload(&b.sb);
    }
    const MKX_Scales s = scales_of(&c, me, &b);
    rc = call(&c, me, &b, &s);
    char msg[512];
    snprintf(msg, sizeof msg, "%s", MKX_Get_last_error());
    if (mt.rank == last || gpu)
      CHECK(rc == MKX_ERR_INVALID_ARG && strstr(msg, needle) &&
                (mt.rank == last || strstr(msg, who)),
            "%s: MKX_ERR_INVALID_ARG naming %s%s (got %s: \"%s\")", what,
            needle, mt.rank == last ? "" : " and the rank",
            MKX_Error_string(rc), msg);
    else
      CHECK_RC(rc, MKX_ERR_PEER, "%s: \"%s\"", what, msg);
    tbuf_download(&b.Y), tbuf_download(&b.rows), tbuf_download(&b.origin);
    int written = 0;
    for (int64_t i = 0; i < (b.y_rows + GUARD) * c.n; i++)
      written += !mt_is_poison(b.Y.host, c.yt, (size_t)i);
    for (int64_t e = 0; e < c.ep + GUARD; e++)
      written += !mt_is_poison(b.rows.host, MKX_FP64, (size_t)e);
    for (int64_t i = 0; i < 3 * (b.y_rows + GUARD); i++)
      written += ((const int32_t *)b.origin.host)[i] != -1;
    CHECK(written == 0, "%s: nothing written (%d elements were)", what,
          written);
    ((float *)b.sb.host)[idx] = keep_v;
    tbuf_upload(&b.sb);
  }
  bufs_free(&b);
  for (int q = 0; q < mt.size; q++) rin_free(&all[q]);
  free(all);
  run_case(&c);
#ifdef MKX_TEST_CUDA
  if (gpu) async_capture(&c, path);
#endif
  comm = keep;
  CHECK_RC(MKX_Comm_free(&ac), MKX_SUCCESS, "MKX_Comm_free (moe_sync=no)");
}

int main(int argc, char **argv) {
  mt_init(&argc, &argv);
  if (mt.size > 16) {
    if (mt.rank == 0) printf("1..0 # SKIP more than 16 ranks\n");
    MPI_Finalize();
    return CHECK_SKIP;
  }
  MPI_Info info = MPI_INFO_NULL;
  if (mt.device) {
    MPI_Info_create(&info);
    MPI_Info_set(info, "mkx_path", "gpu");
  }
  int rc = MKX_Comm_create(MPI_COMM_WORLD, info, &comm);
  if (info != MPI_INFO_NULL) MPI_Info_free(&info);
  CHECK_RC(rc, MKX_SUCCESS, "MKX_Comm_create: %s", MKX_Get_last_error());
  if (!mt_all(rc == MKX_SUCCESS)) return mt_finish();
  mt_guard("test_fp8_moe", 300);
  matrix(mt.device ? 5 : 1);
  gpu8_matrix();
  same_as_plain();
  plan_case(MKX_SCALE_BLOCK, 0);
  plan_case(MKX_SCALE_BLOCK, 1);
  if (!mt.device) plan_case(MKX_SCALE_ROW, 0);
  for (int k = 0; k < BAD_COUNT; k++) bad_case(k);
  trans_matrix();
  layer_matrix(mt.device ? 3 : 1);
  layer_act8_matrix();
  layer_bad_scale2();
  layer_trans_matrix();
  layer_bad_transw();
  trans_bf16();
  async_scales();
  mt_guard_off();
  rc = MKX_Comm_free(&comm);
  CHECK_RC(rc, MKX_SUCCESS, "MKX_Comm_free");
  return mt_finish();
}
