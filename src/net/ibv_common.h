/* What the verbs and efa providers share: memory registration (host
 * memory, or GPU memory through DMA-BUF with a fall-back to the device
 * pointer, which nvidia-peermem resolves) and its undoing, and the
 * teardown of the handles both hold.  `prov` names
 * the provider in messages. */
#ifndef MKX_NET_IBV_COMMON_H
#define MKX_NET_IBV_COMMON_H

#include "net/net.h"

#if HAVE_VERBS
#include <infiniband/verbs.h>

int mkx_ibv_register(const char *prov, struct ibv_pd *pd,
                     const mkx_net_reg_args *a, mkx_net_mr *mr);
int mkx_ibv_deregister(const char *prov, mkx_net_mr *mr);
/* Teardown, each handle possibly NULL after a failed open, failures logged
 * (nothing more can be done at close): a queue pair; then the completion
 * queue, protection domain and device, in that order. */
void mkx_ibv_destroy_qp(const char *prov, struct ibv_qp *qp);
void mkx_ibv_close_base(const char *prov, struct ibv_cq *cq, struct ibv_pd *pd,
                        struct ibv_context *ctx);
#endif

#endif
