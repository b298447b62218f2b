/*
 * GEMM+ReduceScatter and GEMM+AllReduce on one node.
 *
 * A call on rank r (p ranks, owner q holds rows [bnd[q], bnd[q+1])):
 *   1. fused_prologue_kernel (fused/sync.cu): epoch += 1, chunk counts = 0,
 *      arrive at every peer, wait for all.
 *   2. tp_rs_kernel: the engine computes the partial A_r B_r, peers' rows
 *      first; a peer-bound sub-tile goes by TMA into a local staging buffer
 *      and is counted; the copy engines (host side, stream memory waits on
 *      the counts) move each finished chunk into its owner's receive slot
 *      and set the owner's arrival flag.  The own rows come last: their
 *      epilogue waits for the peers' chunks (already there by then), adds
 *      them to the accumulators and rounds once into C.  Allreduce: the
 *      same TMA stores write each rounded own sub-tile into every peer's C
 *      too, so the broadcast ends with the GEMM (the copy engines broadcasting
 *      finished chunks would leave a tail after it).  Partials
 *      never leave by SM: the copy engines move them while the GEMM runs.
 *   3. tp_late_kernel: the few tile rows shared by two owners, summed from
 *      every rank's fp32 partial after the GEMM.
 *   4. tp_ar_wait_kernel (allreduce) waits for every owner's done flags.
 */
#include "gemm/gemm_engine.cuh"
#include "fused/flags.cuh"
#include "tp/peer_stores.cuh"
#include "tp/tp.h"
#include "gemm/tmap.cuh"
#include "common/modules.cuh"

using namespace mkx::gemm;
using mkx::tp::PeerMaps;
using mkx::tp::PeerStores;

namespace {

/* ---- the GEMM: tile order and epilogue by tile kind --------------------- */

constexpr int kMaxSeg = MKX_FUSED_MAX + MKX_FUSED_MAX * 8 + 8;  // late rows, peers' chunks, own chunks

struct RsParams {
  int64_t bnd[MKX_FUSED_MAX + 1];
  mkx_tp_rs_layout L;
  int nrun, ngrp;
  int run_tm0[kMaxSeg], run_ntr[kMaxSeg];  // runs of whole tile rows
  int grp_run0[kMaxSeg + 1], grp_rows[kMaxSeg], grp_first[kMaxSeg + 1];
  int64_t stage_gap;  // rows of this rank: staging skips them
  int64_t slot_rows;  // rows of one source's receive slot
  float *late;
  int *counters;
  int own_subtiles;               // allreduce: sub-tiles of this rank's clean rows
  int *peer_done[MKX_FUSED_MAX];  // allreduce: every rank's done[] (mkx_tp_ar_wait)
  int push_sm;
  int *peer_counters[MKX_FUSED_MAX];  // push_sm: every rank's counters[]
  const int *arrived;
  const int *epoch;
  int64_t c_row0;
  int size, rank, allreduce, p_type, c_type;
  mkx_fused_sync sync;
};

/* Groups of runs of whole tile rows, walked in order; inside a group down
 * its rows, then across, so B streams from memory once per group (groups of
 * ~16 tile rows, as the engine's grouped order) while the copy engines see
 * chunks finish group by group. */
struct GroupTileOrder {
  const RsParams *p;
  __device__ __forceinline__ int num_tiles() const { return p->grp_first[p->ngrp]; }
  __device__ __forceinline__ void get(int idx, int &tm, int &tn) const {
    int g = 0;
    while (idx >= p->grp_first[g + 1]) ++g;
    const int local = idx - p->grp_first[g], rows = p->grp_rows[g];
    int ri = local % rows;
    tn = local / rows;
    int s = p->grp_run0[g];
    while (ri >= p->run_ntr[s]) ri -= p->run_ntr[s++];
    tm = p->run_tm0[s] + ri;
  }
};

enum { kKindLate = 0, kKindPeer = 1, kKindOwn = 2 };

/* An element pair of a 128B-swizzled staging buffer, as fp32. */
template <typename T>
__device__ __forceinline__ float2 ld_smem_pair(uint32_t addr);
template <>
__device__ __forceinline__ float2 ld_smem_pair<float>(uint32_t addr) {
  float2 v;
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(addr) : "memory");
  return v;
}
__device__ __forceinline__ uint32_t ld_smem_b32(uint32_t addr) {
  uint32_t u;
  asm volatile("ld.shared.b32 %0, [%1];" : "=r"(u) : "r"(addr) : "memory");
  return u;
}
template <>
__device__ __forceinline__ float2 ld_smem_pair<__nv_bfloat16>(uint32_t addr) {
  const uint32_t u = ld_smem_b32(addr);
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&u));
}
template <>
__device__ __forceinline__ float2 ld_smem_pair<__half>(uint32_t addr) {
  const uint32_t u = ld_smem_b32(addr);
  return __half22float2(*reinterpret_cast<const __half2 *>(&u));
}

/* Sub-tiles of this rank's chunk c from each source (as
 * mkx_tp_rs_chunk_subtiles: both warpgroups count every tile). */
__device__ __forceinline__ int own_chunk_subtiles(const RsParams *p, int c) {
  const mkx_tp_rs_layout &L = p->L;
  const int t0 = L.clean_a[p->rank] + c * L.chunk_tr[p->rank];
  const int t1 = t0 + L.chunk_tr[p->rank] < L.clean_b[p->rank] ? t0 + L.chunk_tr[p->rank] : L.clean_b[p->rank];
  return 2 * (t1 - t0) * L.tiles_n;
}

struct RsEpilogue {
  const RsParams *p;
  const CUtensorMap *tm_stage, *tm_c, *tm_slots;
  const PeerMaps *peer_c, *peer_slot;
  int M, epoch;
  int *pend;  // counter to bump once this WG's stores landed (thread 0)
  /* bits 0, 1: parity of each staging buffer's mbarrier; kVoid: the run
   * is void, nothing goes into the peers' memory (one register for both:
   * the epilogue has none to spare) */
  uint32_t ld_phase;
  static constexpr uint32_t kVoid = 4u;
  __device__ __forceinline__ bool peers_ok() const { return !(ld_phase & kVoid); }

  __device__ __forceinline__ int owner_of(int64_t row) const {
    int q = 0;
    while (q + 1 < p->size && row >= p->bnd[q + 1]) ++q;
    return q;
  }
  __device__ __forceinline__ int kind_of(int tm, int &q, int &chunk) const {
    for (int i = 0; i < p->L.nlate; ++i)
      if (p->L.late_tm[i] == tm) {
        chunk = i;
        return kKindLate;
      }
    q = owner_of((int64_t)tm * kBM);
    chunk = (tm - p->L.clean_a[q]) / p->L.chunk_tr[q];
    return q == p->rank ? kKindOwn : kKindPeer;
  }
  /* The previous sub-tile's stores have had a whole main loop to land: wait
   * for them (normally no wait), make them visible to the copy engine, count. */
  __device__ __forceinline__ void flush() {
    if (!pend) return;
    bulk_wait<0>();
    asm volatile("fence.proxy.async.global;" ::: "memory");
    __threadfence_system();
    const int before = atomicAdd(pend, 1);
    if (p->allreduce && pend == own_count() && before == p->own_subtiles - 1) tell_peers();
    pend = nullptr;
  }
  /* Allreduce: sub-tiles of own rows stored into every peer's C (one count
   * for all of them: the peers wait for the whole block). */
  __device__ __forceinline__ int *own_count() const { return p->counters + p->rank * MKX_FUSED_MAXCH; }
  /* The last of them: every earlier count came with its stores complete
   * (threadFenceReduction pattern at system scope). */
  __device__ __forceinline__ void tell_peers() const {
    __threadfence_system();
    for (int q = 0; q < p->size; ++q)
      if (q != p->rank) mkx::fused::st_release(p->peer_done[q] + p->rank, epoch);
  }
  template <int BN>
  __device__ __forceinline__ void operator()(const TileCtx &t, float (&acc)[BN / 2]) {
    if (t.tid == 0) flush();
    int q = 0, chunk = 0;
    const int kind = kind_of(t.tile_m, q, chunk);
    if (kind == kKindLate) {
      store_late<BN>(t, acc, chunk);
    } else if (kind == kKindPeer && p->push_sm) {
      if (!peers_ok()) return;
      if (t.row0 < M) store_typed<BN>(t, acc, &peer_slot->c[q], p->p_type, (int)(t.row0 - p->bnd[q]));
      if (t.tid == 0) pend = p->peer_counters[q] + p->rank * MKX_FUSED_MAXCH + chunk;
    } else if (kind == kKindPeer) {
      if (t.row0 < M)
        store_typed<BN>(t, acc, tm_stage, p->p_type, (int)(t.row0 - (t.row0 >= p->bnd[p->rank] ? p->stage_gap : 0)));
      if (t.tid == 0) pend = p->counters + q * MKX_FUSED_MAXCH + chunk;
    } else {
      if (t.row0 < M) {
        wait_arrivals(t, chunk);
        add_peers<BN>(t, acc);
        const int y = (int)(t.row0 - p->c_row0);
        if (p->allreduce && peers_ok())
          store_typed<BN>(t, acc, tm_c, p->c_type, y, PeerStores{peer_c, p->size, p->rank});
        else
          store_typed<BN>(t, acc, tm_c, p->c_type, y);
      }
      if (p->allreduce && peers_ok() && t.tid == 0) pend = own_count();
    }
  }
  template <int BN, class Extra = NoExtraStore>
  __device__ __forceinline__ void store_typed(const TileCtx &t, float (&acc)[BN / 2], const CUtensorMap *map, int type,
                                              int y, const Extra &extra = Extra()) {
    if (type == MKX_GEMM_FP32)
      tma_store_subtile<float, BN>(t, acc, map, y, extra);
    else if (type == MKX_GEMM_FP16)
      tma_store_subtile<__half, BN>(t, acc, map, y, extra);
    else
      tma_store_subtile<__nv_bfloat16, BN>(t, acc, map, y, extra);
  }
  /* Thread 0 waits for every peer's partial of this chunk; the slot loads
   * (async proxy) come after it. */
  __device__ __forceinline__ void wait_arrivals(const TileCtx &t, int chunk) {
    if (t.tid != 0) return;
    const int *word = p->push_sm ? p->counters : p->arrived;
    const int target = p->push_sm ? own_chunk_subtiles(p, chunk) : epoch;
    for (int s = 0; s < p->size; ++s)
      if (s != p->rank)
        mkx::fused::wait_geq(word + s * MKX_FUSED_MAXCH + chunk, target, p->sync, s, t.tile_m * 65536 + t.tile_n,
                             MKX_FUSED_AT_RS_TILE);
    asm volatile("fence.proxy.async.global;" ::: "memory");
  }
  template <int BN>
  __device__ __forceinline__ void add_peers(const TileCtx &t, float (&acc)[BN / 2]) {
    if (p->p_type == MKX_GEMM_FP32)
      add_peers_t<float, BN>(t, acc);
    else if (p->p_type == MKX_GEMM_FP16)
      add_peers_t<__half, BN>(t, acc);
    else
      add_peers_t<__nv_bfloat16, BN>(t, acc);
  }
  /* Load i of a tile: column chunk i / np of peer i % np (rank order, own
   * rank skipped) into staging buffer i & 1, by TMA (thread 0). */
  __device__ __forceinline__ void issue_load(const TileCtx &t, int i, int np, int ch) {
    const int j = i / np, si = i % np, s = si < p->rank ? si : si + 1;
    const int row = (int)(s * p->slot_rows + (t.row0 - p->bnd[p->rank]));
    mbar_arrive_expect_tx(&t.epi_bar[i & 1], 64 * 128);
    tma_load_2d(t.epi_smem + (i & 1) * (64 * 128), tm_slots, &t.epi_bar[i & 1], t.col0 + j * ch, row);
  }
  /* acc += every peer's partial of this sub-tile, peers in rank order for
   * each element (same bits every run).  The slots come through the two
   * staging buffers by TMA, two loads in flight: register loads of them
   * leave the epilogue latency-bound (few loads fit beside the
   * accumulators). */
  template <typename P, int BN>
  __device__ __forceinline__ void add_peers_t(const TileCtx &t, float (&acc)[BN / 2]) {
    constexpr int ESZ = (int)sizeof(P), CH = 128 / ESZ, QPC = CH / 8, NCH = BN / CH;
    const int np = p->size - 1, n = NCH * np;
    if (n == 0) return;
    if (t.tid == 0) {
      bulk_wait_read<0>();  // the last tile's stores have read the buffers
      issue_load(t, 0, np, CH);
      if (n > 1) issue_load(t, 1, np, CH);
    }
    const uint32_t base = smem_u32(t.epi_smem);
    const int r = t.acc_row(0), cb = (t.tid & 3) * 2 * ESZ;
#pragma unroll
    for (int j = 0; j < NCH; ++j) {
      for (int si = 0; si < np; ++si) {
        const int i = j * np + si, b = i & 1;
        mbar_wait(&t.epi_bar[b], (ld_phase >> b) & 1u);
        ld_phase ^= 1u << b;
        const uint32_t buf = base + b * (64 * 128);
#pragma unroll
        for (int qq = 0; qq < QPC; ++qq) {
          const int q = j * QPC + qq, bcol = qq * 8 * ESZ + cb;
          const float2 v0 = ld_smem_pair<P>(swizzled_128b(buf, r, bcol));
          const float2 v1 = ld_smem_pair<P>(swizzled_128b(buf, r + 8, bcol));
          acc[4 * q] += v0.x;
          acc[4 * q + 1] += v0.y;
          acc[4 * q + 2] += v1.x;
          acc[4 * q + 3] += v1.y;
        }
        fence_proxy_async_smem();  // these reads before the next TMA write of the buffer
        t.wg_sync();
        if (t.tid == 0 && i + 2 < n) issue_load(t, i + 2, np, CH);
      }
    }
  }
  /* fp32 partial of a tile row shared by several owners (rare: at most p - 1
   * tile rows), plain stores; the late kernel, later on this stream, reads it. */
  template <int BN>
  __device__ __forceinline__ void store_late(const TileCtx &t, float (&acc)[BN / 2], int li) {
    const int r = t.acc_row(0);
    float *base = p->late + (int64_t)li * kBM * t.N;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t g = t.row0 + r + 8 * h;
      if (g >= M) continue;
      float *row = base + (g - (int64_t)t.tile_m * kBM) * t.N;
#pragma unroll
      for (int j = 0; j < BN / 8; ++j) {
        const int col = t.col0 + 8 * j + (t.tid & 3) * 2;
        if (col < t.N) *reinterpret_cast<float2 *>(row + col) = make_float2(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
      }
    }
  }
  __device__ __forceinline__ void finish(const TileCtx &t) {
    if (t.tid == 0) {
      flush();
      bulk_wait<0>();
      mkx::fused::peer_gave_up(p->sync);  // after this warpgroup's last wait
    }
  }
};

template <int BN, int STAGES, bool BKM, bool F16>
__global__ void __launch_bounds__(kThreads, 1)
    tp_rs_kernel(const __grid_constant__ CUtensorMap tmA, const __grid_constant__ CUtensorMap tmB,
                 const __grid_constant__ CUtensorMap tmStage, const __grid_constant__ CUtensorMap tmC,
                 const __grid_constant__ CUtensorMap tmSlots, const __grid_constant__ PeerMaps tmPeerC,
                 const __grid_constant__ PeerMaps tmPeerSlot, const __grid_constant__ RsParams p, int M, int N, int K) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  extern __shared__ __align__(1024) uint8_t smem[];
  typedef Config<BN, STAGES, BKM, F16> Cfg;
  GroupTileOrder order{&p};
  NoLoadGate gate;
  /* a run void when the kernel starts (a failed prologue: a peer may not
   * have joined it) stores nothing into the peers' C or slots by SM; the
   * copy engines' chunks still land in the slots, which the tells void */
  const bool run_void = __syncthreads_or(threadIdx.x == 0 && mkx::fused::run_void(p.sync));
  RsEpilogue epi{&p,       &tmStage,
                 &tmC,     &tmSlots,
                 &tmPeerC, &tmPeerSlot,
                 M,        *(volatile const int *)p.epoch,
                 nullptr,  run_void ? RsEpilogue::kVoid : 0u};
  run_engine<Cfg>(smem, &tmA, &tmB, M, N, K, (int)blockIdx.x, (int)gridDim.x, order, gate, epi);
#endif
}

/* Runs: late tile rows, then peers' chunks dealt (chunk 0 of owner rank+1,
 * rank+2, ..., then chunk 1, ...) so that every owner gets its first chunks
 * early, then own chunks in order (their partials from the peers are the
 * first to arrive).  Groups never mix phases: an own tile may wait for
 * peers, a peer-bound or late tile never does, so every CTA's peer-bound
 * tiles finish whatever the waits. */
struct RunBuilder {
  RsParams &p;
  int tiles_n, group_max, phase = -1, first = 0;
  void close_group() {
    if (p.ngrp == 0 || p.grp_rows[p.ngrp - 1] == 0) return;
    first += p.grp_rows[p.ngrp - 1] * tiles_n;
    p.grp_first[p.ngrp] = first;
  }
  void add(int tm0, int ntr, int ph, int gmax) {
    const bool fresh = p.ngrp == 0 || ph != phase || p.grp_rows[p.ngrp - 1] + ntr > gmax;
    if (fresh) {
      if (p.ngrp > 0) close_group();
      p.grp_run0[p.ngrp] = p.nrun;
      p.grp_rows[p.ngrp] = 0;
      p.grp_first[p.ngrp] = first;
      ++p.ngrp;
    }
    phase = ph;
    p.run_tm0[p.nrun] = tm0;
    p.run_ntr[p.nrun] = ntr;
    ++p.nrun;
    p.grp_rows[p.ngrp - 1] += ntr;
  }
  void done() {
    close_group();
    if (p.ngrp == 0) p.grp_first[0] = 0;
    p.grp_run0[p.ngrp] = p.nrun;
  }
};

/* One chunk per group.  Larger groups stream B less often but finish
 * chunks in bursts, leaving the copy engines' stream waits unsatisfied for
 * longer: they were slower on every benchmark shape
 * (tests/perf/results/tp-h200x2.md). */
void make_runs(const mkx_tp_rs_desc *d, RsParams &p) {
  const mkx_tp_rs_layout &L = d->layout;
  const int gpush = 1, gown = 1;
  RunBuilder b{p, L.tiles_n, gpush};
  auto chunk = [&](int q, int c, int ph, int gmax) {
    const int tm0 = L.clean_a[q] + c * L.chunk_tr[q];
    const int tm1 = tm0 + L.chunk_tr[q] < L.clean_b[q] ? tm0 + L.chunk_tr[q] : L.clean_b[q];
    b.add(tm0, tm1 - tm0, ph, gmax);
  };
  for (int i = 0; i < L.nlate; ++i) b.add(L.late_tm[i], 1, 0, gpush);
  int maxch = 0;
  for (int q = 0; q < d->size; ++q) maxch = L.nchunk[q] > maxch ? L.nchunk[q] : maxch;
  for (int c = 0; c < maxch; ++c)
    for (int i = 1; i < d->size; ++i) {
      const int q = (d->rank + i) % d->size;
      if (c < L.nchunk[q]) chunk(q, c, 1, gpush);
    }
  for (int c = 0; c < L.nchunk[d->rank]; ++c) chunk(d->rank, c, 2, gown);
  b.done();
}

template <int BN, int STAGES, bool BKM, bool F16>
int launch_rs(const mkx_tp_rs_desc *d, cudaStream_t s) {
  typedef Config<BN, STAGES, BKM, F16> Cfg;
  CUtensorMap tmA, tmB, tmStage, tmC, tmSlots;
  RsParams p;
  memset(&p, 0, sizeof p);
  const int abt = F16 ? MKX_GEMM_FP16 : MKX_GEMM_BF16;
  const int64_t own = d->bnd[d->rank + 1] - d->bnd[d->rank];
  const int64_t stage_rows = d->m - own, c_rows = d->allreduce ? d->m : own;
  int rc = make_tmap(&tmA, d->a, abt, d->k, d->m, d->lda, kBM);
  if (!rc)
    rc = BKM ? make_tmap(&tmB, d->b, abt, d->k, d->n, d->ldb, BN) : make_tmap(&tmB, d->b, abt, d->n, d->k, d->ldb, 64);
  /* an empty tensor cannot be encoded: a 1-row stand-in never stored to */
  if (!rc) rc = make_tmap(&tmStage, d->stage, d->p_type, d->n, stage_rows > 0 ? stage_rows : 1, d->n, 64);
  if (!rc) rc = make_tmap(&tmC, d->c, d->c_type, d->n, c_rows > 0 ? c_rows : 1, d->ldc, 64);
  const int64_t slot_rows = d->slot_stride / d->n;
  if (!rc) rc = make_tmap(&tmSlots, d->slots, d->p_type, d->n, d->size * slot_rows, d->n, 64);
  PeerMaps peer_c;
  memset(&peer_c, 0, sizeof peer_c);
  for (int q = 0; !rc && d->allreduce && q < d->size; ++q)
    if (q != d->rank) rc = make_tmap(&peer_c.c[q], d->peer_c[q], d->c_type, d->n, d->m, d->peer_ldc[q], 64);
  /* each owner's slot of this rank alone: a sub-tile past the owner's
   * rows is clipped, never stored into the next source's slot */
  PeerMaps peer_slot;
  memset(&peer_slot, 0, sizeof peer_slot);
  for (int q = 0; !rc && d->push_sm && q < d->size; ++q) {
    const int64_t rows = d->bnd[q + 1] - d->bnd[q];
    if (q != d->rank && rows > 0) rc = make_tmap(&peer_slot.c[q], d->peer_slot[q], d->p_type, d->n, rows, d->n, 64);
  }
  int sms = 0;
  if (!rc) rc = num_sms(&sms, d->sync.ctas);
  if (rc) return rc;
  for (int q = 0; q <= d->size; ++q) p.bnd[q] = d->bnd[q];
  p.L = d->layout;
  make_runs(d, p);
  p.stage_gap = own;
  p.slot_rows = slot_rows;
  p.late = d->late;
  p.counters = d->counters;
  const mkx_tp_rs_layout &L = d->layout;
  p.own_subtiles = 2 * (L.clean_b[d->rank] - L.clean_a[d->rank]) * L.tiles_n;
  for (int q = 0; q < d->size; ++q) p.peer_done[q] = d->peer_done[q];
  p.push_sm = d->push_sm;
  for (int q = 0; q < d->size; ++q) p.peer_counters[q] = d->peer_counters[q];
  p.arrived = d->arrived;
  p.epoch = d->epoch;
  p.c_row0 = d->c_row0;
  p.size = d->size;
  p.rank = d->rank;
  p.allreduce = d->allreduce;
  p.p_type = d->p_type;
  p.c_type = d->c_type;
  p.sync = d->sync;
  const int tiles = p.grp_first[p.ngrp];
  if (tiles == 0) return 0;
  const int ctas = sms < tiles ? sms : tiles;
  auto kern = tp_rs_kernel<BN, STAGES, BKM, F16>;
  rc = smem_attr_once<tp_rs_kernel<BN, STAGES, BKM, F16>>((int)Cfg::SMEM_BYTES);
  if (rc) return rc;
  kern<<<ctas, kThreads, Cfg::SMEM_BYTES, s>>>(tmA, tmB, tmStage, tmC, tmSlots, peer_c, peer_slot, p, (int)d->m,
                                               (int)d->n, (int)d->k);
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? 0 : (int)e;
}

template <int BN, int STAGES>
int launch_rs_tile(const mkx_tp_rs_desc *d, cudaStream_t s) {
  const bool f16 = d->ab_type == MKX_GEMM_FP16;
  if (d->b_kmajor) return f16 ? launch_rs<BN, STAGES, true, true>(d, s) : launch_rs<BN, STAGES, true, false>(d, s);
  return f16 ? launch_rs<BN, STAGES, false, true>(d, s) : launch_rs<BN, STAGES, false, false>(d, s);
}

/* ---- late tile rows -------------------------------------------------------- */

/* Four fp32 values as OutT, one 16- or 8-byte store. */
template <typename OutT>
__device__ __forceinline__ void store4(OutT *p, float4 v) {
  if constexpr (sizeof(OutT) == 4) {
    *reinterpret_cast<float4 *>(p) = v;
  } else {
    typedef typename OutCvt<OutT>::pair_t P;
    P a = OutCvt<OutT>::pack(v.x, v.y), b = OutCvt<OutT>::pack(v.z, v.w);
    uint2 u;
    u.x = *reinterpret_cast<uint32_t *>(&a);
    u.y = *reinterpret_cast<uint32_t *>(&b);
    *reinterpret_cast<uint2 *>(p) = u;
  }
}

template <typename OutT>
__global__ void __launch_bounds__(256) tp_late_kernel(const __grid_constant__ mkx_tp_late_desc d) {
  const int epoch = *(volatile const int *)(d.sync.ws[d.sync.rank] + MKX_FUSED_OFF_EPOCH);
  mkx::fused::meet(d.sync, MKX_FUSED_OFF_LATE_READY, epoch, MKX_FUSED_AT_LATE);
  if (threadIdx.x == 0) mkx::fused::peer_gave_up(d.sync);
  const bool peers_ok = !__syncthreads_or(threadIdx.x == 0 && mkx::fused::run_void(d.sync)) && d.allreduce;
  const int me = d.rank;
  const int64_t ncol4 = d.n / 4;
  for (int li = 0; li < d.nlate; ++li) {
    const int64_t t0 = (int64_t)d.late_tm[li] * 128;
    const int64_t r0 = max(t0, d.bnd[me]), r1 = min(min(t0 + 128, d.m), d.bnd[me + 1]);
    const int64_t total = r1 > r0 ? (r1 - r0) * ncol4 : 0;
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < total;
         idx += (int64_t)gridDim.x * blockDim.x) {
      const int64_t row = r0 + idx / ncol4, col = (idx % ncol4) * 4;
      const int64_t off = ((int64_t)li * 128 + (row - t0)) * d.n + col;
      float4 s = __ldcg(reinterpret_cast<const float4 *>(d.late[0] + off));
      for (int q = 1; q < d.sync.size; ++q) {
        const float4 v = __ldcg(reinterpret_cast<const float4 *>(d.late[q] + off));
        s.x += v.x;
        s.y += v.y;
        s.z += v.z;
        s.w += v.w;
      }
      store4<OutT>(static_cast<OutT *>(d.c) + (row - d.c_row0) * d.ldc + col, s);
      if (peers_ok)
        for (int q = 0; q < d.sync.size; ++q)
          if (q != me) store4<OutT>(static_cast<OutT *>(d.peer_c[q]) + row * d.peer_ldc[q] + col, s);
    }
  }
  if (!d.allreduce) return;
  __threadfence_system();  // every thread's pushes, before the block counts itself
  __syncthreads();
  /* the last block to finish tells the peers */
  if (threadIdx.x == 0 && mkx::fused::last_block(d.sync) && peers_ok)
    for (int q = 0; q < d.sync.size; ++q)
      mkx::fused::st_release(reinterpret_cast<int *>(d.sync.ws[q] + MKX_FUSED_OFF_DONE_LATE) + d.sync.rank, epoch);
}

__global__ void tp_ar_wait_kernel(mkx_fused_sync s, int late) {
  const int *ws = reinterpret_cast<const int *>(s.ws[s.rank]);
  const int target = *(volatile const int *)(ws + MKX_FUSED_OFF_EPOCH / 4);
  const int q = threadIdx.x;
  if (q >= s.size || q == s.rank) return;
  mkx::fused::wait_geq(ws + MKX_FUSED_OFF_DONE / 4 + q, target, s, q, -1, MKX_FUSED_AT_AR_DONE);
  if (late) mkx::fused::wait_geq(ws + MKX_FUSED_OFF_DONE_LATE / 4 + q, target, s, q, -1, MKX_FUSED_AT_AR_DONE);
  mkx::fused::peer_gave_up(s);
}

int last_error() {
  cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? 0 : (int)e;
}

}  // namespace

extern "C" int mkx_tp_rs_gemm(const mkx_tp_rs_desc *d, cudaStream_t s) {
  if (!d || d->m <= 0 || d->n <= 0 || d->k <= 0 || d->size < 1 || d->size > MKX_FUSED_MAX) return MKX_GEMM_EINVAL;
  for (int q = 0; d->push_sm && q < d->size; ++q)
    if (q != d->rank && (!d->peer_slot[q] || !d->peer_counters[q])) return MKX_GEMM_EINVAL;
  if (d->layout.bn == 256) return launch_rs_tile<256, 4>(d, s);
  if (d->layout.bn == 128) return launch_rs_tile<128, 6>(d, s);
  return MKX_GEMM_EINVAL;
}

extern "C" int mkx_tp_rs_late(const mkx_tp_late_desc *d, cudaStream_t st) {
  if (!d || d->sync.size < 1 || d->sync.size > MKX_FUSED_MAX || d->n % 4) return MKX_GEMM_EINVAL;
  /* every block meets the peers: on a GPU shared under MPS they must not
   * sit on every SM */
  const int blocks = at_most(132, d->sync.ctas);
  switch (d->c_type) {
    case MKX_GEMM_BF16:
      tp_late_kernel<__nv_bfloat16><<<blocks, 256, 0, st>>>(*d);
      break;
    case MKX_GEMM_FP16:
      tp_late_kernel<__half><<<blocks, 256, 0, st>>>(*d);
      break;
    case MKX_GEMM_FP32:
      tp_late_kernel<float><<<blocks, 256, 0, st>>>(*d);
      break;
    default:
      return MKX_GEMM_EINVAL;
  }
  return last_error();
}

extern "C" int mkx_tp_ar_wait(const mkx_fused_sync *s, int late, cudaStream_t st) {
  if (!s || s->size < 1 || s->size > MKX_FUSED_MAX) return MKX_GEMM_EINVAL;
  tp_ar_wait_kernel<<<1, 32, 0, st>>>(*s, late);
  return last_error();
}
