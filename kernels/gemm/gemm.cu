/*
 * MKX plain GEMM: host launcher of the Hopper engine (gemm_engine.cuh) with trivial hooks.
 * C interface in gemm_engine.h.
 */
#include "gemm_engine.h"
#include "gemm_engine.cuh"
#include "tmap.cuh"

#include <cuda.h>
#include <cuda_runtime.h>
#include <atomic>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "common/modules.cuh"

using namespace mkx::gemm;

namespace {

constexpr int kGroupM = 16;  // tile rows per L2 group in the default tile order

/* Gate parameters of the gated variant (AllGather-style: A rows arrive while the GEMM runs). */
struct GateArgs {
  const int *flags;  // one int per 128-row tile row of A, in device (or mapped) memory
  int target;        // wait until flags[tile_m] >= target
  int first_tile_m;  // tile row to start from
};

/* EPI: 0 = direct stores, 1 = TMA stores.  GATED: FlagLoadGate + RotatedTileOrder. */
template <int BN, int STAGES, bool BKM, bool F16, typename OutT, int EPI, bool GATED>
__global__ void __launch_bounds__(kThreads, 1)
    mkx_gemm_kernel(const __grid_constant__ CUtensorMap tmA, const __grid_constant__ CUtensorMap tmB,
                    const __grid_constant__ CUtensorMap tmC, OutT *c, int64_t ldc, int M, int N, int K, int tiles_m,
                    int tiles_n, int group_m, GateArgs ga) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  extern __shared__ __align__(1024) uint8_t smem[];
  typedef Config<BN, STAGES, BKM, F16> Cfg;
  GroupedTileOrder grouped{tiles_m, tiles_n, group_m};
  if constexpr (GATED) {
    RotatedTileOrder order{grouped, ga.first_tile_m};
    FlagLoadGate gate{ga.flags, ga.target};
    StoreCTma<OutT> epi{&tmC};
    run_engine<Cfg>(smem, &tmA, &tmB, M, N, K, (int)blockIdx.x, (int)gridDim.x, order, gate, epi);
  } else {
    NoLoadGate gate;
    if constexpr (EPI == 1) {
      StoreCTma<OutT> epi{&tmC};
      run_engine<Cfg>(smem, &tmA, &tmB, M, N, K, (int)blockIdx.x, (int)gridDim.x, grouped, gate, epi);
    } else {
      StoreC<OutT> epi{c, ldc};
      run_engine<Cfg>(smem, &tmA, &tmB, M, N, K, (int)blockIdx.x, (int)gridDim.x, grouped, gate, epi);
    }
  }
#endif
}

int group_m_setting() { /* MKX_GEMM_GROUP_M: tile rows per L2 group (tuning knob) */
  static int v = -1;
  if (v < 0) {
    const char *e = getenv("MKX_GEMM_GROUP_M");
    int g = e ? atoi(e) : 0;
    v = g > 0 ? g : kGroupM;
  }
  return v;
}

int epi_direct() { /* MKX_GEMM_EPI=direct selects the direct-store epilogue (for comparison) */
  static int v = -1;
  if (v < 0) {
    const char *e = getenv("MKX_GEMM_EPI");
    v = (e && !strcmp(e, "direct")) ? 1 : 0;
  }
  return v;
}

template <int BN, int STAGES, bool BKM, bool F16, typename OutT>
int launch(const mkx_gemm_desc *d, int ctas, const GateArgs *gate, cudaStream_t s, bool load_only) {
  typedef Config<BN, STAGES, BKM, F16> Cfg;
  CUtensorMap tmA, tmB, tmC;
  const int abt = F16 ? MKX_GEMM_FP16 : MKX_GEMM_BF16;
  int rc = make_tmap(&tmA, d->a, abt, d->k, d->m, d->lda, kBM);
  if (rc) return rc;
  if (BKM)
    rc = make_tmap(&tmB, d->b, abt, d->k, d->n, d->ldb, BN);
  else
    rc = make_tmap(&tmB, d->b, abt, d->n, d->k, d->ldb, 64);
  if (rc) return rc;
  rc = make_tmap(&tmC, d->c, d->c_type, d->n, d->m, d->ldc, 64);
  if (rc) return rc;
  const int tiles_m = (int)cdiv(d->m, kBM), tiles_n = (int)cdiv(d->n, BN);
  const int tiles = tiles_m * tiles_n;
  if (ctas > tiles) ctas = tiles;
  auto kern = gate           ? mkx_gemm_kernel<BN, STAGES, BKM, F16, OutT, 1, true>
              : epi_direct() ? mkx_gemm_kernel<BN, STAGES, BKM, F16, OutT, 0, false>
                             : mkx_gemm_kernel<BN, STAGES, BKM, F16, OutT, 1, false>;
  GateArgs ga = {nullptr, 0, 0};
  if (gate) {
    ga = *gate;
    ga.first_tile_m = tiles_m ? ga.first_tile_m % tiles_m : 0;
  }
  cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)Cfg::SMEM_BYTES);
  if (e != cudaSuccess || load_only) return (int)e;
  kern<<<ctas, kThreads, Cfg::SMEM_BYTES, s>>>(tmA, tmB, tmC, (OutT *)d->c, d->ldc, (int)d->m, (int)d->n, (int)d->k,
                                               tiles_m, tiles_n,
                                               group_m_setting() < tiles_m ? group_m_setting() : tiles_m, ga);
  e = cudaGetLastError();
  return e == cudaSuccess ? 0 : (int)e;
}

template <int BN, int STAGES>
int launch_tile(const mkx_gemm_desc *d, int ctas, const GateArgs *g, cudaStream_t s, bool load_only) {
  return with_types(d->ab_type, d->b_kmajor, d->c_type, [&](auto bkm, auto f16, auto out) {
    return launch<BN, STAGES, decltype(bkm)::value, decltype(f16)::value, typename decltype(out)::type>(d, ctas, g, s,
                                                                                                        load_only);
  });
}

int g_is_sm90[64];  // 0 unknown, 1 yes, 2 no

}  // namespace

extern "C" int mkx_gemm_supported(const mkx_gemm_desc *d, const char **why) {
  const char *w = nullptr;
  if (!d)
    w = "null descriptor";
  else if (d->ab_type != MKX_GEMM_BF16 && d->ab_type != MKX_GEMM_FP16)
    w = "A/B type must be bf16 or fp16";
  else if (d->c_type != MKX_GEMM_BF16 && d->c_type != MKX_GEMM_FP16 && d->c_type != MKX_GEMM_FP32)
    w = "C type must be bf16, fp16 or fp32";
  else if (d->m < 0 || d->n < 0 || d->k < 0)
    w = "negative size";
  else if (d->m >= (1ll << 31) || d->n >= (1ll << 31) || d->k >= (1ll << 31))
    w = "size >= 2^31";
  else if (d->n % 8 || d->k % 8)
    w = "n and k must be multiples of 8";
  else if (d->m > 0 && d->n > 0 && (!d->c))
    w = "null C";
  else if (d->m > 0 && d->n > 0 && d->k > 0 && (!d->a || !d->b))
    w = "null A or B";
  else if (d->lda < d->k || d->ldc < d->n || d->ldb < (d->b_kmajor ? d->k : d->n))
    w = "leading dimension too small";
  else if (d->lda % 8 || d->ldb % 8 || d->ldc % 8)
    w = "lda, ldb, ldc must be multiples of 8";
  else if (((uintptr_t)d->a | (uintptr_t)d->b | (uintptr_t)d->c) & 15)
    w = "A, B, C must be 16-byte aligned";
  else if (d->tile_override < 0 || d->tile_override > 2)
    w = "bad tile_override";
  else if (d->num_ctas < 0)
    w = "num_ctas < 0";
  else if ((uint64_t)cdiv(d->m, kBM) * (uint64_t)cdiv(d->n, 128) >= (1ull << 31))
    w = "too many tiles";
  if (why) *why = w ? w : "ok";
  return w ? 0 : 1;
}

extern "C" int mkx_gemm_pick_tile(const mkx_gemm_desc *d, int num_sms) {
  if (d->tile_override == MKX_GEMM_TILE_128x128 || d->tile_override == MKX_GEMM_TILE_128x256) return d->tile_override;
  int ctas = d->num_ctas > 0 ? d->num_ctas : num_sms;
  if (ctas < 1) ctas = 1;
  if (d->n <= 128) return MKX_GEMM_TILE_128x128;
  const int64_t tm = cdiv(d->m, kBM);
  const int64_t t256 = tm * cdiv(d->n, 256), t128 = tm * cdiv(d->n, 128);
  /* time ~ waves x tile area; the 128-wide tile runs ~12% slower per flop (more smem traffic per
   * wgmma, more epilogue per flop) */
  const double c256 = (double)cdiv(t256, ctas) * 256.0;
  const double c128 = (double)cdiv(t128, ctas) * 128.0 * 1.12;
  return c128 < c256 ? MKX_GEMM_TILE_128x128 : MKX_GEMM_TILE_128x256;
}

static int run_common(const mkx_gemm_desc *d, const GateArgs *g, cudaStream_t s, bool load_only = false) {
  if (!mkx_gemm_supported(d, nullptr)) return MKX_GEMM_EINVAL;
  if (d->m == 0 || d->n == 0 || (load_only && d->k == 0)) return 0;  // k = 0: a memset, no kernel
  if (d->k == 0) return zero_c(d, s);
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return (int)e;
  if (dev < 0 || dev >= 64 || g_is_sm90[dev] == 0) {
    int major = 0;
    e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    if (e != cudaSuccess) return (int)e;
    if (dev >= 0 && dev < 64) g_is_sm90[dev] = major == 9 ? 1 : 2;
    if (major != 9) return MKX_GEMM_ENODEV;
  } else if (g_is_sm90[dev] == 2) {
    return MKX_GEMM_ENODEV;
  }
  int sms = d->num_ctas;
  if (sms <= 0) {
    e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (e != cudaSuccess) return (int)e;
  }
  const int tile = mkx_gemm_pick_tile(d, sms);
  if (tile == MKX_GEMM_TILE_128x256) return launch_tile<256, 4>(d, sms, g, s, load_only);
  return launch_tile<128, 6>(d, sms, g, s, load_only);
}

extern "C" int mkx_gemm_run(const mkx_gemm_desc *d, cudaStream_t s) { return run_common(d, nullptr, s); }

extern "C" int mkx_gemm_load(const mkx_gemm_desc *d) { return run_common(d, nullptr, 0, true); }

extern "C" int mkx_gemm_run_gated(const mkx_gemm_desc *d, const int *flags, int target, int first_tile_m,
                                  cudaStream_t s) {
  if (!flags || first_tile_m < 0) return MKX_GEMM_EINVAL;
  GateArgs g = {flags, target, first_tile_m};
  return run_common(d, &g, s);
}
