/* cuBLASLt's fp8 GEMM, the baseline of mkx_perf gemm --dtype fp8 (perf_lt.h).  Row-major
 * C = A B^T is, column-major, C^T = B^T A with B^T's op transposed: the "TN" form cuBLASLt's
 * fp8 kernels take. */
#include "perf_lt.h"

#include <cublasLt.h>
#include <stdio.h>
#include <stdlib.h>

struct perf_lt {
  cublasLtHandle_t h;
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t la, lb, lc;
  cublasLtMatmulAlgo_t algo;
  void *ws;
  size_t ws_bytes;
  const void *a, *b;
  void *c;
};

#define LT(x)                                                                  \
  do {                                                                         \
    const cublasStatus_t s_ = (x);                                             \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                         \
      fprintf(stderr, "perf_lt: %s: status %d\n", #x, (int)s_);                \
      perf_lt_free(p);                                                         \
      return NULL;                                                             \
    }                                                                          \
  } while (0)

perf_lt *perf_lt_make(int64_t m, int64_t n, int64_t k, const void *a,
                      const void *b, void *c, const float *sa,
                      const float *sb) {
  perf_lt *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->a = a, p->b = b, p->c = c;
  p->ws_bytes = (size_t)64 << 20;
  if (cudaMalloc(&p->ws, p->ws_bytes) != cudaSuccess) {
    fprintf(stderr, "perf_lt: cudaMalloc of the workspace failed\n");
    perf_lt_free(p);
    return NULL;
  }
  LT(cublasLtCreate(&p->h));
  LT(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t t = CUBLAS_OP_T, nt = CUBLAS_OP_N;
  LT(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &t,
                                    sizeof t));
  LT(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &nt,
                                    sizeof nt));
  /* the column-major operands: first B (k x n, ld k, transposed), then A (k x m, ld k) */
  LT(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                    &sb, sizeof sb));
  LT(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                    &sa, sizeof sa));
  LT(cublasLtMatrixLayoutCreate(&p->la, CUDA_R_8F_E4M3, (uint64_t)k,
                                (uint64_t)n, k));
  LT(cublasLtMatrixLayoutCreate(&p->lb, CUDA_R_8F_E4M3, (uint64_t)k,
                                (uint64_t)m, k));
  LT(cublasLtMatrixLayoutCreate(&p->lc, CUDA_R_16BF, (uint64_t)n, (uint64_t)m,
                                n));
  cublasLtMatmulPreference_t pref;
  LT(cublasLtMatmulPreferenceCreate(&pref));
  const cublasStatus_t ps = cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &p->ws_bytes,
      sizeof p->ws_bytes);
  cublasLtMatmulHeuristicResult_t r;
  int found = 0;
  const cublasStatus_t hs =
      ps == CUBLAS_STATUS_SUCCESS
          ? cublasLtMatmulAlgoGetHeuristic(p->h, p->op, p->la, p->lb, p->lc,
                                           p->lc, pref, 1, &r, &found)
          : ps;
  cublasLtMatmulPreferenceDestroy(pref);
  LT(hs);
  if (found < 1) {
    fprintf(stderr,
            "perf_lt: cuBLASLt has no fp8 algorithm for %lld x %lld x %lld\n",
            (long long)m, (long long)n, (long long)k);
    perf_lt_free(p);
    return NULL;
  }
  p->algo = r.algo;
  return p;
}

int perf_lt_run(perf_lt *p, cudaStream_t st) {
  const float one = 1.f, zero = 0.f;
  return (int)cublasLtMatmul(p->h, p->op, &one, p->b, p->la, p->a, p->lb, &zero,
                             p->c, p->lc, p->c, p->lc, &p->algo, p->ws,
                             p->ws_bytes, st);
}

void perf_lt_free(perf_lt *p) {
  if (!p) return;
  if (p->lc) cublasLtMatrixLayoutDestroy(p->lc);
  if (p->lb) cublasLtMatrixLayoutDestroy(p->lb);
  if (p->la) cublasLtMatrixLayoutDestroy(p->la);
  if (p->op) cublasLtMatmulDescDestroy(p->op);
  if (p->h) cublasLtDestroy(p->h);
  if (p->ws) cudaFree(p->ws);
  free(p);
}
