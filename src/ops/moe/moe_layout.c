/* Row positions of an MoE call on several ranks (moe_layout.h). */
#include <stdlib.h>
#include <string.h>
#include "core/error.h"
#include "ops/moe/moe_layout.h"

void mkx_moe_layout_free(mkx_moe_layout *L) {
  free(L->base);
  free(L->local);
  free(L->target);
  free(L->send);
  free(L->recv);
  free(L->seg_start);
  free(L->seg_row);
  free(L->send_at);
  free(L->back_at);
  memset(L, 0, sizeof *L);
}

static int alloc(mkx_moe_layout *L, int P, int64_t E, int64_t ep) {
  memset(L, 0, sizeof *L);
  L->base = malloc(sizeof *L->base * (size_t)E);
  L->local = malloc(sizeof *L->local * (size_t)(ep + 1));
  L->target = malloc(sizeof *L->target * (size_t)P);
  L->send = calloc((size_t)P, sizeof *L->send);
  L->recv = calloc((size_t)P, sizeof *L->recv);
  /* at most one segment per (sender, local expert): P * ep = E */
  L->seg_start = malloc(sizeof *L->seg_start * (size_t)(E + 1));
  L->seg_row = malloc(sizeof *L->seg_row * (size_t)(E + 1));
  L->send_at = calloc((size_t)P, sizeof *L->send_at);
  L->back_at = calloc((size_t)P, sizeof *L->back_at);
  if (L->base && L->local && L->target && L->send && L->recv && L->seg_start &&
      L->seg_row && L->send_at && L->back_at)
    return MKX_SUCCESS;
  return mkx_error(MKX_ERR_NOMEM, "MoE row layout");
}

/* Rows owner d receives of its experts, and where this rank's start. */
static void owner_rows(const mkx_moe_layout *L, int P, int me, int d,
                       int64_t ep, const int64_t *counts, int64_t stride,
                       int remote, int64_t *sent_at, int *local_out) {
  int64_t run = 0; /* rows owner d holds before its expert le */
  for (int64_t le = 0; le < ep; le++) {
    const int64_t e = d * ep + le, start = run;
    int64_t before = 0; /* rows of expert e from the ranks before me */
    for (int q = 0; q < P; q++) {
      const int64_t k = counts[(int64_t)q * stride + e];
      if (q < me) before += k;
      run += k;
    }
    if (remote) {
      L->base[e] = (int)*sent_at;
      *sent_at += counts[(int64_t)me * stride + e];
    } else {
      L->base[e] = (int)(start + before);
    }
    if (local_out) local_out[le] = (int)start;
  }
  if (local_out) local_out[ep] = (int)run;
}

/* The segments of the rows this rank receives over the network: senders
 * in rank order, each one's rows in expert order. */
static void segments(mkx_moe_layout *L, int P, int me, int64_t ep,
                     const int64_t *counts, int64_t stride,
                     const int *node_of) {
  int64_t at = 0;
  L->nseg = 0;
  for (int s = 0; s < P; s++) {
    if (node_of[s] == node_of[me]) continue;
    for (int64_t le = 0; le < ep; le++) {
      const int64_t e = me * ep + le;
      const int64_t k = counts[(int64_t)s * stride + e];
      int64_t before = 0;
      for (int q = 0; q < s; q++) before += counts[(int64_t)q * stride + e];
      if (k == 0) continue;
      L->seg_start[L->nseg] = (int)at;
      L->seg_row[L->nseg] = (int)(L->local[le] + before);
      L->nseg++;
      at += k;
      L->recv[s] += k;
    }
  }
  L->seg_start[L->nseg] = (int)at;
  L->received = at;
}

/* Rows rank s sends rank d over the network. */
static int64_t crossing(int s, int d, int64_t ep, const int64_t *counts,
                        int64_t stride, const int *node_of) {
  int64_t k = 0;
  if (node_of[s] == node_of[d]) return 0;
  for (int64_t le = 0; le < ep; le++)
    k += counts[(int64_t)s * stride + d * ep + le];
  return k;
}

/* send_at, back_at, max_sent and max_received (moe_layout.h). */
static void blocks(mkx_moe_layout *L, int P, int me, int64_t ep,
                   const int64_t *counts, int64_t stride, const int *node_of) {
  L->max_sent = L->max_received = 0;
  for (int q = 0; q < P; q++) {
    int64_t sent = 0, received = 0;
    for (int o = 0; o < P; o++) {
      sent += crossing(q, o, ep, counts, stride, node_of);
      received += crossing(o, q, ep, counts, stride, node_of);
    }
    if (sent > L->max_sent) L->max_sent = sent;
    if (received > L->max_received) L->max_received = received;
    if (node_of[q] == node_of[me]) continue;
    for (int s = 0; s < me; s++)
      L->send_at[q] += crossing(s, q, ep, counts, stride, node_of);
    for (int o = 0; o < me; o++)
      L->back_at[q] += crossing(q, o, ep, counts, stride, node_of);
  }
}

int mkx_moe_layout_make(int P, int me, int64_t E, const int64_t *counts,
                        int64_t stride, const int *node_of, const int *local_of,
                        int local_size, mkx_moe_layout *L) {
  const int64_t ep = E / P;
  MKX_TRY(alloc(L, P, E, ep));
  int64_t sent_at = 0;
  for (int d = 0; d < P; d++) {
    const int remote = node_of[d] != node_of[me];
    const int64_t before = sent_at;
    L->target[d] = remote ? local_size : local_of[d];
    owner_rows(L, P, me, d, ep, counts, stride, remote, &sent_at,
               d == me ? L->local : NULL);
    L->send[d] = sent_at - before;
  }
  L->sent = sent_at;
  L->rows = L->local[ep];
  segments(L, P, me, ep, counts, stride, node_of);
  blocks(L, P, me, ep, counts, stride, node_of);
  return MKX_SUCCESS;
}
