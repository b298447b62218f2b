/*
 * The roles that CTAs of a fused path take beside its main work (GEMM
 * tiles, attention blocks), and the CTAs each may take: one table for
 * every path (src/ops/roles.c), beside the path table (ops/path.h).  A
 * role takes a share of the rank's CTAs within its range; the kernels
 * beside it take the rest.  The adaptive split (kernels/common/
 * tune_search.h) searches within the same ranges.
 */
#ifndef MKX_OPS_ROLES_H
#define MKX_OPS_ROLES_H

#include "mkx.h"
#include "ops/path.h"

typedef enum mkx_role {
  MKX_ROLE_NET_FWD,  /* nodes of several ranks: hands what lands from the
                        network on to the node's ranks */
  MKX_ROLE_NODE_SUM, /* nodes of several ranks: sums the node's partials of
                        an owner's rows before they cross */
  MKX_ROLE_COUNT
} mkx_role;

typedef struct mkx_role_range {
  const char *name;
  int part;   /* by default 1/part of the rank's CTAs ... */
  int lo, hi; /* ... but never fewer than lo nor more than hi */
  int most;   /* the adaptive split searches [lo, most] (and leaves the
                 kernels beside it one CTA at least) */
  const char *why;
} mkx_role_range;

const mkx_role_range *mkx_role_range_of(mkx_role r);
/* Bit r set: the path's kernels may run role r. */
unsigned mkx_path_roles(mkx_path p);
/* The CTAs role r takes on c's rank (pinned by its option, net_fwd_ctas or
 * net_sum_ctas, to at most the rank's CTAs less one; else its share within
 * its range), and those the kernels beside it may
 * take (mkx_fused_sync.ctas: the rank's less the role's, at least 1, so
 * that both are resident at once: a kernel that waits for what the role
 * does, holding every SM the role could have, would wait out its bound). */
int mkx_role_ctas(MKX_Comm c, mkx_role r);
int mkx_role_leave(MKX_Comm c, mkx_role r);
/* The same for a role of `ctas` CTAs of the rank's `all` (ctas chosen
 * otherwise: fused/tuner.h). */
int mkx_role_rest(int all, int ctas);
/* Options net_fwd_ctas, net_sum_ctas: a split pinned by hand (0: none). */
int mkx_role_pinned(MKX_Comm c, mkx_role r);
/* The rank's CTAs that its roles and the kernels beside them share. */
int mkx_role_rank_ctas(MKX_Comm c);

#endif
