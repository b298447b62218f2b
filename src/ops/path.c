/* Path names and per-process counters (path.h). */
#include <stdatomic.h>
#include "ops/path.h"

static const char *const names[MKX_PATH_COUNT] = {
    [MKX_PATH_HOST] = "host",
    [MKX_PATH_STAGED] = "staged",
    [MKX_PATH_TP_OVERLAP] = "fused overlapped",
    [MKX_PATH_TP_SPLIT] = "fused split",
    [MKX_PATH_TP_ONE_KERNEL] = "fused split in one kernel",
    [MKX_PATH_TP_ADAPTED] = "fused, operands adapted",
    [MKX_PATH_TP_PULL] = "fused, operands read in place",
    [MKX_PATH_HIER_GPU] = "several nodes (hier_gemm=gpu)",
    [MKX_PATH_HIER_NVLINK] = "several nodes (hier_gemm=nvlink)",
    [MKX_PATH_HIER_PROXY] =
        "several nodes, driven by the GPU (hier_gemm=proxy)",
    [MKX_PATH_ATTN] = "attention engine",
    [MKX_PATH_ATTN_RING] = "attention ring, one node",
    [MKX_PATH_ATTN_HIER] = "attention ring, several nodes",
    [MKX_PATH_ATTN_NET] =
        "attention ring, several nodes, driven by the GPU (hier_attn=proxy)",
    [MKX_PATH_MOE] = "MoE on one rank's GPU",
    [MKX_PATH_MOE_NODE] = "MoE on one node's GPUs",
    [MKX_PATH_MOE_NODES] = "MoE on several nodes' GPUs",
    [MKX_PATH_MOE_NET] =
        "MoE on several nodes' GPUs, driven by the GPU (hier_moe=proxy)",
};

static const char capturable[MKX_PATH_COUNT] = {
    [MKX_PATH_TP_OVERLAP] = 1,    [MKX_PATH_TP_SPLIT] = 1,
    [MKX_PATH_TP_ONE_KERNEL] = 1, [MKX_PATH_TP_ADAPTED] = 1,
    [MKX_PATH_TP_PULL] = 1,       [MKX_PATH_HIER_PROXY] = 1,
    [MKX_PATH_ATTN] = 1,          [MKX_PATH_ATTN_RING] = 1,
    [MKX_PATH_ATTN_NET] = 1,      [MKX_PATH_MOE] = 1,
    [MKX_PATH_MOE_NODE] = 1,
};

static atomic_long starts[MKX_PATH_COUNT];
static _Thread_local mkx_path tracked = MKX_PATH_COUNT;

const char *mkx_path_name(mkx_path p) {
  return p >= 0 && p < MKX_PATH_COUNT ? names[p] : "?";
}

int mkx_path_capturable(mkx_path p) {
  return p >= 0 && p < MKX_PATH_COUNT && capturable[p];
}

void mkx_path_count(mkx_path p) {
  if (p < 0 || p >= MKX_PATH_COUNT) return;
  atomic_fetch_add(&starts[p], 1);
  if (tracked == MKX_PATH_COUNT ||
      (tracked == MKX_PATH_TP_SPLIT && p == MKX_PATH_TP_ONE_KERNEL))
    tracked = p;
}

void mkx_path_track_begin(void) { tracked = MKX_PATH_COUNT; }

mkx_path mkx_path_track_end(void) { return tracked; }

long mkx_path_starts(mkx_path p) {
  return p >= 0 && p < MKX_PATH_COUNT ? atomic_load(&starts[p]) : 0;
}
