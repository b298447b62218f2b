/*
 * AllGather feeding cuBLAS tile by tile, with MKX's data tiles, checking
 * its own result against MKX's fused call.
 *
 * Each of p ranks (one node) holds m rows of A (bf16, m x k) and its own
 * B (k x n).  Per iteration:
 *     MKX_Tiles_begin        a new epoch on every rank
 *     MKX_Allgather_tiles    every rank's rows into every rank's copy of
 *                            the gathered A, each chunk of rows signalled
 *                            as it lands
 *     MKX_Tiles_gemm         cuBLAS on chunks of rows of the gathered A,
 *                            each chunk started once its rows are there
 * so C = AllGather(A) x B, the product MKX_Allgather_gemm computes in one
 * fused call; the two are compared (both bf16 in, fp32 out).
 *
 * usage: tiles_cublas [-m rows_per_rank] [-k k] [-n n] [-i iterations]
 * Needs a GPU per rank (a shared one under MPS works); exits 77 without.
 */
#define _POSIX_C_SOURCE 200809L /* getopt */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "mkx.h"
#include "mkx_tiles.h"

#define CHECK(call)                                                            \
  do {                                                                         \
    int rc_ = (call);                                                          \
    if (rc_ != MKX_SUCCESS) {                                                  \
      fprintf(stderr, "rank %d: %s: %s (%s)\n", rank, #call,                   \
              MKX_Error_string(rc_), MKX_Get_last_error());                    \
      MPI_Abort(MPI_COMM_WORLD, 1);                                            \
    }                                                                          \
  } while (0)
#define CUDA(call)                                                             \
  do {                                                                         \
    cudaError_t e_ = (call);                                                   \
    if (e_ != cudaSuccess) {                                                   \
      fprintf(stderr, "rank %d: %s: %s\n", rank, #call,                        \
              cudaGetErrorString(e_));                                         \
      MPI_Abort(MPI_COMM_WORLD, 1);                                            \
    }                                                                          \
  } while (0)

static int rank;

static uint16_t to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  u += 0x7fff + ((u >> 16) & 1);
  return (uint16_t)(u >> 16);
}

/* A random bf16 matrix of `count` elements on the GPU. */
static void *random_bf16(size_t count, unsigned seed) {
  uint16_t *h = malloc(count * 2);
  void *d;
  for (size_t i = 0; i < count; i++) {
    seed = seed * 1664525u + 1013904223u;
    h[i] = to_bf16((float)(seed >> 8) / (float)(1u << 24) * 2.0f - 1.0f);
  }
  CUDA(cudaMalloc(&d, count * 2));
  CUDA(cudaMemcpy(d, h, count * 2, cudaMemcpyHostToDevice));
  free(h);
  return d;
}

int main(int argc, char **argv) {
  long m = 512, k = 1024, n = 768, iters = 3;
  int opt, size, ndev = 0;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  while ((opt = getopt(argc, argv, "m:k:n:i:")) != -1) {
    long v = atol(optarg);
    if (v < 1) {
      fprintf(stderr, "tiles_cublas: -%c takes a positive number\n", opt);
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
    if (opt == 'm') m = v;
    if (opt == 'k') k = v;
    if (opt == 'n') n = v;
    if (opt == 'i') iters = v;
  }
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    if (rank == 0) printf("tiles_cublas: no GPU, skipped\n");
    MPI_Finalize();
    return 77;
  }
  MKX_Comm comm;
  CHECK(MKX_Comm_create(MPI_COMM_WORLD, MPI_INFO_NULL, &comm));
  const long M = m * size;
  void *a = random_bf16((size_t)(m * k), 17u + (unsigned)rank);
  void *b = random_bf16((size_t)(k * n), 91u + (unsigned)rank);
  void *gathered, *c_tiles, *c_fused;
  CUDA(cudaMalloc(&gathered, (size_t)(M * k) * 2));
  CUDA(cudaMalloc(&c_tiles, (size_t)(M * n) * 4));
  CUDA(cudaMalloc(&c_fused, (size_t)(M * n) * 4));
  cudaStream_t st;
  CUDA(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));

  /* the gathered A in data tiles of 128 rows (whole rows: a GEMM chunk
   * reads every column) */
  MKX_Tiles at;
  CHECK(MKX_Tiles_create(gathered, M, k, k, 128, k, MKX_BF16, MKX_ROW_MAJOR,
                         comm, &at));
  for (long it = 0; it < iters; it++) {
    CHECK(MKX_Tiles_begin(at, st));
    CHECK(MKX_Allgather_tiles(a, k, at, st));
    CHECK(MKX_Tiles_gemm(at, rank, b, n, n, MKX_NO_TRANS, c_tiles, n, MKX_FP32,
                         NULL, 256, st));
  }
  CHECK(MKX_Allgather_gemm(a, m, k, k, b, n, n, MKX_NO_TRANS, c_fused, n, NULL,
                           k, MKX_BF16, MKX_FP32, MKX_ROW_MAJOR, comm, st));
  CUDA(cudaStreamSynchronize(st));
  int async = MKX_SUCCESS;
  CHECK(MKX_Tiles_get_async_error(at, &async));
  CHECK(async);

  float *h1 = malloc((size_t)(M * n) * 4), *h2 = malloc((size_t)(M * n) * 4);
  CUDA(cudaMemcpy(h1, c_tiles, (size_t)(M * n) * 4, cudaMemcpyDeviceToHost));
  CUDA(cudaMemcpy(h2, c_fused, (size_t)(M * n) * 4, cudaMemcpyDeviceToHost));
  double worst = 0;
  for (long i = 0; i < M * n; i++) {
    const double d = fabs((double)h1[i] - h2[i]) / (1.0 + fabs(h2[i]));
    if (!(d <= worst)) worst = d; /* NaN counts as the worst */
  }
  const int ok = worst < 1e-3;
  int all = 0;
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  printf(
      "rank %d: C = AllGather(A) x B through tiles and cuBLAS, %ld x %ld x "
      "%ld: largest difference to MKX_Allgather_gemm %.2e: %s\n",
      rank, M, n, k, worst, ok ? "ok" : "WRONG");
  CHECK(MKX_Tiles_free(&at));
  CHECK(MKX_Comm_free(&comm));
  free(h1), free(h2);
  cudaFree(a), cudaFree(b), cudaFree(gathered), cudaFree(c_tiles);
  cudaFree(c_fused), cudaStreamDestroy(st);
  MPI_Finalize();
  return all ? 0 : 1;
}
