/* What the verbs and efa providers share: memory registration (host
 * memory, or GPU memory through DMA-BUF with a fall-back to the device
 * pointer, which nvidia-peermem resolves) and its undoing.  `prov` names
 * the provider in messages. */
#ifndef MKX_NET_IBV_COMMON_H
#define MKX_NET_IBV_COMMON_H

#include "net/net.h"

#if HAVE_VERBS
#include <infiniband/verbs.h>

int mkx_ibv_register(const char *prov, struct ibv_pd *pd,
                     const mkx_net_reg_args *a, mkx_net_mr *mr);
int mkx_ibv_deregister(const char *prov, mkx_net_mr *mr);
#endif

#endif
