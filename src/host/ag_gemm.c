/* AllGather + GEMM on the host: gather A's rows in the user's dtype (the
 * wire volume of the GPU path), then one GEMM in working precision. */
#include "core/error.h"
#include "host/blas.h"
#include "host/dtype.h"
#include "host/hier.h"
#include "host/host_ops.h"
#include "host/scales.h"
#include "host/xfer.h"

typedef struct ag_bufs {
  void *send, *full;  /* A rows in dtype: this rank's, all ranks' */
  void *Aw, *Bw, *Cw; /* working precision, dense row-major */
  float *rec, *recs;  /* A's scales as row records: this rank's, all */
} ag_bufs;

/* This rank's part before any data moves: buffers and its scales' values
 * (agreed on afterwards). */
static int ag_local(const mkx_ag_gemm_args *a, int64_t M, mkx_arena *ar,
                    ag_bufs *b) {
  MKX_Datatype wt = mkx_work_type(a->dtype);
  size_t es = MKX_Type_size(a->dtype), ws = MKX_Type_size(wt);
  const int64_t kb = mkx_scales_row_floats(a->sc.layout, a->k);
  const MKX_Scale_layout l = a->sc.layout;
  const char *fn = a->fn ? a->fn : "allgather-GEMM";
  MKX_TRY(mkx_scales_check_values(fn, "scales->a", a->sc.a,
                                  mkx_scales_a_count(l, a->m_local, a->k)));
  MKX_TRY(mkx_scales_check_values(fn, "scales->b", a->sc.b,
                                  mkx_scales_b_count(l, a->k, a->n)));
  MKX_TRY(mkx_arena_array(ar, a->m_local, a->k, es, &b->send, "A rows"));
  MKX_TRY(mkx_arena_array(ar, M, a->k, es, &b->full, "gathered A"));
  b->Aw = b->full; /* fp32/fp64 data needs no working copy */
  if (wt != a->dtype)
    MKX_TRY(mkx_arena_array(ar, M, a->k, ws, &b->Aw, "A in fp32"));
  MKX_TRY(mkx_arena_array(ar, a->k, a->n, ws, &b->Bw, "working B"));
  b->rec = b->recs = NULL;
  if (kb) {
    MKX_TRY(mkx_arena_array(ar, a->m_local, kb, sizeof(float), (void **)&b->rec,
                            "A's scales"));
    MKX_TRY(mkx_arena_array(ar, M, kb, sizeof(float), (void **)&b->recs,
                            "gathered scales"));
  }
  return mkx_arena_array(ar, M, a->n, ws, &b->Cw, "working C");
}

/* B in working precision, scaled. */
static void pack_b(const mkx_ag_gemm_args *a, MKX_Datatype wt, void *Bw) {
  const int trans = a->transb == MKX_TRANS;
  mkx_mat_pack(a->dtype, a->B, trans ? a->n : a->k, trans ? a->k : a->n, a->ldb,
               a->order, wt, Bw);
  if (a->sc.layout != MKX_SCALE_NONE)
    mkx_scales_apply_b(&a->sc, trans, a->k, a->n, a->order, Bw);
}

/* After the gather: A_out and the gathered scales, then A in working
 * precision, scaled. */
static int gathered_a(MKX_Comm c, const mkx_ag_gemm_args *a,
                      const mkx_agreed *g, ag_bufs *b) {
  const int64_t M = g->total, k = a->k,
                kb = mkx_scales_row_floats(a->sc.layout, a->k);
  MKX_Datatype wt = mkx_work_type(a->dtype);
  if (kb)
    MKX_TRY(mkx_host_allgather_rows(c, b->rec, g->local, sizeof(float) * kb,
                                    b->recs, "allgather-GEMM: gather scales"));
  if (a->A_out)
    mkx_mat_unpack(a->dtype, b->full, M, k, a->dtype, a->A_out, a->ld_aout,
                   a->order);
  if (a->A_out && a->sc.a_out && kb)
    mkx_mat_unpack(MKX_FP32, b->recs, M, kb, MKX_FP32, a->sc.a_out,
                   a->order == MKX_ROW_MAJOR ? kb : M, a->order);
  if (b->Aw != b->full)
    mkx_convert(a->dtype, b->full, 1, wt, b->Aw, 1, (size_t)M * (size_t)k);
  if (kb) mkx_scales_apply_a(b->Aw, M, k, b->recs, kb);
  return MKX_SUCCESS;
}

int mkx_host_allgather_gemm(MKX_Comm c, const mkx_ag_gemm_args *a,
                            const mkx_agreed *g) {
  MKX_Datatype wt = mkx_work_type(a->dtype);
  size_t es = MKX_Type_size(a->dtype);
  int64_t M = g->total, k = a->k, n = a->n;
  mkx_arena ar = {0};
  ag_bufs b;
  mkx_xfer x;
  size_t row_bytes;
  /* g and k agree on every rank, so these failures agree too. */
  MKX_TRY(mkx_host_bytes(1, k, es, &row_bytes, "allgather-GEMM: A row"));
  MKX_TRY(mkx_xfer_fit(c->size, g->local, row_bytes, "allgather-GEMM"));
  int rc = mkx_comm_agree_rc(c, ag_local(a, M, &ar, &b), "allgather-GEMM");
  if (rc) goto out;
  mkx_mat_pack(a->dtype, a->A, a->m_local, k, a->lda, a->order, a->dtype,
               b.send);
  if (b.rec) mkx_scales_a_rows(&a->sc, a->m_local, k, a->order, b.rec);
  if (mkx_hier_usable(c)) {
    /* Several nodes: each row crosses the network once per node. */
    pack_b(a, wt, b.Bw);
    rc = mkx_hier_allgather_rows(c, b.send, g->local, row_bytes, b.full);
    goto gathered;
  }
  rc = mkx_xfer_iallgatherv(c, b.send, b.full, g->local, row_bytes, &x,
                            "allgather-GEMM: gather A");
  if (rc) goto out;
  /* Convert B while A's rows travel. */
  pack_b(a, wt, b.Bw);
  rc = mkx_xfer_wait(c, &x, "allgather-GEMM: gather A");
gathered:
  if (!rc) rc = gathered_a(c, a, g, &b);
  if (!rc) rc = mkx_host_gemm(wt, a->transb, M, n, k, b.Aw, b.Bw, b.Cw);
  if (!rc) mkx_mat_unpack(wt, b.Cw, M, n, a->ctype, a->C, a->ldc, a->order);
out:
  mkx_arena_release(&ar, rc);
  return rc;
}
