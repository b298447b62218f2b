/*
 * AllGather+GEMM over nodes of one rank each, driven by the GPU (tp.h,
 * mkx_tp_net_desc): the kernels that hand this rank's rows of A to the
 * network proxy and wait until the proxy is done with them.  The gated
 * GEMM between them (ag_gemm.cu) waits for the peers' chunks on their
 * signal words, so a tile starts as soon as its rows have landed.
 *
 * A post that finds the ring full waits for the proxy (bounded); a chunk
 * is posted only after every peer has arrived at this call, so nothing is
 * written into a gathered A that a peer's previous GEMM may still read.
 */
#include "gemm/gemm_engine.h"
#include "proxy/proxy_dev.cuh"
#include "tp/flags.cuh"
#include "tp/tp.h"

namespace {

using mkx::tp::give_up;
using mkx::tp::told_word;

/* A failed proxy wait or post: recorded in the call's error word as a
 * timeout at `where` naming the peer (the proxy's own record, in
 * d.proxy.status, holds the slot and values). */
__device__ void failed(const mkx_tp_net_desc &d, int peer, int where) {
  give_up(d.sync, MKX_TP_ERR_TIMEOUT, peer, -1, where, told_word(d.sync.rank, peer, where));
}

__global__ void net_begin(const mkx_tp_net_desc d) {
  if (threadIdx.x != 0) return;
  const uint64_t e = *(volatile uint64_t *)d.epoch + 1;
  *(volatile uint64_t *)d.epoch = e;
  uint64_t seq = 0;
  const uint32_t mine = d.slot0 + (uint32_t)d.rank * d.words;
  for (int q = 0; q < d.size; ++q)
    if (q != d.rank && mkx::proxy::post(d.proxy, q, d.region, d.region, 0, 0, 0, mine, e, &seq)) {
      failed(d, q, MKX_TP_AT_NET_SENT);
      *d.last_seq = seq;
      return;
    }
  for (int q = 0; q < d.size; ++q)
    if (q != d.rank && mkx::proxy::wait_signal(d.proxy, d.slot0 + (uint32_t)q * d.words, e)) {
      failed(d, q, MKX_TP_AT_NET_ARRIVE);
      *d.last_seq = seq;
      return;
    }
  const int64_t row0 = d.bnd[d.rank], row1 = d.bnd[d.rank + 1];
  /* peer by peer from the next rank on, so the ranks' first chunks do not
   * all go to rank 0 */
  for (int i = 1; i < d.size; ++i) {
    const int q = (d.rank + i) % d.size;
    uint32_t j = 0;
    for (int64_t g0 = row0, g1; g0 < row1; g0 = g1, ++j) {
      g1 = (g0 / 128 + d.chunk_tiles) * 128;
      if (g1 > row1) g1 = row1;
      const uint64_t off = (uint64_t)g0 * (uint64_t)d.row_bytes;
      if (mkx::proxy::post(d.proxy, q, d.region, d.region, off, off, (uint64_t)(g1 - g0) * (uint64_t)d.row_bytes,
                           mine + 1 + j, e, &seq)) {
        failed(d, q, MKX_TP_AT_NET_SENT);
        break;
      }
    }
  }
  *d.last_seq = seq;
}

__global__ void net_end(const mkx_tp_net_desc d) {
  if (threadIdx.x != 0) return;
  const uint64_t seq = *(volatile uint64_t *)d.last_seq;
  if (seq && mkx::proxy::wait_complete(d.proxy, seq)) failed(d, -1, MKX_TP_AT_NET_SENT);
}

bool desc_ok(const mkx_tp_net_desc *d) {
  if (!d || !d->proxy.ring || !d->proxy.signals || !d->epoch || !d->last_seq || d->size < 2 || d->size > MKX_TP_MAX ||
      d->rank < 0 || d->rank >= d->size || d->words < 2 || d->chunk_tiles < 1 || d->row_bytes <= 0 || d->bnd[0] != 0)
    return false;
  if ((uint64_t)d->slot0 + (uint64_t)d->size * d->words > d->proxy.num_signals) return false;
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

extern "C" int mkx_tp_net_begin(const mkx_tp_net_desc *d, cudaStream_t st) {
  if (!desc_ok(d)) return MKX_GEMM_EINVAL;
  net_begin<<<1, 32, 0, st>>>(*d);
  return launched();
}

extern "C" int mkx_tp_net_end(const mkx_tp_net_desc *d, cudaStream_t st) {
  if (!desc_ok(d)) return MKX_GEMM_EINVAL;
  net_end<<<1, 32, 0, st>>>(*d);
  return launched();
}
