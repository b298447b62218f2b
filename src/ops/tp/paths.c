/* The GPU paths of the three tensor-parallel calls, as table entries
 * (mkx_path_ops, src/ops/op.h), and the one place that chooses among them.
 *
 * The choice uses agreed values and options only (number of nodes, the
 * agreed need of the adapter, M, the GPU sharing mode), so every rank
 * takes the same path without another exchange:
 *   several nodes        ag_proxy / red_proxy (option hier_gemm=proxy or
 *                        auto: nodes of one rank; on equal nodes of
 *                        several, AllGather+GEMM, and GEMM+ReduceScatter
 *                        with proxy), hier_nvlink, or hier_gpu
 *                        (option hier_gemm, and
 *                        whether the nvlink variant's conditions hold)
 *   any rank's operands  adapted (a row-major call on padded temporaries,
 *   need adapting        itself on the fused path chosen for its shape)
 *   one node             split (shared GPU in time slices, options
 *                        shared_gpu and tp_overlap, small M) or overlap;
 *                        a split AllGather+GEMM whose tiles and copy CTAs
 *                        fit (option tp_ag_oneshot, the agreed
 *                        MKX_GPU_LOCAL_NO_ONE_KERNEL) in one kernel (its
 *                        starts count as split too); instead of overlap,
 *                        pull where option tp_pull says so
 *                        (mkx_tp_wants_pull; AllGather+GEMM also needs
 *                        whole tiles per rank); fp8 operands split (an
 *                        AllGather+GEMM pull with option tp_pull=yes)
 * A path's plan may still fall back within its family, and says so at
 * info: the overlapped GEMM+AllReduce takes the split path where C cannot
 * be mapped into the peers, and the pull plan runs as overlap where some
 * rank's operands cannot be mapped. */
#include <stdio.h>
#include <string.h>
#include "core/error.h"
#include "host/dtype.h"
#include "ops/op.h"
#include "ops/path.h"

#if HAVE_CUDA
#include "ops/nodes/net_gpu.h"
#include "ops/nodes/hier.h"
#include "ops/fused/fused.h"

/* ---- plans of each path (op: MKX_TP_OP_*) --------------------------------- */

static int ag_overlap_plan(MKX_Comm c, int op, const void *args,
                           const mkx_agreed *g, void **plan) {
  (void)op;
  return mkx_ag_gemm_gpu_plan(c, args, g, MKX_PATH_TP_OVERLAP, plan);
}
static int ag_split_plan(MKX_Comm c, int op, const void *args,
                         const mkx_agreed *g, void **plan) {
  (void)op;
  return mkx_ag_gemm_gpu_plan(c, args, g, MKX_PATH_TP_SPLIT, plan);
}
static int ag_one_kernel_plan(MKX_Comm c, int op, const void *args,
                              const mkx_agreed *g, void **plan) {
  (void)op;
  return mkx_ag_gemm_gpu_plan(c, args, g, MKX_PATH_TP_ONE_KERNEL, plan);
}
static int ag_pull_plan(MKX_Comm c, int op, const void *args,
                        const mkx_agreed *g, void **plan) {
  (void)op;
  return mkx_ag_gemm_gpu_plan(c, args, g, MKX_PATH_TP_PULL, plan);
}
static int red_overlap_plan(MKX_Comm c, int op, const void *args,
                            const mkx_agreed *g, void **plan) {
  (void)g;
  return mkx_rs_ar_gpu_plan(c, op, args, MKX_PATH_TP_OVERLAP, plan);
}
static int red_split_plan(MKX_Comm c, int op, const void *args,
                          const mkx_agreed *g, void **plan) {
  (void)g;
  return mkx_rs_ar_gpu_plan(c, op, args, MKX_PATH_TP_SPLIT, plan);
}
static int red_pull_plan(MKX_Comm c, int op, const void *args,
                         const mkx_agreed *g, void **plan) {
  (void)g;
  return mkx_rs_ar_gpu_plan(c, op, args, MKX_PATH_TP_PULL, plan);
}

/* ---- the table ----------------------------------------------------------- */

static const mkx_path_ops ag_overlap = {MKX_PATH_TP_OVERLAP, ag_overlap_plan,
                                        mkx_ag_gemm_gpu_start,
                                        mkx_ag_gemm_gpu_free};
static const mkx_path_ops ag_split = {MKX_PATH_TP_SPLIT, ag_split_plan,
                                      mkx_ag_gemm_gpu_start,
                                      mkx_ag_gemm_gpu_free};
static const mkx_path_ops ag_one_kernel = {
    MKX_PATH_TP_ONE_KERNEL, ag_one_kernel_plan, mkx_ag_gemm_gpu_start,
    mkx_ag_gemm_gpu_free};
static const mkx_path_ops ag_pull = {MKX_PATH_TP_PULL, ag_pull_plan,
                                     mkx_ag_gemm_gpu_start,
                                     mkx_ag_gemm_gpu_free};
static const mkx_path_ops red_pull = {MKX_PATH_TP_PULL, red_pull_plan,
                                      mkx_rs_ar_gpu_start, mkx_rs_ar_gpu_free};
static const mkx_path_ops red_overlap = {MKX_PATH_TP_OVERLAP, red_overlap_plan,
                                         mkx_rs_ar_gpu_start,
                                         mkx_rs_ar_gpu_free};
static const mkx_path_ops red_split = {MKX_PATH_TP_SPLIT, red_split_plan,
                                       mkx_rs_ar_gpu_start, mkx_rs_ar_gpu_free};
static const mkx_path_ops adapted = {MKX_PATH_TP_ADAPTED, mkx_tp_adapt_plan,
                                     mkx_tp_adapt_start, mkx_tp_adapt_free};
/* Both several-node variants share the plan type (hg_plan) and its start
 * and free; only the set-up differs. */
static const mkx_path_ops hier_gpu = {MKX_PATH_HIER_GPU, mkx_hier_gpu_plan,
                                      mkx_hier_gpu_start, mkx_hier_gpu_free};
static const mkx_path_ops hier_nvlink = {MKX_PATH_HIER_NVLINK,
                                         mkx_hier_nvlink_plan,
                                         mkx_hier_gpu_start, mkx_hier_gpu_free};
static const mkx_path_ops ag_proxy = {MKX_PATH_HIER_PROXY, mkx_ag_net_plan,
                                      mkx_ag_net_start, mkx_ag_net_free};
static const mkx_path_ops red_proxy = {MKX_PATH_HIER_PROXY, mkx_rs_ar_net_plan,
                                       mkx_rs_ar_net_start, mkx_rs_ar_net_free};

/* ---- the choice ---------------------------------------------------------- */

/* Below 1024 rows per rank the overlapped calls' fixed cost is larger
 * than what overlap can hide (tests/perf/results/tp-h200x2.md). */
int mkx_tp_split_why(MKX_Comm c, int64_t M, char *why, size_t len) {
  /* Without MPS the ranks of a GPU take turns: a persistent kernel that
   * waits for a tile of a peer waits for the peer's next time slice, once
   * per tile.  The split path meets the peers a few times per call. */
  const int sliced = c->share.mode == MKX_SHARE_TIMESLICED &&
                     c->opt.shared_gpu == MKX_SHARED_AUTO;
  if (sliced || (c->share.mode != MKX_SHARE_NONE &&
                 c->opt.shared_gpu == MKX_SHARED_SPLIT)) {
    snprintf(why, len, "ranks share a GPU (%s), option shared_gpu=%s",
             mkx_gpu_share_name(c->share.mode), sliced ? "auto" : "split");
    return 1;
  }
  if (c->opt.tp_overlap != MKX_OVERLAP_AUTO) {
    snprintf(why, len, "option tp_overlap=%s",
             c->opt.tp_overlap == MKX_OVERLAP_NO ? "no" : "yes");
    return c->opt.tp_overlap == MKX_OVERLAP_NO;
  }
  const int split = M < 1024 * (int64_t)c->size;
  snprintf(why, len, "M = %lld %s 1024 rows per rank, option tp_overlap=auto",
           (long long)M, split ? "<" : ">=");
  return split;
}

/* fp8 operands (agreed dtype) take the split path: the overlapped
 * kernels are 16-bit code; AllGather+GEMM reads the rows in place with
 * option tp_pull=yes only (auto keeps the split path for fp8). */
static int fp8_path(MKX_Comm c, int op, const void *args, const mkx_agreed *g,
                    mkx_path_choice *out) {
  if (!mkx_is_fp8(mkx_tp_dtype_of(op, args))) return 0;
  if (op == MKX_TP_OP_AG && c->opt.tp_pull == MKX_PULL_YES &&
      mkx_ag_gemm_pull_fits(c, g)) {
    out->ops = &ag_pull;
    snprintf(out->why, sizeof out->why,
             "fp8 operands: the rows' scales, then the fp8 GEMM on the "
             "ranks' own A (option tp_pull=yes)");
    return 1;
  }
  out->ops = op == MKX_TP_OP_AG ? &ag_split : &red_split;
  snprintf(out->why, sizeof out->why,
           "fp8 operands: the copy, then the fp8 GEMM%s",
           c->opt.tp_pull == MKX_PULL_YES
               ? (op == MKX_TP_OP_AG ? " (tp_pull=yes: some rank has no "
                                       "rows or ends inside a 128-row tile)"
                                     : " (tp_pull=yes: AllGather+GEMM only)")
               : "");
  return 1;
}

void mkx_tp_choose_fused(MKX_Comm c, int op, const void *args,
                         const mkx_agreed *g, mkx_path_choice *out) {
  const int64_t M =
      op == MKX_TP_OP_AG ? g->total : ((const mkx_rs_ar_args *)args)->M;
  out->op = op;
  if (fp8_path(c, op, args, g, out)) return;
  const int split = mkx_tp_split_why(c, M, out->why, sizeof out->why);
  if (!split && mkx_tp_wants_pull(c) &&
      (op != MKX_TP_OP_AG || mkx_ag_gemm_pull_fits(c, g))) {
    const size_t n = strlen(out->why);
    out->ops = op == MKX_TP_OP_AG ? &ag_pull : &red_pull;
    snprintf(out->why + n, sizeof out->why - n,
             "; operands read in place (option tp_pull=%s)",
             c->opt.tp_pull == MKX_PULL_YES ? "yes" : "auto: one GPU");
  } else if (op != MKX_TP_OP_AG) {
    out->ops = split ? &red_split : &red_overlap;
  } else if (!split) {
    out->ops = &ag_overlap;
  } else if (mkx_ag_gemm_one_kernel(c, args, g)) {
    const size_t n = strlen(out->why);
    out->ops = &ag_one_kernel;
    snprintf(out->why + n, sizeof out->why - n,
             "; in one kernel (option tp_ag_oneshot: its tiles and the "
             "copy's CTAs fit)");
  } else {
    out->ops = &ag_split;
  }
}

static int choose(MKX_Comm c, int op, const void *args, const mkx_agreed *g,
                  mkx_path_choice *out) {
  out->op = op;
  if (c->place.num_nodes > 1) {
    char why[160];
    const int proxy = op == MKX_TP_OP_AG
                          ? mkx_ag_net_fits(c, args, g, why, sizeof why)
                          : mkx_rs_ar_net_fits(c, op, args, g, why, sizeof why);
    const int hg = c->opt.hier_gemm;
    const char *opt = hg == MKX_HIER_GEMM_AUTO ? "auto" : "proxy";
    if (proxy) {
      out->ops = op == MKX_TP_OP_AG ? &ag_proxy : &red_proxy;
      snprintf(out->why, sizeof out->why, "%d nodes, option hier_gemm=%s",
               c->place.num_nodes, opt);
      return MKX_SUCCESS;
    }
    /* proxy or auto where the GPU cannot drive it: as nvlink, saying why */
    char no_proxy[240] = "";
    if (hg == MKX_HIER_GEMM_PROXY || hg == MKX_HIER_GEMM_AUTO)
      snprintf(no_proxy, sizeof no_proxy,
               " (hier_gemm=%s, not driven by the GPU: %s)", opt, why);
    const int nvlink = mkx_hier_nvlink_fits(c, op, args, g, why, sizeof why);
    out->ops = nvlink ? &hier_nvlink : &hier_gpu;
    snprintf(out->why, sizeof out->why, "%d nodes, %s%s", c->place.num_nodes,
             !nvlink                      ? why
             : hg == MKX_HIER_GEMM_NVLINK ? "option hier_gemm=nvlink"
                                          : "as hier_gemm=nvlink",
             no_proxy);
    return MKX_SUCCESS;
  }
  if (g->gpu_adapt) {
    out->ops = &adapted;
    snprintf(out->why, sizeof out->why,
             "a rank's operands are column-major "
             "or need padding (option fused_pad)");
    return MKX_SUCCESS;
  }
  mkx_tp_choose_fused(c, op, args, g, out);
  return MKX_SUCCESS;
}

int mkx_ag_gemm_gpu_choose(MKX_Comm c, const void *args, const mkx_agreed *g,
                           mkx_path_choice *out) {
  return choose(c, MKX_TP_OP_AG, args, g, out);
}
int mkx_rs_gpu_choose(MKX_Comm c, const void *args, const mkx_agreed *g,
                      mkx_path_choice *out) {
  return choose(c, MKX_TP_OP_RS, args, g, out);
}
int mkx_ar_gpu_choose(MKX_Comm c, const void *args, const mkx_agreed *g,
                      mkx_path_choice *out) {
  return choose(c, MKX_TP_OP_AR, args, g, out);
}
#else
typedef int mkx_tp_paths_unused; /* ISO C: not an empty unit */
#endif
