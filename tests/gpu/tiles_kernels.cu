/* A user's kernels on a tile set, written from include/mkx_tiles.cuh
 * alone (tests/gpu/tiles_kernels.h). */
#include "tiles_kernels.h"
#include "mkx_tiles.cuh"

namespace {

__global__ void produce(MKX_Tiles_dev t, int to, int64_t r0, int64_t r1, int kr,
                        int kc, int salt) {
  const int64_t row0 = r0 + (int64_t)blockIdx.y * kr,
                col0 = (int64_t)blockIdx.x * kc;
  const int64_t nr = row0 + kr < r1 ? kr : r1 - row0,
                nc = col0 + kc < t.cols ? kc : t.cols - col0;
  const int e = mkx_tiles_epoch(t) + salt;
  for (int64_t k = threadIdx.x; k < nr * nc; k += blockDim.x) {
    const int64_t r = row0 + k / nc, c = col0 + k % nc;
    *mkx_tiles_elem<float>(t, to, r, c) = tk_value(e, r, c);
  }
  mkx_tiles_block_signal(t, to, row0, nr, col0, nc);
}

__global__ void consume(MKX_Tiles_dev t, int kr, int kc, float *out,
                        int *failed) {
  int64_t row0, nr, col0, nc;
  mkx_tiles_kernel_rect(t, kr, kc, blockIdx.y, blockIdx.x, &row0, &nr, &col0,
                        &nc);
  const int me = t.comm_rank[t.rank];
  if (!mkx_tiles_block_wait(t, me, row0, nr, col0, nc)) {
    if (threadIdx.x == 0) *failed = 1;
    return;
  }
  for (int64_t k = threadIdx.x; k < nr * nc; k += blockDim.x) {
    const int64_t r = row0 + k / nc, c = col0 + k % nc;
    out[r * t.cols + c] = *mkx_tiles_elem<float>(t, me, r, c);
  }
}

__global__ void signal_one(MKX_Tiles_dev t, int to, int64_t row0, int64_t nrows,
                           int64_t col0, int64_t ncols) {
  mkx_tiles_signal(t, to, row0, nrows, col0, ncols);
}

int rc() { return (int)cudaGetLastError(); }

}  // namespace

extern "C" int tk_produce(const MKX_Tiles_dev *t, int to, int64_t r0,
                          int64_t r1, int kr, int kc, int salt,
                          cudaStream_t st) {
  if (r1 <= r0) return 0;
  const dim3 grid((unsigned)((t->cols + kc - 1) / kc),
                  (unsigned)((r1 - r0 + kr - 1) / kr));
  produce<<<grid, 128, 0, st>>>(*t, to, r0, r1, kr, kc, salt);
  return rc();
}

extern "C" int tk_consume(const MKX_Tiles_dev *t, int kr, int kc, float *out,
                          int *failed, cudaStream_t st) {
  const dim3 grid((unsigned)((t->cols + kc - 1) / kc),
                  (unsigned)((t->rows + kr - 1) / kr));
  consume<<<grid, 128, 0, st>>>(*t, kr, kc, out, failed);
  return rc();
}

extern "C" int tk_signal(const MKX_Tiles_dev *t, int to, int64_t row0,
                         int64_t nrows, int64_t col0, int64_t ncols,
                         cudaStream_t st) {
  signal_one<<<1, 1, 0, st>>>(*t, to, row0, nrows, col0, ncols);
  return rc();
}
