/* Where the gather of an MoE call on the GPU writes, and on several
 * nodes the areas of the rows between nodes and the moves through them.
 * Each area holds its rows' A rows, then (dispatch) their scales and origins:
 * `mine` the rows this rank sends, `theirs` the rows it receives.  The
 * layer's outputs travel back through the same areas from their start:
 * `theirs` those this rank sends back, `mine` those it gets.  The host
 * exchanges the communicator's pinned areas (moe_net.h), each sized for
 * this rank's rows; with the network driven by the GPU (hier_moe) both
 * are the network region in host memory, `mine` then `theirs`, sized for
 * the largest rank's rows so that every rank knows where to write into
 * every other's (moe_layout.h: send_at, back_at). */
#include <stdint.h>
#include <string.h>
#include "core/error.h"

#if HAVE_CUDA
#include "core/comm_net.h"
#include "core/cuda_rc.h"
#include "ops/moe/moe_gpu_int.h"
#include "ops/nodes/net_gpu.h"

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

int mkx_moe_areas(MKX_Comm c, const moe_plan *p, const mkx_moe_args *a,
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

void mkx_moe_targets(MKX_Comm c, const moe_plan *p, const mkx_moe_args *a,
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
    at->a[l] = mkx_moe_ws_piece(c, p, q, W_A);
    at->scale[l] = scale ? (float *)mkx_moe_ws_piece(c, p, q, W_SCALE) : NULL;
    at->origin[l] =
        origin ? (int32_t *)mkx_moe_ws_piece(c, p, q, W_ORIGIN) : NULL;
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
  return mkx_fused_launch_rc(
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
  MKX_TRY(mkx_fused_launch_rc(mkx_fused_net_begin(&w->net, st), fn,
                              "network meet"));
  int64_t at = 0; /* rows before q's block in this rank's send area */
  for (int q = 0; q < c->size; q++) {
    if (!(w->net.peers >> q & 1u)) continue;
    for (int k = 0; k < 3; k++) {
      if (!want[k]) continue;
      const uint64_t src = (k ? side_at(p, a, L->max_sent, k) : 0) + at * rb[k];
      const uint64_t dst = theirs +
                           (k ? side_at(p, a, L->max_received, k) : 0) +
                           (uint64_t)L->send_at[q] * rb[k];
      MKX_TRY(mkx_fused_launch_rc(
          mkx_fused_net_post(&w->net, q, src, dst, (uint64_t)L->send[q] * rb[k],
                             W_NET_ROWS + (uint32_t)k, st),
          fn, "network post of rows"));
    }
    at += L->send[q];
  }
  for (int k = 0; k < 3; k++)
    if (want[k])
      MKX_TRY(mkx_fused_launch_rc(
          mkx_fused_net_wait(&w->net, W_NET_ROWS + (uint32_t)k,
                             MKX_FUSED_AT_MOE_ROWS, st),
          fn, "wait for rows from other nodes"));
  return MKX_SUCCESS;
}

int mkx_moe_net_rows(MKX_Comm c, const moe_plan *p, const mkx_moe_args *a,
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

int mkx_moe_net_outs(MKX_Comm c, const moe_plan *p, const mkx_moe_args *a,
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
    MKX_TRY(mkx_fused_launch_rc(
        mkx_fused_net_post(&w->net, q, theirs + (uint64_t)at * yr,
                           (uint64_t)L->back_at[q] * yr,
                           (uint64_t)L->recv[q] * yr, W_NET_OUT, st),
        fn, "network post of outputs"));
    at += L->recv[q];
  }
  return mkx_fused_launch_rc(
      mkx_fused_net_wait(&w->net, W_NET_OUT, MKX_FUSED_AT_MOE_OUT, st), fn,
      "wait for outputs from other nodes");
}
#else
typedef int mkx_moe_gpu_net_unused; /* ISO C: not an empty unit */
#endif
