/* Block-wide exclusive scan of one int per thread (the MoE kernels'
 * offsets and tile prefixes). */
#pragma once

namespace mkx {
namespace moe {

/* Every thread of a THREADS-thread block calls it (THREADS a multiple of
 * 32, at most 1024): returns the sum of v over the threads before this
 * one; total gets the sum over the block.  Deterministic. */
template <int THREADS>
__device__ __forceinline__ int block_exclusive_scan(int v, int &total) {
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "block size");
  constexpr int WARPS = THREADS / 32;
  __shared__ int warp_sum[WARPS];
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  int x = v;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const int y = __shfl_up_sync(0xffffffffu, x, d);
    if (lane >= d) x += y;
  }
  if (lane == 31) warp_sum[w] = x;
  __syncthreads();
  if (w == 0) {
    int s = lane < WARPS ? warp_sum[lane] : 0;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, s, d);
      if (lane >= d) s += y;
    }
    if (lane < WARPS) warp_sum[lane] = s;
  }
  __syncthreads();
  const int incl = x + (w ? warp_sum[w - 1] : 0);
  total = warp_sum[WARPS - 1];
  __syncthreads();  // warp_sum is reused by the next call
  return incl - v;
}

}  // namespace moe
}  // namespace mkx
