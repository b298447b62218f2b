/*
 * AllGather+GEMM on one node: the Hopper engine (kernels/gemm) with a
 * bounded flag gate.  The gathered A lives in this rank's symmetric
 * workspace and is filled by the copy engines of every rank (src/ops/
 * ag_gemm_gpu.c); each 128-row tile of A has a flag that the filler's copy
 * engine sets to the call's epoch after the rows.  The CTAs start on this
 * rank's own rows (first_tile_m), which land first (a local copy), then
 * walk on to the peers' rows as they arrive.
 */
#include "gemm/gemm_engine.cuh"
#include "tp/flags.cuh"
#include "tp/tp.h"
#include "tp/tp_common.cuh"

using namespace mkx::gemm;

namespace {

constexpr int kGroupM = 16;

/* FlagLoadGate with a bound: gives up after timeout_ns (and leaves the
 * error word) rather than hang the GPU on a peer that never arrives. */
struct BoundedFlagGate {
  const int *flags;
  int target;
  uint64_t timeout_ns;
  int *err;
  __device__ __forceinline__ void wait_rows(int tm, int, int) {
    mkx::tp::wait_geq(flags + tm, target, timeout_ns, err, -1, tm, MKX_TP_AT_AG_TILE);
    asm volatile("fence.proxy.async.global;" ::: "memory");
  }
};

struct AgParams {
  const int *flags;
  const int *epoch;
  int first_tile_m, tiles_m, tiles_n, group_m;
  uint64_t timeout_ns;
  int *err;
};

template <int BN, int STAGES, bool BKM, bool F16, typename OutT>
__global__ void __launch_bounds__(kThreads, 1)
    tp_ag_kernel(const __grid_constant__ CUtensorMap tmA, const __grid_constant__ CUtensorMap tmB,
                 const __grid_constant__ CUtensorMap tmC, int M, int N, int K, AgParams p) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  extern __shared__ __align__(1024) uint8_t smem[];
  typedef Config<BN, STAGES, BKM, F16> Cfg;
  RotatedTileOrder order{GroupedTileOrder{p.tiles_m, p.tiles_n, p.group_m}, p.first_tile_m};
  /* The epoch is read on the GPU (written by this call's prologue), so a
   * graph replay waits for its own epoch, not the captured one. */
  BoundedFlagGate gate{p.flags, *(volatile const int *)p.epoch, p.timeout_ns, p.err};
  StoreCTma<OutT> epi{&tmC};
  run_engine<Cfg>(smem, &tmA, &tmB, M, N, K, (int)blockIdx.x, (int)gridDim.x, order, gate, epi);
#endif
}

template <int BN, int STAGES, bool BKM, bool F16, typename OutT>
int launch(const mkx_tp_ag_desc *d, cudaStream_t s) {
  typedef Config<BN, STAGES, BKM, F16> Cfg;
  CUtensorMap tmA, tmB, tmC;
  const int abt = F16 ? MKX_GEMM_FP16 : MKX_GEMM_BF16;
  int rc = mkx::tp::make_tmap(&tmA, d->a, abt, d->k, d->m, d->lda, kBM);
  if (!rc) rc = BKM ? mkx::tp::make_tmap(&tmB, d->b, abt, d->k, d->n, d->ldb, BN)
                    : mkx::tp::make_tmap(&tmB, d->b, abt, d->n, d->k, d->ldb, 64);
  if (!rc) rc = mkx::tp::make_tmap(&tmC, d->c, d->c_type, d->n, d->m, d->ldc, 64);
  int sms = 0;
  if (!rc) rc = mkx::tp::num_sms(&sms);
  if (rc) return rc;
  AgParams p;
  p.flags = d->flags;
  p.epoch = d->epoch;
  p.tiles_m = (int)mkx::tp::cdiv(d->m, kBM);
  p.tiles_n = (int)mkx::tp::cdiv(d->n, BN);
  p.group_m = kGroupM < p.tiles_m ? kGroupM : p.tiles_m;
  p.first_tile_m = d->first_tile_m % p.tiles_m;
  p.timeout_ns = d->timeout_ns;
  p.err = d->err;
  const int tiles = p.tiles_m * p.tiles_n;
  const int ctas = sms < tiles ? sms : tiles;
  auto kern = tp_ag_kernel<BN, STAGES, BKM, F16, OutT>;
  cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)Cfg::SMEM_BYTES);
  if (e != cudaSuccess) return (int)e;
  kern<<<ctas, kThreads, Cfg::SMEM_BYTES, s>>>(tmA, tmB, tmC, (int)d->m, (int)d->n, (int)d->k, p);
  e = cudaGetLastError();
  return e == cudaSuccess ? 0 : (int)e;
}

template <int BN, int STAGES, bool BKM, bool F16>
int launch_out(const mkx_tp_ag_desc *d, cudaStream_t s) {
  switch (d->c_type) {
    case MKX_GEMM_BF16: return launch<BN, STAGES, BKM, F16, __nv_bfloat16>(d, s);
    case MKX_GEMM_FP16: return launch<BN, STAGES, BKM, F16, __half>(d, s);
    case MKX_GEMM_FP32: return launch<BN, STAGES, BKM, F16, float>(d, s);
  }
  return MKX_GEMM_EINVAL;
}

template <int BN, int STAGES>
int launch_tile(const mkx_tp_ag_desc *d, cudaStream_t s) {
  const bool f16 = d->ab_type == MKX_GEMM_FP16;
  if (d->b_kmajor) return f16 ? launch_out<BN, STAGES, true, true>(d, s) : launch_out<BN, STAGES, true, false>(d, s);
  return f16 ? launch_out<BN, STAGES, false, true>(d, s) : launch_out<BN, STAGES, false, false>(d, s);
}

}  // namespace

extern "C" int mkx_tp_ag_gemm(const mkx_tp_ag_desc *d, cudaStream_t s) {
  if (!d || d->m <= 0 || d->n <= 0 || d->k <= 0 || !d->flags || !d->epoch) return MKX_GEMM_EINVAL;
  mkx_gemm_desc g = {d->m, d->n, d->k, d->a, d->lda, d->b, d->ldb, d->b_kmajor, d->c, d->ldc,
                     d->ab_type, d->c_type, 0, 0};
  if (!mkx_gemm_supported(&g, nullptr)) return MKX_GEMM_EINVAL;
  int sms = 0;
  int rc = mkx::tp::num_sms(&sms);
  if (rc) return rc;
  if (mkx_gemm_pick_tile(&g, sms) == MKX_GEMM_TILE_128x256) return launch_tile<256, 4>(d, s);
  return launch_tile<128, 6>(d, s);
}
