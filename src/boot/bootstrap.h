/* The bootstrap: node split, local ranks and exchange of per-rank blobs.
 * It talks to the outside world only through an out-of-band allgather and
 * barrier (MPI in the library, threads in a unit test), as UCC does. */
#ifndef MKX_BOOT_BOOTSTRAP_H
#define MKX_BOOT_BOOTSTRAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct mkx_oob {
  int rank, size;
  /* Gather `bytes` from every rank into recv (size * bytes, rank order).
   * Returns an MKX error code; must give up with MKX_ERR_TIMEOUT after
   * timeout_ms.  `what` names the exchange in messages and, over MPI,
   * travels with it: ranks in different exchanges get MKX_ERR_PEER naming
   * both (boot/oob_mpi.c). */
  int (*allgather)(void *ctx, const void *send, void *recv, size_t bytes,
                   int64_t timeout_ms, const char *what);
  int (*barrier)(void *ctx, int64_t timeout_ms, const char *what);
  void *ctx;
} mkx_oob;

#define MKX_HOSTNAME_MAX 64

typedef struct mkx_placement {
  int node, num_nodes; /* this rank's node and the node count */
  int local_rank, local_size;
  int host_local_rank; /* rank among the ranks of this host */
  int equal_nodes;     /* every node has local_size ranks */
  int *node_of_rank;   /* [size] */
  int *local_rank_of;  /* [size] */
  int *host_of_rank;   /* [size]: physical host, numbered like nodes */
} mkx_placement;

/* Collective over oob.  Ranks with equal `host` strings share a node, nodes
 * numbered in order of their lowest rank; virtual_node_size > 0 cuts each
 * host's ranks (in rank order) into nodes of that many ranks. */
int mkx_boot_placement(const mkx_oob *oob, const char *host,
                       int virtual_node_size, int64_t timeout_ms,
                       mkx_placement *pl);
void mkx_placement_free(mkx_placement *pl);
/* The rank (of size) that is node rank `local` of `node`, or -1. */
int mkx_placement_rank_at(const mkx_placement *pl, int size, int node,
                          int local);

#endif
