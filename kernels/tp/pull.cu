/*
 * The fused calls for ranks that share one GPU and read each other's
 * operands in place (kernels/tp/tp.h: mkx_tp_rs_pull, mkx_tp_ag_pull; the
 * latter also in fp8, on the fp8 engine with its scale hooks).
 * Moving data between ranks that share one GPU's memory only costs: a
 * partial or a gathered row stored and read back once more.  Here nothing
 * but C is written: each rank runs the engine with load gates that pick
 * the tensor maps of the rank whose operands a K block (GEMM+RS/AR: every
 * rank's slice of K) or a tile row (AllGather+GEMM: every rank's rows of
 * A) comes from.  A rank's loads from a peer cost what its own would.
 * Between GPUs the same reads would cross NVLink once per tile row group,
 * which is why the callers take these only where every rank of the node is
 * on one GPU.  The kernels wait for no one: the callers meet the peers
 * before (operands ready) and after (nobody changes them while a peer
 * reads).
 */
#include "gemm/gemm_engine.cuh"
#include "gemm/fp8_scales.cuh"
#include "tp/peer_stores.cuh"
#include "fused/flags.cuh"
#include "tp/tp.h"
#include "gemm/tmap.cuh"
#include "common/modules.cuh"

using namespace mkx::gemm;
using mkx::tp::PeerMaps;
using mkx::tp::PeerStores;

namespace {

constexpr int kGroupM = 16;

/* Every source's A and B as mapped here. */
struct SourceMaps {
  CUtensorMap a[MKX_FUSED_MAX], b[MKX_FUSED_MAX];
};

struct PullParams {
  int kb0[MKX_FUSED_MAX + 1];  // RS/AR: source s has K blocks [kb0[s], kb0[s + 1])
  int tm0[MKX_FUSED_MAX + 1];  // AG: source s has tile rows [tm0[s], tm0[s + 1])
  int size, rank, allreduce, c_type;
  int row0;         // RS/AR: this rank's first row of C, in the sources' A
  const int *told;  // AR: this rank's told words (mkx_tp_pull_desc)
};

/* RS/AR: K block kb from its source's own A and B; tiles count rows from
 * row0. */
struct KSourceGate {
  const SourceMaps *maps;
  const PullParams *p;
  __device__ __forceinline__ void a_source(int, const CUtensorMap *&, int &row) { row += p->row0; }
  __device__ __forceinline__ void wait_rows(int, int, int) {}
  __device__ __forceinline__ void wait_k(int, int) {}
  __device__ __forceinline__ void k_source(int kb, const CUtensorMap *&a, const CUtensorMap *&b, int &k) {
    int s = 0;
    while (kb >= p->kb0[s + 1]) ++s;
    a = &maps->a[s];
    b = &maps->b[s];
    k = (kb - p->kb0[s]) * kBK;
  }
};

/* AG: tile row tm from its source's own A (B is this rank's). */
struct RowSourceGate {
  const SourceMaps *maps;
  const PullParams *p;
  __device__ __forceinline__ void a_source(int tm, const CUtensorMap *&a, int &row) {
    int s = 0;
    while (tm >= p->tm0[s + 1]) ++s;
    a = &maps->a[s];
    row = (tm - p->tm0[s]) * kBM;
  }
  __device__ __forceinline__ void wait_rows(int, int, int) {}
  __device__ __forceinline__ void wait_k(int, int) {}
};

/* The rows into this rank's C (allreduce, unless the run is void: into
 * every peer's C too); the stores are complete and visible to the peers
 * when the kernel ends. */
struct PullEpilogue {
  const CUtensorMap *c;
  const PeerMaps *peers;
  const PullParams *p;
  bool to_peers;
  template <typename OutT, int BN>
  __device__ __forceinline__ void store(const TileCtx &t, float (&acc)[BN / 2]) {
    if (to_peers)
      tma_store_subtile<OutT, BN>(t, acc, c, t.row0, PeerStores{peers, p->size, p->rank});
    else
      tma_store_subtile<OutT, BN>(t, acc, c, t.row0);
  }
  template <int BN>
  __device__ __forceinline__ void operator()(const TileCtx &t, float (&acc)[BN / 2]) {
    if (p->c_type == MKX_GEMM_FP32)
      store<float, BN>(t, acc);
    else if (p->c_type == MKX_GEMM_FP16)
      store<__half, BN>(t, acc);
    else
      store<__nv_bfloat16, BN>(t, acc);
  }
  __device__ __forceinline__ void finish(const TileCtx &t) {
    if (t.tid != 0) return;
    bulk_wait<0>();
    asm volatile("fence.proxy.async.global;" ::: "memory");
    __threadfence_system();
  }
};

template <class Gate, int BN, int STAGES, bool BKM, bool F16>
__global__ void __launch_bounds__(kThreads, 1)
    tp_pull_kernel(const __grid_constant__ SourceMaps maps, const __grid_constant__ CUtensorMap tmC,
                   const __grid_constant__ PeerMaps peers, const __grid_constant__ PullParams p, int rows, int n, int k,
                   int tiles_m, int tiles_n) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  extern __shared__ __align__(1024) uint8_t smem[];
  typedef Config<BN, STAGES, BKM, F16> Cfg;
  GroupedTileOrder order{tiles_m, tiles_n, kGroupM};
  Gate gate{&maps, &p};
  /* after a failed meet a peer may not have joined the run: its C is the
   * user's, so nothing goes there */
  const bool to_peers =
      p.allreduce && !__syncthreads_or(threadIdx.x == 0 && p.told && mkx::fused::run_void(p.told, p.size));
  PullEpilogue epi{&tmC, &peers, &p, to_peers};
  run_engine<Cfg>(smem, &maps.a[0], &maps.b[0], rows, n, k, (int)blockIdx.x, (int)gridDim.x, order, gate, epi);
#endif
}

/* AllGather+GEMM in fp8: the row gate over the fp8 engine, A's scales by gathered row. */
template <bool E5M2>
__global__ void __launch_bounds__(kThreads, 1)
    tp_pull_fp8_kernel(const __grid_constant__ SourceMaps maps, const __grid_constant__ CUtensorMap tmC,
                       const __grid_constant__ PeerMaps peers, const __grid_constant__ PullParams p, int rows, int n,
                       int k, int tiles_m, int tiles_n, ScaleArgs sa) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  extern __shared__ __align__(1024) uint8_t smem[];
  typedef Config<128, kFp8Stages, true, false, E5M2 ? kE5M2 : kE4M3> Cfg;
  GroupedTileOrder order{tiles_m, tiles_n, kGroupM};
  RowSourceGate gate{&maps, &p};
  PullEpilogue epi{&tmC, &peers, &p, false};  // AllGather only: C is this rank's
  const Fp8Scales sc{sa, rows, n};
  run_engine_scaled<Cfg>(smem, &maps.a[0], &maps.b[0], rows, n, k, (int)blockIdx.x, (int)gridDim.x, order, gate, epi,
                         sc);
#endif
}

/* The grid: one CTA per SM the rank has, at most one per tile. */
template <class Gate, int BN, int STAGES, bool BKM, bool F16>
int launch_kernel(const SourceMaps &maps, const CUtensorMap &tmC, const PeerMaps &peers, const PullParams &p, int rows,
                  int n, int k, int cap, cudaStream_t s) {
  typedef Config<BN, STAGES, BKM, F16> Cfg;
  int sms = 0;
  int rc = num_sms(&sms, cap);
  if (rc) return rc;
  const int tiles_m = (int)cdiv(rows, kBM), tiles_n = (int)cdiv(n, BN);
  if (tiles_m == 0 || k == 0) return 0;
  const int tiles = tiles_m * tiles_n, ctas = sms < tiles ? sms : tiles;
  rc = smem_attr_once<tp_pull_kernel<Gate, BN, STAGES, BKM, F16>>((int)Cfg::SMEM_BYTES);
  if (rc) return rc;
  tp_pull_kernel<Gate, BN, STAGES, BKM, F16>
      <<<ctas, kThreads, Cfg::SMEM_BYTES, s>>>(maps, tmC, peers, p, rows, n, k, tiles_m, tiles_n);
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? 0 : (int)e;
}

/* A and B tensor maps as the engine loads them (kernels/gemm/gemm.cu). */
int make_ab(CUtensorMap *a, CUtensorMap *b, const void *pa, int64_t lda, const void *pb, int64_t ldb, int64_t m,
            int64_t n, int64_t k, int type, int bn, bool bkm) {
  int rc = a ? make_tmap(a, pa, type, k, m, lda, kBM) : 0;
  if (!rc && b) rc = bkm ? make_tmap(b, pb, type, k, n, ldb, bn) : make_tmap(b, pb, type, n, k, ldb, 64);
  return rc;
}

int rs_maps(const mkx_tp_pull_desc *d, int bn, bool bkm, SourceMaps &m, CUtensorMap &tmC, PeerMaps &peers) {
  memset(&m, 0, sizeof m);
  memset(&peers, 0, sizeof peers);
  int rc = 0;
  for (int s = 0; !rc && s < d->size; ++s)
    rc = make_ab(&m.a[s], &m.b[s], d->a[s], d->lda[s], d->b[s], d->ldb[s], d->m, d->n, d->k[s], d->ab_type, bn, bkm);
  if (!rc) rc = make_tmap(&tmC, d->c, d->c_type, d->n, d->rows, d->ldc, 64);
  for (int q = 0; !rc && d->allreduce && q < d->size; ++q)
    if (q != d->rank) rc = make_tmap(&peers.c[q], d->peer_c[q], d->c_type, d->n, d->rows, d->peer_ldc[q], 64);
  return rc;
}

template <int BN, int STAGES, bool BKM, bool F16>
int launch_rs(const mkx_tp_pull_desc *d, cudaStream_t s) {
  SourceMaps maps;
  CUtensorMap tmC;
  PeerMaps peers;
  int rc = rs_maps(d, BN, BKM, maps, tmC, peers);
  if (rc) return rc;
  PullParams p;
  memset(&p, 0, sizeof p);
  for (int q = 0; q < d->size; ++q) p.kb0[q + 1] = p.kb0[q] + (int)cdiv(d->k[q], kBK);
  p.size = d->size;
  p.rank = d->rank;
  p.allreduce = d->allreduce;
  p.c_type = d->c_type;
  p.row0 = (int)d->row0;
  p.told = d->told;
  return launch_kernel<KSourceGate, BN, STAGES, BKM, F16>(maps, tmC, peers, p, (int)d->rows, (int)d->n,
                                                          p.kb0[d->size] * kBK, d->ctas, s);
}

/* AG: this rank's B, every source's rows of A, C, and the row gate's
 * tile rows of each source. */
int ag_maps(const mkx_tp_ag_pull_desc *d, int bn, bool bkm, SourceMaps &maps, CUtensorMap &tmC, PeerMaps &peers,
            PullParams &p) {
  memset(&maps, 0, sizeof maps);
  memset(&peers, 0, sizeof peers);
  memset(&p, 0, sizeof p);
  int rc = make_ab(nullptr, &maps.b[0], nullptr, 0, d->b, d->ldb, d->m, d->n, d->k, d->ab_type, bn, bkm);
  for (int q = 0; !rc && q < d->size; ++q) {
    const int64_t rows = d->bnd[q + 1] - d->bnd[q];
    p.tm0[q + 1] = (int)cdiv(d->bnd[q + 1], kBM);
    if (rows > 0)
      rc = make_ab(&maps.a[q], nullptr, d->a[q], d->lda[q], nullptr, 0, rows, d->n, d->k, d->ab_type, bn, bkm);
  }
  if (!rc) rc = make_tmap(&tmC, d->c, d->c_type, d->n, d->m, d->ldc, 64);
  p.size = d->size;
  p.c_type = d->c_type;
  return rc;
}

template <int BN, int STAGES, bool BKM, bool F16>
int launch_ag(const mkx_tp_ag_pull_desc *d, cudaStream_t s) {
  SourceMaps maps;
  CUtensorMap tmC;
  PeerMaps peers;
  PullParams p;
  const int rc = ag_maps(d, BN, BKM, maps, tmC, peers, p);
  if (rc) return rc;
  return launch_kernel<RowSourceGate, BN, STAGES, BKM, F16>(maps, tmC, peers, p, (int)d->m, (int)d->n, (int)d->k,
                                                            d->ctas, s);
}

/* AllGather+GEMM in fp8 (mkx_tp_ag_pull_desc's sc): 128 x 128 tiles, B K-major. */
template <bool E5M2>
int launch_ag_fp8(const mkx_tp_ag_pull_desc *d, cudaStream_t s) {
  typedef Config<128, kFp8Stages, true, false, E5M2 ? kE5M2 : kE4M3> Cfg;
  SourceMaps maps;
  CUtensorMap tmC;
  PeerMaps peers;
  PullParams p;
  int rc = ag_maps(d, Cfg::BN, true, maps, tmC, peers, p);
  if (rc) return rc;
  int sms = 0;
  rc = num_sms(&sms, d->ctas);
  if (rc) return rc;
  const int tiles_m = (int)cdiv(d->m, kBM), tiles_n = (int)cdiv(d->n, Cfg::BN);
  const int tiles = tiles_m * tiles_n, ctas = sms < tiles ? sms : tiles;
  rc = smem_attr_once<tp_pull_fp8_kernel<E5M2>>((int)Cfg::SMEM_BYTES);
  if (rc) return rc;
  tp_pull_fp8_kernel<E5M2><<<ctas, kThreads, Cfg::SMEM_BYTES, s>>>(maps, tmC, peers, p, (int)d->m, (int)d->n, (int)d->k,
                                                                   tiles_m, tiles_n, scale_args(d->sc));
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? 0 : (int)e;
}

bool fp8_ok(const mkx_tp_ag_pull_desc *d) {
  if (!d->b_kmajor || d->bn != 128 || d->k % 16 || d->ldb % 16) return false;
  for (int q = 0; q < d->size; ++q)
    if (d->bnd[q + 1] > d->bnd[q] && d->lda[q] % 16) return false;
  const mkx_gemm_scales &c = d->sc;
  if (c.layout < MKX_GEMM_SCALE_NONE || c.layout > MKX_GEMM_SCALE_BLOCK) return false;
  return c.layout == MKX_GEMM_SCALE_NONE || (c.a && c.b && c.a_row >= 0 && c.b_col >= 0 && c.a_kb >= 0 && c.b_kb >= 0);
}

template <int BN, int STAGES, class D>
int launch_tile(const D *d, cudaStream_t s) {
  const bool f16 = d->ab_type == MKX_GEMM_FP16;
  if constexpr (std::is_same<D, mkx_tp_pull_desc>::value) {
    if (d->b_kmajor) return f16 ? launch_rs<BN, STAGES, true, true>(d, s) : launch_rs<BN, STAGES, true, false>(d, s);
    return f16 ? launch_rs<BN, STAGES, false, true>(d, s) : launch_rs<BN, STAGES, false, false>(d, s);
  } else {
    if (d->b_kmajor) return f16 ? launch_ag<BN, STAGES, true, true>(d, s) : launch_ag<BN, STAGES, true, false>(d, s);
    return f16 ? launch_ag<BN, STAGES, false, true>(d, s) : launch_ag<BN, STAGES, false, false>(d, s);
  }
}

template <class D>
int by_tile(const D *d, cudaStream_t s) {
  if (d->bn == 256) return launch_tile<256, 4>(d, s);
  if (d->bn == 128) return launch_tile<128, 6>(d, s);
  return MKX_GEMM_EINVAL;
}

}  // namespace

extern "C" int mkx_tp_rs_pull(const mkx_tp_pull_desc *d, cudaStream_t s) {
  if (!d || d->n <= 0 || d->rows < 0 || d->size < 1 || d->size > MKX_FUSED_MAX || d->row0 < 0 ||
      d->row0 + d->rows > d->m || d->m >= (1ll << 31))
    return MKX_GEMM_EINVAL;
  for (int q = 0; q < d->size; ++q)
    if (!d->a[q] || !d->b[q] || d->k[q] <= 0 || (d->allreduce && q != d->rank && !d->peer_c[q])) return MKX_GEMM_EINVAL;
  return d->rows == 0 ? 0 : by_tile(d, s);
}

extern "C" int mkx_tp_ag_pull(const mkx_tp_ag_pull_desc *d, cudaStream_t s) {
  if (!d || d->m <= 0 || d->n <= 0 || d->k <= 0 || d->m >= (1ll << 31) || d->size < 1 || d->size > MKX_FUSED_MAX ||
      d->bnd[0] != 0 || d->bnd[d->size] != d->m || !d->b)
    return MKX_GEMM_EINVAL;
  for (int q = 0; q < d->size; ++q) {
    const int64_t rows = d->bnd[q + 1] - d->bnd[q];
    /* every tile row from one source */
    if (rows < 0 || (q + 1 < d->size && d->bnd[q + 1] % kBM) || (rows > 0 && !d->a[q])) return MKX_GEMM_EINVAL;
  }
  if (d->ab_type == MKX_GEMM_E4M3 || d->ab_type == MKX_GEMM_E5M2) {
    if (!fp8_ok(d)) return MKX_GEMM_EINVAL;
    return d->ab_type == MKX_GEMM_E5M2 ? launch_ag_fp8<true>(d, s) : launch_ag_fp8<false>(d, s);
  }
  return by_tile(d, s);
}
