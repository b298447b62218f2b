/* MKX_Moe_dispatch_gemm and MKX_Moe_layer on the GPU (kernels/moe): one
 * rank, or (option moe_gpu=all) several ranks of one node or of several.
 *
 * A call, all on the user's stream, after the prologue (every rank's
 * previous call has ended on its GPU before any rank writes into another's
 * workspace):
 *   1. routing (mkx_moe_route_run): each slot's row, grouped by expert in
 *      slot order, the experts' offsets, the first bad slot and the total.
 *      One rank routes over its own experts; several ranks route each
 *      rank's slots over every expert.
 *   2. the verdict and, on several ranks, every rank's counts per expert:
 *      each owner's expert offsets, and where each rank's rows of an expert
 *      start on its owner (in source rank order, so the contract's (source
 *      rank, token, slot) order holds).  Two ways (option moe_sync):
 *      yes: the status back to the host, stream synchronised, the counts
 *      exchanged by a bounded allgather: bad ids and truncation are returned by
 *      the call itself, as on the host path, and nothing is written after
 *      either; such a call cannot be captured in a CUDA graph.
 *      no: no host wait.  Each rank stores its record (first bad slot,
 *      y_rows, counts) into every rank's records, all meet, and each
 *      settles on the GPU (mkx_moe_settle_run): the same offsets and the
 *      same verdict on every rank.  The verdict's gate word stops the
 *      kernels after it; the error goes into the input record of the
 *      error word, reported later (fused/workspace.c).
 *   3. the token rows gathered into the owners' grouped rows (several
 *      ranks: GPU stores into the owners' workspaces, then all ranks meet
 *      on the GPU), with the gate weight as row scale for dispatch, and
 *      origins where asked;
 *   4. dispatch: one grouped GEMM into Y, rows scaled, then expert_rows;
 *      layer: the W1 grouped GEMM with SwiGLU in its epilogue (the
 *      activation rounded to dtype, the input of W2's tensor-core product),
 *      the W2 grouped GEMM in fp32, (several ranks: the ranks meet again)
 *      and the weighted combine in slot order, each slot's output read
 *      from its owner, into out, rounded once.
 * Several nodes (always with the host wait): rows for owners on other
 * nodes go into this rank's send area (pinned host memory the gather
 * writes directly), the host exchanges them (src/ops/moe/moe_net.c) and each
 * owner moves what it received to its places among its grouped rows;
 * after W2 the outputs of those rows travel back the same way, and the
 * combine reads them from the send area.  src/ops/moe/moe_layout.h says where
 * every row goes.
 * Weights whose row length is not a multiple of 8 elements (the tensor
 * maps' stride rule) are first copied into a padded workspace copy.
 *
 * Workspace (the data of one of the communicator's pooled workspaces, held
 * by the plan, the same layout on every rank; N = rows it can receive:
 * num_tokens x topk on one rank, every rank's tokens x topk on several;
 * each piece rounded up to 256 bytes).  Written or read by peers:
 *   A       N x round8(hidden)      dtype, the grouped rows
 *   scale   N                       fp32 (dispatch with weights)
 *   origin  N x 3                   int (several ranks, dispatch)
 *   act     N x round8(ffn)         dtype (layer)
 *   y       N x hidden              fp32 (layer)
 *   records (several ranks)         int: every rank's record, then scratch
 *                                   (mkx_moe_records_ints)
 * This rank's own:
 *   rows, dest N                    int: each slot's row here / on its owner
 *   offsets Ep + 1, own E + 1, base E, route and GEMM work  int
 *   target P, segments 2 E + 2  int (several nodes: moe_layout.h)
 *   done E, order E + 1, slot_at N  int (rows released as they land)
 *   status 4                        int: first bad slot, rows, gate
 *   W copy  padded weights          dtype (only where needed) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/error.h"
#include "core/log.h"
#include "ops/op.h"
#include "ops/path.h"

#if HAVE_CUDA
#include "core/cuda_rc.h"
#include "gemm/gemm_engine.h"
#include "moe/moe_engine.h"
#include "host/hier.h"
#include "ops/moe/moe_gpu.h"
#include "ops/moe/moe_layout.h"
#include "ops/moe/moe_net.h"
#include "ops/nodes/net_gpu.h"
#include "ops/fused/fused.h"
#include "core/comm_net.h"
#include "boot/oob_mpi.h"

enum { MOE_DISPATCH = 0, MOE_LAYER = 1 };

static const char *fn_of(int op) {
  return op == MOE_LAYER ? "MKX_Moe_layer" : "MKX_Moe_dispatch_gemm";
}

static int64_t round8(int64_t v) { return (v + 7) / 8 * 8; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static size_t round256(size_t v) { return (v + 255) / 256 * 256; }

static int aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* Several nodes: equal nodes joined by MKX's transport. */
static int nodes_ok(MKX_Comm c, const char *fn) {
  if (!mkx_hier_usable(c))
    return mkx_error(MKX_ERR_UNSUPPORTED,
                     "%s: GPU path over several nodes needs nodes of equal "
                     "size and a network transport",
                     fn);
  return mkx_tp_share_ok(c, fn);
}

static int check(MKX_Comm c, int op, const mkx_moe_args *a,
                 const mkx_agreed *g) {
  const char *fn = fn_of(op);
  const int64_t ep = a->num_experts / (c->size > 0 ? c->size : 1);
  const int64_t width = op == MOE_LAYER ? a->ffn : a->n;
  if (a->dtype != MKX_BF16 && a->dtype != MKX_FP16)
    return mkx_error(MKX_ERR_UNSUPPORTED,
                     "%s: GPU path takes bf16 and fp16 only", fn);
  if (c->opt.moe_gpu == MKX_MOE_GPU_OFF)
    return mkx_error(MKX_ERR_UNSUPPORTED, "%s: option moe_gpu=off", fn);
  if (c->size > 1 && c->opt.moe_gpu != MKX_MOE_GPU_ALL)
    return mkx_error(MKX_ERR_UNSUPPORTED, "%s: %d ranks and option moe_gpu=one",
                     fn, c->size);
  if (c->place.num_nodes > 1)
    MKX_TRY(nodes_ok(c, fn));
  else if (c->size > 1)
    MKX_TRY(mkx_tp_node_ok(c, fn));
  if (c->place.local_size > MKX_MOE_MAX_RANKS ||
      (c->size > 1 && a->num_experts > 8192))
    return mkx_error(MKX_ERR_UNSUPPORTED,
                     "%s: GPU path takes at most %d ranks per node, and on "
                     "several ranks at most 8192 experts",
                     fn, MKX_MOE_MAX_RANKS);
  if (g->total * a->topk >= MKX_MOE_NO_BAD_SLOT || ep > 8192 ||
      a->hidden >= (1ll << 30) || width >= (1ll << 29) ||
      a->num_experts >= (1ll << 31))
    return mkx_error(MKX_ERR_UNSUPPORTED,
                     "%s: GPU path takes every rank's num_tokens x topk "
                     "below 2^31 - 2^24, "
                     "at most 8192 local experts, hidden below 2^30 and n or "
                     "ffn below 2^29",
                     fn);
  if (!aligned16(a->W) || (op == MOE_LAYER && !aligned16(a->W2)) ||
      (op == MOE_DISPATCH && !aligned16(a->Y)))
    return mkx_error(MKX_ERR_UNSUPPORTED,
                     "%s: GPU path needs the weights%s 16-byte aligned", fn,
                     op == MOE_DISPATCH ? " and Y" : "");
  return MKX_SUCCESS;
}

int mkx_moe_dispatch_gpu_check(MKX_Comm c, const void *args,
                               const mkx_agreed *g) {
  return check(c, MOE_DISPATCH, args, g);
}

int mkx_moe_layer_gpu_check(MKX_Comm c, const void *args, const mkx_agreed *g) {
  return check(c, MOE_LAYER, args, g);
}

/* ---- workspace ---- */

enum {
  W_A,
  W_SCALE,
  W_ORIGIN,
  W_ACT,
  W_Y,
  W_ROWS,
  W_DEST,
  W_OFFSETS,
  W_OWN,
  W_BASE,
  W_TARGET,
  W_SEG,
  W_DONE,
  W_ORDER,
  W_SLOT_AT,
  W_REC,
  W_STATUS,
  W_ROUTE,
  W_GEMM,
  W_W1,
  W_W2,
  W_END
};

typedef struct moe_ws {
  void *a, *act, *w1, *w2;
  float *scale, *y;
  int32_t *origin;
  int *rows, *dest, *offsets, *own, *base, *target, *seg, *seg_row, *done,
      *order, *slot_at, *rec, *status, *route_work, *gemm_work;
  int *gate; /* status[2], the verdict of a run that does not wait for its
              * routing (option moe_sync=no); NULL where it waits */
  int64_t lda, ldact, ldw1, ldw2;
  /* several nodes, this call's: the areas as the GPU addresses them, and
   * with the network driven by the GPU its descriptor (mine is the
   * region's start) */
  char *mine, *theirs;
  mkx_tp_net_desc net;
} moe_ws;

/* The plan: the workspace and where each piece sits in it (off[W_END]:
 * the bytes in all), the same on every rank. */
typedef struct moe_plan {
  mkx_path path; /* the table entry that made it (and its start counter) */
  int op, multi;
  int64_t experts;
  int nodes;        /* ranks of several nodes */
  int release;      /* rows released to the GEMM as they land (one node) */
  mkx_moe_net *net; /* several nodes: the pinned areas */
  /* several nodes: the kernels post the rows between nodes to the network
   * proxy (option hier_moe) */
  int proxy;
  int sync;     /* option moe_sync: the host waits for the routing */
  int kernel;   /* the grouped GEMM's (option moe_gemm, or by gemm_kernel) */
  int64_t tcap; /* tokens the rows are sized for */
  size_t off[W_END + 1];
  int64_t lda, ldact, ldw1, ldw2;
  mkx_tp_ws *ws;
} moe_plan;

/* The layout for tcap tokens (agreed values only); weights padded where
 * their row length is not a multiple of 8. */
static void ws_layout(const mkx_moe_args *a, MKX_Comm c, moe_plan *p) {
  const size_t es = MKX_Type_size(a->dtype);
  const int64_t E = a->num_experts, ep = E / c->size, N = p->tcap * a->topk;
  const int layer = p->op == MOE_LAYER, multi = p->multi;
  /* the layer's W1 copy puts the up half at a multiple of 8 columns */
  const int64_t wcols1 = layer ? 2 * round8(a->ffn) : a->n;
  const int copy1 = layer ? a->ffn % 8 != 0 : a->n % 8 != 0;
  const size_t sizes[W_END] = {
      [W_A] = (size_t)(N * round8(a->hidden)) * es,
      [W_SCALE] = layer ? 0 : (size_t)N * sizeof(float),
      [W_ORIGIN] = layer || !multi ? 0 : (size_t)N * 3 * sizeof(int32_t),
      [W_ACT] = layer ? (size_t)(N * round8(a->ffn)) * es : 0,
      [W_Y] = layer ? (size_t)(N * a->hidden) * sizeof(float) : 0,
      [W_ROWS] = (size_t)N * sizeof(int),
      [W_DEST] = multi ? (size_t)N * sizeof(int) : 0,
      [W_OFFSETS] = (size_t)(ep + 1) * sizeof(int),
      [W_OWN] = multi ? (size_t)(E + 1) * sizeof(int) : 0,
      [W_BASE] = multi ? (size_t)E * sizeof(int) : 0,
      [W_TARGET] = p->nodes ? (size_t)c->size * sizeof(int) : 0,
      [W_SEG] = p->nodes ? (size_t)(2 * E + 2) * sizeof(int) : 0,
      [W_DONE] = p->release ? (size_t)E * sizeof(int) : 0,
      [W_ORDER] = p->release ? (size_t)(E + 1) * sizeof(int) : 0,
      [W_SLOT_AT] = p->release ? (size_t)(N + 1) * sizeof(int) : 0,
      [W_REC] =
          multi ? (size_t)mkx_moe_records_ints(c->size, (int)E) * sizeof(int)
                : 0,
      [W_STATUS] = 4 * sizeof(int),
      [W_ROUTE] = (size_t)mkx_moe_route_work_ints(p->tcap, (int)a->topk,
                                                  (int)(multi ? E : ep)) *
                  sizeof(int),
      [W_GEMM] = (size_t)mkx_moe_gemm_work_ints((int)ep) * sizeof(int),
      [W_W1] = copy1 ? (size_t)(ep * a->hidden * round8(wcols1)) * es : 0,
      [W_W2] = layer && a->hidden % 8
                   ? (size_t)(ep * a->ffn * round8(a->hidden)) * es
                   : 0};
  size_t at = 0;
  for (int k = 0; k < W_END; k++) {
    p->off[k] = at;
    at += round256(sizes[k]);
  }
  p->off[W_END] = at;
  p->lda = round8(a->hidden);
  p->ldact = round8(a->ffn);
  p->ldw1 = round8(wcols1);
  p->ldw2 = round8(a->hidden);
}

/* Piece k of the workspace of global rank q, as this rank maps it; NULL
 * where the piece is empty. */
static char *piece(MKX_Comm c, const moe_plan *p, int q, int k) {
  if (p->off[k + 1] == p->off[k]) return NULL;
  return mkx_tp_ws_data(p->ws, c->place.local_rank_of[q]) + p->off[k];
}

static void ws_place(MKX_Comm c, const moe_plan *p, moe_ws *w) {
  const int me = c->rank;
  w->a = piece(c, p, me, W_A);
  w->scale = (float *)piece(c, p, me, W_SCALE);
  w->origin = (int32_t *)piece(c, p, me, W_ORIGIN);
  w->act = piece(c, p, me, W_ACT);
  w->y = (float *)piece(c, p, me, W_Y);
  w->rows = (int *)piece(c, p, me, W_ROWS);
  w->dest = (int *)piece(c, p, me, W_DEST);
  w->offsets = (int *)piece(c, p, me, W_OFFSETS);
  w->own = (int *)piece(c, p, me, W_OWN);
  w->base = (int *)piece(c, p, me, W_BASE);
  w->target = (int *)piece(c, p, me, W_TARGET);
  w->seg = (int *)piece(c, p, me, W_SEG);
  w->seg_row = w->seg ? w->seg + p->experts + 1 : NULL;
  w->done = (int *)piece(c, p, me, W_DONE);
  w->order = (int *)piece(c, p, me, W_ORDER);
  w->slot_at = (int *)piece(c, p, me, W_SLOT_AT);
  w->rec = (int *)piece(c, p, me, W_REC);
  w->status = (int *)piece(c, p, me, W_STATUS);
  w->gate = p->sync ? NULL : w->status + 2;
  w->route_work = (int *)piece(c, p, me, W_ROUTE);
  w->gemm_work = (int *)piece(c, p, me, W_GEMM);
  w->w1 = piece(c, p, me, W_W1);
  w->w2 = piece(c, p, me, W_W2);
  w->lda = p->lda;
  w->ldact = p->ldact;
  w->ldw1 = p->ldw1;
  w->ldw2 = p->ldw2;
}

/* The user's weights, or their padded copy (rows of `cols` elements to
 * rows of ld). */
static int weights(const void *src, int64_t rows, int64_t cols, int64_t ld,
                   void *copy, size_t es, cudaStream_t st, const char *fn,
                   const void **out) {
  *out = src;
  if (cols == ld) return MKX_SUCCESS;
  MKX_CUDA_TRY(cudaMemcpy2DAsync(copy, (size_t)ld * es, src, (size_t)cols * es,
                                 (size_t)cols * es, (size_t)rows,
                                 cudaMemcpyDeviceToDevice, st),
               fn);
  *out = copy;
  return MKX_SUCCESS;
}

/* The layer's W1: the user's where ffn is a multiple of 8, else a copy
 * with the gate half at column 0 and the up half at column round8(ffn)
 * (ldw1), so that the up half's loads start on 16-byte boundaries. */
static int w1_weights(const mkx_moe_args *a, int64_t ep, const moe_ws *w,
                      size_t es, cudaStream_t st, const void **out) {
  const char *fn = fn_of(MOE_LAYER);
  const size_t spitch = (size_t)(2 * a->ffn) * es, half = (size_t)a->ffn * es;
  *out = a->W;
  if (a->ffn % 8 == 0) return MKX_SUCCESS;
  for (int h = 0; h < 2; h++)
    MKX_CUDA_TRY(
        cudaMemcpy2DAsync(
            (char *)w->w1 + (size_t)h * (size_t)round8(a->ffn) * es,
            (size_t)w->ldw1 * es, (const char *)a->W + h * half, spitch, half,
            (size_t)(ep * a->hidden), cudaMemcpyDeviceToDevice, st),
        fn);
  *out = w->w1;
  return MKX_SUCCESS;
}

/* ---- the call ---- */

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
               "the GPU's input record carries MKX error codes");

/* The bad input the GPU found in a run that did not wait for its routing
 * (option moe_sync=no), as its error; rec: the input record
 * (moe_engine.h); head: "MKX_Moe_layer", or the reporting call and "an
 * earlier MKX_Moe_layer". */
static int input_error(const int *rec, const char *head) {
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
  MKX_TRY(mkx_tp_launch_rc(mkx_moe_route_run(&r, st), fn, "routing"));
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
    rc = mkx_tp_launch_rc(mkx_moe_route_run(&r, st), fn, "routing");
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

/* ---- several nodes: the areas ----
 * Each holds its rows' A rows, then (dispatch) their scales and origins:
 * `mine` the rows this rank sends, `theirs` the rows it receives.  The
 * layer's outputs travel back through the same areas from their start:
 * `theirs` those this rank sends back, `mine` those it gets.  The host
 * exchanges the communicator's pinned areas (moe_net.h), each sized for
 * this rank's rows; with the network driven by the GPU (hier_moe) both
 * are the network region in host memory, `mine` then `theirs`, sized for
 * the largest rank's rows so that every rank knows where to write into
 * every other's (moe_layout.h: send_at, back_at). */

static size_t a_row(const moe_plan *p, const mkx_moe_args *a) {
  return (size_t)p->lda * MKX_Type_size(a->dtype);
}

static size_t y_row(const mkx_moe_args *a) {
  return (size_t)a->hidden * sizeof(float);
}

/* Bytes per row of the areas. */
static size_t net_row(const moe_plan *p, const mkx_moe_args *a) {
  const size_t r = a_row(p, a);
  if (p->op == MOE_DISPATCH) return r + sizeof(float) + 3 * sizeof(int32_t);
  return r > y_row(a) ? r : y_row(a);
}

/* The scales (k = 1) or origins (k = 2) of an area of `rows` rows. */
static size_t side_at(const moe_plan *p, const mkx_moe_args *a, int64_t rows,
                      int k) {
  return (size_t)rows * (a_row(p, a) + (k == 2 ? sizeof(float) : 0));
}

/* The ranks of the other nodes, as a mask (at most 32 ranks: by_gpu). */
static unsigned other_nodes(MKX_Comm c) {
  unsigned m = 0;
  for (int q = 0; q < c->size; q++)
    if (c->place.node_of_rank[q] != c->place.node) m |= 1u << q;
  return m;
}

/* The rows an area is laid out for: this rank's, or the largest rank's. */
static int64_t area_rows(const moe_plan *p, const mkx_moe_layout *L,
                         int theirs) {
  if (p->proxy) return theirs ? L->max_received : L->max_sent;
  return theirs ? L->received : L->sent;
}

/* The call's areas, written from the gather on (nothing in them is still
 * in use: moe_net_reserve waits for the previous call; a call driven by
 * the GPU ends after the proxy has sent all it posted, and the stream
 * waits here for the last call whose kernels drove the network). */
static int areas(MKX_Comm c, const moe_plan *p, const mkx_moe_args *a,
                 moe_ws *w, const mkx_moe_layout *L, cudaStream_t st) {
  const char *fn = fn_of(p->op);
  const size_t mine = round256((size_t)area_rows(p, L, 0) * net_row(p, a)),
               theirs = (size_t)area_rows(p, L, 1) * net_row(p, a);
  if (!p->proxy) {
    MKX_TRY(mkx_moe_net_reserve(c, p->net, mine, theirs, fn));
    w->mine = p->net->mine_dev;
    w->theirs = p->net->theirs_dev;
    return MKX_SUCCESS;
  }
  void *base = NULL;
  uint64_t *words = NULL;
  /* the same length on every rank: from every rank's counts */
  MKX_TRY(mkx_comm_net_gpu_region(c, MKX_COMM_NET_GPU_HOST_REGION,
                                  mine + theirs + 16, &base, &words));
  MKX_TRY(mkx_comm_net_gpu_after(c, st));
  w->mine = base;
  w->theirs = (char *)base + mine;
  mkx_net_desc_fill(c, p->ws, words, &w->net);
  w->net.region = MKX_COMM_NET_GPU_HOST_REGION;
  w->net.peers = other_nodes(c);
  return MKX_SUCCESS;
}

/* Where this rank's slots' rows go: its own workspace (one rank), the
 * owners' (several), and on several nodes its send area for the owners
 * there. */
static void targets(MKX_Comm c, const moe_plan *p, const mkx_moe_args *a,
                    const moe_ws *w, const mkx_moe_layout *L, int scale,
                    int origin, mkx_moe_place *pl, mkx_moe_rows_at *at) {
  memset(at, 0, sizeof *at);
  at->lda = w->lda;
  if (!p->multi) {
    *pl = (mkx_moe_place){NULL, NULL, NULL, NULL, 1, 1, w->gate};
    at->a[0] = w->a;
    at->scale[0] = scale ? w->scale : NULL;
    at->origin[0] = origin ? a->origin : NULL;
    return;
  }
  const int G = c->place.local_size;
  /* one node: entry q is rank q (target NULL) */
  *pl = (mkx_moe_place){a->topk_ids,
                        w->base,
                        w->own,
                        p->nodes ? w->target : NULL,
                        (int)(a->num_experts / c->size),
                        p->nodes ? G + 1 : c->size,
                        w->gate};
  for (int q = 0; q < c->size; q++) {
    if (c->place.node_of_rank[q] != c->place.node) continue;
    const int l = p->nodes ? c->place.local_rank_of[q] : q;
    at->a[l] = piece(c, p, q, W_A);
    at->scale[l] = scale ? (float *)piece(c, p, q, W_SCALE) : NULL;
    at->origin[l] = origin ? (int32_t *)piece(c, p, q, W_ORIGIN) : NULL;
  }
  if (!p->nodes) return;
  char *send = w->mine;
  const int64_t rows = area_rows(p, L, 0);
  at->a[G] = send;
  at->scale[G] = scale ? (float *)(send + side_at(p, a, rows, 1)) : NULL;
  at->origin[G] = origin ? (int32_t *)(send + side_at(p, a, rows, 2)) : NULL;
}

/* Rows between the `theirs` area (received rows, outputs to send back)
 * and their places here, by the layout's segments. */
static int net_move(const moe_plan *p, const moe_ws *w, const mkx_moe_layout *L,
                    size_t area_off, void *rows, size_t row_bytes, int to_rows,
                    cudaStream_t st, const char *what) {
  if (L->received == 0) return MKX_SUCCESS;
  return mkx_tp_launch_rc(
      mkx_moe_rows_move_run(w->theirs + area_off, (int64_t)row_bytes, rows,
                            (int64_t)row_bytes, (int64_t)row_bytes, w->seg,
                            w->seg_row, L->nseg, L->received, to_rows, st),
      fn_of(p->op), what);
}

/* The words of the writes between nodes in their sender's block: A rows,
 * scales, origins (+ k), outputs. */
enum { W_NET_ROWS = 1, W_NET_OUT = 4 };

/* The GPU's part: after the network's meeting, each owner's block of rows
 * (and its scales and origins) posted straight to its place in the
 * owner's area, then a wait for every sender's words.  Every block is
 * posted, empty or not, so every word is set. */
static int post_rows(MKX_Comm c, const moe_plan *p, const mkx_moe_args *a,
                     moe_ws *w, const mkx_moe_layout *L, int scale, int origin,
                     cudaStream_t st) {
  const char *fn = fn_of(p->op);
  const uint64_t theirs = (uint64_t)(w->theirs - w->mine);
  const size_t rb[3] = {a_row(p, a), sizeof(float), 3 * sizeof(int32_t)};
  const int want[3] = {1, scale, origin};
  MKX_TRY(mkx_tp_launch_rc(mkx_tp_net_begin(&w->net, st), fn, "network meet"));
  int64_t at = 0; /* rows before q's block in this rank's send area */
  for (int q = 0; q < c->size; q++) {
    if (!(w->net.peers >> q & 1u)) continue;
    for (int k = 0; k < 3; k++) {
      if (!want[k]) continue;
      const uint64_t src = (k ? side_at(p, a, L->max_sent, k) : 0) + at * rb[k];
      const uint64_t dst = theirs +
                           (k ? side_at(p, a, L->max_received, k) : 0) +
                           (uint64_t)L->send_at[q] * rb[k];
      MKX_TRY(mkx_tp_launch_rc(
          mkx_tp_net_post(&w->net, q, src, dst, (uint64_t)L->send[q] * rb[k],
                          W_NET_ROWS + (uint32_t)k, st),
          fn, "network post of rows"));
    }
    at += L->send[q];
  }
  for (int k = 0; k < 3; k++)
    if (want[k])
      MKX_TRY(
          mkx_tp_launch_rc(mkx_tp_net_wait(&w->net, W_NET_ROWS + (uint32_t)k,
                                           MKX_TP_AT_MOE_ROWS, st),
                           fn, "wait for rows from other nodes"));
  return MKX_SUCCESS;
}

/* Several nodes, once the gather has ended: this rank's rows for other
 * nodes to their owners, and the rows it receives to their places (with
 * the scales and origins of dispatch). */
static int net_rows(MKX_Comm c, const moe_plan *p, const mkx_moe_args *a,
                    moe_ws *w, const mkx_moe_layout *L, int scale, int origin,
                    cudaStream_t st) {
  const char *fn = fn_of(p->op);
  mkx_moe_net *n = p->net;
  const int64_t in = area_rows(p, L, 1);
  if (p->proxy) {
    MKX_TRY(post_rows(c, p, a, w, L, scale, origin, st));
  } else {
    MKX_TRY(mkx_cuda_rc(cudaStreamSynchronize(st), fn, "gather"));
    MKX_TRY(mkx_moe_net_exchange(c, n, n->mine, L->send, n->theirs, L->recv,
                                 a_row(p, a), fn));
    for (int k = 1; k <= 2; k++) {
      if (!(k == 1 ? scale : origin)) continue;
      MKX_TRY(mkx_moe_net_exchange(
          c, n, n->mine + side_at(p, a, L->sent, k), L->send,
          n->theirs + side_at(p, a, L->received, k), L->recv,
          k == 1 ? sizeof(float) : 3 * sizeof(int32_t), fn));
    }
  }
  MKX_TRY(net_move(p, w, L, 0, w->a, a_row(p, a), 1, st, "received rows"));
  if (scale)
    MKX_TRY(net_move(p, w, L, side_at(p, a, in, 1), w->scale, sizeof(float), 1,
                     st, "received scales"));
  if (origin)
    MKX_TRY(net_move(p, w, L, side_at(p, a, in, 2), w->origin,
                     3 * sizeof(int32_t), 1, st, "received origins"));
  return MKX_SUCCESS;
}

/* Several nodes, once W2 has ended: the outputs of the rows received
 * over the network back to their senders, into this rank's `mine` area
 * (the layout of its send area), where the combine reads them. */
static int net_outs(MKX_Comm c, const moe_plan *p, const mkx_moe_args *a,
                    moe_ws *w, const mkx_moe_layout *L, cudaStream_t st) {
  const char *fn = fn_of(p->op);
  mkx_moe_net *n = p->net;
  MKX_TRY(net_move(p, w, L, 0, w->y, y_row(a), 0, st, "outputs to send"));
  if (!p->proxy) {
    MKX_TRY(mkx_cuda_rc(cudaStreamSynchronize(st), fn, "outputs to send"));
    return mkx_moe_net_exchange(c, n, n->theirs, L->recv, n->mine, L->send,
                                y_row(a), fn);
  }
  const uint64_t theirs = (uint64_t)(w->theirs - w->mine), yr = y_row(a);
  int64_t at = 0; /* rows before q's block in this rank's receive area */
  for (int q = 0; q < c->size; q++) {
    if (!(w->net.peers >> q & 1u)) continue;
    MKX_TRY(mkx_tp_launch_rc(
        mkx_tp_net_post(&w->net, q, theirs + (uint64_t)at * yr,
                        (uint64_t)L->back_at[q] * yr, (uint64_t)L->recv[q] * yr,
                        W_NET_OUT, st),
        fn, "network post of outputs"));
    at += L->recv[q];
  }
  return mkx_tp_launch_rc(
      mkx_tp_net_wait(&w->net, W_NET_OUT, MKX_TP_AT_MOE_OUT, st), fn,
      "wait for outputs from other nodes");
}

/* Several ranks: all meet on the GPU at workspace word `off`. */
static int meet(MKX_Comm c, const moe_plan *p, int off, int where,
                cudaStream_t st, const char *fn) {
  mkx_tp_sync sync;
  mkx_tp_sync_fill(c, p->ws, 1, &sync);
  return mkx_tp_launch_rc(mkx_tp_meet(&sync, off, where, st), fn,
                          "meeting of the ranks");
}

/* Option moe_sync=no: routing, then the verdict and offsets on the GPU
 * (the gate word and the input record; see the top of this file). */
static int route_async(MKX_Comm c, const moe_plan *p, const mkx_moe_args *a,
                       const moe_ws *w, cudaStream_t st) {
  const char *fn = fn_of(p->op);
  const int E = (int)a->num_experts, k = (int)a->topk;
  const int64_t y_rows = p->op == MOE_DISPATCH ? a->y_rows : -1;
  int *err = p->ws->err_dev + MKX_TP_ERR_INPUT;
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
  MKX_TRY(mkx_tp_launch_rc(mkx_moe_route_run(&r, st), fn, "routing"));
  if (!p->multi)
    return mkx_tp_launch_rc(
        mkx_moe_verdict_run(w->status, a->topk_ids, k, E, y_rows, c->rank,
                            w->gate, err, st),
        fn, "verdict");
  mkx_moe_records rec;
  for (int q = 0; q < c->size; q++) rec.rec[q] = (int *)piece(c, p, q, W_REC);
  MKX_TRY(
      mkx_tp_launch_rc(mkx_moe_record_run(&rec, c->size, c->rank, E, w->own,
                                          w->status, a->topk_ids, y_rows, st),
                       fn, "counts to every rank"));
  MKX_TRY(meet(c, p, MKX_TP_OFF_PUSHED, MKX_TP_AT_MOE_COUNTS, st, fn));
  return mkx_tp_launch_rc(
      mkx_moe_settle_run(w->rec, c->size, c->rank, E, k, w->offsets, w->base,
                         w->gate, err, st),
      fn, "offsets and verdict");
}

/* Routing and its status: *total, the rows this rank receives; *trunc,
 * a rank that receives more than its y_rows (dispatch) or -1; L, on
 * several ranks, the layout.  Without the host wait neither is known here
 * (*total: -1; the gate decides). */
static int route(MKX_Comm c, const moe_plan *p, const mkx_moe_args *a,
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

/* Rows released as they land (option moe_release), on one node.  Under
 * time slices a waiting GEMM would hold the GPU from the peers it waits for
 * until its slice ends; under MPS its waiting tiles hold SMs the peers'
 * gathers need, and the meet after the gather is faster. */
static int release_rows(MKX_Comm c) {
  if (c->size < 2 || c->place.num_nodes > 1 ||
      c->opt.moe_release == MKX_OVERLAP_NO ||
      c->share.mode == MKX_SHARE_TIMESLICED)
    return 0;
  return c->opt.moe_release == MKX_OVERLAP_YES ||
         c->share.mode == MKX_SHARE_NONE;
}

/* One node: every owner's flags (one per local expert and rank), this
 * rank's walk order and counters (moe_engine.h, mkx_moe_release). */
static void release_of(MKX_Comm c, const moe_plan *p, const moe_ws *w,
                       mkx_moe_release *rel) {
  memset(rel, 0, sizeof *rel);
  for (int q = 0; q < c->size; q++) rel->ready[q] = mkx_tp_ws_flags(p->ws, q);
  rel->done = w->done;
  rel->order = w->order;
  rel->slot_at = w->slot_at;
  rel->epoch = mkx_tp_ws_word(p->ws, c->place.local_rank, MKX_TP_OFF_EPOCH);
  rel->rank = c->rank;
  rel->ranks = c->size;
}

/* The first grouped GEMM after the gather: with released rows its tiles
 * wait for their experts' flags, on at most the CTAs that leave a peer
 * sharing the GPU the SMs its gather needs. */
static void gemm_waits(MKX_Comm c, const moe_plan *p, mkx_tp_sync *sync,
                       mkx_moe_gemm_desc *g) {
  if (!p->release) return;
  mkx_tp_sync_fill(c, p->ws, 1, sync);
  g->ready = mkx_tp_ws_flags(p->ws, c->place.local_rank);
  g->sync = sync;
  g->num_ctas = c->share.ctas;
}

/* This rank's token rows into their owners' grouped rows, with their
 * scales (weight, or 1) and origins where asked (several ranks: then all
 * meet, so every owner has its node's rows; several nodes: then the rows
 * between nodes). */
static int push_rows(MKX_Comm c, const moe_plan *p, const mkx_moe_args *a,
                     moe_ws *w, const mkx_moe_layout *L, cudaStream_t st,
                     const float *weight, int scale, int origin, int *dest,
                     mkx_moe_place *pl) {
  const char *fn = fn_of(p->op);
  mkx_moe_rows_at at;
  if (p->nodes) MKX_TRY(areas(c, p, a, w, L, st));
  targets(c, p, a, w, L, scale, origin, pl, &at);
  mkx_moe_release rel;
  if (p->release) {
    release_of(c, p, w, &rel);
    MKX_TRY(
        mkx_tp_launch_rc(mkx_moe_release_prepare_run(
                             &rel, pl, w->rows, a->num_tokens * a->topk, st),
                         fn, "gather order"));
  }
  MKX_TRY(mkx_tp_launch_rc(
      mkx_moe_gather_run(a->X, a->num_tokens, (int)a->topk, a->hidden,
                         (int)MKX_Type_size(a->dtype), w->rows, weight, c->rank,
                         pl, &at, dest, p->release ? &rel : NULL, st),
      fn, "gather"));
  /* released rows: the GEMM's tiles wait for their experts instead */
  if (p->multi && !p->release)
    MKX_TRY(meet(c, p, MKX_TP_OFF_DONE, MKX_TP_AT_MOE_ROWS, st, fn));
  if (p->nodes) MKX_TRY(net_rows(c, p, a, w, L, scale, origin, st));
  return MKX_SUCCESS;
}

static int dispatch(MKX_Comm c, const moe_plan *p, const mkx_moe_args *a,
                    moe_ws *w, mkx_moe_layout *L, cudaStream_t st) {
  const char *fn = fn_of(MOE_DISPATCH);
  const int ty = mkx_tp_gemm_type(a->dtype);
  const int es = (int)MKX_Type_size(a->dtype);
  const int64_t ep = a->num_experts / c->size;
  int64_t total = 0;
  int trunc = -1;
  MKX_TRY(route(c, p, a, w, st, L, &total, &trunc));
  MKX_TRY(mkx_tp_launch_rc(
      mkx_moe_counts_run(w->offsets, (int)ep, a->expert_rows, w->gate, st), fn,
      "counts"));
  if (trunc >= 0)
    return mkx_error(MKX_ERR_TRUNCATE,
                     "%s: rank %d receives more rows than its y_rows "
                     "(expert_rows holds the counts needed)",
                     fn, trunc);
  mkx_moe_place pl;
  /* With several ranks an owner's rows come from every rank, so all write
   * their origins, whether or not this rank asked for its own, and their
   * scales, their gate weights or 1: each row is scaled by its sender's
   * weights, whatever the owner passed. */
  const int scaled = a->topk_weight != NULL || p->multi;
  MKX_TRY(push_rows(c, p, a, w, L, st, a->topk_weight, scaled,
                    p->multi || a->origin != NULL, NULL, &pl));
  const void *wt = NULL;
  MKX_TRY(weights(a->W, ep * a->hidden, a->n, w->ldw1, w->w1, (size_t)es, st,
                  fn, &wt));
  /* without the host wait: bounded by the rows A and Y hold */
  const int64_t rows = total >= 0 ? total : min64(p->tcap * a->topk, a->y_rows);
  mkx_moe_gemm_desc g = {
      (int)ep,    a->hidden, a->n,     w->a, w->lda, rows,
      w->offsets, wt,        w->ldw1,  a->Y, a->n,   scaled ? w->scale : NULL,
      ty,         ty,        0,        0,    0,      w->gemm_work,
      0,          w->gate,   p->kernel};
  mkx_tp_sync sync;
  gemm_waits(c, p, &sync, &g);
  MKX_TRY(mkx_tp_launch_rc(mkx_moe_gemm_run(&g, st), fn, "grouped GEMM"));
  /* no origin piece: no rows can arrive (no tokens on any rank) */
  if (!p->multi || !a->origin || !w->origin) return MKX_SUCCESS;
  if (!p->sync)
    return mkx_tp_launch_rc(
        mkx_moe_origin_copy_run(w->origin, a->origin, w->offsets, (int)ep,
                                w->gate, st),
        fn, "origins");
  if (total > 0)
    MKX_TRY(mkx_cuda_rc(cudaMemcpyAsync(a->origin, w->origin,
                                        (size_t)total * 3 * sizeof(int32_t),
                                        cudaMemcpyDeviceToDevice, st),
                        fn, "origins"));
  return MKX_SUCCESS;
}

static int layer(MKX_Comm c, const moe_plan *p, const mkx_moe_args *a,
                 moe_ws *w, mkx_moe_layout *L, cudaStream_t st) {
  const char *fn = fn_of(MOE_LAYER);
  const int ty = mkx_tp_gemm_type(a->dtype);
  const int es = (int)MKX_Type_size(a->dtype);
  const int64_t ep = a->num_experts / c->size;
  int64_t total = 0;
  int trunc = -1;
  MKX_TRY(route(c, p, a, w, st, L, &total, &trunc));
  /* one rank without tokens has nothing to do; several still serve */
  if (!p->multi && a->num_tokens == 0) return MKX_SUCCESS;
  mkx_moe_place pl;
  MKX_TRY(push_rows(c, p, a, w, L, st, NULL, 0, 0, w->dest, &pl));
  const void *w1 = NULL, *w2 = NULL;
  MKX_TRY(w1_weights(a, ep, w, (size_t)es, st, &w1));
  MKX_TRY(weights(a->W2, ep * a->ffn, a->hidden, w->ldw2, w->w2, (size_t)es, st,
                  fn, &w2));
  const int64_t rows = total >= 0 ? total : p->tcap * a->topk;
  mkx_moe_gemm_desc g1 = {(int)ep,
                          a->hidden,
                          a->ffn,
                          w->a,
                          w->lda,
                          rows,
                          w->offsets,
                          w1,
                          w1 == a->W ? 2 * a->ffn : w->ldw1,
                          w->act,
                          w->ldact,
                          NULL,
                          ty,
                          ty,
                          1,
                          0,
                          0,
                          w->gemm_work,
                          w1 == a->W ? 0 : round8(a->ffn),
                          w->gate,
                          p->kernel};
  mkx_tp_sync sync;
  gemm_waits(c, p, &sync, &g1);
  MKX_TRY(mkx_tp_launch_rc(mkx_moe_gemm_run(&g1, st), fn, "W1 grouped GEMM"));
  mkx_moe_gemm_desc g2 = {(int)ep,  a->ffn,        a->hidden,  w->act,
                          w->ldact, rows,          w->offsets, w2,
                          w->ldw2,  w->y,          a->hidden,  NULL,
                          ty,       MKX_GEMM_FP32, 0,          0,
                          0,        w->gemm_work,  0,          w->gate,
                          p->kernel};
  MKX_TRY(mkx_tp_launch_rc(mkx_moe_gemm_run(&g2, st), fn, "W2 grouped GEMM"));
  mkx_moe_outs_at y = {{w->y}, a->hidden};
  if (p->multi) {
    MKX_TRY(meet(c, p, MKX_TP_OFF_DONE_LATE, MKX_TP_AT_MOE_OUT, st, fn));
    for (int q = 0; q < c->size; q++) {
      if (c->place.node_of_rank[q] != c->place.node) continue;
      y.y[p->nodes ? c->place.local_rank_of[q] : q] =
          (float *)piece(c, p, q, W_Y);
    }
  }
  if (p->nodes) {
    MKX_TRY(net_outs(c, p, a, w, L, st));
    y.y[c->place.local_size] = (const float *)w->mine;
  }
  return mkx_tp_launch_rc(
      mkx_moe_combine_run(&pl, &y, p->multi ? w->dest : w->rows, a->topk_weight,
                          a->num_tokens, (int)a->topk, a->hidden, a->out, ty,
                          st),
      fn, "combine");
}

/* Several nodes: whether the kernels drive the network (option hier_moe),
 * else why not into why. */
static int by_gpu(MKX_Comm c, char *why, size_t len) {
  const char *w = c->opt.hier_moe == MKX_HIER_MOE_HOST
                      ? "option hier_moe=host"
                      : mkx_net_ring_why_not(c);
  if (w && why) snprintf(why, len, "%s", w);
  return !w;
}

/* The grouped GEMM kernel for option moe_gemm: under auto, by the rows an
 * expert gets on average (all tokens' slots over all experts), the same on
 * every rank and whatever the routing of a run. */
static int gemm_kernel(int opt, int64_t slots, int64_t experts) {
  if (opt == MKX_MOE_GEMM_OPT_ROWS) return MKX_MOE_GEMM_ROWS;
  if (opt == MKX_MOE_GEMM_OPT_SWAP) return MKX_MOE_GEMM_SWAP;
  return slots <= (int64_t)MKX_MOE_SWAP_ROWS * experts ? MKX_MOE_GEMM_SWAP
                                                       : MKX_MOE_GEMM_ROWS;
}

/* The workspace is sized by agreed values only (every rank's tokens on
 * several ranks), so every rank's pool takes the same decision. */
/* The plan of the entry of `path` (choose: the only place that picks it). */
static int plan_path(MKX_Comm c, int op, const void *args, const mkx_agreed *g,
                     mkx_path path, void **plan) {
  const mkx_moe_args *a = args;
  moe_plan *p = calloc(1, sizeof *p);
  if (!p) return mkx_error(MKX_ERR_NOMEM, "%s: plan", fn_of(op));
  p->path = path;
  p->op = op;
  p->multi = path != MKX_PATH_MOE;
  p->nodes = path == MKX_PATH_MOE_NODES || path == MKX_PATH_MOE_NET;
  p->proxy = path == MKX_PATH_MOE_NET;
  p->experts = a->num_experts;
  /* several nodes: the host knows the counts, so it waits anyway */
  p->sync = p->nodes || c->opt.moe_sync;
  p->release = release_rows(c);
  p->tcap = p->multi ? g->total : a->num_tokens;
  p->kernel = gemm_kernel(c->opt.moe_gemm, p->tcap * a->topk, a->num_experts);
  ws_layout(a, c, p);
  const int64_t flags = p->release ? a->num_experts : c->size;
  mkx_tp_need need = {1, flags > c->size ? flags : c->size, p->off[W_END], 0};
  int rc = p->nodes ? mkx_moe_net_get(c, &p->net, fn_of(op)) : MKX_SUCCESS;
  rc = mkx_comm_agree_rc(c, rc, fn_of(op));
  if (rc == MKX_SUCCESS) rc = mkx_tp_ws_acquire(c, &need, &p->ws);
  if (rc != MKX_SUCCESS) {
    free(p);
    return rc;
  }
  *plan = p;
  return MKX_SUCCESS;
}

static void moe_free(MKX_Comm c, void *plan) {
  moe_plan *p = plan;
  (void)c;
  if (!p) return;
  mkx_tp_ws_release(p->ws);
  free(p);
}

static int moe_start(MKX_Comm c, void *plan, const void *args,
                     MKX_Stream stream) {
  const moe_plan *p = plan;
  const mkx_moe_args *a = args;
  const char *fn = fn_of(p->op);
  cudaStream_t st = (cudaStream_t)stream;
  moe_ws w;
  enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  MKX_CUDA_TRY(cudaStreamIsCapturing(st, &cs), fn);
  if (cs != cudaStreamCaptureStatusNone && p->sync)
    return mkx_error(
        MKX_ERR_UNSUPPORTED,
        "%s: cannot be captured in a CUDA graph %s (each run "
        "waits for its routing)",
        fn, p->nodes ? "on several nodes" : "with option moe_sync=yes");
  p->ws->input_error = input_error;
  MKX_TRY(mkx_tp_begin(c, p->ws, fn, stream, 1, p->path));
  ws_place(c, p, &w);
  w.mine = w.theirs = NULL;
  mkx_moe_layout L;
  memset(&L, 0, sizeof L);
  int rc = p->op == MOE_LAYER ? layer(c, p, a, &w, &L, st)
                              : dispatch(c, p, a, &w, &L, st);
  mkx_moe_layout_free(&L);
  if (rc == MKX_SUCCESS && p->proxy && w.mine) {
    /* the proxy done with the areas */
    rc = mkx_tp_launch_rc(mkx_tp_net_end(&w.net, st), fn, "network drain");
    if (rc == MKX_SUCCESS) rc = mkx_comm_net_gpu_mark(c, stream);
  } else if (rc == MKX_SUCCESS && p->nodes) {
    rc = mkx_moe_net_mark(p->net, st, fn);
  }
  MKX_TRY(rc);
  return mkx_tp_end(p->ws, stream);
}

/* One entry per path, each with its plan; they share the start, which
 * reads the path from the plan. */
#define MOE_PLAN(name, path)                                                   \
  static int name(MKX_Comm c, int op, const void *args, const mkx_agreed *g,   \
                  void **plan) {                                               \
    return plan_path(c, op, args, g, path, plan);                              \
  }
MOE_PLAN(plan_one, MKX_PATH_MOE)
MOE_PLAN(plan_node, MKX_PATH_MOE_NODE)
MOE_PLAN(plan_nodes, MKX_PATH_MOE_NODES)
MOE_PLAN(plan_net, MKX_PATH_MOE_NET)
#undef MOE_PLAN

static const mkx_path_ops moe_one = {MKX_PATH_MOE, plan_one, moe_start,
                                     moe_free};
static const mkx_path_ops moe_node = {MKX_PATH_MOE_NODE, plan_node, moe_start,
                                      moe_free};
static const mkx_path_ops moe_nodes = {MKX_PATH_MOE_NODES, plan_nodes,
                                       moe_start, moe_free};
static const mkx_path_ops moe_net = {MKX_PATH_MOE_NET, plan_net, moe_start,
                                     moe_free};

static int choose(MKX_Comm c, int op, mkx_path_choice *out) {
  const char *what = op == MOE_LAYER ? ", SwiGLU and combine" : "";
  out->op = op;
  char no[160] = "";
  const int gpu = c->place.num_nodes > 1 && by_gpu(c, no, sizeof no);
  out->ops = gpu                      ? &moe_net
             : c->place.num_nodes > 1 ? &moe_nodes
             : c->size > 1            ? &moe_node
                                      : &moe_one;
  if (gpu)
    snprintf(out->why, sizeof out->why,
             "%d nodes: token rows by GPU stores in a node, posted by the GPU "
             "to the network proxy between nodes; routing, grouped expert "
             "GEMMs%s on the GPU",
             c->place.num_nodes, what);
  else if (c->place.num_nodes > 1)
    snprintf(out->why, sizeof out->why,
             "%d nodes: token rows by GPU stores in a node, over the "
             "network by the host between nodes (%s); routing, grouped "
             "expert GEMMs%s on the GPU",
             c->place.num_nodes, no, what);
  else if (c->size > 1)
    snprintf(out->why, sizeof out->why,
             "%d ranks of one node: token rows pushed into the owners by GPU "
             "stores; routing, grouped expert GEMMs%s on the GPU",
             c->size, what);
  else
    snprintf(out->why, sizeof out->why,
             "one rank: routing, grouped expert GEMMs%s on the GPU", what);
  return MKX_SUCCESS;
}

int mkx_moe_dispatch_gpu_choose(MKX_Comm c, const void *args,
                                const mkx_agreed *g, mkx_path_choice *out) {
  (void)args, (void)g;
  return choose(c, MOE_DISPATCH, out);
}

int mkx_moe_layer_gpu_choose(MKX_Comm c, const void *args, const mkx_agreed *g,
                             mkx_path_choice *out) {
  (void)args, (void)g;
  return choose(c, MOE_LAYER, out);
}
#else
typedef int mkx_moe_gpu_unused; /* ISO C: not an empty unit */
#endif
