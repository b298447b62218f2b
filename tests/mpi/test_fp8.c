/*
 * test_fp8.c - fp8 operands of the three tensor-parallel GEMM calls
 * (MKX_FP8_E4M3, MKX_FP8_E5M2, MKX_Scales, MKX_*_scaled and their _init),
 * written from include/mkx.h alone: a client's reading of the contract.
 *
 * Inputs are random fp8 bytes restricted to finite values (seeded per rank
 * and tensor: every rank regenerates every other rank's inputs), decoded
 * by the test's own OCP FP8 decoder; the reference is computed in double.
 * Outputs are poisoned (0xFF bytes) before every call; padding and a guard
 * after every output must stay poison.  Covered:
 *  - every layout (NONE, TENSOR, ROW, BLOCK) x both fp8 types x ctype
 *    bf16/fp16/fp32 x both orders x both transb (ranks mixing them too),
 *    with k (AllGather) or k_local (reductions) of 1, 127, 128, 129, 300,
 *    n of 1, 5, 128, 130, m_local = 0 or k_local = 0 on one rank (NULL
 *    pointers there, or not), M < ranks, padded leading dimensions;
 *  - every finite fp8 value through an identity B (exact results);
 *  - A_out and scales->a_out of AllGather+GEMM (a_out ignored without
 *    A_out), and the two as the operand of a second call (ROW or BLOCK)
 *    giving the same C;
 *  - the unscaled calls with an fp8 dtype against the _scaled calls with
 *    NULL scales, layout NONE (and pointers that must not be read) and
 *    TENSOR scales 1.0: the same bits;
 *  - plans: _scaled_init, MKX_Start twice with the scale values changed in
 *    between (and the MKX_Scales struct scribbled over after _init),
 *    against the plain call, a bad value found at a start, MKX_Request_free;
 *  - errors (on the faulty rank, MKX_ERR_PEER on the others, no output
 *    written): a layout not an enumerator, a layout with a non-fp8 dtype,
 *    NULL scale arrays, a scale NaN / 0 / negative / infinite (the message
 *    names the index), an fp8 ctype, fp8 in the other calls, and
 *    MKX_Type_size;
 *  - --device: a subset on cudaMalloc buffers against the same calls on
 *    host buffers: bit for bit on the staged path; on the fused split path
 *    (operands that suit it, rows and k awkward, every layout and type)
 *    A_out and a_out bit for bit, C within the fused bound, the path
 *    taken as mkx.h says; a call without scales captured in a CUDA graph
 *    and replayed, one with scales refused inside a capture;
 *  - --vnode: all of the above on two virtual nodes (option
 *    virtual_node_size) over tcp, where rows and scales cross between
 *    nodes by MKX's transport (with --device: the GEMM on the GPU where
 *    the operands suit it, option hier_gemm's gpu path).
 *
 *   mpirun -np P ./test_fp8 [--seed N] [--device] [--vnode] [-v]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mkx_test.h"
#ifdef MKX_TEST_CUDA
#include "cuda_check.h"
#endif

#define GUARD 19 /* poisoned elements after every output and scale array */
#define MAXP 64
#define BS MKX_SCALE_BLOCK_SIZE
#define SLACK 8 /* bytes per element allocated (room for any dtype) */

enum { OP_AG, OP_RS, OP_AR };
static const char *const op_names[] = {"Allgather_gemm_scaled",
                                       "Gemm_reduce_scatter_scaled",
                                       "Gemm_allreduce_scaled"};
static const char *const layout_names[] = {"NONE", "TENSOR", "ROW", "BLOCK"};

static MKX_Comm comm;
static int on_gpu; /* the communicator has a GPU (device buffers usable) */

static uint8_t fp8_one(MKX_Datatype t) {
  return t == MKX_FP8_E4M3 ? 0x38 : 0x3C;
}

/* The finite bytes of t, in byte order; returns their count. */
static int fp8_finite(MKX_Datatype t, uint8_t *out) {
  int n = 0;
  for (int b = 0; b < 256; b++)
    if (isfinite(mt_fp8_decode(t, (uint8_t)b))) out[n++] = (uint8_t)b;
  return n;
}

static const char *tname(MKX_Datatype t) {
  switch (t) {
    case MKX_FP8_E4M3:
      return "e4m3";
    case MKX_FP8_E5M2:
      return "e5m2";
    default:
      return mt_type_name(t);
  }
}

/* ---- the error bound ------------------------------------------------------
 * mkx.h: products accumulate in fp32, the scales are applied as if the
 * operands were dequantised first (the fp32 accumulation is the only
 * rounding before C's), and C is rounded once to ctype.  With u = 2^-24
 * (fp32's unit roundoff), K the products summed into an element (k, or the
 * sum of k_local over the ranks) and S = sum_l |sa a_l sb b_l| (in exact
 * arithmetic), an fp32 evaluation in any order (blocked, per rank, then
 * across the p ranks), each product with at most 3 roundings (a*sa, b*sb,
 * the product; or a scale applied to a partial sum), is within
 * (K + p + 3) u S of the exact sum.  We allow about twice that, and the
 * one rounding to ctype (eps_c: twice ctype's unit roundoff, bf16 2^-8,
 * fp16 2^-10, fp32 2^-23) plus, below ctype's normal range, its
 * subnormal spacing (tiny_c: fp16 2^-24):
 *   |C - ref| <= eps_c |ref| + (1 + eps_c) (K + p + 8) 2^-23 S + tiny_c. */
static double eps_of(MKX_Datatype ct) {
  return ct == MKX_BF16   ? ldexp(1, -8)
         : ct == MKX_FP16 ? ldexp(1, -10)
                          : ldexp(1, -23);
}
static double tiny_of(MKX_Datatype ct) {
  return ct == MKX_BF16   ? ldexp(1, -133)
         : ct == MKX_FP16 ? ldexp(1, -24)
                          : ldexp(1, -149);
}
static double bound_of(MKX_Datatype ct, double ref, double S, double K, int p) {
  const double e = eps_of(ct);
  return e * fabs(ref) + (1 + e) * (K + p + 8) * ldexp(1, -23) * S +
         tiny_of(ct);
}
/* The fused path's fp8 GEMM sums each 128-wide K block of products on the
 * tensor cores in fewer bits than fp32 (2^-10 of their magnitudes covers
 * it), and the reductions' partials travel in C's type (option
 * tp_partials=out), each rounded once before the sum. */
static double fused_bound(MKX_Datatype ct, double ref, double S, double K,
                          int p, int red) {
  return bound_of(ct, ref, S, K, p) + ldexp(1, -10) * S +
         (red ? eps_of(ct) * S : 0);
}

/* ---- cases ---------------------------------------------------------------- */

typedef struct {
  int op;
  MKX_Datatype dt, ct;
  MKX_Order order;
  MKX_Scale_layout layout;
  MKX_Trans tb0;                          /* rank 0's transb */
  int tb_mix;                             /* odd ranks take the other transb */
  int64_t k;                              /* AllGather: k */
  int64_t M;                              /* reductions: M */
  int64_t rows[MAXP], kl[MAXP], nl[MAXP]; /* m_local, k_local, n per rank */
  int pad_a, pad_b, pad_c, pad_o;
  int aout, aout_scales; /* AllGather: pass A_out, scales->a_out */
  int null_empty;        /* an empty share passes NULL pointers */
  int nonnull_none;      /* layout NONE: a and b point at NaN (unread) */
  int null_scales;       /* scales == NULL (layout NONE) */
  int small;             /* values and scales kept small (fp16 C) */
  int exact;             /* every finite value, identity B, 2^e scales */
  int ld16;              /* lda, ldb multiples of 16, ldc of 8, pads of
                            16 elements: operands the fused path takes */
  int tag;               /* the random streams */
} tcase;

static MKX_Trans flip(MKX_Trans t) {
  return t == MKX_TRANS ? MKX_NO_TRANS : MKX_TRANS;
}

/* One rank's inputs, logical and dense row-major. */
typedef struct {
  int64_t rows, k, n, kb, nb;
  MKX_Trans tb;
  uint8_t *A; /* rows x k */
  uint8_t *B; /* k x n: op(B) */
  float *sa;  /* TENSOR 1, ROW rows, BLOCK rows x kb */
  float *sb;  /* TENSOR 1, ROW n, BLOCK kb x nb */
  int64_t nsa, nsb;
} rdata;

static void rank_shape(const tcase *tc, int q, rdata *d) {
  d->rows = tc->op == OP_AG ? tc->rows[q] : tc->M;
  d->k = tc->op == OP_AG ? tc->k : tc->kl[q];
  d->n = tc->nl[q];
  d->tb = tc->tb_mix && q % 2 ? flip(tc->tb0) : tc->tb0;
  d->kb = (d->k + BS - 1) / BS;
  d->nb = (d->n + BS - 1) / BS;
}

static float rand_scale(mt_rng *g, int small, int exact) {
  const int e = small ? (int)mt_rng_int(g, -1, 0) : (int)mt_rng_int(g, -3, 2);
  if (exact) return (float)ldexp(1.0, e);
  return (float)ldexp(1.0 + mt_rng_unit(g), e); /* inexact products */
}

static int64_t nscale_a(MKX_Scale_layout l, const rdata *d) {
  return l == MKX_SCALE_TENSOR  ? 1
         : l == MKX_SCALE_ROW   ? d->rows
         : l == MKX_SCALE_BLOCK ? d->rows * d->kb
                                : 0;
}
static int64_t nscale_b(MKX_Scale_layout l, const rdata *d) {
  return l == MKX_SCALE_TENSOR  ? 1
         : l == MKX_SCALE_ROW   ? d->n
         : l == MKX_SCALE_BLOCK ? d->kb * d->nb
                                : 0;
}

/* Rank q's inputs; `version` picks the scale values (plans change them). */
static void gen_rdata(const tcase *tc, int q, int version, rdata *d) {
  rank_shape(tc, q, d);
  const double limit = tc->small ? 2.0 : 16.0;
  d->A = malloc((size_t)(d->rows * d->k) + 1);
  d->B = malloc((size_t)(d->k * d->n) + 1);
  mt_rng g;
  mt_rng_init(&g, mt.seed, q, tc->tag * 8 + 1);
  uint8_t fin[256];
  const int nfin = fp8_finite(tc->dt, fin);
  for (int64_t i = 0; i < d->rows; i++)
    for (int64_t l = 0; l < d->k; l++)
      d->A[i * d->k + l] = tc->exact ? fin[(l + 13 * i + 7 * q) % nfin]
                                     : mt_rand_fp8(&g, tc->dt, limit);
  mt_rng_init(&g, mt.seed, q, tc->tag * 8 + 2);
  for (int64_t l = 0; l < d->k; l++)
    for (int64_t j = 0; j < d->n; j++)
      d->B[l * d->n + j] = tc->exact ? (l == j ? fp8_one(tc->dt) : 0)
                                     : mt_rand_fp8(&g, tc->dt, limit);
  d->nsa = nscale_a(tc->layout, d);
  d->nsb = nscale_b(tc->layout, d);
  d->sa = malloc((size_t)(d->nsa + 1) * sizeof(float));
  d->sb = malloc((size_t)(d->nsb + 1) * sizeof(float));
  mt_rng_init(&g, mt.seed, q, tc->tag * 8 + 3 + 2 * version);
  for (int64_t i = 0; i < d->nsa; i++)
    d->sa[i] = rand_scale(&g, tc->small, tc->exact);
  mt_rng_init(&g, mt.seed, q, tc->tag * 8 + 4 + 2 * version);
  for (int64_t i = 0; i < d->nsb; i++)
    d->sb[i] = rand_scale(&g, tc->small, tc->exact);
}

static void free_rdata(rdata *d) {
  free(d->A);
  free(d->B);
  free(d->sa);
  free(d->sb);
  memset(d, 0, sizeof *d);
}

/* The scale of A's element (i, l) and of op(B)'s (l, j) (mkx.h's layouts;
 * the logical arrays above are row-major). */
static double sa_of(MKX_Scale_layout L, const rdata *d, int64_t i, int64_t l) {
  switch (L) {
    case MKX_SCALE_TENSOR:
      return d->sa[0];
    case MKX_SCALE_ROW:
      return d->sa[i];
    case MKX_SCALE_BLOCK:
      return d->sa[i * d->kb + l / BS];
    default:
      return 1.0;
  }
}
static double sb_of(MKX_Scale_layout L, const rdata *d, int64_t l, int64_t j) {
  switch (L) {
    case MKX_SCALE_TENSOR:
      return d->sb[0];
    case MKX_SCALE_ROW:
      return d->sb[j];
    case MKX_SCALE_BLOCK:
      return d->sb[(l / BS) * d->nb + j / BS];
    default:
      return 1.0;
  }
}

/* Storage index of BLOCK scale entries: a is rows x kb in the call's
 * order; b is kb x nb stored as B is (nb x kb when transposed). */
static size_t sa_index(MKX_Order o, int64_t rows, int64_t kb, int64_t i,
                       int64_t t) {
  return o == MKX_ROW_MAJOR ? (size_t)(i * kb + t) : (size_t)(i + t * rows);
}
static size_t sb_index(MKX_Order o, MKX_Trans tb, int64_t kb, int64_t nb,
                       int64_t t, int64_t u) {
  if (tb == MKX_NO_TRANS)
    return o == MKX_ROW_MAJOR ? (size_t)(t * nb + u) : (size_t)(t + u * kb);
  return o == MKX_ROW_MAJOR ? (size_t)(u * kb + t) : (size_t)(u + t * nb);
}

/* ---- an instance: one rank's buffers of a case ----------------------------- */

typedef struct {
  tcase tc;
  rdata me;
  int version;
  int64_t m, k, n, M; /* A's rows, k, n of this rank; M */
  int64_t crows, c0;  /* C's rows and its first row of the whole */
  int64_t lda, ldb, ldc, ldo;
  size_t nc, no, nsao; /* elements of C, A_out, a_out (guard included) */
  int64_t nsao_log;    /* a_out's logical entries */
  tbuf A, B, C, O, SA, SB, SAO, SBR; /* SBR: b's tensor value per column */
  double *ref, *sabs;                /* crows x n */
  double kterms;
  int fused;       /* the call took the fused path: C within fused_bound */
  uint8_t *Aall;   /* AllGather: the gathered A, M x k */
  float *sao_want; /* AllGather: a_out, as stored */
  uint64_t h_in;   /* hash of the inputs as stored */
} inst;

static uint64_t inputs_hash(const inst *in) {
  uint64_t h = mt_hash(in->A.host, in->A.bytes, 0);
  h = mt_hash(in->B.host, in->B.bytes, h);
  h = mt_hash(in->SA.host, in->SA.bytes, h);
  return mt_hash(in->SB.host, in->SB.bytes, h);
}

static void store_scales(inst *in) {
  const tcase *tc = &in->tc;
  const rdata *d = &in->me;
  float *sa = in->SA.host, *sb = in->SB.host;
  mt_poison(in->SA.host, in->SA.bytes);
  mt_poison(in->SB.host, in->SB.bytes);
  if (tc->layout == MKX_SCALE_BLOCK) {
    for (int64_t i = 0; i < d->rows; i++)
      for (int64_t t = 0; t < d->kb; t++)
        sa[sa_index(tc->order, d->rows, d->kb, i, t)] = d->sa[i * d->kb + t];
    for (int64_t t = 0; t < d->kb; t++)
      for (int64_t u = 0; u < d->nb; u++)
        sb[sb_index(tc->order, d->tb, d->kb, d->nb, t, u)] =
            d->sb[t * d->nb + u];
  } else {
    memcpy(sa, d->sa, (size_t)d->nsa * sizeof(float));
    memcpy(sb, d->sb, (size_t)d->nsb * sizeof(float));
  }
  float *sbr = in->SBR.host;
  for (int64_t j = 0; j < d->n; j++) sbr[j] = d->nsb ? d->sb[0] : 1.0f;
  tbuf_upload(&in->SA);
  tbuf_upload(&in->SB);
  tbuf_upload(&in->SBR);
}

/* The reference (and expected A_out, a_out) for scale version v. */
static void inst_version(inst *in, int v) {
  const tcase *tc = &in->tc;
  const int p = mt.size, r = mt.rank;
  const MKX_Scale_layout L = tc->layout;
  free_rdata(&in->me);
  gen_rdata(tc, r, v, &in->me);
  in->version = v;
  store_scales(in);
  const int64_t n = in->n;
  memset(in->ref, 0, (size_t)(in->crows * n + 1) * sizeof(double));
  memset(in->sabs, 0, (size_t)(in->crows * n + 1) * sizeof(double));
  if (tc->op == OP_AG) {
    const rdata *me = &in->me;
    const int64_t k = in->k;
    double *bd = malloc((size_t)(k * n + 1) * sizeof(double));
    for (int64_t l = 0; l < k; l++)
      for (int64_t j = 0; j < n; j++)
        bd[l * n + j] =
            mt_fp8_decode(tc->dt, me->B[l * n + j]) * sb_of(L, me, l, j);
    int64_t row0 = 0;
    for (int q = 0; q < p; q++) {
      rdata d;
      gen_rdata(tc, q, v, &d);
      for (int64_t i = 0; i < d.rows; i++) {
        const int64_t gi = row0 + i;
        for (int64_t l = 0; l < k; l++) {
          in->Aall[gi * k + l] = d.A[i * k + l];
          const double a =
              mt_fp8_decode(tc->dt, d.A[i * k + l]) * sa_of(L, &d, i, l);
          for (int64_t j = 0; j < n; j++) {
            in->ref[gi * n + j] += a * bd[l * n + j];
            in->sabs[gi * n + j] += fabs(a * bd[l * n + j]);
          }
        }
        if (L == MKX_SCALE_TENSOR || L == MKX_SCALE_ROW)
          in->sao_want[gi] = d.sa[L == MKX_SCALE_TENSOR ? 0 : i];
        else if (L == MKX_SCALE_BLOCK)
          for (int64_t t = 0; t < d.kb; t++)
            in->sao_want[sa_index(tc->order, in->M, d.kb, gi, t)] =
                d.sa[i * d.kb + t];
      }
      row0 += d.rows;
      free_rdata(&d);
    }
    free(bd);
  } else {
    for (int q = 0; q < p; q++) {
      rdata d;
      gen_rdata(tc, q, v, &d);
      const int64_t kq = d.k;
      double *bd = malloc((size_t)(kq * n + 1) * sizeof(double));
      for (int64_t l = 0; l < kq; l++)
        for (int64_t j = 0; j < n; j++)
          bd[l * n + j] =
              mt_fp8_decode(tc->dt, d.B[l * n + j]) * sb_of(L, &d, l, j);
      for (int64_t i = in->c0; i < in->c0 + in->crows; i++)
        for (int64_t l = 0; l < kq; l++) {
          const double a =
              mt_fp8_decode(tc->dt, d.A[i * kq + l]) * sa_of(L, &d, i, l);
          for (int64_t j = 0; j < n; j++) {
            in->ref[(i - in->c0) * n + j] += a * bd[l * n + j];
            in->sabs[(i - in->c0) * n + j] += fabs(a * bd[l * n + j]);
          }
        }
      free(bd);
      free_rdata(&d);
    }
  }
  in->h_in = inputs_hash(in);
}

static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

static void inst_make(inst *in, const tcase *tc) {
  const int p = mt.size, r = mt.rank;
  memset(in, 0, sizeof *in);
  in->tc = *tc;
  rank_shape(tc, r, &in->me);
  in->m = in->me.rows;
  in->k = in->me.k;
  in->n = in->me.n;
  if (tc->op == OP_AG) {
    in->M = 0;
    for (int q = 0; q < p; q++) in->M += tc->rows[q];
    in->crows = in->M;
    in->c0 = 0;
  } else {
    in->M = tc->M;
    MKX_Block_range(tc->M, p, r, &in->c0, &in->crows);
    if (tc->op == OP_AR) in->crows = tc->M, in->c0 = 0;
  }
  in->kterms = 0;
  if (tc->op == OP_AG)
    in->kterms = (double)tc->k;
  else
    for (int q = 0; q < p; q++) in->kterms += (double)tc->kl[q];
  const MKX_Order o = tc->order;
  int64_t sr, sc;
  mt_B_dims(in->me.tb, in->k, in->n, &sr, &sc);
  in->lda = mt_min_ld(o, in->m, in->k) + tc->pad_a;
  in->ldb = mt_min_ld(o, sr, sc) + tc->pad_b;
  in->ldc = mt_min_ld(o, in->crows, in->n) + tc->pad_c;
  in->ldo = mt_min_ld(o, in->M, in->k) + tc->pad_o;
  if (tc->ld16) {
    in->lda = round_up(mt_min_ld(o, in->m, in->k), 16) + 16 * tc->pad_a;
    in->ldb = round_up(mt_min_ld(o, sr, sc), 16) + 16 * tc->pad_b;
    in->ldc = round_up(mt_min_ld(o, in->crows, in->n), 8) + 8 * tc->pad_c;
  }
  const size_t na = mt_mat_elems(o, in->m, in->k, in->lda);
  const size_t nb = mt_mat_elems(o, sr, sc, in->ldb);
  in->nc = mt_mat_elems(o, in->crows, in->n, in->ldc) + GUARD;
  in->no =
      tc->op == OP_AG ? mt_mat_elems(o, in->M, in->k, in->ldo) + GUARD : GUARD;
  const int64_t kb = (in->k + BS - 1) / BS;
  in->nsao_log = tc->op != OP_AG ? 0
                 : tc->layout == MKX_SCALE_TENSOR || tc->layout == MKX_SCALE_ROW
                     ? in->M
                 : tc->layout == MKX_SCALE_BLOCK ? in->M * kb
                                                 : 0;
  in->nsao = (size_t)in->nsao_log + GUARD;
  if (tbuf_alloc(&in->A, na * SLACK) || tbuf_alloc(&in->B, nb * SLACK) ||
      tbuf_alloc(&in->C, in->nc * SLACK) || tbuf_alloc(&in->O, in->no) ||
      tbuf_alloc(&in->SA, (size_t)(nscale_a(tc->layout, &in->me) + GUARD) *
                              sizeof(float)) ||
      tbuf_alloc(&in->SB, (size_t)(nscale_b(tc->layout, &in->me) + GUARD) *
                              sizeof(float)) ||
      tbuf_alloc(&in->SAO, in->nsao * sizeof(float)) ||
      tbuf_alloc(&in->SBR, (size_t)(in->n + GUARD) * sizeof(float))) {
    fprintf(stderr, "rank %d: out of memory\n", r);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  in->ref = malloc((size_t)(in->crows * in->n + 1) * sizeof(double));
  in->sabs = malloc((size_t)(in->crows * in->n + 1) * sizeof(double));
  in->Aall = malloc((size_t)(in->M * in->k) + 1);
  in->sao_want = malloc(in->nsao * sizeof(float));
  /* the data (scale version 0), then A and B stored; the padding of A and
   * B stays 0xFF, an fp8 NaN: read, it would spoil C */
  inst_version(in, 0);
  for (int64_t i = 0; i < in->m; i++)
    for (int64_t l = 0; l < in->k; l++)
      ((uint8_t *)in->A.host)[mt_off(o, in->lda, i, l)] =
          in->me.A[i * in->k + l];
  for (int64_t l = 0; l < in->k; l++)
    for (int64_t j = 0; j < in->n; j++) {
      const size_t off = in->me.tb == MKX_TRANS ? mt_off(o, in->ldb, j, l)
                                                : mt_off(o, in->ldb, l, j);
      ((uint8_t *)in->B.host)[off] = in->me.B[l * in->n + j];
    }
  tbuf_upload(&in->A);
  tbuf_upload(&in->B);
  in->h_in = inputs_hash(in);
}

static void inst_free(inst *in) {
  tbuf_free(&in->A);
  tbuf_free(&in->B);
  tbuf_free(&in->C);
  tbuf_free(&in->O);
  tbuf_free(&in->SA);
  tbuf_free(&in->SB);
  tbuf_free(&in->SAO);
  tbuf_free(&in->SBR);
  free(in->ref);
  free(in->sabs);
  free(in->Aall);
  free(in->sao_want);
  free_rdata(&in->me);
}

static void describe(const inst *in, char *s, size_t len) {
  const tcase *tc = &in->tc;
  const int p = mt.size;
  char sh[512];
  size_t o = 0;
  sh[0] = 0;
  for (int q = 0; q < p && o + 40 < sizeof sh; q++) {
    rdata d;
    rank_shape(tc, q, &d);
    o += (size_t)snprintf(sh + o, sizeof sh - o, "%s%lldx%lld%s", q ? "," : "",
                          (long long)(tc->op == OP_AG ? d.rows : d.k),
                          (long long)d.n, d.tb == MKX_TRANS ? "T" : "N");
  }
  snprintf(s, len,
           "%s #%d %s %s->%s %s %s%s: %s=%lld per rank [%s] lda=%lld "
           "ldb=%lld ldc=%lld%s%s",
           op_names[tc->op], tc->tag, layout_names[tc->layout], tname(tc->dt),
           tname(tc->ct), mt_order_name(tc->order), tc->exact ? "exact " : "",
           tc->null_empty ? "NULL-empty" : "", tc->op == OP_AG ? "k" : "M",
           (long long)(tc->op == OP_AG ? tc->k : tc->M), sh, (long long)in->lda,
           (long long)in->ldb, (long long)in->ldc, tc->aout ? " A_out" : "",
           tc->aout_scales ? "+a_out" : "");
}

/* ---- calls ------------------------------------------------------------------ */

typedef struct {
  int op;
  const void *A;
  int64_t mk1, mk2, lda; /* AG: m_local, k; reductions: M, k_local */
  const void *B;
  int64_t n, ldb;
  MKX_Trans tb;
  void *C;
  int64_t ldc;
  void *O;
  int64_t ldo;
  MKX_Datatype dt, ct;
  MKX_Order order;
  MKX_Scales sc;
  int sc_null;
  MKX_Stream stream; /* NULL: the default stream */
} callargs;

static void *ptr_of(const tbuf *b, int dev) {
  return dev && b->dev ? b->dev : b->host;
}

static int aligned16(const void *p) { return (uintptr_t)p % 16 == 0; }

/* mkx.h: on device buffers, fp8 takes the fused split path (one node) or
 * hier_gemm=gpu's (several nodes) where every rank's operands suit it
 * (row-major, B stored n x k, k or k_local, lda and ldb multiples of 16, n
 * and ldc of 8, A, B and C 16-byte aligned), and where the GPU paths run
 * at all on this communicator (fused_ok: a bf16 call took one). */
static int fused_ok;
/* The communicator has option tp_pull=yes (pull_matrix): a fused
 * AllGather+GEMM reads the ranks' rows in place on one node. */
static int pull_on;
static int fusable(const tcase *tc, const callargs *a) {
  const int mine = tc->order == MKX_ROW_MAJOR && a->tb == MKX_TRANS &&
                   a->mk2 % 16 == 0 && a->lda % 16 == 0 && a->ldb % 16 == 0 &&
                   a->n % 8 == 0 && a->ldc % 8 == 0 && aligned16(a->A) &&
                   aligned16(a->B) && aligned16(a->C);
  return mt_all(mine) && fused_ok;
}

/* The arguments of the instance's call on device (dev) or host buffers,
 * and whether it takes the fused path (collective on device buffers). */
static void inst_args(inst *in, int dev, callargs *a) {
  const tcase *tc = &in->tc;
  const int red = tc->op != OP_AG;
  const int empty = red ? in->k == 0 : in->m == 0;
  const int ne = tc->null_empty;
  memset(a, 0, sizeof *a);
  a->op = tc->op;
  a->A = empty && ne ? NULL : ptr_of(&in->A, dev);
  a->mk1 = red ? in->M : in->m;
  a->mk2 = in->k;
  a->lda = in->lda;
  a->B = red && empty && ne ? NULL : ptr_of(&in->B, dev);
  a->n = in->n;
  a->ldb = in->ldb;
  a->tb = in->me.tb;
  a->C = tc->op == OP_RS && in->crows == 0 && ne ? NULL : ptr_of(&in->C, dev);
  a->ldc = in->ldc;
  a->O = tc->op == OP_AG && tc->aout ? ptr_of(&in->O, dev) : NULL;
  a->ldo = in->ldo;
  a->dt = tc->dt;
  a->ct = tc->ct;
  a->order = tc->order;
  a->sc.layout = tc->layout;
  if (tc->layout != MKX_SCALE_NONE || tc->nonnull_none) {
    a->sc.a = empty && ne ? NULL : ptr_of(&in->SA, dev);
    a->sc.b = red && empty && ne ? NULL : ptr_of(&in->SB, dev);
  }
  /* the reductions get a poisoned a_out too: not theirs to write */
  if ((tc->op == OP_AG && tc->aout_scales) || (red && tc->tag % 2 == 0))
    a->sc.a_out = ptr_of(&in->SAO, dev);
  a->sc_null = tc->null_scales;
  in->fused = dev && fusable(tc, a);
}

static int call_scaled(const callargs *a) {
  const MKX_Scales *s = a->sc_null ? NULL : &a->sc;
  switch (a->op) {
    case OP_AG:
      return MKX_Allgather_gemm_scaled(
          a->A, a->mk1, a->mk2, a->lda, a->B, a->n, a->ldb, a->tb, a->C, a->ldc,
          a->O, a->ldo, a->dt, a->ct, a->order, s, comm, a->stream);
    case OP_RS:
      return MKX_Gemm_reduce_scatter_scaled(
          a->A, a->mk1, a->mk2, a->lda, a->B, a->n, a->ldb, a->tb, a->C, a->ldc,
          a->dt, a->ct, a->order, s, comm, a->stream);
    default:
      return MKX_Gemm_allreduce_scaled(a->A, a->mk1, a->mk2, a->lda, a->B, a->n,
                                       a->ldb, a->tb, a->C, a->ldc, a->dt,
                                       a->ct, a->order, s, comm, a->stream);
  }
}

static int call_plain(const callargs *a) {
  switch (a->op) {
    case OP_AG:
      return MKX_Allgather_gemm(a->A, a->mk1, a->mk2, a->lda, a->B, a->n,
                                a->ldb, a->tb, a->C, a->ldc, a->O, a->ldo,
                                a->dt, a->ct, a->order, comm, a->stream);
    case OP_RS:
      return MKX_Gemm_reduce_scatter(a->A, a->mk1, a->mk2, a->lda, a->B, a->n,
                                     a->ldb, a->tb, a->C, a->ldc, a->dt, a->ct,
                                     a->order, comm, a->stream);
    default:
      return MKX_Gemm_allreduce(a->A, a->mk1, a->mk2, a->lda, a->B, a->n,
                                a->ldb, a->tb, a->C, a->ldc, a->dt, a->ct,
                                a->order, comm, a->stream);
  }
}

static int call_init(const callargs *a, const MKX_Scales *s, MKX_Request *rq) {
  switch (a->op) {
    case OP_AG:
      return MKX_Allgather_gemm_scaled_init(
          a->A, a->mk1, a->mk2, a->lda, a->B, a->n, a->ldb, a->tb, a->C, a->ldc,
          a->O, a->ldo, a->dt, a->ct, a->order, s, comm, MPI_INFO_NULL, rq);
    case OP_RS:
      return MKX_Gemm_reduce_scatter_scaled_init(
          a->A, a->mk1, a->mk2, a->lda, a->B, a->n, a->ldb, a->tb, a->C, a->ldc,
          a->dt, a->ct, a->order, s, comm, MPI_INFO_NULL, rq);
    default:
      return MKX_Gemm_allreduce_scaled_init(
          a->A, a->mk1, a->mk2, a->lda, a->B, a->n, a->ldb, a->tb, a->C, a->ldc,
          a->dt, a->ct, a->order, s, comm, MPI_INFO_NULL, rq);
  }
}

/* Poison the outputs (host and device copies). */
static void poison_outputs(inst *in) {
  tbuf_poison(&in->C);
  tbuf_poison(&in->O);
  tbuf_poison(&in->SAO);
}

static void fetch_outputs(inst *in, int dev) {
  if (!dev) return;
  tbuf_download(&in->C);
  tbuf_download(&in->O);
  tbuf_download(&in->SAO);
}

static int all_ff(const void *buf, size_t from, size_t to) {
  const unsigned char *p = buf;
  for (size_t i = from; i < to; i++)
    if (p[i] != 0xFF) return 0;
  return 1;
}

/* For a buffer of `total` elements of es bytes holding a rows x cols
 * matrix (ld): elements outside it no longer poison, elements in it still
 * poison; then the slack bytes up to `bytes`. */
static void span_check(const void *buf, size_t es, MKX_Order o, int64_t rows,
                       int64_t cols, int64_t ld, size_t total, size_t bytes,
                       size_t *oob, size_t *unw) {
  size_t bad = 0, un = 0;
  for (size_t idx = 0; idx < total; idx++) {
    const int64_t outer = (int64_t)(idx / (size_t)ld),
                  inner = (int64_t)(idx % (size_t)ld);
    const int64_t i = o == MKX_ROW_MAJOR ? outer : inner;
    const int64_t j = o == MKX_ROW_MAJOR ? inner : outer;
    const int poison = all_ff(buf, idx * es, (idx + 1) * es);
    if (i < rows && j < cols)
      un += poison;
    else
      bad += !poison;
  }
  if (!all_ff(buf, total * es, bytes)) bad++;
  *oob = bad;
  *unw = un;
}

static int outputs_untouched(const inst *in) {
  return all_ff(in->C.host, 0, in->C.bytes) &&
         all_ff(in->O.host, 0, in->O.bytes) &&
         all_ff(in->SAO.host, 0, in->SAO.bytes);
}

/* C against the reference, its padding and guard. */
static int check_c(const inst *in, const char *desc, const char *what) {
  const tcase *tc = &in->tc;
  const MKX_Datatype ct = tc->ct;
  const size_t cs = mt_type_size(ct);
  int64_t bad = 0, bi = -1, bj = -1;
  double bgot = 0, bwant = 0, bbound = 0;
  for (int64_t i = 0; i < in->crows; i++)
    for (int64_t j = 0; j < in->n; j++) {
      const double got =
          mt_get(in->C.host, ct, mt_off(tc->order, in->ldc, i, j));
      const double want = in->ref[i * in->n + j];
      const double S = in->sabs[i * in->n + j];
      const double bd =
          tc->exact ? 0
          : in->fused
              ? fused_bound(ct, want, S, in->kterms, mt.size, tc->op != OP_AG)
              : bound_of(ct, want, S, in->kterms, mt.size);
      if (!(fabs(got - want) <= bd)) {
        if (!bad) bi = i, bj = j, bgot = got, bwant = want, bbound = bd;
        bad++;
      }
    }
  int ok = CHECK(bad == 0,
                 "%s: %s: every element within its bound (%lld of %lld "
                 "not; first (%lld,%lld): got %.9g, want %.9g, bound %.3g)",
                 desc, what, (long long)bad, (long long)(in->crows * in->n),
                 (long long)bi, (long long)bj, bgot, bwant, bbound);
  size_t oob, unw;
  span_check(in->C.host, cs, tc->order, in->crows, in->n, in->ldc, in->nc,
             in->C.bytes, &oob, &unw);
  ok &= CHECK(oob == 0 && unw == 0,
              "%s: %s: padding and guard untouched (%zu changed), every "
              "element written (%zu not)",
              desc, what, oob, unw);
  return ok;
}

/* A_out and a_out of an AllGather call; a_out untouched where the call
 * has none to write (layout NONE, no A_out, or a reduction). */
static int check_aux(const inst *in, const char *desc) {
  const tcase *tc = &in->tc;
  int ok = 1;
  if (tc->op == OP_AG && tc->aout) {
    size_t diff = 0, oob, unw;
    for (int64_t i = 0; i < in->M; i++)
      for (int64_t l = 0; l < in->k; l++)
        diff +=
            ((const uint8_t *)in->O.host)[mt_off(tc->order, in->ldo, i, l)] !=
            in->Aall[i * in->k + l];
    span_check(in->O.host, 1, tc->order, in->M, in->k, in->ldo, in->no,
               in->O.bytes, &oob, &unw);
    ok &= CHECK(diff == 0 && oob == 0 && unw == 0,
                "%s: A_out is the gathered A byte for byte (%zu differ, %zu "
                "outside it changed, %zu unwritten)",
                desc, diff, oob, unw);
  } else {
    ok &= CHECK(all_ff(in->O.host, 0, in->O.bytes),
                "%s: no A_out, the spare buffer untouched", desc);
  }
  const int want_sao = tc->op == OP_AG && tc->aout && tc->aout_scales &&
                       tc->layout != MKX_SCALE_NONE;
  if (want_sao) {
    size_t diff = 0;
    int64_t first = -1;
    for (int64_t i = 0; i < in->nsao_log; i++)
      if (memcmp((const float *)in->SAO.host + i, in->sao_want + i,
                 sizeof(float))) {
        if (first < 0) first = i;
        diff++;
      }
    const int guard =
        all_ff(in->SAO.host, (size_t)in->nsao_log * 4, in->SAO.bytes);
    ok &= CHECK(diff == 0 && guard,
                "%s: a_out holds the gathered scales (%lld values; %zu "
                "differ, first at %lld: got %.9g, want %.9g; guard %s)",
                desc, (long long)in->nsao_log, diff, (long long)first,
                first >= 0 ? ((const float *)in->SAO.host)[first] : 0.0,
                first >= 0 ? in->sao_want[first] : 0.0,
                guard ? "intact" : "written");
  } else {
    ok &= CHECK(all_ff(in->SAO.host, 0, in->SAO.bytes),
                "%s: a_out not written (%s)", desc,
                tc->op != OP_AG                ? "not this call's"
                : tc->layout == MKX_SCALE_NONE ? "layout NONE"
                : !tc->aout && tc->aout_scales ? "ignored without A_out"
                                               : "none given");
  }
  return ok;
}

static int check_inputs(inst *in, const char *desc, int dev) {
  if (dev) {
    tbuf_download(&in->A);
    tbuf_download(&in->B);
    tbuf_download(&in->SA);
    tbuf_download(&in->SB);
  }
  return CHECK(inputs_hash(in) == in->h_in,
               "%s: A, B and the scales (padding included) unchanged", desc);
}

static const char *last_error_copy(void) {
  static char msg[1024];
  snprintf(msg, sizeof msg, "%s", MKX_Get_last_error());
  return msg;
}

static uint64_t c_hash(const inst *in) {
  const size_t cs = mt_type_size(in->tc.ct);
  uint64_t h = 0;
  for (int64_t i = 0; i < in->crows; i++)
    for (int64_t j = 0; j < in->n; j++)
      h = mt_hash(
          (const char *)in->C.host + mt_off(in->tc.order, in->ldc, i, j) * cs,
          cs, h);
  return h;
}

/* A_out and a_out as the operand of a second AllGather call (rank 0 holds
 * all M rows, the others none): the same product. */
static void reuse_gathered(inst *in, const callargs *first, const char *desc,
                           int dev) {
  const tcase *tc = &in->tc;
  callargs b = *first;
  const int r0 = mt.rank == 0;
  b.A = r0 ? ptr_of(&in->O, dev) : NULL;
  b.mk1 = r0 ? in->M : 0;
  b.lda = in->ldo;
  b.O = NULL;
  b.sc.layout = tc->layout == MKX_SCALE_TENSOR ? MKX_SCALE_ROW : tc->layout;
  b.sc.a = r0 ? ptr_of(&in->SAO, dev) : NULL;
  b.sc.b = tc->layout == MKX_SCALE_TENSOR ? ptr_of(&in->SBR, dev)
                                          : ptr_of(&in->SB, dev);
  b.sc.a_out = NULL;
  b.sc_null = 0;
  unsigned char *c1 = malloc(in->C.bytes);
  memcpy(c1, in->C.host, in->C.bytes);
  tbuf_poison(&in->C);
  const int rc = call_scaled(&b);
  char d2[1000];
  snprintf(d2, sizeof d2, "%s, then A_out/a_out as a %s operand (rank 0)", desc,
           layout_names[b.sc.layout]);
  CHECK_RC(rc, MKX_SUCCESS, "%s: returns MKX_SUCCESS: %s", d2,
           rc ? last_error_copy() : "");
  if (mt_all(rc == MKX_SUCCESS)) {
    if (dev) tbuf_download(&in->C);
    check_c(in, d2, "C");
    if (memcmp(c1, in->C.host, in->C.bytes) && mt.verbose)
      mt_diag("%s: C within the bound but not the same bits", d2);
  }
  free(c1);
}

/* ---- the main matrix ---------------------------------------------------- */

static const int64_t k_list[] = {1, 127, 128, 129, 300};
static const int64_t n_list[] = {1, 130, 5, 128};

static void make_case(tcase *tc, int op, int c, MKX_Scale_layout lay,
                      MKX_Datatype dt, MKX_Datatype ct, MKX_Order o,
                      MKX_Trans tb) {
  const int p = mt.size;
  mt_rng g;
  mt_rng_init(&g, mt.seed, -1, 7000 + op * 1000 + c);
  memset(tc, 0, sizeof *tc);
  tc->op = op;
  tc->dt = dt;
  tc->ct = ct;
  tc->order = o;
  tc->layout = lay;
  tc->tb0 = tb;
  tc->tb_mix = c % 7 == 3;
  tc->tag = op * 1000 + c;
  tc->small = ct == MKX_FP16;
  tc->null_empty = c % 2;
  tc->nonnull_none = c % 4 == 0;
  tc->null_scales = lay == MKX_SCALE_NONE && c % 4 == 1;
  const int padded = c % 2 == 0;
  tc->pad_a = (int)mt_rng_int(&g, padded, 3);
  tc->pad_b = (int)mt_rng_int(&g, padded, 3);
  tc->pad_c = (int)mt_rng_int(&g, padded, 3);
  tc->pad_o = (int)mt_rng_int(&g, padded, 3);
  if (op == OP_AG) {
    tc->k = k_list[c % 5];
    for (int q = 0; q < p; q++) {
      tc->rows[q] = mt_rng_int(&g, 1, 6);
      tc->nl[q] = n_list[(c / 5 + q) % 4];
    }
    if (c % 3 == 0 && p > 1) tc->rows[(c / 3) % p] = 0;
    tc->aout = c % 3 != 2;
    /* mkx.h: a_out is used with A_out only, ignored otherwise */
    tc->aout_scales = tc->aout ? c % 4 != 3 : c % 2 == 0;
  } else {
    const int64_t n = n_list[(c / 5) % 4];
    tc->M = c % 4 == 0   ? (p > 1 ? p - 1 : 1)
            : c % 4 == 1 ? 2 * p + 1
                         : mt_rng_int(&g, 1, 12);
    for (int q = 0; q < p; q++) {
      tc->kl[q] = k_list[(c + q) % 5];
      tc->nl[q] = n;
    }
    if (c % 3 == 1 && p > 1) tc->kl[(c / 3) % p] = 0;
  }
}

/* One case: the call on this mode's buffers, its checks; in device mode
 * the same call on host buffers too: the same bits on the staged path,
 * and on the fused path A_out and a_out, C within the fused bound. */
static void run_case(const tcase *tc, int second_run) {
  inst in;
  inst_make(&in, tc);
  char desc[900];
  describe(&in, desc, sizeof desc);
  const int dev = mt.device && on_gpu;
  callargs a;
  inst_args(&in, dev, &a);
  poison_outputs(&in);
  int rc = call_scaled(&a);
  CHECK_RC(rc, MKX_SUCCESS, "%s: returns MKX_SUCCESS: %s", desc,
           rc ? last_error_copy() : "");
  if (!mt_all(rc == MKX_SUCCESS)) {
    inst_free(&in);
    return;
  }
  fetch_outputs(&in, dev);
  check_c(&in, desc, "C");
  check_aux(&in, desc);
  check_inputs(&in, desc, dev);
  if (tc->op == OP_AR) {
    uint64_t h = c_hash(&in), *all = malloc((size_t)mt.size * sizeof *all);
    MPI_Allgather(&h, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, MPI_COMM_WORLD);
    int same = 1;
    for (int q = 0; q < mt.size; q++) same &= all[q] == all[0];
    CHECK(same, "%s: the same bits of C on every rank", desc);
    free(all);
  }
  if (dev) {
    const char *name = NULL;
    int cap = -1, ctas = -1, nodes = 0;
    MKX_Comm_num_nodes(comm, &nodes);
    CHECK_RC(MKX_Comm_get_last_path(comm, &name, &cap, &ctas), MKX_SUCCESS,
             "%s: MKX_Comm_get_last_path", desc);
    const char *want = !in.fused   ? "staged"
                       : nodes > 1 ? "several nodes (hier_gemm=gpu)"
                       : pull_on && tc->op == OP_AG
                           ? "fused, operands read in place"
                           : "fused split";
    CHECK(name && !strcmp(name, want),
          "%s: device buffers take the %s path (took \"%s\")", desc, want,
          name ? name : "(null)");
    /* the same call on host buffers: the same outputs */
    unsigned char *c1 = malloc(in.C.bytes), *o1 = malloc(in.O.bytes),
                  *s1 = malloc(in.SAO.bytes);
    memcpy(c1, in.C.host, in.C.bytes);
    memcpy(o1, in.O.host, in.O.bytes);
    memcpy(s1, in.SAO.host, in.SAO.bytes);
    callargs h;
    const int fused = in.fused;
    inst_args(&in, 0, &h); /* the host path's bound for C */
    poison_outputs(&in);
    rc = call_scaled(&h);
    CHECK_RC(rc, MKX_SUCCESS, "%s on host buffers: %s", desc,
             rc ? last_error_copy() : "");
    if (mt_all(rc == MKX_SUCCESS)) {
      check_c(&in, desc, "C (host buffers)");
      const int cs = !memcmp(c1, in.C.host, in.C.bytes);
      CHECK((cs || fused) && !memcmp(o1, in.O.host, in.O.bytes) &&
                !memcmp(s1, in.SAO.host, in.SAO.bytes),
            "%s: device buffers (%s) give the bits of host buffers "
            "(C %s, A_out %s, a_out %s)",
            desc, fused ? "fused: A_out and a_out" : "staged",
            cs ? "same" : "differs",
            memcmp(o1, in.O.host, in.O.bytes) ? "differs" : "same",
            memcmp(s1, in.SAO.host, in.SAO.bytes) ? "differs" : "same");
    }
    in.fused = fused;
    free(c1);
    free(o1);
    free(s1);
    /* back to the device run's outputs for what follows */
    poison_outputs(&in);
    rc = call_scaled(&a);
    if (!mt_all(rc == MKX_SUCCESS)) {
      inst_free(&in);
      return;
    }
    fetch_outputs(&in, dev);
  }
  if (second_run && tc->op != OP_AG) {
    /* mkx.h: the sum in a fixed order, the same bits every run */
    const uint64_t h1 = c_hash(&in);
    poison_outputs(&in);
    rc = call_scaled(&a);
    CHECK_RC(rc, MKX_SUCCESS, "%s [second call]", desc);
    fetch_outputs(&in, dev);
    if (mt_all(rc == MKX_SUCCESS))
      CHECK(c_hash(&in) == h1, "%s: a second call gives the same bits", desc);
  }
  if (tc->op == OP_AG && tc->layout != MKX_SCALE_NONE && tc->aout &&
      tc->aout_scales)
    reuse_gathered(&in, &a, desc, dev);
  inst_free(&in);
}

static void main_matrix(int stride) {
  static const MKX_Datatype dts[2] = {MKX_FP8_E4M3, MKX_FP8_E5M2};
  static const MKX_Datatype cts[3] = {MKX_BF16, MKX_FP16, MKX_FP32};
  int runs = 0;
  for (int op = OP_AG; op <= OP_AR; op++) {
    int c = 0;
    for (int L = 0; L < 4; L++)
      for (int d = 0; d < 2; d++)
        for (int ci = 0; ci < 3; ci++)
          for (int o = 0; o < 2; o++)
            for (int t = 0; t < 2; t++, c++) {
              if (c % stride) continue;
              tcase tc;
              make_case(&tc, op, c, (MKX_Scale_layout)L, dts[d], cts[ci],
                        o ? MKX_COL_MAJOR : MKX_ROW_MAJOR,
                        t ? MKX_TRANS : MKX_NO_TRANS);
              run_case(&tc, c % 5 == 0);
              runs++;
            }
  }
  if (mt.rank == 0) mt_diag("main matrix: %d cases (stride %d)", runs, stride);
}

/* Whether this communicator's calls take fused paths at all (ranks
 * sharing a GPU may be kept off them): a bf16 AllGather+GEMM on device
 * buffers that suits them, and the path it took. */
static void probe_fused(void) {
  const int64_t m = 64, k = 64, n = 64;
  tbuf A, B, C;
  if (tbuf_alloc(&A, (size_t)(m * k * 2)) ||
      tbuf_alloc(&B, (size_t)(n * k * 2)) ||
      tbuf_alloc(&C, (size_t)(mt.size * m * n * 2))) {
    fprintf(stderr, "rank %d: out of memory\n", mt.rank);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  memset(A.host, 0, A.bytes), memset(B.host, 0, B.bytes);
  tbuf_upload(&A), tbuf_upload(&B);
  const int rc =
      MKX_Allgather_gemm(A.dev, m, k, k, B.dev, n, k, MKX_TRANS, C.dev, n, NULL,
                         0, MKX_BF16, MKX_BF16, MKX_ROW_MAJOR, comm, NULL);
  CHECK_RC(rc, MKX_SUCCESS, "bf16 probe call: %s", rc ? last_error_copy() : "");
  const char *name = NULL;
  int cap = 0, ctas = 0;
  MKX_Comm_get_last_path(comm, &name, &cap, &ctas);
  fused_ok = mt_all(
      rc == MKX_SUCCESS && name &&
      (!strncmp(name, "fused", 5) || !strncmp(name, "several nodes", 13)));
  if (mt.rank == 0)
    mt_diag("a bf16 call took the path \"%s\": fp8 expects %s",
            name ? name : "?",
            fused_ok ? "the fused split path where operands suit it"
                     : "the staged path");
  tbuf_free(&A), tbuf_free(&B), tbuf_free(&C);
}

/* Operands the fused fp8 path takes (tcase.ld16): every layout, both
 * types, every C type, awkward M (partial tiles, a rank without rows or
 * without k), k with a last K block of 16, several K blocks. */
static void fused_matrix(void) {
  static const MKX_Datatype dts[2] = {MKX_FP8_E4M3, MKX_FP8_E5M2};
  static const MKX_Datatype cts[3] = {MKX_BF16, MKX_FP16, MKX_FP32};
  static const int64_t ks[4] = {16, 272, 128, 1040}, ns[3] = {8, 136, 256};
  const int p = mt.size;
  int runs = 0;
  for (int op = OP_AG; op <= OP_AR; op++)
    for (int L = 0; L < 4; L++)
      for (int d = 0; d < 2; d++)
        for (int ci = 0; ci < 3; ci++, runs++) {
          const int c = (L * 2 + d) * 3 + ci;
          tcase tc;
          make_case(&tc, op, c, (MKX_Scale_layout)L, dts[d], cts[ci],
                    MKX_ROW_MAJOR, MKX_TRANS);
          tc.tb_mix = 0;
          tc.ld16 = 1;
          tc.tag = 3000 + op * 100 + c;
          mt_rng g;
          mt_rng_init(&g, mt.seed, -1, tc.tag);
          tc.pad_a = (int)mt_rng_int(&g, 0, 1);
          tc.pad_b = (int)mt_rng_int(&g, 0, 1);
          tc.pad_c = (int)mt_rng_int(&g, 0, 1);
          const int64_t n = ns[c % 3];
          if (op == OP_AG) {
            tc.k = ks[c % 4];
            for (int q = 0; q < p; q++) {
              tc.rows[q] = mt_rng_int(&g, 1, 200);
              tc.nl[q] = ns[(c + q) % 3];
            }
            if (c % 3 == 0 && p > 1) tc.rows[(c / 3) % p] = 0;
          } else {
            tc.M = c % 3 == 0 ? 2 * p + 1 : mt_rng_int(&g, 100, 300);
            for (int q = 0; q < p; q++) {
              tc.kl[q] = ks[(c + q) % 4];
              tc.nl[q] = n;
            }
            if (c % 4 == 1 && p > 1) tc.kl[(c / 4) % p] = 0;
          }
          run_case(&tc, c % 5 == 0);
        }
  if (mt.rank == 0) mt_diag("fused matrix: %d cases", runs);
}

/* mkx.h, option tp_pull=yes: a fused fp8 AllGather+GEMM whose ranks' rows
 * are whole 128-row tiles (the last rank's may end anywhere) reads them
 * in place; every layout, both types, every C type, A_out and a_out as
 * run_case draws them, on a communicator of its own. */
static void pull_matrix(void) {
  static const MKX_Datatype dts[2] = {MKX_FP8_E4M3, MKX_FP8_E5M2};
  static const MKX_Datatype cts[3] = {MKX_BF16, MKX_FP16, MKX_FP32};
  static const int64_t ks[4] = {16, 272, 128, 1040}, ns[3] = {8, 136, 256};
  const char *const kv[] = {"mkx_path", "gpu", "mkx_tp_pull", "yes", NULL};
  MKX_Comm own = comm, pc = mt_comm_with(kv);
  if (!pc) return;
  comm = pc, pull_on = 1;
  int runs = 0;
  for (int L = 0; L < 4; L++)
    for (int d = 0; d < 2; d++, runs++) {
      const int c = L * 2 + d;
      tcase tc;
      make_case(&tc, OP_AG, c, (MKX_Scale_layout)L, dts[d], cts[c % 3],
                MKX_ROW_MAJOR, MKX_TRANS);
      tc.tb_mix = 0;
      tc.ld16 = 1;
      tc.tag = 3600 + c;
      mt_rng g;
      mt_rng_init(&g, mt.seed, -1, tc.tag);
      tc.pad_a = (int)mt_rng_int(&g, 0, 1);
      tc.pad_c = (int)mt_rng_int(&g, 0, 1);
      tc.k = ks[c % 4];
      for (int q = 0; q < mt.size; q++) {
        tc.rows[q] = q + 1 < mt.size ? 128 * mt_rng_int(&g, 1, 2)
                                     : mt_rng_int(&g, 1, 200);
        tc.nl[q] = ns[(c + q) % 3];
      }
      run_case(&tc, 0);
    }
  comm = own, pull_on = 0;
  CHECK_RC(MKX_Comm_free(&pc), MKX_SUCCESS, "MKX_Comm_free (tp_pull=yes)");
  if (mt.rank == 0) mt_diag("pull matrix: %d cases", runs);
}

#ifdef MKX_TEST_CUDA
/* One fused fp8 call of op (scales of layout L) on stream st: its case,
 * made and checked by the caller. */
static int capture_case(int op, MKX_Scale_layout L, inst *in, callargs *a,
                        MKX_Stream st) {
  tcase tc;
  make_case(&tc, op, 1, L, MKX_FP8_E4M3, MKX_BF16, MKX_ROW_MAJOR, MKX_TRANS);
  tc.tb_mix = 0, tc.ld16 = 1, tc.null_scales = 0, tc.nonnull_none = 0;
  tc.tag = 3900 + op * 4 + L;
  tc.k = 128;
  for (int q = 0; q < mt.size; q++) {
    tc.nl[q] = 136;
    tc.kl[q] = 128;
    if (op == OP_AG && !tc.rows[q]) tc.rows[q] = 3;
  }
  inst_make(in, &tc);
  inst_args(in, 1, a);
  a->stream = st;
  return in->fused;
}

/* mkx.h: a fused fp8 call without scales may be captured in a CUDA graph
 * and replayed (the bits of the call itself, every replay); one with
 * scales reads them back first, so on a stream being captured it returns
 * MKX_ERR_UNSUPPORTED on every rank before it touches the stream (the
 * capture still ends cleanly). */
static void capture_cases(void) {
  int nodes = 0;
  MKX_Comm_num_nodes(comm, &nodes);
  if (nodes > 1) return; /* mkx.h: the several-node paths synchronise */
  cudaStream_t st;
  MT_CUDA(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  for (int op = OP_AG; op <= OP_AR; op++) {
    char desc[900];
    inst in;
    callargs a;
    if (!capture_case(op, MKX_SCALE_NONE, &in, &a, (MKX_Stream)st)) {
      if (mt.rank == 0)
        mt_diag("%s: no fused path here, capture not tried", op_names[op]);
      inst_free(&in);
      continue;
    }
    describe(&in, desc, sizeof desc);
    poison_outputs(&in);
    int rc = call_scaled(&a); /* makes the workspace a capture may use */
    MT_CUDA(cudaStreamSynchronize(st));
    CHECK_RC(rc, MKX_SUCCESS, "%s [before the capture]: %s", desc,
             rc ? last_error_copy() : "");
    fetch_outputs(&in, 1);
    const uint64_t h0 = c_hash(&in);
    poison_outputs(&in);
    cudaGraph_t g = NULL;
    cudaGraphExec_t x = NULL;
    MT_CUDA(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    rc = call_scaled(&a);
    MT_CUDA(cudaStreamEndCapture(st, &g));
    CHECK_RC(rc, MKX_SUCCESS, "%s, captured: %s", desc,
             rc ? last_error_copy() : "");
    if (mt_all(rc == MKX_SUCCESS)) {
      MT_CUDA(cudaGraphInstantiate(&x, g, 0));
      for (int rep = 0; rep < 2; rep++) {
        poison_outputs(&in);
        MPI_Barrier(MPI_COMM_WORLD);
        MT_CUDA(cudaGraphLaunch(x, st));
        MT_CUDA(cudaStreamSynchronize(st));
        fetch_outputs(&in, 1);
        CHECK(c_hash(&in) == h0, "%s: replay %d gives the bits of the call",
              desc, rep + 1);
      }
      MT_CUDA(cudaGraphExecDestroy(x));
    }
    if (g) MT_CUDA(cudaGraphDestroy(g));
    inst_free(&in);

    /* with scales: refused inside a capture */
    capture_case(op, MKX_SCALE_TENSOR, &in, &a, (MKX_Stream)st);
    describe(&in, desc, sizeof desc);
    poison_outputs(&in);
    rc = call_scaled(&a);
    MT_CUDA(cudaStreamSynchronize(st));
    CHECK_RC(rc, MKX_SUCCESS, "%s [before the capture]: %s", desc,
             rc ? last_error_copy() : "");
    poison_outputs(&in);
    g = NULL;
    MT_CUDA(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    rc = call_scaled(&a);
    const cudaError_t e = cudaStreamEndCapture(st, &g);
    CHECK_RC(rc, MKX_ERR_UNSUPPORTED, "%s, captured: refused (\"%s\")", desc,
             last_error_copy());
    CHECK(e == cudaSuccess,
          "%s: the capture ends cleanly after the refusal "
          "(%s)",
          desc, cudaGetErrorString(e));
    if (g) MT_CUDA(cudaGraphDestroy(g));
    fetch_outputs(&in, 1);
    CHECK(outputs_untouched(&in), "%s: the refused call wrote nothing", desc);
    inst_free(&in);
  }
  MT_CUDA(cudaStreamDestroy(st));
}
#endif

/* Every finite value of both types through an identity B, scales powers
 * of two: C is exact (one nonzero product per element). */
static void every_value(void) {
  static const MKX_Datatype dts[2] = {MKX_FP8_E4M3, MKX_FP8_E5M2};
  for (int d = 0; d < 2; d++)
    for (int L = 0; L < 4; L++) {
      uint8_t fin[256];
      const int nfin = fp8_finite(dts[d], fin);
      tcase tc;
      memset(&tc, 0, sizeof tc);
      tc.op = OP_AG;
      tc.dt = dts[d];
      tc.ct = MKX_FP32;
      tc.order = L % 2 ? MKX_COL_MAJOR : MKX_ROW_MAJOR;
      tc.layout = (MKX_Scale_layout)L;
      tc.tb0 = d ? MKX_TRANS : MKX_NO_TRANS;
      tc.tb_mix = 1;
      tc.k = nfin;
      for (int q = 0; q < mt.size; q++) tc.rows[q] = 2, tc.nl[q] = nfin;
      tc.aout = tc.aout_scales = 1;
      tc.pad_a = 1;
      tc.exact = 1;
      tc.tag = 900 + d * 4 + L;
      run_case(&tc, 0);
    }
}

/* Reductions where every k_local is 0 (all pointers NULL): C = 0. */
static void all_empty(void) {
  for (int op = OP_RS; op <= OP_AR; op++) {
    tcase tc;
    make_case(&tc, op, 3, MKX_SCALE_BLOCK, MKX_FP8_E5M2, MKX_BF16,
              MKX_ROW_MAJOR, MKX_NO_TRANS);
    tc.tag = 950 + op;
    tc.null_empty = 1;
    for (int q = 0; q < mt.size; q++) tc.kl[q] = 0;
    run_case(&tc, 0);
  }
}

/* ---- the unscaled calls with fp8 --------------------------------------- */

static void same_as_unscaled(int op, MKX_Datatype dt, MKX_Datatype ct) {
  const int p = mt.size, dev = mt.device && on_gpu;
  tcase tc;
  make_case(&tc, op, 5, MKX_SCALE_NONE, dt, ct, MKX_COL_MAJOR, MKX_TRANS);
  tc.tag = 800 + op * 8 + (dt == MKX_FP8_E5M2) * 4 + (ct == MKX_BF16);
  tc.null_scales = 0;
  tc.nonnull_none = 0;
  tc.aout = op == OP_AG;
  tc.aout_scales = 0;
  if (op == OP_AG)
    tc.k = 129;
  else
    for (int q = 0; q < p; q++) tc.kl[q] = 129 + q;
  inst in;
  inst_make(&in, &tc);
  char desc[900];
  describe(&in, desc, sizeof desc);
  callargs a;
  inst_args(&in, dev, &a);
  /* NaN arrays for layout NONE, which must not read them; 1.0 for TENSOR */
  tbuf nan, one;
  tbuf_alloc(&nan, 256 * sizeof(float));
  tbuf_alloc(&one, 4 * sizeof(float));
  ((float *)one.host)[0] = 1.0f;
  tbuf_upload(&one);
  unsigned char *c0 = malloc(in.C.bytes), *o0 = malloc(in.O.bytes);
  poison_outputs(&in);
  int rc = call_plain(&a);
  CHECK_RC(rc, MKX_SUCCESS, "%s: the unscaled call takes %s: %s", desc,
           tname(dt), rc ? last_error_copy() : "");
  if (!mt_all(rc == MKX_SUCCESS)) goto out;
  fetch_outputs(&in, dev);
  check_c(&in, desc, "C of the unscaled call");
  check_aux(&in, desc);
  memcpy(c0, in.C.host, in.C.bytes);
  memcpy(o0, in.O.host, in.O.bytes);
  for (int v = 0; v < 4; v++) {
    static const char *const what[] = {
        "scales NULL", "layout NONE, a/b/a_out NULL",
        "layout NONE, a and b NaN arrays, a_out poisoned (none read)",
        "layout TENSOR, a = b = 1.0"};
    callargs s = a;
    s.sc_null = v == 0;
    memset(&s.sc, 0, sizeof s.sc);
    s.sc.layout = v == 3 ? MKX_SCALE_TENSOR : MKX_SCALE_NONE;
    if (v == 2) {
      s.sc.a = ptr_of(&nan, dev);
      s.sc.b = ptr_of(&nan, dev);
      s.sc.a_out = ptr_of(&in.SAO, dev);
    }
    if (v == 3) {
      s.sc.a = ptr_of(&one, dev);
      s.sc.b = ptr_of(&one, dev);
      if (op == OP_AG) s.sc.a_out = ptr_of(&in.SAO, dev);
    }
    poison_outputs(&in);
    rc = call_scaled(&s);
    CHECK_RC(rc, MKX_SUCCESS, "%s, _scaled with %s: %s", desc, what[v],
             rc ? last_error_copy() : "");
    if (!mt_all(rc == MKX_SUCCESS)) continue;
    fetch_outputs(&in, dev);
    CHECK(!memcmp(c0, in.C.host, in.C.bytes) &&
              !memcmp(o0, in.O.host, in.O.bytes),
          "%s: _scaled with %s gives the unscaled call's bits (C %s, A_out "
          "%s)",
          desc, what[v], memcmp(c0, in.C.host, in.C.bytes) ? "differs" : "same",
          memcmp(o0, in.O.host, in.O.bytes) ? "differs" : "same");
    if (v == 3 && op == OP_AG) {
      size_t bad = 0;
      for (int64_t i = 0; i < in.M; i++)
        bad += ((const float *)in.SAO.host)[i] != 1.0f;
      CHECK(bad == 0 && all_ff(in.SAO.host, (size_t)in.M * 4, in.SAO.bytes),
            "%s: TENSOR 1.0: a_out is M = %lld values 1.0 (%zu not)", desc,
            (long long)in.M, bad);
    } else {
      CHECK(all_ff(in.SAO.host, 0, in.SAO.bytes), "%s: %s: a_out not written",
            desc, what[v]);
    }
  }
out:
  free(c0);
  free(o0);
  tbuf_free(&nan);
  tbuf_free(&one);
  inst_free(&in);
}

/* ---- plans ------------------------------------------------------------------ */

static void plan_case(int op, MKX_Scale_layout lay, int bad_start) {
  const int p = mt.size, r = mt.rank, dev = mt.device && on_gpu;
  tcase tc;
  make_case(&tc, op, 10 + lay, lay,
            lay == MKX_SCALE_ROW ? MKX_FP8_E5M2 : MKX_FP8_E4M3,
            lay == MKX_SCALE_TENSOR ? MKX_FP16 : MKX_FP32,
            lay == MKX_SCALE_BLOCK ? MKX_COL_MAJOR : MKX_ROW_MAJOR,
            op == OP_RS ? MKX_TRANS : MKX_NO_TRANS);
  tc.tag = 600 + op * 4 + lay;
  if (op == OP_AG) {
    tc.k = 300;
    tc.aout = tc.aout_scales = 1;
    for (int q = 0; q < p; q++)
      if (!tc.rows[q]) tc.rows[q] = 3; /* a bad start needs a read */
  } else {
    for (int q = 0; q < p; q++) tc.kl[q] = q % 2 ? 129 : 300;
  }
  inst in;
  inst_make(&in, &tc);
  char desc[900], d2[1000];
  describe(&in, desc, sizeof desc);
  callargs a;
  inst_args(&in, dev, &a);
  /* the plain call first: a start runs as it would */
  poison_outputs(&in);
  int rc = call_scaled(&a);
  CHECK_RC(rc, MKX_SUCCESS, "%s [plain call before the plan]: %s", desc,
           rc ? last_error_copy() : "");
  if (!mt_all(rc == MKX_SUCCESS)) {
    inst_free(&in);
    return;
  }
  fetch_outputs(&in, dev);
  unsigned char *c0 = malloc(in.C.bytes);
  memcpy(c0, in.C.host, in.C.bytes);

  MKX_Scales local = a.sc;
  MKX_Request req = NULL;
  rc = call_init(&a, &local, &req);
  snprintf(d2, sizeof d2, "plan of %s", desc);
  CHECK_RC(rc, MKX_SUCCESS, "%s: _scaled_init: %s", d2,
           rc ? last_error_copy() : "");
  if (!mt_all(rc == MKX_SUCCESS)) {
    if (req) MKX_Request_free(&req);
    free(c0);
    inst_free(&in);
    return;
  }
  /* mkx.h: *scales is copied at _init; scribble over it */
  local.layout = (MKX_Scale_layout)77;
  local.a = local.b = NULL;
  local.a_out = NULL;
  for (int start = 0; start < 2; start++) {
    if (start == 1) inst_version(&in, 1); /* new scale values, uploaded */
    poison_outputs(&in);
    rc = MKX_Start(req, NULL);
    CHECK_RC(rc, MKX_SUCCESS, "%s: MKX_Start %d (scale values v%d): %s", d2,
             start + 1, in.version, rc ? last_error_copy() : "");
    if (!mt_all(rc == MKX_SUCCESS)) break;
    fetch_outputs(&in, dev);
    char d3[1100];
    snprintf(d3, sizeof d3, "%s, start %d (scale values v%d)", d2, start + 1,
             in.version);
    check_c(&in, d3, "C");
    check_aux(&in, d3);
    if (start == 0)
      CHECK(!memcmp(c0, in.C.host, in.C.bytes), "%s: the plain call's bits",
            d3);
  }
  if (bad_start) {
    /* a bad value found by a start: the scales' rule, no output written;
     * then the good values again, and the plan runs */
    const int bad = p - 1;
    const int64_t idx = in.me.nsa > 1 ? in.me.nsa - 1 : 0;
    if (r == bad) {
      ((float *)in.SA.host)[idx] = NAN;
      tbuf_upload(&in.SA);
    }
    poison_outputs(&in);
    rc = MKX_Start(req, NULL);
    const char *msg = last_error_copy();
    CHECK_RC(rc, r == bad ? MKX_ERR_INVALID_ARG : MKX_ERR_PEER,
             "%s: MKX_Start with a[%lld] = NaN on rank %d: %s", d2,
             (long long)idx, bad, msg);
    fetch_outputs(&in, dev);
    CHECK(outputs_untouched(&in), "%s: bad start: no output written", d2);
    if (r == bad) {
      char needle[32];
      snprintf(needle, sizeof needle, "%lld", (long long)idx);
      CHECK(strstr(msg, needle) != NULL,
            "%s: the bad start's message names index %s: \"%s\"", d2, needle,
            msg);
    }
    store_scales(&in);
    poison_outputs(&in);
    rc = MKX_Start(req, NULL);
    CHECK_RC(rc, MKX_SUCCESS, "%s: MKX_Start after the values are good again",
             d2);
    if (mt_all(rc == MKX_SUCCESS)) {
      fetch_outputs(&in, dev);
      check_c(&in, d2, "C after the good values are back");
    }
  }
  rc = MKX_Request_free(&req);
  CHECK_RC(rc, MKX_SUCCESS, "%s: MKX_Request_free", d2);
  CHECK(req == NULL, "%s: MKX_Request_free sets the request to NULL", d2);
  free(c0);
  inst_free(&in);
}

/* ---- errors ---------------------------------------------------------------- */

enum { K_SCALED, K_PLAIN, K_INIT };

/* Make the call with `a` (this rank's arguments, made bad on rank `bad`,
 * or on every rank when bad < 0): `want` there, MKX_ERR_PEER naming the
 * bad rank elsewhere, no output written anywhere.  On a bad rank the
 * message contains `needle` (if not NULL). */
static void expect_fail(inst *in, const callargs *a, int kind, int dev, int bad,
                        int want, const char *needle, const char *desc) {
  const int r = mt.rank;
  const int me_bad = bad < 0 || r == bad;
  poison_outputs(in);
  int rc;
  MKX_Request req = NULL;
  if (kind == K_PLAIN)
    rc = call_plain(a);
  else if (kind == K_INIT)
    rc = call_init(a, a->sc_null ? NULL : &a->sc, &req);
  else
    rc = call_scaled(a);
  const char *msg = last_error_copy();
  CHECK_RC(rc, me_bad ? want : MKX_ERR_PEER, "%s%s (bad on %s): \"%s\"",
           kind == K_INIT    ? "_init: "
           : kind == K_PLAIN ? "unscaled: "
                             : "",
           desc,
           bad < 0    ? "every rank"
           : bad == r ? "this rank"
                      : "a peer",
           msg);
  if (me_bad && needle && rc != MKX_SUCCESS)
    CHECK(strstr(msg, needle) != NULL, "%s: the message names \"%s\": \"%s\"",
          desc, needle, msg);
  if (!me_bad && rc == MKX_ERR_PEER) {
    char rs[16];
    snprintf(rs, sizeof rs, "%d", bad);
    CHECK(strstr(msg, rs) != NULL, "%s: MKX_ERR_PEER names rank %d: \"%s\"",
          desc, bad, msg);
  }
  if (req) MKX_Request_free(&req);
  fetch_outputs(in, dev);
  CHECK(outputs_untouched(in), "%s: no output written (C, A_out, a_out)", desc);
}

/* The base of the error cases: each rank's share non-empty. */
static void err_case(tcase *tc, int op, MKX_Scale_layout lay) {
  const int p = mt.size;
  make_case(tc, op, 2, lay, MKX_FP8_E4M3, MKX_FP32, MKX_ROW_MAJOR,
            MKX_NO_TRANS);
  tc->tag = 500 + op * 4 + lay;
  tc->null_empty = 0;
  tc->nonnull_none = 0;
  tc->null_scales = 0;
  if (op == OP_AG) {
    tc->k = 300; /* kb = 3 */
    for (int q = 0; q < p; q++) tc->rows[q] = 5, tc->nl[q] = 130;
    tc->aout = tc->aout_scales = 1;
  } else {
    tc->M = 20;
    for (int q = 0; q < p; q++) tc->kl[q] = 129, tc->nl[q] = 130;
  }
}

static void bad_layouts_and_types(int dev) {
  const int p = mt.size, last = p - 1, r = mt.rank;
  char desc[300];
  for (int op = OP_AG; op <= OP_AR; op++) {
    tcase tc;
    inst in;
    callargs a, b;
    err_case(&tc, op, MKX_SCALE_ROW);
    inst_make(&in, &tc);
    inst_args(&in, dev, &a);
    const char *on = op_names[op];

    b = a;
    if (r == last) b.sc.layout = (MKX_Scale_layout)7;
    snprintf(desc, sizeof desc, "%s: layout 7 on rank %d", on, last);
    expect_fail(&in, &b, K_SCALED, dev, last, MKX_ERR_INVALID_ARG, NULL, desc);
    b = a;
    b.sc.layout = (MKX_Scale_layout)-1;
    snprintf(desc, sizeof desc, "%s: layout -1 on every rank", on);
    expect_fail(&in, &b, K_SCALED, dev, -1, MKX_ERR_INVALID_ARG, NULL, desc);
    b = a;
    if (r == last) b.sc.layout = (MKX_Scale_layout)4;
    snprintf(desc, sizeof desc, "%s: layout 4 on rank %d", on, last);
    expect_fail(&in, &b, K_INIT, dev, last, MKX_ERR_INVALID_ARG, NULL, desc);

    /* a layout with a non-fp8 dtype (the buffers have room for it) */
    b = a;
    b.dt = MKX_BF16;
    b.sc.layout = r == last ? MKX_SCALE_TENSOR : MKX_SCALE_NONE;
    snprintf(desc, sizeof desc,
             "%s: layout TENSOR with dtype bf16 on rank %d (NONE elsewhere)",
             on, last);
    expect_fail(&in, &b, K_SCALED, dev, last, MKX_ERR_INVALID_ARG, NULL, desc);
    static const MKX_Datatype nf[3] = {MKX_BF16, MKX_FP16, MKX_FP32};
    static const MKX_Scale_layout nl[3] = {MKX_SCALE_ROW, MKX_SCALE_BLOCK,
                                           MKX_SCALE_TENSOR};
    for (int i = 0; i < 3; i++) {
      b = a;
      b.dt = nf[i];
      b.sc.layout = nl[i];
      snprintf(desc, sizeof desc, "%s: layout %s with dtype %s on every rank",
               on, layout_names[nl[i]], mt_type_name(nf[i]));
      expect_fail(&in, &b, K_SCALED, dev, -1, MKX_ERR_INVALID_ARG, NULL, desc);
    }

    /* fp8 ctype: refused */
    b = a;
    b.ct = MKX_FP8_E4M3;
    snprintf(desc, sizeof desc, "%s: ctype e4m3 on every rank", on);
    expect_fail(&in, &b, K_SCALED, dev, -1, MKX_ERR_UNSUPPORTED, NULL, desc);
    expect_fail(&in, &b, K_PLAIN, dev, -1, MKX_ERR_UNSUPPORTED, NULL, desc);
    expect_fail(&in, &b, K_INIT, dev, -1, MKX_ERR_UNSUPPORTED, NULL, desc);
    b = a;
    if (r == last) b.ct = MKX_FP8_E5M2;
    snprintf(desc, sizeof desc, "%s: ctype e5m2 on rank %d", on, last);
    expect_fail(&in, &b, K_SCALED, dev, last, MKX_ERR_UNSUPPORTED, NULL, desc);
    b = a;
    b.dt = MKX_BF16;
    b.ct = MKX_FP8_E5M2;
    b.sc.layout = MKX_SCALE_NONE;
    snprintf(desc, sizeof desc, "%s: dtype bf16, ctype e5m2", on);
    expect_fail(&in, &b, K_PLAIN, dev, -1, MKX_ERR_UNSUPPORTED, NULL, desc);
    b = a;
    b.ct = MKX_FP64;
    snprintf(desc, sizeof desc, "%s: dtype e4m3 with ctype fp64", on);
    expect_fail(&in, &b, K_SCALED, dev, -1, MKX_ERR_UNSUPPORTED, NULL, desc);
    b = a;
    b.dt = (MKX_Datatype)7;
    snprintf(desc, sizeof desc, "%s: dtype 7 (not a type)", on);
    expect_fail(&in, &b, K_SCALED, dev, -1, MKX_ERR_INVALID_ARG, NULL, desc);

    inst_free(&in);

    /* NULL scale arrays where the layout reads them (the others' arrays
     * valid for the layout) */
    for (int L = MKX_SCALE_TENSOR; L <= MKX_SCALE_BLOCK; L++) {
      err_case(&tc, op, (MKX_Scale_layout)L);
      inst_make(&in, &tc);
      inst_args(&in, dev, &a);
      b = a;
      if (r == last) b.sc.a = NULL;
      snprintf(desc, sizeof desc, "%s: layout %s, a NULL on rank %d", on,
               layout_names[L], last);
      expect_fail(&in, &b, K_SCALED, dev, last, MKX_ERR_NULL_POINTER, NULL,
                  desc);
      b = a;
      if (r == last) b.sc.b = NULL;
      snprintf(desc, sizeof desc, "%s: layout %s, b NULL on rank %d", on,
               layout_names[L], last);
      expect_fail(&in, &b, L == MKX_SCALE_ROW ? K_INIT : K_SCALED, dev, last,
                  MKX_ERR_NULL_POINTER, NULL, desc);
      if (L == MKX_SCALE_ROW)
        expect_fail(&in, &b, K_SCALED, dev, last, MKX_ERR_NULL_POINTER, NULL,
                    desc);
      inst_free(&in);
    }
  }
}

/* Ranks that differ on the layout (each valid on its own): the agreed
 * value, MKX_ERR_SHAPE_MISMATCH on every rank naming it. */
static void layout_mismatch(int dev) {
  const int last = mt.size - 1, r = mt.rank;
  if (mt.size < 2) return;
  for (int op = OP_AG; op <= OP_AR; op++) {
    tcase t1, t2;
    inst i1, i2;
    callargs a;
    err_case(&t1, op, MKX_SCALE_BLOCK);
    err_case(&t2, op, MKX_SCALE_ROW);
    inst_make(&i1, &t1);
    inst_make(&i2, &t2);
    inst *mine = r == last ? &i2 : &i1;
    inst_args(mine, dev, &a);
    poison_outputs(mine);
    const int rc = call_scaled(&a);
    const char *msg = last_error_copy();
    CHECK_RC(rc, MKX_ERR_SHAPE_MISMATCH,
             "%s: layout ROW on rank %d, BLOCK elsewhere: \"%s\"", op_names[op],
             last, msg);
    CHECK(rc != MKX_ERR_SHAPE_MISMATCH || strstr(msg, "layout"),
          "%s: the mismatch names the layout: \"%s\"", op_names[op], msg);
    fetch_outputs(mine, dev);
    CHECK(outputs_untouched(mine), "%s: layout mismatch: no output written",
          op_names[op]);
    inst_free(&i1);
    inst_free(&i2);
  }
}

/* A scale NaN, 0, negative, infinite on the last rank, at one index. */
static void bad_scale_values(int dev, int quick) {
  const int p = mt.size, last = p - 1, r = mt.rank;
  static const MKX_Scale_layout lays[3] = {MKX_SCALE_BLOCK, MKX_SCALE_ROW,
                                           MKX_SCALE_TENSOR};
  const float vals[6] = {NAN, 0.0f, -2.0f, INFINITY, -0.0f, -INFINITY};
  static const char *const vnames[6] = {"NaN",  "0",    "-2",
                                        "+inf", "-0.0", "-inf"};
  for (int op = OP_AG; op <= OP_AR; op++) {
    if (quick && op != OP_AG) continue;
    tcase tc;
    inst in;
    callargs a;
    err_case(&tc, op, lays[op]);
    inst_make(&in, &tc);
    inst_args(&in, dev, &a);
    for (int arr = 0; arr < 2; arr++) {
      tbuf *sb = arr ? &in.SB : &in.SA;
      const int64_t n = arr ? in.me.nsb : in.me.nsa;
      /* an index with two digits where there are that many */
      const int64_t idx = n > 20 ? n - 3 : n - 1;
      char needle[32], desc[400];
      snprintf(needle, sizeof needle, "%lld", (long long)idx);
      for (int v = 0; v < (quick ? 1 : 6); v++) {
        if (v >= 4 && (op != OP_AG || arr)) continue;
        float keep = ((float *)sb->host)[idx];
        if (r == last) {
          ((float *)sb->host)[idx] = vals[v];
          tbuf_upload(sb);
        }
        snprintf(desc, sizeof desc, "%s %s: %s[%lld] = %s on rank %d",
                 op_names[op], layout_names[lays[op]], arr ? "b" : "a",
                 (long long)idx, vnames[v], last);
        expect_fail(&in, &a, K_SCALED, dev, last, MKX_ERR_INVALID_ARG, needle,
                    desc);
        if (r == last && v == 0 && op == OP_AG && !arr)
          mt_diag("message for %s: \"%s\"", desc, MKX_Get_last_error());
        ((float *)sb->host)[idx] = keep;
        tbuf_upload(sb);
      }
    }
    /* the good values again: the call runs (the communicator usable) */
    poison_outputs(&in);
    const int rc = call_scaled(&a);
    char desc[300];
    snprintf(desc, sizeof desc, "%s after the bad values", op_names[op]);
    CHECK_RC(rc, MKX_SUCCESS, "%s: %s", desc, rc ? last_error_copy() : "");
    if (mt_all(rc == MKX_SUCCESS)) {
      fetch_outputs(&in, dev);
      check_c(&in, desc, "C");
    }
    inst_free(&in);
  }
}

/* Bad scales where the fused path takes the call (on one node its scales
 * are checked on the GPU, only the verdict read back; on several,
 * hier_gemm=gpu reads them back whole): a NaN, 0 or -inf on the last rank,
 * in A's or B's array of block scales, at an index past the first few
 * hundred, fails every rank (MKX_ERR_INVALID_ARG naming the array's index
 * there, MKX_ERR_PEER elsewhere); then the good values run on the path. */
static void fused_bad_scales(void) {
  const int p = mt.size, last = p - 1, r = mt.rank;
  const float vals[3] = {NAN, 0.0f, -INFINITY};
  static const char *const vnames[3] = {"NaN", "0", "-inf"};
  for (int op = OP_AG; op <= OP_AR; op++) {
    tcase tc;
    make_case(&tc, op, 6, MKX_SCALE_BLOCK, MKX_FP8_E4M3, MKX_BF16,
              MKX_ROW_MAJOR, MKX_TRANS);
    tc.tb_mix = 0;
    tc.ld16 = 1;
    tc.tag = 3900 + op;
    if (op == OP_AG) {
      tc.k = 1040;
      for (int q = 0; q < p; q++) tc.rows[q] = 300, tc.nl[q] = 256;
    } else {
      tc.M = 300;
      for (int q = 0; q < p; q++) tc.kl[q] = 1040, tc.nl[q] = 256;
    }
    inst in;
    callargs a;
    inst_make(&in, &tc);
    inst_args(&in, 1, &a);
    for (int arr = 0; arr < 2; arr++) {
      tbuf *sb = arr ? &in.SB : &in.SA;
      const int64_t n = arr ? in.me.nsb : in.me.nsa, idx = n - 2;
      char needle[48], desc[300];
      snprintf(needle, sizeof needle, "scales->%s[%lld]", arr ? "b" : "a",
               (long long)idx);
      for (int v = 0; v < 3; v++) {
        const float keep = ((float *)sb->host)[idx];
        if (r == last) {
          ((float *)sb->host)[idx] = vals[v];
          tbuf_upload(sb);
        }
        snprintf(desc, sizeof desc,
                 "%s fused operands: %s = %s on rank %d (of %lld)",
                 op_names[op], needle, vnames[v], last, (long long)n);
        expect_fail(&in, &a, K_SCALED, 1, last, MKX_ERR_INVALID_ARG, needle,
                    desc);
        ((float *)sb->host)[idx] = keep;
        tbuf_upload(sb);
      }
    }
    poison_outputs(&in);
    const int rc = call_scaled(&a);
    char desc[200];
    snprintf(desc, sizeof desc, "%s fused operands after the bad values",
             op_names[op]);
    CHECK_RC(rc, MKX_SUCCESS, "%s: %s", desc, rc ? last_error_copy() : "");
    const char *name = NULL;
    int cap = -1, ctas = -1;
    if (mt_all(rc == MKX_SUCCESS)) {
      fetch_outputs(&in, 1);
      check_c(&in, desc, "C");
      MKX_Comm_get_last_path(comm, &name, &cap, &ctas);
      CHECK(!in.fused || (name && strcmp(name, "staged")),
            "%s: took a GPU path (took \"%s\")", desc, name ? name : "?");
    }
    inst_free(&in);
  }
}

/* Device A and B with host scale arrays on the last rank: buffers of mixed
 * kinds. */
static void mixed_memory(void) {
  const int last = mt.size - 1, r = mt.rank;
  tcase tc;
  inst in;
  callargs a;
  err_case(&tc, OP_AG, MKX_SCALE_ROW);
  inst_make(&in, &tc);
  inst_args(&in, 1, &a);
  if (r == last) a.sc.a = in.SA.host;
  char desc[200];
  snprintf(desc, sizeof desc,
           "Allgather_gemm_scaled: device buffers, host a on rank %d", last);
  expect_fail(&in, &a, K_SCALED, 1, last, MKX_ERR_INVALID_ARG, NULL, desc);
  inst_free(&in);
}

/* fp8 in the calls that do not take it; MKX_Type_size. */
static void other_calls(void) {
  const int p = mt.size, r = mt.rank;
  static const MKX_Datatype dts[2] = {MKX_FP8_E4M3, MKX_FP8_E5M2};
  CHECK(MKX_Type_size(MKX_FP8_E4M3) == 1, "MKX_Type_size(MKX_FP8_E4M3) = %zu",
        MKX_Type_size(MKX_FP8_E4M3));
  CHECK(MKX_Type_size(MKX_FP8_E5M2) == 1, "MKX_Type_size(MKX_FP8_E5M2) = %zu",
        MKX_Type_size(MKX_FP8_E5M2));
  CHECK(MKX_Type_size((MKX_Datatype)7) == 0, "MKX_Type_size(7) = %zu",
        MKX_Type_size((MKX_Datatype)7));
  for (int d = 0; d < 2; d++) {
    const MKX_Datatype dt = dts[d];
    const char *tn = tname(dt);
    uint8_t q[64], kk[64], v[64], o[64];
    float lse[8];
    memset(q, 0x38, sizeof q);
    memset(kk, 0x38, sizeof kk);
    memset(v, 0x38, sizeof v);
    mt_poison(o, sizeof o);
    mt_poison(lse, sizeof lse);
    MKX_Request req = NULL;
    int rc = MKX_Ring_attention(q, kk, v, o, lse, 1, 2, 1, 1, 8, 0, 0.0, dt,
                                comm, NULL);
    CHECK_RC(rc, MKX_ERR_UNSUPPORTED, "MKX_Ring_attention with %s: %s", tn,
             last_error_copy());
    CHECK(all_ff(o, 0, sizeof o) && all_ff(lse, 0, sizeof lse),
          "MKX_Ring_attention with %s: O and LSE not written", tn);
    rc = MKX_Ring_attention_init(q, kk, v, o, lse, 1, 2, 1, 1, 8, 0, 0.0, dt,
                                 comm, MPI_INFO_NULL, &req);
    CHECK_RC(rc, MKX_ERR_UNSUPPORTED, "MKX_Ring_attention_init with %s: %s", tn,
             last_error_copy());
    if (req) MKX_Request_free(&req);

    /* MoE: 2 tokens of hidden 4, top-1 of p experts (one per rank) */
    uint8_t X[8], W[16], W1[32], W2[16], Y[64 * 4], out[8];
    int32_t ids[2] = {r % p, (r + 1) % p}, origin[64 * 3];
    float w[2] = {1.0f, 1.0f};
    int64_t er[2];
    const int64_t y_rows = 2 * p < 64 ? 2 * p : 64;
    memset(X, 0x38, sizeof X);
    memset(W, 0x38, sizeof W);
    memset(W1, 0x38, sizeof W1);
    memset(W2, 0x38, sizeof W2);
    mt_poison(Y, sizeof Y);
    mt_poison(er, sizeof er);
    mt_poison(origin, sizeof origin);
    mt_poison(out, sizeof out);
    rc = MKX_Moe_dispatch_gemm(X, 2, 4, ids, w, 1, p, W, 4, Y, y_rows, er,
                               origin, dt, comm, NULL);
    CHECK_RC(rc, MKX_ERR_UNSUPPORTED, "MKX_Moe_dispatch_gemm with %s: %s", tn,
             last_error_copy());
    CHECK(all_ff(Y, 0, sizeof Y) && all_ff(er, 0, sizeof er) &&
              all_ff(origin, 0, sizeof origin),
          "MKX_Moe_dispatch_gemm with %s: Y, expert_rows, origin not written",
          tn);
    rc = MKX_Moe_dispatch_gemm_init(X, 2, 4, ids, w, 1, p, W, 4, Y, y_rows, er,
                                    origin, dt, comm, MPI_INFO_NULL, &req);
    CHECK_RC(rc, MKX_ERR_UNSUPPORTED, "MKX_Moe_dispatch_gemm_init with %s: %s",
             tn, last_error_copy());
    if (req) MKX_Request_free(&req);
    rc = MKX_Moe_layer(X, 2, 4, ids, w, 1, p, W1, W2, 4, out, dt, comm, NULL);
    CHECK_RC(rc, MKX_ERR_UNSUPPORTED, "MKX_Moe_layer with %s: %s", tn,
             last_error_copy());
    CHECK(all_ff(out, 0, sizeof out), "MKX_Moe_layer with %s: out not written",
          tn);
    rc = MKX_Moe_layer_init(X, 2, 4, ids, w, 1, p, W1, W2, 4, out, dt, comm,
                            MPI_INFO_NULL, &req);
    CHECK_RC(rc, MKX_ERR_UNSUPPORTED, "MKX_Moe_layer_init with %s: %s", tn,
             last_error_copy());
    if (req) MKX_Request_free(&req);
  }
}

/* The decoder itself, against known values and fp16 (E5M2 is fp16's top
 * byte). */
static void decoder_self_check(void) {
  uint8_t fin[256];
  CHECK(fp8_finite(MKX_FP8_E4M3, fin) == 254 &&
            mt_fp8_decode(MKX_FP8_E4M3, 0x7E) == 448 &&
            mt_fp8_decode(MKX_FP8_E4M3, 0xFE) == -448 &&
            mt_fp8_decode(MKX_FP8_E4M3, 0x38) == 1 &&
            mt_fp8_decode(MKX_FP8_E4M3, 0x08) == ldexp(1, -6) &&
            mt_fp8_decode(MKX_FP8_E4M3, 0x07) == 7 * ldexp(1, -9) &&
            mt_fp8_decode(MKX_FP8_E4M3, 0x01) == ldexp(1, -9) &&
            mt_fp8_decode(MKX_FP8_E4M3, 0x80) == 0 &&
            isnan(mt_fp8_decode(MKX_FP8_E4M3, 0x7F)) &&
            isnan(mt_fp8_decode(MKX_FP8_E4M3, 0xFF)),
        "the test's E4M3 decoder: 254 finite, 448, 2^-9, S.1111.111 NaN");
  int same = 1;
  for (int b = 0; b < 256; b++) {
    const double x = mt_fp8_decode(MKX_FP8_E5M2, (uint8_t)b);
    const double y = mt_f16_to_f32((uint16_t)(b << 8));
    same &= (isnan(x) && isnan(y)) || x == y;
  }
  CHECK(same && fp8_finite(MKX_FP8_E5M2, fin) == 248 &&
            mt_fp8_decode(MKX_FP8_E5M2, 0x7B) == 57344 &&
            mt_fp8_decode(MKX_FP8_E5M2, 0x01) == ldexp(1, -16) &&
            isinf(mt_fp8_decode(MKX_FP8_E5M2, 0x7C)),
        "the test's E5M2 decoder: fp16's top byte, 57344, 2^-16, inf");
}

int main(int argc, char **argv) {
  mt_init(&argc, &argv);
  if (mt.size > MAXP) {
    if (mt.rank == 0) printf("1..0 # SKIP more than %d ranks\n", MAXP);
    MPI_Finalize();
    return CHECK_SKIP;
  }
  MPI_Info info = MPI_INFO_NULL;
  int vnode = 0;
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--vnode")) vnode = 1;
  if (mt.device || vnode) MPI_Info_create(&info);
  if (mt.device) MPI_Info_set(info, "mkx_path", "gpu");
  if (vnode) { /* two virtual nodes over tcp: the several-node host path */
    char vs[16];
    snprintf(vs, sizeof vs, "%d", mt.size > 1 ? mt.size / 2 : 1);
    MPI_Info_set(info, "mkx_virtual_node_size", vs);
    MPI_Info_set(info, "mkx_net", "tcp");
  }
  int rc = MKX_Comm_create(MPI_COMM_WORLD, info, &comm);
  if (info != MPI_INFO_NULL) MPI_Info_free(&info);
  CHECK_RC(rc, MKX_SUCCESS, "MKX_Comm_create: %s", last_error_copy());
  if (!mt_all(rc == MKX_SUCCESS)) return mt_finish();
  int devno = -1;
  MKX_Comm_device(comm, &devno);
  on_gpu = devno >= 0;
  const double t0 = MPI_Wtime();
  mt_guard("test_fp8", 540);
  decoder_self_check();
  other_calls();
  if (!mt.device) {
    main_matrix(1);
    every_value();
    all_empty();
    for (int op = OP_AG; op <= OP_AR; op++) {
      same_as_unscaled(op, MKX_FP8_E4M3, MKX_FP32);
      same_as_unscaled(op, MKX_FP8_E5M2, MKX_BF16);
    }
    bad_layouts_and_types(0);
    bad_scale_values(0, 0);
    layout_mismatch(0);
    for (int op = OP_AG; op <= OP_AR; op++)
      for (int L = MKX_SCALE_TENSOR; L <= MKX_SCALE_BLOCK; L++)
        plan_case(op, (MKX_Scale_layout)L, L == MKX_SCALE_BLOCK);
  } else if (on_gpu) {
    /* a subset, each call also on host buffers; operands of the fused
     * path and others (the staged path) */
    probe_fused();
    fused_matrix();
    pull_matrix();
#ifdef MKX_TEST_CUDA
    capture_cases();
#endif
    main_matrix(13);
    same_as_unscaled(OP_AG, MKX_FP8_E4M3, MKX_FP32);
    same_as_unscaled(OP_AR, MKX_FP8_E5M2, MKX_FP16);
    plan_case(OP_AG, MKX_SCALE_BLOCK, 1);
    plan_case(OP_RS, MKX_SCALE_ROW, 0);
    bad_scale_values(1, 1);
    fused_bad_scales();
    mixed_memory();
  }
  mt_guard_off();
  if (mt.rank == 0) mt_diag("done in %.2f s", MPI_Wtime() - t0);
  rc = MKX_Comm_free(&comm);
  CHECK_RC(rc, MKX_SUCCESS, "MKX_Comm_free");
  return mt_finish();
}
