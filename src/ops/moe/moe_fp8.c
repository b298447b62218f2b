/* The MoE calls' _scaled forms with fp8 tokens and weights on the GPU
 * (option moe_fp8=yes; one node; weights stored transposed: each expert's
 * W (or W1) n x hidden, W2 hidden x ffn, K contiguous, as fp8 tensor cores
 * read them).  They run as the bf16 calls (moe_gpu.c) but for:
 *   - the scales checked first, on the GPU (finite, > 0: the contract's
 *     MKX_ERR_INVALID_ARG with nothing written): with moe_sync=yes the host
 *     waits for the verdict (a stream synchronisation, so a capture is
 *     refused) and the ranks agree on it; with moe_sync=no the routing's
 *     verdict on the GPU reads it, as it reads the ids (mkx_moe_fp8_scan);
 *   - the fp8 rows gathered as 1-byte elements and, for per-token and block
 *     scales, each row's scales gathered beside it into its owner's
 *     workspace before the ranks meet (rows are never released early);
 *   - the grouped GEMMs in fp8 (K blocks of 128 summed apart and added in
 *     fp32 times their scales), dispatch's Y and the layer's activation and
 *     out in ytype;
 *   - the layer's activation rounded to dtype with a scale per row and 128
 *     columns (its largest magnitude over the type's largest finite value),
 *     the input of W2's fp8 product: where this path departs from the
 *     host's fp32 activation (e4m3: 3 bits of mantissa into W2). */
#include <stdint.h>
#include <string.h>
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
  if (c->place.num_nodes > 1) return "fp8 runs on one node";
  if (c->size > 1 && a->sc.layout == MKX_SCALE_TENSOR)
    return "per-tensor X scales on several ranks run staged (each row would "
           "need its sender's scale)";
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

static const char *const scale_names[MKX_MOE_SCAN_ARRAYS] = {
    "scales->a", "scales->b", "scales2->b"};

const char *mkx_moe_fp8_scale_name(int i) {
  return i >= 0 && i < MKX_MOE_SCAN_ARRAYS ? scale_names[i] : "scales";
}

/* The call's scale arrays (this rank's), in mkx_moe_scan's order; their
 * total count. */
static int64_t scale_arrays(MKX_Comm c, int op, const mkx_moe_args *a,
                            mkx_scale_array arr[MKX_MOE_SCAN_ARRAYS]) {
  const int64_t ep = a->num_experts / c->size,
                n = op == MOE_LAYER ? 2 * a->ffn : a->n;
  const int64_t count[MKX_MOE_SCAN_ARRAYS] = {
      mkx_scales_a_count(a->sc.layout, a->num_tokens, a->hidden),
      ep * mkx_scales_b_count(a->sc.layout, a->hidden, n),
      op == MOE_LAYER
          ? ep * mkx_scales_b_count(a->sc2.layout, a->ffn, a->hidden)
          : 0};
  const float *ptr[MKX_MOE_SCAN_ARRAYS] = {a->sc.a, a->sc.b, a->sc2.b};
  int64_t total = 0;
  for (int i = 0; i < MKX_MOE_SCAN_ARRAYS; i++) {
    arr[i] = (mkx_scale_array){scale_names[i], ptr[i], count[i]};
    total += count[i];
  }
  return total;
}

int mkx_moe_fp8_scales_ok(MKX_Comm c, const moe_plan *p, const mkx_moe_args *a,
                          cudaStream_t st) {
  mkx_scale_array arr[MKX_MOE_SCAN_ARRAYS];
  const int64_t total = scale_arrays(c, p->op, a, arr);
  if (p->sync)
    return mkx_comm_agree_rc(
        c,
        mkx_fused_scales_check(fn_of(p->op), arr, MKX_MOE_SCAN_ARRAYS, p->ws,
                               NULL, st),
        "the scales' values");
  if (total == 0) return MKX_SUCCESS;
  /* moe_sync=no: the verdict reads the scan (mkx_moe_fp8_scan) */
  return mkx_fused_scales_scan_enqueue(fn_of(p->op), arr, MKX_MOE_SCAN_ARRAYS,
                                       p->ws, st);
}

void mkx_moe_fp8_scan(MKX_Comm c, const moe_plan *p, const mkx_moe_args *a,
                      mkx_moe_scan *s) {
  mkx_scale_array arr[MKX_MOE_SCAN_ARRAYS];
  memset(s, 0, sizeof *s);
  if (!p->fp8 || scale_arrays(c, p->op, a, arr) == 0) return;
  s->first = p->ws->scan_dev;
  s->count = MKX_MOE_SCAN_ARRAYS;
  for (int i = 0; i < MKX_MOE_SCAN_ARRAYS; i++) s->p[i] = arr[i].p;
}

int mkx_moe_fp8_rows_scales(MKX_Comm c, const moe_plan *p, const moe_ws *w,
                            const mkx_moe_args *a, const mkx_moe_place *pl,
                            cudaStream_t st, const char *fn) {
  if (w->ldxs == 0) return MKX_SUCCESS;
  mkx_moe_rows_at at = {{w->xs}, {NULL}, {NULL}, w->ldxs};
  for (int q = 0; p->multi && q < c->size; q++) /* one node: entry q */
    at.a[q] = mkx_moe_ws_piece(c, p, q, W_XS);
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

int mkx_moe_fp8_second(const mkx_moe_args *a, const moe_ws *w, int act_type,
                       int64_t rows, mkx_moe_gemm_desc *g, cudaStream_t st) {
  const int ab = mkx_fused_gemm_type(a->dtype);
  const mkx_moe_quant_desc q = {.x = w->act,
                                .ldx = w->ldact,
                                .x_type = act_type,
                                .rows_end = w->offsets + g->experts,
                                .max_rows = rows,
                                .cols = a->ffn,
                                .q = w->act8,
                                .ldq = w->ldact8,
                                .scales = w->acts,
                                .lds = w->ldacts,
                                .fp8_type = ab};
  MKX_TRY(mkx_fused_launch_rc(mkx_moe_quant_run(&q, st), fn_of(MOE_LAYER),
                              "activation to fp8"));
  mkx_moe_fp8_scales s = {
      .a_layout = MKX_SCALE_BLOCK, .a = w->acts, .a_row = w->ldacts, .a_kb = 1};
  w_scales(&a->sc2, a->ffn, a->hidden, &s);
  g->a = w->act8;
  g->lda = w->ldact8;
  g->w = a->W2;
  g->ldw = a->ffn;
  g->ab_type = ab;
  g->kernel = MKX_MOE_GEMM_SWAP;
  g->fp8 = s;
  return MKX_SUCCESS;
}
#else
typedef int mkx_moe_fp8_unused; /* ISO C: not an empty unit */
#endif
