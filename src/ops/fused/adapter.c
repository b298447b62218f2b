/* Operands the fused kernels cannot take as they are: column-major
 * order, a rank with k_local = 0 (its twin multiplies 8 columns of zeros:
 * the kernels need k > 0, and its partial is zero either way), and
 * (option fused_pad) k or n not a multiple of 8, leading
 * dimensions not a multiple of 8, pointers not 16-byte aligned, an
 * allreduce C that cannot be mapped into node peers.
 *
 * The adapter runs a row-major "twin" call on dense temporaries whose k and
 * n are rounded up to multiples of 8 (the padding is zero, so the product
 * is unchanged) and copies or transposes into and out of them:
 *   - column-major: in that order C = A B is, read row-major, C^T = B^T A^T:
 *     the same memory holds the transposes.  B needs no copy (a column-major
 *     k x n B is a row-major n x k "transposed" B); A and C are transposed,
 *     since the fused kernels gather and scatter whole rows of them;
 *   - other awkward operands are copied (cudaMemcpy2D) into the padded ones.
 * An operand that fits is used in place.  The copies read and write each
 * byte once, far less than the staged host path costs.  The temporaries live in one more pooled
 * symmetric workspace, so plain calls allocate nothing and allreduce can
 * register its C. */
#include <stdlib.h>
#include <string.h>
#include "core/error.h"
#include "core/log.h"
#include "ops/op.h"
#include "ops/path.h"

#if HAVE_CUDA
#include "ops/fused/fused.h"
#include "gemm/gemm_engine.h"

/* What this rank copies, and the twin's padded sizes. */
typedef struct ad_shape {
  int cm;               /* column-major call */
  int a, b, c, ao;      /* copy A, B, C, A_out through temporaries */
  int64_t k, kp, n, np; /* k (AG) or k_local (RS/AR), n; padded to 8 */
  int64_t a_rows, c_rows, ao_rows;
  MKX_Trans tb; /* the twin's transb */
  size_t es, ces;
} ad_shape;

typedef struct ad_plan {
  int op;
  const mkx_path_ops *inner_ops; /* the twin's fused path */
  void *inner;                   /* and its plan */
  mkx_fused_ws *tmp;
  ad_shape s;
  size_t a_off, b_off, c_off, ao_off;
  union {
    mkx_ag_gemm_args ag;
    mkx_rs_ar_args red;
  } twin; /* the row-major call on the temporaries */
} ad_plan;

static const char *op_name(int op) {
  return op == MKX_TP_OP_AG   ? "MKX_Allgather_gemm"
         : op == MKX_TP_OP_RS ? "MKX_Gemm_reduce_scatter"
                              : "MKX_Gemm_allreduce";
}

static MKX_Trans flip(MKX_Trans t) {
  return t == MKX_TRANS ? MKX_NO_TRANS : MKX_TRANS;
}
static size_t align256(size_t x) { return (x + 255) / 256 * 256; }
static int64_t round8(int64_t x) { return (x + 7) / 8 * 8; }
static int odd(int64_t x) { return x % 8 != 0; }
static int misaligned(const void *p) { return ((uintptr_t)p & 15) != 0; }

/* The operands of either kind of call, read the same way. */
typedef struct ad_args {
  const void *A, *B, *C, *A_out;
  int64_t lda, ldb, ldc, ld_aout, k, n;
  MKX_Trans transb;
  MKX_Datatype dtype, ctype;
  MKX_Order order;
} ad_args;

static ad_args view(int op, const void *args) {
  ad_args v;
  if (op == MKX_TP_OP_AG) {
    const mkx_ag_gemm_args *a = args;
    v = (ad_args){a->A,      a->B,     a->C,       a->A_out, a->lda,
                  a->ldb,    a->ldc,   a->ld_aout, a->k,     a->n,
                  a->transb, a->dtype, a->ctype,   a->order};
  } else {
    const mkx_rs_ar_args *a = args;
    v = (ad_args){a->A,      a->B,     a->C,     NULL,       a->lda,
                  a->ldb,    a->ldc,   0,        a->k_local, a->n,
                  a->transb, a->dtype, a->ctype, a->order};
  }
  return v;
}

const char *mkx_tp_adapt_misfit(int op, const void *args) {
  const ad_args v = view(op, args);
  const int cm = v.order == MKX_COL_MAJOR;
  const int has_a =
      op != MKX_TP_OP_AG || ((const mkx_ag_gemm_args *)args)->m_local > 0;
  if (odd(v.k) || odd(v.n) || odd(v.ldb) || (!cm && (odd(v.lda) || odd(v.ldc))))
    return "k, n, ldb (and lda, ldc when row-major) must be multiples of 8";
  if (misaligned(v.B) ||
      (!cm && ((has_a && misaligned(v.A)) || misaligned(v.C))))
    return "B (and A, C when row-major) must be 16-byte aligned";
  if (op == MKX_TP_OP_AR && !cm && !mkx_symm_ipc_capable(v.C))
    return "C cannot be mapped into node peers (memory from a cudaMallocAsync "
           "pool?); use cudaMalloc or MKX_Alloc_mem";
  return NULL;
}

static void adapt_shape(MKX_Comm c, int op, const void *args,
                        const struct mkx_agreed *g, ad_shape *s) {
  const ad_args v = view(op, args);
  memset(s, 0, sizeof *s);
  s->cm = v.order == MKX_COL_MAJOR;
  s->k = v.k;
  s->n = v.n;
  s->kp = v.k > 0 ? round8(v.k) : 8; /* RS/AR k_local = 0 */
  s->np = round8(v.n);
  s->es = MKX_Type_size(v.dtype);
  s->ces = MKX_Type_size(v.ctype);
  s->tb = s->cm ? flip(v.transb) : v.transb;
  const int pad_k = s->kp != s->k, pad_n = s->np != s->n;
  s->a = s->cm || pad_k || odd(v.lda) || misaligned(v.A);
  s->b = pad_k || pad_n || odd(v.ldb) || misaligned(v.B);
  s->c = s->cm || pad_n || odd(v.ldc) || misaligned(v.C) ||
         (op == MKX_TP_OP_AR && !mkx_symm_ipc_capable(v.C));
  if (op == MKX_TP_OP_AG) {
    const mkx_ag_gemm_args *a = args;
    s->a_rows = a->m_local;
    s->c_rows = s->ao_rows = g->total;
    s->ao = v.A_out != NULL && (s->cm || pad_k);
    if (a->m_local == 0) s->a = 0; /* nothing to copy; A may be NULL */
  } else {
    const mkx_rs_ar_args *a = args;
    int64_t first, count = a->M;
    if (op == MKX_TP_OP_RS)
      MKX_Block_range(a->M, c->size, c->rank, &first, &count);
    s->a_rows = a->M;
    s->c_rows = count;
  }
}

int mkx_tp_adapt_local(MKX_Comm c, int op, const void *args,
                       const struct mkx_agreed *g) {
  if (c->place.num_nodes > 1) return 0; /* the several-node plan */
  ad_shape s;
  adapt_shape(c, op, args, g, &s);
  return s.a || s.b || s.c || s.ao;
}

/* Offsets of the temporaries in this rank's part of the workspace. */
static size_t lay_out(ad_plan *p) {
  const ad_shape *s = &p->s;
  size_t off = 0;
  p->a_off = off;
  off += align256(s->a ? (size_t)s->a_rows * (size_t)s->kp * s->es : 0);
  p->b_off = off;
  off += align256(s->b ? (size_t)s->kp * (size_t)s->np * s->es : 0);
  p->c_off = off;
  off += align256(s->c ? (size_t)s->c_rows * (size_t)s->np * s->ces : 0);
  p->ao_off = off;
  return off + (s->ao ? (size_t)s->ao_rows * (size_t)s->kp * s->es : 0);
}

static void make_twin(MKX_Comm c, ad_plan *p, const void *args) {
  char *base = mkx_fused_ws_data(p->tmp, c->place.local_rank);
  const ad_shape *s = &p->s;
  const int64_t ldb_p = s->tb == MKX_TRANS ? s->kp : s->np;
  if (p->op == MKX_TP_OP_AG) {
    mkx_ag_gemm_args *t = &p->twin.ag;
    *t = *(const mkx_ag_gemm_args *)args;
    if (s->a) t->A = base + p->a_off, t->lda = s->kp;
    if (s->b) t->B = base + p->b_off, t->ldb = ldb_p;
    if (s->c) t->C = base + p->c_off, t->ldc = s->np;
    if (s->ao) t->A_out = base + p->ao_off, t->ld_aout = s->kp;
    t->k = s->kp;
    t->n = s->np;
    t->transb = s->tb;
    t->order = MKX_ROW_MAJOR;
  } else {
    mkx_rs_ar_args *t = &p->twin.red;
    *t = *(const mkx_rs_ar_args *)args;
    if (s->a) t->A = base + p->a_off, t->lda = s->kp;
    if (s->b) t->B = base + p->b_off, t->ldb = ldb_p;
    if (s->c) t->C = base + p->c_off, t->ldc = s->np;
    t->k_local = s->kp;
    t->n = s->np;
    t->transb = s->tb;
    t->order = MKX_ROW_MAJOR;
  }
}

/* The twin's operands fit on every rank: its plan is a fused one, on the
 * path a call of its shape would take. */
static int inner_plan(MKX_Comm c, ad_plan *p, const struct mkx_agreed *g) {
  struct mkx_agreed gi = *g;
  mkx_path_choice ch;
  gi.gpu_adapt = 0;
  const void *twin = p->op == MKX_TP_OP_AG ? (const void *)&p->twin.ag
                                           : (const void *)&p->twin.red;
  mkx_tp_choose_fused(c, p->op, twin, &gi, &ch);
  mkx_log(MKX_LOG_INFO, "%s: adapted call on the %s path (%s)", op_name(p->op),
          mkx_path_name(ch.ops->path), ch.why);
  MKX_TRY(ch.ops->plan(c, p->op, twin, &gi, &p->inner));
  p->inner_ops = ch.ops;
  return MKX_SUCCESS;
}

int mkx_tp_adapt_plan(MKX_Comm c, int op, const void *args,
                      const struct mkx_agreed *g, void **out) {
  ad_plan *p = calloc(1, sizeof *p);
  if (!p) return mkx_error(MKX_ERR_NOMEM, "%s: plan", op_name(op));
  p->op = op;
  adapt_shape(c, op, args, g, &p->s);
  /* the workspace request must be the same on every rank (the pools
   * decide alike): the largest of the ranks' needs */
  uint64_t bytes = 0;
  int rc =
      mkx_comm_agree_u64(c, lay_out(p), MKX_AGREE_MAX, &bytes, op_name(op));
  mkx_fused_need need = {0, 0, (size_t)bytes};
  if (rc == MKX_SUCCESS) rc = mkx_fused_ws_acquire(c, &need, &p->tmp);
  if (rc == MKX_SUCCESS) {
    make_twin(c, p, args);
    rc = inner_plan(c, p, g);
    if (rc != MKX_SUCCESS) mkx_fused_ws_release(p->tmp);
  }
  if (rc != MKX_SUCCESS) {
    free(p);
    return rc;
  }
  *out = p;
  return MKX_SUCCESS;
}

static int cuda_rc(cudaError_t e, const ad_plan *p, const char *what) {
  return mkx_cuda_rc(e, op_name(p->op), what);
}

/* dst (rows x cols of esz bytes, leading dimension ldd) = src (lds). */
static int copy2d(const ad_plan *p, void *dst, int64_t ldd, const void *src,
                  int64_t lds, int64_t rows, int64_t cols, size_t esz,
                  cudaStream_t st) {
  if (rows == 0 || cols == 0) return MKX_SUCCESS;
  return cuda_rc(cudaMemcpy2DAsync(dst, (size_t)ldd * esz, src,
                                   (size_t)lds * esz, (size_t)cols * esz,
                                   (size_t)rows, cudaMemcpyDeviceToDevice, st),
                 p, "copy of an operand");
}

/* Zero columns [cols, ld) of a rows x ld matrix, then rows [rows, rows_p). */
static int zero_pad(const ad_plan *p, char *m, int64_t rows, int64_t rows_p,
                    int64_t cols, int64_t ld, size_t esz, cudaStream_t st) {
  if (ld > cols && rows > 0)
    MKX_TRY(
        cuda_rc(cudaMemset2DAsync(m + (size_t)cols * esz, (size_t)ld * esz, 0,
                                  (size_t)(ld - cols) * esz, (size_t)rows, st),
                p, "zero padding"));
  if (rows_p > rows)
    MKX_TRY(
        cuda_rc(cudaMemsetAsync(m + (size_t)rows * (size_t)ld * esz, 0,
                                (size_t)(rows_p - rows) * (size_t)ld * esz, st),
                p, "zero padding"));
  return MKX_SUCCESS;
}

static int transpose(const ad_plan *p, const void *src, int64_t rows,
                     int64_t cols, int64_t lds, void *dst, int64_t ldd,
                     size_t esz, cudaStream_t st) {
  return mkx_fused_launch_rc(
      mkx_tp_transpose(src, rows, cols, lds, dst, ldd, (int)esz, st),
      op_name(p->op), "transpose of a column-major operand");
}

/* The twin's A (a_rows x kp): a column-major m x k A is a row-major k x m
 * matrix, so it is transposed; a row-major one is copied. */
static int put_a(const ad_plan *p, const ad_args *v, void *dst,
                 cudaStream_t st) {
  const ad_shape *s = &p->s;
  if (!s->a) return MKX_SUCCESS;
  if (s->cm && s->k > 0)
    MKX_TRY(transpose(p, v->A, s->k, s->a_rows, v->lda, dst, s->kp, s->es, st));
  else if (!s->cm)
    MKX_TRY(copy2d(p, dst, s->kp, v->A, v->lda, s->a_rows, s->k, s->es, st));
  return zero_pad(p, dst, s->a_rows, s->a_rows, s->k, s->kp, s->es, st);
}

/* The twin's B, stored as the twin reads it (tb): n x k (kp wide) when
 * transposed, else k x n (np wide); the caller's B is that same storage
 * (a column-major B read row-major is the other layout, hence tb). */
static int put_b(const ad_plan *p, const ad_args *v, void *dst,
                 cudaStream_t st) {
  const ad_shape *s = &p->s;
  if (!s->b) return MKX_SUCCESS;
  const int t = s->tb == MKX_TRANS;
  const int64_t rows = t ? s->n : s->k, cols = t ? s->k : s->n;
  const int64_t rows_p = t ? s->np : s->kp, ld = t ? s->kp : s->np;
  MKX_TRY(copy2d(p, dst, ld, v->B, v->ldb, rows, cols, s->es, st));
  return zero_pad(p, dst, rows, rows_p, cols, ld, s->es, st);
}

/* The caller's C (and A_out) from the twin's: transposed back when
 * column-major, else copied without the padding. */
static int get_out(const ad_plan *p, void *dst, int64_t ldd, const void *src,
                   int64_t rows, int64_t cols, int64_t lds, size_t esz,
                   cudaStream_t st) {
  if (p->s.cm) return transpose(p, src, rows, cols, lds, dst, ldd, esz, st);
  return copy2d(p, dst, ldd, src, lds, rows, cols, esz, st);
}

int mkx_tp_adapt_start(MKX_Comm c, void *plan, const void *args,
                       MKX_Stream stream) {
  ad_plan *p = plan;
  const ad_shape *s = &p->s;
  cudaStream_t st = (cudaStream_t)stream;
  const ad_args v = view(p->op, args);
  mkx_path_count(MKX_PATH_TP_ADAPTED);
  const void *twin = p->op == MKX_TP_OP_AG ? (const void *)&p->twin.ag
                                           : (const void *)&p->twin.red;
  const ad_args t = view(p->op, twin);
  MKX_TRY(mkx_fused_after_last(p->tmp, op_name(p->op), stream));
  MKX_TRY(put_a(p, &v, (void *)t.A, st));
  MKX_TRY(put_b(p, &v, (void *)t.B, st));
  MKX_TRY(p->inner_ops->start(c, p->inner, twin, stream));
  if (s->c)
    MKX_TRY(get_out(p, (void *)v.C, v.ldc, t.C, s->c_rows, s->n, s->np, s->ces,
                    st));
  if (s->ao)
    MKX_TRY(get_out(p, (void *)v.A_out, v.ld_aout, t.A_out, s->ao_rows, s->k,
                    s->kp, s->es, st));
  return mkx_fused_end(p->tmp, stream);
}

void mkx_tp_adapt_free(MKX_Comm c, void *plan) {
  ad_plan *p = plan;
  if (!p) return;
  if (p->inner_ops) p->inner_ops->free(c, p->inner);
  mkx_fused_ws_release(p->tmp);
  free(p);
}
#else
typedef int mkx_tp_adapter_unused; /* ISO C: not an empty unit */
#endif
