/*
 * Out-of-place transpose for the fused paths' column-major operands
 * (src/ops/fused/adapter.c): dst (cols x rows, leading dimension ldd) =
 * src^T (rows x cols, leading dimension lds), both row-major, elements of
 * 2 or 4 bytes.  32 x 32 tiles through shared memory so that both the
 * reads and the writes are coalesced.
 */
#include <stdint.h>
#include "gemm/gemm_engine.h"
#include "tp/tp.h"
#include "common/modules.cuh"

namespace {

constexpr int kTile = 32, kRowsPerPass = 8;

template <typename T>
__global__ void __launch_bounds__(kTile *kRowsPerPass)
    transpose_kernel(const T *__restrict__ src, int64_t rows, int64_t cols, int64_t lds, T *__restrict__ dst,
                     int64_t ldd) {
  __shared__ T tile[kTile][kTile + 1];  // +1: no bank conflicts on the transposed read
  const int64_t c0 = (int64_t)blockIdx.x * kTile;
  for (int64_t r0 = (int64_t)blockIdx.y * kTile; r0 < rows; r0 += (int64_t)gridDim.y * kTile) {
    for (int i = threadIdx.y; i < kTile; i += kRowsPerPass) {
      const int64_t r = r0 + i, c = c0 + threadIdx.x;
      if (r < rows && c < cols) tile[i][threadIdx.x] = src[r * lds + c];
    }
    __syncthreads();
    for (int i = threadIdx.y; i < kTile; i += kRowsPerPass) {
      const int64_t c = c0 + i, r = r0 + threadIdx.x;
      if (r < rows && c < cols) dst[c * ldd + r] = tile[threadIdx.x][i];
    }
    __syncthreads();
  }
}

}  // namespace

extern "C" int mkx_tp_transpose(const void *src, int64_t rows, int64_t cols, int64_t lds, void *dst, int64_t ldd,
                                int esz, cudaStream_t st) {
  if (rows <= 0 || cols <= 0) return 0;
  const int64_t gx = (cols + kTile - 1) / kTile, gy = (rows + kTile - 1) / kTile;
  if (gx > 2147483647ll || lds < cols || ldd < rows) return MKX_GEMM_EINVAL;
  const dim3 grid((unsigned)gx, (unsigned)(gy < 65535 ? gy : 65535)), block(kTile, kRowsPerPass);
  if (esz == 2)
    transpose_kernel<uint16_t><<<grid, block, 0, st>>>(static_cast<const uint16_t *>(src), rows, cols, lds,
                                                       static_cast<uint16_t *>(dst), ldd);
  else if (esz == 4)
    transpose_kernel<uint32_t><<<grid, block, 0, st>>>(static_cast<const uint32_t *>(src), rows, cols, lds,
                                                       static_cast<uint32_t *>(dst), ldd);
  else
    return MKX_GEMM_EINVAL;
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? 0 : (int)e;
}
