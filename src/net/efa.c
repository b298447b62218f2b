/* The efa provider: AWS Elastic Fabric Adapter through efadv, one SRD QP
 * per endpoint and an address handle per peer.
 *
 * SRD delivers reliably but in no particular order, so a second write
 * cannot carry the signal the way verbs does.  Instead the data goes as
 * one RDMA write with immediate data; the immediate (32 bits) carries the
 * signal slot (high 16 bits) and the low 16 bits of the value.  The write
 * consumes a receive on the target, whose completion appears only once the
 * data is placed; the target's poll then sets the signal word (release
 * store), rebuilding the 64-bit value as the nearest one at or above the
 * word's current value (see net.h: values stay within 2^15 in flight).
 *
 * RDMA write is a device capability (efadv_query_device's device_caps).
 * Its bit, EFADV_DEVICE_ATTR_CAPS_RDMA_WRITE, appeared in rdma-core's
 * efadv.h later than the RDMA-read bit; configure checks for it
 * (HAVE_DECL_EFADV_DEVICE_ATTR_CAPS_RDMA_WRITE).  Built against an older
 * header, MKX cannot tell whether the device writes, so the provider
 * refuses with MKX_ERR_UNSUPPORTED and names the fix; on a device without
 * the capability it refuses the same way.  (A send/receive fallback through
 * bounce buffers is what older EFA devices would need; tcp covers them.)
 *
 * Posting goes through net/ibv_shim.c (ibv_wr_* are inline), so
 * tests/unit/test_net_efa.c runs this file against a fake device. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/error.h"
#include "core/log.h"
#include "net/net.h"

#if HAVE_EFA
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/efadv.h>
#include "net/ibv_common.h"
#include "net/ibv_shim.h"

/* The capability bit this build tests; 0: the header cannot say. */
#ifndef MKX_EFA_CAPS_RDMA_WRITE
#if defined(HAVE_DECL_EFADV_DEVICE_ATTR_CAPS_RDMA_WRITE) &&                    \
    HAVE_DECL_EFADV_DEVICE_ATTR_CAPS_RDMA_WRITE
#define MKX_EFA_CAPS_RDMA_WRITE EFADV_DEVICE_ATTR_CAPS_RDMA_WRITE
#else
#define MKX_EFA_CAPS_RDMA_WRITE 0
#endif
#endif

#define QP_DEPTH 256
#define BLOB_MAGIC 0x4d4b5845u /* "MKXE" */
#define QKEY 0x4d4b58u

typedef struct efa_blob {
  uint32_t magic;
  uint32_t qpn, qkey;
  uint8_t gid[16];
} efa_blob;

typedef struct efa_pending {
  uint64_t cookie;
  int peer; /* -1: free */
} efa_pending;

typedef struct efa_impl {
  struct ibv_context *ctx;
  struct ibv_pd *pd;
  struct ibv_cq *cq;
  struct ibv_qp *qp;
  struct efadv_device_attr attr;
  uint8_t port;
  uint32_t sq_depth, rq_depth;
  struct ibv_ah **ah; /* [size] */
  efa_blob *remote;   /* [size] */
  efa_blob blob;
  efa_pending *pend; /* [sq_depth]; the wr_id is the index */
  uint32_t inflight;
  mkx_net_fifo done;
} efa_impl;

static efa_impl *impl_of(mkx_net *n) { return n->impl; }

/* An EFA device answers efadv_query_device; others fail it. */
static int is_efa(struct ibv_device *d, struct efadv_device_attr *attr) {
  struct ibv_context *ctx = ibv_open_device(d);
  if (!ctx) return 0;
  int ok = efadv_query_device(ctx, attr, sizeof *attr) == 0;
  if (ibv_close_device(ctx) != 0) mkx_log(MKX_LOG_DEBUG, "efa: close failed");
  return ok;
}

static struct ibv_device *pick(struct ibv_device **list, int num,
                               const char *want,
                               struct efadv_device_attr *attr) {
  for (int i = 0; i < num; i++)
    if ((!want || strcmp(ibv_get_device_name(list[i]), want) == 0) &&
        list[i]->node_type != IBV_NODE_CA && is_efa(list[i], attr))
      return list[i];
  return NULL;
}

static int check_caps(const struct efadv_device_attr *attr) {
  if (MKX_EFA_CAPS_RDMA_WRITE == 0)
    return mkx_error(MKX_ERR_UNSUPPORTED,
                     "efa: this build's efadv.h has no "
                     "EFADV_DEVICE_ATTR_CAPS_RDMA_WRITE, so MKX cannot check "
                     "for RDMA write; rebuild against a newer rdma-core "
                     "(libibverbs-dev) or use MKX_NET=tcp");
  if (!(attr->device_caps & MKX_EFA_CAPS_RDMA_WRITE))
    return mkx_error(MKX_ERR_UNSUPPORTED,
                     "efa: the device does not support RDMA write "
                     "(device_caps %#x); use MKX_NET=tcp",
                     attr->device_caps);
  return MKX_SUCCESS;
}

static int efa_probe(const mkx_net_params *p) {
  int num = 0;
  struct efadv_device_attr attr;
  errno = 0;
  struct ibv_device **list = ibv_get_device_list(&num);
  if (!list)
    return mkx_error(MKX_ERR_NET, "efa: no RDMA devices (%s)",
                     errno ? strerror(errno) : "empty list");
  struct ibv_device *d = pick(list, num, p->device, &attr);
  ibv_free_device_list(list);
  if (!d) return mkx_error(MKX_ERR_NET, "efa: no EFA device");
  return check_caps(&attr);
}

static int open_device(efa_impl *e, const mkx_net_params *p) {
  int num = 0;
  struct ibv_device **list = ibv_get_device_list(&num);
  if (!list)
    return mkx_error(MKX_ERR_NET, "efa: ibv_get_device_list: %s",
                     strerror(errno));
  struct ibv_device *d = pick(list, num, p->device, &e->attr);
  if (d) e->ctx = ibv_open_device(d);
  ibv_free_device_list(list);
  if (!d) return mkx_error(MKX_ERR_NET, "efa: no EFA device");
  if (!e->ctx) return mkx_error(MKX_ERR_NET, "efa: ibv_open_device failed");
  MKX_TRY(check_caps(&e->attr));
  e->sq_depth = e->attr.max_sq_wr < QP_DEPTH ? e->attr.max_sq_wr : QP_DEPTH;
  e->rq_depth = e->attr.max_rq_wr < QP_DEPTH ? e->attr.max_rq_wr : QP_DEPTH;
  if (!e->sq_depth || !e->rq_depth)
    return mkx_error(MKX_ERR_NET, "efa: device reports empty queues");
  return MKX_SUCCESS;
}

static int create_srd_qp(efa_impl *e) {
  struct ibv_qp_init_attr_ex ia = {
      .qp_type = IBV_QPT_DRIVER,
      .send_cq = e->cq,
      .recv_cq = e->cq,
      .cap = {.max_send_wr = e->sq_depth,
              .max_recv_wr = e->rq_depth,
              .max_send_sge = 1,
              .max_recv_sge = 1},
      .pd = e->pd,
      .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
      .send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM};
  struct efadv_qp_init_attr ea = {.driver_qp_type = EFADV_QP_DRIVER_TYPE_SRD};
  e->qp = efadv_create_qp_ex(e->ctx, &ia, &ea, sizeof ea);
  if (!e->qp)
    return mkx_error(MKX_ERR_NET, "efa: efadv_create_qp_ex (SRD): %s",
                     strerror(errno));
  return MKX_SUCCESS;
}

/* SRD is connectionless: INIT (port, qkey), RTR, RTS with no peer data. */
static int bring_up(efa_impl *e) {
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT,
                          .pkey_index = 0,
                          .port_num = e->port,
                          .qkey = QKEY};
  if (ibv_modify_qp(
          e->qp, &a,
          IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY) != 0)
    return mkx_error(MKX_ERR_NET, "efa: QP to INIT: %s", strerror(errno));
  a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTR};
  if (ibv_modify_qp(e->qp, &a, IBV_QP_STATE) != 0)
    return mkx_error(MKX_ERR_NET, "efa: QP to RTR: %s", strerror(errno));
  int mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
  a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTS, .sq_psn = 0};
  if (e->attr.device_caps & EFADV_DEVICE_ATTR_CAPS_RNR_RETRY)
    a.rnr_retry = 7, mask |= IBV_QP_RNR_RETRY; /* ride out a slow receiver */
  if (ibv_modify_qp(e->qp, &a, mask) != 0)
    return mkx_error(MKX_ERR_NET, "efa: QP to RTS: %s", strerror(errno));
  return MKX_SUCCESS;
}

/* Each incoming write-with-immediate consumes one receive; no data lands
 * in it (the write places its own), so it has no buffer. */
static int post_recvs(efa_impl *e, uint32_t count) {
  for (uint32_t i = 0; i < count; i++) {
    struct ibv_recv_wr wr = {.wr_id = UINT64_MAX, .num_sge = 0}, *bad = NULL;
    int rc = mkx_ibv_post_recv(e->qp, &wr, &bad);
    if (rc != 0)
      return mkx_error(MKX_ERR_NET, "efa: ibv_post_recv: %s", strerror(rc));
  }
  return MKX_SUCCESS;
}

static int fill_blob(efa_impl *e) {
  union ibv_gid gid;
  if (ibv_query_gid(e->ctx, e->port, 0, &gid) != 0)
    return mkx_error(MKX_ERR_NET, "efa: ibv_query_gid: %s", strerror(errno));
  e->blob = (efa_blob){.magic = BLOB_MAGIC, .qpn = e->qp->qp_num, .qkey = QKEY};
  memcpy(e->blob.gid, gid.raw, 16);
  return MKX_SUCCESS;
}

static int open_all(mkx_net *n, efa_impl *e, const mkx_net_params *p) {
  MKX_TRY(open_device(e, p));
  e->port = 1;
  if (!(e->pd = ibv_alloc_pd(e->ctx)))
    return mkx_error(MKX_ERR_NET, "efa: ibv_alloc_pd failed");
  int cqe = (int)(e->sq_depth + e->rq_depth);
  if (!(e->cq = ibv_create_cq(e->ctx, cqe, NULL, NULL, 0)))
    return mkx_error(MKX_ERR_NET, "efa: ibv_create_cq: %s", strerror(errno));
  MKX_TRY(create_srd_qp(e));
  MKX_TRY(bring_up(e));
  e->pend = malloc(e->sq_depth * sizeof *e->pend);
  if (!e->pend) return mkx_error(MKX_ERR_NOMEM, "efa: queues");
  MKX_TRY(mkx_net_signals_alloc(n->num_signals, &n->signals));
  for (uint32_t i = 0; i < e->sq_depth; i++) e->pend[i].peer = -1;
  MKX_TRY(post_recvs(e, e->rq_depth));
  return fill_blob(e);
}

static void efa_close(mkx_net *n);

static int efa_open(mkx_net *n, const mkx_net_params *p) {
  efa_impl *e = calloc(1, sizeof *e);
  if (!e) return mkx_error(MKX_ERR_NOMEM, "efa: endpoint");
  n->impl = e;
  e->ah = calloc((size_t)p->size, sizeof *e->ah);
  int rc = e->ah ? open_all(n, e, p) : mkx_error(MKX_ERR_NOMEM, "efa: ahs");
  if (rc != MKX_SUCCESS) efa_close(n);
  return rc;
}

static int efa_address(mkx_net *n, const void **blob, size_t *len) {
  *blob = &impl_of(n)->blob;
  *len = sizeof(efa_blob);
  return MKX_SUCCESS;
}

static int efa_connect(mkx_net *n, const void *blobs, size_t len) {
  efa_impl *e = impl_of(n);
  if (len != sizeof(efa_blob))
    return mkx_error(MKX_ERR_NET, "efa: address of %zu bytes", len);
  e->remote = malloc(len * (size_t)n->size);
  if (!e->remote) return mkx_error(MKX_ERR_NOMEM, "efa: addresses");
  memcpy(e->remote, blobs, len * (size_t)n->size);
  for (int r = 0; r < n->size; r++) {
    if (e->remote[r].magic != BLOB_MAGIC)
      return mkx_error(MKX_ERR_NET, "efa: rank %d's address is garbled", r);
    if (r == n->rank) continue;
    struct ibv_ah_attr a = {.is_global = 1, .port_num = e->port};
    memcpy(a.grh.dgid.raw, e->remote[r].gid, 16);
    if (!(e->ah[r] = ibv_create_ah(e->pd, &a)))
      return mkx_error(MKX_ERR_NET, "efa: address handle for rank %d: %s", r,
                       strerror(errno));
  }
  return MKX_SUCCESS;
}

static int efa_reg(mkx_net *n, const mkx_net_reg_args *a, mkx_net_mr *mr) {
  return mkx_ibv_register("efa", impl_of(n)->pd, a, mr);
}

static int efa_dereg(mkx_net *n, mkx_net_mr *mr) {
  (void)n;
  return mkx_ibv_deregister("efa", mr);
}

/* The 64-bit value nearest at or above `cur` whose low 16 bits are `low`;
 * an older value (behind by < 2^15) leaves the word as it is, since SRD
 * may deliver writes to one slot out of order. */
static uint64_t rebuild_value(uint64_t cur, uint32_t low) {
  uint64_t ahead = (low - (uint32_t)(cur & 0xffff)) & 0xffff;
  return ahead < 0x8000 ? cur + ahead : cur;
}

static int on_recv(mkx_net *n, const struct ibv_wc *wc) {
  efa_impl *e = impl_of(n);
  if (wc->opcode != IBV_WC_RECV_RDMA_WITH_IMM ||
      !(wc->wc_flags & IBV_WC_WITH_IMM))
    return mkx_error(MKX_ERR_NET, "efa: unexpected receive (opcode %d)",
                     (int)wc->opcode);
  uint32_t imm = ntohl(wc->imm_data), slot = imm >> 16;
  if (slot >= n->num_signals)
    return mkx_error(MKX_ERR_NET, "efa: a peer signalled slot %u of %u", slot,
                     n->num_signals);
  uint64_t cur = atomic_load_explicit(&n->signals[slot], memory_order_relaxed);
  /* Release: whoever sees the word also sees the data placed before it. */
  atomic_store_explicit(&n->signals[slot], rebuild_value(cur, imm & 0xffff),
                        memory_order_release);
  return post_recvs(e, 1);
}

static int on_send(mkx_net *n, const struct ibv_wc *wc) {
  efa_impl *e = impl_of(n);
  if (wc->wr_id >= e->sq_depth || e->pend[wc->wr_id].peer < 0)
    return mkx_error(MKX_ERR_INTERNAL, "efa: stray completion %llu",
                     (unsigned long long)wc->wr_id);
  efa_pending *pd = &e->pend[wc->wr_id];
  int peer = pd->peer;
  pd->peer = -1;
  e->inflight--;
  if (wc->status != IBV_WC_SUCCESS)
    return mkx_error(MKX_ERR_NET,
                     "efa: rank %d: write to rank %d failed: %s "
                     "(status %d, vendor error %#x)",
                     n->rank, peer, ibv_wc_status_str(wc->status),
                     (int)wc->status, wc->vendor_err);
  return mkx_net_fifo_push(&e->done, pd->cookie, peer);
}

static int drain_cq(mkx_net *n) {
  efa_impl *e = impl_of(n);
  struct ibv_wc wc[16];
  for (;;) {
    int got = mkx_ibv_poll_cq(e->cq, 16, wc);
    if (got < 0) return mkx_error(MKX_ERR_NET, "efa: ibv_poll_cq failed");
    for (int i = 0; i < got; i++) {
      if (wc[i].wr_id == UINT64_MAX && wc[i].status != IBV_WC_SUCCESS)
        return mkx_error(MKX_ERR_NET, "efa: receive failed: %s",
                         ibv_wc_status_str(wc[i].status));
      MKX_TRY(wc[i].wr_id == UINT64_MAX ? on_recv(n, &wc[i])
                                        : on_send(n, &wc[i]));
    }
    if (got < 16) return MKX_SUCCESS;
  }
}

static int take_slot(mkx_net *n, uint32_t *slot) {
  efa_impl *e = impl_of(n);
  int64_t deadline = mkx_net_now_ms() + n->timeout_ms;
  while (e->inflight == e->sq_depth) {
    MKX_TRY(drain_cq(n));
    if (e->inflight == e->sq_depth && mkx_net_now_ms() > deadline)
      return mkx_error(MKX_ERR_TIMEOUT, "efa: no write completed in %lld ms",
                       (long long)n->timeout_ms);
  }
  uint32_t i = 0;
  while (e->pend[i].peer >= 0) i++;
  *slot = i;
  return MKX_SUCCESS;
}

static int efa_write_signal(mkx_net *n, int peer, const mkx_net_mr *src,
                            size_t src_off, const mkx_net_rkey *dst,
                            size_t dst_off, size_t len, uint32_t slot,
                            uint64_t value, uint64_t cookie) {
  efa_impl *e = impl_of(n);
  uint32_t idx = 0;
  if (len > e->attr.max_rdma_size)
    return mkx_error(MKX_ERR_INVALID_ARG,
                     "efa: write of %zu bytes exceeds "
                     "the device's RDMA size %u: split it",
                     len, e->attr.max_rdma_size);
  MKX_TRY(take_slot(n, &idx));
  mkx_efa_write w = {.ah = e->ah[peer],
                     .remote_qpn = e->remote[peer].qpn,
                     .remote_qkey = e->remote[peer].qkey,
                     .rkey = dst->rkey,
                     .remote_addr = dst->addr + dst_off,
                     .lkey = src->lkey,
                     .local_addr = (uint64_t)(uintptr_t)src->base + src_off,
                     .len = (uint32_t)len,
                     .imm = slot << 16 | (uint32_t)(value & 0xffff),
                     .wr_id = idx};
  int rc = mkx_efa_post_write_imm(e->qp, &w);
  if (rc != 0)
    return mkx_error(MKX_ERR_NET, "efa: posting a write to rank %d: %s", peer,
                     strerror(rc));
  e->pend[idx] = (efa_pending){cookie, peer};
  e->inflight++;
  return MKX_SUCCESS;
}

static int efa_poll(mkx_net *n, mkx_net_completion *done, int max, int *ndone) {
  MKX_TRY(drain_cq(n));
  *ndone = mkx_net_fifo_pop(&impl_of(n)->done, done, max);
  return MKX_SUCCESS;
}

static void efa_close(mkx_net *n) {
  efa_impl *e = impl_of(n);
  if (!e) return;
  for (int r = 0; e->ah && r < n->size; r++)
    if (e->ah[r] && ibv_destroy_ah(e->ah[r]) != 0)
      mkx_log(MKX_LOG_WARN, "efa: ibv_destroy_ah failed");
  mkx_ibv_destroy_qp("efa", e->qp);
  mkx_ibv_close_base("efa", e->cq, e->pd, e->ctx);
  mkx_net_fifo_free(&e->done);
  free(e->ah);
  free(e->remote);
  free(e->pend);
  free((void *)n->signals);
  free(e);
  n->signals = NULL;
  n->impl = NULL;
}

#else /* !HAVE_EFA */

static int efa_probe(const mkx_net_params *p) {
  (void)p;
  return mkx_error(MKX_ERR_UNSUPPORTED,
                   "efa: MKX was configured without "
                   "efadv (libibverbs-dev with efadv.h, configure "
                   "--enable-efa)");
}
static int efa_open(mkx_net *n, const mkx_net_params *p) {
  (void)n;
  return efa_probe(p);
}
#define efa_address NULL
#define efa_connect NULL
#define efa_reg NULL
#define efa_dereg NULL
#define efa_write_signal NULL
#define efa_poll NULL
static void efa_close(mkx_net *n) { (void)n; }
#endif

const mkx_net_provider mkx_net_efa_provider = {
    .name = "efa",
    .caps = MKX_NET_CAP_DEVICE_MEM, /* SRD delivers out of order */
    .signal_bits = 16,              /* the immediate data's low half */
    .probe = efa_probe,
    .open = efa_open,
    .address = efa_address,
    .connect = efa_connect,
    .reg = efa_reg,
    .dereg = efa_dereg,
    .write_signal = efa_write_signal,
    .poll = efa_poll,
    .close = efa_close,
};
