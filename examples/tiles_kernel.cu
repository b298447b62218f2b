/*
 * The user's kernel of examples/tiles_kernel_host.c: a plain tiled GEMM whose
 * blocks each signal the output tile they wrote (include/mkx_tiles.cuh),
 * so that MKX's ReduceScatter can sum that tile over the ranks while the
 * kernel still computes the others.  Compiled by nvcc; no MPI here.
 */
#include "mkx_tiles.cuh"
#include "tiles_kernel.h"

namespace {

constexpr int T = 32; /* the kernel's tile: T x T outputs per block */

/* P = A x B into this rank's copy of the set (rows x cols), fp32. */
__global__ void partial_gemm(MKX_Tiles_dev t, const float *A, const float *B,
                             int64_t k) {
  __shared__ float as[T][T + 1], bs[T][T + 1];
  int64_t row0, nrows, col0, ncols;
  mkx_tiles_kernel_rect(t, T, T, blockIdx.y, blockIdx.x, &row0, &nrows, &col0,
                        &ncols);
  const int ty = threadIdx.y, tx = threadIdx.x;
  const int64_t r = row0 + ty, c = col0 + tx;
  float acc = 0.f;
  for (int64_t k0 = 0; k0 < k; k0 += T) {
    as[ty][tx] = r < t.rows && k0 + tx < k ? A[r * k + k0 + tx] : 0.f;
    bs[ty][tx] = k0 + ty < k && c < t.cols ? B[(k0 + ty) * t.cols + c] : 0.f;
    __syncthreads();
    for (int i = 0; i < T; ++i) acc += as[ty][i] * bs[i][tx];
    __syncthreads();
  }
  const int me = t.comm_rank[t.rank];
  if (ty < nrows && tx < ncols) *mkx_tiles_elem<float>(t, me, r, c) = acc;
  /* every thread's store, then one signal of the whole kernel tile */
  mkx_tiles_block_signal(t, me, row0, nrows, col0, ncols);
}

}  // namespace

extern "C" int tiles_partial_gemm(const MKX_Tiles_dev *t, const float *A,
                                  const float *B, int64_t k, cudaStream_t st) {
  const dim3 grid((unsigned)((t->cols + T - 1) / T),
                  (unsigned)((t->rows + T - 1) / T));
  partial_gemm<<<grid, dim3(T, T), 0, st>>>(*t, A, B, k);
  return (int)cudaGetLastError();
}
