/* What the files of the MoE calls' GPU path share: the plan, the
 * workspace's pieces and the functions one file calls in another
 * (src/ops/moe/moe_gpu.c says how a call runs, moe_ws.c how its workspace
 * is laid out).  C11; only built with CUDA. */
#ifndef MKX_OPS_MOE_MOE_GPU_INT_H
#define MKX_OPS_MOE_MOE_GPU_INT_H

#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime.h>
#include "moe/moe_engine.h"
#include "ops/fused/fused.h"
#include "ops/moe/moe_layout.h"
#include "ops/moe/moe_net.h"
#include "ops/op.h"
#include "ops/path.h"

enum { MOE_DISPATCH = 0, MOE_LAYER = 1 };

static inline const char *fn_of(int op) {
  return op == MOE_LAYER ? "MKX_Moe_layer" : "MKX_Moe_dispatch_gemm";
}

static inline int64_t round8(int64_t v) { return (v + 7) / 8 * 8; }
static inline int64_t round16(int64_t v) { return (v + 15) / 16 * 16; }
static inline size_t round256(size_t v) { return (v + 255) / 256 * 256; }

/* The workspace's pieces, in their order (moe_ws.c: what each holds). */
enum {
  W_A,
  W_SCALE,
  W_ORIGIN,
  W_ACT,
  W_Y,
  W_ROWS,
  W_DEST,
  W_OFFSETS,
  W_OWN,
  W_BASE,
  W_TARGET,
  W_SEG,
  W_DONE,
  W_ORDER,
  W_SLOT_AT,
  W_REC,
  W_STATUS,
  W_ROUTE,
  W_GEMM,
  W_W1,
  W_W2,
  W_XS,   /* fp8: X's scale rows, gathered beside A's (peers write it) */
  W_ACT8, /* fp8 layer: the activation in fp8 */
  W_ACTS, /* fp8 layer: its scales, one per row and 128 columns */
  W_END
};

typedef struct moe_ws {
  void *a, *act, *w1, *w2;
  float *scale, *y;
  int32_t *origin;
  int *rows, *dest, *offsets, *own, *base, *target, *seg, *seg_row, *done,
      *order, *slot_at, *rec, *status, *route_work, *gemm_work;
  int *gate; /* status[2], the verdict of a run that does not wait for its
              * routing (option moe_sync=no); NULL where it waits */
  int64_t lda, ldact, ldw1, ldw2;
  /* the fp8 layer's (moe_fp8.c) */
  float *xs, *acts;
  uint8_t *act8;
  int64_t ldxs, ldact8, ldacts;
  /* several nodes, this call's: the areas as the GPU addresses them, and
   * with the network driven by the GPU its descriptor (mine is the
   * region's start) */
  char *mine, *theirs;
  mkx_fused_net_desc net;
} moe_ws;

/* The plan: the workspace and where each piece sits in it (off[W_END]:
 * the bytes in all), the same on every rank. */
typedef struct moe_plan {
  mkx_path path; /* the table entry that made it (and its start counter) */
  int op, multi;
  int64_t experts;
  int nodes;        /* ranks of several nodes */
  int release;      /* rows released to the GEMM as they land (one node) */
  mkx_moe_net *net; /* several nodes: the pinned areas */
  /* several nodes: the kernels post the rows between nodes to the network
   * proxy (option hier_moe) */
  int proxy;
  int sync;     /* option moe_sync: the host waits for the routing */
  int kernel;   /* the grouped GEMM's (option moe_gemm, or by gemm_kernel) */
  int64_t tcap; /* tokens the rows are sized for */
  int fp8;      /* the fp8 GPU path, dispatch or layer (moe_fp8.c) */
  size_t off[W_END + 1];
  int64_t lda, ldact, ldw1, ldw2, ldxs, ldact8, ldacts;
  mkx_fused_ws *ws;
} moe_plan;

/* ---- the workspace (moe_ws.c) ---- */

/* The layout for tcap tokens (agreed values only); weights padded where
 * their row length is not a multiple of 8. */
void mkx_moe_ws_layout(const mkx_moe_args *a, MKX_Comm c, moe_plan *p);

/* Piece k of the workspace of global rank q, as this rank maps it; NULL
 * where the piece is empty. */
char *mkx_moe_ws_piece(MKX_Comm c, const moe_plan *p, int q, int k);
void mkx_moe_ws_place(MKX_Comm c, const moe_plan *p, moe_ws *w);

/* The user's weights, or their padded copy (rows of `cols` elements to
 * rows of ld). */
int mkx_moe_ws_weights(const void *src, int64_t rows, int64_t cols, int64_t ld,
                       void *copy, size_t es, cudaStream_t st, const char *fn,
                       const void **out);
/* The layer's W1: the user's where ffn is a multiple of 8, else a copy
 * with the gate half at column 0 and the up half at column round8(ffn)
 * (ldw1), so that the up half's loads start on 16-byte boundaries. */
int mkx_moe_ws_w1_weights(const mkx_moe_args *a, int64_t ep, const moe_ws *w,
                          size_t es, cudaStream_t st, const void **out);

/* ---- routing and its exchange (moe_route.c) ---- */

/* The bad input the GPU found in a run that did not wait for its routing
 * (option moe_sync=no), as its error; rec: the input record
 * (moe_engine.h); head: "MKX_Moe_layer", or the reporting call and "an
 * earlier MKX_Moe_layer". */
int mkx_moe_input_error(const int *rec, const char *head);

/* Routing and its status: *total, the rows this rank receives; *trunc,
 * a rank that receives more than its y_rows (dispatch) or -1; L, on
 * several ranks, the layout.  Without the host wait neither is known here
 * (*total: -1; the gate decides). */
int mkx_moe_route(MKX_Comm c, const moe_plan *p, const mkx_moe_args *a,
                  const moe_ws *w, cudaStream_t st, mkx_moe_layout *L,
                  int64_t *total, int *trunc);

/* ---- several nodes: the rows between nodes (moe_gpu_net.c) ---- */

/* The call's areas, written from the gather on (nothing in them is still
 * in use: mkx_moe_net_reserve waits for the previous call; a call driven by
 * the GPU ends after the proxy has sent all it posted, and the stream
 * waits here for the last call whose kernels drove the network). */
int mkx_moe_areas(MKX_Comm c, const moe_plan *p, const mkx_moe_args *a,
                  moe_ws *w, const mkx_moe_layout *L, cudaStream_t st);
/* Where this rank's slots' rows go: its own workspace (one rank), the
 * owners' (several), and on several nodes its send area for the owners
 * there. */
void mkx_moe_targets(MKX_Comm c, const moe_plan *p, const mkx_moe_args *a,
                     const moe_ws *w, const mkx_moe_layout *L, int scale,
                     int origin, mkx_moe_place *pl, mkx_moe_rows_at *at);
/* Several nodes, once the gather has ended: this rank's rows for other
 * nodes to their owners, and the rows it receives to their places (with
 * the scales and origins of dispatch). */
int mkx_moe_net_rows(MKX_Comm c, const moe_plan *p, const mkx_moe_args *a,
                     moe_ws *w, const mkx_moe_layout *L, int scale, int origin,
                     cudaStream_t st);
/* Several nodes, once W2 has ended: the outputs of the rows received
 * over the network back to their senders, into this rank's `mine` area
 * (the layout of its send area), where the combine reads them. */
int mkx_moe_net_outs(MKX_Comm c, const moe_plan *p, const mkx_moe_args *a,
                     moe_ws *w, const mkx_moe_layout *L, cudaStream_t st);

/* ---- the launches (moe_gpu.c) ---- */

/* Several ranks: all meet on the GPU at workspace word `off`. */
int mkx_moe_meet(MKX_Comm c, const moe_plan *p, int off, int where,
                 cudaStream_t st, const char *fn);

/* This rank's token rows into their owners' grouped rows (elements of
 * dtype's size), with their scales (weight, or 1) and origins where asked;
 * pl: where they went. */
int mkx_moe_push_rows(MKX_Comm c, const moe_plan *p, const mkx_moe_args *a,
                      moe_ws *w, const mkx_moe_layout *L, cudaStream_t st,
                      const float *weight, int scale, int origin, int *dest,
                      mkx_moe_place *pl);

/* ---- fp8 (moe_fp8.c) ---- */

/* Why the call's fp8 form cannot take the GPU path (NULL: it can): option
 * moe_fp8, one node (on several ranks X scales per token or block),
 * weights stored transposed, the layer's out 16-bit, hidden (and ffn)
 * multiples of 16. */
const char *mkx_moe_fp8_why(MKX_Comm c, int op, const mkx_moe_args *a);
/* Floats per gathered row of X's scales. */
int64_t mkx_moe_fp8_xs_floats(const mkx_moe_args *a);
/* The call's scales checked on the GPU, in the plan's workspace: with the
 * host wait (p->sync) by mkx_fused_scales_check, the ranks agreeing;
 * without, only the scan enqueued, which the verdict reads (_scan: that
 * scan's results for it; count 0 without fp8 scales).  _scale_name: the
 * name of the scan's array i in messages. */
int mkx_moe_fp8_scales_ok(MKX_Comm c, const moe_plan *p, const mkx_moe_args *a,
                          cudaStream_t st);
void mkx_moe_fp8_scan(MKX_Comm c, const moe_plan *p, const mkx_moe_args *a,
                      mkx_moe_scan *s);
const char *mkx_moe_fp8_scale_name(int i);
/* After the rows' gather: their scales gathered beside them into their
 * owners' workspaces (per-token and block layouts). */
int mkx_moe_fp8_rows_scales(MKX_Comm c, const moe_plan *p, const moe_ws *w,
                            const mkx_moe_args *a, const mkx_moe_place *pl,
                            cudaStream_t st, const char *fn);
/* The first grouped GEMM's fp8 operands (W transposed, n of its columns)
 * and scales into g. */
void mkx_moe_fp8_first(const mkx_moe_args *a, const moe_ws *w, int64_t n,
                       mkx_moe_gemm_desc *g);
/* The layer's activation (act_type) to fp8 by row and 128 columns, then the
 * W2 grouped GEMM's fp8 operands and scales into g (rows: its bound). */
int mkx_moe_fp8_second(const mkx_moe_args *a, const moe_ws *w, int act_type,
                       int64_t rows, mkx_moe_gemm_desc *g, cudaStream_t st);

#endif
