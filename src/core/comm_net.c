/* The communicator's network endpoint and the inter-node exchange of the
 * host path; see comm_net.h.  Data are staged through two registered
 * host regions: the send region holds this rank's outgoing chunks, the
 * receive region has one slot per source rank; the proxy thread posts
 * each chunk as a write with a signal, and the receiver waits on the
 * signal of each source. */
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include "core/comm.h"
#include "boot/oob_mpi.h"
#include "core/comm_net.h"
#include "core/error.h"
#include "core/log.h"
#include "proxy/proxy.h"

#define RING_ENTRIES 256

typedef struct mkx_comm_net {
  mkx_net *net;
  mkx_proxy *proxy;
  char *send, *recv;      /* staging regions */
  size_t send_cap, slot;  /* send capacity; receive bytes per source */
  mkx_net_mr smr, rmr;
  mkx_net_rkey *skeys, *rkeys;
  uint64_t *sent_to;      /* messages sent to each rank so far */
  uint64_t *got_from;     /* messages received from each rank so far */
} mkx_comm_net;

static int one_host(MKX_Comm c) {
  for (int q = 0; q < c->size; q++)
    if (c->place.host_of_rank[q] != 0) return 0;
  return 1;
}

static int start_proxy(MKX_Comm c, mkx_comm_net *cn) {
  MKX_TRY(mkx_proxy_create(cn->net, RING_ENTRIES, NULL, c->opt.timeout_ms,
                           &cn->proxy));
  return mkx_proxy_start(cn->proxy,
                         c->has_gpu_map ? c->gpu_map.cpus : NULL);
}

int mkx_comm_net_open(MKX_Comm c) {
  if (c->place.num_nodes < 2) return MKX_SUCCESS;
  /* Inside a node the host path talks MPI (standing for NVLink). */
  MKX_TRY(mkx_mpi_check(MPI_Comm_split(c->mpi, c->place.node,
                                       c->place.local_rank, &c->node_mpi),
                        "MPI_Comm_split by node"));
  mkx_comm_net *cn = calloc(1, sizeof *cn);
  mkx_options opt = c->opt;
  if (!cn) return mkx_error(MKX_ERR_NOMEM, "network endpoint");
  c->net = cn;
  cn->skeys = calloc((size_t)c->size, sizeof *cn->skeys);
  cn->rkeys = calloc((size_t)c->size, sizeof *cn->rkeys);
  cn->sent_to = calloc((size_t)c->size, sizeof *cn->sent_to);
  cn->got_from = calloc((size_t)c->size, sizeof *cn->got_from);
  if (!cn->skeys || !cn->rkeys || !cn->sent_to || !cn->got_from)
    return mkx_error(MKX_ERR_NOMEM, "network endpoint tables");
  /* Virtual nodes of one host talk over loopback unless told otherwise. */
  if (opt.net_tcp_bind[0] == '\0' && one_host(c))
    strcpy(opt.net_tcp_bind, "lo");
  mkx_net_params p = {.rank = c->rank, .size = c->size,
                      .num_signals = (uint32_t)c->size,
                      .timeout_ms = c->opt.timeout_ms, .opt = &opt,
                      .device = c->has_gpu_map && c->gpu_map.num_nics
                                    ? c->gpu_map.nic_names[0]
                                    : NULL};
  MKX_TRY(mkx_net_open(&p, &cn->net));
  MKX_TRY(mkx_net_connect(cn->net, &c->oob));
  MKX_TRY(start_proxy(c, cn));
  mkx_log(MKX_LOG_INFO, "network: %s between %d nodes",
          mkx_net_name(cn->net), c->place.num_nodes);
  return MKX_SUCCESS;
}

static void release_regions(mkx_comm_net *cn) {
  if (cn->smr.base) mkx_net_dereg(cn->net, &cn->smr);
  if (cn->rmr.base) mkx_net_dereg(cn->net, &cn->rmr);
  memset(&cn->smr, 0, sizeof cn->smr);
  memset(&cn->rmr, 0, sizeof cn->rmr);
  free(cn->send);
  free(cn->recv);
  cn->send = cn->recv = NULL;
  cn->send_cap = cn->slot = 0;
}

void mkx_comm_net_close(MKX_Comm c) {
  mkx_comm_net *cn = c->net;
  if (!cn) return;
  if (!c->broken) c->oob.barrier(c->oob.ctx, c->opt.timeout_ms);
  mkx_proxy_destroy(cn->proxy);
  if (cn->net) {
    release_regions(cn);
    mkx_net_close(cn->net);
  }
  free(cn->skeys), free(cn->rkeys), free(cn->sent_to), free(cn->got_from);
  free(cn);
  c->net = NULL;
}

/* Grow the staging regions to at least (send, slot) bytes, the same
 * decision on every rank: the sizes are agreed (allgathered maxima).  The
 * proxy's regions are replaced while it is idle. */
static int reserve(MKX_Comm c, mkx_comm_net *cn, size_t send, size_t slot) {
  uint64_t mine[2] = {send, slot}, *all = malloc(sizeof mine * (size_t)c->size);
  if (!all) return mkx_error(MKX_ERR_NOMEM, "staging sizes");
  int rc = c->oob.allgather(c->oob.ctx, mine, all, sizeof mine,
                            c->opt.timeout_ms);
  for (int q = 0; rc == MKX_SUCCESS && q < c->size; q++) {
    if (all[2 * q] > send) send = all[2 * q];
    if (all[2 * q + 1] > slot) slot = all[2 * q + 1];
  }
  free(all);
  MKX_TRY(rc);
  if (send <= cn->send_cap && slot <= cn->slot) return MKX_SUCCESS;
  send = send > cn->send_cap ? send * 2 : cn->send_cap;
  slot = slot > cn->slot ? slot * 2 : cn->slot;
  release_regions(cn);
  cn->send = malloc(send);
  cn->recv = malloc(slot * (size_t)c->size);
  if (!cn->send || !cn->recv)
    return mkx_error(MKX_ERR_NOMEM, "staging regions of %zu bytes",
                     send + slot * (size_t)c->size);
  cn->send_cap = send;
  cn->slot = slot;
  mkx_net_reg_args sa = {cn->send, send, MKX_NET_MEM_HOST, -1, 0};
  mkx_net_reg_args ra = {cn->recv, slot * (size_t)c->size, MKX_NET_MEM_HOST,
                         -1, 0};
  MKX_TRY(mkx_net_reg(cn->net, &sa, &cn->smr));
  MKX_TRY(mkx_net_reg(cn->net, &ra, &cn->rmr));
  MKX_TRY(mkx_net_exchange_keys(cn->net, &c->oob, &cn->smr, cn->skeys));
  MKX_TRY(mkx_net_exchange_keys(cn->net, &c->oob, &cn->rmr, cn->rkeys));
  MKX_TRY(mkx_proxy_set_region(cn->proxy, 0, &cn->smr, cn->skeys));
  return mkx_proxy_set_region(cn->proxy, 1, &cn->rmr, cn->rkeys);
}

/* The proxy thread alone drives the endpoint; this thread only watches
 * the signal word (and the proxy's error word). */
static int wait_signal(MKX_Comm c, mkx_comm_net *cn, int q, uint64_t value) {
  mkx_proxy_ring *ring = mkx_proxy_ring_of(cn->proxy);
  int64_t deadline = mkx_net_now_ms() + c->opt.timeout_ms;
  while (mkx_net_signal(cn->net, (uint32_t)q) < value) {
    int err = atomic_load(&ring->error);
    if (err != MKX_SUCCESS)
      return mkx_error(err, "waiting for rank %d: the proxy stopped", q);
    if (mkx_net_now_ms() > deadline)
      return mkx_error(MKX_ERR_TIMEOUT, "no data from rank %d after %lld ms "
                       "(option timeout_ms)", q,
                       (long long)c->opt.timeout_ms);
    sched_yield();
  }
  return MKX_SUCCESS;
}

static int post_all(MKX_Comm c, mkx_comm_net *cn, const void *const *send,
                    const size_t *len, uint64_t *last) {
  mkx_proxy_ring *ring = mkx_proxy_ring_of(cn->proxy);
  size_t off = 0;
  *last = 0;
  for (int i = 1; i < c->size; i++) {
    int q = (c->rank + i) % c->size; /* staggered: not all to rank 0 */
    if (len[q] == 0) continue;
    memcpy(cn->send + off, send[q], len[q]);
    mkx_proxy_cmd cmd = {.op = MKX_PROXY_OP_WRITE, .peer = q, .src = 0,
                         .dst = 1, .src_off = off,
                         .dst_off = (uint64_t)c->rank * cn->slot,
                         .len = len[q], .slot = (uint32_t)c->rank,
                         .value = ++cn->sent_to[q]};
    MKX_TRY(mkx_proxy_post(ring, &cmd, last, c->opt.timeout_ms));
    off += len[q];
  }
  return MKX_SUCCESS;
}

int mkx_comm_net_exchange(MKX_Comm c, const void *const *send,
                          const size_t *send_len, void *const *recv,
                          const size_t *recv_len) {
  mkx_comm_net *cn = c->net;
  size_t total = 0, slot = 0;
  uint64_t last = 0;
  if (!cn) return mkx_error(MKX_ERR_INTERNAL, "no network endpoint");
  for (int q = 0; q < c->size; q++) {
    total += send_len[q];
    if (recv_len[q] > slot) slot = recv_len[q];
    if (send_len[q] > slot) slot = send_len[q]; /* our slot at the peer */
  }
  MKX_TRY(reserve(c, cn, total, slot));
  MKX_TRY(post_all(c, cn, send, send_len, &last));
  for (int q = 0; q < c->size; q++) {
    if (recv_len[q] == 0) continue;
    MKX_TRY(wait_signal(c, cn, q, ++cn->got_from[q]));
    memcpy(recv[q], cn->recv + (size_t)q * cn->slot, recv_len[q]);
  }
  /* Our sends must be done before the staging region is reused, and the
   * peers must have copied out before their slots are written again. */
  if (last) MKX_TRY(mkx_proxy_wait(mkx_proxy_ring_of(cn->proxy), last,
                                   c->opt.timeout_ms));
  return c->oob.barrier(c->oob.ctx, c->opt.timeout_ms);
}

uint64_t mkx_comm_net_bytes_sent(MKX_Comm c) {
  mkx_comm_net *cn = c->net;
  uint64_t sum = 0;
  for (int q = 0; cn && q < c->size; q++)
    sum += mkx_net_bytes_sent(cn->net, q);
  return sum;
}
