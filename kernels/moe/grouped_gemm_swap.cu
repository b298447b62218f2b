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
 * fp8 operands (OpFp8): the same with W K-major (fp8 wgmma reads no
 * transposed operand), K blocks of 128, blocks of 128 rows and at most 64
 * per warpgroup: each K block's products go into sums of their own, added
 * in fp32 times the block's scales, which doubles the accumulators.  A
 * stage is five slots: narrow tiles W in 0-3 and rows in 4, wide tiles W in
 * 0-1 and rows in 2-3.
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

constexpr int kSlot = 64 * 128;  // 64 rows of 128 bytes: a 64 x 64 box of 16-bit elements, 64 x 128 of fp8

/* The operands' kind: K per stage, rows per block and per warpgroup, the ring. */
template <bool F16_>
struct Op16 {
  static constexpr bool FP8 = false, F16 = F16_, E5M2 = false;
  static constexpr int kBK = 64, kBlockRows = 256, kNarrowRows = 128, kSlots = 6, kStages = 4;
};
template <bool E5M2_>
struct OpFp8 {
  static constexpr bool FP8 = true, F16 = false, E5M2 = E5M2_;
  static constexpr int kBK = 128, kBlockRows = 128, kNarrowRows = 64, kSlots = 5, kStages = 5;
};
template <class Op>
constexpr int smem_bytes() {
  static_assert(!(Op::F16 && Op::FP8) && (Op::FP8 || !Op::E5M2), "one kind of operands");
  return Op::kStages * Op::kSlots * kSlot + 1024 + 1024;  // ring, barriers, alignment
}

struct SwapTile {
  int e, row0, rows, pair0;
  bool wide;
};

template <class Op>
struct SwapTiles {
  MoeRows rows;
  int pairs;  // W column pairs
  __device__ __forceinline__ int tiles(int e) const {
    int lo, hi;
    rows.span(e, lo, hi);
    const int n = hi - lo;
    if (n == 0) return 0;
    const int nb = (n + Op::kBlockRows - 1) / Op::kBlockRows, last = n - (nb - 1) * Op::kBlockRows;
    return (nb - 1) * pairs + (last > Op::kNarrowRows ? pairs : (pairs + 1) / 2);
  }
  /* tile v < prefix[E] */
  __device__ __forceinline__ SwapTile locate(int v) const {
    SwapTile t;
    t.e = rows.expert_of(v);
    int lo, hi;
    rows.span(t.e, lo, hi);
    int l = v - rows.prefix[t.e];
    const int b = min(l / pairs, (hi - lo - 1) / Op::kBlockRows);  // only the last block is narrow
    l -= b * pairs;
    t.row0 = lo + b * Op::kBlockRows;
    t.rows = min(Op::kBlockRows, hi - t.row0);
    t.wide = t.rows > Op::kNarrowRows;
    t.pair0 = t.wide ? l : 2 * l;
    return t;
  }
};

template <class Op>
struct SwapParams {
  SwapTiles<Op> t;
  MoeReady ready;
  void *c;
  int64_t ldc;
  const float *scale;
  int n, k, up;
  mkx_moe_fp8_scales fp8;
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
  int stage, nk, stages, stage_bytes;
  uint32_t phase;
  __device__ __forceinline__ void advance() {
    if (++stage == stages) {
      stage = 0;
      phase ^= 1;
    }
  }
};

/* The single producer thread: every tile of this CTA, K block by K block. */
template <class Op, bool SWIGLU>
__device__ __forceinline__ void produce(uint8_t *ring, uint64_t *full, uint64_t *empty, const CUtensorMap *tmA,
                                        const CUtensorMap *tmW, const SwapParams<Op> &p, int ntiles, int nk) {
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
      uint8_t *s = ring + stage * Op::kSlots * kSlot;
      for (int j = 0; j < nw; ++j) {
        const int col = chunk_col<SWIGLU>(t.pair0 + (j >> 1), j & 1, p.up);
        if constexpr (Op::FP8)
          tma_load_3d_hint(s + j * kSlot, tmW, &full[stage], kb * Op::kBK, col, t.e, once);
        else
          tma_load_3d_hint(s + j * kSlot, tmW, &full[stage], col, kb * Op::kBK, t.e, once);
      }
      for (int i = 0; i < nr; ++i)
        tma_load_2d_hint(s + (rslot + i) * kSlot, tmA, &full[stage], kb * Op::kBK, t.row0 + 64 * i, shared);
      if (++stage == Op::kStages) {
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

/* Where a warpgroup's accumulator i lies: thread lt's W column m (+8) of the chunk, row 8 (i / 4)
 * + 2 (lt % 4) + i % 2 of its rows. */
__device__ __forceinline__ int acc_m(int lt, int i) { return (lt >> 5) * 16 + ((lt & 31) >> 2) + 8 * ((i >> 1) & 1); }
__device__ __forceinline__ int acc_row(int lt, int i) { return 8 * (i >> 2) + 2 * (lt & 3) + (i & 1); }

/* A warpgroup's products of its pair for its `nrows` rows (from row0 + rb)
 * into C. */
template <bool SWIGLU, typename OutT, int NA>
__device__ __forceinline__ void store(void *cp, int64_t ldc, const float *scale, int n, const SwapTile &t, int pair,
                                      int lt, int nrows, int rb, const float (&a0)[NA], const float (&a1)[NA]) {
  OutT *c = reinterpret_cast<OutT *>(cp);
  const int col0 = (SWIGLU ? 64 : 128) * pair;
  const int r0 = t.row0 + rb;
#pragma unroll
  for (int i = 0; i < NA; ++i) {
    const int tn = acc_row(lt, i);
    if (tn < nrows) {
      const int row = r0 + tn, col = col0 + acc_m(lt, i);
      const float s = scale ? scale[row] : 1.f;
      OutT *q = c + (int64_t)row * ldc;
      if constexpr (SWIGLU) {
        if (col < n) put(q + col, silu(a0[i]) * a1[i] * s);
      } else {
        if (col < n) put(q + col, a0[i] * s);
        if (col + 64 < n) put(q + col + 64, a1[i] * s);
      }
    }
  }
}

/* The first N / 2 of a warpgroup's NA accumulators, as wgmma m64nNk16 (k32)
 * takes them: every width shares the same registers, which keeps ptxas
 * from giving each its own (and spilling). */
template <int N, int NA>
__device__ __forceinline__ float (&first(float (&a)[NA]))[N / 2] {
  return *reinterpret_cast<float(*)[N / 2]>(&a[0]);
}

/* A tile's main loop with wgmma N = 8 n8 (n8 in 1..16): the K blocks of
 * the tile's stages, W chunks at slots ws and ws + 1, rows at byte offset
 * roff.  One loop per width, the branch taken once per tile (a branch per
 * wgmma would serialise them); every width shares the registers. */
template <bool F16, int N = 128>
__device__ __forceinline__ void mainloop(int n8, float (&a0)[64], float (&a1)[64], Ring &r, int ws, uint32_t roff,
                                         bool leader) {
  if constexpr (N > 0) {
    if (n8 != N / 8) return mainloop<F16, N - 8>(n8, a0, a1, r, ws, roff, leader);
    int prev = 0;
    for (int kb = 0; kb < r.nk; ++kb) {
      mbar_wait(&r.full[r.stage], r.phase);
      const uint32_t s = r.base + r.stage * r.stage_bytes;
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

/* The fp8 scales of a warpgroup's tile: W rows w0 + m (+8) of chunks 0 and 1 (of wrows; those
 * past them, never stored, 0), and its rows from row0 (nrows of them; the others' 0). */
struct Fp8TileScales {
  const mkx_moe_fp8_scales *s;
  int e, w0[2], wrows, row0, nrows, lt;
  __device__ __forceinline__ float w_at(int j, int kb) const {
    if (j >= wrows) return 0.f;
    const int64_t base = (int64_t)e * s->w_e;
    switch (s->w_layout) {
      case MKX_GEMM_SCALE_TENSOR:
        return __ldg(s->w + base);
      case MKX_GEMM_SCALE_ROW:
        return __ldg(s->w + base + (int64_t)j * s->w_col);
      case MKX_GEMM_SCALE_BLOCK:
        return __ldg(s->w + base + (int64_t)(j >> 7) * s->w_col + (int64_t)kb * s->w_kb);
    }
    return 1.f;
  }
  __device__ __forceinline__ float a_at(int tn, int kb) const {
    if (tn >= nrows) return 0.f;
    const int64_t r = row0 + tn;
    switch (s->a_layout) {
      case MKX_GEMM_SCALE_TENSOR:
        return __ldg(s->a);
      case MKX_GEMM_SCALE_ROW:
        return __ldg(s->a + r * s->a_row);
      case MKX_GEMM_SCALE_BLOCK:
        return __ldg(s->a + r * s->a_row + (int64_t)kb * s->a_kb);
    }
    return 1.f;
  }
  /* This thread's scales of K block kb: W's of its rows, A's of its columns (1 unless `all`). */
  template <int N>
  struct Block {
    float sw[2][2], sa[N / 4];
  };
  template <int N>
  __device__ __forceinline__ Block<N> block(int kb, bool all) const {
    Block<N> b;
#pragma unroll
    for (int h = 0; h < 2; ++h) b.sw[h][0] = b.sw[h][1] = 1.f;
#pragma unroll
    for (int g = 0; g < N / 4; ++g) b.sa[g] = 1.f;
    if (all) {
      const int m = acc_m(lt, 0);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        b.sw[h][0] = w_at(w0[h] + m, kb);
        b.sw[h][1] = w_at(w0[h] + m + 8, kb);
      }
#pragma unroll
      for (int g = 0; g < N / 4; ++g) b.sa[g] = a_at(acc_row(lt, 4 * (g >> 1) + (g & 1)), kb);
    }
    return b;
  }
  /* acc_h += part_h times the block's scales */
  template <int NA, int N>
  __device__ __forceinline__ void add(const Block<N> &b, const float (&p0)[NA], const float (&p1)[NA], float (&a0)[NA],
                                      float (&a1)[NA]) const {
#pragma unroll
    for (int i = 0; i < N / 2; ++i) {
      const float f = b.sa[2 * (i >> 2) + (i & 1)];
      a0[i] = fmaf(p0[i], b.sw[0][(i >> 1) & 1] * f, a0[i]);
      a1[i] = fmaf(p1[i], b.sw[1][(i >> 1) & 1] * f, a1[i]);
    }
  }
};

/* The fp8 main loop for N = 8 n8 (n8 in 1..8): per K block wgmma m64nNk32 of both chunks into
 * block sums, then the block's scales (block layout) or none (the others: applied once after
 * the last block) and the sums added into a0, a1. */
template <bool E5M2, int N = 64>
__device__ __forceinline__ void mainloop_fp8(int n8, float (&a0)[32], float (&a1)[32], Ring &r, int ws, uint32_t roff,
                                             bool leader, const Fp8TileScales &sc) {
  if constexpr (N > 0) {
    if (n8 != N / 8) return mainloop_fp8<E5M2, N - 8>(n8, a0, a1, r, ws, roff, leader, sc);
    float p0[32], p1[32];
    const bool block = sc.s->a_layout == MKX_GEMM_SCALE_BLOCK || sc.s->w_layout == MKX_GEMM_SCALE_BLOCK;
    const bool scaled = sc.s->a_layout != MKX_GEMM_SCALE_NONE || sc.s->w_layout != MKX_GEMM_SCALE_NONE;
#pragma unroll
    for (int i = 0; i < 32; ++i) a0[i] = a1[i] = 0.f;
    for (int kb = 0; kb < r.nk; ++kb) {
      mbar_wait(&r.full[r.stage], r.phase);
      const uint32_t s = r.base + r.stage * r.stage_bytes;
      wgmma_fence();
      pin_acc(p0);
      pin_acc(p1);
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        const uint64_t d0 = make_desc(s + ws * kSlot + 32 * kk, 16, 1024);
        const uint64_t d1 = make_desc(s + (ws + 1) * kSlot + 32 * kk, 16, 1024);
        const uint64_t db = make_desc(s + roff + 32 * kk, 16, 1024);
        wgmma::WgmmaFp8<N, E5M2>::ss(first<N>(p0), d0, db, kk > 0);
        wgmma::WgmmaFp8<N, E5M2>::ss(first<N>(p1), d1, db, kk > 0);
      }
      wgmma_commit();
      pin_acc(p0);
      pin_acc(p1);
      // the block's scales read while its wgmma runs (the wait is a memory clobber)
      const auto f = sc.template block<N>(kb, block);
      wgmma_wait<0>();
      pin_acc(p0);
      pin_acc(p1);
      if (leader) mbar_arrive(&r.empty[r.stage]);
      r.advance();
      sc.template add<32, N>(f, p0, p1, a0, a1);
    }
    if (!block && scaled) {
      // the scales that do not change along K, once: block 0's
#pragma unroll
      for (int i = 0; i < 32; ++i) p0[i] = a0[i], p1[i] = a1[i], a0[i] = a1[i] = 0.f;
      sc.template add<32, N>(sc.template block<N>(0, true), p0, p1, a0, a1);
    }
  }
}

/* One tile for a warpgroup with nrows (1..kNarrowRows) rows: main loop, then its products into
 * C. */
template <class Op, bool SWIGLU, typename OutT>
__device__ __forceinline__ void consume(const SwapParams<Op> &p, const SwapTile &t, Ring &r, int ws, uint32_t roff,
                                        int pair, int lt, int nrows, int rb) {
  const bool leader = (lt & 31) == 0;
  if constexpr (Op::FP8) {
    float a0[32], a1[32];
    const Fp8TileScales sc = {&p.fp8,
                              t.e,
                              {chunk_col<SWIGLU>(pair, 0, p.up), chunk_col<SWIGLU>(pair, 1, p.up)},
                              SWIGLU ? p.up + p.n : p.n,
                              t.row0 + rb,
                              nrows,
                              lt};
    mainloop_fp8<Op::E5M2>((nrows + 7) >> 3, a0, a1, r, ws, roff, leader, sc);
    store<SWIGLU, OutT>(p.c, p.ldc, p.scale, p.n, t, pair, lt, nrows, rb, a0, a1);
  } else {
    float a0[64], a1[64];
    mainloop<Op::F16>((nrows + 7) >> 3, a0, a1, r, ws, roff, leader);
    store<SWIGLU, OutT>(p.c, p.ldc, p.scale, p.n, t, pair, lt, nrows, rb, a0, a1);
  }
}

/* A warpgroup without rows in a tile passes its stages on. */
__device__ __forceinline__ void pass(Ring &r, int lt) {
  for (int kb = 0; kb < r.nk; ++kb) {
    mbar_wait(&r.full[r.stage], r.phase);
    if ((lt & 31) == 0) mbar_arrive(&r.empty[r.stage]);
    r.advance();
  }
}

template <class Op, typename OutT, bool SWIGLU>
__global__ void __launch_bounds__(kThreads, 1)
    mkx_moe_swap_kernel(const __grid_constant__ CUtensorMap tmA, const __grid_constant__ CUtensorMap tmW,
                        const __grid_constant__ SwapParams<Op> p) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  constexpr int kStageBytes = Op::kSlots * kSlot;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  uint8_t *ring = reinterpret_cast<uint8_t *>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint64_t *full = reinterpret_cast<uint64_t *>(ring + Op::kStages * kStageBytes);
  uint64_t *empty = full + Op::kStages;
  const int tid = threadIdx.x, wg = tid / 128;
  if (tid == 0) {
    for (int s = 0; s < Op::kStages; ++s) {
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
  const int nk = (p.k + Op::kBK - 1) / Op::kBK;
  if (wg == 0) {
    setmaxnreg_dec<kProducerRegs>();
    if (tid == 0) produce<Op, SWIGLU>(ring, full, empty, &tmA, &tmW, p, ntiles, nk);
    return;
  }
  setmaxnreg_inc<kConsumerRegs>();
  const int cw = wg - 1, lt = tid & 127;
  Ring r = {smem_u32(ring), full, empty, 0, nk, Op::kStages, kStageBytes, 0};
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
      consume<Op, SWIGLU, OutT>(p, t, r, ws, roff, pair, lt, nrows, rb);
    else
      pass(r, lt);
  }
#endif
}

template <class Op, typename OutT, bool SWIGLU>
int launch(const mkx_moe_gemm_desc *d, const SwapTiles<Op> &tiles, cudaStream_t s) {
  auto kern = mkx_moe_swap_kernel<Op, OutT, SWIGLU>;
  CUtensorMap tmA, tmW;
  int rc = make_tmap(&tmA, d->a, d->ab_type, d->k, d->a_rows, d->lda, 64);
  const int64_t up = d->up_col ? d->up_col : d->n;
  const int64_t wcols = SWIGLU ? up + d->n : d->n;
  if (!rc && Op::FP8) {  // [E][wcols][ldw], K contiguous
    const int64_t dims[3] = {d->k, wcols, d->experts}, strides[3] = {1, d->ldw, wcols * d->ldw};
    const uint32_t box[3] = {128, 64, 1};
    rc = make_tmap_nd(&tmW, d->w, d->ab_type, 3, dims, strides, box);
  } else if (!rc) {  // [E][k][ldw], N contiguous
    const int64_t dims[3] = {wcols, d->k, d->experts}, strides[3] = {1, d->ldw, d->k * d->ldw};
    const uint32_t box[3] = {64, 64, 1};
    rc = make_tmap_nd(&tmW, d->w, d->ab_type, 3, dims, strides, box);
  }
  int sms = 0;
  if (!rc) rc = num_sms(&sms, d->num_ctas);
  if (!rc) rc = smem_attr_once<mkx_moe_swap_kernel<Op, OutT, SWIGLU>>(smem_bytes<Op>());
  if (rc) return rc;
  const SwapParams<Op> p = {tiles, moe_ready_of(d), d->c, d->ldc, d->row_scale, (int)d->n, (int)d->k, (int)up, d->fp8};
  kern<<<sms, kThreads, smem_bytes<Op>(), s>>>(tmA, tmW, p);
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? 0 : (int)e;
}

template <class Op>
int run_op(const mkx_moe_gemm_desc *d, cudaStream_t s) {
  const SwapTiles<Op> t = {{d->offsets, d->work, d->experts, (int)d->a_rows, d->gate},
                           (int)cdiv(d->n, d->swiglu ? 64 : 128)};
  const int rc = tile_prefix_run(t, d->work, s);
  if (rc) return rc;
  return with_types(MKX_GEMM_BF16, 0, d->c_type, [&](auto, auto, auto out) {
    typedef typename decltype(out)::type OutT;
    return d->swiglu ? launch<Op, OutT, true>(d, t, s) : launch<Op, OutT, false>(d, t, s);
  });
}

}  // namespace

int swap_gemm_run(const mkx_moe_gemm_desc *d, cudaStream_t s) {
  switch (d->ab_type) {
    case MKX_GEMM_E4M3:
      return run_op<OpFp8<false>>(d, s);
    case MKX_GEMM_E5M2:
      return run_op<OpFp8<true>>(d, s);
    case MKX_GEMM_FP16:
      return run_op<Op16<true>>(d, s);
    default:
      return run_op<Op16<false>>(d, s);
  }
}

}  // namespace moe
}  // namespace mkx
