/* The split path's GEMM (kernels/tp/split.cu): cuBLAS, one handle per
 * communicator.  On the small products the split path serves, the engine's
 * 128-row tiles leave most SMs idle, and cuBLAS alone is faster there
 * (tests/perf/results/tp-h200x2.md).  The overlapped path keeps the
 * engine, whose hooks it needs. */
#include <stdlib.h>
#include <string.h>
#include "core/error.h"

#if HAVE_CUDA
#include "core/cuda_rc.h"
#include <cublas_v2.h>
#include "ops/fused/fused.h"
#include "gemm/gemm_engine.h"

/* cuBLAS's workspace, ours so that no call allocates (graph capture). */
#define BLAS_WS_BYTES ((size_t)32 << 20)

struct mkx_tp_blas {
  cublasHandle_t h;
  void *ws;
};

static int blas_rc(cublasStatus_t s, const char *fn, const char *what) {
  if (s == CUBLAS_STATUS_SUCCESS) return MKX_SUCCESS;
  return mkx_error(
      s == CUBLAS_STATUS_ALLOC_FAILED ? MKX_ERR_NOMEM : MKX_ERR_CUDA,
      "%s: %s: cuBLAS status %d", fn, what, (int)s);
}

void mkx_tp_blas_free(mkx_tp_blas *b) {
  if (!b) return;
  if (b->h) cublasDestroy(b->h);
  if (b->ws) MKX_CUDA_RELEASE(cudaFree(b->ws));
  free(b);
}

int mkx_tp_blas_make(mkx_tp_blas **out, const char *fn) {
  mkx_tp_blas *b = calloc(1, sizeof *b);
  if (!b) return mkx_error(MKX_ERR_NOMEM, "%s: cuBLAS handle", fn);
  int rc = blas_rc(cublasCreate(&b->h), fn, "cublasCreate");
  if (rc == MKX_SUCCESS)
    rc = mkx_cuda_rc(cudaMalloc(&b->ws, BLAS_WS_BYTES), fn, "cuBLAS workspace");
  if (rc != MKX_SUCCESS) {
    mkx_tp_blas_free(b);
    return rc;
  }
  *out = b;
  return MKX_SUCCESS;
}

static cudaDataType_t cuda_type(int gemm_type) {
  return gemm_type == MKX_GEMM_FP32   ? CUDA_R_32F
         : gemm_type == MKX_GEMM_FP16 ? CUDA_R_16F
                                      : CUDA_R_16BF;
}

/* Row-major C = A B as column-major C^T = B^T A^T: B n x k (K-major) is
 * transposed, k x n (N-major) is not. */
int mkx_tp_blas_gemm(mkx_tp_blas **b, const mkx_gemm_desc *g, cudaStream_t st,
                     const char *fn) {
  const float one = 1.0f, zero = 0.0f;
  if (g->m == 0 || g->n == 0) return MKX_SUCCESS;
  if (!*b) MKX_TRY(mkx_tp_blas_make(b, fn));
  MKX_TRY(blas_rc(cublasSetStream((*b)->h, st), fn, "cublasSetStream"));
  /* cublasSetStream puts the default workspace back */
  MKX_TRY(blas_rc(cublasSetWorkspace((*b)->h, (*b)->ws, BLAS_WS_BYTES), fn,
                  "cublasSetWorkspace"));
  return blas_rc(cublasGemmEx((*b)->h, g->b_kmajor ? CUBLAS_OP_T : CUBLAS_OP_N,
                              CUBLAS_OP_N, (int)g->n, (int)g->m, (int)g->k,
                              &one, g->b, cuda_type(g->ab_type), (int)g->ldb,
                              g->a, cuda_type(g->ab_type), (int)g->lda, &zero,
                              g->c, cuda_type(g->c_type), (int)g->ldc,
                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 fn, "cublasGemmEx");
}
#else
typedef int mkx_tp_blas_unused; /* ISO C: not an empty unit */
#endif
