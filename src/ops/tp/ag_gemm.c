/* MKX_Allgather_gemm: argument checks, agreement and entry points. */
#include "core/error.h"
#include "host/host_ops.h"
#include "host/scales.h"
#include "ops/op.h"
#include "ops/validate.h"
#if HAVE_CUDA
#include "ops/fused/fused.h" /* the fused single-node path (tp/ag_gpu.c) */
#endif

static const char *const sig_names[] = {"k",     "dtype",          "ctype",
                                        "order", "scales->layout", NULL};

/* Dimensions of B as stored. */
static void b_dims(const mkx_ag_gemm_args *a, int64_t *rows, int64_t *cols) {
  *rows = a->transb == MKX_TRANS ? a->n : a->k;
  *cols = a->transb == MKX_TRANS ? a->k : a->n;
}

static int check(MKX_Comm c, void *args, mkx_signature *s) {
  mkx_ag_gemm_args *a = args;
  /* internal callers may leave fn unset */
  const char *fn = a->fn ? a->fn : mkx_op_allgather_gemm.name;
  int64_t br, bc;
  (void)c;
  MKX_TRY(mkx_check_gemm_types(fn, "ctype", a->dtype, a->ctype));
  MKX_TRY(mkx_check_order(fn, a->order));
  MKX_TRY(mkx_check_trans(fn, a->transb));
  MKX_TRY(mkx_check_size(fn, "m_local", a->m_local, 0));
  MKX_TRY(mkx_check_size(fn, "k", a->k, 1));
  MKX_TRY(mkx_check_size(fn, "n", a->n, 1));
  MKX_TRY(mkx_check_scales(fn, &a->sc, a->dtype, a->m_local > 0, 1));
  if (a->m_local > 0) MKX_TRY(mkx_check_ptr(fn, "A", a->A));
  MKX_TRY(mkx_check_ptr(fn, "B", a->B));
  MKX_TRY(mkx_check_ptr(fn, "C", a->C));
  MKX_TRY(mkx_check_ld(fn, "lda", a->lda, a->m_local, a->k, a->order));
  b_dims(a, &br, &bc);
  MKX_TRY(mkx_check_ld(fn, "ldb", a->ldb, br, bc, a->order));
  MKX_TRY(mkx_check_span(fn, "A", a->m_local, a->k, a->lda, a->order));
  MKX_TRY(mkx_check_span(fn, "B", br, bc, a->ldb, a->order));
  /* C and A_out have M rows, known after the exchange: row-major needs
   * only the columns now, column-major waits for post_check. */
  if (a->order == MKX_ROW_MAJOR) {
    MKX_TRY(mkx_check_ld(fn, "ldc", a->ldc, 1, a->n, a->order));
    if (a->A_out)
      MKX_TRY(mkx_check_ld(fn, "ld_aout", a->ld_aout, 1, a->k, a->order));
  } else {
    /* the rows (M) come with the agreement; the bound on ld and the span
     * of the columns can be checked now */
    MKX_TRY(mkx_check_ld(fn, "ldc", a->ldc, 1, a->n, a->order));
    MKX_TRY(MKX_CHECK_ELEMS(fn, "C (n columns of ldc)", a->n, a->ldc));
    if (a->A_out) {
      MKX_TRY(mkx_check_ld(fn, "ld_aout", a->ld_aout, 1, a->k, a->order));
      MKX_TRY(MKX_CHECK_ELEMS(fn, "A_out (k columns of ld_aout)", a->k,
                              a->ld_aout));
    }
  }
  const int64_t row_width = a->order == MKX_COL_MAJOR         ? -1
                            : a->A_out && a->ld_aout > a->ldc ? a->ld_aout
                                                              : a->ldc;
  *s = (mkx_signature){
      .sig = {a->k, a->dtype, a->ctype, a->order, a->sc.layout},
      .local = a->m_local,
      .late = {a->order == MKX_COL_MAJOR ? a->ldc : -1,
               a->order == MKX_COL_MAJOR && a->A_out ? a->ld_aout : -1,
               row_width}};
  return MKX_SUCCESS;
}

static int post_check(const mkx_op_class *cls, const int64_t *late,
                      const mkx_agreed *g, int q) {
  const char *fn = cls->name;
  if (g->total <= 0)
    return mkx_error(MKX_ERR_BAD_SIZE,
                     "%s: every rank has m_local = 0 "
                     "(M must be > 0)",
                     fn);
  const char *name[2] = {"ldc", "ld_aout"};
  for (int i = 0; i < 2; i++)
    if (late[i] >= 0 && late[i] < g->total)
      return mkx_error(MKX_ERR_BAD_LD,
                       "%s: %s = %lld on rank %d too small "
                       "for M = %lld column-major rows",
                       fn, name[i], (long long)late[i], q, (long long)g->total);
  /* row-major C and A_out span M (the ranks' m_local summed) lines */
  return late[2] < 0 ? MKX_SUCCESS
                     : MKX_CHECK_ELEMS(fn,
                                       "C or A_out (M rows of ldc or "
                                       "ld_aout)",
                                       g->total, late[2]);
}

static int buffers(MKX_Comm c, void *args, const mkx_agreed *g, mkx_buffer *b) {
  mkx_ag_gemm_args *a = args;
  int64_t M = g ? g->total : 0, br, bc;
  (void)c;
  b_dims(a, &br, &bc);
  b[0] = (mkx_buffer){
      "A", (void **)&a->A,
      mkx_matrix_bytes(a->m_local, a->k, a->lda, a->order, a->dtype),
      MKX_BUF_IN};
  b[1] = (mkx_buffer){"B", (void **)&a->B,
                      mkx_matrix_bytes(br, bc, a->ldb, a->order, a->dtype),
                      MKX_BUF_IN};
  b[2] = (mkx_buffer){"C", &a->C,
                      mkx_matrix_bytes(M, a->n, a->ldc, a->order, a->ctype),
                      MKX_BUF_OUT};
  b[3] = (mkx_buffer){"A_out", &a->A_out,
                      mkx_matrix_bytes(M, a->k, a->ld_aout, a->order, a->dtype),
                      MKX_BUF_OUT};
  const MKX_Scale_layout l = a->sc.layout;
  const int64_t gathered = a->A_out ? M * mkx_scales_row_floats(l, a->k) : 0;
  b[4] = (mkx_buffer){
      "scales->a", (void **)&a->sc.a,
      sizeof(float) * (size_t)mkx_scales_a_count(l, a->m_local, a->k),
      MKX_BUF_IN};
  b[5] = (mkx_buffer){"scales->b", (void **)&a->sc.b,
                      sizeof(float) * (size_t)mkx_scales_b_count(l, a->k, a->n),
                      MKX_BUF_IN};
  b[6] = (mkx_buffer){"scales->a_out", (void **)&a->sc.a_out,
                      sizeof(float) * (size_t)gathered, MKX_BUF_OUT};
  return 7;
}

static int host(MKX_Comm c, const void *args, const mkx_agreed *g) {
  return mkx_host_allgather_gemm(c, args, g);
}

#if HAVE_CUDA
#define AG_GPU_HOOKS                                                           \
  .gpu_check = mkx_ag_gemm_gpu_check, .gpu_local = mkx_ag_gemm_gpu_local,      \
  .gpu_choose = mkx_ag_gemm_gpu_choose,
#else
#define AG_GPU_HOOKS
#endif
/* The operation under its two public names (the scaled call's is in its
 * messages); one kind, so that ranks may mix the two. */
#define AG_CLASS(public_name)                                                  \
  {                                                                            \
    .name = public_name, .kind = MKX_OP_ALLGATHER_GEMM,                        \
    .args_size = sizeof(mkx_ag_gemm_args), .sig_names = sig_names,             \
    .check = check, .post_check = post_check, .buffers = buffers,              \
    .host = host, AG_GPU_HOOKS                                                 \
  }

const mkx_op_class mkx_op_allgather_gemm = AG_CLASS("MKX_Allgather_gemm");
static const mkx_op_class ag_scaled = AG_CLASS("MKX_Allgather_gemm_scaled");

#define AG_ARGS(scales, cls)                                                   \
  mkx_ag_gemm_args a = {A,          m_local, k,     lda,                       \
                        B,          n,       ldb,   transb,                    \
                        C,          ldc,     A_out, ld_aout,                   \
                        dtype,      ctype,   order, mkx_scales_arg(scales),    \
                        (cls)->name}

int MKX_Allgather_gemm_scaled(const void *A, int64_t m_local, int64_t k,
                              int64_t lda, const void *B, int64_t n,
                              int64_t ldb, MKX_Trans transb, void *C,
                              int64_t ldc, void *A_out, int64_t ld_aout,
                              MKX_Datatype dtype, MKX_Datatype ctype,
                              MKX_Order order, const MKX_Scales *scales,
                              MKX_Comm comm, MKX_Stream stream) {
  AG_ARGS(scales, &ag_scaled);
  return mkx_op_call(comm, &ag_scaled, &a, stream);
}

int MKX_Allgather_gemm(const void *A, int64_t m_local, int64_t k, int64_t lda,
                       const void *B, int64_t n, int64_t ldb, MKX_Trans transb,
                       void *C, int64_t ldc, void *A_out, int64_t ld_aout,
                       MKX_Datatype dtype, MKX_Datatype ctype, MKX_Order order,
                       MKX_Comm comm, MKX_Stream stream) {
  AG_ARGS(NULL, &mkx_op_allgather_gemm);
  return mkx_op_call(comm, &mkx_op_allgather_gemm, &a, stream);
}

int MKX_Allgather_gemm_scaled_init(const void *A, int64_t m_local, int64_t k,
                                   int64_t lda, const void *B, int64_t n,
                                   int64_t ldb, MKX_Trans transb, void *C,
                                   int64_t ldc, void *A_out, int64_t ld_aout,
                                   MKX_Datatype dtype, MKX_Datatype ctype,
                                   MKX_Order order, const MKX_Scales *scales,
                                   MKX_Comm comm, MPI_Info info,
                                   MKX_Request *request) {
  AG_ARGS(scales, &ag_scaled);
  return mkx_plan_create(comm, &ag_scaled, &a, info, request);
}

int MKX_Allgather_gemm_init(const void *A, int64_t m_local, int64_t k,
                            int64_t lda, const void *B, int64_t n, int64_t ldb,
                            MKX_Trans transb, void *C, int64_t ldc, void *A_out,
                            int64_t ld_aout, MKX_Datatype dtype,
                            MKX_Datatype ctype, MKX_Order order, MKX_Comm comm,
                            MPI_Info info, MKX_Request *request) {
  AG_ARGS(NULL, &mkx_op_allgather_gemm);
  return mkx_plan_create(comm, &mkx_op_allgather_gemm, &a, info, request);
}
