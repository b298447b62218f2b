/* What the single-process GPU engine tests share on top of check.h: the
 * case under way (g_case, named by every failure that ends the run), a
 * CUDA() that turns a failing CUDA call into a failed check and the end of
 * the test (what the GPU holds after it is unknown), and host and device
 * allocations that do the same.  The including test defines
 * engine_finish(): its closing lines and check_done()'s status. */
#ifndef MKX_TESTS_ENGINE_CHECK_H
#define MKX_TESTS_ENGINE_CHECK_H

#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "check.h"

static char g_case[256] = "setup";
static int engine_finish(void);

#define CUDA(x)                                                                \
  do {                                                                         \
    const cudaError_t e_ = (x);                                                \
    if (e_ != cudaSuccess) {                                                   \
      CHECK(0, "%s: %s: %s", g_case, #x, cudaGetErrorString(e_));              \
      exit(engine_finish());                                                   \
    }                                                                          \
  } while (0)

/* Host memory, or the end of the test as for a failing CUDA call. */
static inline void *host_alloc(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  if (!p) {
    CHECK(0, "%s: %zu bytes of host memory", g_case, bytes);
    exit(engine_finish());
  }
  return p;
}
static inline void *host_zeroed(size_t n, size_t size) {
  void *p = host_alloc(n * size);
  memset(p, 0, n * size);
  return p;
}

/* A device copy of bytes of host memory h (16 bytes when bytes is 0, so
 * that every buffer has an address). */
static inline void *upload(const void *h, size_t bytes) {
  void *d = NULL;
  CUDA(cudaMalloc(&d, bytes ? bytes : 16));
  if (bytes) CUDA(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
  return d;
}

/* The run's seed (--seed N, else the clock), and 0 where the first GPU is
 * an sm_90 one; else "SKIP name: no sm_90 GPU" said and 77, the exit
 * status of a skipped test. */
static inline int engine_start(const char *name, int argc, char **argv,
                               uint64_t *seed) {
  *seed = (uint64_t)time(NULL);
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--seed") && i + 1 < argc)
      *seed = strtoull(argv[++i], NULL, 10);
  int ndev = 0, major = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1 ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) !=
          cudaSuccess ||
      major != 9) {
    printf("SKIP %s: no sm_90 GPU\n", name);
    return 77;
  }
  printf("# %s seed %llu\n", name, (unsigned long long)*seed);
  return 0;
}

#endif
