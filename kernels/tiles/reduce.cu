/*
 * ReduceScatter and AllReduce of a tile set (tiles/tiles.h): each data
 * tile of this rank's block of rows is summed over the node ranks' copies
 * as soon as every copy of it is complete, written to this rank's output
 * (and, for AllReduce, into every rank's copy of the output set, signalled
 * there).  Written on the device functions users' kernels use
 * (include/mkx_tiles.cuh).  A few persistent CTAs take the tiles in turn,
 * so that waiting CTAs never hold the SMs of the kernels that produce.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include "tiles/tiles.h"
#include "mkx_tiles.cuh"
#include "common/modules.cuh"

namespace {

/* Rows [r0, r1) of the sum of the copies of `in`: into recv (this rank's
 * block, leading dimension ld_recv; NULL: none) and, if has_out, into
 * every node rank's copy of `out`, each tile signalled there. */
template <typename T>
__global__ void reduce_kernel(MKX_Tiles_dev in, int64_t r0, int64_t r1, T *recv, int64_t ld_recv, MKX_Tiles_dev out,
                              int has_out) {
  const int64_t i0 = r0 / in.tile_rows, i1 = (r1 - 1) / in.tile_rows + 1;
  const int64_t n = (i1 - i0) * in.tiles_c;
  for (int64_t k = blockIdx.x; k < n; k += gridDim.x) {
    const int64_t i = i0 + k / in.tiles_c, j = k % in.tiles_c;
    const int64_t lo = i * in.tile_rows > r0 ? i * in.tile_rows : r0;
    const int64_t hi = (i + 1) * in.tile_rows < r1 ? (i + 1) * in.tile_rows : r1;
    const int64_t c0 = j * in.tile_cols, c1 = c0 + in.tile_cols < in.cols ? c0 + in.tile_cols : in.cols;
    bool ok = true;
    for (int q = 0; q < in.size && ok; ++q) ok = mkx_tiles_block_wait(in, in.comm_rank[q], lo, hi - lo, c0, c1 - c0);
    if (!ok) return; /* recorded for the host; the outputs are void */
    const int64_t w = c1 - c0, cells = (hi - lo) * w;
    for (int64_t e = threadIdx.x; e < cells; e += blockDim.x) {
      const int64_t r = lo + e / w, c = c0 + e % w;
      float acc = 0.f;
      for (int q = 0; q < in.size; ++q) acc += static_cast<float>(*mkx_tiles_elem<T>(in, in.comm_rank[q], r, c));
      const T v = T(acc); /* bf16, fp16: rounded to nearest */
      if (recv) recv[in.col_major ? (r - r0) + c * ld_recv : (r - r0) * ld_recv + c] = v;
      if (has_out)
        for (int p = 0; p < out.size; ++p) *mkx_tiles_elem<T>(out, out.comm_rank[p], r, c) = v;
    }
    if (has_out)
      for (int p = 0; p < out.size; ++p) mkx_tiles_block_signal(out, out.comm_rank[p], lo, hi - lo, c0, w);
    else
      __syncthreads(); /* the block's reads of this tile before the next */
  }
}

template <typename T>
int launch(const MKX_Tiles_dev *in, int64_t r0, int64_t r1, void *recv, int64_t ld_recv, const MKX_Tiles_dev *out,
           int ctas, cudaStream_t st) {
  MKX_Tiles_dev none = {};
  reduce_kernel<T><<<ctas, 256, 0, st>>>(*in, r0, r1, (T *)recv, ld_recv, out ? *out : none, out != nullptr);
  return (int)cudaGetLastError();
}

}  // namespace

extern "C" int mkx_tiles_reduce_launch(const MKX_Tiles_dev *in, int dtype, int64_t r0, int64_t r1, void *recv,
                                       int64_t ld_recv, const MKX_Tiles_dev *out, int ctas, cudaStream_t st) {
  if (!in || r1 <= r0 || r0 < 0 || r1 > in->rows || ctas < 1) return (int)cudaErrorInvalidValue;
  switch (dtype) {
    case 1:
      return launch<__nv_bfloat16>(in, r0, r1, recv, ld_recv, out, ctas, st);
    case 2:
      return launch<__half>(in, r0, r1, recv, ld_recv, out, ctas, st);
    case 3:
      return launch<float>(in, r0, r1, recv, ld_recv, out, ctas, st);
  }
  return (int)cudaErrorInvalidValue;
}
