/* CBLAS (OpenBLAS by default) behind one call.  bf16 and fp16 data reach
 * it already converted to fp32, so one sgemm serves three types and the
 * reference stays independent of any mixed-precision BLAS kernel. */
#include <cblas.h>
#include <limits.h>
#include <string.h>
#include "core/error.h"
#include "host/blas.h"

int mkx_host_gemm(MKX_Datatype wtype, MKX_Trans transb, int64_t m, int64_t n,
                  int64_t k, const void *A, const void *B, void *C) {
  size_t es = wtype == MKX_FP64 ? sizeof(double) : sizeof(float);
  if (m == 0 || n == 0) return MKX_SUCCESS;
  if (k == 0) { /* CBLAS rejects lda = 0; the product is zero anyway */
    memset(C, 0, (size_t)m * (size_t)n * es);
    return MKX_SUCCESS;
  }
  if (m > INT_MAX || n > INT_MAX || k > INT_MAX)
    return mkx_error(MKX_ERR_UNSUPPORTED,
                     "host GEMM %lld x %lld x %lld exceeds CBLAS's int sizes",
                     (long long)m, (long long)n, (long long)k);
  enum CBLAS_TRANSPOSE tb = transb == MKX_TRANS ? CblasTrans : CblasNoTrans;
  int ldb = transb == MKX_TRANS ? (int)k : (int)n;
  if (wtype == MKX_FP64)
    cblas_dgemm(CblasRowMajor, CblasNoTrans, tb, (int)m, (int)n, (int)k, 1.0, A,
                (int)k, B, ldb, 0.0, C, (int)n);
  else
    cblas_sgemm(CblasRowMajor, CblasNoTrans, tb, (int)m, (int)n, (int)k, 1.0f,
                A, (int)k, B, ldb, 0.0f, C, (int)n);
  return MKX_SUCCESS;
}
