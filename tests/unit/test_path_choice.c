/* The path choice of the three tensor-parallel calls (src/ops/tp_paths.c)
 * on communicators described by hand: every branch picks the entry it
 * should, of the right call (AllGather+GEMM's starts differ from the
 * reductions'), and says why. */
#include <stdio.h>
#include <string.h>
#include "core/comm.h"
#include "ops/op.h"
#include "ops/tp_host.h"
#include "../common/check.h"

typedef int (*choose_fn)(MKX_Comm, const void *, const mkx_agreed *,
                         mkx_path_choice *);

static struct MKX_Comm_s comm_of(int size, int nodes, int share, int shared,
                                 int overlap) {
  struct MKX_Comm_s c;
  memset(&c, 0, sizeof c);
  c.size = size;
  c.place.num_nodes = nodes;
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
  mkx_gemm_red_args red;
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
    CHECK(
        ch.ops->start == (op == 0 ? mkx_ag_gemm_gpu_start : mkx_red_gpu_start),
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
  }
  one_kernel_bit();
  return check_done("test_path_choice");
}
