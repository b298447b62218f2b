/* Where the rows of an MoE call on several ranks go (src/ops/moe/moe_route.c),
 * from every rank's rows per expert: the same arithmetic on every rank,
 * without communication, so that senders and owners agree on every
 * position.  C11, no CUDA (tests/unit/test_moe_layout checks it on the
 * CPU).
 *
 * P ranks, E experts, ep = E / P per rank (rank q owns experts
 * [q ep, (q + 1) ep)).  On its owner, the rows of expert e are grouped in
 * expert order and, within an expert, come from the ranks in rank order
 * (each rank's own rows in slot order): the contract's (source rank,
 * token, slot) order, whatever the nodes.
 *
 * A rank's rows for an owner on its own node go straight into the owner's
 * grouped rows (GPU stores through the node's mappings).  Its rows for
 * owners on other nodes go into its send area, owner by owner in rank
 * order, each owner's in expert order: the block for owner d is one
 * message of the network exchange, and the owner receives the blocks of
 * its senders in rank order.  The received rows then move to their places
 * among the grouped rows in segments (one per sender and expert).  The
 * expert outputs travel back the same way, segments reversed, into the
 * sender's send area layout. */
#ifndef MKX_OPS_MOE_MOE_LAYOUT_H
#define MKX_OPS_MOE_MOE_LAYOUT_H

#include <stdint.h>

typedef struct mkx_moe_layout {
  int *base;      /* [E]: where this rank's rows of expert e start: among
                     the owner's grouped rows (same node), or in this
                     rank's send area (another node) */
  int *local;     /* [ep + 1]: this rank's expert offsets */
  int *target;    /* [P]: where rows for owner q go: q's local rank (same
                     node), or the node's size (the send area) */
  int64_t *send;  /* [P]: rows this rank sends to rank q over the network */
  int64_t *recv;  /* [P]: rows it receives from rank q over the network */
  int nseg;       /* segments of received rows */
  int *seg_start; /* [nseg + 1]: first received row of each segment (the
                     received rows in sender rank order), then their count */
  int *seg_row;   /* [nseg]: its first row among the grouped rows */
  int64_t rows;   /* rows this rank owns (local[ep]) */
  int64_t sent, received; /* rows over the network, sent and received */
  /* Where blocks sit in the other ranks' areas, for writes into them:
   * send_at[q], the row of q's receive area where this rank's block for q
   * starts; back_at[q], the row of q's send area where q's block for this
   * rank starts (both 0 for ranks of this node). */
  int64_t *send_at, *back_at;
  int64_t max_sent, max_received; /* the largest sent and received, over
                                     every rank */
} mkx_moe_layout;

/* counts[q * stride + e]: rank q's rows of expert e.  node_of and local_of
 * ([P]): each rank's node and its rank there; local_size: ranks per node
 * (the send area's target).  Every sum below 2^31 (the caller checks the
 * rows in all).  MKX_SUCCESS or MKX_ERR_NOMEM; free with
 * mkx_moe_layout_free either way. */
int mkx_moe_layout_make(int P, int me, int64_t E, const int64_t *counts,
                        int64_t stride, const int *node_of, const int *local_of,
                        int local_size, mkx_moe_layout *L);
void mkx_moe_layout_free(mkx_moe_layout *L);

#endif
