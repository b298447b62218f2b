/*
 * MKX Hopper attention engine (sm_90a): device side.
 *
 * One CTA per SM, persistent over query tiles of one (batch, query head),
 * 64 rows per consumer warpgroup (Config: 2 or 3 of them, 384 or 512
 * threads):
 *   warpgroup 0      producer: setmaxnreg 40 (32); one thread loads the query
 *                    tile (TMA, 128B swizzle, one box per 64 columns of the
 *                    head dim) and then, for each key block the tile may
 *                    see, K and V into a STAGES-deep ring (separate "full"
 *                    and "empty" mbarriers for K and V, so S = Q K^T of a
 *                    block starts before its V lands).  Chunks of other
 *                    ranks are loaded once their ready flag says so.
 *   warpgroups 1..   consumers (setmaxnreg 232, or 160 with 3), 64 query
 *                    rows each:
 *                    S = Q K^T (wgmma, both operands in shared memory),
 *                    online softmax in fp32 registers (exp2 with the scale
 *                    folded in), P converted in registers and fed as the A
 *                    operand of O += P V (wgmma, A from registers, V
 *                    MN-major).  The next block's Q K^T is issued before
 *                    this block's softmax so the tensor cores and the
 *                    exponentials overlap; O is rescaled once the P V of
 *                    the previous block has completed.
 * Every role walks the same tiles (Schedule) and, per tile, the same key
 * blocks (Blocks), so the rings' phases agree without any other message.
 *
 * Shared memory (1024-aligned): Q (D/64 boxes of BM x 128 bytes), K
 * stages, V stages (D/64 boxes of BN x 128 bytes each), O (one buffer of
 * D/64 boxes of 64 x 128 bytes per consumer warpgroup), then mbarriers.
 */
#pragma once

#include <cuda.h>
#include <math.h>
#include <stdint.h>
#include "attention/attn_engine.h"
#include "attention/attn_positions.h"
#include "attention/attn_timeline.cuh"
#include "common/wgmma_ops.cuh"
#include "gemm/gemm_engine.cuh"
#include "fused/flags.cuh"

namespace mkx {
namespace attn {

using gemm::make_desc;
using gemm::pin_acc;
using gemm::prefetch_tmap;
using gemm::setmaxnreg_dec;
using gemm::setmaxnreg_inc;
using gemm::wgmma_commit;
using gemm::wgmma_fence;
using gemm::wgmma_wait;
using ptx::fence_proxy_async_smem;
using ptx::mbar_arrive;
using ptx::mbar_arrive_expect_tx;
using ptx::mbar_done;
using ptx::mbar_init;
using ptx::mbar_wait;
using ptx::smem_u32;
using ptx::tma_load_4d;
using ptx::tma_load_5d;
using ptx::tma_store_4d;
using wgmma::Wgmma;

/* WGS consumer warpgroups of 64 query rows each (2, or 3 where the
 * registers allow: head dim 64 with 128 keys per block), and the register
 * split of setmaxnreg for each (64K registers in all: 40 + 2 x 232 or
 * 32 + 3 x 160 per thread of a warpgroup). */
template <int D_, int BN_, int STAGES_, bool FP16_, int WGS_ = 2>
struct Config {
  static constexpr int D = D_;  // head dim the kernel computes (the real one is zero-padded up)
  static constexpr int BN = BN_;
  static constexpr int STAGES = STAGES_;
  static constexpr bool FP16 = FP16_;
  static constexpr int WGS = WGS_;
  static constexpr int BM = 64 * WGS;  // query rows per tile
  static constexpr int THREADS = 128 * (1 + WGS);
  static constexpr int CONSUMER_WARPS = 4 * WGS;
  static constexpr int PRODUCER_REGS = WGS == 2 ? 40 : 32;
  static constexpr int CONSUMER_REGS = WGS == 2 ? 232 : 160;
  static constexpr int ATOMS = D / 64;  // 128-byte swizzle atoms across the head dim
  static constexpr uint32_t Q_BYTES = BM * D * 2;
  static constexpr uint32_t KV_BYTES = BN * D * 2;
  static constexpr uint32_t BAR_BYTES = 1024;
  static constexpr uint32_t O_BYTES = BM * D * 2;  // one 64-row buffer per consumer warpgroup
  static constexpr uint32_t SMEM_BYTES = Q_BYTES + 2 * STAGES * KV_BYTES + O_BYTES + BAR_BYTES + 1024;
  static_assert(D == 64 || D == 128, "head dim 64 or 128");
  static_assert(WGS == 2 || (WGS == 3 && D == 64 && BN == 128), "3 warpgroups: head dim 64, 128 keys");
  static_assert(BN % 16 == 0 && BN <= 256, "key block");
  static_assert(SMEM_BYTES <= 232448, "too much shared memory");
};

/* Kernel arguments besides the tensor maps. */
struct Params {
  int batch, seq_q, seq_k, heads_q, heads_kv, head_dim;
  int group;  // heads_q / heads_kv
  int causal, layout, nchunks, self;
  int8_t order[MKX_ATTN_MAX_CHUNKS];  // chunks in the order the walk takes them, own first
  float scale_log2;                   // scale * log2(e)
  float scale;
  void *o;
  float *lse;
  const int *ready;
  const int *ready_target;
  unsigned net_mask;  // chunks over the network (mkx_attn_desc)
  const int *net_ready;
  int net_ready_stride;
  const int *net_target;
  int *net_claim;
  int *tile_counter;  // NULL: static round robin; else zero at launch, one atomicAdd per tile
  int section;        // (batch, head) pairs per section of the tile order
  int no_turns;       // consumer warpgroups issue their products without taking turns
  mkx_fused_sync sync;
};

/* Global sequence position of local position i of chunk (rank) r, and
 * the keys of chunk c a query at position qpos sees (attn_positions.h). */
__device__ __forceinline__ int64_t position(const Params &p, int r, int i) {
  return mkx_attn_pos(p.layout, p.nchunks, p.seq_k, r, i);
}
__device__ __forceinline__ int visible_keys(const Params &p, int c, int64_t qpos) {
  return mkx_attn_visible(p.layout, p.nchunks, p.seq_k, c, qpos);
}

/* Tile t of the walk: (batch, query head, row block).  The (batch, head)
 * pairs go in sections small enough that their keys and values stay in L2
 * while the section's tiles run.  Without the mask a section's heads go
 * one after the other; with it every head's longest row block of the
 * section first, then the next longest (longest processing time first:
 * the last tiles are the short ones). */
struct Tile {
  int b, hq, mb;
};
struct Schedule {
  int nm, heads_q, bh, tiles, section;
  bool causal;
  __device__ __forceinline__ Tile get(int t) const {
    const int per = section * nm;
    const int sec = t / per;
    const int first = sec * section;
    const int n = min(section, bh - first);
    const int r = t - sec * per;
    int pair, mb;
    if (causal) {
      mb = nm - 1 - r / n;
      pair = first + r % n;
    } else {
      pair = first + r / nm;
      mb = r % nm;
    }
    Tile x;
    x.mb = mb;
    x.b = pair / heads_q;
    x.hq = pair - x.b * heads_q;
    return x;
  }
};

/* The key blocks a query tile sees: chunks in the order of p.order (own
 * first, then as they arrive), in each the blocks that some row of the
 * tile may see. */
template <int BN, int BM>
struct Blocks {
  int qmax_row;  // last query row of the tile (local)
  int k;         // chunk index in ring order
  int c;         // its chunk
  int nb, nvis;  // block within chunk, visible blocks of chunk
  __device__ __forceinline__ int visible(const Params &p, int chunk) const {
    const int keys = p.causal ? visible_keys(p, chunk, position(p, p.self, qmax_row)) : p.seq_k;
    return (keys + BN - 1) / BN;
  }
  /* position on the first block; false: the tile sees no key */
  __device__ __forceinline__ bool first(const Params &p, int mb) {
    qmax_row = min(p.seq_q, (mb + 1) * BM) - 1;
    k = -1;
    nvis = 0;
    nb = 0;
    return next_chunk(p);
  }
  __device__ __forceinline__ bool next_chunk(const Params &p) {
    for (++k; k < p.nchunks; ++k) {
      c = p.order[k];
      nvis = visible(p, c);
      nb = 0;
      if (nvis > 0) return true;
    }
    return false;
  }
  __device__ __forceinline__ bool next(const Params &p) {
    if (++nb < nvis) return true;
    return next_chunk(p);
  }
  __device__ __forceinline__ int total(const Params &p) const {
    int n = 0;
    for (int kk = 0; kk < p.nchunks; ++kk) n += visible(p, p.order[kk]);
    return n;
  }
};

__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

/* Two floats as the packed 16-bit pair of a wgmma A fragment. */
template <bool FP16>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  uint32_t r;
  if constexpr (FP16) {
    __half2 h = __floats2half2_rn(lo, hi);
    r = *reinterpret_cast<uint32_t *>(&h);
  } else {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    r = *reinterpret_cast<uint32_t *>(&h);
  }
  return r;
}

/* Ring position of the producer and the consumers (same walk). */
struct Ring {
  int stage = 0;
  uint32_t phase = 0;
  template <int STAGES>
  __device__ __forceinline__ void advance() {
    if (++stage == STAGES) {
      stage = 0;
      phase ^= 1;
    }
  }
};

/* ------------------------------------------------------------------------ */
/* producer                                                                 */
/* ------------------------------------------------------------------------ */

/* Shared state of the CTA's roles: the mbarriers and the tile in hand.
 * The producer writes `tile` (the next tile's index, -1 at the end) before
 * it arms q_full; the consumers read it after q_full and before they
 * release q_empty. */
struct Shared {
  uint64_t q_full, q_empty;
  int tile;
};

/* Until chunk c may be read (bounded; a failure is recorded and the
 * caller goes on).  A chunk over the network: the first CTA here reads its
 * signal word across PCIe and raises ready[c]; the others wait for that
 * in device memory, since every CTA polling host memory slows the landing
 * it waits for. */
__device__ __forceinline__ void wait_chunk(const Params &p, int c, int target, int net_target, int mb) {
  const int *flag = p.ready + c;
  if ((p.net_mask >> c & 1u) && !fused::geq(fused::ld_acquire(flag), target) && atomicCAS(p.net_claim + c, 0, 1) == 0) {
    if (fused::wait_geq(p.net_ready + c * p.net_ready_stride, net_target, p.sync, c, mb, MKX_FUSED_AT_KV_CHUNK))
      fused::st_release(const_cast<int *>(flag), target);
    return;
  }
  fused::wait_geq(flag, target, p.sync, c, mb, MKX_FUSED_AT_KV_CHUNK);
}

__device__ __forceinline__ int next_tile(const Params &p, int t) {
  return p.tile_counter ? atomicAdd(p.tile_counter, 1) : t + (int)gridDim.x;
}

template <class Cfg>
__device__ __forceinline__ void produce(const Params &p, const Schedule &sched, const CUtensorMap *tmQ,
                                        const CUtensorMap *tmK, const CUtensorMap *tmV, const CUtensorMap *tmKr,
                                        const CUtensorMap *tmVr, uint8_t *sQ, uint8_t *sK, uint8_t *sV, Shared *sh,
                                        uint64_t *k_full, uint64_t *k_empty, uint64_t *v_full, uint64_t *v_empty) {
  constexpr int BN = Cfg::BN;
  Ring ring;
  uint32_t q_phase = 0;
  uint32_t ready_seen = 0;  // chunks whose ready flag was seen (bit per chunk)
  const int target = p.nchunks > 1 ? *p.ready_target : 0;
  const int net_target = p.net_mask ? *p.net_target : 0;
  int t = p.tile_counter ? atomicAdd(p.tile_counter, 1) : (int)blockIdx.x;
  for (;; t = next_tile(p, t)) {
    mbar_wait(&sh->q_empty, q_phase ^ 1);
    q_phase ^= 1;
    if (t >= sched.tiles) {
      *(volatile int *)&sh->tile = -1;
      mbar_arrive(&sh->q_full);
      break;
    }
    *(volatile int *)&sh->tile = t;
    const Tile tile = sched.get(t);
    const int hk = tile.hq / p.group;
    Blocks<BN, Cfg::BM> blk;
    const bool any = blk.first(p, tile.mb);
    mbar_arrive_expect_tx(&sh->q_full, Cfg::Q_BYTES);
#pragma unroll
    for (int a = 0; a < Cfg::ATOMS; ++a)
      tma_load_4d(sQ + a * (Cfg::BM * 128), tmQ, &sh->q_full, a * 64, tile.hq, tile.mb * Cfg::BM, tile.b);
    if (!any) continue;
    do {
      const bool own = blk.c == p.self;
      if (!own && !(ready_seen >> blk.c & 1)) {
        wait_chunk(p, blk.c, target, net_target, tile.mb);
        asm volatile("fence.proxy.async.global;" ::: "memory");
        ready_seen |= 1u << blk.c;
      }
      const CUtensorMap *mk = own ? tmK : tmKr;
      const CUtensorMap *mv = own ? tmV : tmVr;
      const int cc = own ? 0 : blk.c;
      const int row = blk.nb * BN;
      mbar_wait(&k_empty[ring.stage], ring.phase ^ 1);
      mbar_arrive_expect_tx(&k_full[ring.stage], Cfg::KV_BYTES);
      uint8_t *dk = sK + ring.stage * Cfg::KV_BYTES;
#pragma unroll
      for (int a = 0; a < Cfg::ATOMS; ++a)
        tma_load_5d(dk + a * (BN * 128), mk, &k_full[ring.stage], a * 64, hk, row, tile.b, cc);
      mbar_wait(&v_empty[ring.stage], ring.phase ^ 1);
      mbar_arrive_expect_tx(&v_full[ring.stage], Cfg::KV_BYTES);
      uint8_t *dv = sV + ring.stage * Cfg::KV_BYTES;
#pragma unroll
      for (int a = 0; a < Cfg::ATOMS; ++a)
        tma_load_5d(dv + a * (BN * 128), mv, &v_full[ring.stage], a * 64, hk, row, tile.b, cc);
      ring.advance<Cfg::STAGES>();
    } while (blk.next(p));
  }
}

/* ------------------------------------------------------------------------ */
/* consumers                                                                */
/* ------------------------------------------------------------------------ */

/* Row and column of accumulator i of thread tid (0..127) of a warpgroup's
 * 64 x N result: rows warp*16 + lane/4 (+8), columns 8*(i/4) + 2*(lane%4)
 * (+1). */
__device__ __forceinline__ int acc_row(int tid, int half) { return (tid >> 5) * 16 + ((tid & 31) >> 2) + half * 8; }
__device__ __forceinline__ int acc_col(int tid, int i) { return (i >> 2) * 8 + (tid & 3) * 2 + (i & 1); }

/* x, known to the compiler as the same in every lane: descriptors made
 * from it stay in uniform registers instead of being moved there before
 * every wgmma. */
__device__ __forceinline__ uint32_t warp_uniform(uint32_t x) { return __shfl_sync(0xffffffffu, x, 0); }

/* Descriptors: the shared-memory address sits in the low bits in units
 * of 16 bytes, so a descriptor of base + off is the base's plus off / 16
 * (every address here is below 256 KB: the field cannot carry over). */
__device__ __forceinline__ uint64_t desc_at(uint64_t base, uint32_t off) { return base + (off >> 4); }

/* S = Q K^T for this warpgroup's 64 rows: D/16 wgmmas, K-major operands
 * (dq, dk: descriptors of the warpgroup's Q rows and of the K stage). */
template <class Cfg>
__device__ __forceinline__ void issue_qk(float (&s)[Cfg::BN / 2], uint64_t dq, uint64_t dk) {
#pragma unroll
  for (int kk = 0; kk < Cfg::D / 16; ++kk) {
    const uint32_t off = 32 * (kk & 3);
    const uint64_t da = desc_at(dq, (kk >> 2) * (Cfg::BM * 128) + off);
    const uint64_t db = desc_at(dk, (kk >> 2) * (Cfg::BN * 128) + off);
    Wgmma<Cfg::BN, Cfg::FP16>::template ss<0>(s, da, db, kk > 0);
  }
}

/* O += P V: BN/16 wgmmas, P from registers, V [key][head dim] MN-major. */
template <class Cfg>
__device__ __forceinline__ void issue_pv(float (&o)[Cfg::D / 2], const uint32_t (&pf)[Cfg::BN / 16][4], uint64_t dv) {
#pragma unroll
  for (int kk = 0; kk < Cfg::BN / 16; ++kk) Wgmma<Cfg::D, Cfg::FP16>::rs(o, pf[kk], desc_at(dv, kk * (16 * 128)), 1);
}

/* The keys of chunk c each of this thread's two rows sees (a prefix of
 * the chunk: visible_keys), set when the walk enters the chunk. */
__device__ __forceinline__ void row_limits(const Params &p, int c, int tid, int row0, int (&lim)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h)
    lim[h] = p.causal ? visible_keys(p, c, position(p, p.self, row0 + acc_row(tid, h))) : p.seq_k;
}

/* Set the scores of keys this thread's rows may not see to -inf, in the
 * block of keys from col0 on.  Per thread: rows in one warp may differ. */
template <class Cfg>
__device__ __forceinline__ void mask_block(float (&s)[Cfg::BN / 2], int tid, const int (&lim)[2], int col0) {
  if (col0 + Cfg::BN <= min(lim[0], lim[1])) return;
  const int cb = (tid & 3) * 2;
  const int l0 = lim[0] - col0, l1 = lim[1] - col0;
#pragma unroll
  for (int i = 0; i < Cfg::BN / 2; ++i)
    if ((i >> 2) * 8 + cb + (i & 1) >= ((i >> 1) & 1 ? l1 : l0)) s[i] = -INFINITY;
}

/* Row max over this thread's scores and its 3 partner lanes (same rows). */
template <int N>
__device__ __forceinline__ void row_max(const float (&s)[N], float (&mx)[2]) {
  /* four independent chains per row: the reduction is latency, not work */
  float part[2][4];
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int j = 0; j < 4; ++j) part[h][j] = mx[h];
#pragma unroll
  for (int i = 0; i < N; ++i) {
    float &a = part[(i >> 1) & 1][((i >> 2) & 1) * 2 + (i & 1)];
    a = fmaxf(a, s[i]);
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    mx[h] = fmaxf(fmaxf(part[h][0], part[h][1]), fmaxf(part[h][2], part[h][3]));
    mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffff, mx[h], 1));
    mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffff, mx[h], 2));
  }
}

/* Online softmax of one block: m (raw score units) moves to the new row
 * max, s becomes exp2(scale_log2 * (s - m)), rowsum gets this thread's
 * share; alpha: the factor the old O and l are scaled by. */
template <int N>
__device__ __forceinline__ void softmax_block(float (&s)[N], float (&m)[2], float (&alpha)[2], float (&rowsum)[2],
                                              float scale_log2) {
  float mx[2] = {m[0], m[1]};
  row_max<N>(s, mx);
  float neg[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float use = mx[h] == -INFINITY ? 0.f : mx[h];  // a row with nothing visible yet
    alpha[h] = ex2((m[h] - use) * scale_log2);
    neg[h] = -use * scale_log2;
    m[h] = mx[h];
  }
  float part[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const int h = (i >> 1) & 1;
    s[i] = ex2(fmaf(s[i], scale_log2, neg[h]));
    part[h][((i >> 2) & 1) * 2 + (i & 1)] += s[i];
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) rowsum[h] = (part[h][0] + part[h][1]) + (part[h][2] + part[h][3]);
}

/* P as wgmma A fragments: 16 key columns per k step, the accumulator
 * layout of S taken pairwise. */
template <class Cfg>
__device__ __forceinline__ void to_fragments(const float (&s)[Cfg::BN / 2], uint32_t (&pf)[Cfg::BN / 16][4]) {
#pragma unroll
  for (int kk = 0; kk < Cfg::BN / 16; ++kk) {
    pf[kk][0] = pack2<Cfg::FP16>(s[8 * kk + 0], s[8 * kk + 1]);
    pf[kk][1] = pack2<Cfg::FP16>(s[8 * kk + 2], s[8 * kk + 3]);
    pf[kk][2] = pack2<Cfg::FP16>(s[8 * kk + 4], s[8 * kk + 5]);
    pf[kk][3] = pack2<Cfg::FP16>(s[8 * kk + 6], s[8 * kk + 7]);
  }
}

/* The warpgroup's 64 rows of O (times inv) into its shared buffer sO
 * (D/64 boxes of 64 rows x 128 bytes, 128-byte swizzle) and out by TMA:
 * the tensor map clips rows past seq_q and columns past head_dim.  The
 * buffer is rewritten only once the previous tile's store has read it. */
template <class Cfg>
__device__ __forceinline__ void store_o_tma(const Tile &tile, int row0, int cw, int tid, const float (&o)[Cfg::D / 2],
                                            const float (&inv)[2], uint8_t *sO, const CUtensorMap *tmO) {
  const int bar = 1 + Cfg::WGS + cw;  // after the turns' barriers
  const uint32_t base = smem_u32(sO);
  if (tid == 0) gemm::bulk_wait_read<0>();
  gemm::named_bar_sync(bar, 128);
  const int r = acc_row(tid, 0);
  const int cb = (tid & 3) * 4;
#pragma unroll
  for (int q = 0; q < Cfg::D / 8; ++q) {
    const uint32_t box = base + (q >> 3) * (64 * 128);
    const int bcol = (q & 7) * 16 + cb;
    gemm::st_shared_b32(gemm::swizzled_128b(box, r, bcol), pack2<Cfg::FP16>(o[4 * q] * inv[0], o[4 * q + 1] * inv[0]));
    gemm::st_shared_b32(gemm::swizzled_128b(box, r + 8, bcol),
                        pack2<Cfg::FP16>(o[4 * q + 2] * inv[1], o[4 * q + 3] * inv[1]));
  }
  fence_proxy_async_smem();
  gemm::named_bar_sync(bar, 128);
  if (tid == 0) {
#pragma unroll
    for (int a = 0; a < Cfg::ATOMS; ++a) tma_store_4d(tmO, sO + a * (64 * 128), a * 64, tile.hq, row0, tile.b);
    gemm::bulk_commit();
  }
}

/* O /= l, stored in the output type at rows < seq_q, columns < head_dim;
 * LSE = scale * m + ln(l), or O = 0 and LSE = -inf where nothing was
 * visible. */
template <class Cfg>
__device__ __forceinline__ void epilogue(const Params &p, const Tile &tile, int row0, int cw, int tid,
                                         float (&o)[Cfg::D / 2], const float (&m)[2], float (&l)[2], uint8_t *sO,
                                         const CUtensorMap *tmO) {
  float inv[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] += __shfl_xor_sync(0xffffffff, l[h], 1);
    l[h] += __shfl_xor_sync(0xffffffff, l[h], 2);
    inv[h] = l[h] > 0.f ? 1.f / l[h] : 0.f;
  }
  store_o_tma<Cfg>(tile, row0, cw, tid, o, inv, sO, tmO);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int i = row0 + acc_row(tid, h);
    if (i >= p.seq_q) continue;
    if (p.lse && (tid & 3) == 0)
      p.lse[((int64_t)tile.b * p.heads_q + tile.hq) * p.seq_q + i] =
          l[h] > 0.f ? m[h] * p.scale + logf(l[h]) : -INFINITY;
  }
}

/* Turns of the consumer warpgroups (named barrier 1 + w is warpgroup w's
 * turn): a warpgroup issues its matrix products only in its turn and then
 * hands the turn to the next, so one warpgroup's softmax runs while the
 * others' products keep the tensor cores busy.  Every warpgroup walks the
 * same tiles and blocks, so they take the same number of turns. */
struct Turns {
  bool on;
  int cw, next;
  __device__ __forceinline__ void wait() const {
    if (on) gemm::named_bar_sync(1 + cw, 256);
  }
  __device__ __forceinline__ void pass() const {
    if (on) asm volatile("bar.arrive %0, %1;" ::"r"(1 + next), "r"(256) : "memory");
  }
};

/* What a consumer warpgroup carries from tile to tile: its descriptors
 * (its Q rows, the K and V rings), the rings' barriers and position, its
 * turn. */
struct Walk {
  uint64_t dq, dk0, dv0;
  Shared *sh;
  uint64_t *k_full, *k_empty, *v_full, *v_empty;
  Ring ring;
  Turns turn;
  int tid;
  bool leader;
  bool first_tile;  // for the timeline (attn_timeline.cuh)
  __device__ __forceinline__ void stamp(int it, Step s) const { step(first_tile, turn.cw, tid, it, s); }
};

/* Waits for the P V in flight (the last wgmma group), then O and l
 * follow the moved row maxima (alpha) and take this block's sums; once
 * the maxima settle, most blocks leave O alone.  The wait is inside each
 * branch because ptxas hoists a wgmma wait to the top of its basic block:
 * before the branch, it would wait ahead of the softmax it should
 * overlap. */
template <int D>
__device__ __forceinline__ void wait_pv_rescale(float (&o)[D / 2], float (&l)[2], const float (&alpha)[2],
                                                const float (&rowsum)[2]) {
  if (__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) {
    wgmma_wait<0>();
    pin_acc(o);
#pragma unroll
    for (int i = 0; i < D / 2; ++i) o[i] *= alpha[(i >> 1) & 1];
  } else {
    wgmma_wait<0>();
    pin_acc(o);
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) l[h] = l[h] * alpha[h] + rowsum[h];
}

/* The key blocks of one tile: the next block's Q K^T is issued with this
 * one's P V, before this block's softmax. */
template <class Cfg>
__device__ __forceinline__ void blocks_overlapped(const Params &p, Walk &w, Blocks<Cfg::BN, Cfg::BM> &blk, int row0,
                                                  int total, float (&o)[Cfg::D / 2], float (&m)[2], float (&l)[2]) {
  constexpr int BN = Cfg::BN;
  Ring &ring = w.ring;
  float s[BN / 2];
  uint32_t pf[BN / 16][4];
  float alpha[2], rowsum[2];
  /* block 0: S, softmax, P */
  mbar_wait(&w.k_full[ring.stage], ring.phase);
  w.turn.wait();
  wgmma_fence();
  issue_qk<Cfg>(s, w.dq, desc_at(w.dk0, warp_uniform(ring.stage * Cfg::KV_BYTES)));
  wgmma_commit();
  w.turn.pass();
  wgmma_wait<0>();
  pin_acc(s);
  if (w.leader) mbar_arrive(&w.k_empty[ring.stage]);
  int lim[2];
  row_limits(p, blk.c, w.tid, row0, lim);
  mask_block<Cfg>(s, w.tid, lim, blk.nb * BN);
  softmax_block<BN / 2>(s, m, alpha, rowsum, p.scale_log2);
  l[0] = rowsum[0];
  l[1] = rowsum[1];
  to_fragments<Cfg>(s, pf);
  Ring prev = ring;
  ring.advance<Cfg::STAGES>();
  /* With two warpgroups, each block's place in the walk and whether the
   * next iteration's K and V have landed (then it need not wait) are
   * found while Q K^T runs; three warpgroups (160 registers) would spill
   * the state, and take the walk's next step first as they did. */
  constexpr bool early = Cfg::WGS == 2;
  bool landed = false;  // K and V of this iteration seen in shared memory
  auto walk_on = [&] {
    blk.next(p);
    if (blk.nb == 0) row_limits(p, blk.c, w.tid, row0, lim);
  };
  for (int it = 1; it < total; ++it) {
    w.stamp(it, STEP_TOP);
    if (!early) walk_on();
    if (!landed) {
      mbar_wait(&w.k_full[ring.stage], ring.phase);
      mbar_wait(&w.v_full[prev.stage], prev.phase);
    }
    w.stamp(it, STEP_LANDED);
    w.turn.wait();
    w.stamp(it, STEP_TURN);
    wgmma_fence();
    issue_qk<Cfg>(s, w.dq, desc_at(w.dk0, warp_uniform(ring.stage * Cfg::KV_BYTES)));
    wgmma_commit();
    issue_pv<Cfg>(o, pf, desc_at(w.dv0, warp_uniform(prev.stage * Cfg::KV_BYTES)));
    wgmma_commit();
    w.turn.pass();
    w.stamp(it, STEP_ISSUED);
    if (early) {
      walk_on();
      if (it + 1 < total) {
        Ring next = ring;
        next.advance<Cfg::STAGES>();
        landed = mbar_done(&w.k_full[next.stage], next.phase) && mbar_done(&w.v_full[ring.stage], ring.phase);
      }
    }
    wgmma_wait<1>();
    pin_acc(s);
    w.stamp(it, STEP_QK);
    if (w.leader) mbar_arrive(&w.k_empty[ring.stage]);
    mask_block<Cfg>(s, w.tid, lim, blk.nb * BN);
    softmax_block<BN / 2>(s, m, alpha, rowsum, p.scale_log2);
    w.stamp(it, STEP_SOFTMAX);
    wait_pv_rescale<Cfg::D>(o, l, alpha, rowsum);
    w.stamp(it, STEP_PV);
    if (w.leader) mbar_arrive(&w.v_empty[prev.stage]);
    to_fragments<Cfg>(s, pf);
    w.stamp(it, STEP_END);
    prev = ring;
    ring.advance<Cfg::STAGES>();
  }
  /* every Q K^T of the tile is done: the producer may load the next Q */
  if (w.leader) mbar_arrive(&w.sh->q_empty);
  mbar_wait(&w.v_full[prev.stage], prev.phase);
  w.turn.wait();
  wgmma_fence();
  issue_pv<Cfg>(o, pf, desc_at(w.dv0, warp_uniform(prev.stage * Cfg::KV_BYTES)));
  wgmma_commit();
  w.turn.pass();
  wgmma_wait<0>();
  pin_acc(o);
  if (w.leader) mbar_arrive(&w.v_empty[prev.stage]);
}

/* A consumer warpgroup: the tiles the producer announces, each tile's
 * blocks, the epilogue. */
template <class Cfg>
__device__ __forceinline__ void consume(const Params &p, const Schedule &sched, int cw, int tid, uint8_t *sQ,
                                        uint8_t *sK, uint8_t *sV, uint8_t *sO, Shared *sh, uint64_t *k_full,
                                        uint64_t *k_empty, uint64_t *v_full, uint64_t *v_empty,
                                        const CUtensorMap *tmO) {
  constexpr int D = Cfg::D;
  Walk w{make_desc(smem_u32(sQ) + cw * (64 * 128), 16, 1024),
         make_desc(smem_u32(sK), 16, 1024),
         make_desc(smem_u32(sV), Cfg::BN * 128, 1024),
         sh,
         k_full,
         k_empty,
         v_full,
         v_empty,
         Ring(),
         Turns{!p.no_turns, cw, cw + 1 == Cfg::WGS ? 0 : cw + 1},
         tid,
         (tid & 31) == 0,
         true};
  uint32_t q_phase = 0;
  if (cw + 1 == Cfg::WGS) w.turn.pass();  // warpgroup 0 goes first
  for (;;) {
    mbar_wait(&sh->q_full, q_phase);
    q_phase ^= 1;
    const int t = *(volatile int *)&sh->tile;
    if (t < 0) break;
    const Tile tile = sched.get(t);
    const int row0 = tile.mb * Cfg::BM + cw * 64;
    Blocks<Cfg::BN, Cfg::BM> blk;
    const bool any = blk.first(p, tile.mb);
    float o[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
    if (!any) {
      if (w.leader) mbar_arrive(&sh->q_empty);
    } else {
      blocks_overlapped<Cfg>(p, w, blk, row0, blk.total(p), o, m, l);
    }
    epilogue<Cfg>(p, tile, row0, cw, tid, o, m, l, sO + cw * (64 * D * 2), tmO);
    w.first_tile = false;
  }
  /* the shared buffer stays until the last store has read it */
  if (tid == 0) gemm::bulk_wait<0>();
}

/* The whole engine for this CTA; all Cfg::THREADS threads call it. */
template <class Cfg>
__device__ __forceinline__ void run(uint8_t *smem_raw, const Params &p, const CUtensorMap *tmQ, const CUtensorMap *tmK,
                                    const CUtensorMap *tmV, const CUtensorMap *tmKr, const CUtensorMap *tmVr,
                                    const CUtensorMap *tmO) {
  uint8_t *smem = reinterpret_cast<uint8_t *>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint8_t *sQ = smem;
  uint8_t *sK = sQ + Cfg::Q_BYTES;
  uint8_t *sV = sK + Cfg::STAGES * Cfg::KV_BYTES;
  uint8_t *sO = sV + Cfg::STAGES * Cfg::KV_BYTES;
  uint64_t *bars = reinterpret_cast<uint64_t *>(sO + Cfg::O_BYTES);
  uint64_t *k_full = bars, *k_empty = k_full + Cfg::STAGES;
  uint64_t *v_full = k_empty + Cfg::STAGES, *v_empty = v_full + Cfg::STAGES;
  Shared *sh = reinterpret_cast<Shared *>(v_empty + Cfg::STAGES);
  const int tid = threadIdx.x;
  const int nm = (p.seq_q + Cfg::BM - 1) / Cfg::BM;
  const int pairs = p.batch * p.heads_q;
  const Schedule sched{nm, p.heads_q, pairs, pairs * nm, p.section, p.causal != 0};
  if (tid == 0) {
    mbar_init(&sh->q_full, 1);
    mbar_init(&sh->q_empty, Cfg::CONSUMER_WARPS);
    for (int s = 0; s < Cfg::STAGES; ++s) {
      mbar_init(&k_full[s], 1);
      mbar_init(&k_empty[s], Cfg::CONSUMER_WARPS);
      mbar_init(&v_full[s], 1);
      mbar_init(&v_empty[s], Cfg::CONSUMER_WARPS);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    fence_proxy_async_smem();
    prefetch_tmap(tmQ);
    prefetch_tmap(tmK);
    prefetch_tmap(tmV);
    prefetch_tmap(tmO);
  }
  __syncthreads();
  const int wg = (int)warp_uniform(tid / 128);  // barrier ids and descriptors follow
  if (wg == 0) {
    setmaxnreg_dec<Cfg::PRODUCER_REGS>();
    if (tid == 0) produce<Cfg>(p, sched, tmQ, tmK, tmV, tmKr, tmVr, sQ, sK, sV, sh, k_full, k_empty, v_full, v_empty);
  } else {
    setmaxnreg_inc<Cfg::CONSUMER_REGS>();
    consume<Cfg>(p, sched, wg - 1, tid & 127, sQ, sK, sV, sO, sh, k_full, k_empty, v_full, v_empty, tmO);
  }
}

}  // namespace attn
}  // namespace mkx
