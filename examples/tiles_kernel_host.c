/*
 * A user's kernel feeding MKX's ReduceScatter tile by tile, with MKX's
 * data tiles, checking its own result.
 *
 * Each of p ranks (one node) computes a partial product P_r = A_r x B_r
 * (M x N, fp32) with its own kernel (examples/tiles_kernel.cu), whose
 * blocks each signal the output tile they wrote.  On another stream
 * MKX_Reduce_scatter_tiles sums each data tile of this rank's block of
 * rows over the ranks as soon as every rank has signalled it, so the
 * reduction runs while the kernels still compute:
 *     Y_r = rows r of sum_q A_q x B_q
 * Each rank checks its rows against the host (the inputs are small
 * integers, so the sums are exact).
 *
 * usage: tiles_kernel [-m rows] [-n cols] [-k k] [-i iterations]
 * Needs a GPU per rank (a shared one under MPS works); exits 77 without.
 */
#define _POSIX_C_SOURCE 200809L /* getopt */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "mkx.h"
#include "mkx_tiles.h"
#include "tiles_kernel.h"

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

/* Element (i, j) of rank q's A or B (which 0 or 1): small integers. */
static float value(int which, int q, long i, long j) {
  return (float)((i * 5 + j * 3 + q * 7 + which * 11) % 7 - 3);
}

static float *upload(int which, int q, long rows, long cols) {
  float *h = malloc(sizeof(float) * (size_t)(rows * cols)), *d;
  for (long i = 0; i < rows; i++)
    for (long j = 0; j < cols; j++) h[i * cols + j] = value(which, q, i, j);
  CUDA(cudaMalloc((void **)&d, sizeof(float) * (size_t)(rows * cols)));
  CUDA(cudaMemcpy(d, h, sizeof(float) * (size_t)(rows * cols),
                  cudaMemcpyHostToDevice));
  free(h);
  return d;
}

int main(int argc, char **argv) {
  long M = 1000, N = 300, K = 96, iters = 3;
  int opt, size, ndev = 0;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  while ((opt = getopt(argc, argv, "m:n:k:i:")) != -1) {
    long v = atol(optarg);
    if (v < 1) {
      fprintf(stderr, "tiles_kernel: -%c takes a positive number\n", opt);
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
    if (opt == 'm') M = v;
    if (opt == 'n') N = v;
    if (opt == 'k') K = v;
    if (opt == 'i') iters = v;
  }
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    if (rank == 0) printf("tiles_kernel: no GPU, skipped\n");
    MPI_Finalize();
    return 77;
  }
  MKX_Comm comm;
  CHECK(MKX_Comm_create(MPI_COMM_WORLD, MPI_INFO_NULL, &comm));
  int64_t first, count;
  CHECK(MKX_Block_range(M, size, rank, &first, &count));
  float *a = upload(0, rank, M, K), *b = upload(1, rank, K, N), *partial, *y;
  CUDA(cudaMalloc((void **)&partial, sizeof(float) * (size_t)(M * N)));
  CUDA(cudaMalloc((void **)&y, sizeof(float) * (size_t)(count * N) + 4));
  cudaStream_t compute, comm_st;
  cudaEvent_t began, done;
  CUDA(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  CUDA(cudaStreamCreateWithFlags(&comm_st, cudaStreamNonBlocking));
  CUDA(cudaEventCreateWithFlags(&began, cudaEventDisableTiming));
  CUDA(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));

  /* the partials in data tiles of 64 x 128: the kernel's 32 x 32 tiles
   * complete them four and eight at a time */
  MKX_Tiles pt;
  MKX_Tiles_dev dev;
  CHECK(MKX_Tiles_create(partial, M, N, N, 64, 128, MKX_FP32, MKX_ROW_MAJOR,
                         comm, &pt));
  CHECK(MKX_Tiles_device(pt, &dev));
  for (long it = 0; it < iters; it++) {
    CHECK(MKX_Tiles_begin(pt, comm_st));
    CUDA(cudaEventRecord(began, comm_st));
    CUDA(cudaStreamWaitEvent(compute, began, 0));
    /* the producer before its consumer, the reduction on a stream of its
     * own, taking each tile as the ranks' kernels signal it.  Launched the
     * other way round, the first launch of the user's kernel would have to
     * load its module while the reduction spins (CUDA's lazy loading),
     * and waits for it (docs/tiles.md) */
    CUDA((cudaError_t)tiles_partial_gemm(&dev, a, b, K, compute));
    CHECK(MKX_Reduce_scatter_tiles(pt, y, N, comm_st));
    /* the next epoch's kernel may overwrite the partials only after the
     * reduction has read them (the next begin is on comm_st) */
    CUDA(cudaEventRecord(done, compute));
    CUDA(cudaStreamWaitEvent(comm_st, done, 0));
  }
  CUDA(cudaStreamSynchronize(comm_st));
  int async = MKX_SUCCESS;
  CHECK(MKX_Tiles_get_async_error(pt, &async));
  CHECK(async);

  float *h = malloc(sizeof(float) * (size_t)(count * N) + 4);
  CUDA(cudaMemcpy(h, y, sizeof(float) * (size_t)(count * N),
                  cudaMemcpyDeviceToHost));
  long bad = 0;
  for (long i = first; i < first + count; i++)
    for (long j = 0; j < N; j++) {
      double want = 0;
      for (int q = 0; q < size; q++)
        for (long x = 0; x < K; x++)
          want += (double)value(0, q, i, x) * value(1, q, x, j);
      bad += h[(i - first) * N + j] != (float)want;
    }
  int all = 0, ok = bad == 0;
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  printf(
      "rank %d: rows %ld..%ld of sum_q A_q x B_q (%ld x %ld x %ld, %d "
      "ranks) through a user's kernel's tiles and MKX_Reduce_scatter_tiles: "
      "%ld wrong: %s\n",
      rank, (long)first, (long)(first + count), M, N, K, size, bad,
      ok ? "ok" : "WRONG");
  CHECK(MKX_Tiles_free(&pt));
  CHECK(MKX_Comm_free(&comm));
  free(h);
  cudaFree(a), cudaFree(b), cudaFree(partial), cudaFree(y);
  cudaStreamDestroy(compute), cudaStreamDestroy(comm_st);
  cudaEventDestroy(began), cudaEventDestroy(done);
  MPI_Finalize();
  return all ? 0 : 1;
}
