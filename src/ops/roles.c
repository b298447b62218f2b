/* The roles' ranges, and the paths that run them (roles.h). */
#include "core/comm.h"
#include "ops/roles.h"

static const mkx_role_range ranges[MKX_ROLE_COUNT] = {
    [MKX_ROLE_NET_FWD] = {"network forward", 16, 1, 8, 32,
                          "each CTA waits on the network; the kernels "
                          "beside it keep the SMs"},
    [MKX_ROLE_NODE_SUM] = {"node sums", 4, 1, 8, 64,
                           "each reads the node's partials of an owner's "
                           "rows and writes their sum, G + 1 times the "
                           "bytes the forward moves once"},
};

const mkx_role_range *mkx_role_range_of(mkx_role r) {
  return r >= 0 && r < MKX_ROLE_COUNT ? &ranges[r] : NULL;
}

unsigned mkx_path_roles(mkx_path p) {
  switch (p) {
    case MKX_PATH_HIER_PROXY: /* AllGather+GEMM forwards, RS/AR sum */
      return 1u << MKX_ROLE_NET_FWD | 1u << MKX_ROLE_NODE_SUM;
    case MKX_PATH_ATTN_NET:
      return 1u << MKX_ROLE_NET_FWD;
    default:
      return 0;
  }
}

int mkx_role_rank_ctas(MKX_Comm c) {
  return c->share.ctas ? c->share.ctas : c->share.dev_sms;
}

int mkx_role_pinned(MKX_Comm c, mkx_role r) {
  return r == MKX_ROLE_NET_FWD ? c->opt.net_fwd_ctas : c->opt.net_sum_ctas;
}

int mkx_role_ctas(MKX_Comm c, mkx_role r) {
  const mkx_role_range *g = mkx_role_range_of(r);
  const int all = mkx_role_rank_ctas(c), pin = mkx_role_pinned(c, r);
  if (pin > 0) return pin < all ? pin : all > 1 ? all - 1 : 1;
  const int f = all / g->part;
  return f < g->lo ? g->lo : f > g->hi ? g->hi : f;
}

int mkx_role_rest(int all, int ctas) { return all - ctas > 1 ? all - ctas : 1; }

int mkx_role_leave(MKX_Comm c, mkx_role r) {
  return mkx_role_rest(mkx_role_rank_ctas(c), mkx_role_ctas(c, r));
}
