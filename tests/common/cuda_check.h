/* Test and benchmark programs stop at the first failing CUDA or cuBLAS
 * call, naming the call and the place. */
#ifndef MKX_TESTS_CUDA_CHECK_H
#define MKX_TESTS_CUDA_CHECK_H

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(x)                                                                  \
  do {                                                                         \
    cudaError_t e_ = (x);                                                      \
    if (e_ != cudaSuccess) {                                                   \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x,               \
              cudaGetErrorString(e_));                                         \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

#define CB(x)                                                                  \
  do {                                                                         \
    cublasStatus_t s_ = (x);                                                   \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                         \
      fprintf(stderr, "%s:%d: %s: cublas status %d\n", __FILE__, __LINE__, #x, \
              (int)s_);                                                        \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

/* MPI tests: a failing CUDA or MKX call is a "not ok" line naming the
 * rank, and ends the whole job (needs mpi.h; MT_MKX_AT needs mkx.h). */
#define MT_CUDA_AT(rank, x)                                                    \
  do {                                                                         \
    cudaError_t e_ = (x);                                                      \
    if (e_ != cudaSuccess) {                                                   \
      printf("not ok - rank %d: %s: %s\n", (rank), #x,                         \
             cudaGetErrorString(e_));                                          \
      fflush(stdout);                                                          \
      MPI_Abort(MPI_COMM_WORLD, 1);                                            \
    }                                                                          \
  } while (0)
#define MT_MKX_AT(rank, x)                                                     \
  do {                                                                         \
    int rc_ = (x);                                                             \
    if (rc_ != MKX_SUCCESS) {                                                  \
      printf("not ok - rank %d: %s: %s\n", (rank), #x, MKX_Get_last_error());  \
      fflush(stdout);                                                          \
      MPI_Abort(MPI_COMM_WORLD, 1);                                            \
    }                                                                          \
  } while (0)
/* with mkx_test.h's rank */
#define MT_CUDA(x) MT_CUDA_AT(mt.rank, x)

/* Visible GPUs, 0 if CUDA cannot tell (no driver, no device). */
static inline int mt_gpu_count(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
  (void)cudaGetLastError();
  return n;
}

/* Median time (ms) of `reps` (at most 64) runs of run(ctx) on the legacy
 * stream after two warm-ups, each between two CUDA events; -1 if a run
 * returned non-zero. */
static inline float mt_gpu_median_ms(int (*run)(const void *ctx),
                                     const void *ctx, int reps) {
  cudaEvent_t e0, e1;
  float ms[64], med = -1;
  if (reps < 1 || reps > 64) return -1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  for (int it = -2; it < reps; ++it) {
    CK(cudaEventRecord(e0, 0));
    if (run(ctx)) goto out;
    CK(cudaEventRecord(e1, 0));
    CK(cudaEventSynchronize(e1));
    if (it >= 0) CK(cudaEventElapsedTime(&ms[it], e0, e1));
  }
  for (int a = 0; a < reps; ++a)
    for (int b = a + 1; b < reps; ++b)
      if (ms[b] < ms[a]) {
        const float t = ms[a];
        ms[a] = ms[b];
        ms[b] = t;
      }
  med = ms[reps / 2];
out:
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  return med;
}

/* 1 if GPU 0 is sm_90 (the engines' tests run there), else 0 after a
 * "# skip" line saying why (the caller exits 77). */
static inline int mt_sm90_here(void) {
  int n = 0, major = 0, minor = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) {
    printf("# skip: no GPU\n");
    return 0;
  }
  CK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
  CK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0));
  if (major != 9 || minor != 0) {
    printf("# skip: not an sm_90 GPU\n");
    return 0;
  }
  return 1;
}

/* A device copy of bytes of host memory h (a 16-byte allocation when
 * bytes is 0, so every buffer has an address). */
static inline void *mt_dev_upload(const void *h, size_t bytes) {
  void *d = NULL;
  CK(cudaMalloc(&d, bytes ? bytes : 16));
  if (bytes) CK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
  return d;
}

#endif
