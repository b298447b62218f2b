/* Device buffers on a communicator of several nodes, option
 * hier_gemm=gpu: the GEMM runs on the GPU (the engine), the communication
 * is the host path's hierarchical collectives (src/host/hier.c: inside a
 * node through MPI, between nodes through MKX's transport, each byte over
 * the network the fewest times).  Against the staged path (everything,
 * GEMM included, on the host) this moves only A rows (AllGather) or fp32
 * partials and output blocks (ReduceScatter, AllReduce) through host
 * memory.  It is blocking: the call synchronises its stream, as the staged
 * path does; nothing overlaps yet.  fp8 operands take it too (the
 * others are 16-bit code): their rows travel as bytes, A's scales as the
 * row records of the host path (host/scales.h) beside them, and the
 * engine's fp8 GEMM multiplies (src/ops/tp/fp8_gpu.c).
 *
 * hier_gemm=nvlink (hier_nvlink.c; auto where the GPU cannot drive the
 * call) falls back to it where the node-major numbering it needs does not
 * hold. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/error.h"
#include "core/log.h"
#include "host/dtype.h"
#include "host/hier.h"
#include "host/scales.h"
#include "host/xfer.h"
#include "ops/op.h"
#include "ops/path.h"

#if HAVE_CUDA
#include "core/cuda_rc.h"
#include "ops/fused/fused.h"
#include "gemm/gemm_engine.h"
#include "ops/nodes/hier.h"

const char *mkx_hier_op_name(int op) {
  return op == MKX_TP_OP_AG   ? "MKX_Allgather_gemm"
         : op == MKX_TP_OP_RS ? "MKX_Gemm_reduce_scatter"
                              : "MKX_Gemm_allreduce";
}
#define op_name mkx_hier_op_name
static int is16(MKX_Datatype t) { return t == MKX_BF16 || t == MKX_FP16; }

static int cuda_rc(cudaError_t e, int op, const char *what) {
  return mkx_cuda_rc(e, op_name(op), what);
}

/* The engine's GEMM of this call: AG: gathered A (dense, in dtmp) into C;
 * RS/AR: the fp32 partial into dtmp.  Without a plan (the check), an
 * aligned stand-in for dtmp: cudaMalloc memory is aligned. */
static void *const ALIGNED_STANDIN = (void *)(uintptr_t)4096;
static void engine_desc(int op, const void *args, const hg_plan *p, int64_t M,
                        mkx_gemm_desc *d) {
  void *tmp = p ? p->dtmp : ALIGNED_STANDIN;
  if (op == MKX_TP_OP_AG)
    mkx_tp_gemm_of_ag(args, tmp, M, d);
  else
    mkx_tp_gemm_of_red(args, tmp, MKX_GEMM_FP32, d);
}

int mkx_hier_nvlink_fits(MKX_Comm c, int op, const void *args,
                         const struct mkx_agreed *g, char *why, size_t len) {
  if (mkx_is_fp8(mkx_tp_dtype_of(op, args))) {
    snprintf(why, len, "fp8 operands (hier_gemm=gpu)");
    return 0;
  }
  if (c->opt.hier_gemm != MKX_HIER_GEMM_NVLINK &&
      c->opt.hier_gemm != MKX_HIER_GEMM_PROXY &&
      c->opt.hier_gemm != MKX_HIER_GEMM_AUTO) {
    snprintf(why, len, "option hier_gemm=gpu");
    return 0;
  }
  if (mkx_hier_nvlink_check(c, op, args, g) == MKX_SUCCESS) return 1;
  snprintf(why, len, "%s (hier_gemm=gpu instead of nvlink)",
           MKX_Get_last_error());
  mkx_error_clear();
  return 0;
}

int mkx_hier_gpu_check(MKX_Comm c, int op, const void *args,
                       const struct mkx_agreed *g) {
  const char *fn = op_name(op), *why = NULL;
  MKX_Datatype dt, ct;
  MKX_Order order;
  if (op == MKX_TP_OP_AG) {
    const mkx_ag_gemm_args *a = args;
    dt = a->dtype, ct = a->ctype, order = a->order;
  } else {
    const mkx_rs_ar_args *a = args;
    dt = a->dtype, ct = a->ctype, order = a->order;
  }
  if (c->opt.hier_gemm == MKX_HIER_GEMM_HOST)
    return mkx_error(MKX_ERR_UNSUPPORTED,
                     "%s: %d nodes: device buffers take "
                     "the staged path (option hier_gemm=host)",
                     fn, c->place.num_nodes);
  if (!mkx_hier_usable(c))
    return mkx_error(MKX_ERR_UNSUPPORTED,
                     "%s: nodes of unequal size or no "
                     "network endpoint",
                     fn);
  if (mkx_is_fp8(dt))
    return mkx_tp_fp8_check(fn, op, args, g->total, g->captured);
  if (!is16(dt) || (!is16(ct) && ct != MKX_FP32) || order != MKX_ROW_MAJOR)
    return mkx_error(MKX_ERR_UNSUPPORTED,
                     "%s: hier_gemm=gpu takes row-major "
                     "bf16/fp16/fp8 A, B and bf16/fp16/fp32 C",
                     fn);
  char why_not[192];
  if (mkx_hier_nvlink_fits(c, op, args, g, why_not, sizeof why_not))
    return MKX_SUCCESS;
  mkx_gemm_desc d;
  engine_desc(op, args, NULL, g->total, &d);
  if (!mkx_gemm_supported(&d, &why))
    return mkx_error(MKX_ERR_UNSUPPORTED, "%s: GEMM engine: %s", fn, why);
  return MKX_SUCCESS;
}

/* AG: the gathered A, then (fp8 with scales) its row records at rec_off. */
static size_t rec_off(const mkx_ag_gemm_args *a, int64_t M) {
  return ((size_t)M * (size_t)a->k * MKX_Type_size(a->dtype) + 255) &
         ~(size_t)255;
}

static size_t dtmp_bytes(int op, const void *args, int64_t M) {
  if (op == MKX_TP_OP_AG) {
    const mkx_ag_gemm_args *a = args;
    return rec_off(a, M) +
           sizeof(float) * (size_t)M *
               (size_t)mkx_scales_row_floats(a->sc.layout, a->k);
  }
  const mkx_rs_ar_args *a = args;
  return (size_t)a->M * (size_t)a->n * sizeof(float);
}

int mkx_hier_gpu_plan(MKX_Comm c, int op, const void *args,
                      const struct mkx_agreed *g, void **out) {
  hg_plan *p = calloc(1, sizeof *p);
  int64_t *rows = calloc((size_t)c->size, sizeof *rows);
  int rc = p && rows ? MKX_SUCCESS
                     : mkx_error(MKX_ERR_NOMEM, "%s: plan", op_name(op));
  for (int q = 0; rc == MKX_SUCCESS && q < c->size; q++) {
    int64_t first;
    if (op == MKX_TP_OP_AG)
      rows[q] = g->local[q];
    else
      MKX_Block_range(((const mkx_rs_ar_args *)args)->M, c->size, q, &first,
                      &rows[q]);
  }
  if (rc == MKX_SUCCESS)
    rc = cuda_rc(cudaMalloc(&p->dtmp, dtmp_bytes(op, args, g->total) + 16), op,
                 "cudaMalloc");
  if (rc == MKX_SUCCESS && mkx_is_fp8(mkx_tp_dtype_of(op, args)))
    rc = mkx_tp_fp8_host_make(&p->fp8, op, args, 1, op_name(op));
  rc = mkx_comm_agree_rc(c, rc, op_name(op));
  if (rc != MKX_SUCCESS) {
    if (p && p->dtmp) MKX_CUDA_RELEASE(cudaFree(p->dtmp));
    if (p) mkx_tp_fp8_host_free(&p->fp8);
    free(rows);
    free(p);
    return rc;
  }
  p->op = op;
  p->rows = rows;
  *out = p;
  return MKX_SUCCESS;
}

void mkx_hier_gpu_free(MKX_Comm c, void *plan) {
  hg_plan *p = plan;
  (void)c;
  if (!p) return;
  if (p->nvlink) return mkx_hier_nvlink_free(p);
  MKX_CUDA_RELEASE(cudaFree(p->dtmp));
  mkx_tp_fp8_host_free(&p->fp8);
  free(p->rows);
  free(p);
}

/* fp8: A's scales as row records (one per row per 128 columns, or one
 * per row: a per-tensor scale is its rank's rows' scale) gathered through
 * the host as the rows are; *recs (the caller frees it) NULL without
 * scales.  Collective; the values were checked and agreed on already. */
static int gather_records(MKX_Comm c, const hg_plan *p,
                          const mkx_ag_gemm_args *a, int64_t M, float **recs) {
  const int64_t kb = mkx_scales_row_floats(a->sc.layout, a->k);
  const size_t rec = sizeof(float) * (size_t)kb;
  if (!kb) return MKX_SUCCESS;
  float *mine = malloc(rec * (size_t)a->m_local + 16);
  *recs = malloc(rec * (size_t)M + 16);
  int rc = mine && *recs ? MKX_SUCCESS
                         : mkx_error(MKX_ERR_NOMEM, "%s: scale records",
                                     op_name(MKX_TP_OP_AG));
  rc = mkx_comm_agree_rc(c, rc, op_name(MKX_TP_OP_AG));
  if (rc == MKX_SUCCESS) {
    MKX_Scales hs = a->sc;
    hs.a = p->fp8.buf; /* this rank's, read back at the start */
    mkx_scales_a_rows(&hs, a->m_local, a->k, MKX_ROW_MAJOR, mine);
    rc = mkx_hier_allgather_rows(c, mine, p->rows, rec, *recs);
  }
  free(mine);
  return rc;
}

/* fp8: the gathered records into dtmp after the gathered A (and a_out),
 * then the fp8 GEMM with them. */
static int ag_fp8_gemm(MKX_Comm c, const hg_plan *p, const mkx_ag_gemm_args *a,
                       int64_t M, const mkx_gemm_desc *d, const float *recs,
                       cudaStream_t st) {
  const int op = MKX_TP_OP_AG;
  const size_t bytes = sizeof(float) * (size_t)M *
                       (size_t)mkx_scales_row_floats(a->sc.layout, a->k);
  mkx_gemm_scales s = mkx_tp_fp8_engine_scales(&a->sc, a->k);
  if (recs) { /* a layout with scales */
    float *drec = (float *)((char *)p->dtmp + rec_off(a, M));
    MKX_TRY(
        cuda_rc(cudaMemcpyAsync(drec, recs, bytes, cudaMemcpyHostToDevice, st),
                op, "copy of the gathered scales"));
    if (a->A_out && a->sc.a_out)
      MKX_TRY(cuda_rc(
          cudaMemcpyAsync(a->sc.a_out, recs, bytes, cudaMemcpyHostToDevice, st),
          op, "copy to scales->a_out"));
    s = mkx_tp_fp8_gathered_scales(&a->sc, a->k, drec);
  }
  return mkx_tp_fp8_gemm(c, d, &s, st, op_name(op));
}

/* Gather A's rows through the host, then the GEMM on the GPU.  fp8: the
 * scales are read back and agreed on before anything moves. */
static int ag_start(MKX_Comm c, hg_plan *p, const mkx_ag_gemm_args *a,
                    cudaStream_t st) {
  const int op = MKX_TP_OP_AG, fp8 = mkx_is_fp8(a->dtype);
  const size_t es = MKX_Type_size(a->dtype), row = (size_t)a->k * es;
  int64_t M = 0;
  for (int q = 0; q < c->size; q++) M += p->rows[q];
  char *send = malloc(row * (size_t)a->m_local + 16);
  char *full = malloc(row * (size_t)M + 16);
  float *recs = NULL;
  int rc = send && full
               ? MKX_SUCCESS
               : mkx_error(MKX_ERR_NOMEM, "%s: host rows", op_name(op));
  if (rc == MKX_SUCCESS)
    rc = cuda_rc(cudaStreamSynchronize(st), op, "stream synchronise");
  if (fp8) rc = mkx_comm_agree_rc(c, rc, op_name(op));
  if (rc == MKX_SUCCESS && fp8)
    rc = mkx_tp_fp8_scales_ok(c, &p->fp8, &a->sc, NULL, op_name(op), st);
  if (rc == MKX_SUCCESS && a->m_local > 0)
    rc = cuda_rc(cudaMemcpy2D(send, row, a->A, (size_t)a->lda * es, row,
                              (size_t)a->m_local, cudaMemcpyDeviceToHost),
                 op, "copy of A rows to the host");
  rc = mkx_comm_agree_rc(c, rc, op_name(op));
  if (rc == MKX_SUCCESS)
    rc = mkx_hier_allgather_rows(c, send, p->rows, row, full);
  if (rc == MKX_SUCCESS && fp8) rc = gather_records(c, p, a, M, &recs);
  if (rc == MKX_SUCCESS)
    rc = cuda_rc(cudaMemcpyAsync(p->dtmp, full, row * (size_t)M,
                                 cudaMemcpyHostToDevice, st),
                 op, "copy of the gathered A");
  if (rc == MKX_SUCCESS && a->A_out)
    rc = cuda_rc(cudaMemcpy2DAsync(a->A_out, (size_t)a->ld_aout * es, full, row,
                                   row, (size_t)M, cudaMemcpyHostToDevice, st),
                 op, "copy to A_out");
  mkx_gemm_desc d;
  engine_desc(op, a, p, M, &d);
  if (rc == MKX_SUCCESS && fp8)
    rc = ag_fp8_gemm(c, p, a, M, &d, recs, st);
  else if (rc == MKX_SUCCESS)
    rc = mkx_fused_launch_rc(mkx_gemm_run(&d, st), op_name(op), "GEMM");
  /* the host buffers are read by the copies above: wait before freeing */
  if (rc == MKX_SUCCESS)
    rc = cuda_rc(cudaStreamSynchronize(st), op, "stream synchronise");
  free(send);
  free(full);
  free(recs);
  return rc;
}

/* The fp32 partial on the GPU, its hierarchical reduction through the
 * host, the rounded block (allreduce: every block) back into C. */
static int red_start(MKX_Comm c, hg_plan *p, const mkx_rs_ar_args *a,
                     cudaStream_t st) {
  const int op = p->op, me = c->rank;
  const size_t cs = MKX_Type_size(a->ctype), part = (size_t)a->M * a->n;
  const size_t blk = (size_t)p->rows[me] * (size_t)a->n;
  const int64_t out_rows = op == MKX_TP_OP_AR ? a->M : p->rows[me];
  mkx_gemm_desc d;
  engine_desc(op, a, p, a->M, &d);
  float *host = malloc(part * sizeof(float) + 16);
  float *sum = malloc((size_t)c->size * blk * sizeof(float) + 16);
  char *out = malloc((size_t)out_rows * (size_t)a->n * cs + 16);
  int rc = host && sum && out
               ? MKX_SUCCESS
               : mkx_error(MKX_ERR_NOMEM, "%s: host buffers", op_name(op));
  const int fp8 = mkx_is_fp8(a->dtype);
  if (fp8) rc = mkx_comm_agree_rc(c, rc, op_name(op));
  if (rc == MKX_SUCCESS && fp8) {
    const mkx_gemm_scales s = mkx_tp_fp8_engine_scales(&a->sc, a->k_local);
    rc = mkx_tp_fp8_scales_ok(c, &p->fp8, &a->sc, NULL, op_name(op), st);
    if (rc == MKX_SUCCESS) rc = mkx_tp_fp8_gemm(c, &d, &s, st, op_name(op));
  } else if (rc == MKX_SUCCESS) {
    rc = mkx_fused_launch_rc(mkx_gemm_run(&d, st), op_name(op), "GEMM");
  }
  if (rc == MKX_SUCCESS)
    rc = cuda_rc(cudaMemcpyAsync(host, p->dtmp, part * sizeof(float),
                                 cudaMemcpyDeviceToHost, st),
                 op, "copy of the partial to the host");
  if (rc == MKX_SUCCESS)
    rc = cuda_rc(cudaStreamSynchronize(st), op, "stream synchronise");
  rc = mkx_comm_agree_rc(c, rc, op_name(op));
  if (rc == MKX_SUCCESS)
    rc = mkx_hier_reduce_rows(c, MKX_FP32, host, p->rows, a->n, sum);
  if (rc == MKX_SUCCESS && op == MKX_TP_OP_AR) {
    mkx_convert(MKX_FP32, sum, 1, a->ctype, host, 1, blk); /* reuse host */
    rc = mkx_hier_allgather_rows(c, host, p->rows, (size_t)a->n * cs, out);
  } else if (rc == MKX_SUCCESS) {
    mkx_convert(MKX_FP32, sum, 1, a->ctype, out, 1, blk);
  }
  if (rc == MKX_SUCCESS && out_rows > 0)
    rc = cuda_rc(cudaMemcpy2D(a->C, (size_t)a->ldc * cs, out, (size_t)a->n * cs,
                              (size_t)a->n * cs, (size_t)out_rows,
                              cudaMemcpyHostToDevice),
                 op, "copy of C to the device");
  free(host);
  free(sum);
  free(out);
  return rc;
}

int mkx_hier_gpu_start(MKX_Comm c, void *plan, const void *args,
                       MKX_Stream stream) {
  hg_plan *p = plan;
  cudaStream_t st = (cudaStream_t)stream;
  if (p->nvlink) return mkx_hier_nvlink_start(c, p, args, st);
  mkx_path_count(MKX_PATH_HIER_GPU);
  if (p->op == MKX_TP_OP_AG) return ag_start(c, p, args, st);
  return red_start(c, p, args, st);
}
#else
typedef int mkx_hier_gpu_unused; /* ISO C: not an empty unit */
#endif
