/* The fp8 baseline of mkx_perf gemm: cuBLASLt's fp8 GEMM as a user calls it, C = (sa A) (sb B)
 * with A m x k row-major, B stored n x k (K contiguous), e4m3, per-tensor scales in device
 * memory, fp32 compute with cuBLASLt's default (promoted) accumulation, C bf16 m x n. */
#ifndef MKX_PERF_LT_H
#define MKX_PERF_LT_H

#include <cuda_runtime.h>
#include <stdint.h>

typedef struct perf_lt perf_lt;

/* The plan of one shape, its algorithm from cuBLASLt's heuristic; NULL (and a line on stderr)
 * where cuBLASLt has none. */
perf_lt *perf_lt_make(int64_t m, int64_t n, int64_t k, const void *a,
                      const void *b, void *c, const float *sa, const float *sb);
/* Enqueue it on st; 0 or the cublasStatus_t. */
int perf_lt_run(perf_lt *p, cudaStream_t st);
void perf_lt_free(perf_lt *p);

#endif
