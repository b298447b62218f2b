/* GEMM + ReduceScatter and GEMM + AllReduce on the host.  Partials travel
 * in working precision and each block's owner adds them in rank order, so
 * the bits do not depend on MPI's reduction algorithm; the sum is rounded
 * to ctype once. */
#include <limits.h>
#include "core/error.h"
#include "host/blas.h"
#include "host/dtype.h"
#include "host/hier.h"
#include "host/host_ops.h"
#include "host/scales.h"
#include "host/xfer.h"

typedef struct red_ctx {
  int64_t *rows;        /* [p] rows of each rank's block */
  int64_t *rrows;       /* [p] rows from each rank: this rank's count */
  int64_t first, count; /* this rank's block */
  void *part;           /* M x n partial product, working precision */
  void *recv;           /* p x count x n partials of this block */
  void *blk;            /* count x n rounded sum, ctype */
} red_ctx;

static int red_blocks(MKX_Comm c, int64_t M, mkx_arena *ar, red_ctx *r) {
  MKX_TRY(mkx_arena_array(ar, c->size, 1, sizeof(int64_t), (void **)&r->rows,
                          "block sizes"));
  MKX_TRY(mkx_arena_array(ar, c->size, 1, sizeof(int64_t), (void **)&r->rrows,
                          "block sizes"));
  for (int q = 0; q < c->size; q++) {
    int64_t first;
    MKX_TRY(MKX_Block_range(M, c->size, q, &first, &r->rows[q]));
    if (q == c->rank) r->first = first;
  }
  r->count = r->rows[c->rank];
  for (int q = 0; q < c->size; q++) r->rrows[q] = r->count;
  /* Block 0 is the largest: checking it gives every rank one answer. */
  if (r->rows[0] > INT_MAX / c->size)
    return mkx_error(MKX_ERR_UNSUPPORTED,
                     "GEMM reduction: %d blocks of %lld rows exceed MPI's "
                     "int count",
                     c->size, (long long)r->rows[0]);
  return MKX_SUCCESS;
}

/* This rank's fp8 operands (working copies Aw, Bw) times their scales,
 * whose values are checked first. */
static int scale_operands(const mkx_rs_ar_args *a, mkx_arena *ar, float *Aw,
                          float *Bw) {
  const MKX_Scale_layout l = a->sc.layout;
  const int64_t kl = a->k_local, kb = mkx_scales_row_floats(l, kl);
  float *rec;
  const char *fn = a->fn ? a->fn : "GEMM reduction";
  MKX_TRY(mkx_scales_check_values(fn, "scales->a", a->sc.a,
                                  mkx_scales_a_count(l, a->M, kl)));
  MKX_TRY(mkx_scales_check_values(fn, "scales->b", a->sc.b,
                                  mkx_scales_b_count(l, kl, a->n)));
  if (kl == 0) return MKX_SUCCESS;
  MKX_TRY(mkx_arena_array(ar, a->M, kb, sizeof(float), (void **)&rec,
                          "A's scales"));
  mkx_scales_a_rows(&a->sc, a->M, kl, a->order, rec);
  mkx_scales_apply_a(Aw, a->M, kl, rec, kb);
  mkx_scales_apply_b(&a->sc, a->transb == MKX_TRANS, kl, a->n, a->order, Bw);
  return MKX_SUCCESS;
}

/* Everything this rank does alone: buffers and its partial product.  Its
 * failures are agreed on afterwards. */
static int red_local(const mkx_rs_ar_args *a, int p, mkx_arena *ar,
                     red_ctx *r) {
  MKX_Datatype wt = mkx_work_type(a->dtype);
  size_t ws = MKX_Type_size(wt);
  int64_t M = a->M, n = a->n, kl = a->k_local;
  int trans = a->transb == MKX_TRANS;
  void *Aw, *Bw;
  MKX_TRY(mkx_arena_array(ar, M, kl, ws, &Aw, "working A"));
  MKX_TRY(mkx_arena_array(ar, kl, n, ws, &Bw, "working B"));
  MKX_TRY(mkx_arena_array(ar, M, n, ws, &r->part, "partial product"));
  MKX_TRY(mkx_arena_array(ar, (int64_t)p * r->count, n, ws, &r->recv,
                          "received partials"));
  MKX_TRY(mkx_arena_array(ar, r->count, n, MKX_Type_size(a->ctype), &r->blk,
                          "reduced block"));
  mkx_mat_pack(a->dtype, a->A, M, kl, a->lda, a->order, wt, Aw);
  mkx_mat_pack(a->dtype, a->B, trans ? n : kl, trans ? kl : n, a->ldb, a->order,
               wt, Bw);
  if (a->sc.layout != MKX_SCALE_NONE) MKX_TRY(scale_operands(a, ar, Aw, Bw));
  return mkx_host_gemm(wt, a->transb, M, n, kl, Aw, Bw, r->part);
}

/* recv[0] += recv[1] += ... in rank order, in place in block 0. */
static void sum_in_rank_order(MKX_Datatype wt, void *recv, int p, size_t len) {
  for (int q = 1; q < p; q++) {
    if (wt == MKX_FP64) {
      double *s = recv, *t = s + (size_t)q * len;
      for (size_t i = 0; i < len; i++) s[i] += t[i];
    } else {
      float *s = recv, *t = s + (size_t)q * len;
      for (size_t i = 0; i < len; i++) s[i] += t[i];
    }
  }
}

static int red_exchange(MKX_Comm c, const mkx_rs_ar_args *a, red_ctx *r) {
  MKX_Datatype wt = mkx_work_type(a->dtype);
  int p = c->size;
  mkx_xfer x;
  size_t len = (size_t)r->count * (size_t)a->n;
  if (mkx_hier_usable(c)) {
    /* Several nodes: reduce inside the node first, then each node's
     * partial of a block crosses the network once, to its owner. */
    MKX_TRY(mkx_hier_reduce_rows(c, wt, r->part, r->rows, a->n, r->recv));
    mkx_convert(wt, r->recv, 1, a->ctype, r->blk, 1, len);
    return MKX_SUCCESS;
  }
  int rc = mkx_xfer_ialltoallv(c, r->part, r->rows, r->recv, r->rrows,
                               (size_t)a->n * MKX_Type_size(wt), &x,
                               "GEMM reduction: exchange partials");
  if (!rc) rc = mkx_xfer_wait(c, &x, "GEMM reduction: exchange partials");
  if (rc) return rc;
  sum_in_rank_order(wt, r->recv, p, len);
  mkx_convert(wt, r->recv, 1, a->ctype, r->blk, 1, len);
  return MKX_SUCCESS;
}

int mkx_host_gemm_reduce_scatter(MKX_Comm c, const mkx_rs_ar_args *a,
                                 const mkx_agreed *g) {
  mkx_arena ar = {0};
  red_ctx r;
  (void)g;
  int rc = red_blocks(c, a->M, &ar, &r);
  if (!rc)
    rc = mkx_comm_agree_rc(c, red_local(a, c->size, &ar, &r),
                           "GEMM+ReduceScatter");
  if (!rc) rc = red_exchange(c, a, &r);
  if (!rc)
    mkx_mat_unpack(a->ctype, r.blk, r.count, a->n, a->ctype, a->C, a->ldc,
                   a->order);
  mkx_arena_release(&ar, rc);
  return rc;
}

/* Every rank's rounded block, to every rank (over several nodes: each
 * block crosses the network once per node). */
static int gather_blocks(MKX_Comm c, const red_ctx *r, size_t row_bytes,
                         void *full) {
  return mkx_host_allgather_rows(c, r->blk, r->rows, row_bytes, full,
                                 "GEMM+AllReduce: gather blocks");
}

/* The reduce-scatter, then an allgather of the ROUNDED blocks: every rank
 * ends with the same bits. */
int mkx_host_gemm_allreduce(MKX_Comm c, const mkx_rs_ar_args *a,
                            const mkx_agreed *g) {
  mkx_arena ar = {0};
  red_ctx r;
  void *full = NULL;
  size_t cs = MKX_Type_size(a->ctype);
  (void)g;
  int rc = red_blocks(c, a->M, &ar, &r);
  if (!rc) {
    int lrc = red_local(a, c->size, &ar, &r);
    if (!lrc) lrc = mkx_arena_array(&ar, a->M, a->n, cs, &full, "sum");
    rc = mkx_comm_agree_rc(c, lrc, "GEMM+AllReduce");
  }
  if (!rc) rc = red_exchange(c, a, &r);
  if (!rc) rc = gather_blocks(c, &r, (size_t)a->n * cs, full);
  if (!rc)
    mkx_mat_unpack(a->ctype, full, a->M, a->n, a->ctype, a->C, a->ldc,
                   a->order);
  mkx_arena_release(&ar, rc);
  return rc;
}
