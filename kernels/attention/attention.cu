/*
 * MKX attention engine: host launcher (C interface in attn_engine.h).
 */
#include "attention/attn_engine.h"
#include "attention/attn_mainloop.cuh"
#include "gemm/tmap.cuh"

#include <cuda.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "common/modules.cuh"

using namespace mkx::attn;

namespace {

template <class Cfg>
__global__ void __launch_bounds__(Cfg::THREADS, 1)
    mkx_attn_kernel(const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
                    const __grid_constant__ CUtensorMap tmV, const __grid_constant__ CUtensorMap tmKr,
                    const __grid_constant__ CUtensorMap tmVr, const __grid_constant__ CUtensorMap tmO,
                    const __grid_constant__ Params p) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  extern __shared__ __align__(1024) uint8_t smem[];
  run<Cfg>(smem, p, &tmQ, &tmK, &tmV, &tmKr, &tmVr, &tmO);
#endif
}

/* A dense tensor of `rank` dimensions (tmap.cuh), box {64, 1, ..., rows,
 * ...}; 0 or MKX_ATTN_ETMAP. */
int make_map(CUtensorMap *map, const void *ptr, int dtype, int rank, const int64_t *dims, const int64_t *strides,
             const uint32_t *box) {
  return mkx::gemm::make_tmap_nd(map, ptr, dtype, rank, dims, strides, box) ? MKX_ATTN_ETMAP : 0;
}

/* K or V as {head dim, heads, seq, batch, chunks}, box of `rows` keys. */
int64_t chunk_elems(const mkx_attn_desc *d) { return d->batch * d->seq_k * d->heads_kv * d->head_dim; }

int64_t ring_stride(const mkx_attn_desc *d) { return d->ring_stride > 0 ? d->ring_stride : chunk_elems(d); }

int make_kv_map(CUtensorMap *map, const void *ptr, const mkx_attn_desc *d, int chunks, int rows) {
  const int64_t dims[5] = {d->head_dim, d->heads_kv, d->seq_k, d->batch, chunks};
  const int64_t st[5] = {1, d->head_dim, d->heads_kv * d->head_dim, d->seq_k * d->heads_kv * d->head_dim,
                         chunks > 1 ? ring_stride(d) : chunk_elems(d)};
  const uint32_t box[5] = {64, 1, (uint32_t)rows, 1, 1};
  return make_map(map, ptr, d->dtype, 5, dims, st, box);
}

/* (batch, query head) pairs per section of the tile order: as many as
 * keep their keys and values within about half of L2, a whole number of
 * grouped-query groups. */
int section_pairs(const mkx_attn_desc *d) {
  const int64_t group = d->heads_q / d->heads_kv;
  const int64_t kv_per_group = (int64_t)d->nchunks * d->seq_k * d->head_dim * 2 * 2;
  int64_t groups = (24ll << 20) / (kv_per_group > 0 ? kv_per_group : 1);
  if (groups < 1) groups = 1;
  const int64_t pairs = d->batch * d->heads_q;
  const int64_t n = groups * group;
  return (int)(n < pairs ? n : pairs);
}

template <class Cfg>
int launch(const mkx_attn_desc *d, cudaStream_t s) {
  CUtensorMap tmQ, tmK, tmV, tmKr, tmVr, tmO;
  const int64_t qd[4] = {d->head_dim, d->heads_q, d->seq_q, d->batch};
  const int64_t qs[4] = {1, d->head_dim, d->heads_q * d->head_dim, d->seq_q * d->heads_q * d->head_dim};
  const uint32_t qb[4] = {64, 1, (uint32_t)Cfg::BM, 1};
  int rc = make_map(&tmQ, d->q, d->dtype, 4, qd, qs, qb);
  const uint32_t ob[4] = {64, 1, 64, 1};  // O: one consumer warpgroup's rows
  if (!rc) rc = make_map(&tmO, d->o, d->dtype, 4, qd, qs, ob);
  if (!rc) rc = make_kv_map(&tmK, d->k, d, 1, Cfg::BN);
  if (!rc) rc = make_kv_map(&tmV, d->v, d, 1, Cfg::BN);
  const bool ring = d->nchunks > 1;
  if (!rc) rc = make_kv_map(&tmKr, ring ? d->k_ring : d->k, d, ring ? d->nchunks : 1, Cfg::BN);
  if (!rc) rc = make_kv_map(&tmVr, ring ? d->v_ring : d->v, d, ring ? d->nchunks : 1, Cfg::BN);
  if (rc) return rc;
  Params p;
  memset(&p, 0, sizeof p);
  p.batch = (int)d->batch;
  p.seq_q = (int)d->seq_q;
  p.seq_k = (int)d->seq_k;
  p.heads_q = (int)d->heads_q;
  p.heads_kv = (int)d->heads_kv;
  p.head_dim = (int)d->head_dim;
  p.group = (int)(d->heads_q / d->heads_kv);
  p.causal = d->causal != 0;
  p.layout = d->nchunks > 1 ? d->layout : MKX_ATTN_POS_CONTIGUOUS;
  p.nchunks = d->nchunks;
  p.self = d->self;
  for (int k = 0; k < d->nchunks; ++k)
    p.order[k] = (int8_t)(d->order ? d->order[k] : (d->self - k + d->nchunks) % d->nchunks);
  p.scale = d->scale;
  p.scale_log2 = d->scale * 1.4426950408889634f;
  p.o = d->o;
  p.lse = d->lse;
  p.ready = d->ready;
  p.ready_target = d->ready_target;
  p.net_mask = d->net_mask;
  p.net_ready = d->net_ready;
  p.net_ready_stride = d->net_ready_stride;
  p.net_target = d->net_target;
  p.net_claim = d->net_claim;
  if (d->sync) p.sync = *d->sync;
  p.tile_counter = d->tile_counter;
  p.section = section_pairs(d);
  p.no_turns = d->no_turns;
  int sms = 0;
  rc = mkx::gemm::num_sms(&sms, d->sync ? d->sync->ctas : 0);
  if (rc) return rc;
  const int64_t tiles = d->batch * d->heads_q * mkx::gemm::cdiv(d->seq_q, Cfg::BM);
  int ctas = d->num_ctas > 0 ? d->num_ctas : sms;
  if (ctas > tiles) ctas = (int)tiles;
  auto kern = mkx_attn_kernel<Cfg>;
  rc = mkx::gemm::smem_attr_once<mkx_attn_kernel<Cfg>>((int)Cfg::SMEM_BYTES);
  if (rc) return rc;
  if (d->tile_counter) {
    cudaError_t e = cudaMemsetAsync(d->tile_counter, 0, sizeof(int), s);
    if (e != cudaSuccess) return (int)e;
  }
  kern<<<ctas, Cfg::THREADS, Cfg::SMEM_BYTES, s>>>(tmQ, tmK, tmV, tmKr, tmVr, tmO, p);
  cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? 0 : (int)e;
}

bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

bool order_ok(const mkx_attn_desc *d) {
  uint64_t seen = 0;
  for (int k = 0; k < d->nchunks; ++k) {
    const int c = d->order[k];
    if (c < 0 || c >= d->nchunks || (seen >> c & 1)) return false;
    seen |= 1ull << c;
  }
  return d->order[0] == d->self;
}

}  // namespace

extern "C" int mkx_attn_supported(const mkx_attn_desc *d, const char **why) {
  const char *w = nullptr;
  const int64_t lim = 1ll << 31;
  if (!d)
    w = "null descriptor";
  else if (d->dtype != MKX_GEMM_BF16 && d->dtype != MKX_GEMM_FP16)
    w = "type must be bf16 or fp16";
  else if (d->batch < 1 || d->seq_q < 1 || d->seq_k < 1 || d->heads_q < 1 || d->heads_kv < 1 || d->head_dim < 1)
    w = "a size is < 1";
  else if (d->heads_q % d->heads_kv)
    w = "heads_q is not a multiple of heads_kv";
  else if (d->head_dim % 8)
    w = "head_dim is not a multiple of 8";
  else if (d->head_dim > 128)
    w = "head_dim is over 128";
  else if (d->batch * d->seq_q * d->heads_q * d->head_dim >= lim || (int64_t)d->nchunks * ring_stride(d) >= lim)
    w = "a tensor has 2^31 elements or more";
  else if (d->nchunks < 1 || d->nchunks > MKX_ATTN_MAX_CHUNKS || d->self < 0 || d->self >= d->nchunks)
    w = "chunk count or own chunk out of range";
  else if (d->order && !order_ok(d))
    w = "order is not every chunk once, own first";
  else if (d->nchunks > 1 &&
           (d->seq_q != d->seq_k || !d->k_ring || !d->v_ring || !d->ready || !d->ready_target || !d->sync))
    w = "several chunks need equal shards, ring buffers, ready flags and a sync";
  else if (d->ring_stride < 0 || (d->ring_stride > 0 && (d->ring_stride < chunk_elems(d) || d->ring_stride % 8)))
    w = "ring_stride under a chunk or not a multiple of 8";
  else if (d->net_mask &&
           (d->nchunks < 2 || (d->net_mask >> d->self & 1u) || (d->nchunks < 32 && d->net_mask >> d->nchunks) ||
            !d->net_ready || d->net_ready_stride < 1 || !d->net_target || !d->net_claim))
    w = "net_mask needs several chunks, not its own, and net_ready, net_ready_stride, net_target, net_claim";
  else if (d->layout < 0 || d->layout > 2 || (d->layout == 1 && d->nchunks > 1 && d->seq_k % 2))
    w = "bad layout";
  else if (!d->q || !d->k || !d->v || !d->o)
    w = "null Q, K, V or O";
  else if (!aligned16(d->q) || !aligned16(d->k) || !aligned16(d->v) || !aligned16(d->o) ||
           (d->nchunks > 1 && (!aligned16(d->k_ring) || !aligned16(d->v_ring))))
    w = "a tensor is not 16-byte aligned";
  else if (d->block_n != 0 && d->block_n != 128 && !(d->block_n == 192 && d->head_dim <= 64))
    w = "block_n must be 0, 128, or 192 with head_dim <= 64";
  else if (d->warpgroups != 0 && d->warpgroups != 2 && !(d->warpgroups == 3 && d->head_dim <= 64 && d->block_n != 192))
    w = "warpgroups must be 0, 2, or 3 with head_dim <= 64 and 128 keys per block";
  else if (d->warpgroups == 3 && d->block_n == 192)
    w = "192 keys per block take 2 warpgroups";
  else if (!(d->scale > 0.f) || isinf(d->scale))
    w = "scale must be positive and finite";
  if (why) *why = w;
  return w == nullptr;
}

/* Keys per block: 128 unless block_n asks for 192 (head dims up to 64,
 * two warpgroups; larger blocks for larger head dims would not fit the
 * consumers' registers). */
extern "C" int mkx_attn_block_n(const mkx_attn_desc *d) { return d->head_dim <= 64 && d->block_n == 192 ? 192 : 128; }

/* Consumer warpgroups: three for head dims up to 64 (the products are
 * short there, and a third warpgroup's softmax hides under the other two's
 * products) unless 192 keys per block or two are asked for. */
extern "C" int mkx_attn_warpgroups(const mkx_attn_desc *d) {
  if (d->head_dim > 64 || d->warpgroups == 2 || mkx_attn_block_n(d) == 192) return 2;
  return 3;
}

#ifdef MKX_ATTN_TIMELINE
extern "C" int mkx_attn_timeline_read(long long *out) {
  return (int)cudaMemcpyFromSymbol(out, mkx::attn::timeline_stamps, sizeof mkx::attn::timeline_stamps);
}
extern "C" int mkx_attn_timeline_clear(void) {
  void *at = nullptr;
  cudaError_t e = cudaGetSymbolAddress(&at, mkx::attn::timeline_stamps);
  if (e == cudaSuccess) e = cudaMemset(at, 0, sizeof mkx::attn::timeline_stamps);
  return (int)e;
}
#endif

namespace {

/* f(Cfg{}) with the configuration a run of d takes. */
template <typename F>
int with_config(const mkx_attn_desc *d, F &&f) {
  const bool f16 = d->dtype == MKX_GEMM_FP16;
  if (d->head_dim > 64) return f16 ? f(Config<128, 128, 2, true>{}) : f(Config<128, 128, 2, false>{});
  if (mkx_attn_warpgroups(d) == 3) return f16 ? f(Config<64, 128, 2, true, 3>{}) : f(Config<64, 128, 2, false, 3>{});
  if (mkx_attn_block_n(d) == 192) return f16 ? f(Config<64, 192, 2, true>{}) : f(Config<64, 192, 2, false>{});
  return f16 ? f(Config<64, 128, 2, true>{}) : f(Config<64, 128, 2, false>{});
}

template <typename Cfg>
int load() {
  int rc = mkx::gemm::smem_attr_once<mkx_attn_kernel<Cfg>>((int)Cfg::SMEM_BYTES);
  cudaFuncAttributes a;
  return rc ? rc : (int)cudaFuncGetAttributes(&a, (const void *)mkx_attn_kernel<Cfg>);
}

}  // namespace

extern "C" int mkx_attn_run(const mkx_attn_desc *d, cudaStream_t s) {
  if (!mkx_attn_supported(d, nullptr)) return MKX_ATTN_EINVAL;
  if (!mkx::gemm::device_is_sm90()) return MKX_ATTN_ENODEV;
  return with_config(d, [&](auto cfg) { return launch<decltype(cfg)>(d, s); });
}

extern "C" int mkx_attn_load(const mkx_attn_desc *d) {
  if (!mkx_attn_supported(d, nullptr)) return MKX_ATTN_EINVAL;
  if (!mkx::gemm::device_is_sm90()) return MKX_ATTN_ENODEV;
  return with_config(d, [](auto cfg) { return load<decltype(cfg)>(); });
}
