/* MKX_Allgather_gemm over nodes of one rank each, driven by the GPU
 * (option hier_gemm=proxy; ag_net_gpu.c): the path's table entries. */
#ifndef MKX_OPS_AG_NET_GPU_H
#define MKX_OPS_AG_NET_GPU_H

#include <stddef.h>
#include "core/comm.h"

struct mkx_agreed;

/* Whether the path takes this call (agreed values and options only);
 * else why not, into why. */
int mkx_ag_net_fits(MKX_Comm c, const void *args, const struct mkx_agreed *g,
                    char *why, size_t len);
int mkx_ag_net_plan(MKX_Comm c, int op, const void *args,
                    const struct mkx_agreed *g, void **plan);
int mkx_ag_net_start(MKX_Comm c, void *plan, const void *args,
                     MKX_Stream stream);
void mkx_ag_net_free(MKX_Comm c, void *plan);

#endif
