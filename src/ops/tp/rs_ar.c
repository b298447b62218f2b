/* MKX_Gemm_reduce_scatter and MKX_Gemm_allreduce: checks and entry points.
 * The two differ only in the rows of C each rank receives. */
#include "core/error.h"
#include "host/host_ops.h"
#include "host/scales.h"
#include "ops/op.h"
#include "ops/validate.h"
#if HAVE_CUDA
#include "ops/fused/fused.h" /* the fused single-node path (tp/rs_ar_gpu.c) */
#endif

static const char *const sig_names[] = {
    "M", "n", "dtype", "ctype", "order", "scales->layout", NULL};

/* Rows of C on this rank: its block for reduce-scatter, all for allreduce. */
static int64_t c_rows(MKX_Comm c, const mkx_rs_ar_args *a, int scatter) {
  int64_t first = 0, count = a->M;
  if (scatter) MKX_Block_range(a->M, c->size, c->rank, &first, &count);
  return count;
}

static void b_dims(const mkx_rs_ar_args *a, int64_t *rows, int64_t *cols) {
  *rows = a->transb == MKX_TRANS ? a->n : a->k_local;
  *cols = a->transb == MKX_TRANS ? a->k_local : a->n;
}

static int check(MKX_Comm c, mkx_rs_ar_args *a, mkx_signature *s, int scatter) {
  const char *fn = a->fn     ? a->fn /* unset by internal callers */
                   : scatter ? mkx_op_gemm_reduce_scatter.name
                             : mkx_op_gemm_allreduce.name;
  int64_t br, bc, rows;
  MKX_TRY(mkx_check_gemm_types(fn, "ctype", a->dtype, a->ctype));
  MKX_TRY(mkx_check_order(fn, a->order));
  MKX_TRY(mkx_check_trans(fn, a->transb));
  MKX_TRY(mkx_check_size(fn, "M", a->M, 1));
  MKX_TRY(mkx_check_size(fn, "k_local", a->k_local, 0));
  MKX_TRY(mkx_check_size(fn, "n", a->n, 1));
  MKX_TRY(
      mkx_check_scales(fn, &a->sc, a->dtype, a->k_local > 0, a->k_local > 0));
  rows = c_rows(c, a, scatter);
  if (a->k_local > 0) {
    MKX_TRY(mkx_check_ptr(fn, "A", a->A));
    MKX_TRY(mkx_check_ptr(fn, "B", a->B));
  }
  if (rows > 0) MKX_TRY(mkx_check_ptr(fn, "C", a->C));
  MKX_TRY(mkx_check_ld(fn, "lda", a->lda, a->M, a->k_local, a->order));
  b_dims(a, &br, &bc);
  MKX_TRY(mkx_check_ld(fn, "ldb", a->ldb, br, bc, a->order));
  MKX_TRY(mkx_check_ld(fn, "ldc", a->ldc, rows, a->n, a->order));
  MKX_TRY(mkx_check_span(fn, "A", a->M, a->k_local, a->lda, a->order));
  MKX_TRY(mkx_check_span(fn, "B", br, bc, a->ldb, a->order));
  MKX_TRY(mkx_check_span(fn, "C", rows, a->n, a->ldc, a->order));
  *s = (mkx_signature){
      .sig = {a->M, a->n, a->dtype, a->ctype, a->order, a->sc.layout},
      .local = a->k_local,
      .late = {-1, -1, -1}};
  return MKX_SUCCESS;
}

static int buffers(MKX_Comm c, mkx_rs_ar_args *a, mkx_buffer *b, int scatter) {
  int64_t br, bc;
  b_dims(a, &br, &bc);
  b[0] = (mkx_buffer){
      "A", (void **)&a->A,
      mkx_matrix_bytes(a->M, a->k_local, a->lda, a->order, a->dtype),
      MKX_BUF_IN};
  b[1] = (mkx_buffer){"B", (void **)&a->B,
                      mkx_matrix_bytes(br, bc, a->ldb, a->order, a->dtype),
                      MKX_BUF_IN};
  b[2] = (mkx_buffer){
      "C", &a->C,
      mkx_matrix_bytes(c_rows(c, a, scatter), a->n, a->ldc, a->order, a->ctype),
      MKX_BUF_OUT};
  const MKX_Scale_layout l = a->sc.layout;
  b[3] = (mkx_buffer){
      "scales->a", (void **)&a->sc.a,
      sizeof(float) * (size_t)mkx_scales_a_count(l, a->M, a->k_local),
      MKX_BUF_IN};
  b[4] = (mkx_buffer){
      "scales->b", (void **)&a->sc.b,
      sizeof(float) * (size_t)mkx_scales_b_count(l, a->k_local, a->n),
      MKX_BUF_IN};
  return 5;
}

static int rs_check(MKX_Comm c, void *a, mkx_signature *s) {
  return check(c, a, s, 1);
}
static int ar_check(MKX_Comm c, void *a, mkx_signature *s) {
  return check(c, a, s, 0);
}
static int rs_buffers(MKX_Comm c, void *a, const mkx_agreed *g, mkx_buffer *b) {
  (void)g;
  return buffers(c, a, b, 1);
}
static int ar_buffers(MKX_Comm c, void *a, const mkx_agreed *g, mkx_buffer *b) {
  (void)g;
  return buffers(c, a, b, 0);
}
static int rs_host(MKX_Comm c, const void *a, const mkx_agreed *g) {
  return mkx_host_gemm_reduce_scatter(c, a, g);
}
static int ar_host(MKX_Comm c, const void *a, const mkx_agreed *g) {
  return mkx_host_gemm_allreduce(c, a, g);
}

#if HAVE_CUDA
#define RS_GPU_HOOKS                                                           \
  .gpu_check = mkx_rs_gpu_check, .gpu_local = mkx_rs_gpu_local,                \
  .gpu_choose = mkx_rs_gpu_choose,
#define AR_GPU_HOOKS                                                           \
  .gpu_check = mkx_ar_gpu_check, .gpu_local = mkx_ar_gpu_local,                \
  .gpu_choose = mkx_ar_gpu_choose,
#else
#define RS_GPU_HOOKS
#define AR_GPU_HOOKS
#endif
/* Each operation under its two public names (the scaled call's is in its
 * messages); one kind each, so that ranks may mix the two. */
#define RED_CLASS(public_name, KIND, pre, HOOKS)                               \
  {                                                                            \
    .name = public_name, .kind = MKX_OP_##KIND,                                \
    .args_size = sizeof(mkx_rs_ar_args), .sig_names = sig_names,               \
    .check = pre##_check, .post_check = NULL, .buffers = pre##_buffers,        \
    .host = pre##_host, HOOKS                                                  \
  }

const mkx_op_class mkx_op_gemm_reduce_scatter =
    RED_CLASS("MKX_Gemm_reduce_scatter", GEMM_REDUCE_SCATTER, rs, RS_GPU_HOOKS);
const mkx_op_class mkx_op_gemm_allreduce =
    RED_CLASS("MKX_Gemm_allreduce", GEMM_ALLREDUCE, ar, AR_GPU_HOOKS);
static const mkx_op_class rs_scaled = RED_CLASS(
    "MKX_Gemm_reduce_scatter_scaled", GEMM_REDUCE_SCATTER, rs, RS_GPU_HOOKS);
static const mkx_op_class ar_scaled =
    RED_CLASS("MKX_Gemm_allreduce_scaled", GEMM_ALLREDUCE, ar, AR_GPU_HOOKS);

#define RED_ARGS(scales, cls)                                                  \
  mkx_rs_ar_args a = {                                                         \
      A,          M, k_local, lda,   B,     n,     ldb,                        \
      transb,     C, ldc,     dtype, ctype, order, mkx_scales_arg(scales),     \
      (cls)->name}

int MKX_Gemm_reduce_scatter_scaled(const void *A, int64_t M, int64_t k_local,
                                   int64_t lda, const void *B, int64_t n,
                                   int64_t ldb, MKX_Trans transb, void *C,
                                   int64_t ldc, MKX_Datatype dtype,
                                   MKX_Datatype ctype, MKX_Order order,
                                   const MKX_Scales *scales, MKX_Comm comm,
                                   MKX_Stream stream) {
  RED_ARGS(scales, &rs_scaled);
  return mkx_op_call(comm, &rs_scaled, &a, stream);
}

int MKX_Gemm_allreduce_scaled(const void *A, int64_t M, int64_t k_local,
                              int64_t lda, const void *B, int64_t n,
                              int64_t ldb, MKX_Trans transb, void *C,
                              int64_t ldc, MKX_Datatype dtype,
                              MKX_Datatype ctype, MKX_Order order,
                              const MKX_Scales *scales, MKX_Comm comm,
                              MKX_Stream stream) {
  RED_ARGS(scales, &ar_scaled);
  return mkx_op_call(comm, &ar_scaled, &a, stream);
}

int MKX_Gemm_reduce_scatter_scaled_init(const void *A, int64_t M,
                                        int64_t k_local, int64_t lda,
                                        const void *B, int64_t n, int64_t ldb,
                                        MKX_Trans transb, void *C, int64_t ldc,
                                        MKX_Datatype dtype, MKX_Datatype ctype,
                                        MKX_Order order,
                                        const MKX_Scales *scales, MKX_Comm comm,
                                        MPI_Info info, MKX_Request *request) {
  RED_ARGS(scales, &rs_scaled);
  return mkx_plan_create(comm, &rs_scaled, &a, info, request);
}

int MKX_Gemm_allreduce_scaled_init(const void *A, int64_t M, int64_t k_local,
                                   int64_t lda, const void *B, int64_t n,
                                   int64_t ldb, MKX_Trans transb, void *C,
                                   int64_t ldc, MKX_Datatype dtype,
                                   MKX_Datatype ctype, MKX_Order order,
                                   const MKX_Scales *scales, MKX_Comm comm,
                                   MPI_Info info, MKX_Request *request) {
  RED_ARGS(scales, &ar_scaled);
  return mkx_plan_create(comm, &ar_scaled, &a, info, request);
}

int MKX_Gemm_reduce_scatter(const void *A, int64_t M, int64_t k_local,
                            int64_t lda, const void *B, int64_t n, int64_t ldb,
                            MKX_Trans transb, void *C, int64_t ldc,
                            MKX_Datatype dtype, MKX_Datatype ctype,
                            MKX_Order order, MKX_Comm comm, MKX_Stream stream) {
  RED_ARGS(NULL, &mkx_op_gemm_reduce_scatter);
  return mkx_op_call(comm, &mkx_op_gemm_reduce_scatter, &a, stream);
}

int MKX_Gemm_allreduce(const void *A, int64_t M, int64_t k_local, int64_t lda,
                       const void *B, int64_t n, int64_t ldb, MKX_Trans transb,
                       void *C, int64_t ldc, MKX_Datatype dtype,
                       MKX_Datatype ctype, MKX_Order order, MKX_Comm comm,
                       MKX_Stream stream) {
  RED_ARGS(NULL, &mkx_op_gemm_allreduce);
  return mkx_op_call(comm, &mkx_op_gemm_allreduce, &a, stream);
}

int MKX_Gemm_reduce_scatter_init(const void *A, int64_t M, int64_t k_local,
                                 int64_t lda, const void *B, int64_t n,
                                 int64_t ldb, MKX_Trans transb, void *C,
                                 int64_t ldc, MKX_Datatype dtype,
                                 MKX_Datatype ctype, MKX_Order order,
                                 MKX_Comm comm, MPI_Info info,
                                 MKX_Request *request) {
  RED_ARGS(NULL, &mkx_op_gemm_reduce_scatter);
  return mkx_plan_create(comm, &mkx_op_gemm_reduce_scatter, &a, info, request);
}

int MKX_Gemm_allreduce_init(const void *A, int64_t M, int64_t k_local,
                            int64_t lda, const void *B, int64_t n, int64_t ldb,
                            MKX_Trans transb, void *C, int64_t ldc,
                            MKX_Datatype dtype, MKX_Datatype ctype,
                            MKX_Order order, MKX_Comm comm, MPI_Info info,
                            MKX_Request *request) {
  RED_ARGS(NULL, &mkx_op_gemm_allreduce);
  return mkx_plan_create(comm, &mkx_op_gemm_allreduce, &a, info, request);
}
