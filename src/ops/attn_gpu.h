/* MKX_Ring_attention's GPU hooks (src/ops/attn_gpu.c; see src/ops/op.h for
 * what each hook may do).  C11; only built with CUDA. */
#ifndef MKX_OPS_ATTN_GPU_H
#define MKX_OPS_ATTN_GPU_H

#include "ops/op.h"

int mkx_attn_gpu_check(MKX_Comm c, const void *args, const mkx_agreed *g);
int mkx_attn_gpu_choose(MKX_Comm c, const void *args, const mkx_agreed *g,
                        mkx_path_choice *out);
int mkx_attn_gpu_plan(MKX_Comm c, int op, const void *args, const mkx_agreed *g,
                      void **plan);
int mkx_attn_gpu_start(MKX_Comm c, void *plan, const void *args,
                       MKX_Stream stream);
void mkx_attn_gpu_free(MKX_Comm c, void *plan);

#endif
