/* MKX_Gemm_reduce_scatter / MKX_Gemm_allreduce: fused single-node GPU path
 * (issue 4).  The engine computes this rank's fp32 partial A_r B_r and its
 * epilogue stores each 64-row sub-tile straight into the owner's receive
 * slot for this rank (TMA over NVLink), peer-bound rows first; each owner
 * then sums the slots in rank order once their flags say they landed (same
 * bits every run) and rounds once.  Allreduce: the owner also pushes its
 * rounded rows into every peer's C (registered), so all ranks hold the same
 * bits.  Kernels: kernels/tp/gemm_rs.cu. */
#include <stdlib.h>
#include <string.h>
#include "core/error.h"
#include "ops/op.h"

#if HAVE_CUDA
#include "tp/tp_host.h"
#include "gemm/gemm_engine.h"

typedef struct red_plan {
  mkx_tp_ws *ws;
  int allreduce, bn, tiles_n;
  int64_t bnd[MKX_TP_MAX + 1], slot_elems, flag_stride;
  mkx_symm_buf creg;      /* allreduce: every rank's C */
  int64_t peer_ldc[MKX_TP_MAX];
} red_plan;

static const char *fn_name(int allreduce) {
  return allreduce ? "MKX_Gemm_allreduce" : "MKX_Gemm_reduce_scatter";
}
static int is16(MKX_Datatype t) { return t == MKX_BF16 || t == MKX_FP16; }
static int misaligned(const void *p) { return ((uintptr_t)p & 15) != 0; }

static int check(MKX_Comm c, const mkx_gemm_red_args *a, int allreduce) {
  const char *fn = fn_name(allreduce);
  MKX_TRY(mkx_tp_node_ok(c, fn));
  if (!is16(a->dtype) || (!is16(a->ctype) && a->ctype != MKX_FP32))
    return mkx_error(MKX_ERR_UNSUPPORTED, "%s: fused path takes bf16/fp16 "
                     "A, B and bf16/fp16/fp32 C only", fn);
  if (a->order != MKX_ROW_MAJOR)
    return mkx_error(MKX_ERR_UNSUPPORTED, "%s: fused path is row-major only",
                     fn);
  if (a->k_local == 0)
    return mkx_error(MKX_ERR_UNSUPPORTED, "%s: k_local = 0 on rank %d", fn,
                     c->rank);
  if (a->k_local % 8 || a->n % 8 || a->lda % 8 || a->ldb % 8 || a->ldc % 8)
    return mkx_error(MKX_ERR_UNSUPPORTED, "%s: fused path needs k_local, n, "
                     "lda, ldb, ldc multiples of 8", fn);
  if (misaligned(a->A) || misaligned(a->B) || (a->C && misaligned(a->C)))
    return mkx_error(MKX_ERR_UNSUPPORTED, "%s: fused path needs A, B, C "
                     "16-byte aligned", fn);
  if (a->M >= (1ll << 31) || a->n >= (1ll << 31) || a->k_local >= (1ll << 31))
    return mkx_error(MKX_ERR_UNSUPPORTED, "%s: sizes >= 2^31", fn);
  return MKX_SUCCESS;
}

int mkx_rs_gpu_check(MKX_Comm c, const void *args,
                     const struct mkx_agreed *g) {
  (void)g;
  return check(c, args, 0);
}
int mkx_ar_gpu_check(MKX_Comm c, const void *args,
                     const struct mkx_agreed *g) {
  (void)g;
  return check(c, args, 1);
}

/* Allreduce: map every rank's C and learn its leading dimension. */
static int register_c(MKX_Comm c, const mkx_gemm_red_args *a, red_plan *p) {
  int64_t *ldc = malloc(sizeof *ldc * (size_t)c->size);
  if (!ldc) return mkx_error(MKX_ERR_NOMEM, "%s: plan", fn_name(1));
  int rc = c->oob.allgather(c->oob.ctx, &a->ldc, ldc, sizeof *ldc,
                            c->opt.timeout_ms);
  if (rc != MKX_SUCCESS) rc = mkx_comm_fail(c, rc);
  for (int q = 0; rc == MKX_SUCCESS && q < c->size; q++)
    p->peer_ldc[c->place.local_rank_of[q]] = ldc[q];
  free(ldc);
  if (rc != MKX_SUCCESS) return rc;
  size_t es = MKX_Type_size(a->ctype);
  size_t bytes = ((size_t)(a->M - 1) * (size_t)a->ldc + (size_t)a->n) * es;
  return mkx_symm_register(c, a->C, bytes, &p->creg);
}

static int plan(MKX_Comm c, const mkx_gemm_red_args *a, int allreduce,
                void **out) {
  red_plan *p = calloc(1, sizeof *p);
  if (!p) return mkx_error(MKX_ERR_NOMEM, "%s: plan", fn_name(allreduce));
  p->allreduce = allreduce;
  for (int q = 0; q < c->size; q++) {
    int64_t first, count;
    MKX_Block_range(a->M, c->size, q, &first, &count);
    p->bnd[q] = first;
    p->bnd[q + 1] = first + count;
  }
  p->bn = mkx_tp_rs_bn(a->n);
  p->tiles_n = (int)((a->n + p->bn - 1) / p->bn);
  p->flag_stride = (a->M + 63) / 64 * p->tiles_n;
  p->slot_elems = (p->bnd[1] - p->bnd[0]) * a->n; /* block 0 is the largest */
  mkx_tp_need need = {0, c->size * p->flag_stride,
                      (size_t)c->size * (size_t)p->slot_elems * 4};
  int rc = mkx_tp_ws_acquire(c, &need, &p->ws);
  if (rc == MKX_SUCCESS && allreduce) {
    rc = register_c(c, a, p);
    if (rc != MKX_SUCCESS) mkx_tp_ws_release(p->ws);
  }
  if (rc != MKX_SUCCESS) {
    free(p);
    return rc;
  }
  *out = p;
  return MKX_SUCCESS;
}

int mkx_rs_gpu_plan(MKX_Comm c, const void *args, const struct mkx_agreed *g,
                    void **out) {
  (void)g;
  return plan(c, args, 0, out);
}
int mkx_ar_gpu_plan(MKX_Comm c, const void *args, const struct mkx_agreed *g,
                    void **out) {
  (void)g;
  return plan(c, args, 1, out);
}

void mkx_red_gpu_free(MKX_Comm c, void *plan) {
  red_plan *p = plan;
  (void)c;
  if (!p) return;
  mkx_tp_ws_release(p->ws);
  mkx_symm_buf_free(&p->creg);
  free(p);
}

static int run_gemm(MKX_Comm c, const red_plan *p, const mkx_gemm_red_args *a,
                    cudaStream_t st) {
  const int me = c->place.local_rank;
  mkx_tp_rs_desc d;
  memset(&d, 0, sizeof d);
  d.m = a->M;
  d.n = a->n;
  d.k = a->k_local;
  d.a = a->A;
  d.lda = a->lda;
  d.b = a->B;
  d.ldb = a->ldb;
  d.b_kmajor = a->transb == MKX_TRANS;
  d.ab_type = mkx_tp_gemm_type(a->dtype);
  d.size = c->size;
  d.rank = c->rank;
  for (int q = 0; q <= c->size; q++) d.bnd[q] = p->bnd[q];
  for (int q = 0; q < c->size; q++) {
    const int lq = c->place.local_rank_of[q];
    d.recv[q] = (float *)mkx_tp_ws_data(p->ws, lq) +
                (size_t)c->rank * (size_t)p->slot_elems;
    d.flags[q] = mkx_tp_ws_flags(p->ws, lq) + c->rank * p->flag_stride;
  }
  d.epoch = (const int *)(mkx_tp_ws_peer(p->ws, me) + MKX_TP_OFF_EPOCH);
  d.bn = p->bn;
  return mkx_tp_launch_rc(mkx_tp_rs_gemm(&d, st), fn_name(p->allreduce),
                          "GEMM with pushed partials");
}

static int run_reduce(MKX_Comm c, const red_plan *p,
                      const mkx_gemm_red_args *a, cudaStream_t st) {
  const int me = c->place.local_rank;
  mkx_tp_red_desc d;
  memset(&d, 0, sizeof d);
  d.slots = (const float *)mkx_tp_ws_data(p->ws, me);
  d.slot_stride = p->slot_elems;
  d.first = p->bnd[c->rank];
  d.count = p->bnd[c->rank + 1] - d.first;
  d.n = a->n;
  d.bn = p->bn;
  d.tiles_n = p->tiles_n;
  d.flags = mkx_tp_ws_flags(p->ws, me);
  d.epoch = (const int *)(mkx_tp_ws_peer(p->ws, me) + MKX_TP_OFF_EPOCH);
  d.flag_stride = p->flag_stride;
  d.c_type = mkx_tp_gemm_type(a->ctype);
  d.c = a->C;
  d.ldc = a->ldc;
  d.c_row0 = p->allreduce ? d.first : 0;
  d.allreduce = p->allreduce;
  for (int i = 0; p->allreduce && i < c->size; i++) {
    d.peer_c[i] = p->creg.peer[i];
    d.peer_ldc[i] = p->peer_ldc[i];
  }
  mkx_tp_sync_fill(c, p->ws, 0, &d.sync);
  return mkx_tp_launch_rc(mkx_tp_reduce(&d, st), fn_name(p->allreduce),
                          "owner reduction");
}

int mkx_red_gpu_start(MKX_Comm c, void *plan, const void *args,
                      MKX_Stream stream) {
  red_plan *p = plan;
  const mkx_gemm_red_args *a = args;
  const char *fn = fn_name(p->allreduce);
  cudaStream_t st = (cudaStream_t)stream;
  MKX_TRY(mkx_tp_begin(c, p->ws, fn, stream, 0));
  MKX_TRY(run_gemm(c, p, a, st));
  MKX_TRY(run_reduce(c, p, a, st));
  if (p->allreduce) {
    mkx_tp_sync s;
    mkx_tp_sync_fill(c, p->ws, 0, &s);
    MKX_TRY(mkx_tp_launch_rc(mkx_tp_ar_wait(&s, st), fn, "allreduce wait"));
  }
  return mkx_tp_end(p->ws, stream);
}
#else
typedef int mkx_gemm_red_gpu_unused; /* ISO C: not an empty unit */
#endif
