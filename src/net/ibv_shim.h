/* The verbs calls that verbs.h makes static inline or macros: they jump
 * through the device's ops table or peek into the provider's private
 * context, so a unit test could not replace them.  Here each gets a real
 * symbol in its own object file, and tests/unit/test_net_{verbs,efa}.c
 * replace them at link time (-Wl,--wrap=mkx_ibv_post_send,...), as
 * libfabric's EFA unit tests do with rdma-core. */
#ifndef MKX_NET_IBV_SHIM_H
#define MKX_NET_IBV_SHIM_H

#if HAVE_VERBS
#include <infiniband/verbs.h>

int mkx_ibv_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr,
                      struct ibv_send_wr **bad);
int mkx_ibv_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr,
                      struct ibv_recv_wr **bad);
int mkx_ibv_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);
int mkx_ibv_query_port(struct ibv_context *ctx, uint8_t port,
                       struct ibv_port_attr *attr);
struct ibv_mr *mkx_ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t len,
                              int access);

/* One RDMA write with immediate data on an extended (SRD) QP: the
 * ibv_wr_start ... ibv_wr_complete sequence, whose steps are inline. */
typedef struct mkx_efa_write {
  struct ibv_ah *ah;
  uint32_t remote_qpn, remote_qkey;
  uint32_t rkey;
  uint64_t remote_addr;
  uint32_t lkey;
  uint64_t local_addr;
  uint32_t len;
  uint32_t imm; /* host order; sent big-endian */
  uint64_t wr_id;
} mkx_efa_write;
int mkx_efa_post_write_imm(struct ibv_qp *qp, const mkx_efa_write *w);
#endif

#endif
