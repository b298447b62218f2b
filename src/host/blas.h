/* The one CBLAS wrapper of the host path, on dense row-major working
 * arrays (float for MKX_FP32, double for MKX_FP64). */
#ifndef MKX_HOST_BLAS_H
#define MKX_HOST_BLAS_H

#include "mkx.h"
#include <stdint.h>

/* C (m x n) = A (m x k) x op(B), all dense row-major of type wtype
 * (MKX_FP32 or MKX_FP64).  op(B) = B stored k x n, or B^T with B stored
 * n x k when transb == MKX_TRANS.  k == 0 gives zeros.  Sizes past CBLAS's
 * int return MKX_ERR_UNSUPPORTED. */
int mkx_host_gemm(MKX_Datatype wtype, MKX_Trans transb, int64_t m, int64_t n,
                  int64_t k, const void *A, const void *B, void *C);

#endif
