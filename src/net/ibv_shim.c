/* Real symbols for inline verbs calls (see ibv_shim.h).  Kept apart from
 * verbs.c and efa.c so that --wrap, which only redirects references
 * between object files, can reach them. */
#include <arpa/inet.h>
#include "net/ibv_shim.h"

#if HAVE_VERBS
int mkx_ibv_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr,
                      struct ibv_send_wr **bad) {
  return ibv_post_send(qp, wr, bad);
}

int mkx_ibv_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr,
                      struct ibv_recv_wr **bad) {
  return ibv_post_recv(qp, wr, bad);
}

int mkx_ibv_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc) {
  return ibv_poll_cq(cq, n, wc);
}

int mkx_ibv_query_port(struct ibv_context *ctx, uint8_t port,
                       struct ibv_port_attr *attr) {
  return ibv_query_port(ctx, port, attr);
}

struct ibv_mr *mkx_ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t len,
                              int access) {
  return ibv_reg_mr(pd, addr, len, access);
}

int mkx_efa_post_write_imm(struct ibv_qp *qp, const mkx_efa_write *w) {
  struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(qp);
  if (!qx) return EOPNOTSUPP;
  ibv_wr_start(qx);
  qx->wr_id = w->wr_id;
  qx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_rdma_write_imm(qx, w->rkey, w->remote_addr, htonl(w->imm));
  ibv_wr_set_sge(qx, w->lkey, w->local_addr, w->len);
  ibv_wr_set_ud_addr(qx, w->ah, w->remote_qpn, w->remote_qkey);
  return ibv_wr_complete(qx);
}
#else
/* ISO C wants something in every translation unit. */
typedef int mkx_ibv_shim_unused;
#endif
