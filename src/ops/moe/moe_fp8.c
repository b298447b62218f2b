/* The MoE calls' _scaled forms with fp8 tokens and weights on the GPU (one
 * rank, option moe_fp8=yes, weights stored transposed: each expert's W (or
 * W1) n x hidden, W2 hidden x ffn, K contiguous, as fp8 tensor cores read
 * them).  Dispatch runs as the bf16 dispatch (moe_gpu.c) with the scale
 * check first, the rows' scales gathered beside them and the grouped GEMM
 * in fp8 (mkx_moe_fp8_first), Y in ytype.  The layer, all on the user's
 * stream after the prologue:
 *   1. the scales read back and checked (finite, > 0: the contract's
 *      MKX_ERR_INVALID_ARG before anything is written), a stream
 *      synchronisation, so a capture is refused;
 *   2. routing (moe_route.c), the fp8 token rows gathered (1-byte
 *      elements) and, for per-token and block scales, each row's scales
 *      gathered the same way;
 *   3. the W1 grouped GEMM in fp8 (K blocks of 128 summed apart and added
 *      in fp32 times their scales) with SwiGLU in its epilogue, the
 *      activation rounded to out's type;
 *   4. the activation rounded to dtype with a scale per row and 128
 *      columns (its largest magnitude over the type's largest finite value),
 *      the input of W2's fp8 product; the W2 grouped GEMM in fp32;
 *   5. the weighted combine in slot order into out, rounded once.
 * Step 4 is where this path departs from the host's fp32 activation: the
 * activation carries dtype's precision (e4m3: 3 bits of mantissa) into W2. */
#include <stdint.h>
#include "core/error.h"

#if HAVE_CUDA
#include "core/cuda_rc.h"
#include "gemm/gemm_engine.h"
#include "host/dtype.h"
#include "host/scales.h"
#include "ops/moe/moe_gpu_int.h"

const char *mkx_moe_fp8_why(MKX_Comm c, int op, const mkx_moe_args *a) {
  if (!c->opt.moe_fp8) return "option moe_fp8=no";
  if (a->transw != MKX_TRANS)
    return "fp8 weights must be stored transposed (transw = MKX_TRANS: K "
           "contiguous, as fp8 tensor cores read them)";
  if (c->size > 1) return "fp8 runs on one rank";
  if (op == MOE_LAYER && a->ytype != MKX_BF16 && a->ytype != MKX_FP16)
    return "the fp8 layer writes bf16 or fp16 out";
  if (a->hidden % 16 || (op == MOE_LAYER && a->ffn % 16))
    return "fp8 needs hidden (and the layer's ffn) multiples of 16";
  return NULL;
}

int64_t mkx_moe_fp8_xs_floats(const mkx_moe_args *a) {
  return a->sc.layout == MKX_SCALE_TENSOR
             ? 0
             : mkx_scales_row_floats(a->sc.layout, a->hidden);
}

int mkx_moe_fp8_scales_ok(int op, const mkx_moe_args *a, cudaStream_t st) {
  const int64_t ep = a->num_experts, n = op == MOE_LAYER ? 2 * a->ffn : a->n;
  const mkx_scale_array arr[3] = {
      {"scales->a", a->sc.a,
       mkx_scales_a_count(a->sc.layout, a->num_tokens, a->hidden)},
      {"scales->b", a->sc.b,
       ep * mkx_scales_b_count(a->sc.layout, a->hidden, n)},
      {"scales2->b", a->sc2.b,
       op == MOE_LAYER
           ? ep * mkx_scales_b_count(a->sc2.layout, a->ffn, a->hidden)
           : 0}};
  return mkx_fused_scales_read(fn_of(op), arr, 3, NULL, st);
}

int mkx_moe_fp8_rows_scales(MKX_Comm c, const moe_ws *w, const mkx_moe_args *a,
                            const mkx_moe_place *pl, cudaStream_t st,
                            const char *fn) {
  if (w->ldxs == 0) return MKX_SUCCESS;
  mkx_moe_rows_at at = {{w->xs}, {NULL}, {NULL}, w->ldxs};
  return mkx_fused_launch_rc(
      mkx_moe_gather_run(a->sc.a, a->num_tokens, (int)a->topk, w->ldxs,
                         (int)sizeof(float), w->rows, NULL, c->rank, pl, &at,
                         NULL, NULL, st),
      fn, "gather of the scales");
}

/* A weight's scales (stored as the weight, transposed: [E][nb][kb]) for
 * the engine: expert, column and K block strides. */
static void w_scales(const MKX_Scales *sc, int64_t k, int64_t n,
                     mkx_moe_fp8_scales *s) {
  const int64_t kb = (k + 127) / 128, nb = (n + 127) / 128;
  s->w_layout = sc->layout;
  s->w = sc->b;
  s->w_e = sc->layout == MKX_SCALE_TENSOR ? 1
           : sc->layout == MKX_SCALE_ROW  ? n
                                          : nb * kb;
  s->w_col = sc->layout == MKX_SCALE_ROW ? 1 : kb;
  s->w_kb = 1;
}

static int run(int rc, const char *what) {
  return mkx_fused_launch_rc(rc, "MKX_Moe_layer", what);
}

void mkx_moe_fp8_first(const mkx_moe_args *a, const moe_ws *w, int64_t n,
                       mkx_moe_gemm_desc *g) {
  mkx_moe_fp8_scales s = {0};
  s.a_layout = a->sc.layout;
  s.a = a->sc.a;
  if (w->ldxs > 0) { /* each row's scales, gathered beside it */
    s.a = w->xs;
    s.a_row = w->ldxs;
    s.a_kb = 1;
  }
  w_scales(&a->sc, a->hidden, n, &s);
  g->ab_type = mkx_fused_gemm_type(a->dtype);
  g->w = a->W;
  g->ldw = a->hidden;
  g->kernel = MKX_MOE_GEMM_SWAP;
  g->fp8 = s;
}

int mkx_moe_layer_fp8(MKX_Comm c, const moe_plan *p, const mkx_moe_args *a,
                      moe_ws *w, mkx_moe_layout *L, cudaStream_t st) {
  const int64_t ep = a->num_experts;
  const int ab = mkx_fused_gemm_type(a->dtype),
            ot = mkx_fused_gemm_type(a->ytype);
  MKX_TRY(mkx_moe_fp8_scales_ok(MOE_LAYER, a, st));
  int64_t total = 0;
  int trunc = -1;
  MKX_TRY(mkx_moe_route(c, p, a, w, st, L, &total, &trunc));
  if (a->num_tokens == 0) return MKX_SUCCESS;
  mkx_moe_place pl;
  MKX_TRY(mkx_moe_push_rows(c, p, a, w, L, st, NULL, 0, 0, w->dest, &pl));
  const int64_t rows = total >= 0 ? total : p->tcap * a->topk;
  mkx_moe_gemm_desc g1 = {.experts = (int)ep,
                          .k = a->hidden,
                          .n = a->ffn,
                          .a = w->a,
                          .lda = w->lda,
                          .a_rows = rows,
                          .offsets = w->offsets,
                          .c = w->act,
                          .ldc = w->ldact,
                          .c_type = ot,
                          .swiglu = 1,
                          .work = w->gemm_work,
                          .up_col = a->ffn,
                          .gate = w->gate};
  mkx_moe_fp8_first(a, w, 2 * a->ffn, &g1);
  MKX_TRY(run(mkx_moe_gemm_run(&g1, st), "W1 grouped GEMM"));
  const mkx_moe_quant_desc q = {.x = w->act,
                                .ldx = w->ldact,
                                .x_type = ot,
                                .rows_end = w->offsets + ep,
                                .max_rows = rows,
                                .cols = a->ffn,
                                .q = w->act8,
                                .ldq = w->ldact8,
                                .scales = w->acts,
                                .lds = w->ldacts,
                                .fp8_type = ab};
  MKX_TRY(run(mkx_moe_quant_run(&q, st), "activation to fp8"));
  mkx_moe_fp8_scales s2 = {
      .a_layout = MKX_SCALE_BLOCK, .a = w->acts, .a_row = w->ldacts, .a_kb = 1};
  w_scales(&a->sc2, a->ffn, a->hidden, &s2);
  mkx_moe_gemm_desc g2 = {.experts = (int)ep,
                          .k = a->ffn,
                          .n = a->hidden,
                          .a = w->act8,
                          .lda = w->ldact8,
                          .a_rows = rows,
                          .offsets = w->offsets,
                          .w = a->W2,
                          .ldw = a->ffn,
                          .c = w->y,
                          .ldc = a->hidden,
                          .ab_type = ab,
                          .c_type = MKX_GEMM_FP32,
                          .work = w->gemm_work,
                          .gate = w->gate,
                          .kernel = MKX_MOE_GEMM_SWAP,
                          .fp8 = s2};
  MKX_TRY(run(mkx_moe_gemm_run(&g2, st), "W2 grouped GEMM"));
  mkx_moe_outs_at y = {{w->y}, a->hidden};
  return run(
      mkx_moe_combine_run(&pl, &y, w->rows, a->topk_weight, a->num_tokens,
                          (int)a->topk, a->hidden, a->out, ot, st),
      "combine");
}
#else
typedef int mkx_moe_fp8_unused; /* ISO C: not an empty unit */
#endif
