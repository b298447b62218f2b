/* MKX_Moe_dispatch_gemm's and MKX_Moe_layer's GPU hooks
 * (src/ops/moe/moe_gpu_check.c and moe_gpu.c; see src/ops/op.h for what
 * each hook may do).  C11; only built with CUDA. */
#ifndef MKX_OPS_MOE_MOE_GPU_H
#define MKX_OPS_MOE_MOE_GPU_H

#include "ops/op.h"

int mkx_moe_dispatch_gpu_check(MKX_Comm c, const void *args,
                               const mkx_agreed *g);
int mkx_moe_layer_gpu_check(MKX_Comm c, const void *args, const mkx_agreed *g);
int mkx_moe_dispatch_gpu_choose(MKX_Comm c, const void *args,
                                const mkx_agreed *g, mkx_path_choice *out);
int mkx_moe_layer_gpu_choose(MKX_Comm c, const void *args, const mkx_agreed *g,
                             mkx_path_choice *out);

#endif
