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

#endif
