/* Column-major operands on the fused single-node paths (issue 4).
 *
 * In column-major order C = A B is, read row-major, C^T = B^T A^T: the same
 * memory holds the transposes.  B needs no copy (a column-major k x n B is a
 * row-major n x k "transposed" B, and the other way round).  A and C do:
 * the fused kernels gather and scatter whole rows of A and C, which in
 * column-major order are strided.  So the adapter transposes A into a
 * row-major temporary, runs the row-major fused call into a row-major
 * temporary C, and transposes that into the caller's C (and A_out).  The
 * transposes read and write each byte once (tens of microseconds at the
 * benchmark's sizes, against a staged host path that is 10-100x slower).
 * The temporaries live in one more pooled symmetric workspace, so plain
 * calls allocate nothing and allreduce can register its C. */
#include <stdlib.h>
#include <string.h>
#include "core/error.h"
#include "ops/op.h"

#if HAVE_CUDA
#include "tp/tp_host.h"
#include "gemm/gemm_engine.h"

typedef struct cm_plan {
  int kind;     /* MKX_TP_PLAN_COLMAJOR: see mkx_tp_plan_head */
  int op;
  void *inner;  /* the row-major plan */
  mkx_tp_ws *tmp;
  int64_t c_rows; /* rows of the (row-major) C */
  size_t a_off, c_off, ao_off;
  union {
    mkx_ag_gemm_args ag;
    mkx_gemm_red_args red;
  } twin;       /* the row-major call */
} cm_plan;

static const char *op_name(int op) {
  return op == MKX_TP_OP_AG ? "MKX_Allgather_gemm"
         : op == MKX_TP_OP_RS ? "MKX_Gemm_reduce_scatter"
                              : "MKX_Gemm_allreduce";
}

static MKX_Trans flip(MKX_Trans t) {
  return t == MKX_TRANS ? MKX_NO_TRANS : MKX_TRANS;
}
static size_t align256(size_t x) { return (x + 255) / 256 * 256; }

/* Temporaries of this rank: A, C, A_out (row-major, dense). */
static size_t lay_out(cm_plan *p, const void *args,
                      const struct mkx_agreed *g, MKX_Comm c) {
  size_t a, cb, ao = 0;
  if (p->op == MKX_TP_OP_AG) {
    const mkx_ag_gemm_args *x = args;
    const size_t es = MKX_Type_size(x->dtype);
    a = (size_t)x->m_local * (size_t)x->k * es;
    cb = (size_t)g->total * (size_t)x->n * MKX_Type_size(x->ctype);
    if (x->A_out) ao = (size_t)g->total * (size_t)x->k * es;
    p->c_rows = g->total;
  } else {
    const mkx_gemm_red_args *x = args;
    int64_t first, count = x->M;
    if (p->op == MKX_TP_OP_RS) MKX_Block_range(x->M, c->size, c->rank, &first, &count);
    a = (size_t)x->M * (size_t)x->k_local * MKX_Type_size(x->dtype);
    cb = (size_t)count * (size_t)x->n * MKX_Type_size(x->ctype);
    p->c_rows = count;
  }
  p->a_off = 0;
  p->c_off = align256(a);
  p->ao_off = p->c_off + align256(cb);
  return p->ao_off + ao;
}

/* The workspace request must be the same on every rank (the pools decide
 * alike): the largest of the ranks' needs. */
static int agreed_bytes(MKX_Comm c, size_t mine, size_t *all_max) {
  uint64_t m = mine, *v = malloc(sizeof *v * (size_t)c->size);
  if (!v) return mkx_error(MKX_ERR_NOMEM, "column-major temporaries");
  int rc = c->oob.allgather(c->oob.ctx, &m, v, sizeof m, c->opt.timeout_ms);
  *all_max = 0;
  for (int q = 0; rc == MKX_SUCCESS && q < c->size; q++)
    if (v[q] > *all_max) *all_max = v[q];
  free(v);
  return rc == MKX_SUCCESS ? MKX_SUCCESS : mkx_comm_fail(c, rc);
}

static void make_twin(MKX_Comm c, cm_plan *p, const void *args) {
  char *base = mkx_tp_ws_data(p->tmp, c->place.local_rank);
  if (p->op == MKX_TP_OP_AG) {
    mkx_ag_gemm_args *t = &p->twin.ag;
    *t = *(const mkx_ag_gemm_args *)args;
    t->A = base + p->a_off;
    t->lda = t->k;
    t->transb = flip(t->transb);
    t->C = base + p->c_off;
    t->ldc = t->n;
    if (t->A_out) {
      t->A_out = base + p->ao_off;
      t->ld_aout = t->k;
    }
    t->order = MKX_ROW_MAJOR;
  } else {
    mkx_gemm_red_args *t = &p->twin.red;
    *t = *(const mkx_gemm_red_args *)args;
    t->A = base + p->a_off;
    t->lda = t->k_local;
    t->transb = flip(t->transb);
    t->C = base + p->c_off;
    t->ldc = t->n;
    t->order = MKX_ROW_MAJOR;
  }
}

static int inner_plan(MKX_Comm c, cm_plan *p, const struct mkx_agreed *g) {
  if (p->op == MKX_TP_OP_AG)
    return mkx_ag_gemm_gpu_plan(c, &p->twin.ag, g, &p->inner);
  if (p->op == MKX_TP_OP_RS)
    return mkx_rs_gpu_plan(c, &p->twin.red, g, &p->inner);
  return mkx_ar_gpu_plan(c, &p->twin.red, g, &p->inner);
}

int mkx_tp_cm_plan(MKX_Comm c, int op, const void *args,
                   const struct mkx_agreed *g, void **out) {
  cm_plan *p = calloc(1, sizeof *p);
  if (!p) return mkx_error(MKX_ERR_NOMEM, "%s: plan", op_name(op));
  p->kind = MKX_TP_PLAN_COLMAJOR;
  p->op = op;
  size_t bytes = 0;
  int rc = agreed_bytes(c, lay_out(p, args, g, c), &bytes);
  mkx_tp_need need = {0, 0, bytes};
  if (rc == MKX_SUCCESS) rc = mkx_tp_ws_acquire(c, &need, &p->tmp);
  if (rc == MKX_SUCCESS) {
    make_twin(c, p, args);
    rc = inner_plan(c, p, g);
    if (rc != MKX_SUCCESS) mkx_tp_ws_release(p->tmp);
  }
  if (rc != MKX_SUCCESS) {
    free(p);
    return rc;
  }
  *out = p;
  return MKX_SUCCESS;
}

static int transpose(const void *src, int64_t rows, int64_t cols,
                     int64_t lds, void *dst, int64_t ldd, MKX_Datatype t,
                     cudaStream_t st, const char *fn) {
  return mkx_tp_launch_rc(mkx_tp_transpose(src, rows, cols, lds, dst, ldd,
                                           (int)MKX_Type_size(t), st),
                          fn, "transpose of a column-major operand");
}

int mkx_tp_cm_start(MKX_Comm c, void *plan, const void *args,
                    MKX_Stream stream) {
  cm_plan *p = plan;
  cudaStream_t st = (cudaStream_t)stream;
  const char *fn = op_name(p->op);
  MKX_TRY(mkx_tp_after_last(p->tmp, fn, stream));
  /* a column-major m x k A is a row-major k x m matrix: transposed, it is
   * the twin's row-major m x k A; the twin's row-major C, transposed, is
   * the caller's column-major C */
  if (p->op == MKX_TP_OP_AG) {
    const mkx_ag_gemm_args *a = args, *t = &p->twin.ag;
    MKX_TRY(transpose(a->A, a->k, a->m_local, a->lda, (void *)t->A, t->lda,
                      a->dtype, st, fn));
    MKX_TRY(mkx_ag_gemm_gpu_start(c, p->inner, t, stream));
    MKX_TRY(transpose(t->C, p->c_rows, t->n, t->ldc, a->C, a->ldc, a->ctype,
                      st, fn));
    if (a->A_out)
      MKX_TRY(transpose(t->A_out, p->c_rows, t->k, t->ld_aout, a->A_out,
                        a->ld_aout, a->dtype, st, fn));
  } else {
    const mkx_gemm_red_args *a = args, *t = &p->twin.red;
    MKX_TRY(transpose(a->A, a->k_local, a->M, a->lda, (void *)t->A, t->lda,
                      a->dtype, st, fn));
    MKX_TRY(mkx_red_gpu_start(c, p->inner, t, stream));
    MKX_TRY(transpose(t->C, p->c_rows, t->n, t->ldc, a->C, a->ldc, a->ctype,
                      st, fn));
  }
  return mkx_tp_end(p->tmp, stream);
}

void mkx_tp_cm_free(MKX_Comm c, void *plan) {
  cm_plan *p = plan;
  if (!p) return;
  if (p->op == MKX_TP_OP_AG)
    mkx_ag_gemm_gpu_free(c, p->inner);
  else
    mkx_red_gpu_free(c, p->inner);
  mkx_tp_ws_release(p->tmp);
  free(p);
}
#else
typedef int mkx_tp_colmajor_unused; /* ISO C: not an empty unit */
#endif
