/*
 * A tile set's stream-side kernels (tiles/tiles.h), on the device
 * functions users' kernels take part with (include/mkx_tiles.cuh), so that
 * MKX and its users follow one protocol.
 */
#include "tiles/tiles.h"
#include "mkx_tiles.cuh"
#include "common/modules.cuh"

namespace {

namespace d = mkx_tiles_detail;

__global__ void tiles_begin_kernel(MKX_Tiles_dev t) {
  __shared__ int e;
  if (threadIdx.x == 0) {
    int *ep = d::word(t, t.rank, MKX_TILES_OFF_EPOCH);
    e = *ep + 1;
    *ep = e;
    /* this stream's earlier work on the tiles is visible to the peers
     * before they can see this rank's arrival */
    __threadfence_system();
    for (int q = 0; q < t.size; ++q) d::st_release_s32(d::word(t, q, MKX_TILES_OFF_BAR) + t.rank, e);
  }
  __syncthreads();
  if ((int)threadIdx.x < t.size) {
    const int *bar = d::word(t, t.rank, MKX_TILES_OFF_BAR) + threadIdx.x;
    /* epochs never differ by 2^31: compare wrap-safe */
    d::wait_for(
        t, [&] { return (int)((unsigned)d::ld_acquire_s32(bar) - (unsigned)e) >= 0; }, threadIdx.x, -1, -1,
        MKX_TILES_AT_BEGIN);
  }
}

__global__ void tiles_wait_kernel(MKX_Tiles_dev t, int q, int64_t row0, int64_t nrows, int64_t col0, int64_t ncols) {
  d::wait_tiles(t, q, row0, nrows, col0, ncols, MKX_TILES_AT_STREAM, threadIdx.x, blockDim.x);
}

__global__ void tiles_signal_kernel(MKX_Tiles_dev t, int rank, int64_t row0, int64_t nrows, int64_t col0,
                                    int64_t ncols) {
  mkx_tiles_signal(t, rank, row0, nrows, col0, ncols);
}

int last_error() {
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? 0 : (int)e;
}

bool bad(const MKX_Tiles_dev *t, int q) {
  return !t || t->size < 1 || t->size > MKX_TILES_MAX_RANKS || q < 0 || q >= t->size;
}

}  // namespace

extern "C" int mkx_tiles_begin_launch(const MKX_Tiles_dev *t, cudaStream_t st) {
  if (bad(t, 0)) return (int)cudaErrorInvalidValue;
  tiles_begin_kernel<<<1, 32, 0, st>>>(*t);
  return last_error();
}

extern "C" int mkx_tiles_wait_launch(const MKX_Tiles_dev *t, int q, int64_t row0, int64_t nrows, int64_t col0,
                                     int64_t ncols, cudaStream_t st) {
  if (bad(t, q) || !d::rect_ok(*t, row0, nrows, col0, ncols)) return (int)cudaErrorInvalidValue;
  tiles_wait_kernel<<<1, 32, 0, st>>>(*t, q, row0, nrows, col0, ncols);
  return last_error();
}

extern "C" int mkx_tiles_signal_launch(const MKX_Tiles_dev *t, int q, int64_t row0, int64_t nrows, int64_t col0,
                                       int64_t ncols, cudaStream_t st) {
  if (bad(t, q) || !d::rect_ok(*t, row0, nrows, col0, ncols)) return (int)cudaErrorInvalidValue;
  tiles_signal_kernel<<<1, 1, 0, st>>>(*t, t->comm_rank[q], row0, nrows, col0, ncols);
  return last_error();
}
