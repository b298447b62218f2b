/* The kernel of examples/tiles_kernel.cu, for its host program. */
#ifndef MKX_EXAMPLES_TILES_KERNEL_H
#define MKX_EXAMPLES_TILES_KERNEL_H

#include <cuda_runtime.h>
#include <stdint.h>
#include "mkx_tiles_dev.h"

#ifdef __cplusplus
extern "C" {
#endif

/* This rank's partial P = A (rows x k) x B (k x cols) into its copy of
 * the set t (fp32, row-major), each kernel tile signalled once written. */
int tiles_partial_gemm(const MKX_Tiles_dev *t, const float *A, const float *B,
                       int64_t k, cudaStream_t st);

#ifdef __cplusplus
}
#endif
#endif
