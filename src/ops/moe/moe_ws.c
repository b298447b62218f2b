/* The workspace of an MoE call on the GPU (the data of one of the
 * communicator's pooled workspaces, held by the plan, the same layout on
 * every rank; N = rows it can receive: num_tokens x topk on one rank,
 * every rank's tokens x topk on several; each piece rounded up to 256
 * bytes).  Written or read by peers:
 *   A       N x round8(hidden)      dtype, the grouped rows
 *   scale   N                       fp32 (dispatch with weights)
 *   origin  N x 3                   int (several ranks, dispatch)
 *   act     N x round8(ffn)         dtype (layer)
 *   y       N x hidden              fp32 (layer)
 *   xs      N x 0, 1 or kb          fp32: fp8, X's scale rows, gathered
 *                                   beside A's rows (dispatch and layer)
 *   (fp8: A's rows of round16(hidden) bytes; the layer's act in out's
 *   type, and of this rank's own: the activation in fp8 N x round16(ffn)
 *   and its scales N x ceil(ffn / 128) floats)
 *   records (several ranks)         int: every rank's record, then scratch
 *                                   (mkx_moe_records_ints)
 * This rank's own:
 *   rows, dest N                    int: each slot's row here / on its owner
 *   offsets Ep + 1, own E + 1, base E, route and GEMM work  int
 *   target P, segments 2 E + 2  int (several nodes: moe_layout.h)
 *   done E, order E + 1, slot_at N  int (rows released as they land)
 *   status 4                        int: first bad slot, rows, gate
 *   W copy  padded weights          dtype (only where needed) */
#include <stdint.h>
#include "core/error.h"

#if HAVE_CUDA
#include "core/cuda_rc.h"
#include "ops/moe/moe_gpu_int.h"

void mkx_moe_ws_layout(const mkx_moe_args *a, MKX_Comm c, moe_plan *p) {
  const size_t es = MKX_Type_size(a->dtype);
  const int fp8 = p->fp8;
  /* fp8: rows of 16-byte multiples (the tensor maps); the activation
   * first in out's type */
  const size_t es_act = fp8 ? MKX_Type_size(a->ytype) : es;
  const int64_t lda = fp8 ? round16(a->hidden) : round8(a->hidden);
  const int64_t xs = fp8 ? mkx_moe_fp8_xs_floats(a) : 0;
  const int64_t gf = (a->ffn + 127) / 128;
  const int64_t E = a->num_experts, ep = E / c->size, N = p->tcap * a->topk;
  const int layer = p->op == MOE_LAYER, multi = p->multi;
  /* the layer's W1 copy puts the up half at a multiple of 8 columns */
  const int64_t wcols1 = layer ? 2 * round8(a->ffn) : a->n;
  /* (fp8 reads the weights as they are: K-major, 16-byte rows) */
  const int copy1 = !fp8 && (layer ? a->ffn % 8 != 0 : a->n % 8 != 0);
  const size_t sizes[W_END] = {
      [W_A] = (size_t)(N * lda) * es,
      [W_SCALE] = layer ? 0 : (size_t)N * sizeof(float),
      [W_ORIGIN] = layer || !multi ? 0 : (size_t)N * 3 * sizeof(int32_t),
      [W_ACT] = layer ? (size_t)(N * round8(a->ffn)) * es_act : 0,
      [W_Y] = layer ? (size_t)(N * a->hidden) * sizeof(float) : 0,
      [W_ROWS] = (size_t)N * sizeof(int),
      [W_DEST] = multi ? (size_t)N * sizeof(int) : 0,
      [W_OFFSETS] = (size_t)(ep + 1) * sizeof(int),
      [W_OWN] = multi ? (size_t)(E + 1) * sizeof(int) : 0,
      [W_BASE] = multi ? (size_t)E * sizeof(int) : 0,
      [W_TARGET] = p->nodes ? (size_t)c->size * sizeof(int) : 0,
      [W_SEG] = p->nodes ? (size_t)(2 * E + 2) * sizeof(int) : 0,
      [W_DONE] = p->release ? (size_t)E * sizeof(int) : 0,
      [W_ORDER] = p->release ? (size_t)(E + 1) * sizeof(int) : 0,
      [W_SLOT_AT] = p->release ? (size_t)(N + 1) * sizeof(int) : 0,
      [W_REC] =
          multi ? (size_t)mkx_moe_records_ints(c->size, (int)E) * sizeof(int)
                : 0,
      [W_STATUS] = 4 * sizeof(int),
      [W_ROUTE] = (size_t)mkx_moe_route_work_ints(p->tcap, (int)a->topk,
                                                  (int)(multi ? E : ep)) *
                  sizeof(int),
      [W_GEMM] = (size_t)mkx_moe_gemm_work_ints((int)ep) * sizeof(int),
      [W_W1] = copy1 ? (size_t)(ep * a->hidden * round8(wcols1)) * es : 0,
      [W_W2] = !fp8 && layer && a->hidden % 8
                   ? (size_t)(ep * a->ffn * round8(a->hidden)) * es
                   : 0,
      [W_XS] = (size_t)(N * xs) * sizeof(float),
      [W_ACT8] = fp8 && layer ? (size_t)(N * round16(a->ffn)) : 0,
      [W_ACTS] = fp8 && layer ? (size_t)(N * gf) * sizeof(float) : 0};
  size_t at = 0;
  for (int k = 0; k < W_END; k++) {
    p->off[k] = at;
    at += round256(sizes[k]);
  }
  p->off[W_END] = at;
  p->lda = lda;
  p->ldxs = xs;
  p->ldact8 = round16(a->ffn);
  p->ldacts = gf;
  p->ldact = round8(a->ffn);
  p->ldw1 = round8(wcols1);
  p->ldw2 = round8(a->hidden);
}

char *mkx_moe_ws_piece(MKX_Comm c, const moe_plan *p, int q, int k) {
  if (p->off[k + 1] == p->off[k]) return NULL;
  return mkx_fused_ws_data(p->ws, c->place.local_rank_of[q]) + p->off[k];
}

void mkx_moe_ws_place(MKX_Comm c, const moe_plan *p, moe_ws *w) {
  const int me = c->rank;
  w->a = mkx_moe_ws_piece(c, p, me, W_A);
  w->scale = (float *)mkx_moe_ws_piece(c, p, me, W_SCALE);
  w->origin = (int32_t *)mkx_moe_ws_piece(c, p, me, W_ORIGIN);
  w->act = mkx_moe_ws_piece(c, p, me, W_ACT);
  w->y = (float *)mkx_moe_ws_piece(c, p, me, W_Y);
  w->rows = (int *)mkx_moe_ws_piece(c, p, me, W_ROWS);
  w->dest = (int *)mkx_moe_ws_piece(c, p, me, W_DEST);
  w->offsets = (int *)mkx_moe_ws_piece(c, p, me, W_OFFSETS);
  w->own = (int *)mkx_moe_ws_piece(c, p, me, W_OWN);
  w->base = (int *)mkx_moe_ws_piece(c, p, me, W_BASE);
  w->target = (int *)mkx_moe_ws_piece(c, p, me, W_TARGET);
  w->seg = (int *)mkx_moe_ws_piece(c, p, me, W_SEG);
  w->seg_row = w->seg ? w->seg + p->experts + 1 : NULL;
  w->done = (int *)mkx_moe_ws_piece(c, p, me, W_DONE);
  w->order = (int *)mkx_moe_ws_piece(c, p, me, W_ORDER);
  w->slot_at = (int *)mkx_moe_ws_piece(c, p, me, W_SLOT_AT);
  w->rec = (int *)mkx_moe_ws_piece(c, p, me, W_REC);
  w->status = (int *)mkx_moe_ws_piece(c, p, me, W_STATUS);
  w->gate = p->sync ? NULL : w->status + 2;
  w->route_work = (int *)mkx_moe_ws_piece(c, p, me, W_ROUTE);
  w->gemm_work = (int *)mkx_moe_ws_piece(c, p, me, W_GEMM);
  w->w1 = mkx_moe_ws_piece(c, p, me, W_W1);
  w->w2 = mkx_moe_ws_piece(c, p, me, W_W2);
  w->lda = p->lda;
  w->ldact = p->ldact;
  w->ldw1 = p->ldw1;
  w->ldw2 = p->ldw2;
  w->xs = (float *)mkx_moe_ws_piece(c, p, me, W_XS);
  w->act8 = (uint8_t *)mkx_moe_ws_piece(c, p, me, W_ACT8);
  w->acts = (float *)mkx_moe_ws_piece(c, p, me, W_ACTS);
  w->ldxs = p->ldxs;
  w->ldact8 = p->ldact8;
  w->ldacts = p->ldacts;
}

int mkx_moe_ws_weights(const void *src, int64_t rows, int64_t cols, int64_t ld,
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

int mkx_moe_ws_w1_weights(const mkx_moe_args *a, int64_t ep, const moe_ws *w,
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
#else
typedef int mkx_moe_ws_unused; /* ISO C: not an empty unit */
#endif
