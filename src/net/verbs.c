/* The verbs provider: reliable-connected QPs on libibverbs (InfiniBand,
 * RoCE, ConnectX).
 *
 * open:    first RC-capable device (or the one named), PD, one CQ, one RC
 *          QP per peer taken to INIT, the signal words registered for
 *          remote write.  The address blob carries LID, GID, MTU, the
 *          signal words' address and rkey, a start PSN and, for every
 *          rank, the QP number this rank uses towards it.
 * connect: each QP goes INIT -> RTR (the peer's QPN, LID/GID, PSN) -> RTS.
 * write:   two work requests posted as one chain on the peer's QP: the
 *          RDMA write of the data (unsignaled), then an 8-byte inline RDMA
 *          write of the value into the peer's signal word (signaled).  An
 *          RC QP executes writes in order, so the signal lands after the
 *          data; its completion also retires the data write, so the source
 *          buffer is reusable once it is reported.
 * poll:    CQ entries; completions of one QP arrive in posting order, so a
 *          per-peer FIFO maps them back to cookies.  An error completion
 *          becomes MKX_ERR_NET naming the peer and the status.
 * Signals need no receiver work here: the NIC writes the word.
 *
 * All calls that verbs.h inlines go through net/ibv_shim.c, so
 * tests/unit/test_net_verbs.c can run this file against a fake device. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/error.h"
#include "core/log.h"
#include "net/net.h"

#if HAVE_VERBS
#include <errno.h>
#include "net/ibv_common.h"
#include "net/ibv_shim.h"
#include "net/verbs_blob.h"

#define SQ_DEPTH 256 /* per QP; a write takes two entries */
#define MAX_INFLIGHT (SQ_DEPTH / 2)

typedef struct verbs_peer {
  struct ibv_qp *qp;
  uint64_t sig_addr; /* the peer's signal words */
  uint32_t sig_rkey;
  uint64_t ring[MAX_INFLIGHT]; /* cookies in posting order */
  unsigned head, count;
} verbs_peer;

typedef struct verbs_impl {
  struct ibv_context *ctx;
  struct ibv_pd *pd;
  struct ibv_cq *cq;
  struct ibv_mr *sig_mr;
  struct ibv_port_attr port_attr;
  union ibv_gid gid;
  uint8_t port;
  int gid_index;
  verbs_peer *peers;
  verbs_blob *blob;
  size_t blob_len;
  mkx_net_fifo done;
} verbs_impl;

static verbs_impl *impl_of(mkx_net *n) { return n->impl; }

/* RC needs an InfiniBand-transport channel adapter (IB or RoCE); EFA and
 * iWARP devices are left to other providers. */
static int is_rc_device(struct ibv_device *d) {
  return d->node_type == IBV_NODE_CA && d->transport_type == IBV_TRANSPORT_IB;
}

static struct ibv_device *pick(struct ibv_device **list, int num,
                               const char *want) {
  for (int i = 0; i < num; i++)
    if (is_rc_device(list[i]) &&
        (!want || strcmp(ibv_get_device_name(list[i]), want) == 0))
      return list[i];
  return NULL;
}

static int verbs_probe(const mkx_net_params *p) {
  int num = 0;
  errno = 0;
  struct ibv_device **list = ibv_get_device_list(&num);
  if (!list)
    return mkx_error(MKX_ERR_NET, "verbs: no RDMA devices (%s)",
                     errno ? strerror(errno) : "empty list");
  struct ibv_device *d = pick(list, num, p->device);
  ibv_free_device_list(list);
  if (!d)
    return mkx_error(MKX_ERR_NET, "verbs: no RC-capable device%s%s",
                     p->device ? " named " : "", p->device ? p->device : "");
  return MKX_SUCCESS;
}

static int open_device(verbs_impl *v, const mkx_net_params *p) {
  int num = 0;
  struct ibv_device **list = ibv_get_device_list(&num);
  if (!list)
    return mkx_error(MKX_ERR_NET, "verbs: ibv_get_device_list: %s",
                     strerror(errno));
  struct ibv_device *d = pick(list, num, p->device);
  if (d) v->ctx = ibv_open_device(d);
  /* An open context keeps its device; the list can go now. */
  ibv_free_device_list(list);
  if (!d) return mkx_error(MKX_ERR_NET, "verbs: no RC-capable device");
  if (!v->ctx) return mkx_error(MKX_ERR_NET, "verbs: ibv_open_device failed");
  return MKX_SUCCESS;
}

static int open_port(verbs_impl *v, const mkx_net_params *p) {
  v->port = 1;
  v->gid_index = p->opt->net_ib_gid_index;
  if (mkx_ibv_query_port(v->ctx, v->port, &v->port_attr) != 0)
    return mkx_error(MKX_ERR_NET, "verbs: ibv_query_port: %s", strerror(errno));
  if (v->port_attr.state != IBV_PORT_ACTIVE)
    return mkx_error(MKX_ERR_NET, "verbs: port %u of %s is not active", v->port,
                     ibv_get_device_name(v->ctx->device));
  /* IB without routing needs no GID; RoCE always does. */
  if (ibv_query_gid(v->ctx, v->port, v->gid_index, &v->gid) != 0)
    memset(&v->gid, 0, sizeof v->gid);
  return MKX_SUCCESS;
}

static int create_qp(verbs_impl *v, struct ibv_qp **out) {
  struct ibv_qp_init_attr ia = {.send_cq = v->cq,
                                .recv_cq = v->cq,
                                .qp_type = IBV_QPT_RC,
                                .cap = {.max_send_wr = SQ_DEPTH,
                                        .max_recv_wr = 1,
                                        .max_send_sge = 1,
                                        .max_recv_sge = 1,
                                        .max_inline_data = 64}};
  struct ibv_qp *qp = ibv_create_qp(v->pd, &ia);
  if (!qp)
    return mkx_error(MKX_ERR_NET, "verbs: ibv_create_qp: %s", strerror(errno));
  *out = qp;
  struct ibv_qp_attr a = {
      .qp_state = IBV_QPS_INIT,
      .pkey_index = 0,
      .port_num = v->port,
      .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE};
  if (ibv_modify_qp(qp, &a,
                    IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                        IBV_QP_ACCESS_FLAGS) != 0)
    return mkx_error(MKX_ERR_NET, "verbs: QP to INIT: %s", strerror(errno));
  return MKX_SUCCESS;
}

static int register_signals(mkx_net *n, verbs_impl *v) {
  _Atomic uint64_t *mem = NULL;
  MKX_TRY(mkx_net_signals_alloc(n->num_signals, &mem));
  n->signals = mem;
  v->sig_mr =
      mkx_ibv_reg_mr(v->pd, (void *)mem, n->num_signals * sizeof(uint64_t),
                     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (!v->sig_mr)
    return mkx_error(MKX_ERR_NET, "verbs: registering signal words: %s",
                     strerror(errno));
  return MKX_SUCCESS;
}

static int fill_blob(mkx_net *n, verbs_impl *v) {
  /* Padded to the struct's alignment: the allgather packs the blobs at
   * multiples of this length, and with an odd rank count an unpadded one
   * leaves every other peer's blob (with its 64-bit sig_addr) misaligned. */
  size_t al = _Alignof(verbs_blob);
  v->blob_len = sizeof *v->blob + (size_t)n->size * sizeof(uint32_t);
  v->blob_len = (v->blob_len + al - 1) / al * al;
  v->blob = calloc(1, v->blob_len);
  if (!v->blob) return mkx_error(MKX_ERR_NOMEM, "verbs: address blob");
  v->blob->magic = BLOB_MAGIC;
  v->blob->lid = v->port_attr.lid;
  v->blob->port = v->port;
  v->blob->mtu = (uint8_t)v->port_attr.active_mtu;
  memcpy(v->blob->gid, v->gid.raw, 16);
  v->blob->sig_addr = (uint64_t)(uintptr_t)n->signals;
  v->blob->sig_rkey = v->sig_mr->rkey;
  v->blob->psn = (uint32_t)(n->rank * 7919u) & 0xffffff;
  for (int r = 0; r < n->size; r++)
    v->blob->qpn[r] = v->peers[r].qp ? v->peers[r].qp->qp_num : 0;
  return MKX_SUCCESS;
}

static void verbs_close(mkx_net *n);

static int open_all(mkx_net *n, verbs_impl *v, const mkx_net_params *p) {
  MKX_TRY(open_device(v, p));
  MKX_TRY(open_port(v, p));
  if (!(v->pd = ibv_alloc_pd(v->ctx)))
    return mkx_error(MKX_ERR_NET, "verbs: ibv_alloc_pd failed");
  int cqe = SQ_DEPTH * (n->size > 1 ? n->size - 1 : 1);
  if (!(v->cq = ibv_create_cq(v->ctx, cqe, NULL, NULL, 0)))
    return mkx_error(MKX_ERR_NET, "verbs: ibv_create_cq(%d): %s", cqe,
                     strerror(errno));
  for (int r = 0; r < n->size; r++)
    if (r != n->rank) MKX_TRY(create_qp(v, &v->peers[r].qp));
  MKX_TRY(register_signals(n, v));
  return fill_blob(n, v);
}

static int verbs_open(mkx_net *n, const mkx_net_params *p) {
  verbs_impl *v = calloc(1, sizeof *v);
  if (!v) return mkx_error(MKX_ERR_NOMEM, "verbs: endpoint");
  n->impl = v;
  v->peers = calloc((size_t)p->size, sizeof *v->peers);
  int rc =
      v->peers ? open_all(n, v, p) : mkx_error(MKX_ERR_NOMEM, "verbs: peers");
  if (rc != MKX_SUCCESS) verbs_close(n);
  return rc;
}

static int verbs_address(mkx_net *n, const void **blob, size_t *len) {
  *blob = impl_of(n)->blob;
  *len = impl_of(n)->blob_len;
  return MKX_SUCCESS;
}

static int to_rtr(verbs_impl *v, verbs_peer *pp, const verbs_blob *b, int me,
                  int peer) {
  struct ibv_qp_attr a = {
      .qp_state = IBV_QPS_RTR,
      .path_mtu = (enum ibv_mtu)b->mtu,
      .dest_qp_num = b->qpn[me],
      .rq_psn = b->psn,
      .max_dest_rd_atomic = 1,
      .min_rnr_timer = 12,
      .ah_attr = {.dlid = b->lid, .sl = 0, .port_num = v->port}};
  if (a.path_mtu > v->port_attr.active_mtu)
    a.path_mtu = v->port_attr.active_mtu; /* the slower end decides */
  static const uint8_t zero[16];
  /* Routed (RoCE, or IB with a GID): a global route header is required. */
  if (memcmp(b->gid, zero, 16) != 0 ||
      v->port_attr.link_layer == IBV_LINK_LAYER_ETHERNET) {
    a.ah_attr.is_global = 1;
    memcpy(a.ah_attr.grh.dgid.raw, b->gid, 16);
    a.ah_attr.grh.sgid_index = (uint8_t)v->gid_index;
    a.ah_attr.grh.hop_limit = 64;
  }
  if (ibv_modify_qp(pp->qp, &a,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                        IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) != 0)
    return mkx_error(MKX_ERR_NET, "verbs: QP to rank %d to RTR: %s", peer,
                     strerror(errno));
  return MKX_SUCCESS;
}

static int to_rts(verbs_peer *pp, uint32_t my_psn, int peer) {
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTS,
                          .timeout = 14,
                          .retry_cnt = 7,
                          .rnr_retry = 7,
                          .sq_psn = my_psn,
                          .max_rd_atomic = 1};
  int mask = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
             IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;
  if (ibv_modify_qp(pp->qp, &a, mask) != 0)
    return mkx_error(MKX_ERR_NET, "verbs: QP to rank %d to RTS: %s", peer,
                     strerror(errno));
  return MKX_SUCCESS;
}

static int verbs_connect(mkx_net *n, const void *blobs, size_t len) {
  verbs_impl *v = impl_of(n);
  for (int r = 0; r < n->size; r++) {
    const verbs_blob *b = (const verbs_blob *)((const char *)blobs + len * r);
    if (b->magic != BLOB_MAGIC || len != v->blob_len)
      return mkx_error(MKX_ERR_NET, "verbs: rank %d's address is garbled", r);
    if (r == n->rank) continue;
    v->peers[r].sig_addr = b->sig_addr;
    v->peers[r].sig_rkey = b->sig_rkey;
    MKX_TRY(to_rtr(v, &v->peers[r], b, n->rank, r));
    MKX_TRY(to_rts(&v->peers[r], v->blob->psn, r));
  }
  return MKX_SUCCESS;
}

static int verbs_reg(mkx_net *n, const mkx_net_reg_args *a, mkx_net_mr *mr) {
  return mkx_ibv_register("verbs", impl_of(n)->pd, a, mr);
}

static int verbs_dereg(mkx_net *n, mkx_net_mr *mr) {
  (void)n;
  return mkx_ibv_deregister("verbs", mr);
}

static int wc_error(mkx_net *n, const struct ibv_wc *wc) {
  int peer = (int)wc->wr_id;
  return mkx_error(MKX_ERR_NET,
                   "verbs: rank %d: write to rank %d failed: %s "
                   "(status %d, vendor error %#x)",
                   n->rank, peer, ibv_wc_status_str(wc->status),
                   (int)wc->status, wc->vendor_err);
}

/* Move CQ entries into the completion FIFO. */
static int drain_cq(mkx_net *n) {
  verbs_impl *v = impl_of(n);
  struct ibv_wc wc[16];
  for (;;) {
    int got = mkx_ibv_poll_cq(v->cq, 16, wc);
    if (got < 0) return mkx_error(MKX_ERR_NET, "verbs: ibv_poll_cq failed");
    for (int i = 0; i < got; i++) {
      if (wc[i].status != IBV_WC_SUCCESS) return wc_error(n, &wc[i]);
      int peer = (int)wc[i].wr_id;
      if (peer < 0 || peer >= n->size || !v->peers[peer].count)
        return mkx_error(MKX_ERR_INTERNAL, "verbs: stray completion %llu",
                         (unsigned long long)wc[i].wr_id);
      verbs_peer *pp = &v->peers[peer];
      MKX_TRY(mkx_net_fifo_push(&v->done, pp->ring[pp->head], peer));
      pp->head = (pp->head + 1) % MAX_INFLIGHT;
      pp->count--;
    }
    if (got < 16) return MKX_SUCCESS;
  }
}

/* A full send queue drains within the timeout, or the peer is stuck. */
static int wait_for_room(mkx_net *n, int peer) {
  verbs_peer *pp = &impl_of(n)->peers[peer];
  int64_t deadline = mkx_net_now_ms() + n->timeout_ms;
  while (pp->count == MAX_INFLIGHT) {
    MKX_TRY(drain_cq(n));
    if (pp->count == MAX_INFLIGHT && mkx_net_now_ms() > deadline)
      return mkx_error(MKX_ERR_TIMEOUT,
                       "verbs: writes to rank %d did not "
                       "complete in %lld ms",
                       peer, (long long)n->timeout_ms);
  }
  return MKX_SUCCESS;
}

static int verbs_write_signal(mkx_net *n, int peer, const mkx_net_mr *src,
                              size_t src_off, const mkx_net_rkey *dst,
                              size_t dst_off, size_t len, uint32_t slot,
                              uint64_t value, uint64_t cookie) {
  verbs_impl *v = impl_of(n);
  verbs_peer *pp = &v->peers[peer];
  if (len > v->port_attr.max_msg_sz)
    return mkx_error(MKX_ERR_INVALID_ARG,
                     "verbs: write of %zu bytes exceeds "
                     "the port's message size %u",
                     len, v->port_attr.max_msg_sz);
  MKX_TRY(wait_for_room(n, peer));
  uint64_t word = value; /* inline: the NIC copies it at post time */
  struct ibv_sge dsge = {(uint64_t)(uintptr_t)src->base + src_off,
                         (uint32_t)len, src->lkey};
  struct ibv_sge ssge = {(uint64_t)(uintptr_t)&word, sizeof word, 0};
  struct ibv_send_wr sig = {
      .wr_id = (uint64_t)peer,
      .sg_list = &ssge,
      .num_sge = 1,
      .opcode = IBV_WR_RDMA_WRITE,
      .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE,
      .wr.rdma = {pp->sig_addr + (uint64_t)slot * sizeof word, pp->sig_rkey}};
  struct ibv_send_wr data = {.wr_id = (uint64_t)peer,
                             .next = &sig,
                             .sg_list = &dsge,
                             .num_sge = 1,
                             .opcode = IBV_WR_RDMA_WRITE,
                             .send_flags = 0,
                             .wr.rdma = {dst->addr + dst_off, dst->rkey}};
  struct ibv_send_wr *bad = NULL;
  /* One chain, one QP: the data write precedes its signal on the wire. */
  int rc = mkx_ibv_post_send(pp->qp, len ? &data : &sig, &bad);
  if (rc != 0)
    return mkx_error(MKX_ERR_NET, "verbs: ibv_post_send to rank %d: %s", peer,
                     strerror(rc));
  pp->ring[(pp->head + pp->count++) % MAX_INFLIGHT] = cookie;
  return MKX_SUCCESS;
}

static int verbs_poll(mkx_net *n, mkx_net_completion *done, int max,
                      int *ndone) {
  verbs_impl *v = impl_of(n);
  MKX_TRY(drain_cq(n));
  *ndone = mkx_net_fifo_pop(&v->done, done, max);
  return MKX_SUCCESS;
}

/* Tear down in reverse order; every handle may be missing after a failed
 * open.  Failures are logged: nothing more can be done at close. */
static void verbs_close(mkx_net *n) {
  verbs_impl *v = impl_of(n);
  if (!v) return;
  for (int r = 0; v->peers && r < n->size; r++)
    mkx_ibv_destroy_qp("verbs", v->peers[r].qp);
  if (v->sig_mr && ibv_dereg_mr(v->sig_mr) != 0)
    mkx_log(MKX_LOG_WARN, "verbs: ibv_dereg_mr failed");
  mkx_ibv_close_base("verbs", v->cq, v->pd, v->ctx);
  mkx_net_fifo_free(&v->done);
  free(v->peers);
  free(v->blob);
  free((void *)n->signals);
  free(v);
  n->signals = NULL;
  n->impl = NULL;
}

#else /* !HAVE_VERBS: the provider exists and says why it cannot run. */

static int verbs_probe(const mkx_net_params *p) {
  (void)p;
  return mkx_error(MKX_ERR_UNSUPPORTED,
                   "verbs: MKX was configured without "
                   "libibverbs (install libibverbs-dev, configure "
                   "--with-verbs)");
}
static int verbs_open(mkx_net *n, const mkx_net_params *p) {
  (void)n;
  return verbs_probe(p);
}
#define verbs_address NULL
#define verbs_connect NULL
#define verbs_reg NULL
#define verbs_dereg NULL
#define verbs_write_signal NULL
#define verbs_poll NULL
static void verbs_close(mkx_net *n) { (void)n; }
#endif

static const mkx_option_desc verbs_options[] = {
    {"net_ib_gid_index", MKX_OPT_INT, offsetof(mkx_options, net_ib_gid_index),
     "0", "0:255",
     "GID table index the verbs transport uses for routed (RoCE or global "
     "InfiniBand) addresses; RoCE v2 often needs the index 'show_gids' "
     "lists for the IPv4 address."},
    {NULL, 0, 0, NULL, NULL, NULL},
};

const mkx_net_provider mkx_net_verbs_provider = {
    .name = "verbs",
    .caps = MKX_NET_CAP_DEVICE_MEM | MKX_NET_CAP_ORDERED, /* RC */
    .signal_bits = 64,
    .options = verbs_options,
    .probe = verbs_probe,
    .open = verbs_open,
    .address = verbs_address,
    .connect = verbs_connect,
    .reg = verbs_reg,
    .dereg = verbs_dereg,
    .write_signal = verbs_write_signal,
    .poll = verbs_poll,
    .close = verbs_close,
};
