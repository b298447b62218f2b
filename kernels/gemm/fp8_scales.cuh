/*
 * The scale hooks of the fp8 engine (gemm_engine.cuh, run_engine_scaled's Scales) for the four
 * layouts of mkx_gemm_scales, shared by the fp8 GEMM (gemm_fp8.cu) and the kernels built on the
 * engine that run it (kernels/tp/pull.cu).
 */
#ifndef MKX_GEMM_FP8_SCALES_CUH
#define MKX_GEMM_FP8_SCALES_CUH

#include "gemm_engine.cuh"
#include "gemm_engine.h"

namespace mkx {
namespace gemm {

constexpr int kFp8Stages = 6;  // 6 x 32 KB stages + the epilogue's staging fit 227 KB

struct ScaleArgs {
  int layout;
  const float *a, *b;
  int64_t a_row, a_kb, b_col, b_kb;
};

__host__ __device__ inline ScaleArgs scale_args(const mkx_gemm_scales &sc) {
  return ScaleArgs{sc.layout, sc.a, sc.b, sc.a_row, sc.a_kb, sc.b_col, sc.b_kb};
}

/* The scales of mkx_gemm_scales on the engine's hooks (NoScales' contract).  BLOCK: a tile's 128
 * columns are one block of B's scales, and each thread's accumulators lie in two rows (r and
 * r + 8), so a K block needs three scales per thread, loaded after its wgmma is issued. */
struct Fp8Scales {
  ScaleArgs s;
  int M, N;
  struct Block {
    float s0, s1;  // rows r and r + 8, times B's scale
  };
  __device__ __forceinline__ Block block(const TileCtx &t, int kb) const {
    if (s.layout != MKX_GEMM_SCALE_BLOCK) return Block{1.f, 1.f};
    const int r = t.row0 + t.acc_row(0);
    const float b = __ldg(s.b + (int64_t)t.tile_n * s.b_col + (int64_t)kb * s.b_kb);
    const float a0 = r < M ? __ldg(s.a + (int64_t)r * s.a_row + (int64_t)kb * s.a_kb) : 0.f;
    const float a1 = r + 8 < M ? __ldg(s.a + (int64_t)(r + 8) * s.a_row + (int64_t)kb * s.a_kb) : 0.f;
    return Block{a0 * b, a1 * b};
  }
  template <int N_>
  __device__ __forceinline__ void promote(const Block &f, const float (&part)[N_], float (&acc)[N_]) const {
#pragma unroll
    for (int i = 0; i < N_; ++i) acc[i] = fmaf((i >> 1) & 1 ? f.s1 : f.s0, part[i], acc[i]);
  }
  template <int N_>
  __device__ __forceinline__ void finish(const TileCtx &t, float (&acc)[N_]) const {
    if (s.layout == MKX_GEMM_SCALE_TENSOR) {
      const float f = __ldg(s.a) * __ldg(s.b);
#pragma unroll
      for (int i = 0; i < N_; ++i) acc[i] *= f;
    } else if (s.layout == MKX_GEMM_SCALE_ROW) {
      const int r = t.row0 + t.acc_row(0);
      const float a0 = r < M ? __ldg(s.a + r * s.a_row) : 0.f;
      const float a1 = r + 8 < M ? __ldg(s.a + (r + 8) * s.a_row) : 0.f;
#pragma unroll
      for (int i = 0; i < N_; i += 2) {
        const int c = t.col0 + t.acc_col(i);  // acc i, i + 1: columns c, c + 1
        const float b0 = c < N ? __ldg(s.b + c * s.b_col) : 0.f;
        const float b1 = c + 1 < N ? __ldg(s.b + (c + 1) * s.b_col) : 0.f;
        const float a = (i >> 1) & 1 ? a1 : a0;
        acc[i] *= a * b0;
        acc[i + 1] *= a * b1;
      }
    }
  }
};

}  // namespace gemm
}  // namespace mkx

#endif
