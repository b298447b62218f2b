/*
 * MKX_Allgather_tiles by an SM kernel (tiles/tiles.h): for small blocks of
 * rows the copy engines' fixed cost per copy outweighs the copy, and a few
 * CTAs storing straight into the peers' copies (mapped into this GPU) are
 * done first.  Each CTA takes chunks of whole data-tile rows for one
 * destination at a time, this rank's own copy first, and signals each
 * chunk there once the block has stored it (include/mkx_tiles.cuh).
 */
#include "tiles/tiles.h"
#include "mkx_tiles.cuh"
#include "common/modules.cuh"

namespace {

/* n segments of `bytes` each, src + i * sp to dst + i * dp, by the block:
 * 16 bytes at a time where every address allows, else byte by byte. */
__device__ void copy_segments(char *dst, int64_t dp, const char *src, int64_t sp, int64_t n, int64_t bytes) {
  const bool wide = !((uintptr_t)dst % 16 || (uintptr_t)src % 16 || dp % 16 || sp % 16 || bytes % 16);
  if (wide) {
    const int64_t per = bytes / 16;
    for (int64_t k = threadIdx.x; k < n * per; k += blockDim.x) {
      const int64_t i = k / per, j = k % per;
      reinterpret_cast<uint4 *>(dst + i * dp)[j] = reinterpret_cast<const uint4 *>(src + i * sp)[j];
    }
  } else {
    for (int64_t k = threadIdx.x; k < n * bytes; k += blockDim.x) {
      const int64_t i = k / bytes, j = k % bytes;
      dst[i * dp + j] = src[i * sp + j];
    }
  }
}

__global__ void ag_sm_kernel(MKX_Tiles_dev t, const char *send, int64_t ld_send, int64_t r0, int64_t nr) {
  const int64_t c0 = r0 / t.tile_rows, chunks = (r0 + nr - 1) / t.tile_rows + 1 - c0;
  const int64_t es = t.elem_size;
  for (int64_t w = blockIdx.x; w < chunks * t.size; w += gridDim.x) {
    const int q = (t.rank + (int)(w / chunks)) % t.size; /* own copy first */
    const int64_t c = c0 + w % chunks;
    const int64_t lo = c * t.tile_rows > r0 ? c * t.tile_rows : r0;
    const int64_t hi = (c + 1) * t.tile_rows < r0 + nr ? (c + 1) * t.tile_rows : r0 + nr;
    if (t.col_major)
      copy_segments(t.data[q] + lo * es, t.ld[q] * es, send + (lo - r0) * es, ld_send * es, t.cols, (hi - lo) * es);
    else
      copy_segments(t.data[q] + lo * t.ld[q] * es, t.ld[q] * es, send + (lo - r0) * ld_send * es, ld_send * es, hi - lo,
                    t.cols * es);
    mkx_tiles_block_signal(t, t.comm_rank[q], lo, hi - lo, 0, t.cols);
  }
}

}  // namespace

extern "C" int mkx_tiles_ag_sm_launch(const MKX_Tiles_dev *t, const void *send, int64_t ld_send, int64_t r0, int64_t nr,
                                      int ctas, cudaStream_t st) {
  if (!t || nr < 1 || r0 < 0 || r0 + nr > t->rows || ctas < 1) return (int)cudaErrorInvalidValue;
  ag_sm_kernel<<<ctas, 256, 0, st>>>(*t, (const char *)send, ld_send, r0, nr);
  return (int)cudaGetLastError();
}
