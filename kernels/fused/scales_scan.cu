/*
 * fp8 scales checked on the GPU (fused/fused.h: mkx_fused_scales_scan).
 * Every scale is read, whatever it holds, so the scan is a stream over the
 * arrays: many blocks and several loads in flight per thread, since at the
 * MoE calls' shapes the weights' block scales alone are megabytes.
 */
#include <float.h>
#include "fused/fused.h"
#include "common/modules.cuh"

namespace {

constexpr int kThreads = 256, kUnroll = 4;

/* Block (b, a): indices b * kThreads + t + j * stride of array a. */
__global__ void __launch_bounds__(kThreads) scales_scan_kernel(const __grid_constant__ mkx_fused_scan_desc d) {
  const int a = blockIdx.y;
  const float *p = d.p[a];
  const long long n = d.n[a], stride = (long long)MKX_FUSED_SCAN_BLOCKS * kThreads;
  __shared__ unsigned long long first;
  if (threadIdx.x == 0) first = ~0ull;
  __syncthreads();
  long long mine = -1;
  for (long long i = (long long)blockIdx.x * kThreads + threadIdx.x; mine < 0 && i < n; i += kUnroll * stride) {
    float v[kUnroll];
#pragma unroll
    for (int j = 0; j < kUnroll; ++j) v[j] = i + j * stride < n ? __ldg(p + i + j * stride) : 1.0f;
#pragma unroll
    for (int j = 0; j < kUnroll; ++j)
      if (mine < 0 && !(v[j] > 0.0f && v[j] <= FLT_MAX)) mine = i + j * stride;  // NaN fails both
  }
  if (mine >= 0) atomicMin(&first, (unsigned long long)mine);
  __syncthreads();
  if (threadIdx.x == 0) {
    volatile long long *out = d.first + a * MKX_FUSED_SCAN_BLOCKS + blockIdx.x;
    *out = first == ~0ull ? -1 : (long long)first;
  }
}

}  // namespace

extern "C" int mkx_fused_scales_scan(const mkx_fused_scan_desc *d, cudaStream_t st) {
  if (!d || d->count < 1 || d->count > MKX_FUSED_SCAN_MAX || !d->first) return (int)cudaErrorInvalidValue;
  for (int a = 0; a < d->count; ++a)
    if (d->n[a] < 0 || (d->n[a] > 0 && !d->p[a])) return (int)cudaErrorInvalidValue;
  scales_scan_kernel<<<dim3(MKX_FUSED_SCAN_BLOCKS, d->count), kThreads, 0, st>>>(*d);
  return (int)cudaGetLastError();
}
