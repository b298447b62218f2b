/* The fused calls over nodes of one rank each, driven by the GPU (option
 * hier_gemm=proxy): AllGather+GEMM (ag_net_gpu.c), GEMM+ReduceScatter and
 * GEMM+AllReduce (red_net_gpu.c), their table entries, and what they
 * share (net_gpu.c). */
#ifndef MKX_OPS_NET_GPU_H
#define MKX_OPS_NET_GPU_H

#include <stddef.h>
#include <stdint.h>
#include "core/comm.h"
#include "ops/tp_host.h"

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

int mkx_red_net_fits(MKX_Comm c, int op, const void *args,
                     const struct mkx_agreed *g, char *why, size_t len);
int mkx_red_net_plan(MKX_Comm c, int op, const void *args,
                     const struct mkx_agreed *g, void **plan);
int mkx_red_net_start(MKX_Comm c, void *plan, const void *args,
                      MKX_Stream stream);
void mkx_red_net_free(MKX_Comm c, void *plan);

/* Shared: why the communicator cannot take the path (NULL: it can) */
const char *mkx_net_fits_comm(MKX_Comm c);
/* At the start of a call: not inside a graph capture, and after the
 * previous call of the path on the communicator. */
int mkx_net_start_ok(MKX_Comm c, MKX_Stream st, const char *fn);
/* The kernels' descriptor: the communicator's proxy and words, this
 * plan's workspace (bound, error word); no rows (bnd all 0). */
void mkx_net_desc_fill(MKX_Comm c, const mkx_tp_ws *ws, uint64_t *words,
                       mkx_tp_net_desc *d);

#endif
