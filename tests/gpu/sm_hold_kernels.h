/* C interface of tests/gpu/sm_hold_kernels.cu. */
#ifndef MKX_TESTS_SM_HOLD_KERNELS_H
#define MKX_TESTS_SM_HOLD_KERNELS_H

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sm_hold_args {
  int *arrived;    /* ranks ints, zeroed, mapped by every rank */
  int rank, ranks; /* this rank's index among the GPU's ranks */
  int grid;        /* CTAs, one per SM (smem makes sure) */
  size_t smem;     /* dynamic shared memory per CTA */
  int *sm_of_cta;  /* grid ints: the SM each CTA ran on */
  int *timed_out;  /* set to 1 where a CTA gave up */
  uint64_t bound_ns;
} sm_hold_args;

/* 0, or a cudaError_t. */
int sm_hold_launch(const sm_hold_args *a, cudaStream_t st);
/* An empty kernel, launched once on `st`: its first launch loads it. */
int sm_idle_launch(cudaStream_t st);
/* One CTA spinning for ns nanoseconds on `st`. */
int sm_spin_launch(uint64_t ns, cudaStream_t st);

#ifdef __cplusplus
}
#endif
#endif
