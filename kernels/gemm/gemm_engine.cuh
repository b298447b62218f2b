/*
 * MKX Hopper GEMM engine (sm_90a): device-side templates.
 *
 *   C[M x N] = A[M x K] * B[K x N], bf16/fp16 operands, fp32 accumulation; or fp8 operands
 *   (Config's FP8, B K-major, BN 128) with each 128-wide K block's sum promoted into fp32
 *   accumulators times its scales (run_engine_scaled, mma_tile_fp8).
 *
 * Structure (one CTA = 384 threads = 3 warpgroups, one CTA per SM):
 *   warpgroup 0      producer: setmaxnreg 40; one elected thread walks this CTA's tiles and, for
 *                    each K block (64 wide; fp8: 128), waits on the stage's "empty" mbarrier, arms the "full"
 *                    mbarrier with the byte count and issues TMA loads (cp.async.bulk.tensor, 128B
 *                    swizzle, zero fill out of bounds) for the A and B slabs of the stage.
 *   warpgroups 1, 2  consumers: setmaxnreg 232; each owns 64 rows x BN columns of the 128 x BN
 *                    tile, waits on "full", issues 4 wgmma m64nBNk16 (fp8: k32) per stage (fp32 registers),
 *                    keeps one wgmma group in flight and releases the previous stage to the
 *                    producer (one arrive per warp on "empty").  After the last K block the
 *                    epilogue hook gets the accumulators.
 *   Persistent: CTA `cta_rank` of `num_ctas` handles linear tiles cta_rank, cta_rank+num_ctas, ...
 *   The smem ring (STAGES deep) and its phases run on across tiles, so the producer prefetches the
 *   next tile while the consumers run the epilogue.
 *
 * Hooks (all device functors, passed by reference; see the default ones below):
 *   TileOrder  : int num_tiles() const; void get(int idx, int &tile_m, int &tile_n) const;
 *                CTA c takes tiles c, c + num_ctas, ...  Or, for orders that split tiles along
 *                K between CTAs (stream-K: an uneven last wave spread over every CTA):
 *                bool unit(int cta, int num_ctas, int i, int nk, Unit &u) const: the i-th piece
 *                of work of CTA cta (false: no more); a kPartial piece ends with
 *                store_partial(ctx, u, acc) instead of the epilogue, a kFinish piece calls
 *                add_partials(ctx, u, acc) before it (both templates on the accumulator count,
 *                by all 128 threads of each consumer warpgroup).
 *   LoadGate   : void wait_rows(int tile_m, int row0, int nrows);  called by the single producer
 *                thread before it issues the first TMA load of A rows [row0, row0+nrows) of a tile
 *                (e.g. spin on a ready flag written by a peer GPU, with acquire semantics).
 *                void wait_k(int tile_m, int kb): called by the same thread before the loads of
 *                K block kb of that tile (gates A that arrives in K chunks; no-op elsewhere).
 *                void b_chunk(int tile_m, int tile_n, int j, int &col, int &z) (optional, K x N B
 *                only): column and third coordinate of the tile's 64-column B chunk j (HasBChunk).
 *                void k_source(int kb, const CUtensorMap *&a, const CUtensorMap *&b, int &k)
 *                (optional, HasKSource): the maps and K coordinate of K block kb (a K split over
 *                several buffers; a map it picks must be a __grid_constant__ kernel parameter).
 *                void a_source(int tile_m, const CUtensorMap *&map, int &row): where that tile's
 *                A rows are loaded from, called before wait_rows with map = tmA, row = tile_m *
 *                128 (e.g. a rank's own rows from its own A, not from a gathered copy; no-op
 *                elsewhere; another map must be a __grid_constant__ kernel parameter too).
 *   Epilogue   : template <int BN> void operator()(const TileCtx &t, float (&acc)[BN / 2]);
 *                called by all 128 threads of each consumer warpgroup once per tile; t gives the
 *                tile, the warpgroup's first row/column, its 16 KB staging smem, a warpgroup
 *                barrier and helpers that map accumulator index to (row, col) within the tile.
 *                void finish(const TileCtx &t): called by every consumer thread after its last
 *                tile (wait for outstanding bulk stores there).
 *                Provided: StoreCTma (smem staging + TMA stores, used by the plain GEMM) and
 *                StoreC (masked direct stores, any alignment of ldc that is even).
 *
 * Composition rules for a fused kernel that calls run_engine():
 *   - the block has exactly 384 threads and all of them call run_engine (threadIdx.x 0..127
 *     producer warpgroup, 128..383 consumers).  A block of more threads cannot work: the
 *     wgmma code needs >= 154 registers per thread at the entry cap, and 65536 / 512 = 128.
 *     Side roles therefore go either into other CTAs of the same grid (run_engine takes
 *     cta_rank / num_ctas, so compute CTAs can be a subset) or into warps 1..3 of the producer
 *     warpgroup, which return from run_engine at once with 40 registers (setmaxnreg.dec);
 *   - named barriers 1..3 belong to the engine;
 *   - launch with __launch_bounds__(384, 1) and Cfg::SMEM_BYTES of dynamic shared memory
 *     (cudaFuncSetAttribute MaxDynamicSharedMemorySize);
 *   - tensor maps as in gemm.cu (make_tmap: 128B swizzle, box inner 128 bytes), passed as
 *     __grid_constant__ kernel parameters.
 *   - hooks provided here: GroupedTileOrder, RotatedTileOrder, NoLoadGate, FlagLoadGate, StoreC,
 *     StoreCTma.
 */
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include <type_traits>
#include <utility>
#include "common/tma.cuh"
#include "common/wgmma_ops.cuh"

namespace mkx {
namespace gemm {

constexpr int kBM = 128;       // tile rows (2 consumer warpgroups x 64)
constexpr int kBK = 64;        // K block: 64 x 2 bytes = one 128-byte swizzle row
constexpr int kThreads = 384;  // producer WG + 2 consumer WGs
constexpr int kConsumerWGs = 2;
constexpr int kProducerRegs = 40;
constexpr int kConsumerRegs = 232;
constexpr int kBarInit = 1;        // named barrier ids used by the engine
constexpr int kBarConsumerWG = 2;  // 2 + consumer warpgroup (2 and 3): 128-thread barriers

/* Operands of an fp8 engine (Config's FP8): 0 = none (bf16/fp16). */
enum { kNotFp8 = 0, kE4M3 = 1, kE5M2 = 2 };

template <int BN_, int STAGES_, bool B_KMAJOR_, bool FP16_, int FP8_ = kNotFp8, int CLUSTER_ = 1>
struct Config {
  static constexpr int BN = BN_;
  static constexpr int STAGES = STAGES_;
  static constexpr bool B_KMAJOR = B_KMAJOR_;  // B stored N x K (K contiguous) if true, K x N if false
  static constexpr bool FP16 = FP16_;          // operands fp16 (else bf16); unused with FP8
  static constexpr int FP8 = FP8_;             // kE4M3 / kE5M2: both operands of that fp8 type
  // CTAs of a cluster (1 or 2) that run tiles of the same B columns side by side, each loading
  // half of B's slab into both (TMA multicast): B's bytes from L2 halved
  static constexpr int CLUSTER = CLUSTER_;
  static constexpr int ACC = BN / 2;  // fp32 accumulators per consumer thread
  // A K block is one 128-byte swizzle row of each operand: 64 16-bit or 128 fp8 elements, in
  // 4 wgmma K steps of 32 bytes (k16 for 16-bit types, k32 for fp8).
  static constexpr int BK = FP8 ? 128 : kBK;
  static constexpr int KSTEPS = 4;
  static constexpr uint32_t A_BYTES = kBM * 128;
  static constexpr uint32_t B_BYTES = BN * 128;
  static constexpr uint32_t STAGE_BYTES = A_BYTES + B_BYTES;
  // Epilogue staging: per consumer warpgroup two 64 x 128-byte buffers (8 KB each, 128B swizzle),
  // used by the TMA-store epilogue (StoreCTma); other epilogues may use it as scratch.
  static constexpr uint32_t EPI_BYTES_PER_WG = 2 * 64 * 128;
  static constexpr uint32_t EPI_BYTES = kConsumerWGs * EPI_BYTES_PER_WG;
  static constexpr uint32_t BAR_BYTES = 1024;
  // +1024 so the ring can be aligned to 1024 bytes (128B-swizzle atoms) whatever the base.
  static constexpr uint32_t SMEM_BYTES = STAGES * STAGE_BYTES + EPI_BYTES + BAR_BYTES + 1024;
  static_assert(BN == 128 || BN == 256, "BN must be 128 or 256");
  // fp8 wgmma reads B K-major only; its per-block promotion doubles the accumulators, which
  // fit the consumers' registers at BN = 128 only
  static_assert(!FP8 || (B_KMAJOR && BN == 128), "fp8: B K-major and BN 128");
  static_assert(SMEM_BYTES <= 232448, "too much shared memory");
  static_assert(CLUSTER == 1 || (CLUSTER == 2 && B_KMAJOR), "clusters of 2 multicast K-major B");
};

/* ------------------------------------------------------------------------------------------ */
/* PTX wrappers (TMA and mbarriers: common/tma.cuh)                                            */
/* ------------------------------------------------------------------------------------------ */
using namespace mkx::ptx;

__device__ __forceinline__ void st_shared_b32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}
__device__ __forceinline__ void st_shared_v2f(uint32_t addr, float a, float b) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(addr), "f"(a), "f"(b) : "memory");
}
__device__ __forceinline__ void prefetch_tmap(const CUtensorMap *map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}
__device__ __forceinline__ void named_bar_sync(int id, int nthreads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(nthreads) : "memory");
}
template <int R>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(R));
}
template <int R>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(R));
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

template <int N>
__device__ __forceinline__ void pin_acc(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

/* smem matrix descriptor, 128-byte swizzle. */
__device__ __forceinline__ uint64_t make_desc(uint32_t saddr, uint32_t lbo, uint32_t sbo) {
  uint64_t d = 0;
  d |= (uint64_t)((saddr & 0x3FFFF) >> 4);
  d |= (uint64_t)((lbo & 0x3FFFF) >> 4) << 16;
  d |= (uint64_t)((sbo & 0x3FFFF) >> 4) << 32;
  d |= 1ull << 62;
  return d;
}

/* One K step of the tile: wgmma m64nBNk16, A and B from shared memory. */
template <int BN, bool FP16, int TRANS_B>
__device__ __forceinline__ void wgmma_tile(float (&d)[BN / 2], uint64_t da, uint64_t db, int scale_d) {
  wgmma::Wgmma<BN, FP16>::template ss<TRANS_B>(d, da, db, scale_d);
}

/* ------------------------------------------------------------------------------------------ */
/* Hooks                                                                                        */
/* ------------------------------------------------------------------------------------------ */

/* Per-tile information handed to the epilogue hook. Accumulator i of thread `lane_in_wg` (0..127)
 * holds element (row0 + acc_row(i), col0 + acc_col(i)) of C.  Accumulators come in pairs
 * (2j, 2j+1) of adjacent columns. */
struct TileCtx {
  int tile_m, tile_n;  // tile coordinates
  int row0, col0;      // first row / column of this warpgroup's 64 x BN sub-tile in C
  int M, N;            // problem size (for masking)
  int wg;              // consumer warpgroup 0 or 1
  int tid;             // thread index within the warpgroup, 0..127
  uint8_t *epi_smem;   // this warpgroup's staging smem (Cfg::EPI_BYTES_PER_WG bytes, 1024-aligned)
  uint64_t *epi_bar;   // two mbarriers (count 1) of this warpgroup, one per staging buffer, for
                       // epilogues that TMA-load into the staging buffers
  __device__ __forceinline__ void wg_sync() const { named_bar_sync(kBarConsumerWG + wg, 128); }
  __device__ __forceinline__ int acc_row(int i) const {
    return (tid >> 5) * 16 + ((tid & 31) >> 2) + ((i >> 1) & 1) * 8;
  }
  __device__ __forceinline__ int acc_col(int i) const { return (i >> 2) * 8 + (tid & 3) * 2 + (i & 1); }
};

/* A CTA's piece of work: K blocks [kb0, kb1) of tile (tm, tn).  part: kWhole (then the epilogue),
 * kPartial (a share of a tile split along K: handed to the order, no epilogue) or kFinish (the
 * share with the last K block: the other shares are added, then the epilogue); aux0, aux1: the
 * order's own (e.g. where shares go). */
enum { kWhole = 0, kPartial = 1, kFinish = 2 };
struct Unit {
  int tm, tn, kb0, kb1, part, aux0, aux1;
};

/* A load gate with b_chunk(tile_m, tile_n, j, col, z) picks, for 64-column chunk j of a tile's B
 * (K x N layout only), the column (col0 + 64 j on entry) and the index z of B's third dimension
 * (a 3-D tmB {N, K, Z}, box {64, 64, 1}): one B per group of tile rows, e.g. per expert. */
template <class G, class = void>
struct HasBChunk : std::false_type {};
template <class G>
struct HasBChunk<G, decltype((void)std::declval<G &>().b_chunk(0, 0, 0, std::declval<int &>(), std::declval<int &>()))>
    : std::true_type {};

/* A load gate with k_source(kb, mapA, mapB, k) picks, for K block kb, the tensor maps of A and B
 * and the K coordinate within them (kb * Cfg::BK on entry): a K made of several operands, e.g. every
 * rank's slice of it, each in its own buffer. */
template <class G, class = void>
struct HasKSource : std::false_type {};
template <class G>
struct HasKSource<G, decltype((void)std::declval<G &>().k_source(0, std::declval<const CUtensorMap *&>(),
                                                                 std::declval<const CUtensorMap *&>(),
                                                                 std::declval<int &>()))> : std::true_type {};

template <class O, class = void>
struct HasUnits : std::false_type {};
template <class O>
struct HasUnits<O, decltype((void)std::declval<const O &>().unit(0, 0, 0, 0, std::declval<Unit &>()))>
    : std::true_type {};

/* The i-th piece of work of CTA cta: the order's own pieces, or whole tiles cta, cta + num_ctas, ... */
template <class O>
__device__ __forceinline__ bool next_unit(const O &o, int cta, int num_ctas, int i, int nk, Unit &u) {
  if constexpr (HasUnits<O>::value) {
    return o.unit(cta, num_ctas, i, nk, u);
  } else {
    const int t = cta + i * num_ctas;
    if (t >= o.num_tiles()) return false;
    o.get(t, u.tm, u.tn);
    u.kb0 = 0;
    u.kb1 = nk;
    u.part = kWhole;
    return true;
  }
}

/* Tiles grouped GROUP_M tile-rows at a time; inside a group, walk down the rows then across. */
struct GroupedTileOrder {
  int tiles_m, tiles_n, group_m;
  __device__ __forceinline__ int num_tiles() const { return tiles_m * tiles_n; }
  __device__ __forceinline__ void get(int idx, int &tm, int &tn) const {
    const int per_group = group_m * tiles_n;
    const int g = idx / per_group;
    const int first_m = g * group_m;
    const int gm = min(group_m, tiles_m - first_m);
    const int r = idx - g * per_group;
    tm = first_m + r % gm;
    tn = r / gm;
  }
};

/* Grouped order with the tile rows rotated so that tile row `first_tile_m` comes first (e.g. an
 * AllGather+GEMM starts on its local rows while the peers' rows arrive). */
struct RotatedTileOrder {
  GroupedTileOrder base;
  int first_tile_m;
  __device__ __forceinline__ int num_tiles() const { return base.num_tiles(); }
  __device__ __forceinline__ void get(int idx, int &tm, int &tn) const {
    base.get(idx, tm, tn);
    tm += first_tile_m;
    if (tm >= base.tiles_m) tm -= base.tiles_m;
  }
};

/* No gate: every row of A may be loaded at once. */
struct NoLoadGate {
  __device__ __forceinline__ void a_source(int, const CUtensorMap *&, int &) {}
  __device__ __forceinline__ void wait_rows(int, int, int) {}
  __device__ __forceinline__ void wait_k(int, int) {}
};

/* Gate on per-tile-row flags: before loading A rows of tile row tm, spin until flags[tm] >= target
 * (acquire at system scope, so a peer GPU's release store of the flag orders its data writes),
 * then fence the async proxy so that the TMA loads see the data. */
struct FlagLoadGate {
  const int *flags;
  int target;
  __device__ __forceinline__ void wait_rows(int tm, int, int) {
    const int *f = flags + tm;
    int v;
    for (;;) {
      asm volatile("ld.acquire.sys.global.s32 %0, [%1];" : "=r"(v) : "l"(f) : "memory");
      if (v >= target) break;
      __nanosleep(64);
    }
    asm volatile("fence.proxy.async.global;" ::: "memory");
  }
  __device__ __forceinline__ void a_source(int, const CUtensorMap *&, int &) {}
  __device__ __forceinline__ void wait_k(int, int) {}
};

template <typename T>
struct OutCvt;
template <>
struct OutCvt<float> {
  typedef float2 pair_t;
  __device__ __forceinline__ static float2 pack(float a, float b) { return make_float2(a, b); }
};
template <>
struct OutCvt<__nv_bfloat16> {
  typedef __nv_bfloat162 pair_t;
  __device__ __forceinline__ static __nv_bfloat162 pack(float a, float b) { return __floats2bfloat162_rn(a, b); }
};
template <>
struct OutCvt<__half> {
  typedef __half2 pair_t;
  __device__ __forceinline__ static __half2 pack(float a, float b) { return __floats2half2_rn(a, b); }
};

/* Default epilogue: convert and store the warpgroup's 64 x BN sub-tile straight into row-major C
 * (ldc elements per row), masked at the M and N edges.  Needs N even, ldc even, C aligned to the
 * size of an element pair. */
template <typename OutT>
struct StoreC {
  OutT *c;
  int64_t ldc;
  template <int BN>
  __device__ __forceinline__ void operator()(const TileCtx &t, float (&acc)[BN / 2]) {
    typedef typename OutCvt<OutT>::pair_t P;
    const int r = t.row0 + t.acc_row(0);
    const int cbase = t.col0 + t.acc_col(0);
    OutT *p0 = c + (int64_t)r * ldc + cbase;
    OutT *p1 = p0 + 8 * ldc;
    const bool r0ok = r < t.M, r1ok = r + 8 < t.M;
    if (t.col0 + BN <= t.N && r + 8 < t.M) {
#pragma unroll
      for (int q = 0; q < BN / 8; ++q) {
        *reinterpret_cast<P *>(p0 + 8 * q) = OutCvt<OutT>::pack(acc[4 * q], acc[4 * q + 1]);
        *reinterpret_cast<P *>(p1 + 8 * q) = OutCvt<OutT>::pack(acc[4 * q + 2], acc[4 * q + 3]);
      }
    } else {
#pragma unroll
      for (int q = 0; q < BN / 8; ++q) {
        if (cbase + 8 * q < t.N) {
          if (r0ok) *reinterpret_cast<P *>(p0 + 8 * q) = OutCvt<OutT>::pack(acc[4 * q], acc[4 * q + 1]);
          if (r1ok) *reinterpret_cast<P *>(p1 + 8 * q) = OutCvt<OutT>::pack(acc[4 * q + 2], acc[4 * q + 3]);
        }
      }
    }
  }
  __device__ __forceinline__ void finish(const TileCtx &) {}
};

/* Store a warpgroup's 64 x BN accumulators as OutT through its two 8 KB swizzled staging buffers
 * with TMA (cp.async.bulk.tensor), in 64 x (128 / sizeof(OutT)) chunks, at column t.col0 and row y
 * of the tensor `map` (box {128 / sizeof(OutT), 64}, 128B swizzle; the store clips at the tensor's
 * edges).  Every chunk is stored even past N: the staging buffers alternate by chunk parity, and
 * an odd chunk count would let the next tile overwrite a buffer a store still reads.  `extra`
 * (thread 0, per chunk: smem source, column, row) may issue more stores of the same chunk, e.g.
 * into peers' copies; they join the chunk's bulk group.  Thread 0 commits the bulk groups;
 * nothing waits for the global writes here (bulk_wait<0>() before reading them back or
 * signalling them). */
/* Shared-memory address of byte column bcol (0..127) of row `row` of a 64 x 128-byte staging
 * buffer in the 128B-swizzle layout that TMA reads and writes. */
__device__ __forceinline__ uint32_t swizzled_128b(uint32_t buf, int row, int bcol) {
  return buf + row * 128 + (((bcol >> 4) ^ (row & 7)) << 4) + (bcol & 15);
}

struct NoExtraStore {
  __device__ __forceinline__ void operator()(const void *, int, int) const {}
};
template <typename OutT, int BN, class Extra = NoExtraStore>
__device__ __forceinline__ void tma_store_subtile(const TileCtx &t, const float (&acc)[BN / 2], const CUtensorMap *map,
                                                  int y, const Extra &extra = Extra()) {
  constexpr int ESZ = (int)sizeof(OutT);
  constexpr int CH = 128 / ESZ;  // columns per chunk (64 for 16-bit, 32 for fp32)
  constexpr int QPC = CH / 8;    // accumulator quads per chunk
  const uint32_t base = smem_u32(t.epi_smem);
  const int r = t.acc_row(0);            // 0..55, and r + 8
  const int cb = (t.tid & 3) * 2 * ESZ;  // byte offset of this thread's pair in an 8-column group
#pragma unroll
  for (int j = 0; j < BN / CH; ++j) {
    const uint32_t buf = base + (j & 1) * (64 * 128);
    if (t.tid == 0) bulk_wait_read<1>();  // the store that last read this buffer is done
    t.wg_sync();
#pragma unroll
    for (int qq = 0; qq < QPC; ++qq) {
      const int q = j * QPC + qq;
      const int bcol = qq * 8 * ESZ + cb;  // byte column of this pair inside the 128-byte chunk row
      const uint32_t a0 = swizzled_128b(buf, r, bcol), a1 = swizzled_128b(buf, r + 8, bcol);
      if constexpr (ESZ == 4) {
        st_shared_v2f(a0, acc[4 * q], acc[4 * q + 1]);
        st_shared_v2f(a1, acc[4 * q + 2], acc[4 * q + 3]);
      } else {
        typedef typename OutCvt<OutT>::pair_t P;
        P p0 = OutCvt<OutT>::pack(acc[4 * q], acc[4 * q + 1]);
        P p1 = OutCvt<OutT>::pack(acc[4 * q + 2], acc[4 * q + 3]);
        st_shared_b32(a0, *reinterpret_cast<uint32_t *>(&p0));
        st_shared_b32(a1, *reinterpret_cast<uint32_t *>(&p1));
      }
    }
    fence_proxy_async_smem();
    t.wg_sync();
    if (t.tid == 0) {
      tma_store_2d(map, t.epi_smem + (j & 1) * (64 * 128), t.col0 + j * CH, y);
      extra(t.epi_smem + (j & 1) * (64 * 128), t.col0 + j * CH, y);
      bulk_commit();
    }
  }
}

/* TMA-store epilogue: tma_store_subtile into C; the consumers return to the main loop without
 * waiting for the global writes.  tmC: C as a {N, M} tensor, box {128 / sizeof(OutT), 64}, 128B
 * swizzle (N % 8 == 0 keeps rows 16-byte granular). */
template <typename OutT>
struct StoreCTma {
  const CUtensorMap *tmC;
  template <int BN>
  __device__ __forceinline__ void operator()(const TileCtx &t, float (&acc)[BN / 2]) {
    tma_store_subtile<OutT, BN>(t, acc, tmC, t.row0);
  }
  /* called once by every consumer thread after its last tile */
  __device__ __forceinline__ void finish(const TileCtx &t) {
    if (t.tid == 0) bulk_wait<0>();
  }
};

/* ------------------------------------------------------------------------------------------ */
/* The engine                                                                                   */
/* ------------------------------------------------------------------------------------------ */
/* The engine's shared memory: the ring of A and B stages, the epilogue staging, the barriers. */
template <class Cfg>
struct EngineSmem {
  uint8_t *sA, *sB, *sEpi;            // STAGES x 128 x 64; STAGES x BN x 64 (or BN/64 chunks of 64x64); 2 x 16 KB
  uint64_t *full, *empty, *epi_bars;  // STAGES each; 2 per consumer warpgroup
  __device__ __forceinline__ explicit EngineSmem(uint8_t *raw) {
    uint8_t *smem = reinterpret_cast<uint8_t *>((reinterpret_cast<uintptr_t>(raw) + 1023) & ~uintptr_t(1023));
    sA = smem;
    sB = smem + Cfg::STAGES * Cfg::A_BYTES;
    sEpi = smem + Cfg::STAGES * Cfg::STAGE_BYTES;
    full = reinterpret_cast<uint64_t *>(sEpi + Cfg::EPI_BYTES);
    empty = full + Cfg::STAGES;
    epi_bars = empty + Cfg::STAGES;
  }
};

/* The producer thread: for each of this CTA's pieces of work, the gate's waits, then per K block
 * the stage's "empty" wait and the TMA loads of its A and B slabs onto the stage's "full". */
template <class Cfg, class TileOrder, class LoadGate>
__device__ __forceinline__ void produce(const EngineSmem<Cfg> &sm, const CUtensorMap *tmA, const CUtensorMap *tmB,
                                        int M, int nk, int cta_rank, int num_ctas, const TileOrder &order,
                                        LoadGate &gate) {
  constexpr int BN = Cfg::BN;
  int stage = 0;
  uint32_t phase = 0;
  Unit u;
  for (int i = 0; next_unit(order, cta_rank, num_ctas, i, nk, u); ++i) {
    const int tm = u.tm, tn = u.tn;
    const int row0 = tm * kBM;
    const CUtensorMap *ta = tmA;
    int arow = row0;
    gate.a_source(tm, ta, arow);
    gate.wait_rows(tm, row0, min(kBM, M - row0));
    const int col0 = tn * BN;
    for (int kb = u.kb0; kb < u.kb1; ++kb) {
      gate.wait_k(tm, kb);
      const CUtensorMap *ka = ta, *kbm = tmB;
      int kx = kb * Cfg::BK;
      if constexpr (HasKSource<LoadGate>::value) gate.k_source(kb, ka, kbm, kx);
      mbar_wait(&sm.empty[stage], phase ^ 1);
      mbar_arrive_expect_tx(&sm.full[stage], Cfg::STAGE_BYTES);
      tma_load_2d(sm.sA + stage * Cfg::A_BYTES, ka, &sm.full[stage], kx, arow);
      uint8_t *b = sm.sB + stage * Cfg::B_BYTES;
      if constexpr (Cfg::CLUSTER > 1) {
        const uint32_t r = cluster_cta_rank();
        tma_load_2d_multicast(b + r * (BN / 2) * 128, kbm, &sm.full[stage], kx, col0 + r * (BN / 2), 0x3);
      } else if constexpr (Cfg::B_KMAJOR) {
        tma_load_2d(b, kbm, &sm.full[stage], kx, col0);
      } else {
#pragma unroll
        for (int j = 0; j < BN / 64; ++j) {
          if constexpr (HasBChunk<LoadGate>::value) {
            int col = col0 + 64 * j, z = 0;
            gate.b_chunk(tm, tn, j, col, z);
            tma_load_3d(b + j * (64 * 128), kbm, &sm.full[stage], col, kx, z);
          } else {
            tma_load_2d(b + j * (64 * 128), kbm, &sm.full[stage], col0 + 64 * j, kx);
          }
        }
      }
      if (++stage == Cfg::STAGES) {
        stage = 0;
        phase ^= 1;
      }
    }
  }
}

/* A consumer warp's release of a stage it has read: to this CTA's producer and, in a cluster, to
 * the peer's, whose multicast writes the stage here too. */
template <class Cfg>
__device__ __forceinline__ void release_stage(const EngineSmem<Cfg> &sm, int stage) {
  mbar_arrive(&sm.empty[stage]);
  if constexpr (Cfg::CLUSTER > 1) mbar_arrive_cluster(&sm.empty[stage], cluster_cta_rank() ^ 1);
}

/* A consumer warpgroup's wgmma of one stage once it is full: 4 K steps into d (the first adds
 * to d only if `accumulate`), committed as one group. */
template <class Cfg>
__device__ __forceinline__ void mma_stage(const EngineSmem<Cfg> &sm, uint32_t a_base, uint32_t b_base, int stage,
                                          uint32_t phase, bool accumulate, float (&d)[Cfg::ACC]) {
  constexpr int BN = Cfg::BN;
  mbar_wait(&sm.full[stage], phase);
  const uint32_t a_addr = a_base + stage * Cfg::A_BYTES;
  const uint32_t b_addr = b_base + stage * Cfg::B_BYTES;
  wgmma_fence();
  pin_acc(d);
#pragma unroll
  for (int k = 0; k < Cfg::KSTEPS; ++k) {
    const uint64_t da = make_desc(a_addr + 32 * k, 16, 1024);
    const int scale_d = (accumulate || k > 0) ? 1 : 0;
    if constexpr (Cfg::FP8 != kNotFp8) {
      wgmma::WgmmaFp8<BN, Cfg::FP8 == kE5M2>::ss(d, da, make_desc(b_addr + 32 * k, 16, 1024), scale_d);
    } else {
      uint64_t db;
      if constexpr (Cfg::B_KMAJOR)
        db = make_desc(b_addr + 32 * k, 16, 1024);
      else
        db = make_desc(b_addr + 16 * 128 * k, 64 * 128, 1024);
      wgmma_tile<BN, Cfg::FP16, Cfg::B_KMAJOR ? 0 : 1>(d, da, db, scale_d);
    }
  }
  wgmma_commit();
  pin_acc(d);
}

/* One consumer warpgroup's main loop over K blocks [kb0, kb1) of a tile: per stage 4 wgmma
 * m64nBNk16 into acc, one group kept in flight, the previous stage released (one arrive per
 * warp on "empty").  stage and phase run on across tiles. */
template <class Cfg>
__device__ __forceinline__ void mma_tile(const EngineSmem<Cfg> &sm, int cw, bool warp_leader, int kb0, int kb1,
                                         int &stage, uint32_t &phase, float (&acc)[Cfg::ACC]) {
  const uint32_t a_base = smem_u32(sm.sA) + cw * (64 * 128);
  const uint32_t b_base = smem_u32(sm.sB);
  int prev = 0;
  for (int kb = kb0; kb < kb1; ++kb) {
    mma_stage<Cfg>(sm, a_base, b_base, stage, phase, kb > kb0, acc);
    if (kb > kb0) {
      wgmma_wait<1>();
      pin_acc(acc);
      if (warp_leader) release_stage(sm, prev);
    }
    prev = stage;
    if (++stage == Cfg::STAGES) {
      stage = 0;
      phase ^= 1;
    }
  }
  wgmma_wait<0>();
  pin_acc(acc);
  if (kb1 > kb0 && warp_leader) release_stage(sm, prev);
}

/* The fp8 main loop over K blocks [kb0, kb1) of a tile: per stage 4 wgmma m64nBNk32 into a
 * block sum of its own (Hopper's fp8 wgmma keeps fewer bits than fp32 in its accumulators, so
 * long K sums are promoted block by block), which sc.promote adds, times the block's scales, into
 * acc in fp32; the block's scales are read while its wgmma runs.  One block sum: two
 * alternating ones (one's wgmma under the other's promotion) measure slower on every shape of
 * mkx_perf gemm (tests/perf/results/check-h100.md). */
template <class Cfg, class Scales>
__device__ __forceinline__ void mma_tile_fp8(const EngineSmem<Cfg> &sm, int cw, bool warp_leader, int kb0, int kb1,
                                             int &stage, uint32_t &phase, const TileCtx &ctx, const Scales &sc,
                                             float (&acc)[Cfg::ACC]) {
  const uint32_t a_base = smem_u32(sm.sA) + cw * (64 * 128);
  const uint32_t b_base = smem_u32(sm.sB);
  float part[Cfg::ACC];
#pragma unroll
  for (int i = 0; i < Cfg::ACC; ++i) acc[i] = part[i] = 0.f;
  for (int kb = kb0; kb < kb1; ++kb) {
    mma_stage<Cfg>(sm, a_base, b_base, stage, phase, false, part);
    const typename Scales::Block f = sc.block(ctx, kb);  // before the wait: a memory clobber
    wgmma_wait<0>();
    pin_acc(part);
    if (warp_leader) release_stage(sm, stage);
    sc.promote(f, part, acc);
    if (++stage == Cfg::STAGES) {
      stage = 0;
      phase ^= 1;
    }
  }
}

/* Scales of the fp8 engine (run_engine_scaled's hook), called by all 128 threads of a consumer
 * warpgroup: block(t, kb) reads what K block kb's scales are for this thread (issued while the
 * block's wgmma runs); promote(block, part, acc) adds the block's sum `part` into acc, each
 * element times its scale for the block (1 where the scales do not change along K); finish(t,
 * acc) then applies the scales that do not change along K, before the epilogue (or a stream-K
 * share's store: the scales are linear, so shares may be scaled apart). */
struct NoScales {
  struct Block {};
  __device__ __forceinline__ Block block(const TileCtx &, int) const { return Block{}; }
  template <int N>
  __device__ __forceinline__ void promote(const Block &, const float (&part)[N], float (&acc)[N]) const {
#pragma unroll
    for (int i = 0; i < N; ++i) acc[i] += part[i];
  }
  template <int N>
  __device__ __forceinline__ void finish(const TileCtx &, float (&)[N]) const {}
};

/* A consumer warpgroup: for each piece of work the main loop, then the order's partial-share
 * hooks (stream-K) or the epilogue; finish after the last. */
template <class Cfg, class TileOrder, class Epilogue, class Scales>
__device__ __forceinline__ void consume(const EngineSmem<Cfg> &sm, int wg, int M, int N, int nk, int cta_rank,
                                        int num_ctas, const TileOrder &order, Epilogue &epi, const Scales &sc) {
  const int cw = wg - 1;  // consumer warpgroup 0/1: rows 64*cw .. 64*cw+63
  const int tid = threadIdx.x;
  const bool warp_leader = (tid & 31) == 0;
  float acc[Cfg::ACC];
#pragma unroll
  for (int i = 0; i < Cfg::ACC; ++i) acc[i] = 0.f;
  int stage = 0;
  uint32_t phase = 0;
  TileCtx ctx;
  ctx.M = M;
  ctx.N = N;
  ctx.wg = cw;
  ctx.tid = tid & 127;
  ctx.epi_smem = sm.sEpi + cw * Cfg::EPI_BYTES_PER_WG;
  ctx.epi_bar = sm.epi_bars + 2 * cw;
  Unit u;
  for (int i = 0; next_unit(order, cta_rank, num_ctas, i, nk, u); ++i) {
    const auto tile_ctx = [&] {
      ctx.tile_m = u.tm;
      ctx.tile_n = u.tn;
      ctx.row0 = u.tm * kBM + cw * 64;
      ctx.col0 = u.tn * Cfg::BN;
    };
    if constexpr (Cfg::FP8 != kNotFp8) {
      tile_ctx();  // the scales' hooks need the tile
      mma_tile_fp8<Cfg>(sm, cw, warp_leader, u.kb0, u.kb1, stage, phase, ctx, sc, acc);
      sc.finish(ctx, acc);
    } else {
      mma_tile<Cfg>(sm, cw, warp_leader, u.kb0, u.kb1, stage, phase, acc);
      tile_ctx();
    }
    if constexpr (HasUnits<TileOrder>::value) {
      if (u.part == kPartial) {
        order.template store_partial<Cfg::ACC>(ctx, u, acc);
        continue;
      }
      if (u.part == kFinish) order.template add_partials<Cfg::ACC>(ctx, u, acc);
    }
    epi.template operator()<Cfg::BN>(ctx, acc);
  }
  epi.finish(ctx);
}

/* Runs the whole persistent GEMM for this CTA.  Must be called by threads [0, 384) of the block
 * (all of them).  smem_raw: dynamic shared memory of at least Cfg::SMEM_BYTES.  tmA: A as a
 * {K, M} tensor (inner K), box {Cfg::BK, 128}; tmB: {K, N} box {Cfg::BK, BN} when B_KMAJOR, else
 * {N, K} box {64, 64}; both 128B-swizzled (a box row of 128 bytes), element bf16/fp16, or fp8
 * with Cfg::FP8.  sc: the fp8 engine's scales (ignored otherwise).  Cfg::CLUSTER 2: the block is
 * one of a cluster of 2 (cta_rank, num_ctas: the cluster's index and count), whose CTAs walk the
 * same pieces of work, the order giving each its own tile rows of the same B columns; tmB's box
 * is {Cfg::BK, BN / 2}, and a CTA with no rows of a piece still loads its half of B.  Each CTA
 * waits for its peer's half of B, so with clusters: the producer warpgroup's warps 1..3 stay
 * until the end (the final cluster barrier), not free for side roles; a load gate that holds one
 * CTA's producer holds its peer too; the order gives both CTAs the same K blocks (no stream-K
 * units). */
template <class Cfg, class TileOrder, class LoadGate, class Epilogue, class Scales>
__device__ __forceinline__ void run_engine_scaled(uint8_t *smem_raw, const CUtensorMap *tmA, const CUtensorMap *tmB,
                                                  int M, int N, int K, int cta_rank, int num_ctas,
                                                  const TileOrder &order, LoadGate &gate, Epilogue &epi,
                                                  const Scales &sc) {
  static_assert(Cfg::CLUSTER == 1 || !HasUnits<TileOrder>::value, "a cluster's CTAs walk the same K blocks");
  const EngineSmem<Cfg> sm(smem_raw);
  const int tid = threadIdx.x;
  const int wg = tid / 128;
  const int nk = (K + Cfg::BK - 1) / Cfg::BK;
  if (tid == 0) {
    for (int s = 0; s < Cfg::STAGES; ++s) {
      mbar_init(&sm.full[s], 1);
      mbar_init(&sm.empty[s], kConsumerWGs * 4 * Cfg::CLUSTER);  // one arrive per consumer warp of the cluster
    }
    for (int b = 0; b < 2 * kConsumerWGs; ++b) mbar_init(&sm.epi_bars[b], 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    prefetch_tmap(tmA);
    prefetch_tmap(tmB);
  }
  if constexpr (Cfg::CLUSTER > 1)
    cluster_sync();  // the peer's barriers are ready for its multicasts and arrivals
  else
    named_bar_sync(kBarInit, kThreads);
  if (wg == 0) {
    setmaxnreg_dec<kProducerRegs>();
    if (tid == 0) produce<Cfg>(sm, tmA, tmB, M, nk, cta_rank, num_ctas, order, gate);
  } else {
    setmaxnreg_inc<kConsumerRegs>();
    consume<Cfg>(sm, wg, M, N, nk, cta_rank, num_ctas, order, epi, sc);
  }
  if constexpr (Cfg::CLUSTER > 1) cluster_sync();  // no CTA leaves while its peer may still arrive here
}

template <class Cfg, class TileOrder, class LoadGate, class Epilogue>
__device__ __forceinline__ void run_engine(uint8_t *smem_raw, const CUtensorMap *tmA, const CUtensorMap *tmB, int M,
                                           int N, int K, int cta_rank, int num_ctas, const TileOrder &order,
                                           LoadGate &gate, Epilogue &epi) {
  run_engine_scaled<Cfg>(smem_raw, tmA, tmB, M, N, K, cta_rank, num_ctas, order, gate, epi, NoScales{});
}

}  // namespace gemm
}  // namespace mkx
