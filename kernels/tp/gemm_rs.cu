/*
 * GEMM+ReduceScatter and GEMM+AllReduce on one node, and the call-level
 * synchronisation shared with AllGather+GEMM (prologue barrier).
 *
 * Data path of a call on rank r (p ranks, owner q holds rows [bnd[q], bnd[q+1])):
 *   1. tp_prologue_kernel: epoch += 1, arrive at every peer, wait for all.
 *   2. tp_rs_kernel: the engine computes the partial A_r B_r tile by tile,
 *      starting at owner r+1's rows (own rows last); its epilogue stores
 *      each fp32 64-row sub-tile by TMA straight into slot [r] of the
 *      owner's receive buffer (peer memory over NVLink, unicast), and once
 *      the stores have landed sets the owner's flag [r][sub-tile] = epoch.
 *      The wait for "landed" is deferred to the next tile's epilogue, so the
 *      consumers do not stall on NVLink latency.
 *   3. tp_reduce_kernel (owner): per sub-tile, bounded wait for p arrivals,
 *      sum the p slots in rank order (same bits every run), round once.
 *      Allreduce: also push the rounded rows into every peer's C; the last
 *      block to finish sets done[r] = epoch on every peer;
 *   4. tp_ar_wait_kernel (allreduce) waits for every owner's done flag.
 */
#include "gemm/gemm_engine.cuh"
#include "tp/flags.cuh"
#include "tp/tp.h"
#include "tp/tp_common.cuh"

using namespace mkx::gemm;
using mkx::tp::geq;

namespace {

constexpr int kGroupM = 16;

/* ---- call prologue ------------------------------------------------------ */

__global__ void tp_prologue_kernel(mkx_tp_sync s) {
  __shared__ int e;
  int *ep = reinterpret_cast<int *>(s.ws[s.rank] + MKX_TP_OFF_EPOCH);
  if (threadIdx.x == 0) {
    e = *ep + 1;
    *ep = e;
  }
  __syncthreads();
  int *src = reinterpret_cast<int *>(s.ws[s.rank] + MKX_TP_OFF_SRC);
  for (int i = threadIdx.x; i < s.src_n; i += blockDim.x) src[i] = e;
  const int q = threadIdx.x;
  if (q < s.size) {
    mkx::tp::st_release(reinterpret_cast<int *>(s.ws[q] + MKX_TP_OFF_BAR) + s.rank, e);
    mkx::tp::wait_geq(reinterpret_cast<int *>(s.ws[s.rank] + MKX_TP_OFF_BAR) + q, e, s.timeout_ns, s.err, q, -1,
                      MKX_TP_AT_BARRIER);
  }
}

/* ---- GEMM whose epilogue pushes fp32 partial sub-tiles to their owners --- */

struct RsParams {
  CUtensorMap d[MKX_TP_MAX];   // owner q's slot for this rank: {n, count_q} fp32, box {32, 64}
  float *recv[MKX_TP_MAX];     // the same slots as plain pointers (rows straddling owners)
  int64_t bnd[MKX_TP_MAX + 1];
  int *flags[MKX_TP_MAX];      // owner q's flags for this rank: [sub-tile row][column tile]
  const int *epoch;
  int size, tiles_m, tiles_n, group_m, first_tile_m;
};

/* Tile rows dealt from the p chunks of rows in turn (chunk 0's first row,
 * chunk 1's first row, ..., chunk 0's second row, ...; chunks sized as
 * MKX_Block_range), under the grouped walk.  Consecutive tiles then go to
 * different owners, so the NVLink traffic of the pushed partials spreads
 * over the whole GEMM instead of saturating the link while the peer-bound
 * rows are computed (measured: peer-rows-first made the GEMM wait on
 * NVLink with fp32 partials). */
struct DealtTileOrder {
  GroupedTileOrder base;
  int parts;
  __device__ __forceinline__ int num_tiles() const { return base.num_tiles(); }
  __device__ __forceinline__ void get(int idx, int &tm, int &tn) const {
    int v;
    base.get(idx, v, tn);
    const int T = base.tiles_m, fl = T / parts, rem = T - fl * parts;
    int o, i;
    if (v < fl * parts) {
      o = v % parts;
      i = v / parts;
    } else {
      o = v - fl * parts;
      i = fl;
    }
    tm = o * fl + min(o, rem) + i;
  }
};

struct PushPartial {
  const RsParams *p;
  int M, epoch;
  int pend_sr, pend_tn, pend_qa, pend_qb;   // sub-tile whose stores are in flight (thread 0 of the WG)

  __device__ __forceinline__ int owner_of(int64_t row) const {
    int q = 0;
    while (q + 1 < p->size && row >= p->bnd[q + 1]) ++q;
    return q;
  }
  /* The previous sub-tile's stores have had a whole main loop to land: wait
   * for them (normally no wait), make them visible, then tell the owners. */
  __device__ __forceinline__ void flush() {
    if (pend_sr < 0) return;
    bulk_wait<0>();
    asm volatile("fence.proxy.async.global;" ::: "memory");
    __threadfence_system();
    for (int q = pend_qa; q <= pend_qb; ++q)
      if (p->bnd[q + 1] > p->bnd[q]) mkx::tp::st_release(p->flags[q] + pend_sr * p->tiles_n + pend_tn, epoch);
    pend_sr = -1;
  }
  template <int BN>
  __device__ __forceinline__ void operator()(const TileCtx &t, float (&acc)[BN / 2]) {
    if (t.tid == 0) flush();
    if (t.row0 >= M) return;          // the whole sub-tile is past the last row
    const int last = min(t.row0 + 64, M) - 1;
    const int qa = owner_of(t.row0), qb = owner_of(last);
    if (qa != qb) {
      store_straddling<BN>(t, acc);
    } else {
      store_tma<BN>(t, acc, qa);
    }
    if (t.tid == 0) {
      pend_sr = t.row0 / 64;
      pend_tn = t.tile_n;
      pend_qa = qa;
      pend_qb = qb;
    }
  }
  /* A sub-tile whose rows belong to two or more owners (at most p - 1 sub-
   * tile rows of the whole product): plain stores of each row to its owner,
   * since a TMA store cannot start above its tensor's first row.  Made
   * visible before the warpgroup moves on, so that thread 0's later flag
   * release covers them. */
  template <int BN>
  __device__ __forceinline__ void store_straddling(const TileCtx &t, float (&acc)[BN / 2]) {
    const int r = t.acc_row(0);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t g = t.row0 + r + 8 * h;
      if (g < M) {
        const int q = owner_of(g);
        float *row = p->recv[q] + (g - p->bnd[q]) * (int64_t)t.N;
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
          const int col = t.col0 + 8 * j + (t.tid & 3) * 2;
          if (col < t.N) *reinterpret_cast<float2 *>(row + col) = make_float2(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
        }
      }
    }
    __threadfence_system();
    t.wg_sync();
  }
  /* The whole sub-tile belongs to owner q: TMA stores through the swizzled
   * staging buffers (as StoreCTma), the tensor map picked with constant
   * indices only. */
  template <int BN>
  __device__ __forceinline__ void store_tma(const TileCtx &t, float (&acc)[BN / 2], int owner) {
    constexpr int CH = 32;            // fp32 columns per 128-byte chunk
    constexpr int QPC = CH / 8;       // accumulator quads per chunk
    const uint32_t base = smem_u32(t.epi_smem);
    const int r = t.acc_row(0);
    const int cb = (t.tid & 3) * 8;
#pragma unroll
    for (int j = 0; j < BN / CH; ++j) {
      if (t.col0 + j * CH >= t.N) break;   // uniform over the warpgroup
      const uint32_t buf = base + (j & 1) * (64 * 128);
      if (t.tid == 0) bulk_wait_read<1>();
      t.wg_sync();
#pragma unroll
      for (int qq = 0; qq < QPC; ++qq) {
        const int q = j * QPC + qq;
        const int bcol = qq * 32 + cb;
        const int unit = bcol >> 4, inb = bcol & 15;
        st_shared_v2f(buf + r * 128 + ((unit ^ (r & 7)) << 4) + inb, acc[4 * q], acc[4 * q + 1]);
        st_shared_v2f(buf + (r + 8) * 128 + ((unit ^ ((r + 8) & 7)) << 4) + inb, acc[4 * q + 2], acc[4 * q + 3]);
      }
      fence_proxy_async_smem();
      t.wg_sync();
      if (t.tid == 0) {
        const int y = (int)(t.row0 - p->bnd[owner]);   // >= 0: the sub-tile starts in the owner's rows
#pragma unroll
        for (int q = 0; q < MKX_TP_MAX; ++q)
          if (q == owner) tma_store_2d(&p->d[q], t.epi_smem + (j & 1) * (64 * 128), t.col0 + j * CH, y);
        bulk_commit();
      }
    }
  }
  __device__ __forceinline__ void finish(const TileCtx &t) {
    if (t.tid == 0) flush();
  }
};

template <int BN, int STAGES, bool BKM, bool F16>
__global__ void __launch_bounds__(kThreads, 1)
    tp_rs_kernel(const __grid_constant__ CUtensorMap tmA, const __grid_constant__ CUtensorMap tmB,
                 const __grid_constant__ RsParams p, int M, int N, int K) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  extern __shared__ __align__(1024) uint8_t smem[];
  typedef Config<BN, STAGES, BKM, F16> Cfg;
  DealtTileOrder order{GroupedTileOrder{p.tiles_m, p.tiles_n, p.group_m}, p.size};
  NoLoadGate gate;
  PushPartial epi{&p, M, *(volatile const int *)p.epoch, -1, 0, 0, 0};
  run_engine<Cfg>(smem, &tmA, &tmB, M, N, K, (int)blockIdx.x, (int)gridDim.x, order, gate, epi);
#endif
}

template <int BN, int STAGES, bool BKM, bool F16>
int launch_rs(const mkx_tp_rs_desc *d, cudaStream_t s) {
  typedef Config<BN, STAGES, BKM, F16> Cfg;
  CUtensorMap tmA, tmB;
  RsParams p;
  memset(&p, 0, sizeof p);
  const int abt = F16 ? MKX_GEMM_FP16 : MKX_GEMM_BF16;
  int rc = mkx::tp::make_tmap(&tmA, d->a, abt, d->k, d->m, d->lda, kBM);
  if (!rc) rc = BKM ? mkx::tp::make_tmap(&tmB, d->b, abt, d->k, d->n, d->ldb, BN)
                    : mkx::tp::make_tmap(&tmB, d->b, abt, d->n, d->k, d->ldb, 64);
  for (int q = 0; !rc && q < d->size; ++q) {
    const int64_t cnt = d->bnd[q + 1] - d->bnd[q];
    if (cnt > 0) rc = mkx::tp::make_tmap(&p.d[q], d->recv[q], MKX_GEMM_FP32, d->n, cnt, d->n, 64);
    p.recv[q] = d->recv[q];
    p.flags[q] = d->flags[q];
  }
  int sms = 0;
  if (!rc) rc = mkx::tp::num_sms(&sms);
  if (rc) return rc;
  for (int q = 0; q <= d->size; ++q) p.bnd[q] = d->bnd[q];
  p.size = d->size;
  p.epoch = d->epoch;
  p.tiles_m = (int)mkx::tp::cdiv(d->m, kBM);
  p.tiles_n = (int)mkx::tp::cdiv(d->n, BN);
  p.group_m = kGroupM < p.tiles_m ? kGroupM : p.tiles_m;
  p.first_tile_m = (int)((d->bnd[(d->rank + 1) % d->size] / kBM) % p.tiles_m);
  const int tiles = p.tiles_m * p.tiles_n;
  const int ctas = sms < tiles ? sms : tiles;
  auto kern = tp_rs_kernel<BN, STAGES, BKM, F16>;
  cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)Cfg::SMEM_BYTES);
  if (e != cudaSuccess) return (int)e;
  kern<<<ctas, kThreads, Cfg::SMEM_BYTES, s>>>(tmA, tmB, p, (int)d->m, (int)d->n, (int)d->k);
  e = cudaGetLastError();
  return e == cudaSuccess ? 0 : (int)e;
}

template <int BN, int STAGES>
int launch_rs_tile(const mkx_tp_rs_desc *d, cudaStream_t s) {
  const bool f16 = d->ab_type == MKX_GEMM_FP16;
  if (d->b_kmajor) return f16 ? launch_rs<BN, STAGES, true, true>(d, s) : launch_rs<BN, STAGES, true, false>(d, s);
  return f16 ? launch_rs<BN, STAGES, false, true>(d, s) : launch_rs<BN, STAGES, false, false>(d, s);
}

/* ---- owner-side reduction ------------------------------------------------- */

template <typename OutT> struct Out4;
template <> struct Out4<float> {
  __device__ __forceinline__ static void store(float *p, float4 v) { *reinterpret_cast<float4 *>(p) = v; }
};
template <> struct Out4<__nv_bfloat16> {
  __device__ __forceinline__ static void store(__nv_bfloat16 *p, float4 v) {
    __nv_bfloat162 a = __floats2bfloat162_rn(v.x, v.y), b = __floats2bfloat162_rn(v.z, v.w);
    uint2 u;
    u.x = *reinterpret_cast<uint32_t *>(&a);
    u.y = *reinterpret_cast<uint32_t *>(&b);
    *reinterpret_cast<uint2 *>(p) = u;
  }
};
template <> struct Out4<__half> {
  __device__ __forceinline__ static void store(__half *p, float4 v) {
    __half2 a = __floats2half2_rn(v.x, v.y), b = __floats2half2_rn(v.z, v.w);
    uint2 u;
    u.x = *reinterpret_cast<uint32_t *>(&a);
    u.y = *reinterpret_cast<uint32_t *>(&b);
    *reinterpret_cast<uint2 *>(p) = u;
  }
};

/* Sum the slots of one sub-tile (64 rows x bn columns, clipped to this
 * rank's rows and to n) in rank order and store it. */
template <typename OutT>
__device__ __forceinline__ void reduce_item(const mkx_tp_red_desc &d, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  const int64_t ncol4 = (c1 - c0) / 4, total = (r1 - r0) * ncol4;
  for (int64_t idx = threadIdx.x; idx < total; idx += blockDim.x) {
    const int64_t row = r0 + idx / ncol4, col = c0 + (idx % ncol4) * 4;
    const int64_t off = (row - d.first) * d.n + col;
    float4 s = __ldcg(reinterpret_cast<const float4 *>(d.slots + off));
    for (int q = 1; q < d.sync.size; ++q) {
      const float4 v = __ldcg(reinterpret_cast<const float4 *>(d.slots + q * d.slot_stride + off));
      s.x += v.x;
      s.y += v.y;
      s.z += v.z;
      s.w += v.w;
    }
    const int64_t crow = row - d.first + d.c_row0;
    Out4<OutT>::store(static_cast<OutT *>(d.c) + crow * d.ldc + col, s);
    if (d.allreduce)
      for (int q = 0; q < d.sync.size; ++q)
        if (q != d.sync.rank) Out4<OutT>::store(static_cast<OutT *>(d.peer_c[q]) + row * d.peer_ldc[q] + col, s);
  }
}

template <typename OutT>
__global__ void __launch_bounds__(256) tp_reduce_kernel(const __grid_constant__ mkx_tp_red_desc d) {
  const int epoch = *(volatile const int *)d.epoch;
  const int64_t sr0 = d.first / 64;
  const int64_t nsr = d.count > 0 ? (d.first + d.count - 1) / 64 - sr0 + 1 : 0;
  const int64_t items = nsr * d.tiles_n;
  for (int64_t it = blockIdx.x; it < items; it += gridDim.x) {
    const int64_t sr = sr0 + it / d.tiles_n, tn = it % d.tiles_n;
    if (threadIdx.x < d.sync.size)   // thread s waits for source s
      mkx::tp::wait_geq(d.flags + threadIdx.x * d.flag_stride + sr * d.tiles_n + tn, epoch, d.sync.timeout_ns,
                        d.sync.err, threadIdx.x, (int)it, MKX_TP_AT_RS_TILE);
    __syncthreads();
    const int64_t r0 = max(sr * 64, d.first), r1 = min(sr * 64 + 64, d.first + d.count);
    const int64_t c0 = tn * d.bn, c1 = min(c0 + d.bn, d.n);
    reduce_item<OutT>(d, r0, r1, c0, c1);
    __syncthreads();
  }
  if (d.allreduce) {
    __threadfence_system();   // every thread's pushes, before the block counts itself
    __syncthreads();
  }
  if (d.allreduce && threadIdx.x == 0) {
    /* The last block to finish tells the peers (threadFenceReduction
     * pattern at system scope: each block's pushes are fenced before it
     * counts itself).  The counter resets itself for the next call. */
    int *count = reinterpret_cast<int *>(d.sync.ws[d.sync.rank] + MKX_TP_OFF_COUNT);
    __threadfence_system();
    if (atomicAdd(count, 1) == (int)gridDim.x - 1) {
      __threadfence_system();
      *count = 0;
      for (int q = 0; q < d.sync.size; ++q)
        mkx::tp::st_release(reinterpret_cast<int *>(d.sync.ws[q] + MKX_TP_OFF_DONE) + d.sync.rank, epoch);
    }
  }
}

__global__ void tp_ar_wait_kernel(mkx_tp_sync s) {
  const int *ws = reinterpret_cast<const int *>(s.ws[s.rank]);
  const int target = *(volatile const int *)(ws + MKX_TP_OFF_EPOCH / 4);
  const int q = threadIdx.x;
  if (q < s.size)
    mkx::tp::wait_geq(ws + MKX_TP_OFF_DONE / 4 + q, target, s.timeout_ns, s.err, q, -1, MKX_TP_AT_AR_DONE);
}

int last_error() {
  cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? 0 : (int)e;
}

}  // namespace

extern "C" int mkx_tp_prologue(const mkx_tp_sync *s, cudaStream_t st) {
  if (!s || s->size < 1 || s->size > MKX_TP_MAX) return MKX_GEMM_EINVAL;
  tp_prologue_kernel<<<1, 32, 0, st>>>(*s);
  return last_error();
}

extern "C" int mkx_tp_rs_gemm(const mkx_tp_rs_desc *d, cudaStream_t s) {
  if (!d || d->m <= 0 || d->n <= 0 || d->k <= 0 || d->size < 1 || d->size > MKX_TP_MAX) return MKX_GEMM_EINVAL;
  if (d->bn == 256) return launch_rs_tile<256, 4>(d, s);
  if (d->bn == 128) return launch_rs_tile<128, 6>(d, s);
  return MKX_GEMM_EINVAL;
}

extern "C" int mkx_tp_reduce(const mkx_tp_red_desc *d, cudaStream_t st) {
  if (!d || d->sync.size < 1 || d->sync.size > MKX_TP_MAX || d->n % 4) return MKX_GEMM_EINVAL;
  switch (d->c_type) {
    case MKX_GEMM_BF16: tp_reduce_kernel<__nv_bfloat16><<<MKX_TP_REDUCE_BLOCKS, 256, 0, st>>>(*d); break;
    case MKX_GEMM_FP16: tp_reduce_kernel<__half><<<MKX_TP_REDUCE_BLOCKS, 256, 0, st>>>(*d); break;
    case MKX_GEMM_FP32: tp_reduce_kernel<float><<<MKX_TP_REDUCE_BLOCKS, 256, 0, st>>>(*d); break;
    default: return MKX_GEMM_EINVAL;
  }
  return last_error();
}

extern "C" int mkx_tp_ar_wait(const mkx_tp_sync *s, cudaStream_t st) {
  if (!s || s->size < 1 || s->size > MKX_TP_MAX) return MKX_GEMM_EINVAL;
  tp_ar_wait_kernel<<<1, 32, 0, st>>>(*s);
  return last_error();
}
