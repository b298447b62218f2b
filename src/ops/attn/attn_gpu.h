/* MKX_Ring_attention's GPU hooks (src/ops/attn/attn_gpu.c; see src/ops/op.h for
 * what each hook may do).  C11; only built with CUDA. */
#ifndef MKX_OPS_ATTN_ATTN_GPU_H
#define MKX_OPS_ATTN_ATTN_GPU_H

#include "ops/op.h"

int mkx_attn_gpu_check(MKX_Comm c, const void *args, const mkx_agreed *g);
int mkx_attn_gpu_choose(MKX_Comm c, const void *args, const mkx_agreed *g,
                        mkx_path_choice *out);

#include <cuda_runtime.h>
#include "ops/fused/fused.h"

/* Several nodes with the network part driven by the GPU (option
 * hier_attn, attn/attn_net.c). */
typedef struct mkx_attn_net mkx_attn_net;
/* Whether the communicator takes it; else why not, into why. */
int mkx_attn_net_fits(MKX_Comm c, char *why, size_t len);
/* Collective (grows the region); on failure nothing is held. */
int mkx_attn_net_init(MKX_Comm c, size_t chunk, mkx_attn_net **n);
void mkx_attn_net_free(mkx_attn_net *n);
/* On st after the prologue and before the engine: this rank's K and V to
 * every other node; then *d's ring and net_* fields say where the other
 * ranks' chunks land here and which words say they have. */
struct mkx_attn_desc;
int mkx_attn_net_send(MKX_Comm c, mkx_attn_net *n, mkx_fused_ws *ws,
                      const void *K, const void *V, cudaStream_t st,
                      struct mkx_attn_desc *d);
/* The CTAs the engine may take beside this path's kernels (*ctas: the
 * rank's, mkx_fused_sync.ctas; 0 for every SM). */
void mkx_attn_net_ctas(const mkx_attn_net *n, int *ctas);
/* On st after the engine (after mkx_attn_net_send of the same start):
 * until the proxy has completed this rank's writes. */
int mkx_attn_net_end(MKX_Comm c, mkx_attn_net *n, cudaStream_t st);

#endif
