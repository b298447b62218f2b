/*
 * AllGather+GEMM on one node: the Hopper engine (kernels/gemm) with a
 * bounded flag gate.  The gathered A lives in this rank's symmetric
 * workspace and is filled by the copy engines of every rank (src/ops/
 * tp/ag_gpu.c).  Source rank s owns rows [bnd[s], bnd[s+1]) of it (any
 * share, 0 included), so a 128-row tile of A may hold rows of several
 * sources: every (source, tile) pair has its own flag, flags[s * tiles_m +
 * tile], which s's copy engine sets to the call's epoch once all of s's
 * rows of that tile have landed.  Before loading a tile the producer waits
 * for the flags of every source whose rows meet the tile.  The CTAs start
 * on this rank's own rows (first_tile_m), then walk on to the peers' rows
 * as they arrive.  The tiles that hold only this rank's rows are loaded
 * from its own A in place (a second tensor map) without a wait: copying
 * them into the gathered A first held the GEMM back by a local copy of A.
 */
#include <algorithm>
#include <atomic>
#include "gemm/gemm_engine.cuh"
#include "fused/flags.cuh"
#include "tp/tp.h"
#include "gemm/tmap.cuh"
#include "common/modules.cuh"

using namespace mkx::gemm;

namespace {

constexpr int kGroupM = 16;

struct AgParams {
  const int *flags;  // flags[s * tiles_m + tile]: source s's rows of the tile are here
  const int *epoch;
  int bnd[MKX_FUSED_MAX + 1];  // source s holds rows [bnd[s], bnd[s+1]) of the gathered A
  int size;
  int first_tile_m, tiles_m, tiles_n, group_m;
  int own_t0, own_t1, own_row0;  // tiles read from this rank's own A (tmOwn)
  int dp_tiles, sk_len;          // StreamKOrder
  float *sk_part;
  int *sk_flags;
  mkx_fused_sync sync;
  unsigned ready_mask, net_mask;  // sources without a wait; over the network
  const uint64_t *net_signals;    // network sources' words (mkx_tp_ag_desc)
  const uint64_t *net_epoch;
  uint32_t net_slot0, net_words;
  int net_chunk_tiles;
  int *net_landed;
};

/* Stream-K over the last, uneven wave: of T tiles on C CTAs, the first
 * T - R (R = T % C) go whole to the CTAs in turn, and the K blocks of the
 * last R are dealt out evenly, sk_len to each CTA, so that no CTA idles
 * through that wave (2048 tiles of 128 x 256 at M = N = 8192 leave 68 for
 * a last wave on 132 SMs: 1/16 of the call with half the SMs idle).  A
 * CTA takes its shares last tile first: the share it does not finish (a
 * tile's head, kPartial) goes to its slot before it waits, as finisher,
 * for the heads of the tile whose last K block it has; so no CTA waits for
 * one that is itself waiting.  The finisher adds the heads in CTA order:
 * the same bits every run. */
struct StreamKOrder {
  RotatedTileOrder base;
  const AgParams *p;
  int target;
  __device__ __forceinline__ bool unit(int cta, int n, int i, int nk, Unit &u) const {
    const int dp = p->dp_tiles, nd = cta < dp ? (dp - cta + n - 1) / n : 0;
    if (i < nd) {
      base.get(cta + i * n, u.tm, u.tn);
      u.kb0 = 0, u.kb1 = nk, u.part = kWhole;
      return true;
    }
    const int len = p->sk_len, total = (base.num_tiles() - dp) * nk;
    const int s = cta * len, e = min(s + len, total);
    if (len == 0 || s >= e) return false;
    const int t = (e - 1) / nk - (i - nd), t0 = t * nk;
    if (t < s / nk) return false;
    base.get(dp + t, u.tm, u.tn);
    u.kb0 = max(s, t0) - t0;
    u.kb1 = min(e, t0 + nk) - t0;
    u.part = u.kb1 < nk ? kPartial : u.kb0 > 0 ? kFinish : kWhole;
    u.aux0 = u.part == kPartial ? cta : t0 / len;  // own slot / first head's CTA
    u.aux1 = cta;                                  // heads: CTAs [aux0, aux1)
    return true;
  }
  __device__ __forceinline__ float *slot(int c, int wg, int n, int tid) const {
    return p->sk_part + (int64_t)(2 * c + wg) * n * 128 + tid;
  }
  template <int N>
  __device__ __forceinline__ void store_partial(const TileCtx &t, const Unit &u, float (&acc)[N]) const {
    float *dst = slot(u.aux0, t.wg, N, t.tid);
#pragma unroll
    for (int i = 0; i < N; ++i) __stcg(dst + i * 128, acc[i]);
    t.wg_sync();
    if (t.tid == 0) mkx::fused::st_release(p->sk_flags + 2 * u.aux0 + t.wg, target);
  }
  template <int N>
  __device__ __forceinline__ void add_partials(const TileCtx &t, const Unit &u, float (&acc)[N]) const {
    if (t.tid == 0)
      for (int c = u.aux0; c < u.aux1; ++c)
        mkx::fused::wait_geq(p->sk_flags + 2 * c + t.wg, target, p->sync, p->sync.rank, u.tm, MKX_FUSED_AT_SPLIT_TILE);
    t.wg_sync();
    for (int c = u.aux0; c < u.aux1; ++c) {
      const float *src = slot(c, t.wg, N, t.tid);
#pragma unroll
      for (int i = 0; i < N; ++i) acc[i] += __ldcg(src + i * 128);
    }
  }
};

/* FlagLoadGate per (source, tile) with a bound: before the loads of rows
 * [row0, row0 + nrows) wait for every source with rows among them; a wait
 * gives up after timeout_ns (and leaves the error word naming the source
 * and tile) rather than hang the GPU on a peer that never arrives. */
struct BoundedFlagGate {
  const AgParams *p;       // the kernel's __grid_constant__ parameters
  const CUtensorMap *own;  // this rank's own A (kernel parameter)
  int target;
  uint64_t net_target;  // the call's network epoch (network sources)
  __device__ __forceinline__ bool in_place(int tm) const { return tm >= p->own_t0 && tm < p->own_t1; }
  __device__ __forceinline__ void a_source(int tm, const CUtensorMap *&map, int &row) {
    if (!in_place(tm)) return;
    map = own;
    row = tm * kBM - p->own_row0;
  }
  __device__ __forceinline__ void wait_rows(int tm, int row0, int nrows) {
    if (in_place(tm)) return;  // the caller's A, ready before the kernel
    const int row1 = row0 + nrows;
    const int *f = p->flags + tm;
    for (int s = 0; s < p->size; ++s, f += p->tiles_m) {
      const int b0 = p->bnd[s], b1 = p->bnd[s + 1];
      if (b0 >= b1 || b0 >= row1 || b1 <= row0 || (p->ready_mask >> s & 1)) continue;
      if (p->net_mask >> s & 1) {
        const int chunk = (tm - b0 / kBM) / p->net_chunk_tiles;
        const uint64_t *w = p->net_signals + p->net_slot0 + (uint32_t)s * p->net_words + 1 + chunk;
        wait_landed(p->net_landed + s * (int)p->net_words + chunk, w, s, tm);
      } else {
        mkx::fused::wait_geq(f, target, p->sync, s, tm, MKX_FUSED_AT_AG_TILE);
      }
    }
    asm volatile("fence.proxy.async.global;" ::: "memory");
  }
  __device__ __forceinline__ void wait_k(int, int) {}
  /* The signal words are host memory: a system-scope read of one from
   * every CTA before every tile stalls the producers across PCIe (and
   * slows each other's reads), so the first CTA to see a chunk landed says
   * so in device memory, where every CTA looks first. */
  __device__ __forceinline__ void wait_landed(int *landed, const uint64_t *w, int s, int tm) {
    mkx::fused::wait_for(
        [&] {
          if (mkx::fused::geq(mkx::fused::ld_acquire(landed), target)) return true;
          if (mkx::fused::ld_acquire(w) < net_target) return false;
          mkx::fused::st_release(landed, target);
          return true;
        },
        p->sync, s, tm, MKX_FUSED_AT_NET_ROWS);
  }
};

template <int BN, int STAGES, bool BKM, bool F16, typename OutT>
__global__ void __launch_bounds__(kThreads, 1)
    tp_ag_kernel(const __grid_constant__ CUtensorMap tmA, const __grid_constant__ CUtensorMap tmB,
                 const __grid_constant__ CUtensorMap tmC, const __grid_constant__ CUtensorMap tmOwn,
                 const __grid_constant__ AgParams p, int M, int N, int K) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  extern __shared__ __align__(1024) uint8_t smem[];
  typedef Config<BN, STAGES, BKM, F16> Cfg;
  /* The epoch is read on the GPU (written by this call's prologue), so a
   * graph replay waits for its own epoch, not the captured one. */
  const int epoch = *(volatile const int *)p.epoch;
  StreamKOrder order{RotatedTileOrder{GroupedTileOrder{p.tiles_m, p.tiles_n, p.group_m}, p.first_tile_m}, &p, epoch};
  BoundedFlagGate gate{&p, &tmOwn, epoch, p.net_mask ? *(volatile const uint64_t *)p.net_epoch : 0};
  StoreCTma<OutT> epi{&tmC};
  run_engine<Cfg>(smem, &tmA, &tmB, M, N, K, (int)blockIdx.x, (int)gridDim.x, order, gate, epi);
  if (threadIdx.x == 0) mkx::fused::peer_gave_up(p.sync);  // the producer, after its last wait
#endif
}

std::atomic<long> g_sk_launches{0};

/* Stream-K where the last wave is uneven enough to gain (under 90% full)
 * and every CTA has a slot; else whole tiles only.  Shares of at least
 * 1/8 of K: a finisher adds at most ~8 slots. */
void split_last_wave(const mkx_tp_ag_desc *d, int tiles, int ctas, AgParams &p) {
  const int r = tiles % ctas;
  const bool sk = d->sk_part && d->sk_flags && tiles > ctas && r > 0 && 10 * r <= 9 * ctas && ctas <= MKX_TP_SK_SLOTS;
  const int64_t nk = cdiv(d->k, kBK);
  p.dp_tiles = sk ? tiles - r : tiles;
  p.sk_len = sk ? (int)std::max(cdiv(r * nk, ctas), cdiv(nk, 8)) : 0;
  p.sk_part = d->sk_part;
  p.sk_flags = d->sk_flags;
  if (sk) g_sk_launches.fetch_add(1, std::memory_order_relaxed);
}

template <int BN, int STAGES, bool BKM, bool F16, typename OutT>
int launch(const mkx_tp_ag_desc *d, cudaStream_t s, bool load_only) {
  typedef Config<BN, STAGES, BKM, F16> Cfg;
  CUtensorMap tmA, tmB, tmC, tmOwn;
  const int abt = F16 ? MKX_GEMM_FP16 : MKX_GEMM_BF16;
  const bool own = d->own_t1 > d->own_t0;
  int rc = make_tmap(&tmA, d->a, abt, d->k, d->m, d->lda, kBM);
  /* without own tiles a copy of tmA stands in (never loaded from) */
  if (!rc) rc = own ? make_tmap(&tmOwn, d->a_own, abt, d->k, d->own_rows, d->lda_own, kBM) : 0;
  if (!own) tmOwn = tmA;
  if (!rc)
    rc = BKM ? make_tmap(&tmB, d->b, abt, d->k, d->n, d->ldb, BN) : make_tmap(&tmB, d->b, abt, d->n, d->k, d->ldb, 64);
  if (!rc) rc = make_tmap(&tmC, d->c, d->c_type, d->n, d->m, d->ldc, 64);
  int sms = 0;
  if (!rc) rc = num_sms(&sms, d->sync.ctas);
  if (rc) return rc;
  AgParams p;
  p.flags = d->flags;
  p.epoch = d->epoch;
  p.size = d->size;
  for (int q = 0; q <= MKX_FUSED_MAX; ++q) p.bnd[q] = q <= d->size ? (int)d->bnd[q] : (int)d->m;
  p.tiles_m = (int)cdiv(d->m, kBM);
  p.tiles_n = (int)cdiv(d->n, BN);
  /* Groups no taller than any source's rows: a group that mixes own and
   * peers' rows makes the first tiles wait for the peers' copies. */
  p.group_m = kGroupM < p.tiles_m ? kGroupM : p.tiles_m;
  for (int q = 0; q < d->size; ++q) {
    const int rows = (int)((d->bnd[q + 1] - d->bnd[q]) / kBM);
    if (d->bnd[q + 1] > d->bnd[q] && rows < p.group_m) p.group_m = rows > 0 ? rows : 1;
  }
  p.first_tile_m = d->first_tile_m % p.tiles_m;
  p.own_t0 = own ? d->own_t0 : 0;
  p.own_t1 = own ? d->own_t1 : 0;
  p.own_row0 = (int)d->own_row0;
  p.sync = d->sync;
  p.ready_mask = d->ready_mask;
  p.net_mask = d->net_mask;
  p.net_signals = d->net_signals;
  p.net_epoch = d->net_epoch;
  p.net_slot0 = d->net_slot0;
  p.net_words = d->net_words;
  p.net_chunk_tiles = d->net_chunk_tiles;
  p.net_landed = d->net_landed;
  const int tiles = p.tiles_m * p.tiles_n;
  const int ctas = sms < tiles ? sms : tiles;
  split_last_wave(d, tiles, ctas, p);
  auto kern = tp_ag_kernel<BN, STAGES, BKM, F16, OutT>;
  rc = smem_attr_once<tp_ag_kernel<BN, STAGES, BKM, F16, OutT>>((int)Cfg::SMEM_BYTES);
  if (rc || load_only) return rc;
  kern<<<ctas, kThreads, Cfg::SMEM_BYTES, s>>>(tmA, tmB, tmC, tmOwn, p, (int)d->m, (int)d->n, (int)d->k);
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? 0 : (int)e;
}

template <int BN, int STAGES>
int launch_tile(const mkx_tp_ag_desc *d, cudaStream_t s, bool load_only) {
  return with_types(d->ab_type, d->b_kmajor, d->c_type, [&](auto bkm, auto f16, auto out) {
    return launch<BN, STAGES, decltype(bkm)::value, decltype(f16)::value, typename decltype(out)::type>(d, s,
                                                                                                        load_only);
  });
}

}  // namespace

extern "C" long mkx_tp_ag_sk_launches(void) { return g_sk_launches.load(std::memory_order_relaxed); }

static int ag_gemm(const mkx_tp_ag_desc *d, cudaStream_t s, bool load_only) {
  if (!d || d->m <= 0 || d->n <= 0 || d->k <= 0 || !d->flags || !d->epoch) return MKX_GEMM_EINVAL;
  /* the sources' row ranges must tile [0, m) in rank order */
  if (d->size < 1 || d->size > MKX_FUSED_MAX || d->bnd[0] != 0 || d->bnd[d->size] != d->m) return MKX_GEMM_EINVAL;
  for (int q = 0; q < d->size; ++q)
    if (d->bnd[q + 1] < d->bnd[q]) return MKX_GEMM_EINVAL;
  /* own tiles: inside [0, tiles_m), and every row of them in a_own */
  if (d->own_t1 > d->own_t0 &&
      (!d->a_own || d->own_t0 < 0 || d->own_t1 > cdiv(d->m, kBM) || (int64_t)d->own_t0 * kBM < d->own_row0 ||
       std::min((int64_t)d->own_t1 * kBM, d->m) > d->own_row0 + d->own_rows || d->lda_own < d->k))
    return MKX_GEMM_EINVAL;
  if (d->net_mask && (!d->net_signals || !d->net_epoch || !d->net_landed || d->net_chunk_tiles < 1 ||
                      d->net_words < 2 || (d->net_mask >> d->size) != 0 || (d->net_mask & d->ready_mask)))
    return MKX_GEMM_EINVAL;
  for (int q = 0; d->net_mask && q < d->size; ++q)
    if ((d->net_mask >> q & 1) &&
        (d->bnd[q + 1] - 1) / 128 - d->bnd[q] / 128 >= (int64_t)(d->net_words - 1) * d->net_chunk_tiles)
      return MKX_GEMM_EINVAL; /* more chunks than words */
  mkx_gemm_desc g = {d->m,        d->n, d->k,   d->a,       d->lda,    d->b, d->ldb,
                     d->b_kmajor, d->c, d->ldc, d->ab_type, d->c_type, 0,    0};
  if (!mkx_gemm_supported(&g, nullptr)) return MKX_GEMM_EINVAL;
  int sms = 0;
  int rc = num_sms(&sms, d->sync.ctas);
  if (rc) return rc;
  if (mkx_gemm_pick_tile(&g, sms) == MKX_GEMM_TILE_128x256) return launch_tile<256, 4>(d, s, load_only);
  return launch_tile<128, 6>(d, s, load_only);
}

extern "C" int mkx_tp_ag_gemm(const mkx_tp_ag_desc *d, cudaStream_t s) { return ag_gemm(d, s, false); }

extern "C" int mkx_tp_ag_gemm_load(const mkx_tp_ag_desc *d) { return ag_gemm(d, 0, true); }
