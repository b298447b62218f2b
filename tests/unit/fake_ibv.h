/* A fake RDMA stack for unit tests: the verbs and efadv calls MKX makes
 * are replaced at link time (-Wl,--wrap=..., see src/net/Makefile.include)
 * by the __wrap_ functions in fake_ibv.c, which hand out fake devices and
 * record what the providers ask for: QP transitions, posted work requests
 * (with inline data copied at post time, as a NIC would), registrations
 * and address handles.  Completions are queued per CQ; a posted signaled
 * work request completes successfully unless the test arms a failure. */
#ifndef MKX_TESTS_UNIT_FAKE_IBV_H
#define MKX_TESTS_UNIT_FAKE_IBV_H

#include <infiniband/verbs.h>
#if HAVE_EFA
#include <infiniband/efadv.h>
#endif
#include "net/ibv_shim.h"

#define FAKE_MAX_LOG 4096

typedef struct fake_wr {
  uint32_t qp_num;
  int post_call; /* which mkx_ibv_post_send call it came in */
  uint64_t wr_id;
  int opcode;
  unsigned send_flags;
  uint64_t remote_addr;
  uint32_t rkey;
  uint64_t sge_addr;
  uint32_t sge_len, sge_lkey;
  uint64_t inline_word; /* first 8 bytes when IBV_SEND_INLINE */
} fake_wr;

typedef struct fake_modify {
  uint32_t qp_num;
  struct ibv_qp_attr attr;
  int mask;
} fake_modify;

typedef struct fake_state {
  struct ibv_device devs[4];
  int ndev;
  int link_layer;               /* IBV_LINK_LAYER_* of every port */
  uint32_t efa_caps;            /* device_caps efadv_query_device reports */
  enum ibv_wc_status fail_next; /* status of the next completion queued */
  int fail_dmabuf;              /* ibv_reg_dmabuf_mr fails */
  int opens, closes, qps, qps_destroyed, mrs, mrs_freed, ahs, ahs_destroyed;
  int post_calls, recvs_posted, dmabuf_regs, plain_regs;
  int last_reg_access, last_dmabuf_fd;
  fake_wr wr[FAKE_MAX_LOG];
  int nwr;
  fake_modify mod[FAKE_MAX_LOG];
  int nmod;
  struct ibv_cq *cqs[64]; /* in creation order */
  int ncq;
  struct ibv_ah_attr ah_attr[64];
  int nah;
  struct ibv_qp_init_attr qp_init[64];
  int nqp_init;
#if HAVE_EFA
  mkx_efa_write efa_wr[FAKE_MAX_LOG];
  int nefa_wr;
  struct ibv_qp_init_attr_ex efa_qp_attr;
  uint32_t efa_driver_qp_type;
#endif
} fake_state;

extern fake_state fake;

/* Forget everything; add devices with fake_add_device. */
void fake_reset(void);
/* kind: 0 = RC channel adapter (mlx5-like), 1 = EFA. */
void fake_add_device(const char *name, int kind);
/* Queue a completion on `cq` (as the NIC would). */
void fake_complete(struct ibv_cq *cq, const struct ibv_wc *wc);
/* The modify_qp records of one QP, in order (count in *n). */
const fake_modify *fake_modifies_of(uint32_t qp_num, int which);

#endif
