/* Device buffers on several nodes (options hier_gemm=gpu and nvlink): the
 * plan both share, and the nvlink variant's entry points. */
#ifndef MKX_OPS_NODES_HIER_H
#define MKX_OPS_NODES_HIER_H

#include <stdint.h>
#include <cuda_runtime.h>
#include "core/comm.h"
#include "ops/fused/fused.h"

struct mkx_agreed;

typedef struct hg_plan {
  int op;
  int64_t *rows;    /* [size]: AG each rank's m_local; RS/AR blocks */
  void *dtmp;       /* device: gathered A (AG) or fp32 partial (RS/AR);
                         nvlink: row-permuted A (RS/AR) or this column's
                         rows of A (AG) */
  int nvlink;       /* hier_gemm=nvlink: the fields below */
  MKX_Comm node;    /* the node's ranks (owned by the communicator) */
  int64_t col_rows; /* rows of this rank's column (every node's rank of
                         this local number) */
  void *dcol;       /* device: RS/AR the node's fp32 sum of the column's
                         rows; AG the product in permuted row order */
  void *daout;      /* device, AG with A_out: gathered A, permuted */
  float *hcol;      /* pinned host, RS/AR: dcol's copy (pageable memory
                         would make each slice's copy wait for its GEMM) */
  /* Pinned host, made with the plan (fresh malloc'd ones cost page
   * faults every call): AG this rank's rows of A (hsend) and its column's
   * rows as gathered over the network (hrows); RS/AR this rank's fp32 sum
   * (hsend), rounded (hrows), AR every rank's rounded rows (hout). */
  char *hsend, *hrows, *hout;
  int host;            /* mkx_hier_nvlink_host: host buffers and memory */
  mkx_tp_fp8_host fp8; /* hier_gemm=gpu, fp8: this rank's scales, read back */
} hg_plan;

const char *mkx_hier_op_name(int op);

int mkx_hier_nvlink_check(MKX_Comm c, int op, const void *args,
                          const struct mkx_agreed *g);
int mkx_hier_nvlink_plan(MKX_Comm c, int op, const void *args,
                         const struct mkx_agreed *g, void **plan);
int mkx_hier_nvlink_start(MKX_Comm c, hg_plan *p, const void *args,
                          cudaStream_t st);
void mkx_hier_nvlink_free(hg_plan *p);
/* For the CPU tests of the nvlink variant's logic (row permutations,
 * slices, chunks, column collectives): one call on host buffers, its node
 * part as the host path's call on the node communicator.  op: MKX_TP_OP_*,
 * args: its mkx_*_args.  Collective. */
int mkx_hier_nvlink_host(MKX_Comm c, int op, const void *args);

#endif
