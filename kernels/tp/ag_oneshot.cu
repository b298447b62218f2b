/*
 * AllGather+GEMM in one kernel, for products whose tiles fit in one wave
 * with SMs to spare (the split path's small shapes, src/ops/tp/ag_gpu.c).
 *
 * There every tile runs at once, so overlapping whole tiles with the
 * gather gains nothing: a tile of peers' rows can only start once its rows
 * are here, and then takes the whole K loop.  Here the rows travel in K
 * chunks instead, and the GEMM's producer waits for each chunk just before
 * it loads it, so peers' tiles may start on the first chunk while the
 * later ones are still on NVLink.  (All units run at once, so a tile's
 * chunks land close together: what the one kernel saves is mostly the
 * second launch, and own tiles start before the peers' rows are in.)
 *
 *   CTAs [0, npush)           copy this rank's rows with SM stores, unit by
 *                             unit (destination, K chunk, tile): first into
 *                             its own gathered A, then, after meeting every
 *                             rank at bar (each has finished its previous
 *                             call, so its gathered A may be written), into
 *                             the peers'.  After a unit, its flag in the
 *                             destination's flags gets the epoch.
 *   CTAs [npush, npush+tiles) one tile each of the engine, gated per chunk.
 *
 * Push CTAs come first in the grid and never wait for a GEMM CTA, so a
 * GPU short of SMs (a grid larger than one wave) only runs slower.  The
 * epoch is bumped by the last CTA to read it, at the start of the kernel.
 */
#include "gemm/gemm_engine.cuh"
#include "gemm/tmap.cuh"
#include "fused/flags.cuh"
#include "tp/tp.h"
#include "common/modules.cuh"

using namespace mkx::gemm;

namespace {

/* Push CTAs at least (the rest of the SMs if more): enough stores in
 * flight to keep NVLink busy while the GEMM runs. */
constexpr int kMinPush = 16;
/* SMs of H100/H200 SXM: the decision "one kernel or two" must be the same
 * on every rank whatever the part (see mkx_tp_ag1_shape). */
constexpr int kFullSMs = 132;
/* K chunks per row block: fewer means longer waits for the first one, more
 * means more flags to wait for. */
constexpr int kChunks = 8;
/* The shortest K loop (64-wide blocks) option tp_ag_oneshot=auto takes. */
constexpr int kMinKBlocks = 32;

struct Ag1Params {
  /* GEMM CTAs */
  const int *flags;            // this rank's, [(s * tiles_m + tile) * nkc + chunk]
  int bnd[MKX_FUSED_MAX + 1];  // source s holds rows [bnd[s], bnd[s+1])
  int tiles_m, tiles_n, npush, chunk_kb, nkc;
  /* push CTAs */
  const char *a;                   // this rank's rows, row stride a_ld bytes
  int64_t a_ld, row_bytes;         // row_bytes = k * element size (the gathered A's stride)
  int row0, rows;                  // this rank's rows of the gathered A
  int t0, t1;                      // the 128-row tiles they meet
  char *gathered[MKX_FUSED_MAX];   // every rank's gathered A, mapped
  int *peer_flags[MKX_FUSED_MAX];  // every rank's flags, mapped
  mkx_fused_sync sync;
};

/* The flag of source s's rows of tile t, chunk kc. */
__device__ __forceinline__ int64_t flag_index(const Ag1Params &p, int s, int t, int kc) {
  return ((int64_t)s * p.tiles_m + t) * p.nkc + kc;
}

/* Thread 0 of every CTA: this call's epoch and run number (*n,
 * flags.cuh's next_run).  The last CTA to read the old values stores the
 * new ones (nobody reads them after), so graph replays and back-to-back
 * calls need no host work. */
__device__ __forceinline__ int take_epoch(const mkx_fused_sync &s, int *n) {
  const int e = *(volatile const int *)mkx::fused::own_word(s, MKX_FUSED_OFF_EPOCH) + 1;
  *n = mkx::fused::next_run(s);
  __threadfence();
  int *count = mkx::fused::own_word(s, MKX_FUSED_OFF_COUNT);
  if (atomicAdd(count, 1) == (int)gridDim.x - 1) {
    *count = 0;
    __threadfence();
    *(volatile int *)mkx::fused::own_word(s, MKX_FUSED_OFF_EPOCH) = e;
    if (*n) *(volatile int *)mkx::fused::runs_word(s) = *n;
  }
  return e;
}

/* Before a tile: wait (bounded) until every peer with rows in it has
 * arrived at the call, so that a missing rank is reported as missing from
 * the call (as by the push CTAs) rather than as a missing chunk.  Before
 * loading K block kb: at the first block of each chunk, wait for that
 * chunk of every source with rows in the tile. */
struct ChunkGate {
  const Ag1Params *p;
  int target;
  unsigned srcs = 0;  // sources with rows in the current tile row
  __device__ __forceinline__ void a_source(int, const CUtensorMap *&, int &) {}
  __device__ __forceinline__ void wait_rows(int, int row0, int nrows) {
    const mkx_fused_sync &s = p->sync;
    const int *bar = mkx::fused::own_word(s, MKX_FUSED_OFF_BAR);
    srcs = 0;
    for (int q = 0; q < s.size; ++q)
      if (p->bnd[q] < p->bnd[q + 1] && p->bnd[q] < row0 + nrows && p->bnd[q + 1] > row0) {
        srcs |= 1u << q;
        if (q != s.rank) mkx::fused::wait_geq(bar + q, target, s, q, -1, MKX_FUSED_AT_BARRIER);
      }
  }
  /* An acquire load per flag: a relaxed load and one fence.acq_rel.sys
   * per chunk instead stalls the producer on the fence. */
  __device__ __forceinline__ void wait_k(int tm, int kb) {
    if (kb % p->chunk_kb) return;
    const int kc = kb / p->chunk_kb;
    for (int s = 0; s < p->sync.size; ++s)
      if (srcs >> s & 1)
        mkx::fused::wait_geq(p->flags + flag_index(*p, s, tm, kc), target, p->sync, s, tm, MKX_FUSED_AT_AG_TILE);
    asm volatile("fence.proxy.async.global;" ::: "memory");
  }
};

/* Rows [g0, g1) of the gathered A (this rank's), columns of chunk kc:
 * from this rank's A into dst (a gathered A), 16 bytes per thread and
 * step, eight loads in flight.  (row, vector) advance without a division
 * per element: divisions had the copy run at a fraction of NVLink's rate. */
__device__ __forceinline__ void copy_rows(const Ag1Params &p, char *dst, int g0, int g1, int kc) {
  constexpr int U = 8;
  const int64_t chunk = (int64_t)p.chunk_kb * kBK * 2, c0 = kc * chunk;
  const int vecs = (int)((min(p.row_bytes, c0 + chunk) - c0) / 16), step = blockDim.x;
  const int dr = step / vecs, dv = step % vecs;
  int r = threadIdx.x / vecs + g0, v = threadIdx.x % vecs;
  const char *src = p.a + c0;
  dst += c0;
  while (r < g1) {
    uint4 x[U];
    int rr[U], vv[U];
#pragma unroll
    for (int j = 0; j < U; ++j) {
      rr[j] = r, vv[j] = v;
      if (r < g1) x[j] = __ldg(reinterpret_cast<const uint4 *>(src + (int64_t)(r - p.row0) * p.a_ld) + v);
      r += dr, v += dv;
      if (v >= vecs) v -= vecs, ++r;
    }
#pragma unroll
    for (int j = 0; j < U; ++j)
      if (rr[j] < g1) reinterpret_cast<uint4 *>(dst + (int64_t)rr[j] * p.row_bytes)[vv[j]] = x[j];
  }
}

/* Units: destination j (0 = this rank, then rank + 1, ...), chunk, tile,
 * so that every tile's first chunk goes out first. */
__device__ void push_role(const Ag1Params &p, int e, int n) {
  const mkx_fused_sync &s = p.sync;
  const int mine = p.t1 - p.t0, per_dest = mine * p.nkc, total = per_dest * s.size;
  bool met = false;
  for (int u = blockIdx.x; u < total; u += p.npush) {
    const int j = u / per_dest, r = u % per_dest, t = p.t0 + r % mine, kc = r / mine;
    const int q = (s.rank + j) % s.size;
    if (j > 0 && !met) {
      mkx::fused::meet_start(s, e, n);
      met = true;
    }
    const int g0 = max(p.row0, t * kBM), g1 = min(p.row0 + p.rows, t * kBM + kBM);
    copy_rows(p, p.gathered[q], g0, g1, kc);
    __syncthreads();
    if (threadIdx.x == 0) {
      __threadfence_system();
      mkx::fused::st_release(p.peer_flags[q] + flag_index(p, s.rank, t, kc), e);
    }
  }
  /* every push CTA arrives, so the peers meet this rank even when it has
   * no rows or no remote unit fell to this CTA */
  if (!met) mkx::fused::meet_start(s, e, n);
}

template <int BN, int STAGES, bool BKM, bool F16, typename OutT>
__global__ void __launch_bounds__(kThreads, 1)
    tp_ag1_kernel(const __grid_constant__ CUtensorMap tmA, const __grid_constant__ CUtensorMap tmB,
                  const __grid_constant__ CUtensorMap tmC, const __grid_constant__ Ag1Params p, int M, int N, int K) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  extern __shared__ __align__(1024) uint8_t smem[];
  typedef Config<BN, STAGES, BKM, F16> Cfg;
  if ((int)blockIdx.x < p.npush) {
    int *e = reinterpret_cast<int *>(smem);
    if (threadIdx.x == 0) e[0] = take_epoch(p.sync, &e[1]);
    __syncthreads();
    push_role(p, e[0], e[1]);
    return;
  }
  /* only the producer thread waits on flags, so only it needs the epoch */
  int n;
  ChunkGate gate{&p, threadIdx.x == 0 ? take_epoch(p.sync, &n) : 0};
  GroupedTileOrder order{p.tiles_m, p.tiles_n, p.tiles_m};
  StoreCTma<OutT> epi{&tmC};
  run_engine<Cfg>(smem, &tmA, &tmB, M, N, K, (int)blockIdx.x - p.npush, (int)gridDim.x - p.npush, order, gate, epi);
  if (threadIdx.x == 0) mkx::fused::peer_gave_up(p.sync);  // the producer, after its last wait
#endif
}

int fill(const mkx_tp_ag1_desc *d, int bn, Ag1Params &p) {
  const mkx_tp_ag_desc &g = d->gemm;
  const mkx_tp_split_ag_desc &u = d->push;
  p.flags = g.flags;
  for (int q = 0; q <= MKX_FUSED_MAX; ++q) p.bnd[q] = q <= g.size ? (int)g.bnd[q] : (int)g.m;
  p.tiles_m = (int)cdiv(g.m, kBM);
  p.tiles_n = (int)cdiv(g.n, bn);
  p.chunk_kb = d->chunk_kb;
  p.nkc = d->nkc;
  p.a = static_cast<const char *>(u.a);
  p.a_ld = u.lda * u.esz;
  p.row_bytes = u.k * u.esz;
  p.row0 = (int)u.row0;
  p.rows = (int)u.rows;
  p.t0 = u.t0;
  p.t1 = u.t1;
  for (int q = 0; q < MKX_FUSED_MAX; ++q) {
    p.gathered[q] = static_cast<char *>(u.gathered[q]);
    p.peer_flags[q] = u.flags[q];
  }
  p.sync = u.sync;
  int sms = 0;
  const int rc = num_sms(&sms, u.sync.ctas);
  if (rc) return rc;
  const int tiles = p.tiles_m * p.tiles_n, units = (p.t1 - p.t0) * p.nkc * p.sync.size;
  p.npush = max(kMinPush, sms - tiles);
  p.npush = max(1, min(p.npush, units));
  return 0;
}

template <int BN, int STAGES, bool BKM, bool F16, typename OutT>
int launch(const mkx_tp_ag1_desc *d, cudaStream_t s) {
  typedef Config<BN, STAGES, BKM, F16> Cfg;
  const mkx_tp_ag_desc &g = d->gemm;
  CUtensorMap tmA, tmB, tmC;
  const int abt = F16 ? MKX_GEMM_FP16 : MKX_GEMM_BF16;
  int rc = make_tmap(&tmA, g.a, abt, g.k, g.m, g.lda, kBM);
  if (!rc) rc = BKM ? make_tmap(&tmB, g.b, abt, g.k, g.n, g.ldb, BN) : make_tmap(&tmB, g.b, abt, g.n, g.k, g.ldb, 64);
  if (!rc) rc = make_tmap(&tmC, g.c, g.c_type, g.n, g.m, g.ldc, 64);
  Ag1Params p;
  if (!rc) rc = fill(d, BN, p);
  if (rc) return rc;
  auto kern = tp_ag1_kernel<BN, STAGES, BKM, F16, OutT>;
  rc = smem_attr_once<tp_ag1_kernel<BN, STAGES, BKM, F16, OutT>>((int)Cfg::SMEM_BYTES);
  if (rc) return rc;
  kern<<<p.npush + p.tiles_m * p.tiles_n, kThreads, Cfg::SMEM_BYTES, s>>>(tmA, tmB, tmC, p, (int)g.m, (int)g.n,
                                                                          (int)g.k);
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? 0 : (int)e;
}

template <int BN, int STAGES>
int launch_tile(const mkx_tp_ag1_desc *d, cudaStream_t s) {
  return with_types(d->gemm.ab_type, d->gemm.b_kmajor, d->gemm.c_type, [&](auto bkm, auto f16, auto out) {
    return launch<BN, STAGES, decltype(bkm)::value, decltype(f16)::value, typename decltype(out)::type>(d, s);
  });
}

mkx_gemm_desc engine_desc(const mkx_tp_ag_desc *d) {
  mkx_gemm_desc g = {d->m,        d->n, d->k,   d->a,       d->lda,    d->b, d->ldb,
                     d->b_kmajor, d->c, d->ldc, d->ab_type, d->c_type, 0,    0};
  return g;
}

}  // namespace

extern "C" int mkx_tp_ag1_shape(const mkx_tp_ag_desc *d, int any_k, int *tile, int *chunk_kb, int *nkc) {
  const mkx_gemm_desc g = engine_desc(d);
  if (d->m <= 0 || d->n <= 0 || d->k <= 0 || d->m >= (1ll << 31) || d->n >= (1ll << 31) || d->k >= (1ll << 31))
    return 0;
  /* Agreed values only, so the same answer on every rank: the tile the
   * plain engine takes on a full H100/H200, whose tiles must leave kMinPush
   * SMs free (a tile that only fits by growing is slower), and
   * unless any_k, a K loop long enough to hide the copy in (at K = 1024 the
   * chunks' flags and the push CTAs' start cost more than they hid).  The
   * whole grid must fit in the CTAs a rank may take (sync.ctas, agreed):
   * on a GPU shared under MPS a GEMM CTA waiting for a peer's push CTA
   * must not hold the SM that push CTA needs. */
  *tile = mkx_gemm_pick_tile(&g, kFullSMs);
  const int sms = at_most(kFullSMs, d->sync.ctas);
  const int64_t tiles = cdiv(d->m, kBM) * cdiv(d->n, *tile == MKX_GEMM_TILE_128x256 ? 256 : 128);
  const int64_t nk = cdiv(d->k, kBK);
  if (tiles > sms - kMinPush || (!any_k && nk < kMinKBlocks)) return 0;
  *chunk_kb = (int)cdiv(nk, kChunks);
  *nkc = (int)cdiv(nk, *chunk_kb);
  return 1;
}

extern "C" int mkx_tp_ag1(const mkx_tp_ag1_desc *d, cudaStream_t s) {
  const mkx_tp_ag_desc &g = d->gemm;
  const mkx_tp_split_ag_desc &u = d->push;
  int tile, chunk_kb, nkc;
  const mkx_gemm_desc e = engine_desc(&g);
  if (!mkx_tp_ag1_shape(&g, 1, &tile, &chunk_kb, &nkc) || chunk_kb != d->chunk_kb || nkc != d->nkc || !g.flags ||
      !mkx_gemm_supported(&e, nullptr))
    return MKX_GEMM_EINVAL;
  if (g.size != u.sync.size || g.size < 1 || g.size > MKX_FUSED_MAX || g.bnd[0] != 0 || g.bnd[g.size] != g.m ||
      u.sync.rank < 0 || u.sync.rank >= g.size || u.esz != 2 || u.k != g.k || (u.k * u.esz) % 16 ||
      u.row0 != g.bnd[u.sync.rank] || u.rows != g.bnd[u.sync.rank + 1] - u.row0)
    return MKX_GEMM_EINVAL;
  if (u.rows > 0 && ((u.lda * u.esz) % 16 || reinterpret_cast<uintptr_t>(u.a) % 16 || u.t0 != u.row0 / kBM ||
                     u.t1 != (u.row0 + u.rows - 1) / kBM + 1))
    return MKX_GEMM_EINVAL;
  if (u.rows == 0 && u.t1 != u.t0) return MKX_GEMM_EINVAL;
  if (tile == MKX_GEMM_TILE_128x256) return launch_tile<256, 4>(d, s);
  return launch_tile<128, 6>(d, s);
}
