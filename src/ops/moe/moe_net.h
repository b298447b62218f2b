/* The network part of MoE calls on several nodes (src/ops/moe/moe_gpu_net.c): two
 * pinned, GPU-mapped host areas and the exchanges between them.  The
 * kernels write and read these areas directly over PCIe (the gather puts
 * rows for other nodes into `mine`, the move kernel takes received rows
 * from `theirs`, the combine reads returned outputs from `mine`), so no
 * device memory is spent on staging.  The areas belong to the
 * communicator: made on first use, grown to the largest call's needs (so
 * that repeated calls allocate nothing) and freed with it.  C11; only
 * built with CUDA. */
#ifndef MKX_OPS_MOE_MOE_NET_H
#define MKX_OPS_MOE_MOE_NET_H

#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime.h>
#include "core/comm.h"

typedef struct mkx_moe_net {
  char *mine;   /* this rank's send area, then the outputs it gets back */
  char *theirs; /* the rows it receives, then the outputs it sends back */
  void *mine_dev, *theirs_dev; /* the same, as the GPU addresses them */
  size_t mine_cap, theirs_cap;
  cudaEvent_t done; /* after the last kernel of a call that used them */
  int lost;         /* an exchange timed out: the areas are never freed */
} mkx_moe_net;

/* The communicator's areas. */
int mkx_moe_net_get(MKX_Comm c, mkx_moe_net **n, const char *fn);
/* Once the previous call's kernels are done with them, areas of at least
 * `mine` and `theirs` bytes.  Collective: a failure on any rank is every
 * rank's error, before any of them starts an exchange. */
int mkx_moe_net_reserve(MKX_Comm c, mkx_moe_net *n, size_t mine, size_t theirs,
                        const char *fn);
/* Rows of row_bytes: send[q] rows to each rank q from `from` (the blocks
 * of the ranks in rank order), recv[q] rows from each rank q into `to`
 * (in rank order).  Collective; every rank's send and recv must match
 * pairwise (src/ops/moe/moe_layout.h). */
int mkx_moe_net_exchange(MKX_Comm c, mkx_moe_net *n, const char *from,
                         const int64_t *send, char *to, const int64_t *recv,
                         size_t row_bytes, const char *fn);
/* The call's last kernel using the areas is on stream st. */
int mkx_moe_net_mark(mkx_moe_net *n, cudaStream_t st, const char *fn);

#endif
