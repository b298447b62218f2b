/* The host path's collectives over several nodes, done hierarchically:
 * inside a node through MPI (standing for NVLink), between nodes through
 * MKX's own transport and proxy, so that each byte crosses the network
 * the fewest times: every A row once per destination node, every foreign
 * output block's node-partial once. */
#ifndef MKX_HOST_HIER_H
#define MKX_HOST_HIER_H

#include <stddef.h>
#include <stdint.h>
#include "core/comm.h"

/* 1 if the communicator spans several nodes of equal size with a network
 * endpoint (the same answer on every rank). */
int mkx_hier_usable(MKX_Comm c);

/* full = every rank's rows (rows[q] rows of row_bytes each) in rank order;
 * send holds this rank's rows[rank] rows. */
int mkx_hier_allgather_rows(MKX_Comm c, const void *send, const int64_t *rows,
                            size_t row_bytes, void *full);

/* mkx_hier_allgather_rows over several nodes (mkx_hier_usable), else one
 * MPI allgather: the host path's gather of rows. */
int mkx_host_allgather_rows(MKX_Comm c, const void *send, const int64_t *rows,
                            size_t row_bytes, void *full, const char *what);

/* part is this rank's M x n partial (fp32, or fp64 when wt is MKX_FP64),
 * M = sum of rows; block receives rows[rank] x n: the sum over all ranks
 * of their partials of this rank's rows, added in a fixed order (node
 * peers in local-rank order, then nodes in order). */
int mkx_hier_reduce_rows(MKX_Comm c, MKX_Datatype wt, const void *part,
                         const int64_t *rows, int64_t n, void *block);

/* The network halves of the two above, for callers that did the node's
 * part themselves (src/ops/nodes/hier_nvlink.c: over NVLink).  A rank's column
 * is the local rank of the same number on every node.
 * mkx_hier_column_gather: col = the rows of every rank of this rank's
 * column, nodes in order (send: this rank's rows[rank] rows).
 * mkx_hier_column_reduce: colsum = this node's sum of every block of this
 * rank's column, nodes in order; block = the sum over nodes (in node
 * order) of this rank's block. */
/* Column slices [j[s], j[s+1]) of n columns, s < the returned count: about
 * n / 32 of them, at least 1 (none when n is 0), at most
 * MKX_HIER_MAX_SLICES, every one but the last a multiple of 8 wide.  The
 * pipeline of hier_gemm=nvlink's reduce calls: the node part of slice
 * s + 1 runs on the GPUs while slice s crosses the network. */
#define MKX_HIER_MAX_SLICES 4
int mkx_hier_slices(int64_t n, int64_t *j);

/* 1 if the even split of M rows over a node's G ranks gives each local
 * rank l exactly its column's rows under the split of M over all ranks
 * (true when ranks are numbered node by node: docs/inter-node.md); a
 * node's single-node call over row-permuted operands then does its part. */
int mkx_hier_split_matches(MKX_Comm c, int64_t M);
int mkx_hier_column_gather(MKX_Comm c, const void *send, const int64_t *rows,
                           size_t row_bytes, void *col);
int mkx_hier_column_reduce(MKX_Comm c, MKX_Datatype wt, const void *colsum,
                           const int64_t *rows, int64_t n, void *block);

#endif
