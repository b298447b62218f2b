/* What both grouped expert GEMM kernels share (grouped_gemm.cu: token rows
 * as the M side; grouped_gemm_swap.cu: weight columns as the M side): the
 * experts' row spans, the tile prefix over experts scanned on the GPU, and
 * SwiGLU's activation. */
#pragma once
#include <cuda_runtime.h>
#include "moe/moe_engine.h"
#include "moe/scan.cuh"
#include "fused/flags.cuh"

namespace mkx {
namespace moe {

constexpr int kScanThreads = 1024;

/* Rows of expert e: [lo, hi), offsets clamped to [0, a_rows], so bad
 * offsets never make a kernel read or write outside A and C. */
struct MoeRows {
  const int *off;
  const int *prefix;  // E + 1 tile prefix (workspace)
  int experts, a_rows;
  const int *gate;  // nonzero: no tiles (a run the verdict stopped)
  __device__ __forceinline__ void span(int e, int &lo, int &hi) const {
    lo = min(max(off[e], 0), a_rows);
    hi = max(lo, min(max(off[e + 1], 0), a_rows));
  }
  /* the expert owning tile v < prefix[E]: the last e with prefix[e] <= v */
  __device__ __forceinline__ int expert_of(int v) const {
    int lo = 0, hi = experts - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) >> 1;
      if (prefix[mid] <= v)
        lo = mid;
      else
        hi = mid - 1;
    }
    return lo;
  }
};

/* Tile prefix over experts into work[0..E] for a kernel whose expert e
 * takes t.tiles(e) tiles (t.rows: the spans): each thread sums a run of
 * consecutive experts, one block scan places the runs.  A stopped run
 * (gate set) has no tiles. */
template <class Tiles>
__global__ void tile_prefix_kernel(Tiles t, int *work) {
  const int n = t.rows.experts;
  const int per = (n + kScanThreads - 1) / kScanThreads;
  const int e0 = min(n, (int)threadIdx.x * per), e1 = min(n, e0 + per);
  const bool stop = t.rows.gate && *t.rows.gate;
  int sum = 0;
  for (int e = e0; e < e1; ++e) sum += stop ? 0 : t.tiles(e);
  int total;
  int run = block_exclusive_scan<kScanThreads>(sum, total);
  for (int e = e0; e < e1; ++e) {
    work[e] = run;
    run += stop ? 0 : t.tiles(e);
  }
  if (threadIdx.x == 0) work[n] = total;
}

template <class Tiles>
inline int tile_prefix_run(const Tiles &t, int *work, cudaStream_t s) {
  tile_prefix_kernel<Tiles><<<1, kScanThreads, 0, s>>>(t, work);
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? 0 : (int)e;
}

/* The wait of mkx_moe_gemm_desc.ready, by the producer thread before it
 * loads an expert's rows: every node rank's flag of expert e at the
 * call's epoch (read once), acquired at system scope, then the async proxy
 * fenced so that the TMA loads see the rows the flags cover. */
struct MoeReady {
  const int *ready;  // nullptr: no wait
  mkx_fused_sync sync;
  int epoch;  // 0 until the first wait reads it
  __device__ __forceinline__ void wait(int e) {
    if (!ready) return;
    if (!epoch) epoch = *(volatile const int *)mkx::fused::own_word(sync, MKX_FUSED_OFF_EPOCH);
    for (int q = 0; q < sync.size; ++q)
      mkx::fused::wait_geq(ready + e * sync.size + q, epoch, sync, q, e, MKX_FUSED_AT_MOE_EXPERT);
    asm volatile("fence.proxy.async.global;" ::: "memory");
  }
};

inline MoeReady moe_ready_of(const mkx_moe_gemm_desc *d) {
  MoeReady r{};
  if (d->ready && d->sync) {
    r.ready = d->ready;
    r.sync = *d->sync;
  }
  return r;
}

__device__ __forceinline__ float silu(float v) { return v / (1.f + __expf(-v)); }

/* The swapped kernel's run (grouped_gemm_swap.cu): its tile prefix and
 * GEMM, on a checked descriptor. */
int swap_gemm_run(const mkx_moe_gemm_desc *d, cudaStream_t s);

}  // namespace moe
}  // namespace mkx
