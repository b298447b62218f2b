/* The fake RDMA stack (see fake_ibv.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "fake_ibv.h"

fake_state fake;

typedef struct fake_cqe {
  struct ibv_cq *cq;
  struct ibv_wc wc;
  struct fake_cqe *next;
} fake_cqe;
static fake_cqe *cq_head, *cq_tail;
static uint32_t next_qpn = 0x100, next_key = 0x10;

void fake_reset(void) {
  while (cq_head) {
    fake_cqe *e = cq_head;
    cq_head = e->next;
    free(e);
  }
  cq_tail = NULL;
  memset(&fake, 0, sizeof fake);
  fake.link_layer = IBV_LINK_LAYER_INFINIBAND;
}

void fake_add_device(const char *name, int kind) {
  struct ibv_device *d = &fake.devs[fake.ndev++];
  memset(d, 0, sizeof *d);
  strncpy(d->name, name, sizeof d->name - 1);
  d->node_type = kind ? IBV_NODE_UNSPECIFIED : IBV_NODE_CA;
  d->transport_type = kind ? IBV_TRANSPORT_UNSPECIFIED : IBV_TRANSPORT_IB;
}

void fake_complete(struct ibv_cq *cq, const struct ibv_wc *wc) {
  fake_cqe *e = calloc(1, sizeof *e);
  if (!e) abort();
  e->cq = cq;
  e->wc = *wc;
  if (cq_tail)
    cq_tail->next = e;
  else
    cq_head = e;
  cq_tail = e;
}

const fake_modify *fake_modifies_of(uint32_t qp_num, int which) {
  for (int i = 0; i < fake.nmod; i++)
    if (fake.mod[i].qp_num == qp_num && which-- == 0) return &fake.mod[i];
  return NULL;
}

/* ---- devices ---- */

struct ibv_device **__wrap_ibv_get_device_list(int *num) {
  if (num) *num = fake.ndev;
  if (!fake.ndev) {
    errno = ENOSYS; /* what this kernel without InfiniBand answers */
    return NULL;
  }
  struct ibv_device **l = calloc((size_t)fake.ndev + 1, sizeof *l);
  for (int i = 0; l && i < fake.ndev; i++) l[i] = &fake.devs[i];
  return l;
}

void __wrap_ibv_free_device_list(struct ibv_device **list) { free(list); }

const char *__wrap_ibv_get_device_name(struct ibv_device *d) { return d->name; }

struct ibv_context *__wrap_ibv_open_device(struct ibv_device *d) {
  struct ibv_context *c = calloc(1, sizeof *c);
  if (c) c->device = d, fake.opens++;
  return c;
}

int __wrap_ibv_close_device(struct ibv_context *c) {
  free(c);
  fake.closes++;
  return 0;
}

static int dev_index(struct ibv_context *c) {
  return (int)(c->device - fake.devs);
}

int __wrap_mkx_ibv_query_port(struct ibv_context *c, uint8_t port,
                              struct ibv_port_attr *a) {
  (void)port;
  memset(a, 0, sizeof *a);
  a->state = IBV_PORT_ACTIVE;
  a->lid = (uint16_t)(0x10 + dev_index(c));
  a->active_mtu = IBV_MTU_4096;
  a->max_msg_sz = 1u << 30;
  a->link_layer = (uint8_t)fake.link_layer;
  return 0;
}

/* Every context gets its own GID; its last byte tells the opens apart. */
int __wrap_ibv_query_gid(struct ibv_context *c, uint8_t port, int index,
                         union ibv_gid *gid) {
  (void)port;
  memset(gid, 0, sizeof *gid);
  gid->raw[0] = 0xfe, gid->raw[1] = 0x80;
  gid->raw[14] = (uint8_t)index;
  gid->raw[15] = (uint8_t)((uintptr_t)c >> 4);
  return 0;
}

/* ---- resources ---- */

struct ibv_pd *__wrap_ibv_alloc_pd(struct ibv_context *c) {
  struct ibv_pd *pd = calloc(1, sizeof *pd);
  if (pd) pd->context = c;
  return pd;
}

int __wrap_ibv_dealloc_pd(struct ibv_pd *pd) {
  free(pd);
  return 0;
}

struct ibv_cq *__wrap_ibv_create_cq(struct ibv_context *c, int cqe, void *ctx,
                                    struct ibv_comp_channel *ch, int vec) {
  (void)ctx, (void)ch, (void)vec;
  struct ibv_cq *cq = calloc(1, sizeof *cq);
  if (cq) cq->context = c, cq->cqe = cqe;
  if (cq && fake.ncq < 64) fake.cqs[fake.ncq++] = cq;
  return cq;
}

int __wrap_ibv_destroy_cq(struct ibv_cq *cq) {
  free(cq);
  return 0;
}

static struct ibv_qp *new_qp(struct ibv_pd *pd, enum ibv_qp_type type) {
  struct ibv_qp *qp = calloc(1, sizeof *qp);
  if (!qp) return NULL;
  qp->context = pd->context;
  qp->pd = pd;
  qp->qp_num = next_qpn++;
  qp->qp_type = type;
  fake.qps++;
  return qp;
}

struct ibv_qp *__wrap_ibv_create_qp(struct ibv_pd *pd,
                                    struct ibv_qp_init_attr *a) {
  if (fake.nqp_init < 64) fake.qp_init[fake.nqp_init++] = *a;
  struct ibv_qp *qp = new_qp(pd, a->qp_type);
  if (qp) qp->send_cq = a->send_cq, qp->recv_cq = a->recv_cq;
  return qp;
}

int __wrap_ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask) {
  if (fake.nmod < FAKE_MAX_LOG)
    fake.mod[fake.nmod++] = (fake_modify){qp->qp_num, *a, mask};
  qp->state = a->qp_state;
  return 0;
}

int __wrap_ibv_destroy_qp(struct ibv_qp *qp) {
  free(qp);
  fake.qps_destroyed++;
  return 0;
}

static struct ibv_mr *new_mr(struct ibv_pd *pd, void *addr, size_t len) {
  struct ibv_mr *mr = calloc(1, sizeof *mr);
  if (!mr) return NULL;
  mr->context = pd->context, mr->pd = pd, mr->addr = addr, mr->length = len;
  mr->lkey = 0x1000 + next_key;
  mr->rkey = 0x2000 + next_key++;
  fake.mrs++;
  return mr;
}

struct ibv_mr *__wrap_mkx_ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t len,
                                     int access) {
  fake.last_reg_access = access;
  fake.plain_regs++;
  return new_mr(pd, addr, len);
}

struct ibv_mr *__wrap_ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset,
                                        size_t len, uint64_t iova, int fd,
                                        int access) {
  (void)offset;
  fake.last_reg_access = access;
  fake.last_dmabuf_fd = fd;
  fake.dmabuf_regs++;
  if (fake.fail_dmabuf) {
    errno = EOPNOTSUPP;
    return NULL;
  }
  return new_mr(pd, (void *)(uintptr_t)iova, len);
}

int __wrap_ibv_dereg_mr(struct ibv_mr *mr) {
  free(mr);
  fake.mrs_freed++;
  return 0;
}

struct ibv_ah *__wrap_ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *a) {
  struct ibv_ah *ah = calloc(1, sizeof *ah);
  if (!ah) return NULL;
  ah->context = pd->context, ah->pd = pd;
  if (fake.nah < 64) fake.ah_attr[fake.nah] = *a;
  fake.nah++;
  fake.ahs++;
  return ah;
}

int __wrap_ibv_destroy_ah(struct ibv_ah *ah) {
  free(ah);
  fake.ahs_destroyed++;
  return 0;
}

/* ---- data path ---- */

static void complete_send(struct ibv_qp *qp, uint64_t wr_id) {
  struct ibv_wc wc = {.wr_id = wr_id,
                      .status = fake.fail_next,
                      .opcode = IBV_WC_RDMA_WRITE,
                      .qp_num = qp->qp_num};
  if (fake.fail_next) wc.vendor_err = 0x42;
  fake.fail_next = IBV_WC_SUCCESS;
  fake_complete(qp->send_cq ? qp->send_cq : NULL, &wc);
}

int __wrap_mkx_ibv_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr,
                             struct ibv_send_wr **bad) {
  (void)bad;
  fake.post_calls++;
  for (; wr; wr = wr->next) {
    fake_wr *f = &fake.wr[fake.nwr < FAKE_MAX_LOG ? fake.nwr++ : 0];
    *f = (fake_wr){.qp_num = qp->qp_num,
                   .post_call = fake.post_calls,
                   .wr_id = wr->wr_id,
                   .opcode = wr->opcode,
                   .send_flags = wr->send_flags,
                   .remote_addr = wr->wr.rdma.remote_addr,
                   .rkey = wr->wr.rdma.rkey};
    if (wr->num_sge > 0) {
      f->sge_addr = wr->sg_list[0].addr;
      f->sge_len = wr->sg_list[0].length;
      f->sge_lkey = wr->sg_list[0].lkey;
    }
    /* Inline data is read now: the caller's buffer may be gone after. */
    if ((wr->send_flags & IBV_SEND_INLINE) && f->sge_len >= 8)
      memcpy(&f->inline_word, (void *)(uintptr_t)f->sge_addr, 8);
    if (wr->send_flags & IBV_SEND_SIGNALED) complete_send(qp, wr->wr_id);
  }
  return 0;
}

int __wrap_mkx_ibv_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr,
                             struct ibv_recv_wr **bad) {
  (void)qp, (void)bad;
  for (; wr; wr = wr->next) fake.recvs_posted++;
  return 0;
}

int __wrap_mkx_ibv_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc) {
  int k = 0;
  fake_cqe **pp = &cq_head, *prev = NULL;
  while (*pp && k < n) {
    fake_cqe *e = *pp;
    if (e->cq != cq) {
      prev = e, pp = &e->next;
      continue;
    }
    wc[k++] = e->wc;
    *pp = e->next;
    if (cq_tail == e) cq_tail = prev;
    free(e);
  }
  return k;
}

#if HAVE_EFA
int __wrap_efadv_query_device(struct ibv_context *c,
                              struct efadv_device_attr *a, uint32_t inlen) {
  if (c->device->node_type == IBV_NODE_CA) return EOPNOTSUPP;
  memset(a, 0, inlen);
  a->max_sq_wr = 128;
  a->max_rq_wr = 128;
  a->max_sq_sge = a->max_rq_sge = 2;
  a->device_caps = fake.efa_caps;
  a->max_rdma_size = 1u << 20;
  return 0;
}

struct ibv_qp *__wrap_efadv_create_qp_ex(struct ibv_context *c,
                                         struct ibv_qp_init_attr_ex *a,
                                         struct efadv_qp_init_attr *ea,
                                         uint32_t inlen) {
  (void)c, (void)inlen;
  fake.efa_qp_attr = *a;
  fake.efa_driver_qp_type = ea->driver_qp_type;
  struct ibv_qp *qp = new_qp(a->pd, a->qp_type);
  if (qp) qp->send_cq = a->send_cq, qp->recv_cq = a->recv_cq;
  return qp;
}

int __wrap_mkx_efa_post_write_imm(struct ibv_qp *qp, const mkx_efa_write *w) {
  if (fake.nefa_wr < FAKE_MAX_LOG) fake.efa_wr[fake.nefa_wr++] = *w;
  complete_send(qp, w->wr_id);
  return 0;
}
#endif
