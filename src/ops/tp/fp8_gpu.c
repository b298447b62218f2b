/* fp8 operands on the tensor-parallel calls' GPU paths.
 *
 * On one node they take the fused split path: AllGather+GEMM stores this rank's fp8 rows of
 * A and their scales into every rank's gathered A (half the bytes of
 * bf16), meets the ranks, then the engine's fp8 GEMM multiplies the
 * gathered A; GEMM+ReduceScatter/AllReduce run the fp8 GEMM into the
 * partial (bf16/fp16 or fp32, option tp_partials) and sum it as the 16-bit
 * split path does.  The overlapped kernels are 16-bit code.  On several
 * nodes they take hier_gemm=gpu's path (src/ops/nodes/hier.c) under the
 * same rules, so that one contract says which calls run on the GPU.
 *
 * Scales are checked before any work is enqueued: on the GPU, a few words
 * read back (one stream synchronisation), and the ranks agree on the
 * verdict, so a bad scale is every rank's return value with nothing
 * written, as on the staged path.  Hence no capture with scales;
 * MKX_SCALE_NONE checks none. */
#include <stdlib.h>
#include <string.h>
#include "core/error.h"
#include "host/scales.h"
#include "ops/op.h"

#if HAVE_CUDA
#include "ops/fused/fused.h"
#include "gemm/gemm_engine.h"

/* The engine's fp8 GEMM of the call as the paths run it: AG multiplies
 * the gathered A (dense in a workspace: aligned, ld k) into C; RS/AR this
 * rank's A into a dense partial (a workspace: aligned, ld n). */
static const char *gemm_why(int op, const void *args, int64_t M) {
  void *const standin = (void *)(uintptr_t)256;
  const mkx_gemm_scales none = {0};
  const char *why = NULL;
  mkx_gemm_desc d;
  if (op == MKX_TP_OP_AG)
    mkx_tp_gemm_of_ag(args, standin, M, &d);
  else
    mkx_tp_gemm_of_red(args, standin, MKX_GEMM_FP32, &d);
  return mkx_gemm_fp8_supported(&d, &none, &why) ? NULL : why;
}

/* What the single-node copies around the GEMM need of the user's buffers:
 * AG's rows of A are copied in 16-byte pieces, RS/AR's C is written 8
 * columns at a time. */
static const char *buffers_why(int op, const void *args) {
  if (op == MKX_TP_OP_AG) {
    const mkx_ag_gemm_args *a = args;
    return a->lda % 16 || (uintptr_t)a->A % 16
               ? "lda a multiple of 16 and A 16-byte aligned only"
               : NULL;
  }
  const mkx_rs_ar_args *a = args;
  return a->ldc % 8 || (uintptr_t)a->C % 16
             ? "ldc a multiple of 8 and C 16-byte aligned only"
             : NULL;
}

int mkx_tp_fp8_check(const char *fn, int op, const void *args, int64_t M,
                     int captured) {
  const int ag = op == MKX_TP_OP_AG;
  const MKX_Order order = ag ? ((const mkx_ag_gemm_args *)args)->order
                             : ((const mkx_rs_ar_args *)args)->order;
  const MKX_Datatype ct = ag ? ((const mkx_ag_gemm_args *)args)->ctype
                             : ((const mkx_rs_ar_args *)args)->ctype;
  const MKX_Scale_layout l = mkx_tp_scales_of(op, args)->layout;
  const char *why = NULL;
  if (order != MKX_ROW_MAJOR)
    why = "row-major operands only";
  else if (ct != MKX_BF16 && ct != MKX_FP16 && ct != MKX_FP32)
    why = "bf16, fp16 or fp32 C only";
  else if (!(why = buffers_why(op, args)) && !(why = gemm_why(op, args, M)) &&
           captured && l != MKX_SCALE_NONE)
    why =
        "the scales are checked before the run (a stream "
        "synchronisation), which a capture cannot hold";
  if (!why) return MKX_SUCCESS;
  return mkx_error(MKX_ERR_UNSUPPORTED, "%s: fused path with fp8 operands: %s",
                   fn, why);
}

MKX_Datatype mkx_tp_dtype_of(int op, const void *args) {
  return op == MKX_TP_OP_AG ? ((const mkx_ag_gemm_args *)args)->dtype
                            : ((const mkx_rs_ar_args *)args)->dtype;
}

const MKX_Scales *mkx_tp_scales_of(int op, const void *args) {
  return op == MKX_TP_OP_AG ? &((const mkx_ag_gemm_args *)args)->sc
                            : &((const mkx_rs_ar_args *)args)->sc;
}

int mkx_tp_fp8_host_make(mkx_tp_fp8_host *h, int op, const void *args,
                         int values, const char *fn) {
  const MKX_Scale_layout l = mkx_tp_scales_of(op, args)->layout;
  memset(h, 0, sizeof *h);
  if (op == MKX_TP_OP_AG) {
    const mkx_ag_gemm_args *a = args;
    h->na = mkx_scales_a_count(l, a->m_local, a->k);
    h->nb = mkx_scales_b_count(l, a->k, a->n);
  } else {
    const mkx_rs_ar_args *a = args;
    h->na = mkx_scales_a_count(l, a->M, a->k_local);
    h->nb = mkx_scales_b_count(l, a->k_local, a->n);
  }
  if (!values || h->na + h->nb == 0) return MKX_SUCCESS;
  /* pageable: a call's plan is made and freed per call, and freeing pinned
   * memory would wait for the device; the read-back waits anyway */
  h->buf = malloc(sizeof(float) * (size_t)(h->na + h->nb));
  return h->buf ? MKX_SUCCESS
                : mkx_error(MKX_ERR_NOMEM, "%s: host copy of the scales", fn);
}

void mkx_tp_fp8_host_free(mkx_tp_fp8_host *h) {
  free(h->buf);
  h->buf = NULL;
}

int mkx_tp_fp8_scales_ok(MKX_Comm c, const mkx_tp_fp8_host *h,
                         const MKX_Scales *sc, const mkx_fused_ws *ws,
                         const char *fn, cudaStream_t st) {
  if (sc->layout == MKX_SCALE_NONE) return MKX_SUCCESS;
  const mkx_scale_array arr[2] = {{"scales->a", sc->a, h->na},
                                  {"scales->b", sc->b, h->nb}};
  /* under capture every rank is capturing (agreed): each fails alike */
  return mkx_comm_agree_rc(c,
                           mkx_fused_scales_check(fn, arr, 2, ws, h->buf, st),
                           "the scales' values");
}

mkx_gemm_scales mkx_tp_fp8_engine_scales(const MKX_Scales *sc, int64_t k) {
  mkx_gemm_scales s = {sc->layout, sc->a, sc->b, 1, 0, 1, 0};
  if (sc->layout == MKX_SCALE_BLOCK) {
    /* row-major: A's rows x kb, B's (stored n x k) nb x kb */
    const int64_t kb = (k + MKX_SCALE_BLOCK_SIZE - 1) / MKX_SCALE_BLOCK_SIZE;
    s.a_row = kb, s.a_kb = 1, s.b_col = kb, s.b_kb = 1;
  }
  return s;
}

mkx_gemm_scales mkx_tp_fp8_gathered_scales(const MKX_Scales *sc, int64_t k,
                                           const float *records) {
  mkx_gemm_scales s = mkx_tp_fp8_engine_scales(sc, k);
  s.a = records;
  /* every rank's per-tensor scale, one per row of the gathered A */
  if (sc->layout == MKX_SCALE_TENSOR)
    s.layout = MKX_GEMM_SCALE_ROW, s.a_row = 1, s.b_col = 0;
  return s;
}

int mkx_tp_fp8_gemm(MKX_Comm c, const mkx_gemm_desc *g,
                    const mkx_gemm_scales *s, cudaStream_t st, const char *fn) {
  /* Every caller has met its peers before (or waits for none): the GEMM
   * waits for no one, so it may take every SM the rank's kernels may use
   * (its partition on a shared GPU), as the pull paths' GEMMs do. */
  mkx_gemm_desc capped = *g;
  capped.num_ctas = c->share.ctx_sms > 0 ? c->share.ctx_sms : c->share.ctas;
  return mkx_fused_launch_rc(mkx_gemm_run_fp8(&capped, s, st), fn, "fp8 GEMM");
}
#else
typedef int mkx_tp_fp8_gpu_unused; /* ISO C: not an empty unit */
#endif
