/* The host reference path: every operation with CBLAS and MPI on host
 * memory.  The oracle for the GPU kernels and the path for GPU-less runs.
 * Arguments arrive validated and agreed across ranks (src/ops). */
#ifndef MKX_HOST_HOST_OPS_H
#define MKX_HOST_HOST_OPS_H

#include "core/comm.h"
#include "host/op_args.h"

int mkx_host_allgather_gemm(MKX_Comm c, const mkx_ag_gemm_args *a,
                            const mkx_agreed *g);
int mkx_host_gemm_reduce_scatter(MKX_Comm c, const mkx_rs_ar_args *a,
                                 const mkx_agreed *g);
int mkx_host_gemm_allreduce(MKX_Comm c, const mkx_rs_ar_args *a,
                            const mkx_agreed *g);
int mkx_host_ring_attention(MKX_Comm c, const mkx_attn_args *a,
                            const mkx_agreed *g);
int mkx_host_moe_dispatch_gemm(MKX_Comm c, const mkx_moe_args *a,
                               const mkx_agreed *g);
int mkx_host_moe_layer(MKX_Comm c, const mkx_moe_args *a, const mkx_agreed *g);

#endif
