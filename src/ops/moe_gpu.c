/* MKX_Moe_dispatch_gemm and MKX_Moe_layer on the GPU, one rank
 * (kernels/moe).  Several ranks take the staged path.
 *
 * A call, all on the user's stream:
 *   1. routing (mkx_moe_route_run): each slot's row in the grouped layout,
 *      the experts' offsets, the first bad slot and the total;
 *   2. the status (8 bytes) back to the host, stream synchronised: bad ids
 *      and truncation are returned by the call itself, as on the host
 *      path, and nothing is written after either.  This wait is why the
 *      path cannot be captured in a CUDA graph;
 *   3. the token rows gathered into the grouped layout (with the gate
 *      weight as row scale for dispatch, origins where asked);
 *   4. dispatch: one grouped GEMM into Y, rows scaled, then expert_rows;
 *      layer: the W1 grouped GEMM with SwiGLU in its epilogue (the
 *      activation rounded to dtype, the input of W2's tensor-core product),
 *      the W2 grouped GEMM in fp32, and the weighted combine in slot order
 *      into out, rounded once.
 * Weights whose row length is not a multiple of 8 elements (the tensor
 * maps' stride rule) are first copied into a padded workspace copy.
 *
 * Workspace (the data of one of the communicator's pooled workspaces,
 * held by the plan; N = num_tokens x topk rows at most; each piece
 * rounded up to 256 bytes):
 *   A       N x round8(hidden)      dtype, the gathered rows
 *   scale   N                       fp32 (dispatch with weights)
 *   act     N x round8(ffn)         dtype (layer)
 *   y       N x hidden              fp32 (layer)
 *   rows    N                       int, row of each slot
 *   offsets Ep + 1, status 2, route work, prefix work   int
 *   W copy  padded weights          dtype (only where needed) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/error.h"
#include "core/log.h"
#include "ops/op.h"
#include "ops/path.h"

#if HAVE_CUDA
#include "core/cuda_rc.h"
#include "gemm/gemm_engine.h"
#include "moe/moe_engine.h"
#include "ops/moe_gpu.h"
#include "ops/tp_host.h"

enum { MOE_DISPATCH = 0, MOE_LAYER = 1 };

static const char *fn_of(int op) {
  return op == MOE_LAYER ? "MKX_Moe_layer" : "MKX_Moe_dispatch_gemm";
}

static int64_t round8(int64_t v) { return (v + 7) / 8 * 8; }
static size_t round256(size_t v) { return (v + 255) / 256 * 256; }

static int aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

static int check(MKX_Comm c, int op, const mkx_moe_args *a) {
  const char *fn = fn_of(op);
  const int64_t ep = a->num_experts / (c->size > 0 ? c->size : 1);
  const int64_t width = op == MOE_LAYER ? a->ffn : a->n;
  if (a->dtype != MKX_BF16 && a->dtype != MKX_FP16)
    return mkx_error(MKX_ERR_UNSUPPORTED,
                     "%s: GPU path takes bf16 and fp16 only", fn);
  if (c->size > 1)
    return mkx_error(MKX_ERR_UNSUPPORTED,
                     "%s: GPU path takes one rank (%d ranks)", fn, c->size);
  if (a->num_tokens * a->topk >= MKX_MOE_NO_BAD_SLOT || ep > 8192 ||
      a->hidden >= (1ll << 30) || width >= (1ll << 29) ||
      a->num_experts >= (1ll << 31))
    return mkx_error(MKX_ERR_UNSUPPORTED,
                     "%s: GPU path takes num_tokens x topk below 2^31 - 2^24, "
                     "at most 8192 local experts, hidden below 2^30 and n or "
                     "ffn below 2^29",
                     fn);
  if (!aligned16(a->W) || (op == MOE_LAYER && !aligned16(a->W2)) ||
      (op == MOE_DISPATCH && !aligned16(a->Y)))
    return mkx_error(MKX_ERR_UNSUPPORTED,
                     "%s: GPU path needs the weights%s 16-byte aligned", fn,
                     op == MOE_DISPATCH ? " and Y" : "");
  return MKX_SUCCESS;
}

int mkx_moe_dispatch_gpu_check(MKX_Comm c, const void *args,
                               const mkx_agreed *g) {
  (void)g;
  return check(c, MOE_DISPATCH, args);
}

int mkx_moe_layer_gpu_check(MKX_Comm c, const void *args, const mkx_agreed *g) {
  (void)g;
  return check(c, MOE_LAYER, args);
}

/* ---- workspace ---- */

typedef struct moe_ws {
  char *base;
  void *a, *act, *w1, *w2;
  float *scale, *y;
  int *rows, *offsets, *status, *route_work, *gemm_work;
  int64_t lda, ldact, ldw1, ldw2;
} moe_ws;

typedef struct ws_plan {
  size_t at;
} ws_plan;

static size_t take(ws_plan *p, size_t bytes) {
  const size_t at = p->at;
  p->at += round256(bytes);
  return at;
}

/* Offsets of every piece in one allocation; weights padded where their
 * row length is not a multiple of 8. */
static size_t ws_layout(const mkx_moe_args *a, int op, int64_t ep, moe_ws *w,
                        size_t *off) {
  const size_t es = MKX_Type_size(a->dtype);
  const int64_t N = a->num_tokens * a->topk;
  const int layer = op == MOE_LAYER;
  /* the layer's W1 copy puts the up half at a multiple of 8 columns */
  const int64_t wcols1 = layer ? 2 * round8(a->ffn) : a->n;
  const int copy1 = layer ? a->ffn % 8 != 0 : a->n % 8 != 0;
  ws_plan p = {0};
  w->lda = round8(a->hidden);
  w->ldact = round8(a->ffn);
  w->ldw1 = round8(wcols1);
  w->ldw2 = round8(a->hidden);
  off[0] = take(&p, (size_t)(N * w->lda) * es);
  off[1] = take(&p, layer ? 0 : (size_t)N * sizeof(float));
  off[2] = take(&p, layer ? (size_t)(N * w->ldact) * es : 0);
  off[3] = take(&p, layer ? (size_t)(N * a->hidden) * sizeof(float) : 0);
  off[4] = take(&p, (size_t)N * sizeof(int));
  off[5] = take(&p, (size_t)(ep + 1) * sizeof(int));
  off[6] = take(&p, 2 * sizeof(int));
  off[7] = take(&p, (size_t)mkx_moe_route_work_ints(a->num_tokens, (int)a->topk,
                                                    (int)ep) *
                        sizeof(int));
  off[8] = take(&p, (size_t)mkx_moe_gemm_work_ints((int)ep) * sizeof(int));
  off[9] = take(&p, copy1 ? (size_t)(ep * a->hidden * w->ldw1) * es : 0);
  off[10] = take(
      &p, layer && a->hidden % 8 ? (size_t)(ep * a->ffn * w->ldw2) * es : 0);
  return p.at;
}

/* The pieces at base. */
static void ws_place(const mkx_moe_args *a, int op, int64_t ep, char *base,
                     moe_ws *w) {
  size_t off[11];
  const size_t bytes = ws_layout(a, op, ep, w, off);
  w->base = base;
  w->a = w->base + off[0];
  w->scale = (float *)(w->base + off[1]);
  w->act = w->base + off[2];
  w->y = (float *)(w->base + off[3]);
  w->rows = (int *)(w->base + off[4]);
  w->offsets = (int *)(w->base + off[5]);
  w->status = (int *)(w->base + off[6]);
  w->route_work = (int *)(w->base + off[7]);
  w->gemm_work = (int *)(w->base + off[8]);
  w->w1 = off[9] != off[10] ? w->base + off[9] : NULL;
  w->w2 = bytes != off[10] ? w->base + off[10] : NULL;
}

/* The user's weights, or their padded copy (rows of `cols` elements to
 * rows of ld). */
static int weights(const void *src, int64_t rows, int64_t cols, int64_t ld,
                   void *copy, size_t es, cudaStream_t st, const char *fn,
                   const void **out) {
  *out = src;
  if (cols == ld) return MKX_SUCCESS;
  MKX_CUDA_TRY(cudaMemcpy2DAsync(copy, (size_t)ld * es, src, (size_t)cols * es,
                                 (size_t)cols * es, (size_t)rows,
                                 cudaMemcpyDeviceToDevice, st),
               fn);
  *out = copy;
  return MKX_SUCCESS;
}

/* The layer's W1: the user's where ffn is a multiple of 8, else a copy
 * with the gate half at column 0 and the up half at column round8(ffn)
 * (ldw1), so that the up half's loads start on 16-byte boundaries. */
static int w1_weights(const mkx_moe_args *a, int64_t ep, const moe_ws *w,
                      size_t es, cudaStream_t st, const void **out) {
  const char *fn = fn_of(MOE_LAYER);
  const size_t spitch = (size_t)(2 * a->ffn) * es, half = (size_t)a->ffn * es;
  *out = a->W;
  if (a->ffn % 8 == 0) return MKX_SUCCESS;
  for (int h = 0; h < 2; h++)
    MKX_CUDA_TRY(
        cudaMemcpy2DAsync(
            (char *)w->w1 + (size_t)h * (size_t)round8(a->ffn) * es,
            (size_t)w->ldw1 * es, (const char *)a->W + h * half, spitch, half,
            (size_t)(ep * a->hidden), cudaMemcpyDeviceToDevice, st),
        fn);
  *out = w->w1;
  return MKX_SUCCESS;
}

/* ---- the call ---- */

/* Routing, and its status on the host: bad ids and truncation are the
 * call's result, as on the host path. */
static int route(MKX_Comm c, int op, const mkx_moe_args *a, int64_t ep,
                 const moe_ws *w, cudaStream_t st, int64_t *total) {
  const char *fn = fn_of(op);
  mkx_moe_route_desc r = {
      a->num_tokens, (int)a->topk, (int)a->num_experts, 0,
      (int)ep,       a->topk_ids,  w->offsets,          w->rows,
      w->status,     w->route_work};
  MKX_TRY(mkx_tp_launch_rc(mkx_moe_route_run(&r, st), fn, "routing"));
  int status[2];
  MKX_CUDA_TRY(cudaMemcpyAsync(status, w->status, sizeof status,
                               cudaMemcpyDeviceToHost, st),
               fn);
  MKX_CUDA_TRY(cudaStreamSynchronize(st), fn);
  *total = status[1];
  if (status[0] != MKX_MOE_NO_BAD_SLOT) {
    int32_t id = 0;
    MKX_CUDA_TRY(cudaMemcpy(&id, a->topk_ids + status[0], sizeof id,
                            cudaMemcpyDeviceToHost),
                 fn);
    return mkx_error(
        MKX_ERR_INVALID_ARG, "%s: topk_ids[%lld][%lld] = %d on rank %d %s", fn,
        (long long)(status[0] / a->topk), (long long)(status[0] % a->topk),
        (int)id, c->rank,
        id >= 0 && id < a->num_experts ? "repeats an expert of the same token"
                                       : "is outside [0, num_experts)");
  }
  return MKX_SUCCESS;
}

static int dispatch(MKX_Comm c, const mkx_moe_args *a, int64_t ep,
                    const moe_ws *w, cudaStream_t st) {
  const char *fn = fn_of(MOE_DISPATCH);
  const int ty = mkx_tp_gemm_type(a->dtype);
  const int es = (int)MKX_Type_size(a->dtype);
  int64_t total = 0;
  MKX_TRY(route(c, MOE_DISPATCH, a, ep, w, st, &total));
  MKX_TRY(mkx_tp_launch_rc(
      mkx_moe_counts_run(w->offsets, (int)ep, a->expert_rows, st), fn,
      "counts"));
  if (total > a->y_rows)
    return mkx_error(MKX_ERR_TRUNCATE,
                     "%s: rank %d receives %lld rows but y_rows = %lld "
                     "(expert_rows holds the counts needed)",
                     fn, c->rank, (long long)total, (long long)a->y_rows);
  MKX_TRY(mkx_tp_launch_rc(
      mkx_moe_gather_run(a->X, a->num_tokens, (int)a->topk, a->hidden, es,
                         w->rows, a->topk_weight, c->rank, w->a, w->lda,
                         a->topk_weight ? w->scale : NULL, a->origin, st),
      fn, "gather"));
  const void *wt = NULL;
  MKX_TRY(weights(a->W, ep * a->hidden, a->n, w->ldw1, w->w1, (size_t)es, st,
                  fn, &wt));
  mkx_moe_gemm_desc g = {
      (int)ep, a->hidden,   a->n,       w->a,
      w->lda,  total,       w->offsets, wt,
      w->ldw1, a->Y,        a->n,       a->topk_weight ? w->scale : NULL,
      ty,      ty,          0,          0,
      0,       w->gemm_work};
  return mkx_tp_launch_rc(mkx_moe_gemm_run(&g, st), fn, "grouped GEMM");
}

static int layer(MKX_Comm c, const mkx_moe_args *a, int64_t ep, const moe_ws *w,
                 cudaStream_t st) {
  const char *fn = fn_of(MOE_LAYER);
  const int ty = mkx_tp_gemm_type(a->dtype);
  const int es = (int)MKX_Type_size(a->dtype);
  int64_t total = 0;
  MKX_TRY(route(c, MOE_LAYER, a, ep, w, st, &total));
  if (a->num_tokens == 0) return MKX_SUCCESS;
  MKX_TRY(mkx_tp_launch_rc(
      mkx_moe_gather_run(a->X, a->num_tokens, (int)a->topk, a->hidden, es,
                         w->rows, NULL, c->rank, w->a, w->lda, NULL, NULL, st),
      fn, "gather"));
  const void *w1 = NULL, *w2 = NULL;
  MKX_TRY(w1_weights(a, ep, w, (size_t)es, st, &w1));
  MKX_TRY(weights(a->W2, ep * a->ffn, a->hidden, w->ldw2, w->w2, (size_t)es, st,
                  fn, &w2));
  mkx_moe_gemm_desc g1 = {(int)ep,
                          a->hidden,
                          a->ffn,
                          w->a,
                          w->lda,
                          total,
                          w->offsets,
                          w1,
                          w1 == a->W ? 2 * a->ffn : w->ldw1,
                          w->act,
                          w->ldact,
                          NULL,
                          ty,
                          ty,
                          1,
                          0,
                          0,
                          w->gemm_work,
                          w1 == a->W ? 0 : round8(a->ffn)};
  MKX_TRY(mkx_tp_launch_rc(mkx_moe_gemm_run(&g1, st), fn, "W1 grouped GEMM"));
  mkx_moe_gemm_desc g2 = {
      (int)ep, a->ffn,  a->hidden, w->act,      w->ldact, total, w->offsets,
      w2,      w->ldw2, w->y,      a->hidden,   NULL,     ty,    MKX_GEMM_FP32,
      0,       0,       0,         w->gemm_work};
  MKX_TRY(mkx_tp_launch_rc(mkx_moe_gemm_run(&g2, st), fn, "W2 grouped GEMM"));
  return mkx_tp_launch_rc(
      mkx_moe_combine_run(w->y, a->hidden, w->rows, a->topk_weight,
                          a->num_tokens, (int)a->topk, a->hidden, a->out, ty,
                          st),
      fn, "combine");
}

typedef struct moe_plan {
  int op;
  mkx_tp_ws *ws;
} moe_plan;

/* One rank: its own sizes are the agreed ones, so the pool's collective
 * decision is trivially alike. */
int mkx_moe_gpu_plan(MKX_Comm c, int op, const void *args, const mkx_agreed *g,
                     void **plan) {
  const mkx_moe_args *a = args;
  moe_plan *p = calloc(1, sizeof *p);
  (void)g;
  if (!p) return mkx_error(MKX_ERR_NOMEM, "%s: plan", fn_of(op));
  p->op = op;
  moe_ws w;
  size_t off[11];
  mkx_tp_need need = {1, 1, ws_layout(a, op, a->num_experts / c->size, &w, off),
                      0};
  const int rc = mkx_tp_ws_acquire(c, &need, &p->ws);
  if (rc != MKX_SUCCESS) {
    free(p);
    return rc;
  }
  *plan = p;
  return MKX_SUCCESS;
}

void mkx_moe_gpu_free(MKX_Comm c, void *plan) {
  moe_plan *p = plan;
  (void)c;
  if (!p) return;
  mkx_tp_ws_release(p->ws);
  free(p);
}

int mkx_moe_gpu_start(MKX_Comm c, void *plan, const void *args,
                      MKX_Stream stream) {
  const moe_plan *p = plan;
  const mkx_moe_args *a = args;
  cudaStream_t st = (cudaStream_t)stream;
  const int64_t ep = a->num_experts / c->size;
  moe_ws w;
  enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  MKX_CUDA_TRY(cudaStreamIsCapturing(st, &cs), fn_of(p->op));
  if (cs != cudaStreamCaptureStatusNone)
    return mkx_error(MKX_ERR_UNSUPPORTED,
                     "%s: cannot be captured in a CUDA graph (each run waits "
                     "for its routing)",
                     fn_of(p->op));
  MKX_TRY(mkx_tp_begin(c, p->ws, fn_of(p->op), stream, 1, MKX_PATH_MOE));
  ws_place(a, p->op, ep, mkx_tp_ws_data(p->ws, c->place.local_rank), &w);
  MKX_TRY(p->op == MOE_LAYER ? layer(c, a, ep, &w, st)
                             : dispatch(c, a, ep, &w, st));
  return mkx_tp_end(p->ws, stream);
}

static const mkx_path_ops moe_one = {MKX_PATH_MOE, mkx_moe_gpu_plan,
                                     mkx_moe_gpu_start, mkx_moe_gpu_free};

static int choose(int op, mkx_path_choice *out) {
  out->ops = &moe_one;
  out->op = op;
  snprintf(out->why, sizeof out->why,
           "one rank: routing, grouped expert GEMMs%s on the GPU",
           op == MOE_LAYER ? ", SwiGLU and combine" : "");
  return MKX_SUCCESS;
}

int mkx_moe_dispatch_gpu_choose(MKX_Comm c, const void *args,
                                const mkx_agreed *g, mkx_path_choice *out) {
  (void)c, (void)args, (void)g;
  return choose(MOE_DISPATCH, out);
}

int mkx_moe_layer_gpu_choose(MKX_Comm c, const void *args, const mkx_agreed *g,
                             mkx_path_choice *out) {
  (void)c, (void)args, (void)g;
  return choose(MOE_LAYER, out);
}
#else
typedef int mkx_moe_gpu_unused; /* ISO C: not an empty unit */
#endif
