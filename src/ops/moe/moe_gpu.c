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
 * The workspace's layout: moe_ws.c; the routing and the exchange of
 * counts: moe_route.c; the rows between nodes: moe_gpu_net.c. */
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
#include "host/dtype.h"
#include "moe/moe_engine.h"
#include "ops/moe/moe_gpu.h"
#include "ops/moe/moe_gpu_int.h"
#include "ops/nodes/net_gpu.h"
#include "ops/fused/fused.h"
#include "core/comm_net.h"

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

int mkx_moe_meet(MKX_Comm c, const moe_plan *p, int off, int where,
                 cudaStream_t st, const char *fn) {
  mkx_fused_sync sync;
  mkx_fused_sync_fill(c, p->ws, 1, &sync);
  return mkx_fused_launch_rc(mkx_fused_meet(&sync, off, where, st), fn,
                             "meeting of the ranks");
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
  for (int q = 0; q < c->size; q++)
    rel->ready[q] = mkx_fused_ws_flags(p->ws, q);
  rel->done = w->done;
  rel->order = w->order;
  rel->slot_at = w->slot_at;
  rel->epoch =
      mkx_fused_ws_word(p->ws, c->place.local_rank, MKX_FUSED_OFF_EPOCH);
  rel->rank = c->rank;
  rel->ranks = c->size;
}

/* The first grouped GEMM after the gather: with released rows its tiles
 * wait for their experts' flags, on at most the CTAs that leave a peer
 * sharing the GPU the SMs its gather needs. */
static void gemm_waits(MKX_Comm c, const moe_plan *p, mkx_fused_sync *sync,
                       mkx_moe_gemm_desc *g) {
  if (!p->release) return;
  mkx_fused_sync_fill(c, p->ws, 1, sync);
  g->ready = mkx_fused_ws_flags(p->ws, c->place.local_rank);
  g->sync = sync;
  g->num_ctas = c->share.ctas;
}

/* This rank's token rows into their owners' grouped rows, with their
 * scales (weight, or 1) and origins where asked (several ranks: then all
 * meet, so every owner has its node's rows; several nodes: then the rows
 * between nodes). */
int mkx_moe_push_rows(MKX_Comm c, const moe_plan *p, const mkx_moe_args *a,
                      moe_ws *w, const mkx_moe_layout *L, cudaStream_t st,
                      const float *weight, int scale, int origin, int *dest,
                      mkx_moe_place *pl) {
  const char *fn = fn_of(p->op);
  mkx_moe_rows_at at;
  if (p->nodes) MKX_TRY(mkx_moe_areas(c, p, a, w, L, st));
  mkx_moe_targets(c, p, a, w, L, scale, origin, pl, &at);
  mkx_moe_release rel;
  if (p->release) {
    release_of(c, p, w, &rel);
    MKX_TRY(
        mkx_fused_launch_rc(mkx_moe_release_prepare_run(
                                &rel, pl, w->rows, a->num_tokens * a->topk, st),
                            fn, "gather order"));
  }
  MKX_TRY(mkx_fused_launch_rc(
      mkx_moe_gather_run(a->X, a->num_tokens, (int)a->topk, a->hidden,
                         (int)MKX_Type_size(a->dtype), w->rows, weight, c->rank,
                         pl, &at, dest, p->release ? &rel : NULL, st),
      fn, "gather"));
  if (p->fp8) MKX_TRY(mkx_moe_fp8_rows_scales(c, p, w, a, pl, st, fn));
  /* released rows: the GEMM's tiles wait for their experts instead */
  if (p->multi && !p->release)
    MKX_TRY(
        mkx_moe_meet(c, p, MKX_FUSED_OFF_DONE, MKX_FUSED_AT_MOE_ROWS, st, fn));
  if (p->nodes) MKX_TRY(mkx_moe_net_rows(c, p, a, w, L, scale, origin, st));
  return MKX_SUCCESS;
}

static int dispatch(MKX_Comm c, const moe_plan *p, const mkx_moe_args *a,
                    moe_ws *w, mkx_moe_layout *L, cudaStream_t st) {
  const char *fn = fn_of(MOE_DISPATCH);
  const int ty = mkx_fused_gemm_type(a->dtype);
  const int es = (int)MKX_Type_size(a->dtype);
  const int64_t ep = a->num_experts / c->size;
  int64_t total = 0;
  int trunc = -1;
  if (p->fp8) MKX_TRY(mkx_moe_fp8_scales_ok(c, p, a, st));
  MKX_TRY(mkx_moe_route(c, p, a, w, st, L, &total, &trunc));
  MKX_TRY(mkx_fused_launch_rc(
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
  MKX_TRY(mkx_moe_push_rows(c, p, a, w, L, st, a->topk_weight, scaled,
                            p->multi || a->origin != NULL, NULL, &pl));
  const void *wt = NULL;
  if (!p->fp8) /* fp8 weights are stored transposed, rows of hidden */
    MKX_TRY(mkx_moe_ws_weights(a->W, ep * a->hidden, a->n, w->ldw1, w->w1,
                               (size_t)es, st, fn, &wt));
  /* without the host wait: bounded by the rows A and Y hold */
  const int64_t rows = total >= 0 ? total : min64(p->tcap * a->topk, a->y_rows);
  mkx_moe_gemm_desc g = {
      (int)ep,    a->hidden, a->n,     w->a, w->lda, rows,
      w->offsets, wt,        w->ldw1,  a->Y, a->n,   scaled ? w->scale : NULL,
      ty,         ty,        0,        0,    0,      w->gemm_work,
      0,          w->gate,   p->kernel};
  if (p->fp8) {
    g.c_type = mkx_fused_gemm_type(a->ytype);
    mkx_moe_fp8_first(a, w, a->n, &g);
  }
  mkx_fused_sync sync;
  gemm_waits(c, p, &sync, &g);
  MKX_TRY(mkx_fused_launch_rc(mkx_moe_gemm_run(&g, st), fn, "grouped GEMM"));
  /* no origin piece: no rows can arrive (no tokens on any rank) */
  if (!p->multi || !a->origin || !w->origin) return MKX_SUCCESS;
  if (!p->sync)
    return mkx_fused_launch_rc(
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
  /* out's type: fp8 writes its activation and out in ytype */
  const int ty = mkx_fused_gemm_type(p->fp8 ? a->ytype : a->dtype);
  const int es = (int)MKX_Type_size(a->dtype);
  const int64_t ep = a->num_experts / c->size;
  int64_t total = 0;
  int trunc = -1;
  if (p->fp8) MKX_TRY(mkx_moe_fp8_scales_ok(c, p, a, st));
  MKX_TRY(mkx_moe_route(c, p, a, w, st, L, &total, &trunc));
  /* one rank without tokens has nothing to do; several still serve */
  if (!p->multi && a->num_tokens == 0) return MKX_SUCCESS;
  mkx_moe_place pl;
  MKX_TRY(mkx_moe_push_rows(c, p, a, w, L, st, NULL, 0, 0, w->dest, &pl));
  const void *w1 = a->W, *w2 = a->W2;
  if (!p->fp8) { /* fp8 weights are stored transposed, K rows of 16 bytes */
    MKX_TRY(mkx_moe_ws_w1_weights(a, ep, w, (size_t)es, st, &w1));
    MKX_TRY(mkx_moe_ws_weights(a->W2, ep * a->ffn, a->hidden, w->ldw2, w->w2,
                               (size_t)es, st, fn, &w2));
  }
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
  if (p->fp8) {
    mkx_moe_fp8_first(a, w, 2 * a->ffn, &g1);
    g1.up_col = a->ffn;
  }
  mkx_fused_sync sync;
  gemm_waits(c, p, &sync, &g1);
  MKX_TRY(
      mkx_fused_launch_rc(mkx_moe_gemm_run(&g1, st), fn, "W1 grouped GEMM"));
  mkx_moe_gemm_desc g2 = {(int)ep,  a->ffn,        a->hidden,  w->act,
                          w->ldact, rows,          w->offsets, w2,
                          w->ldw2,  w->y,          a->hidden,  NULL,
                          ty,       MKX_GEMM_FP32, 0,          0,
                          0,        w->gemm_work,  0,          w->gate,
                          p->kernel};
  if (p->fp8) MKX_TRY(mkx_moe_fp8_second(a, w, ty, rows, &g2, st));
  MKX_TRY(
      mkx_fused_launch_rc(mkx_moe_gemm_run(&g2, st), fn, "W2 grouped GEMM"));
  mkx_moe_outs_at y = {{w->y}, a->hidden};
  if (p->multi) {
    MKX_TRY(mkx_moe_meet(c, p, MKX_FUSED_OFF_DONE_LATE, MKX_FUSED_AT_MOE_OUT,
                         st, fn));
    for (int q = 0; q < c->size; q++) {
      if (c->place.node_of_rank[q] != c->place.node) continue;
      y.y[p->nodes ? c->place.local_rank_of[q] : q] =
          (float *)mkx_moe_ws_piece(c, p, q, W_Y);
    }
  }
  if (p->nodes) {
    MKX_TRY(mkx_moe_net_outs(c, p, a, w, L, st));
    y.y[c->place.local_size] = (const float *)w->mine;
  }
  return mkx_fused_launch_rc(
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
  p->fp8 = mkx_is_fp8(a->dtype); /* moe_fp8.c */
  /* several nodes: the host knows the counts, so it waits anyway */
  p->sync = p->nodes || c->opt.moe_sync;
  /* fp8: the rows' scales land after the rows, before the meet */
  p->release = !p->fp8 && release_rows(c);
  p->tcap = p->multi ? g->total : a->num_tokens;
  p->kernel =
      p->fp8 ? MKX_MOE_GEMM_SWAP
             : gemm_kernel(c->opt.moe_gemm, p->tcap * a->topk, a->num_experts);
  mkx_moe_ws_layout(a, c, p);
  const int64_t flags = p->release ? a->num_experts : c->size;
  mkx_fused_need need = {1, flags > c->size ? flags : c->size, p->off[W_END],
                         0};
  int rc = p->nodes ? mkx_moe_net_get(c, &p->net, fn_of(op)) : MKX_SUCCESS;
  rc = mkx_comm_agree_rc(c, rc, fn_of(op));
  if (rc == MKX_SUCCESS) rc = mkx_fused_ws_acquire(c, &need, &p->ws);
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
  mkx_fused_ws_release(p->ws);
  free(p);
}

static int moe_start(MKX_Comm c, void *plan, const void *args,
                     MKX_Stream stream) {
  const moe_plan *p = plan;
  const mkx_moe_args *a = args;
  const char *fn = fn_of(p->op);
  cudaStream_t st = (cudaStream_t)stream;
  moe_ws w;
  /* a capturing stream with moe_sync=yes, or several nodes, never gets
   * here: mkx_op_execute refuses it (mkx_path_capturable_on) */
  p->ws->input_error = mkx_moe_input_error;
  MKX_TRY(mkx_fused_begin(c, p->ws, fn, stream, 1, p->path));
  mkx_moe_ws_place(c, p, &w);
  w.mine = w.theirs = NULL;
  mkx_moe_layout L;
  memset(&L, 0, sizeof L);
  int rc = p->op == MOE_LAYER ? layer(c, p, a, &w, &L, st)
                              : dispatch(c, p, a, &w, &L, st);
  mkx_moe_layout_free(&L);
  if (rc == MKX_SUCCESS && p->proxy && w.mine) {
    /* the proxy done with the areas */
    rc =
        mkx_fused_launch_rc(mkx_fused_net_end(&w.net, st), fn, "network drain");
    if (rc == MKX_SUCCESS) rc = mkx_comm_net_gpu_mark(c, stream);
  } else if (rc == MKX_SUCCESS && p->nodes) {
    rc = mkx_moe_net_mark(p->net, st, fn);
  }
  MKX_TRY(rc);
  return mkx_fused_end(p->ws, stream);
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
