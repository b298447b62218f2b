/*
 * MKX fp8 GEMM: host launcher of the Hopper engine with fp8 operands (gemm_engine.cuh, Config's
 * FP8) and the scale hooks of the four layouts.  C interface in gemm_engine.h.
 */
#include "gemm_engine.h"
#include "gemm_engine.cuh"
#include "tmap.cuh"
#include "fp8_scales.cuh"

#include <atomic>
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include "common/modules.cuh"

using namespace mkx::gemm;

namespace {

constexpr int kStages = kFp8Stages;
constexpr int kGroupM = 16;  // tile rows per L2 group, as the plain GEMM

/* The tile rows of a cluster of 2 CTAs: 2p and 2p + 1 of the same columns, pair rows p walked in
 * the grouped order (a row past the last has no rows: its loads are zeros, its stores clipped). */
struct PairTileOrder {
  GroupedTileOrder pairs;
  int rank;  // in the cluster
  __device__ __forceinline__ int num_tiles() const { return pairs.num_tiles(); }
  __device__ __forceinline__ void get(int idx, int &tm, int &tn) const {
    pairs.get(idx, tm, tn);
    tm = 2 * tm + rank;
  }
};

template <bool E5M2, int CLUSTER>
using Fp8Cfg = Config<128, kStages, true, false, E5M2 ? kE5M2 : kE4M3, CLUSTER>;

/* units_m: tile rows (CLUSTER 1) or pairs of them (2) */
template <bool E5M2, typename OutT, int CLUSTER>
__global__ void __launch_bounds__(kThreads, 1)
    mkx_gemm_fp8_kernel(const __grid_constant__ CUtensorMap tmA, const __grid_constant__ CUtensorMap tmB,
                        const __grid_constant__ CUtensorMap tmC, int M, int N, int K, int units_m, int tiles_n,
                        int group_m, ScaleArgs sa) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  extern __shared__ __align__(1024) uint8_t smem[];
  typedef Fp8Cfg<E5M2, CLUSTER> Cfg;
  const GroupedTileOrder grouped{units_m, tiles_n, group_m};
  NoLoadGate gate;
  StoreCTma<OutT> epi{&tmC};
  const Fp8Scales sc{sa, M, N};
  if constexpr (CLUSTER > 1) {
    const PairTileOrder order{grouped, (int)cluster_cta_rank()};
    run_engine_scaled<Cfg>(smem, &tmA, &tmB, M, N, K, (int)blockIdx.x / 2, (int)gridDim.x / 2, order, gate, epi, sc);
  } else {
    run_engine_scaled<Cfg>(smem, &tmA, &tmB, M, N, K, (int)blockIdx.x, (int)gridDim.x, grouped, gate, epi, sc);
  }
#endif
}

/* cudaOccupancyMaxActiveClusters once per kernel and device (as smem_attr_once: a driver call
 * per launch otherwise; under MPS a process keeps its partition); 0 or a cudaError_t. */
template <auto Kern>
int clusters_fit_once(const cudaLaunchConfig_t *cfg, int *fit) {
  static std::atomic<int> known[64];  // clusters that fit + 1; 0: not asked yet
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return (int)e;
  const int v = dev >= 0 && dev < 64 ? known[dev].load(std::memory_order_acquire) : 0;
  if (v > 0) {
    *fit = v - 1;
    return 0;
  }
  e = cudaOccupancyMaxActiveClusters(fit, Kern, cfg);
  if (e != cudaSuccess) return (int)e;
  if (dev >= 0 && dev < 64) known[dev].store(*fit + 1, std::memory_order_release);
  return 0;
}

/* Launches on s, or with `grid` only says how many CTAs it would launch (a cluster query once). */
template <bool E5M2, typename OutT, int CLUSTER>
int launch(const mkx_gemm_desc *d, const ScaleArgs &sa, int ctas, cudaStream_t s, int *grid) {
  typedef Fp8Cfg<E5M2, CLUSTER> Cfg;
  const int tiles_m = (int)cdiv(d->m, kBM), tiles_n = (int)cdiv(d->n, Cfg::BN);
  const int units_m = (tiles_m + CLUSTER - 1) / CLUSTER, group_m = kGroupM / CLUSTER;
  auto kern = mkx_gemm_fp8_kernel<E5M2, OutT, CLUSTER>;
  int rc = smem_attr_once<mkx_gemm_fp8_kernel<E5M2, OutT, CLUSTER>>((int)Cfg::SMEM_BYTES);
  if (rc) return rc;
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeClusterDimension;
  at[0].val.clusterDim.x = CLUSTER;
  at[0].val.clusterDim.y = 1;
  at[0].val.clusterDim.z = 1;
  cfg.gridDim = dim3(CLUSTER);
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = Cfg::SMEM_BYTES;
  cfg.stream = s;
  cfg.attrs = at;
  cfg.numAttrs = CLUSTER > 1 ? 1 : 0;
  int units = ctas / CLUSTER;
  if (units > units_m * tiles_n) units = units_m * tiles_n;
  if (CLUSTER > 1) {  // no more clusters than fit at once: a grid of more would run in waves
    int fit = 0;
    rc = clusters_fit_once<mkx_gemm_fp8_kernel<E5M2, OutT, CLUSTER>>(&cfg, &fit);
    if (rc) return rc;
    if (fit > 0 && units > fit) units = fit;
  }
  if (grid) {
    *grid = units * CLUSTER;
    return 0;
  }
  CUtensorMap tmA, tmB, tmC;
  rc = make_tmap(&tmA, d->a, d->ab_type, d->k, d->m, d->lda, kBM);
  if (!rc) rc = make_tmap(&tmB, d->b, d->ab_type, d->k, d->n, d->ldb, Cfg::BN / CLUSTER);
  if (!rc) rc = make_tmap(&tmC, d->c, d->c_type, d->n, d->m, d->ldc, 64);
  if (rc) return rc;
  cfg.gridDim = dim3(units * CLUSTER);
  const cudaError_t e = cudaLaunchKernelEx(&cfg, kern, tmA, tmB, tmC, (int)d->m, (int)d->n, (int)d->k, units_m, tiles_n,
                                           group_m < units_m ? group_m : units_m, sa);
  return e == cudaSuccess ? 0 : (int)e;
}

template <bool E5M2, typename OutT>
int launch_t(const mkx_gemm_desc *d, const ScaleArgs &sa, int ctas, cudaStream_t s, int *grid) {
  return mkx_gemm_fp8_pick_tile(d, ctas) == MKX_GEMM_TILE_128x128_PAIR ? launch<E5M2, OutT, 2>(d, sa, ctas, s, grid)
                                                                       : launch<E5M2, OutT, 1>(d, sa, ctas, s, grid);
}

template <bool E5M2>
int launch_c(const mkx_gemm_desc *d, const ScaleArgs &sa, int ctas, cudaStream_t s, int *grid) {
  switch (d->c_type) {
    case MKX_GEMM_BF16:
      return launch_t<E5M2, __nv_bfloat16>(d, sa, ctas, s, grid);
    case MKX_GEMM_FP16:
      return launch_t<E5M2, __half>(d, sa, ctas, s, grid);
    case MKX_GEMM_FP32:
      return launch_t<E5M2, float>(d, sa, ctas, s, grid);
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
    t.tile_override = MKX_GEMM_TILE_AUTO;
    if (!mkx_gemm_supported(&t, &w))
      ;
    else if (d->tile_override != MKX_GEMM_TILE_AUTO && d->tile_override != MKX_GEMM_TILE_128x128 &&
             d->tile_override != MKX_GEMM_TILE_128x128_PAIR)
      w = "fp8: bad tile_override";
    else if (d->tile_override == MKX_GEMM_TILE_128x128_PAIR && d->num_ctas == 1)
      w = "fp8: clusters of 2 need 2 CTAs";
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

/* Clusters of 2 where asked for only, until timings choose between the two, and where there are
 * 2 tile rows or more (with one, every second CTA would multiply zeros). */
extern "C" int mkx_gemm_fp8_pick_tile(const mkx_gemm_desc *d, int num_ctas) {
  return d->tile_override == MKX_GEMM_TILE_128x128_PAIR && num_ctas != 1 && d->m > kBM ? MKX_GEMM_TILE_128x128_PAIR
                                                                                       : MKX_GEMM_TILE_128x128;
}

/* Both entries: the checks, then the launch (grid: only its CTAs). */
static int run_fp8(const mkx_gemm_desc *d, const mkx_gemm_scales *sc, cudaStream_t s, int *grid) {
  if (!mkx_gemm_fp8_supported(d, sc, nullptr)) return MKX_GEMM_EINVAL;
  if (grid) *grid = 0;
  if (d->m == 0 || d->n == 0) return 0;
  if (d->k == 0) return grid ? 0 : zero_c(d, s);
  if (!device_is_sm90()) return MKX_GEMM_ENODEV;
  int sms = 0;
  const int rc = num_sms(&sms, d->num_ctas);
  if (rc) return rc;
  const ScaleArgs sa = scale_args(*sc);
  return d->ab_type == MKX_GEMM_E5M2 ? launch_c<true>(d, sa, sms, s, grid) : launch_c<false>(d, sa, sms, s, grid);
}

extern "C" int mkx_gemm_run_fp8(const mkx_gemm_desc *d, const mkx_gemm_scales *sc, cudaStream_t s) {
  return run_fp8(d, sc, s, nullptr);
}

extern "C" int mkx_gemm_fp8_grid(const mkx_gemm_desc *d, const mkx_gemm_scales *sc, int *ctas) {
  if (!ctas) return MKX_GEMM_EINVAL;
  return run_fp8(d, sc, nullptr, ctas);
}
