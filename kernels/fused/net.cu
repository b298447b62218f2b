/*
 * The calls across nodes driven by the GPU (tp.h, mkx_fused_net_desc): the
 * kernels that hand data to the network proxy, wait for the peers' signal
 * words, and wait until the proxy is done.  For AllGather+GEMM on nodes of
 * one rank the gated GEMM (ag_gemm.cu) waits for the peers' chunks itself,
 * so a tile starts as soon as its rows have landed; on nodes of several
 * ranks the forward (mkx_fused_net_fwd) hands what lands on to the node's
 * ranks and raises their flags; the reductions post each chunk of partial
 * rows after its GEMM, and the owner sums the chunks as they land
 * (mkx_fused_net_sum).
 *
 * A post that finds the ring full waits for the proxy (bounded); a chunk
 * is posted only after every peer has arrived at this call, so nothing is
 * written into a gathered A that a peer's previous GEMM may still read.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include "gemm/gemm_engine.h"
#include "proxy/proxy_dev.cuh"
#include "fused/flags.cuh"
#include "fused/net.h"
#include "common/modules.cuh"

namespace {

using mkx::fused::give_up;

using mkx::fused::told_word;

/* A failed proxy wait or post: recorded in the call's error word as a
 * timeout at `where` naming the peer (the proxy's own record, in
 * d.proxy.status, holds the slot and values). */
__device__ void failed(const mkx_fused_net_desc &d, int peer, int where) {
  give_up(d.sync, MKX_FUSED_ERR_TIMEOUT, peer, -1, where, told_word(d.sync.rank, peer, where));
}

/* Waits for rank q's word `word` (mkx_fused_net_desc) to reach epoch e:
 * true once it has; false, with the failure recorded as a wait at
 * `where`, if it never does within the bound. */
__device__ bool peer_word(const mkx_fused_net_desc &d, int q, uint32_t word, uint64_t e, int where) {
  if (!mkx::proxy::wait_signal(d.proxy, d.slot0 + (uint32_t)q * d.words + word, e)) return true;
  failed(d, q, where);
  return false;
}

/* The call has failed on this rank (a wait ran out, or a peer gave up):
 * nothing more is written into the peers' regions, since a peer that has
 * not arrived may still read its region for its previous call. */
__device__ __forceinline__ bool call_failed(const mkx_fused_net_desc &d) {
  return d.sync.err && *(volatile const int *)d.sync.err > 0;
}

/* Rank q is one this rank meets and writes. */
__host__ __device__ __forceinline__ bool is_peer(const mkx_fused_net_desc &d, int q) {
  return q != d.rank && (!d.peers || (d.peers >> q & 1u));
}

/* Rows [g0, g1) of rank q's chunk j, as net_begin posts them and the
 * forward takes them (chunk_tiles tiles of 128 rows from the tile of
 * bnd[q]); false past the last. */
__device__ bool chunk_rows(const mkx_fused_net_desc &d, int q, int j, int64_t &g0, int64_t &g1) {
  const int64_t b0 = d.bnd[q], b1 = d.bnd[q + 1], t0 = b0 / 128;
  g0 = j == 0 ? b0 : (t0 + (int64_t)j * d.chunk_tiles) * 128;
  if (g0 >= b1) return false;
  g1 = (t0 + (int64_t)(j + 1) * d.chunk_tiles) * 128;
  if (g1 > b1) g1 = b1;
  return true;
}

__global__ void net_begin(const mkx_fused_net_desc d) {
  if (threadIdx.x != 0) return;
  const uint64_t e = *(volatile uint64_t *)d.epoch + 1;
  *(volatile uint64_t *)d.epoch = e;
  uint64_t seq = 0;
  const uint32_t mine = d.slot0 + (uint32_t)d.rank * d.words;
  for (int q = 0; q < d.size; ++q)
    if (is_peer(d, q) && mkx::proxy::post(d.proxy, q, d.region, d.region, 0, 0, 0, mine, e, &seq)) {
      failed(d, q, MKX_FUSED_AT_NET_SENT);
      *d.last_seq = seq;
      return;
    }
  for (int q = 0; q < d.size; ++q)
    if (is_peer(d, q) && !peer_word(d, q, 0, e, MKX_FUSED_AT_NET_ARRIVE)) {
      *d.last_seq = seq;
      return;
    }
  if (call_failed(d) || d.size > MKX_FUSED_MAX) {
    *d.last_seq = seq;
    return;
  }
  /* peer by peer from the next rank on, so the ranks' first chunks do not
   * all go to rank 0 */
  for (int i = 1; i < d.size; ++i) {
    const int q = (d.rank + i) % d.size;
    if (!is_peer(d, q)) continue;
    int64_t g0, g1;
    for (uint32_t j = 0; chunk_rows(d, d.rank, (int)j, g0, g1); ++j) {
      const uint64_t off = (uint64_t)g0 * (uint64_t)d.row_bytes;
      if (mkx::proxy::post(d.proxy, q, d.region, d.region, off, off, (uint64_t)(g1 - g0) * (uint64_t)d.row_bytes,
                           mine + 1 + j, e, &seq)) {
        failed(d, q, MKX_FUSED_AT_NET_SENT);
        break;
      }
    }
  }
  *d.last_seq = seq;
}

/* Until the call's forward (mkx_fused_net_fwd) has ended: false if it
 * does not within the bound. */
__device__ bool forward_ended(const mkx_fused_net_desc &d, uint64_t e) {
  const uint64_t t0 = mkx::sys::globaltimer();
  while (*(volatile const uint64_t *)d.fwd_done < e)
    if (mkx::sys::globaltimer() - t0 > d.sync.timeout_ns) return false;
  __threadfence();
  return true;
}

__global__ void net_end(const mkx_fused_net_desc d) {
  if (threadIdx.x != 0) return;
  if (d.fwd_done && !forward_ended(d, *(volatile const uint64_t *)d.epoch)) failed(d, -1, MKX_FUSED_AT_NET_ROWS);
  const uint64_t seq = *(volatile uint64_t *)d.last_seq;
  if (seq && mkx::proxy::wait_complete(d.proxy, seq)) failed(d, -1, MKX_FUSED_AT_NET_SENT);
}

__global__ void net_post(const mkx_fused_net_desc d, int peer, uint64_t src_off, uint64_t dst_off, uint64_t len,
                         uint32_t word) {
  if (threadIdx.x != 0 || call_failed(d)) return;
  const uint64_t e = *(volatile uint64_t *)d.epoch;
  uint64_t seq = 0;
  const uint32_t slot = d.slot0 + (uint32_t)d.rank * d.words + word;
  if (mkx::proxy::post(d.proxy, peer, d.region, d.region, src_off, dst_off, len, slot, e, &seq))
    failed(d, peer, MKX_FUSED_AT_NET_SENT);
  if (seq) *d.last_seq = seq;
}

/* One thread per rank: rank q's word `word` up to the epoch, for every
 * peer q. */
__global__ void net_wait(const mkx_fused_net_desc d, uint32_t word, int where) {
  const int q = (int)threadIdx.x;
  if (q >= d.size || !is_peer(d, q) || call_failed(d)) return;
  peer_word(d, q, word, *(volatile const uint64_t *)d.epoch, where);
}

template <typename OutT, int V>
struct SumVec {
  float v[V];
};

__device__ __forceinline__ void store_out(float *o, const SumVec<float, 4> &a) {
  *reinterpret_cast<float4 *>(o) = make_float4(a.v[0], a.v[1], a.v[2], a.v[3]);
}
/* Two 2-element halves of 4 outputs in one 8-byte store. */
template <typename Pair>
__device__ __forceinline__ void store_pairs(void *o, const Pair &lo, const Pair &hi) {
  uint2 u;
  u.x = *reinterpret_cast<const uint32_t *>(&lo);
  u.y = *reinterpret_cast<const uint32_t *>(&hi);
  *reinterpret_cast<uint2 *>(o) = u;
}
__device__ __forceinline__ void store_out(__nv_bfloat16 *o, const SumVec<__nv_bfloat16, 4> &a) {
  store_pairs(o, __floats2bfloat162_rn(a.v[0], a.v[1]), __floats2bfloat162_rn(a.v[2], a.v[3]));
}
__device__ __forceinline__ void store_out(__half *o, const SumVec<__half, 4> &a) {
  store_pairs(o, __floats2half2_rn(a.v[0], a.v[1]), __floats2half2_rn(a.v[2], a.v[3]));
}
template <typename OutT>
__device__ __forceinline__ void store_out(OutT *o, const SumVec<OutT, 1> &a) {
  *o = static_cast<OutT>(a.v[0]);
}

__device__ __forceinline__ void load_add(const float *p, SumVec<float, 4> &a) {
  const float4 x = __ldcg(reinterpret_cast<const float4 *>(p));
  a.v[0] += x.x, a.v[1] += x.y, a.v[2] += x.z, a.v[3] += x.w;
}
__device__ __forceinline__ void load_add(const float *p, SumVec<float, 1> &a) { a.v[0] += __ldcg(p); }

/* The sum's sources: its named ones, else every rank. */
__host__ __device__ __forceinline__ int sum_sources(const mkx_fused_net_sum_desc &d) {
  return d.nsrc ? d.nsrc : d.net.size;
}

/* Row i of the sum, V columns per thread and U vectors in flight (loads
 * through L2 only: the peers' partials were written there by DMA or by
 * another GPU). */
template <typename OutT, int V>
__device__ __forceinline__ void sum_row(const mkx_fused_net_sum_desc &d, int64_t i, OutT *out, OutT *out2) {
  constexpr int U = 4;
  const int64_t nv = d.n / V, step = (int64_t)blockDim.x * U;
  for (int64_t c0 = threadIdx.x; c0 < nv; c0 += step) {
    SumVec<float, V> acc[U];
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int k = 0; k < V; ++k) acc[u].v[k] = 0.f;
    for (int q = 0; q < sum_sources(d); ++q) {
      const float *row = d.part[q] + i * d.ld_part;
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (c0 + u * blockDim.x < nv) load_add(row + (c0 + u * blockDim.x) * V, acc[u]);
    }
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (c0 + u * blockDim.x < nv) {
        SumVec<OutT, V> o;
#pragma unroll
        for (int k = 0; k < V; ++k) o.v[k] = acc[u].v[k];
        store_out(out + i * d.ldc + (c0 + u * blockDim.x) * V, o);
        if (out2) store_out(out2 + i * d.ldc2 + (c0 + u * blockDim.x) * V, o);
      }
  }
}

/* Thread 0, once the block's group of chunk j is stored: the block that
 * completes chunk j sends its rows of out to every peer (post_w0 != 0).
 * Every block's stores are made visible before its count. */
__device__ void group_done(const mkx_fused_net_sum_desc &d, int64_t j, int64_t groups_in_chunk, uint64_t e) {
  __threadfence();
  unsigned long long *count = reinterpret_cast<unsigned long long *>(d.chunk_done + j);
  if (atomicAdd(count, 1ull) + 1 != (unsigned long long)groups_in_chunk) return;
  *count = 0; /* the next call's sum runs after this kernel */
  __threadfence();
  if (call_failed(d.net)) return;
  const int64_t r0 = j * d.chunk_rows, r1 = r0 + d.chunk_rows < d.rows ? r0 + d.chunk_rows : d.rows;
  const uint64_t off = d.post_off + (uint64_t)r0 * (uint64_t)d.post_row_bytes;
  const uint64_t len = (uint64_t)(r1 - r0) * (uint64_t)d.post_row_bytes;
  const uint32_t slot = d.net.slot0 + (uint32_t)d.net.rank * d.net.words + d.post_w0 + (uint32_t)j;
  const uint64_t dst = d.post_one ? d.post_dst_off + (uint64_t)r0 * (uint64_t)d.post_row_bytes : off;
  uint64_t seq = 0;
  for (int i = 1; i < d.net.size; ++i) {
    const int q = (d.net.rank + i) % d.net.size;
    if (!is_peer(d.net, q) || (d.post_one && q != d.post_one - 1)) continue;
    const int rc = mkx::proxy::post(d.net.proxy, q, d.net.region, d.net.region, off, dst, len, slot, e, &seq);
    if (seq) atomicMax(reinterpret_cast<unsigned long long *>(d.net.last_seq), (unsigned long long)seq);
    if (rc) {
      failed(d.net, q, MKX_FUSED_AT_NET_SENT);
      return;
    }
  }
}

/* Chunk j of source q may be read (false: a wait ran out, recorded). */
__device__ bool source_ready(const mkx_fused_net_sum_desc &d, int q, int64_t j, uint64_t e, int fe) {
  if (!d.nsrc) return q == d.net.rank || peer_word(d.net, q, d.w0 + (uint32_t)j, e, MKX_FUSED_AT_NET_ROWS);
  if (d.src_rank[q] >= 0) return peer_word(d.net, d.src_rank[q], d.w0 + (uint32_t)j, e, MKX_FUSED_AT_NET_ROWS);
  if (!d.src_flag[q]) return true;
  return mkx::fused::wait_geq(d.src_flag[q] + j, fe, d.net.sync, d.src_name[q], (int)j, MKX_FUSED_AT_NODE_PART);
}

/* Groups of 8 rows, block-strided: thread 0 waits for the chunks of the
 * group's rows, then the block sums them.  The grid may be smaller than
 * the groups (mkx_fused_net_sum_desc.max_blocks), so that a rank sharing
 * the GPU keeps SMs for the peer's kernels its waits depend on. */
template <typename OutT, int V>
__global__ void __launch_bounds__(512) net_sum(const mkx_fused_net_sum_desc d) {
  const int64_t per = 8, groups = (d.rows + per - 1) / per;
  const int64_t per_chunk = d.chunk_rows / per; /* chunk_rows: a multiple of 8 */
  __shared__ int ok;
  OutT *out = static_cast<OutT *>(d.out), *out2 = static_cast<OutT *>(d.out2);
  const uint64_t e = *(volatile uint64_t *)d.net.epoch;
  const int fe = d.flag_epoch ? *(volatile const int *)d.flag_epoch : 0;
  for (int64_t g = blockIdx.x; g < groups; g += gridDim.x) {
    const int64_t r0 = g * per, r1 = r0 + per < d.rows ? r0 + per : d.rows;
    if (threadIdx.x == 0) {
      ok = 1;
      const int64_t j0 = r0 / d.chunk_rows, j1 = (r1 - 1) / d.chunk_rows;
      for (int q = 0; ok && q < sum_sources(d); ++q)
        for (int64_t j = j0; ok && j <= j1; ++j) ok = source_ready(d, q, j, e, fe);
    }
    __syncthreads();
    if (!ok) return;
    for (int64_t i = r0; i < r1; ++i) sum_row<OutT, V>(d, i, out, out2);
    __syncthreads();
    if (d.post_w0 && threadIdx.x == 0) {
      const int64_t j = r0 / d.chunk_rows;
      const int64_t left = groups - j * per_chunk;
      group_done(d, j, left < per_chunk ? left : per_chunk, e);
    }
  }
}

/* Groups of 8 rows of the other owners, block-strided: thread 0 waits for
 * the chunk that holds the group, then the block copies its rows from
 * the region into dst (16 bytes at a time where every row allows). */
template <typename W>
__global__ void __launch_bounds__(512) net_take(const mkx_fused_net_take_desc d) {
  __shared__ int ok;
  __shared__ int64_t s_r0, s_r1;
  const uint64_t e = *(volatile uint64_t *)d.net.epoch;
  const int64_t words = d.row_bytes / (int64_t)sizeof(W);
  for (int64_t g = blockIdx.x;; g += gridDim.x) {
    if (threadIdx.x == 0) {
      /* group g among the other owners' rows, owner by owner */
      int64_t left = g;
      ok = 0, s_r0 = s_r1 = 0;
      for (int q = 0; q < d.net.size; ++q) {
        if (!is_peer(d.net, q)) continue;
        const int64_t b0 = d.bnd[q], b1 = d.bnd[q + 1], ng = (b1 - b0 + 7) / 8;
        if (left >= ng) {
          left -= ng;
          continue;
        }
        s_r0 = b0 + left * 8;
        s_r1 = s_r0 + 8 < b1 ? s_r0 + 8 : b1;
        const uint32_t j = (uint32_t)((s_r0 - b0) / d.chunk_rows);
        ok = peer_word(d.net, q, d.w0 + j, e, MKX_FUSED_AT_NET_ROWS) ? 1 : -1;
        break;
      }
    }
    __syncthreads();
    if (ok <= 0) return;
    for (int64_t i = s_r0; i < s_r1; ++i) {
      const W *src = reinterpret_cast<const W *>(d.src + i * d.ld_src);
      W *dst = reinterpret_cast<W *>(d.dst + i * d.ld_dst);
      for (int64_t c = threadIdx.x; c < words; c += blockDim.x) dst[c] = __ldcg(src + c);
    }
    __syncthreads();
  }
}

/* What one unit of the forward moves: from source q's word, pieces of
 * the region to destination i, then flags [flag0, flag0 + nflags) of i. */
struct FwdUnit {
  int q, i, n;
  uint32_t word;
  uint64_t src[2], dst[2], len[2];
  int64_t flag0, nflags;
};

/* Rows: unit u, chunk by chunk (every source's chunk j, each to every
 * destination); false past the last. */
__device__ bool rows_unit(const mkx_fused_net_fwd_desc &d, int64_t u, FwdUnit &f) {
  for (int j = 0; j + 1 < (int)d.net.words; ++j) {
    bool any = false;
    for (int q = 0; q < d.net.size; ++q) {
      int64_t g0, g1;
      if (!is_peer(d.net, q) || !chunk_rows(d.net, q, j, g0, g1)) continue;
      any = true;
      if (u >= d.ndst) {
        u -= d.ndst;
        continue;
      }
      const uint64_t rb = (uint64_t)d.net.row_bytes;
      f.q = q, f.i = (int)u, f.n = 1, f.word = 1 + (uint32_t)j;
      f.src[0] = f.dst[0] = (uint64_t)g0 * rb;
      f.len[0] = (uint64_t)(g1 - g0) * rb;
      f.flag0 = q * d.tiles_m + g0 / 128;
      f.nflags = (g1 - 1) / 128 - g0 / 128 + 1;
      return true;
    }
    if (!any) return false;
  }
  return false;
}

/* Key/value chunks: unit u, source by source, each to every
 * destination; false past the last. */
__device__ bool kv_unit(const mkx_fused_net_fwd_desc &d, int64_t u, FwdUnit &f) {
  for (int q = 0; q < d.net.size; ++q) {
    if (!is_peer(d.net, q)) continue;
    if (u >= d.ndst) {
      u -= d.ndst;
      continue;
    }
    const uint64_t c = d.kv_chunk;
    f.q = q, f.i = (int)u, f.n = 2, f.word = d.kv_word;
    f.src[0] = 2 * (uint64_t)q * c, f.dst[0] = (uint64_t)q * c;
    f.src[1] = f.src[0] + c, f.dst[1] = ((uint64_t)d.net.size + (uint64_t)q) * c;
    f.len[0] = f.len[1] = c;
    f.flag0 = q, f.nflags = 1;
    return true;
  }
  return false;
}

/* len bytes from src to dst by the CTA, U loads in flight per thread. */
template <typename W>
__device__ void cta_copy(char *dst, const char *src, uint64_t len) {
  constexpr int U = 8;
  const W *s = reinterpret_cast<const W *>(src);
  W *t = reinterpret_cast<W *>(dst);
  const int64_t n = (int64_t)(len / sizeof(W)), b = blockDim.x;
  int64_t w = threadIdx.x;
  for (; w + (U - 1) * b < n; w += U * b) {
    W x[U];
#pragma unroll
    for (int k = 0; k < U; ++k) x[k] = __ldcg(s + w + k * b);
#pragma unroll
    for (int k = 0; k < U; ++k) t[w + k * b] = x[k];
  }
  for (; w < n; w += b) t[w] = __ldcg(s + w);
}

/* See mkx_fused_net_fwd_desc.  W: the copy's word (16 bytes where every
 * piece allows). */
template <typename W>
__global__ void __launch_bounds__(512) net_fwd(const mkx_fused_net_fwd_desc d) {
  __shared__ int ok;
  __shared__ FwdUnit f;
  const uint64_t e = *(volatile const uint64_t *)d.net.epoch;
  for (int64_t u = blockIdx.x;; u += gridDim.x) {
    if (threadIdx.x == 0) {
      FwdUnit x;
      ok = 0;
      if (d.kind == MKX_FUSED_FWD_KV ? kv_unit(d, u, x) : rows_unit(d, u, x)) {
        f = x;
        const int at = d.kind == MKX_FUSED_FWD_KV ? MKX_FUSED_AT_KV_CHUNK : MKX_FUSED_AT_NET_ROWS;
        ok = !call_failed(d.net) && peer_word(d.net, x.q, x.word, e, at) ? 1 : -1;
      }
    }
    __syncthreads();
    if (ok <= 0) break;
    for (int k = 0; k < f.n; ++k) cta_copy<W>(d.dst[f.i] + f.dst[k], d.src + f.src[k], f.len[k]);
    __threadfence_system();
    __syncthreads();
    if (threadIdx.x == 0) {
      const int fe = *(volatile const int *)d.flag_epoch;
      for (int64_t t = 0; t < f.nflags; ++t) mkx::fused::st_release(d.flags[f.i] + f.flag0 + t, fe);
    }
    __syncthreads();
  }
  /* the last CTA out tells mkx_fused_net_end (and zeroes the count for the
   * next call, which starts after that) */
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(d.count, 1u) + 1 == gridDim.x) {
      *(volatile unsigned *)d.count = 0;
      __threadfence();
      *(volatile uint64_t *)d.net.fwd_done = e;
    }
  }
}

bool desc_ok(const mkx_fused_net_desc *d) {
  if (!d || !d->proxy.ring || !d->proxy.signals || !d->epoch || !d->last_seq || d->size < 2 || d->size > 32 ||
      d->rank < 0 || d->rank >= d->size || d->words < 2 || d->chunk_tiles < 1 || d->row_bytes <= 0 || d->bnd[0] != 0)
    return false;
  if ((uint64_t)d->slot0 + (uint64_t)d->size * d->words > d->proxy.num_signals) return false;
  if (d->size > MKX_FUSED_MAX) { /* no rows: bnd all zero */
    for (int q = 0; q <= MKX_FUSED_MAX; ++q)
      if (d->bnd[q]) return false;
    return true;
  }
  for (int q = 0; q < d->size; ++q) {
    if (d->bnd[q + 1] < d->bnd[q]) return false;
    const int64_t b0 = d->bnd[q], b1 = d->bnd[q + 1];
    if (b1 > b0 && (b1 - 1) / 128 - b0 / 128 >= (int64_t)(d->words - 1) * d->chunk_tiles) return false;
  }
  return true;
}

int launched() {
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? 0 : (int)e;
}

}  // namespace

extern "C" int mkx_fused_net_begin(const mkx_fused_net_desc *d, cudaStream_t st) {
  if (!desc_ok(d)) return MKX_GEMM_EINVAL;
  net_begin<<<1, 32, 0, st>>>(*d);
  return launched();
}

extern "C" int mkx_fused_net_end(const mkx_fused_net_desc *d, cudaStream_t st) {
  if (!desc_ok(d)) return MKX_GEMM_EINVAL;
  net_end<<<1, 32, 0, st>>>(*d);
  return launched();
}

extern "C" int mkx_fused_net_post(const mkx_fused_net_desc *d, int peer, uint64_t src_off, uint64_t dst_off,
                                  uint64_t len, uint32_t word, cudaStream_t st) {
  if (!desc_ok(d) || peer < 0 || peer >= d->size || !is_peer(*d, peer) || word >= d->words) return MKX_GEMM_EINVAL;
  net_post<<<1, 32, 0, st>>>(*d, peer, src_off, dst_off, len, word);
  return launched();
}

extern "C" int mkx_fused_net_wait(const mkx_fused_net_desc *d, uint32_t word, int where, cudaStream_t st) {
  if (!desc_ok(d) || word < 1 || word >= d->words) return MKX_GEMM_EINVAL;
  net_wait<<<1, 32, 0, st>>>(*d, word, where);
  return launched();
}

namespace {

/* 16-byte vectors where every row of every operand starts 16-byte
 * aligned (and out's 4-element groups likewise). */
bool sum_vectors(const mkx_fused_net_sum_desc *d, size_t out_size) {
  if (d->n % 4 || d->ld_part % 4 || d->ldc % 4 || (uintptr_t)d->out % (4 * out_size)) return false;
  if (d->out2 && (d->ldc2 % 4 || (uintptr_t)d->out2 % (4 * out_size))) return false;
  for (int q = 0; q < sum_sources(*d); ++q)
    if ((uintptr_t)d->part[q] % 16) return false;
  return true;
}

/* Named sources (nsrc > 0): each a part, a gate that exists, at most
 * MKX_FUSED_MAX; one peer to post to, not this rank. */
bool sum_sources_ok(const mkx_fused_net_sum_desc *d) {
  if (d->post_one < 0 || d->post_one > d->net.size || d->post_one - 1 == d->net.rank) return false;
  if (d->post_one && !is_peer(d->net, d->post_one - 1)) return false;
  if (d->nsrc < 0 || d->nsrc > MKX_FUSED_MAX) return false;
  for (int s = 0; s < d->nsrc; ++s) {
    if (!d->part[s] || d->src_rank[s] >= d->net.size || d->src_rank[s] == d->net.rank) return false;
    if (d->src_rank[s] < 0 && d->src_flag[s] && !d->flag_epoch) return false;
  }
  return true;
}

template <typename OutT>
void sum_launch(const mkx_fused_net_sum_desc *d, unsigned blocks, cudaStream_t st) {
  if (sum_vectors(d, sizeof(OutT)))
    net_sum<OutT, 4><<<blocks, 512, 0, st>>>(*d);
  else
    net_sum<OutT, 1><<<blocks, 512, 0, st>>>(*d);
}

bool sum_posts_ok(const mkx_fused_net_sum_desc *d) {
  if (!d->post_w0) return true;
  const int64_t chunks = (d->rows + d->chunk_rows - 1) / d->chunk_rows;
  return d->chunk_done && chunks <= MKX_FUSED_NET_MAXCH && d->post_row_bytes > 0 &&
         d->post_w0 + (uint64_t)chunks <= d->net.words;
}

}  // namespace

extern "C" int mkx_fused_net_sum(const mkx_fused_net_sum_desc *d, cudaStream_t st) {
  if (!d || !desc_ok(&d->net) || d->rows < 0 || d->n < 1 || d->chunk_rows < 8 || d->chunk_rows % 8 || !d->out ||
      d->ldc < d->n || d->ld_part < d->n || !sum_posts_ok(d) || (d->out2 && d->ldc2 < d->n) || !sum_sources_ok(d))
    return MKX_GEMM_EINVAL;
  if (d->rows == 0) return 0;
  if (d->w0 + (uint64_t)((d->rows - 1) / d->chunk_rows) >= d->net.words) return MKX_GEMM_EINVAL;
  for (int q = 0; !d->nsrc && q < d->net.size; ++q)
    if (!d->part[q]) return MKX_GEMM_EINVAL;
  int64_t blocks = (d->rows + 7) / 8;
  if (d->max_blocks > 0 && blocks > d->max_blocks) blocks = d->max_blocks;
  switch (d->c_type) {
    case MKX_GEMM_BF16:
      sum_launch<__nv_bfloat16>(d, (unsigned)blocks, st);
      break;
    case MKX_GEMM_FP16:
      sum_launch<__half>(d, (unsigned)blocks, st);
      break;
    case MKX_GEMM_FP32:
      sum_launch<float>(d, (unsigned)blocks, st);
      break;
    default:
      return MKX_GEMM_EINVAL;
  }
  return launched();
}

extern "C" int mkx_fused_net_take(const mkx_fused_net_take_desc *d, cudaStream_t st) {
  if (!d || !desc_ok(&d->net) || !d->src || !d->dst || d->row_bytes < 1 || d->ld_src < d->row_bytes ||
      d->ld_dst < d->row_bytes || d->chunk_rows < 1 || d->bnd[0] != 0)
    return MKX_GEMM_EINVAL;
  int64_t rows = 0;
  for (int q = 0; q < d->net.size; ++q) {
    if (d->bnd[q + 1] < d->bnd[q]) return MKX_GEMM_EINVAL;
    const int64_t n = d->bnd[q + 1] - d->bnd[q];
    if (is_peer(d->net, q) && n > 0 && d->w0 + (uint64_t)((n - 1) / d->chunk_rows) >= d->net.words)
      return MKX_GEMM_EINVAL;
    if (is_peer(d->net, q)) rows += (n + 7) / 8;
  }
  if (rows == 0) return 0;
  int64_t blocks = rows;
  if (d->max_blocks > 0 && blocks > d->max_blocks) blocks = d->max_blocks;
  const bool v16 = d->row_bytes % 16 == 0 && d->ld_src % 16 == 0 && d->ld_dst % 16 == 0 &&
                   (uintptr_t)d->src % 16 == 0 && (uintptr_t)d->dst % 16 == 0;
  if (v16)
    net_take<uint4><<<(unsigned)blocks, 512, 0, st>>>(*d);
  else
    net_take<unsigned char><<<(unsigned)blocks, 512, 0, st>>>(*d);
  return launched();
}

extern "C" int mkx_fused_net_fwd(const mkx_fused_net_fwd_desc *d, cudaStream_t st) {
  if (!d || !desc_ok(&d->net) || !d->src || !d->flag_epoch || !d->count || !d->net.fwd_done || d->ndst < 1 ||
      d->ndst > MKX_FUSED_MAX)
    return MKX_GEMM_EINVAL;
  bool v16 = (uintptr_t)d->src % 16 == 0;
  for (int i = 0; i < d->ndst; ++i) {
    if (!d->dst[i] || !d->flags[i]) return MKX_GEMM_EINVAL;
    v16 = v16 && (uintptr_t)d->dst[i] % 16 == 0;
  }
  int64_t units = 0;
  if (d->kind == MKX_FUSED_FWD_KV) {
    if (d->kv_chunk < 1 || d->kv_word < 1 || d->kv_word >= d->net.words) return MKX_GEMM_EINVAL;
    v16 = v16 && d->kv_chunk % 16 == 0;
    for (int q = 0; q < d->net.size; ++q) units += is_peer(d->net, q);
  } else if (d->kind == MKX_FUSED_FWD_ROWS) {
    if (d->net.size > MKX_FUSED_MAX || d->tiles_m < 1 || d->net.bnd[d->net.size] > d->tiles_m * 128)
      return MKX_GEMM_EINVAL;
    v16 = v16 && d->net.row_bytes % 16 == 0;
    for (int q = 0; q < d->net.size; ++q) {
      const int64_t b0 = d->net.bnd[q], b1 = d->net.bnd[q + 1];
      if (is_peer(d->net, q) && b1 > b0) units += ((b1 - 1) / 128 - b0 / 128) / d->net.chunk_tiles + 1;
    }
  } else {
    return MKX_GEMM_EINVAL;
  }
  units *= d->ndst;
  if (units == 0) units = 1; /* one CTA still tells mkx_fused_net_end */
  const int64_t blocks = d->max_blocks > 0 && units > d->max_blocks ? d->max_blocks : units;
  if (v16)
    net_fwd<uint4><<<(unsigned)blocks, 512, 0, st>>>(*d);
  else
    net_fwd<unsigned char><<<(unsigned)blocks, 512, 0, st>>>(*d);
  return launched();
}

extern "C" int mkx_fused_net_load(void) {
  cudaFuncAttributes a;
  const void *const k[] = {(const void *)net_begin,
                           (const void *)net_end,
                           (const void *)net_post,
                           (const void *)net_wait,
                           (const void *)net_sum<__nv_bfloat16, 4>,
                           (const void *)net_sum<__half, 4>,
                           (const void *)net_sum<float, 4>,
                           (const void *)net_sum<__nv_bfloat16, 1>,
                           (const void *)net_sum<__half, 1>,
                           (const void *)net_sum<float, 1>,
                           (const void *)net_take<uint4>,
                           (const void *)net_take<unsigned char>,
                           (const void *)net_fwd<uint4>,
                           (const void *)net_fwd<unsigned char>};
  for (const void *f : k) {
    const cudaError_t e = cudaFuncGetAttributes(&a, f);
    if (e != cudaSuccess) return (int)e;
  }
  return 0;
}
