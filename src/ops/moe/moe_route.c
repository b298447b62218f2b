/* The routing of an MoE call on the GPU and its verdict: with the host
 * wait (option moe_sync=yes, and always on several nodes) the status on
 * the host and, on several ranks, every rank's counts exchanged and the
 * layout made from them (moe_layout.h); without it the verdict and the
 * offsets settled on the GPU (moe_gpu.c says how a call runs). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "core/error.h"

#if HAVE_CUDA
#include "boot/oob_mpi.h"
#include "core/cuda_rc.h"
#include "ops/moe/moe_gpu_int.h"

/* A bad expert id as the call's error (every rank's message names the
 * rank it is on). */
static int bad_id(int op, const mkx_moe_args *a, int rank, int64_t slot,
                  int64_t id) {
  return mkx_error(
      MKX_ERR_INVALID_ARG, "%s: topk_ids[%lld][%lld] = %lld on rank %d %s",
      fn_of(op), (long long)(slot / a->topk), (long long)(slot % a->topk),
      (long long)id, rank,
      id >= 0 && id < a->num_experts ? "repeats an expert of the same token"
                                     : "is outside [0, num_experts)");
}

_Static_assert(MKX_MOE_ERR_ID == MKX_ERR_INVALID_ARG &&
                   MKX_MOE_ERR_TRUNC == MKX_ERR_TRUNCATE,
               "the GPU's input record carries MKX error codes (a bad "
               "scale's, MKX_MOE_ERR_SCALE, is told apart from a bad id's)");

int mkx_moe_input_error(const int *rec, const char *head) {
  if (rec[0] == MKX_MOE_ERR_SCALE) {
    float v;
    memcpy(&v, &rec[5], sizeof v);
    const long long i =
        (long long)((uint64_t)(uint32_t)rec[3] << 32 | (uint32_t)rec[4]);
    return mkx_error(MKX_ERR_INVALID_ARG,
                     "%s: %s[%lld] = %g on rank %d (a scale must be finite "
                     "and > 0); nothing was written",
                     head, mkx_moe_fp8_scale_name(rec[2]), i, (double)v,
                     rec[1]);
  }
  if (rec[0] == MKX_MOE_ERR_ID)
    return mkx_error(MKX_ERR_INVALID_ARG,
                     "%s: topk_ids[%d][%d] = %d on rank %d %s", head, rec[2],
                     rec[3], rec[4], rec[1],
                     rec[5] ? "repeats an expert of the same token"
                            : "is outside [0, num_experts)");
  return mkx_error(MKX_ERR_TRUNCATE,
                   "%s: rank %d receives %d rows, more than its y_rows (%d); "
                   "expert_rows holds the counts needed, nothing else was "
                   "written",
                   head, rec[1], rec[2], rec[3]);
}

/* The id of slot `slot` (device memory), or -1 if it cannot be read. */
static int64_t id_at(const mkx_moe_args *a, int64_t slot) {
  int32_t id = -1;
  if (cudaMemcpy(&id, a->topk_ids + slot, sizeof id, cudaMemcpyDeviceToHost) !=
      cudaSuccess)
    (void)cudaGetLastError();
  return id;
}

/* One rank: routing over its experts, and its status on the host. */
static int route_one(MKX_Comm c, int op, const mkx_moe_args *a, int64_t ep,
                     const moe_ws *w, cudaStream_t st, int64_t *total) {
  const char *fn = fn_of(op);
  mkx_moe_route_desc r = {
      a->num_tokens, (int)a->topk, (int)a->num_experts, 0,
      (int)ep,       a->topk_ids,  w->offsets,          w->rows,
      w->status,     w->route_work};
  MKX_TRY(mkx_fused_launch_rc(mkx_moe_route_run(&r, st), fn, "routing"));
  int status[2];
  MKX_CUDA_TRY(cudaMemcpyAsync(status, w->status, sizeof status,
                               cudaMemcpyDeviceToHost, st),
               fn);
  MKX_CUDA_TRY(cudaStreamSynchronize(st), fn);
  *total = status[1];
  if (status[0] != MKX_MOE_NO_BAD_SLOT)
    return bad_id(op, a, c->rank, status[0], id_at(a, status[0]));
  return MKX_SUCCESS;
}

/* What each rank tells the others after its routing. */
enum { X_RC, X_BAD, X_ID, X_YROWS, X_COUNTS };

/* This rank's record: its routing over every expert, waited for. */
static int my_record(int op, const mkx_moe_args *a, const moe_ws *w,
                     cudaStream_t st, int64_t *rec) {
  const char *fn = fn_of(op);
  const int64_t E = a->num_experts;
  mkx_moe_route_desc r = {a->num_tokens, (int)a->topk, (int)E, 0,
                          (int)E,        a->topk_ids,  w->own, w->rows,
                          w->status,     w->route_work};
  int *own = malloc((size_t)(E + 1) * sizeof *own);
  int status[2] = {MKX_MOE_NO_BAD_SLOT, 0};
  int rc = own ? MKX_SUCCESS : mkx_error(MKX_ERR_NOMEM, "%s: counts", fn);
  if (rc == MKX_SUCCESS)
    rc = mkx_fused_launch_rc(mkx_moe_route_run(&r, st), fn, "routing");
  if (rc == MKX_SUCCESS)
    rc = mkx_cuda_rc(cudaMemcpyAsync(own, w->own, (size_t)(E + 1) * sizeof *own,
                                     cudaMemcpyDeviceToHost, st),
                     fn, "counts to the host");
  if (rc == MKX_SUCCESS)
    rc = mkx_cuda_rc(cudaMemcpyAsync(status, w->status, sizeof status,
                                     cudaMemcpyDeviceToHost, st),
                     fn, "status to the host");
  if (rc == MKX_SUCCESS)
    rc = mkx_cuda_rc(cudaStreamSynchronize(st), fn, "sync");
  rec[X_RC] = rc;
  rec[X_BAD] = rc || status[0] == MKX_MOE_NO_BAD_SLOT ? -1 : status[0];
  rec[X_ID] = rec[X_BAD] >= 0 ? id_at(a, rec[X_BAD]) : 0;
  rec[X_YROWS] = op == MOE_DISPATCH ? a->y_rows : 0;
  for (int64_t e = 0; e < E; e++)
    rec[X_COUNTS + e] = rc ? 0 : own[e + 1] - own[e];
  free(own);
  return rc;
}

/* Rows owner d receives, from every rank's record. */
static int64_t owner_rows(const int64_t *all, int64_t n, int P, int64_t ep,
                          int d) {
  int64_t run = 0;
  for (int q = 0; q < P; q++)
    for (int64_t le = 0; le < ep; le++)
      run += all[(size_t)q * (size_t)n + X_COUNTS + d * ep + le];
  return run;
}

/* The layout's arrays the kernels read, to the GPU (pageable copies: the
 * host arrays are staged once these return). */
static int layout_to_gpu(const moe_plan *p, const mkx_moe_layout *L, int64_t E,
                         int64_t ep, int P, const moe_ws *w, cudaStream_t st,
                         const char *fn) {
  MKX_TRY(mkx_cuda_rc(cudaMemcpyAsync(w->base, L->base, (size_t)E * sizeof(int),
                                      cudaMemcpyHostToDevice, st),
                      fn, "row bases to the GPU"));
  MKX_TRY(mkx_cuda_rc(
      cudaMemcpyAsync(w->offsets, L->local, (size_t)(ep + 1) * sizeof(int),
                      cudaMemcpyHostToDevice, st),
      fn, "offsets to the GPU"));
  if (!p->nodes) return MKX_SUCCESS;
  MKX_TRY(
      mkx_cuda_rc(cudaMemcpyAsync(w->target, L->target, (size_t)P * sizeof(int),
                                  cudaMemcpyHostToDevice, st),
                  fn, "targets to the GPU"));
  MKX_TRY(mkx_cuda_rc(
      cudaMemcpyAsync(w->seg, L->seg_start, (size_t)(L->nseg + 1) * sizeof(int),
                      cudaMemcpyHostToDevice, st),
      fn, "segments to the GPU"));
  return mkx_cuda_rc(
      cudaMemcpyAsync(w->seg_row, L->seg_row,
                      (size_t)(L->nseg > 0 ? L->nseg : 1) * sizeof(int),
                      cudaMemcpyHostToDevice, st),
      fn, "segment rows to the GPU");
}

/* Several ranks: every rank's counts per expert, and from them the layout
 * (moe_layout.h): this rank's local expert offsets and where its rows of
 * each expert go (both on the GPU), and on several nodes what crosses the
 * network; *trunc: the first rank that receives more than its y_rows
 * (dispatch), or -1.  Bad ids and failures are every rank's error. */
static int exchange(MKX_Comm c, const moe_plan *p, const mkx_moe_args *a,
                    const moe_ws *w, cudaStream_t st, mkx_moe_layout *L,
                    int *trunc) {
  const int op = p->op;
  const char *fn = fn_of(op);
  const int P = c->size, me = c->rank;
  const int64_t E = a->num_experts, ep = E / P, n = X_COUNTS + E;
  int64_t *all = calloc((size_t)(P + 1) * (size_t)n, sizeof *all);
  if (!all) return mkx_error(MKX_ERR_NOMEM, "%s: counts", fn);
  int64_t *mine = all + (size_t)P * (size_t)n;
  const int rc = my_record(op, a, w, st, mine);
  /* bounded, and through MKX's own buffer: all may be freed after a
   * timeout (the communicator is then broken) */
  int out = mkx_comm_break(
      c, mkx_mpi_allgather(mine, all, (size_t)n * sizeof *all, c->mpi,
                           c->opt.timeout_ms, "MoE counts"));
  for (int q = 0; out == MKX_SUCCESS && q < P; q++) {
    const int64_t *r = all + (size_t)q * (size_t)n;
    if (r[X_RC])
      out = q == me ? rc
                    : mkx_error(MKX_ERR_PEER, "%s: rank %d failed (%s)", fn, q,
                                MKX_Error_string((int)r[X_RC]));
    else if (r[X_BAD] >= 0)
      out = bad_id(op, a, q, r[X_BAD], r[X_ID]);
  }
  *trunc = -1;
  for (int d = 0; out == MKX_SUCCESS && op == MOE_DISPATCH && d < P; d++)
    if (owner_rows(all, n, P, ep, d) > all[(size_t)d * (size_t)n + X_YROWS]) {
      *trunc = d;
      break;
    }
  if (out == MKX_SUCCESS)
    out =
        mkx_moe_layout_make(P, me, E, all + X_COUNTS, n, c->place.node_of_rank,
                            c->place.local_rank_of, c->place.local_size, L);
  if (out == MKX_SUCCESS) out = layout_to_gpu(p, L, E, ep, P, w, st, fn);
  free(all);
  return out;
}

/* Option moe_sync=no: routing, then the verdict and offsets on the GPU
 * (the gate word and the input record; see the top of moe_gpu.c). */
static int route_async(MKX_Comm c, const moe_plan *p, const mkx_moe_args *a,
                       const moe_ws *w, cudaStream_t st) {
  const char *fn = fn_of(p->op);
  const int E = (int)a->num_experts, k = (int)a->topk;
  const int64_t y_rows = p->op == MOE_DISPATCH ? a->y_rows : -1;
  int *err = p->ws->err_dev + MKX_FUSED_ERR_INPUT;
  /* one rank: its experts are all E; several: over every expert */
  mkx_moe_route_desc r = {a->num_tokens,
                          k,
                          E,
                          0,
                          E,
                          a->topk_ids,
                          p->multi ? w->own : w->offsets,
                          w->rows,
                          w->status,
                          w->route_work};
  mkx_moe_scan scan;
  mkx_moe_fp8_scan(c, p, a, &scan);
  MKX_TRY(mkx_fused_launch_rc(mkx_moe_route_run(&r, st), fn, "routing"));
  if (!p->multi)
    return mkx_fused_launch_rc(
        mkx_moe_verdict_run(w->status, a->topk_ids, k, E, y_rows, c->rank,
                            &scan, w->gate, err, st),
        fn, "verdict");
  mkx_moe_records rec;
  for (int q = 0; q < c->size; q++)
    rec.rec[q] = (int *)mkx_moe_ws_piece(c, p, q, W_REC);
  MKX_TRY(mkx_fused_launch_rc(
      mkx_moe_record_run(&rec, c->size, c->rank, E, w->own, w->status,
                         a->topk_ids, y_rows, &scan, st),
      fn, "counts to every rank"));
  MKX_TRY(mkx_moe_meet(c, p, MKX_FUSED_OFF_PUSHED, MKX_FUSED_AT_MOE_COUNTS, st,
                       fn));
  return mkx_fused_launch_rc(
      mkx_moe_settle_run(w->rec, c->size, c->rank, E, k, w->offsets, w->base,
                         w->gate, err, st),
      fn, "offsets and verdict");
}

int mkx_moe_route(MKX_Comm c, const moe_plan *p, const mkx_moe_args *a,
                  const moe_ws *w, cudaStream_t st, mkx_moe_layout *L,
                  int64_t *total, int *trunc) {
  *total = -1;
  *trunc = -1;
  if (!p->sync) return route_async(c, p, a, w, st);
  if (p->multi) {
    MKX_TRY(exchange(c, p, a, w, st, L, trunc));
    *total = L->rows;
    return MKX_SUCCESS;
  }
  MKX_TRY(route_one(c, p->op, a, a->num_experts, w, st, total));
  *trunc = p->op == MOE_DISPATCH && *total > a->y_rows ? c->rank : -1;
  return MKX_SUCCESS;
}
#else
typedef int mkx_moe_route_unused; /* ISO C: not an empty unit */
#endif
