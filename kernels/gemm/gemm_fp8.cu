/*
 * MKX fp8 GEMM: host launcher of the Hopper engine with fp8 operands (gemm_engine.cuh, Config's
 * FP8) and the scale hooks of the four layouts.  C interface in gemm_engine.h.
 */
#include "gemm_engine.h"
#include "gemm_engine.cuh"
#include "tmap.cuh"
#include "fp8_scales.cuh"

#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include "common/modules.cuh"

using namespace mkx::gemm;

namespace {

constexpr int kStages = kFp8Stages;
constexpr int kGroupM = 16;  // tile rows per L2 group, as the plain GEMM

template <bool E5M2, typename OutT>
__global__ void __launch_bounds__(kThreads, 1)
    mkx_gemm_fp8_kernel(const __grid_constant__ CUtensorMap tmA, const __grid_constant__ CUtensorMap tmB,
                        const __grid_constant__ CUtensorMap tmC, int M, int N, int K, int tiles_m, int tiles_n,
                        int group_m, ScaleArgs sa) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  extern __shared__ __align__(1024) uint8_t smem[];
  typedef Config<128, kStages, true, false, E5M2 ? kE5M2 : kE4M3> Cfg;
  GroupedTileOrder order{tiles_m, tiles_n, group_m};
  NoLoadGate gate;
  StoreCTma<OutT> epi{&tmC};
  const Fp8Scales sc{sa, M, N};
  run_engine_scaled<Cfg>(smem, &tmA, &tmB, M, N, K, (int)blockIdx.x, (int)gridDim.x, order, gate, epi, sc);
#endif
}

template <bool E5M2, typename OutT>
int launch(const mkx_gemm_desc *d, const ScaleArgs &sa, int ctas, cudaStream_t s) {
  typedef Config<128, kStages, true, false, E5M2 ? kE5M2 : kE4M3> Cfg;
  CUtensorMap tmA, tmB, tmC;
  int rc = make_tmap(&tmA, d->a, d->ab_type, d->k, d->m, d->lda, kBM);
  if (!rc) rc = make_tmap(&tmB, d->b, d->ab_type, d->k, d->n, d->ldb, Cfg::BN);
  if (!rc) rc = make_tmap(&tmC, d->c, d->c_type, d->n, d->m, d->ldc, 64);
  if (rc) return rc;
  const int tiles_m = (int)cdiv(d->m, kBM), tiles_n = (int)cdiv(d->n, Cfg::BN);
  if (ctas > tiles_m * tiles_n) ctas = tiles_m * tiles_n;
  auto kern = mkx_gemm_fp8_kernel<E5M2, OutT>;
  rc = smem_attr_once<mkx_gemm_fp8_kernel<E5M2, OutT>>((int)Cfg::SMEM_BYTES);
  if (rc) return rc;
  kern<<<ctas, kThreads, Cfg::SMEM_BYTES, s>>>(tmA, tmB, tmC, (int)d->m, (int)d->n, (int)d->k, tiles_m, tiles_n,
                                               kGroupM < tiles_m ? kGroupM : tiles_m, sa);
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? 0 : (int)e;
}

template <bool E5M2>
int launch_c(const mkx_gemm_desc *d, const ScaleArgs &sa, int ctas, cudaStream_t s) {
  switch (d->c_type) {
    case MKX_GEMM_BF16:
      return launch<E5M2, __nv_bfloat16>(d, sa, ctas, s);
    case MKX_GEMM_FP16:
      return launch<E5M2, __half>(d, sa, ctas, s);
    case MKX_GEMM_FP32:
      return launch<E5M2, float>(d, sa, ctas, s);
  }
  return MKX_GEMM_EINVAL;
}

bool is_fp8(int t) { return t == MKX_GEMM_E4M3 || t == MKX_GEMM_E5M2; }

const char *scales_why(const mkx_gemm_desc *d, const mkx_gemm_scales *sc) {
  if (!sc) return "null scales";
  if (sc->layout < MKX_GEMM_SCALE_NONE || sc->layout > MKX_GEMM_SCALE_BLOCK) return "bad scale layout";
  if (sc->layout == MKX_GEMM_SCALE_NONE || d->m == 0 || d->n == 0 || d->k == 0) return nullptr;
  if (!sc->a || !sc->b) return "null scale array";
  if (sc->layout >= MKX_GEMM_SCALE_ROW && (sc->a_row < 0 || sc->b_col < 0)) return "negative scale stride";
  if (sc->layout == MKX_GEMM_SCALE_BLOCK && (sc->a_kb < 0 || sc->b_kb < 0)) return "negative scale stride";
  return nullptr;
}

}  // namespace

extern "C" int mkx_gemm_fp8_supported(const mkx_gemm_desc *d, const mkx_gemm_scales *sc, const char **why) {
  const char *w = nullptr;
  if (!d) {
    w = "null descriptor";
  } else if (!is_fp8(d->ab_type)) {
    w = "A/B type must be fp8 (e4m3 or e5m2)";
  } else {
    /* the plain GEMM's rules for the rest, then what fp8 adds */
    mkx_gemm_desc t = *d;
    t.ab_type = MKX_GEMM_BF16;
    if (!mkx_gemm_supported(&t, &w))
      ;
    else if (!d->b_kmajor)
      w = "fp8: B must be stored n x k (K contiguous)";
    else if (d->k % 16 || d->lda % 16 || d->ldb % 16)
      w = "fp8: k, lda and ldb must be multiples of 16";
    else
      w = scales_why(d, sc);
  }
  if (why) *why = w ? w : "ok";
  return w ? 0 : 1;
}

extern "C" int mkx_gemm_run_fp8(const mkx_gemm_desc *d, const mkx_gemm_scales *sc, cudaStream_t s) {
  if (!mkx_gemm_fp8_supported(d, sc, nullptr)) return MKX_GEMM_EINVAL;
  if (d->m == 0 || d->n == 0) return 0;
  if (d->k == 0) return zero_c(d, s);
  if (!device_is_sm90()) return MKX_GEMM_ENODEV;
  int sms = 0;
  const int rc = num_sms(&sms, d->num_ctas);
  if (rc) return rc;
  const ScaleArgs sa = scale_args(*sc);
  return d->ab_type == MKX_GEMM_E5M2 ? launch_c<true>(d, sa, sms, s) : launch_c<false>(d, sa, sms, s);
}
