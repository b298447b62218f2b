/*
 * MKX grouped expert GEMM with the operands swapped (MKX_MOE_GEMM_SWAP of
 * moe_engine.h): the wgmma's 64-row side is 64 columns of an expert's
 * weights (MN-major in shared memory, the transpose bit), its other side up
 * to 128 of the expert's rows (K-major).  Where experts have a hundred or
 * two rows, the weights' bytes set the time; this kernel reads them once
 * per 256 rows, whichever CTAs run when, with an evict-first hint so that
 * they do not push the experts' rows out of L2, and computes r rows
 * rounded up to 8 where 128-row tiles compute r rounded up to 128.
 *
 * Tiles.  An expert's rows go in blocks of 256, the last one shorter.  Its
 * W columns go in pairs of 64-column chunks: SwiGLU pair p is gate columns
 * [64p, 64p + 64) with up columns [u + 64p, u + 64p + 64), plain pair p is
 * columns [128p, 128p + 128).  A block of more than 128 rows ("wide") takes
 * one pair per tile, each consumer warpgroup half its rows (the first half
 * rounded up to 8); a block of at most 128 rows takes two pairs per tile,
 * one per warpgroup, with all its rows.  So a warpgroup always holds both
 * chunks of one pair for at most 128 rows (2 x N/2 fp32 registers), and
 * SwiGLU's gate and up of an output column meet in the same thread.  Tiles
 * are numbered by expert, then block, then pair; expert e owns tiles
 * [prefix[e], prefix[e+1]) (scanned on the GPU, moe_tiles.cuh), and CTA c
 * takes tiles c, c + grid, ...: neighbouring CTAs share an expert's rows.
 *
 * A stage is six 8 KB slots, 64 deep in K, 128B-swizzled: W chunks (64
 * columns), then boxes of 64 rows.  Narrow tiles put W in slots 0-3 and
 * rows in 4-5, wide tiles W in 0-1 and rows in 2-5.  Only the boxes a
 * tile's rows need are loaded; rows past the expert's end come with them,
 * and their products are dropped.
 *
 * The epilogue stores from the registers, one element at a time: a
 * thread's values are two W columns by pairs of rows, so no two are
 * adjacent in C.  Each stored element took k multiply-adds, so the stores
 * stay small beside the main loop.
 */
#include "gemm/gemm_engine.cuh"
#include "gemm/tmap.cuh"
#include "moe/moe_engine.h"
#include "moe/moe_tiles.cuh"

#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include "common/modules.cuh"

using namespace mkx::gemm;

namespace mkx {
namespace moe {
namespace {

constexpr int kSlot = 64 * 128;  // a 64 x 64 box of 16-bit elements
constexpr int kStageBytes = 6 * kSlot;
constexpr int kStages = 4;
constexpr int kBlockRows = 256;
constexpr int kNarrowRows = 128;                                 // rows a warpgroup holds at most
constexpr int kSmemBytes = kStages * kStageBytes + 1024 + 1024;  // ring, barriers, alignment

struct SwapTile {
  int e, row0, rows, pair0;
  bool wide;
};

struct SwapTiles {
  MoeRows rows;
  int pairs;  // W column pairs
  __device__ __forceinline__ int tiles(int e) const {
    int lo, hi;
    rows.span(e, lo, hi);
    const int n = hi - lo;
    if (n == 0) return 0;
    const int nb = (n + kBlockRows - 1) / kBlockRows, last = n - (nb - 1) * kBlockRows;
    return (nb - 1) * pairs + (last > kNarrowRows ? pairs : (pairs + 1) / 2);
  }
  /* tile v < prefix[E] */
  __device__ __forceinline__ SwapTile locate(int v) const {
    SwapTile t;
    t.e = rows.expert_of(v);
    int lo, hi;
    rows.span(t.e, lo, hi);
    int l = v - rows.prefix[t.e];
    const int b = min(l / pairs, (hi - lo - 1) / kBlockRows);  // only the last block is narrow
    l -= b * pairs;
    t.row0 = lo + b * kBlockRows;
    t.rows = min(kBlockRows, hi - t.row0);
    t.wide = t.rows > kNarrowRows;
    t.pair0 = t.wide ? l : 2 * l;
    return t;
  }
};

struct SwapParams {
  SwapTiles t;
  MoeReady ready;
  void *c;
  int64_t ldc;
  const float *scale;
  int n, k, up;
};

/* W column of chunk h (0 or 1) of pair p */
template <bool SWIGLU>
__device__ __forceinline__ int chunk_col(int p, int h, int up) {
  return SWIGLU ? (h ? up : 0) + 64 * p : 128 * p + 64 * h;
}

/* The ring as one consumer warpgroup walks it. */
struct Ring {
  uint32_t base;  // shared address of stage 0
  uint64_t *full, *empty;
  int stage, nk;
  uint32_t phase;
  __device__ __forceinline__ void advance() {
    if (++stage == kStages) {
      stage = 0;
      phase ^= 1;
    }
  }
};

/* The single producer thread: every tile of this CTA, K block by K block. */
template <bool SWIGLU>
__device__ __forceinline__ void produce(uint8_t *ring, uint64_t *full, uint64_t *empty, const CUtensorMap *tmA,
                                        const CUtensorMap *tmW, const SwapParams &p, int ntiles, int nk) {
  const uint64_t once = l2_evict_first(), shared = l2_evict_last();
  int stage = 0;
  uint32_t phase = 0;
  MoeReady ready = p.ready;
  for (int v = blockIdx.x; v < ntiles; v += gridDim.x) {
    const SwapTile t = p.t.locate(v);
    ready.wait(t.e);
    const int nw = t.wide || t.pair0 + 1 == p.t.pairs ? 2 : 4;  // W chunks
    const int nr = (t.rows + 63) / 64;                          // boxes of rows
    const int rslot = t.wide ? 2 : 4;
    for (int kb = 0; kb < nk; ++kb) {
      mbar_wait(&empty[stage], phase ^ 1);
      mbar_arrive_expect_tx(&full[stage], (uint32_t)(nw + nr) * kSlot);
      uint8_t *s = ring + stage * kStageBytes;
      for (int j = 0; j < nw; ++j)
        tma_load_3d_hint(s + j * kSlot, tmW, &full[stage], chunk_col<SWIGLU>(t.pair0 + (j >> 1), j & 1, p.up), kb * 64,
                         t.e, once);
      for (int i = 0; i < nr; ++i)
        tma_load_2d_hint(s + (rslot + i) * kSlot, tmA, &full[stage], kb * 64, t.row0 + 64 * i, shared);
      if (++stage == kStages) {
        stage = 0;
        phase ^= 1;
      }
    }
  }
}

template <typename OutT>
__device__ __forceinline__ void put(OutT *q, float v) {
  *q = OutCvt<OutT>::pack(v, v).x;
}

/* A warpgroup's products of its pair for its `nrows` rows (from row0 + rb)
 * into C: accumulator i of thread lt is W column m (+8) of the chunk, row
 * 8 (i / 4) + 2 (lt % 4) + i % 2. */
template <bool SWIGLU, typename OutT>
__device__ __forceinline__ void store(const SwapParams &p, const SwapTile &t, int pair, int lt, int nrows, int rb,
                                      const float (&a0)[64], const float (&a1)[64]) {
  OutT *c = reinterpret_cast<OutT *>(p.c);
  const int m = (lt >> 5) * 16 + ((lt & 31) >> 2);
  const int col0 = (SWIGLU ? 64 : 128) * pair + m;
  const int r0 = t.row0 + rb;
#pragma unroll
  for (int i = 0; i < 64; ++i) {
    const int tn = 8 * (i >> 2) + 2 * (lt & 3) + (i & 1);
    if (tn < nrows) {
      const int row = r0 + tn, col = col0 + 8 * ((i >> 1) & 1);
      const float s = p.scale ? p.scale[row] : 1.f;
      OutT *q = c + (int64_t)row * p.ldc;
      if constexpr (SWIGLU) {
        if (col < p.n) put(q + col, silu(a0[i]) * a1[i] * s);
      } else {
        if (col < p.n) put(q + col, a0[i] * s);
        if (col + 64 < p.n) put(q + col + 64, a1[i] * s);
      }
    }
  }
}

/* The first N / 2 of a warpgroup's 64 accumulators, as wgmma m64nNk16
 * takes them: every width shares the same registers, which keeps ptxas
 * from giving each its own (and spilling). */
template <int N>
__device__ __forceinline__ float (&first(float (&a)[64]))[N / 2] {
  return *reinterpret_cast<float(*)[N / 2]>(&a[0]);
}

/* A tile's main loop with wgmma N = 8 n8 (n8 in 1..16): the K blocks of
 * the tile's stages, W chunks at slots ws and ws + 1, rows at byte offset
 * roff.  One loop per width, the branch taken once per tile (a branch per
 * wgmma would serialise them); every width shares the registers. */
template <bool F16, int N = kNarrowRows>
__device__ __forceinline__ void mainloop(int n8, float (&a0)[64], float (&a1)[64], Ring &r, int ws, uint32_t roff,
                                         bool leader) {
  if constexpr (N > 0) {
    if (n8 != N / 8) return mainloop<F16, N - 8>(n8, a0, a1, r, ws, roff, leader);
    int prev = 0;
    for (int kb = 0; kb < r.nk; ++kb) {
      mbar_wait(&r.full[r.stage], r.phase);
      const uint32_t s = r.base + r.stage * kStageBytes;
      wgmma_fence();
      pin_acc(a0);
      pin_acc(a1);
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        const uint64_t d0 = make_desc(s + ws * kSlot + 16 * 128 * kk, kSlot, 1024);
        const uint64_t d1 = make_desc(s + (ws + 1) * kSlot + 16 * 128 * kk, kSlot, 1024);
        const uint64_t db = make_desc(s + roff + 32 * kk, 16, 1024);
        wgmma::Wgmma<N, F16>::ss_mn(first<N>(a0), d0, db, kb > 0 || kk > 0);
        wgmma::Wgmma<N, F16>::ss_mn(first<N>(a1), d1, db, kb > 0 || kk > 0);
      }
      wgmma_commit();
      pin_acc(a0);
      pin_acc(a1);
      if (kb > 0) {
        wgmma_wait<1>();
        pin_acc(a0);
        pin_acc(a1);
        if (leader) mbar_arrive(&r.empty[prev]);
      }
      prev = r.stage;
      r.advance();
    }
    wgmma_wait<0>();
    pin_acc(a0);
    pin_acc(a1);
    if (leader) mbar_arrive(&r.empty[prev]);
  }
}

/* One tile for a warpgroup with nrows (1..128) rows: main loop, then its
 * products into C. */
template <bool F16, bool SWIGLU, typename OutT>
__device__ __forceinline__ void consume(const SwapParams &p, const SwapTile &t, Ring &r, int ws, uint32_t roff,
                                        int pair, int lt, int nrows, int rb) {
  float a0[64], a1[64];
  mainloop<F16>((nrows + 7) >> 3, a0, a1, r, ws, roff, (lt & 31) == 0);
  store<SWIGLU, OutT>(p, t, pair, lt, nrows, rb, a0, a1);
}

/* A warpgroup without rows in a tile passes its stages on. */
__device__ __forceinline__ void pass(Ring &r, int lt) {
  for (int kb = 0; kb < r.nk; ++kb) {
    mbar_wait(&r.full[r.stage], r.phase);
    if ((lt & 31) == 0) mbar_arrive(&r.empty[r.stage]);
    r.advance();
  }
}

template <bool F16, typename OutT, bool SWIGLU>
__global__ void __launch_bounds__(kThreads, 1)
    mkx_moe_swap_kernel(const __grid_constant__ CUtensorMap tmA, const __grid_constant__ CUtensorMap tmW,
                        const __grid_constant__ SwapParams p) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  uint8_t *ring = reinterpret_cast<uint8_t *>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint64_t *full = reinterpret_cast<uint64_t *>(ring + kStages * kStageBytes);
  uint64_t *empty = full + kStages;
  const int tid = threadIdx.x, wg = tid / 128;
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], kConsumerWGs * 4);  // one arrive per consumer warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    prefetch_tmap(&tmA);
    prefetch_tmap(&tmW);
  }
  named_bar_sync(kBarInit, kThreads);
  const int ntiles = p.t.rows.prefix[p.t.rows.experts];
  const int nk = (p.k + 63) / 64;
  if (wg == 0) {
    setmaxnreg_dec<kProducerRegs>();
    if (tid == 0) produce<SWIGLU>(ring, full, empty, &tmA, &tmW, p, ntiles, nk);
    return;
  }
  setmaxnreg_inc<kConsumerRegs>();
  const int cw = wg - 1, lt = tid & 127;
  Ring r = {smem_u32(ring), full, empty, 0, nk, 0};
  for (int v = blockIdx.x; v < ntiles; v += gridDim.x) {
    const SwapTile t = p.t.locate(v);
    int rb = 0, nrows;
    if (t.wide) {
      const int h = ((t.rows + 1) / 2 + 7) & ~7;
      rb = cw ? h : 0;
      nrows = cw ? t.rows - h : h;
    } else {
      nrows = t.pair0 + cw < p.t.pairs ? t.rows : 0;
    }
    const int ws = t.wide ? 0 : 2 * cw;
    const uint32_t roff = (t.wide ? 2 : 4) * kSlot + rb * 128;
    const int pair = t.pair0 + (t.wide ? 0 : cw);
    if (nrows > 0)
      consume<F16, SWIGLU, OutT>(p, t, r, ws, roff, pair, lt, nrows, rb);
    else
      pass(r, lt);
  }
#endif
}

template <bool F16, typename OutT, bool SWIGLU>
int launch(const mkx_moe_gemm_desc *d, const SwapTiles &tiles, cudaStream_t s) {
  auto kern = mkx_moe_swap_kernel<F16, OutT, SWIGLU>;
  CUtensorMap tmA, tmW;
  int rc = make_tmap(&tmA, d->a, d->ab_type, d->k, d->a_rows, d->lda, 64);
  const int64_t up = d->up_col ? d->up_col : d->n;
  const int64_t wcols = SWIGLU ? up + d->n : d->n;
  const int64_t dims[3] = {wcols, d->k, d->experts}, strides[3] = {1, d->ldw, d->k * d->ldw};
  const uint32_t box[3] = {64, 64, 1};
  if (!rc) rc = make_tmap_nd(&tmW, d->w, d->ab_type, 3, dims, strides, box);
  int sms = 0;
  if (!rc) rc = num_sms(&sms, d->num_ctas);
  if (!rc) rc = smem_attr_once<mkx_moe_swap_kernel<F16, OutT, SWIGLU>>(kSmemBytes);
  if (rc) return rc;
  const SwapParams p = {tiles, moe_ready_of(d), d->c, d->ldc, d->row_scale, (int)d->n, (int)d->k, (int)up};
  kern<<<sms, kThreads, kSmemBytes, s>>>(tmA, tmW, p);
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? 0 : (int)e;
}

}  // namespace

int swap_gemm_run(const mkx_moe_gemm_desc *d, cudaStream_t s) {
  const SwapTiles t = {{d->offsets, d->work, d->experts, (int)d->a_rows, d->gate},
                       (int)cdiv(d->n, d->swiglu ? 64 : 128)};
  const int rc = tile_prefix_run(t, d->work, s);
  if (rc) return rc;
  return with_types(d->ab_type, 0, d->c_type, [&](auto, auto f16, auto out) {
    typedef typename decltype(out)::type OutT;
    constexpr bool F16 = decltype(f16)::value;
    return d->swiglu ? launch<F16, OutT, true>(d, t, s) : launch<F16, OutT, false>(d, t, s);
  });
}

}  // namespace moe
}  // namespace mkx
