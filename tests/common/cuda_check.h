/* Test and benchmark programs stop at the first failing CUDA or cuBLAS
 * call, naming the call and the place. */
#ifndef MKX_TESTS_CUDA_CHECK_H
#define MKX_TESTS_CUDA_CHECK_H

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(x)                                                                \
  do {                                                                       \
    cudaError_t e_ = (x);                                                    \
    if (e_ != cudaSuccess) {                                                 \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x,             \
              cudaGetErrorString(e_));                                       \
      exit(1);                                                               \
    }                                                                        \
  } while (0)

#define CB(x)                                                                \
  do {                                                                       \
    cublasStatus_t s_ = (x);                                                 \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                       \
      fprintf(stderr, "%s:%d: %s: cublas status %d\n", __FILE__, __LINE__,   \
              #x, (int)s_);                                                  \
      exit(1);                                                               \
    }                                                                        \
  } while (0)

/* MPI tests (mkx_test.h): a failing CUDA call is a "not ok" line naming the
 * rank, and ends the whole job. */
#define MT_CUDA(x)                                                           \
  do {                                                                       \
    cudaError_t e_ = (x);                                                    \
    if (e_ != cudaSuccess) {                                                 \
      printf("not ok - rank %d: %s: %s\n", mt.rank, #x,                      \
             cudaGetErrorString(e_));                                        \
      MPI_Abort(MPI_COMM_WORLD, 1);                                          \
    }                                                                        \
  } while (0)

#endif
