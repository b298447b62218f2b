/*
 * MKX: 16-bit rows rounded to fp8 with a scale per row and 128 columns
 * (mkx_moe_quant_run, moe_engine.h): the fp8 layer's SwiGLU activation
 * becomes the second grouped GEMM's fp8 operand.  One warp per group of
 * 128 columns of a row: its largest magnitude, the scale that maps it to
 * the fp8 type's largest finite value, the group divided by the scale and
 * rounded to nearest (saturating).  The rows in use end at a count in
 * device memory (the routing's total), never read by the host.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "common/modules.cuh"
#include "gemm/gemm_engine.h"
#include "gemm/tmap.cuh"
#include "moe/moe_engine.h"

namespace {

template <typename T>
__device__ __forceinline__ float to_f(T v);
template <>
__device__ __forceinline__ float to_f(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
template <>
__device__ __forceinline__ float to_f(__half v) {
  return __half2float(v);
}

template <typename T, bool E5M2>
__global__ void quant_groups(const T *x, int64_t ldx, const int *rows_end, int64_t max_rows, int64_t cols, uint8_t *q,
                             int64_t ldq, float *scales, int64_t lds) {
  const int64_t groups = (cols + 127) / 128;
  const int64_t rows = min((int64_t)max(*rows_end, 0), max_rows);
  const int lane = threadIdx.x & 31;
  const int64_t warps = (int64_t)gridDim.x * (blockDim.x / 32);
  const float top = E5M2 ? 57344.f : 448.f;
  for (int64_t w = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; w < rows * groups; w += warps) {
    const int64_t r = w / groups, g = w - r * groups;
    const T *src = x + r * ldx + 128 * g;
    float v[4], amax = 0.f;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t c = 128 * g + lane + 32 * j;
      v[j] = c < cols ? to_f(src[lane + 32 * j]) : 0.f;
      amax = fmaxf(amax, fabsf(v[j]));
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float s = amax > 0.f ? amax / top : 1.f;
    uint8_t *dst = q + r * ldq + 128 * g;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t c = 128 * g + lane + 32 * j;
      if (c < cols)
        dst[lane + 32 * j] = (uint8_t)__nv_cvt_float_to_fp8(v[j] / s, __NV_SATFINITE, E5M2 ? __NV_E5M2 : __NV_E4M3);
    }
    if (lane == 0) scales[r * lds + g] = s;
  }
}

template <typename T>
int launch(const mkx_moe_quant_desc *d, cudaStream_t s) {
  const dim3 block(256);
  int sms = 0;
  if (const int rc = mkx::gemm::num_sms(&sms)) return rc;
  const int64_t work = d->max_rows * ((d->cols + 127) / 128);
  const int64_t blocks = (work + 7) / 8;
  const unsigned grid = (unsigned)(blocks < 8 * (int64_t)sms ? (blocks > 0 ? blocks : 1) : 8 * sms);
  if (d->fp8_type == MKX_GEMM_E5M2)
    quant_groups<T, true><<<grid, block, 0, s>>>((const T *)d->x, d->ldx, d->rows_end, d->max_rows, d->cols, d->q,
                                                 d->ldq, d->scales, d->lds);
  else
    quant_groups<T, false><<<grid, block, 0, s>>>((const T *)d->x, d->ldx, d->rows_end, d->max_rows, d->cols, d->q,
                                                  d->ldq, d->scales, d->lds);
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? 0 : (int)e;
}

}  // namespace

extern "C" int mkx_moe_quant_run(const mkx_moe_quant_desc *d, cudaStream_t s) {
  if (!d || (d->x_type != MKX_GEMM_BF16 && d->x_type != MKX_GEMM_FP16) ||
      (d->fp8_type != MKX_GEMM_E4M3 && d->fp8_type != MKX_GEMM_E5M2) || d->max_rows < 0 || d->cols < 1 ||
      d->ldx < d->cols || d->ldq < d->cols || d->lds < (d->cols + 127) / 128 || !d->rows_end ||
      (d->max_rows > 0 && (!d->x || !d->q || !d->scales)))
    return MKX_GEMM_EINVAL;
  if (d->max_rows == 0) return 0;
  return d->x_type == MKX_GEMM_FP16 ? launch<__half>(d, s) : launch<__nv_bfloat16>(d, s);
}
