/* The path choice of the three tensor-parallel calls (src/ops/tp/paths.c),
 * of ring attention (src/ops/attn/attn_gpu.c) and of the MoE calls
 * (src/ops/moe/moe_gpu.c) on communicators described by hand: every branch
 * picks the entry it should, of the right call (AllGather+GEMM's starts
 * differ from the reductions'), and says why; attention's check turns
 * away what its engine cannot take, saying why.  Then what the path query
 * (mkx_path_info, behind MKX_Request_get_path) says of each path: mkx.h's
 * list of the paths a start of which may be captured, MoE only with
 * moe_sync=no, and the CTAs. */
#include <stdio.h>
#include <string.h>
#include "core/comm.h"
#include "core/error.h"
#include "ops/op.h"
#include "ops/attn/attn_gpu.h"
#include "ops/moe/moe_gpu.h"
#include "ops/fused/fused.h"
#include "ops/roles.h"
#include "../common/check.h"

typedef int (*choose_fn)(MKX_Comm, const void *, const mkx_agreed *,
                         mkx_path_choice *);
typedef int (*check_fn)(MKX_Comm, const void *, const mkx_agreed *);

/* Ranks numbered node by node, equal nodes (at most 8 ranks). */
static int node_of[8], local_of[8];

static struct MKX_Comm_s comm_of(int size, int nodes, int share, int shared,
                                 int overlap) {
  struct MKX_Comm_s c;
  memset(&c, 0, sizeof c);
  c.size = size;
  c.place.num_nodes = nodes;
  c.place.local_size = size / nodes;
  c.place.equal_nodes = 1;
  for (int q = 0; q < size; q++)
    node_of[q] = q / c.place.local_size, local_of[q] = q % c.place.local_size;
  c.place.node_of_rank = node_of;
  c.place.local_rank_of = local_of;
  c.share.mode = share;
  c.opt.shared_gpu = shared;
  c.opt.tp_overlap = overlap;
  c.opt.hier_gemm = MKX_HIER_GEMM_GPU;
  return c;
}

/* op: 0 ag, 1 rs, 2 ar; M the product's rows (AG: the agreed total). */
static void expect(struct MKX_Comm_s *c, int op, int64_t M, int adapt,
                   mkx_path want, const char *because, const char *what) {
  static const choose_fn fn[3] = {mkx_ag_gemm_gpu_choose, mkx_rs_gpu_choose,
                                  mkx_ar_gpu_choose};
  mkx_rs_ar_args red;
  mkx_ag_gemm_args ag;
  memset(&red, 0, sizeof red);
  memset(&ag, 0, sizeof ag);
  red.M = M;
  mkx_agreed g = {NULL, op == 0 ? M : 0, adapt,
                  adapt ? MKX_GPU_LOCAL_ADAPT : 0};
  mkx_path_choice ch;
  memset(&ch, 0, sizeof ch);
  const int rc =
      fn[op](c, op == 0 ? (const void *)&ag : (const void *)&red, &g, &ch);
  CHECK(rc == MKX_SUCCESS && ch.ops != NULL, "%s: chose", what);
  if (rc != MKX_SUCCESS || !ch.ops) return;
  CHECK(ch.ops->path == want, "%s: %s path, want %s", what,
        mkx_path_name(ch.ops->path), mkx_path_name(want));
  CHECK(ch.op == op, "%s: op %d, want %d", what, ch.op, op);
  CHECK(strstr(ch.why, because) != NULL, "%s: reason \"%s\" names \"%s\"", what,
        ch.why, because);
  /* the fused entries run the call's own start */
  if (want == MKX_PATH_TP_OVERLAP || want == MKX_PATH_TP_SPLIT)
    CHECK(ch.ops->start ==
              (op == 0 ? mkx_ag_gemm_gpu_start : mkx_rs_ar_gpu_start),
          "%s: the call's own start", what);
}

/* AllGather+GEMM's local bits: whether this rank's product fits the
 * one-kernel split path depends on its own n, so it goes into the
 * agreement (MKX_GPU_LOCAL_NO_ONE_KERNEL) rather than being decided alone.
 * Row-major bf16 operands with everything a multiple of 8: no adapter. */
static void one_kernel_bit(void) {
  struct MKX_Comm_s c =
      comm_of(2, 1, MKX_SHARE_NONE, MKX_SHARED_AUTO, MKX_OVERLAP_AUTO);
  static char buf[1024] __attribute__((aligned(256)));
  mkx_ag_gemm_args a;
  memset(&a, 0, sizeof a);
  a.A = buf, a.B = buf, a.C = buf;
  a.m_local = 128, a.k = 256, a.lda = 256, a.ldb = 256, a.ldc = 256;
  a.transb = MKX_TRANS, a.dtype = a.ctype = MKX_BF16;
  a.order = MKX_ROW_MAJOR;
  mkx_agreed g = {NULL, 256, 0, 0};
  for (int rep = 0; rep < 2; rep++) {
    c.opt.tp_ag_oneshot = rep ? MKX_ONESHOT_NO : MKX_ONESHOT_YES;
    a.n = 256, a.ldc = 256;
    unsigned bits = mkx_ag_gemm_gpu_local(&c, &a, &g);
    CHECK(!(bits & MKX_GPU_LOCAL_ADAPT), "aligned operands: no adapter");
    CHECK(!(bits & MKX_GPU_LOCAL_NO_ONE_KERNEL) == !rep,
          "n = 256, tp_ag_oneshot=%s: %s", rep ? "no" : "yes",
          rep ? "never one kernel" : "fits one kernel");
    a.n = 1 << 16, a.ldc = 1 << 16; /* 256 tiles on one rank: too many */
    bits = mkx_ag_gemm_gpu_local(&c, &a, &g);
    CHECK(bits & MKX_GPU_LOCAL_NO_ONE_KERNEL, "n = 65536: no one kernel");
  }
}

/* fp8 operands (mkx.h, the _scaled calls): the split path whatever M and
 * tp_overlap say (AllGather+GEMM: in place with tp_pull=yes), with the
 * reason; the check takes row-major operands with
 * B stored n x k and dimensions multiples of 16 and turns the others away
 * saying why (so they stay staged); no adapter, no one-kernel bit. */
static void fp8_paths(void) {
  static const choose_fn fn[3] = {mkx_ag_gemm_gpu_choose, mkx_rs_gpu_choose,
                                  mkx_ar_gpu_choose};
  static const check_fn check[3] = {mkx_ag_gemm_gpu_check, mkx_rs_gpu_check,
                                    mkx_ar_gpu_check};
  static char buf[1024] __attribute__((aligned(256)));
  struct MKX_Comm_s c =
      comm_of(2, 1, MKX_SHARE_NONE, MKX_SHARED_AUTO, MKX_OVERLAP_YES);
  for (int op = 0; op < 3; op++) {
    mkx_ag_gemm_args ag;
    mkx_rs_ar_args red;
    memset(&ag, 0, sizeof ag);
    memset(&red, 0, sizeof red);
    ag.A = ag.B = buf, ag.C = buf;
    ag.m_local = 4096, ag.k = 256, ag.lda = 256, ag.n = 256, ag.ldb = 256;
    ag.ldc = 256, ag.transb = MKX_TRANS, ag.dtype = MKX_FP8_E4M3;
    ag.ctype = MKX_BF16, ag.order = MKX_ROW_MAJOR;
    ag.sc.layout = MKX_SCALE_BLOCK;
    red.A = red.B = buf, red.C = buf;
    red.M = 8192, red.k_local = 256, red.lda = 256, red.n = 256;
    red.ldb = 256, red.ldc = 256, red.transb = MKX_TRANS;
    red.dtype = MKX_FP8_E5M2, red.ctype = MKX_FP32, red.order = MKX_ROW_MAJOR;
    red.sc.layout = MKX_SCALE_ROW;
    void *args = op == 0 ? (void *)&ag : (void *)&red;
    mkx_agreed g = {NULL, 8192, 0, 0, 0};
    const int ok = check[op](&c, args, &g);
    CHECK(ok == MKX_SUCCESS, "fp8 %s: the fused path takes it (%s)",
          mkx_path_name(MKX_PATH_TP_SPLIT), ok ? MKX_Get_last_error() : "ok");
    const unsigned bits = op == 0   ? mkx_ag_gemm_gpu_local(&c, args, &g)
                          : op == 1 ? mkx_rs_gpu_local(&c, args, &g)
                                    : mkx_ar_gpu_local(&c, args, &g);
    CHECK(!(bits & MKX_GPU_LOCAL_ADAPT), "fp8 op %d: no adapter", op);
    mkx_path_choice ch;
    memset(&ch, 0, sizeof ch);
    const int rc = fn[op](&c, args, &g, &ch);
    CHECK(rc == MKX_SUCCESS && ch.ops && ch.ops->path == MKX_PATH_TP_SPLIT &&
              strstr(ch.why, "fp8") != NULL,
          "fp8 op %d, M = 8192, tp_overlap=yes: %s path (\"%s\")", op,
          ch.ops ? mkx_path_name(ch.ops->path) : "no", ch.why);
    if (ch.ops)
      CHECK(ch.ops->start ==
                (op == 0 ? mkx_ag_gemm_gpu_start : mkx_rs_ar_gpu_start),
            "fp8 op %d: the call's own start", op);
    /* option tp_pull=yes: AllGather+GEMM reads the rows in place where
     * every rank's rows are whole tiles, else (and the reductions) split */
    int64_t whole[2] = {4096, 4096}, ragged[2] = {4000, 4192};
    for (int w = 0; w < 2; w++) {
      struct MKX_Comm_s cp = c;
      cp.opt.tp_pull = MKX_PULL_YES;
      mkx_agreed gp = g;
      gp.local = w ? ragged : whole;
      memset(&ch, 0, sizeof ch);
      const int r = fn[op](&cp, args, &gp, &ch);
      const mkx_path want =
          op == 0 && !w ? MKX_PATH_TP_PULL : MKX_PATH_TP_SPLIT;
      CHECK(r == MKX_SUCCESS && ch.ops && ch.ops->path == want &&
                strstr(ch.why, "tp_pull=yes") != NULL,
            "fp8 op %d, tp_pull=yes, %s rows: %s path (want %s; \"%s\")", op,
            w ? "ragged" : "whole-tile",
            ch.ops ? mkx_path_name(ch.ops->path) : "no", mkx_path_name(want),
            ch.why);
    }
    /* what stays staged, and why */
    static const struct {
      const char *what, *because;
    } no[] = {{"column-major", "row-major"},
              {"B stored k x n", "n x k"},
              {"k 24", "multiples of 16"},
              {"a captured call with scales", "capture"}};
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
      mkx_ag_gemm_args a2 = ag;
      mkx_rs_ar_args r2 = red;
      mkx_agreed g2 = g;
      struct MKX_Comm_s c2 = c;
      if (i == 0) a2.order = r2.order = MKX_COL_MAJOR;
      if (i == 1) a2.transb = r2.transb = MKX_NO_TRANS;
      if (i == 2) a2.k = r2.k_local = 24;
      if (i == 3) g2.captured = 1;
      const int r = check[op](&c2, op == 0 ? (void *)&a2 : (void *)&r2, &g2);
      const char *msg = MKX_Get_last_error();
      CHECK(r == MKX_ERR_UNSUPPORTED && strstr(msg, no[i].because),
            "fp8 op %d, %s: turned away (%d, \"%s\" names \"%s\")", op,
            no[i].what, r, msg, no[i].because);
    }
    /* several nodes: the GPU driven network path and hier_gemm=nvlink are
     * 16-bit code, so hier_gemm=gpu whatever the option says */
    struct MKX_Comm_s nodes =
        comm_of(4, 2, MKX_SHARE_NONE, MKX_SHARED_AUTO, MKX_OVERLAP_AUTO);
    for (int h = 0; h < 3; h++) {
      static const int hg[3] = {MKX_HIER_GEMM_PROXY, MKX_HIER_GEMM_NVLINK,
                                MKX_HIER_GEMM_AUTO};
      nodes.opt.hier_gemm = hg[h];
      memset(&ch, 0, sizeof ch);
      const int r = fn[op](&nodes, args, &g, &ch);
      CHECK(r == MKX_SUCCESS && ch.ops && ch.ops->path == MKX_PATH_HIER_GPU &&
                strstr(ch.why, "fp8") != NULL,
            "fp8 op %d on two nodes, hier_gemm %d: %s path (\"%s\")", op, hg[h],
            ch.ops ? mkx_path_name(ch.ops->path) : "no", ch.why);
    }
  }
}

/* Ring attention: one rank, one node, several nodes; and the check's
 * reasons for what stays on the staged path. */
static void attention(void) {
  static char buf[4096] __attribute__((aligned(256)));
  mkx_attn_args a;
  memset(&a, 0, sizeof a);
  a.Q = a.K = a.V = buf;
  a.O = buf;
  a.batch = 1, a.seq_local = 16, a.heads_q = 4, a.heads_kv = 2;
  a.head_dim = 64, a.scale = 0.125, a.dtype = MKX_BF16;
  mkx_agreed g = {NULL, 16, 0, 0};
  static const struct {
    int size, nodes;
    mkx_path want;
    const char *because;
  } ch[] = {{1, 1, MKX_PATH_ATTN, "one rank"},
            {4, 1, MKX_PATH_ATTN_RING, "4 ranks of one node"},
            {4, 2, MKX_PATH_ATTN_HIER, "2 nodes"}};
  for (size_t i = 0; i < sizeof ch / sizeof ch[0]; i++) {
    struct MKX_Comm_s c = comm_of(ch[i].size, ch[i].nodes, MKX_SHARE_NONE,
                                  MKX_SHARED_AUTO, MKX_OVERLAP_AUTO);
    mkx_path_choice out;
    memset(&out, 0, sizeof out);
    const int rc = mkx_attn_gpu_choose(&c, &a, &g, &out);
    CHECK(rc == MKX_SUCCESS && out.ops && out.ops->path == ch[i].want,
          "attention, %d ranks on %d node(s): %s path", ch[i].size, ch[i].nodes,
          out.ops ? mkx_path_name(out.ops->path) : "no");
    CHECK(strstr(out.why, ch[i].because) != NULL,
          "attention: reason \"%s\" names \"%s\"", out.why, ch[i].because);
  }
  /* several nodes: the network part by the host unless hier_attn is
   * proxy or auto and a ring is mapped for the GPU (none here: no
   * endpoint) */
  static const struct {
    int hier_attn;
    const char *because;
    int one_queue;
  } by[] = {{MKX_HIER_ATTN_HOST, "hier_attn=host", 0},
            {MKX_HIER_ATTN_PROXY, "no network ring mapped for the GPU", 0},
            {MKX_HIER_ATTN_AUTO, "no network ring mapped for the GPU", 0},
            {MKX_HIER_ATTN_PROXY, "CUDA_DEVICE_MAX_CONNECTIONS=1", 1}};
  for (size_t i = 0; i < sizeof by / sizeof by[0]; i++) {
    struct MKX_Comm_s c =
        comm_of(2, 2, MKX_SHARE_NONE, MKX_SHARED_AUTO, MKX_OVERLAP_AUTO);
    c.opt.hier_attn = by[i].hier_attn;
    c.one_queue = by[i].one_queue;
    mkx_path_choice out;
    memset(&out, 0, sizeof out);
    const int rc = mkx_attn_gpu_choose(&c, &a, &g, &out);
    CHECK(rc == MKX_SUCCESS && out.ops && out.ops->path == MKX_PATH_ATTN_HIER,
          "attention on 2 nodes, hier_attn=%s: %s path",
          by[i].hier_attn == MKX_HIER_ATTN_HOST    ? "host"
          : by[i].hier_attn == MKX_HIER_ATTN_PROXY ? "proxy"
                                                   : "auto",
          out.ops ? mkx_path_name(out.ops->path) : "no");
    CHECK(strstr(out.why, by[i].because) != NULL,
          "attention: reason \"%s\" names \"%s\"", out.why, by[i].because);
  }
  static const struct {
    MKX_Datatype dt;
    int64_t head_dim;
    int nodes;
    const char *because;
  } no[] = {{MKX_FP32, 64, 1, "bf16 and fp16"},
            {MKX_BF16, 136, 1, "head_dim is over 128"},
            {MKX_FP16, 36, 1, "multiple of 8"},
            {MKX_BF16, 64, 2, "network transport"}};
  for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
    struct MKX_Comm_s c =
        comm_of(no[i].nodes == 1 ? 1 : 4, no[i].nodes, MKX_SHARE_NONE,
                MKX_SHARED_AUTO, MKX_OVERLAP_AUTO);
    a.dtype = no[i].dt, a.head_dim = no[i].head_dim;
    mkx_error_clear();
    const int rc = mkx_attn_gpu_check(&c, &a, &g);
    CHECK(rc == MKX_ERR_UNSUPPORTED, "attention check, case %zu: unsupported",
          i);
    CHECK(strstr(MKX_Get_last_error(), no[i].because) != NULL,
          "attention check: \"%s\" names \"%s\"", MKX_Get_last_error(),
          no[i].because);
  }
  a.dtype = MKX_BF16, a.head_dim = 96; /* padded to 128: still the GPU's */
  struct MKX_Comm_s one =
      comm_of(1, 1, MKX_SHARE_NONE, MKX_SHARED_AUTO, MKX_OVERLAP_AUTO);
  CHECK(mkx_attn_gpu_check(&one, &a, &g) == MKX_SUCCESS,
        "attention check: head_dim 96 on one rank takes the GPU path (%s)",
        MKX_Get_last_error());
}

/* MoE: one rank, one node, several nodes; across nodes the network by
 * the host unless hier_moe is proxy or auto and a ring is mapped for the
 * GPU (none here: no endpoint). */
static void moe(void) {
  static const struct {
    int size, nodes, hier_moe, one_queue;
    mkx_path want;
    const char *because;
  } ch[] = {
      {1, 1, MKX_HIER_MOE_AUTO, 0, MKX_PATH_MOE, "one rank"},
      {4, 1, MKX_HIER_MOE_AUTO, 0, MKX_PATH_MOE_NODE, "4 ranks of one node"},
      {4, 2, MKX_HIER_MOE_HOST, 0, MKX_PATH_MOE_NODES, "option hier_moe=host"},
      {4, 2, MKX_HIER_MOE_AUTO, 0, MKX_PATH_MOE_NODES,
       "no network ring mapped for the GPU"},
      {2, 2, MKX_HIER_MOE_PROXY, 0, MKX_PATH_MOE_NODES,
       "no network ring mapped for the GPU"},
      {2, 2, MKX_HIER_MOE_PROXY, 1, MKX_PATH_MOE_NODES,
       "CUDA_DEVICE_MAX_CONNECTIONS=1"}};
  mkx_agreed g;
  memset(&g, 0, sizeof g);
  for (size_t i = 0; i < sizeof ch / sizeof ch[0]; i++)
    for (int layer = 0; layer < 2; layer++) {
      struct MKX_Comm_s c = comm_of(ch[i].size, ch[i].nodes, MKX_SHARE_NONE,
                                    MKX_SHARED_AUTO, MKX_OVERLAP_AUTO);
      c.opt.hier_moe = ch[i].hier_moe;
      c.one_queue = ch[i].one_queue;
      mkx_path_choice out;
      memset(&out, 0, sizeof out);
      const int rc = layer ? mkx_moe_layer_gpu_choose(&c, NULL, &g, &out)
                           : mkx_moe_dispatch_gpu_choose(&c, NULL, &g, &out);
      CHECK(rc == MKX_SUCCESS && out.ops && out.ops->path == ch[i].want,
            "MoE %s, %d ranks on %d node(s), case %zu: %s path, want %s",
            layer ? "layer" : "dispatch", ch[i].size, ch[i].nodes, i,
            out.ops ? mkx_path_name(out.ops->path) : "no",
            mkx_path_name(ch[i].want));
      CHECK(out.op == layer, "MoE: op %d, want %d", out.op, layer);
      CHECK(strstr(out.why, ch[i].because) != NULL,
            "MoE: reason \"%s\" names \"%s\"", out.why, ch[i].because);
    }
}

/* mkx.h, "CUDA graphs": the paths whose starts may be captured. */
/* The roles' table (ops/roles.h): which paths run them, and their CTAs on
 * a rank of a whole H100 (132), a quarter of one (33) and of 10 CTAs: the
 * forward a sixteenth and the node sums a quarter, each 1-8; the kernels
 * beside them the rest, at least 1. */
static void roles(void) {
  static const struct {
    int ctas, fwd, sum;
  } t[] = {{132, 8, 8}, {33, 2, 8}, {10, 1, 2}, {1, 1, 1}};
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
    struct MKX_Comm_s c =
        comm_of(4, 2, MKX_SHARE_MPS, MKX_SHARED_AUTO, MKX_OVERLAP_AUTO);
    c.share.ctas = t[i].ctas;
    const int f = mkx_role_ctas(&c, MKX_ROLE_NET_FWD),
              s = mkx_role_ctas(&c, MKX_ROLE_NODE_SUM);
    const int fl = mkx_role_leave(&c, MKX_ROLE_NET_FWD),
              sl = mkx_role_leave(&c, MKX_ROLE_NODE_SUM);
    const int want_fl = t[i].ctas - t[i].fwd > 1 ? t[i].ctas - t[i].fwd : 1,
              want_sl = t[i].ctas - t[i].sum > 1 ? t[i].ctas - t[i].sum : 1;
    CHECK(f == t[i].fwd && s == t[i].sum && fl == want_fl && sl == want_sl,
          "roles on %d CTAs: forward %d (want %d), node sums %d (want %d), "
          "beside them %d and %d (want %d and %d)",
          t[i].ctas, f, t[i].fwd, s, t[i].sum, fl, sl, want_fl, want_sl);
  }
  /* pinned by hand (options net_fwd_ctas, net_sum_ctas): as given, up to
   * the rank's CTAs less one */
  struct MKX_Comm_s p =
      comm_of(4, 2, MKX_SHARE_MPS, MKX_SHARED_AUTO, MKX_OVERLAP_AUTO);
  p.share.ctas = 33;
  p.opt.net_fwd_ctas = 12, p.opt.net_sum_ctas = 40;
  CHECK(mkx_role_ctas(&p, MKX_ROLE_NET_FWD) == 12 &&
            mkx_role_leave(&p, MKX_ROLE_NET_FWD) == 21 &&
            mkx_role_ctas(&p, MKX_ROLE_NODE_SUM) == 32 &&
            mkx_role_leave(&p, MKX_ROLE_NODE_SUM) == 1,
        "roles pinned on 33 CTAs: forward 12 (beside it 21), node sums 40 "
        "capped at 32 (beside them 1)");
  CHECK(mkx_path_roles(MKX_PATH_HIER_PROXY) ==
                (1u << MKX_ROLE_NET_FWD | 1u << MKX_ROLE_NODE_SUM) &&
            mkx_path_roles(MKX_PATH_ATTN_NET) == 1u << MKX_ROLE_NET_FWD &&
            mkx_path_roles(MKX_PATH_TP_OVERLAP) == 0,
        "the paths that run roles: several nodes driven by the GPU");
  for (int r = 0; r < MKX_ROLE_COUNT; r++) {
    const mkx_role_range *g = mkx_role_range_of((mkx_role)r);
    CHECK(g && g->name && g->part > 0 && g->lo >= 1 && g->hi >= g->lo,
          "role %d (%s): a share and a range", r, g ? g->name : "NULL");
  }
}

static void path_info(void) {
  static const mkx_path yes[] = {
      MKX_PATH_TP_OVERLAP, MKX_PATH_TP_SPLIT,  MKX_PATH_TP_ONE_KERNEL,
      MKX_PATH_TP_ADAPTED, MKX_PATH_TP_PULL,   MKX_PATH_HIER_PROXY,
      MKX_PATH_ATTN,       MKX_PATH_ATTN_RING, MKX_PATH_ATTN_NET,
      MKX_PATH_MOE,        MKX_PATH_MOE_NODE};
  struct MKX_Comm_s c =
      comm_of(4, 1, MKX_SHARE_MPS, MKX_SHARED_AUTO, MKX_OVERLAP_AUTO);
  c.share.ctas = 30;
  c.share.ctx_sms = 32;
  c.share.dev_sms = 132;
  c.opt.moe_sync = 0;
  for (int p = 0; p < MKX_PATH_COUNT; p++) {
    int want = 0, cap = -1, ctas = -1;
    const char *name = NULL;
    for (size_t i = 0; i < sizeof yes / sizeof *yes; i++)
      want |= (int)yes[i] == p;
    CHECK_RC(mkx_path_info(&c, (mkx_path)p, &name, &cap, &ctas), MKX_SUCCESS,
             "path query of %s", mkx_path_name((mkx_path)p));
    CHECK(name && !strcmp(name, mkx_path_name((mkx_path)p)),
          "path query: the name of %s", mkx_path_name((mkx_path)p));
    CHECK(cap == want, "%s: %s in a CUDA graph", mkx_path_name((mkx_path)p),
          want ? "may be captured" : "is not captured");
    const int host = p == MKX_PATH_HOST || p == MKX_PATH_STAGED;
    const int want_ctas = host ? 0 : p == MKX_PATH_TP_PULL ? 32 : 30;
    CHECK(ctas == want_ctas, "%s: %d CTAs (expected %d)",
          mkx_path_name((mkx_path)p), ctas, want_ctas);
  }
  int cap = -1, ctas = -1;
  const char *name = NULL;
  c.opt.moe_sync = 1;
  mkx_path_info(&c, MKX_PATH_MOE, &name, &cap, &ctas);
  CHECK(cap == 0, "MoE on one rank's GPU with moe_sync=yes: not captured");
  c.share.ctas = 0;
  mkx_path_info(&c, MKX_PATH_TP_OVERLAP, &name, &cap, &ctas);
  CHECK(ctas == 132, "no CTA cap: one per SM of the GPU (%d)", ctas);
  mkx_path_info(&c, MKX_PATH_COUNT, &name, &cap, &ctas);
  CHECK(!strcmp(name, "none") && cap == 0 && ctas == 0,
        "no path yet: \"none\"");
  CHECK_RC(mkx_path_info(&c, MKX_PATH_HOST, NULL, &cap, &ctas),
           MKX_ERR_NULL_POINTER, "path query: name NULL");
}

int main(void) {
  for (int op = 0; op < 3; op++) {
    struct MKX_Comm_s own =
        comm_of(2, 1, MKX_SHARE_NONE, MKX_SHARED_AUTO, MKX_OVERLAP_AUTO);
    expect(&own, op, 2047, 0, MKX_PATH_TP_SPLIT, "2047 < 1024", "small M");
    expect(&own, op, 2048, 0, MKX_PATH_TP_OVERLAP, "2048 >= 1024", "large M");
    expect(&own, op, 2048, 1, MKX_PATH_TP_ADAPTED, "fused_pad", "adapter");
    own.opt.tp_overlap = MKX_OVERLAP_NO;
    expect(&own, op, 1 << 20, 0, MKX_PATH_TP_SPLIT, "tp_overlap=no",
           "option tp_overlap=no");
    own.opt.tp_overlap = MKX_OVERLAP_YES;
    expect(&own, op, 16, 0, MKX_PATH_TP_OVERLAP, "tp_overlap=yes",
           "option tp_overlap=yes");

    struct MKX_Comm_s sliced =
        comm_of(2, 1, MKX_SHARE_TIMESLICED, MKX_SHARED_AUTO, MKX_OVERLAP_YES);
    expect(&sliced, op, 1 << 20, 0, MKX_PATH_TP_SPLIT, "shared_gpu=auto",
           "time slices");
    sliced.opt.shared_gpu = MKX_SHARED_FUSED;
    expect(&sliced, op, 1 << 20, 0, MKX_PATH_TP_OVERLAP, "tp_overlap=yes",
           "time slices, option shared_gpu=fused");

    struct MKX_Comm_s mps =
        comm_of(4, 1, MKX_SHARE_MPS, MKX_SHARED_AUTO, MKX_OVERLAP_AUTO);
    expect(&mps, op, 8192, 0, MKX_PATH_TP_OVERLAP, ">= 1024", "MPS, large M");
    mps.opt.shared_gpu = MKX_SHARED_SPLIT;
    expect(&mps, op, 8192, 0, MKX_PATH_TP_SPLIT, "shared_gpu=split",
           "MPS, option shared_gpu=split");

    struct MKX_Comm_s nodes =
        comm_of(4, 2, MKX_SHARE_NONE, MKX_SHARED_AUTO, MKX_OVERLAP_AUTO);
    expect(&nodes, op, 8192, 1, MKX_PATH_HIER_GPU, "hier_gemm=gpu",
           "two nodes (before the adapter)");
    /* hier_gemm=proxy or auto where it does not apply: as nvlink, saying
     * why (every call also runs on equal nodes of several ranks) */
    nodes.opt.hier_gemm = MKX_HIER_GEMM_PROXY;
    expect(&nodes, op, 8192, 0, MKX_PATH_HIER_NVLINK, "no network ring mapped",
           "two nodes of two, hier_gemm=proxy");
    nodes.place.equal_nodes = 0;
    expect(&nodes, op, 8192, 0, MKX_PATH_HIER_NVLINK, "nodes of unequal sizes",
           "nodes of unequal sizes, hier_gemm=proxy");
    nodes.place.equal_nodes = 1;
    nodes.opt.hier_gemm = MKX_HIER_GEMM_AUTO;
    expect(&nodes, op, 8192, 0, MKX_PATH_HIER_NVLINK,
           "hier_gemm=auto, not driven by the GPU: no network ring mapped",
           "two nodes of two, hier_gemm=auto");
    if (op == 0) {
      nodes.opt.hier_gemm = MKX_HIER_GEMM_NVLINK;
      expect(&nodes, op, 8192, 0, MKX_PATH_HIER_NVLINK,
             "option hier_gemm=nvlink", "two nodes of two, hier_gemm=nvlink");
      struct MKX_Comm_s ones =
          comm_of(2, 2, MKX_SHARE_NONE, MKX_SHARED_AUTO, MKX_OVERLAP_AUTO);
      ones.opt.hier_gemm = MKX_HIER_GEMM_PROXY;
      expect(&ones, op, 8192, 0, MKX_PATH_HIER_NVLINK, "no network ring mapped",
             "two nodes of one, no endpoint, hier_gemm=proxy");
      ones.opt.hier_gemm = MKX_HIER_GEMM_AUTO;
      expect(&ones, op, 8192, 0, MKX_PATH_HIER_NVLINK, "no network ring mapped",
             "two nodes of one, no endpoint, hier_gemm=auto");
    }
    /* every stream of a rank in one hardware queue: the host drives the
     * network, whatever hier_gemm asks */
    struct MKX_Comm_s queue =
        comm_of(2, 2, MKX_SHARE_NONE, MKX_SHARED_AUTO, MKX_OVERLAP_AUTO);
    queue.one_queue = 1;
    queue.opt.hier_gemm = MKX_HIER_GEMM_PROXY;
    expect(&queue, op, 8192, 0, MKX_PATH_HIER_NVLINK,
           "CUDA_DEVICE_MAX_CONNECTIONS=1",
           "two nodes of one, one hardware queue, hier_gemm=proxy");
  }
  one_kernel_bit();
  fp8_paths();
  attention();
  moe();
  path_info();
  roles();
  return check_done("test_path_choice");
}
