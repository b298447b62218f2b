/*
 * mkx_f08_shim.c - the C side of the Fortran 2008 module mkx_f08.
 *
 * What the module cannot do in Fortran alone:
 *  - turn mpi_f08 handles (MPI_Fint, the MPI_VAL of type(MPI_Comm) and
 *    type(MPI_Info)) into C handles with MPI_Comm_f2c / MPI_Info_f2c;
 *  - read the address, element size and first-dimension stride of an
 *    ordinary Fortran array from its C descriptor (type(*), dimension(..)
 *    dummies of BIND(C) interfaces, ISO_Fortran_binding.h, TS 29113);
 *  - export the C values of every constant so that a test can compare the
 *    module's named constants with mkx.h.
 *
 * Errors found here (a buffer that is not contiguous in its first dimension,
 * an element size that does not match the datatype, a type(c_ptr) among
 * arrays) are per rank, but the operations are collective: so the shim
 * still calls the operation, with an invalid datatype, which makes MKX fail
 * the call on this rank and report MKX_ERR_PEER on the others (no rank is
 * left waiting), and then returns its own error code.  Its message is
 * returned by mkx_f08_last_error (MKX_Get_last_error in Fortran) until the
 * next call through the module.
 *
 * Nothing here is part of the C API: these symbols are for mkx_f08 only.
 */
#include <ISO_Fortran_binding.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <mpi.h>
#include "mkx.h"

/* ---- errors found by the shim --------------------------------------------- */

static _Thread_local char shim_message[512];
static _Thread_local int shim_failed;

void mkx_f08_clear_error(void);
const char *mkx_f08_last_error(void);

void mkx_f08_clear_error(void) { shim_failed = 0; }

const char *mkx_f08_last_error(void) {
  return shim_failed ? shim_message : MKX_Get_last_error();
}

static int shim_error(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(shim_message, sizeof shim_message, fmt, ap);
  va_end(ap);
  shim_failed = 1;
  return code;
}

/* ---- Fortran arrays --------------------------------------------------------- */

/* The address of array argument `name` of `fn`, or NULL when it is absent
 * (optional).  want_size: required element size in bytes (0: any);
 * want_type: required CFI type (-1: any). */
static int arg_addr(const char *fn, const char *name, const CFI_cdesc_t *d,
                    size_t want_size, int want_type, void **out) {
  *out = NULL;
  if (d == NULL) return MKX_SUCCESS;
  if (d->type == CFI_type_cptr)
    return shim_error(MKX_ERR_INVALID_ARG,
                      "%s: %s is a type(c_ptr) but the first buffer is an "
                      "array: pass arrays for every buffer, or type(c_ptr) "
                      "for every buffer", fn, name);
  if (d->rank > 0 && d->dim[0].extent > 1 &&
      d->dim[0].sm != (CFI_index_t)d->elem_len)
    return shim_error(MKX_ERR_INVALID_ARG,
                      "%s: %s is not contiguous in its first dimension "
                      "(stride %lld bytes, elements of %zu bytes); the "
                      "leading dimension argument describes the other "
                      "dimensions", fn, name, (long long)d->dim[0].sm,
                      d->elem_len);
  if (want_size != 0 && d->elem_len != want_size)
    return shim_error(MKX_ERR_INVALID_ARG,
                      "%s: %s has %zu-byte elements but its datatype needs "
                      "%zu bytes", fn, name, d->elem_len, want_size);
  if (want_type >= 0 && d->type != want_type)
    return shim_error(MKX_ERR_INVALID_ARG,
                      "%s: %s has the wrong type (want %s)", fn, name,
                      want_type == CFI_type_int32_t   ? "integer(c_int32_t)"
                      : want_type == CFI_type_int64_t ? "integer(c_int64_t)"
                                                      : "real(c_float)");
  *out = d->base_addr;
  return MKX_SUCCESS;
}

/* Collect the first shim error of a call. */
#define ARG(name, desc, size, type, out)                                  \
  do {                                                                    \
    if (rc == MKX_SUCCESS) rc = arg_addr(fn, name, desc, size, type, out); \
  } while (0)

/* Element size of a datatype, 0 (no check) for an invalid one. */
static size_t esize(int dtype) { return MKX_Type_size((MKX_Datatype)dtype); }

/* A datatype MKX refuses on this rank, so that a shim error still takes
 * part in the call's agreement exchange (see the top of this file). */
#define BAD_DTYPE ((MKX_Datatype)0)

/* The shim's error (if any) wins over MKX's; the call was made either way. */
static int finish(int shim_rc, int mkx_rc) {
  return shim_rc != MKX_SUCCESS ? shim_rc : mkx_rc;
}

/* ---- types, communicators, options ---------------------------------------- */

int mkx_f08_type_size(int type, int64_t *size);

/* MKX_Type_size with an error code and message for an invalid type. */
int mkx_f08_type_size(int type, int64_t *size) {
  shim_failed = 0;
  *size = (int64_t)MKX_Type_size((MKX_Datatype)type);
  if (*size == 0)
    return shim_error(MKX_ERR_INVALID_ARG, "MKX_Type_size: datatype %d is "
                      "not MKX_BF16, MKX_FP16, MKX_FP32 or MKX_FP64", type);
  return MKX_SUCCESS;
}

int mkx_f08_alloc_mem(MKX_Comm comm, int64_t size, void **ptr);
int mkx_f08_comm_create(MPI_Fint comm, MPI_Fint info, MKX_Comm *newcomm);

/* Fortran sizes are signed: a negative one is refused here (every rank
 * asks for the same size, so every rank refuses it). */
int mkx_f08_alloc_mem(MKX_Comm comm, int64_t size, void **ptr) {
  shim_failed = 0;
  *ptr = NULL;
  if (size < 0)
    return shim_error(MKX_ERR_BAD_SIZE, "MKX_Alloc_mem: size = %lld "
                      "(must be >= 0)", (long long)size);
  return MKX_Alloc_mem(comm, (size_t)size, ptr);
}
int mkx_f08_info_print(MKX_Comm comm, void *file);

int mkx_f08_comm_create(MPI_Fint comm, MPI_Fint info, MKX_Comm *newcomm) {
  shim_failed = 0;
  return MKX_Comm_create(MPI_Comm_f2c(comm), MPI_Info_f2c(info), newcomm);
}

/* file NULL: C's stdout, flushed so that it keeps its place among the
 * Fortran program's output. */
int mkx_f08_info_print(MKX_Comm comm, void *file) {
  shim_failed = 0;
  int rc = MKX_Info_print(comm, file ? file : (void *)stdout);
  fflush(file ? (FILE *)file : stdout);
  return rc;
}

/* ---- operations on type(c_ptr) buffers (persistent: need MPI_Info) ------- */

int mkx_f08_allgather_gemm_init_p(const void *A, int64_t m_local, int64_t k,
                                  int64_t lda, const void *B, int64_t n,
                                  int64_t ldb, int transb, void *C,
                                  int64_t ldc, void *A_out, int64_t ld_aout,
                                  int dtype, int ctype, int order,
                                  MKX_Comm comm, MPI_Fint info,
                                  MKX_Request *request);
int mkx_f08_gemm_reduce_scatter_init_p(const void *A, int64_t M,
                                       int64_t k_local, int64_t lda,
                                       const void *B, int64_t n, int64_t ldb,
                                       int transb, void *C, int64_t ldc,
                                       int dtype, int ctype, int order,
                                       MKX_Comm comm, MPI_Fint info,
                                       MKX_Request *request);
int mkx_f08_gemm_allreduce_init_p(const void *A, int64_t M, int64_t k_local,
                                  int64_t lda, const void *B, int64_t n,
                                  int64_t ldb, int transb, void *C,
                                  int64_t ldc, int dtype, int ctype, int order,
                                  MKX_Comm comm, MPI_Fint info,
                                  MKX_Request *request);

int mkx_f08_allgather_gemm_init_p(const void *A, int64_t m_local, int64_t k,
                                  int64_t lda, const void *B, int64_t n,
                                  int64_t ldb, int transb, void *C,
                                  int64_t ldc, void *A_out, int64_t ld_aout,
                                  int dtype, int ctype, int order,
                                  MKX_Comm comm, MPI_Fint info,
                                  MKX_Request *request) {
  shim_failed = 0;
  return MKX_Allgather_gemm_init(
      A, m_local, k, lda, B, n, ldb, (MKX_Trans)transb, C, ldc, A_out,
      ld_aout, (MKX_Datatype)dtype, (MKX_Datatype)ctype, (MKX_Order)order,
      comm, MPI_Info_f2c(info), request);
}

int mkx_f08_gemm_reduce_scatter_init_p(const void *A, int64_t M,
                                       int64_t k_local, int64_t lda,
                                       const void *B, int64_t n, int64_t ldb,
                                       int transb, void *C, int64_t ldc,
                                       int dtype, int ctype, int order,
                                       MKX_Comm comm, MPI_Fint info,
                                       MKX_Request *request) {
  shim_failed = 0;
  return MKX_Gemm_reduce_scatter_init(
      A, M, k_local, lda, B, n, ldb, (MKX_Trans)transb, C, ldc,
      (MKX_Datatype)dtype, (MKX_Datatype)ctype, (MKX_Order)order, comm,
      MPI_Info_f2c(info), request);
}

int mkx_f08_gemm_allreduce_init_p(const void *A, int64_t M, int64_t k_local,
                                  int64_t lda, const void *B, int64_t n,
                                  int64_t ldb, int transb, void *C,
                                  int64_t ldc, int dtype, int ctype, int order,
                                  MKX_Comm comm, MPI_Fint info,
                                  MKX_Request *request) {
  shim_failed = 0;
  return MKX_Gemm_allreduce_init(
      A, M, k_local, lda, B, n, ldb, (MKX_Trans)transb, C, ldc,
      (MKX_Datatype)dtype, (MKX_Datatype)ctype, (MKX_Order)order, comm,
      MPI_Info_f2c(info), request);
}

/* ---- operations on Fortran arrays ------------------------------------------ */

int mkx_f08_allgather_gemm_a(const CFI_cdesc_t *A, int64_t m_local, int64_t k,
                             int64_t lda, const CFI_cdesc_t *B, int64_t n,
                             int64_t ldb, int transb, const CFI_cdesc_t *C,
                             int64_t ldc, const CFI_cdesc_t *A_out,
                             int64_t ld_aout, int dtype, int ctype, int order,
                             MKX_Comm comm, void *stream, int persistent,
                             MPI_Fint info, MKX_Request *request);
int mkx_f08_gemm_reduce_scatter_a(const CFI_cdesc_t *A, int64_t M,
                                  int64_t k_local, int64_t lda,
                                  const CFI_cdesc_t *B, int64_t n, int64_t ldb,
                                  int transb, const CFI_cdesc_t *C,
                                  int64_t ldc, int dtype, int ctype, int order,
                                  MKX_Comm comm, void *stream, int persistent,
                                  MPI_Fint info, MKX_Request *request);
int mkx_f08_gemm_allreduce_a(const CFI_cdesc_t *A, int64_t M, int64_t k_local,
                             int64_t lda, const CFI_cdesc_t *B, int64_t n,
                             int64_t ldb, int transb, const CFI_cdesc_t *C,
                             int64_t ldc, int dtype, int ctype, int order,
                             MKX_Comm comm, void *stream, int persistent,
                             MPI_Fint info, MKX_Request *request);
int mkx_f08_ring_attention_a(const CFI_cdesc_t *Q, const CFI_cdesc_t *K,
                             const CFI_cdesc_t *V, const CFI_cdesc_t *O,
                             const CFI_cdesc_t *LSE, int64_t batch,
                             int64_t seq_local, int64_t heads_q,
                             int64_t heads_kv, int64_t head_dim, int causal,
                             double scale, int dtype, MKX_Comm comm,
                             void *stream);
int mkx_f08_moe_dispatch_gemm_a(const CFI_cdesc_t *X, int64_t num_tokens,
                                int64_t hidden, const CFI_cdesc_t *topk_ids,
                                const CFI_cdesc_t *topk_weight, int64_t topk,
                                int64_t num_experts, const CFI_cdesc_t *W,
                                int64_t n, const CFI_cdesc_t *Y,
                                int64_t y_rows,
                                const CFI_cdesc_t *expert_rows,
                                const CFI_cdesc_t *origin, int dtype,
                                MKX_Comm comm, void *stream);
int mkx_f08_moe_layer_a(const CFI_cdesc_t *X, int64_t num_tokens,
                        int64_t hidden, const CFI_cdesc_t *topk_ids,
                        const CFI_cdesc_t *topk_weight, int64_t topk,
                        int64_t num_experts, const CFI_cdesc_t *W1,
                        const CFI_cdesc_t *W2, int64_t ffn,
                        const CFI_cdesc_t *out, int dtype, MKX_Comm comm,
                        void *stream);

/* persistent != 0: make a persistent request (the _init call) instead of
 * running the operation on `stream`. */
int mkx_f08_allgather_gemm_a(const CFI_cdesc_t *A, int64_t m_local, int64_t k,
                             int64_t lda, const CFI_cdesc_t *B, int64_t n,
                             int64_t ldb, int transb, const CFI_cdesc_t *C,
                             int64_t ldc, const CFI_cdesc_t *A_out,
                             int64_t ld_aout, int dtype, int ctype, int order,
                             MKX_Comm comm, void *stream, int persistent,
                             MPI_Fint info, MKX_Request *request) {
  const char *fn = persistent ? "MKX_Allgather_gemm_init"
                              : "MKX_Allgather_gemm";
  void *a = NULL, *b = NULL, *c = NULL, *aout = NULL;
  int rc = MKX_SUCCESS, mrc;
  shim_failed = 0;
  ARG("A", A, esize(dtype), -1, &a);
  ARG("B", B, esize(dtype), -1, &b);
  ARG("C", C, esize(ctype), -1, &c);
  ARG("A_out", A_out, esize(dtype), -1, &aout);
  MKX_Datatype dt = rc == MKX_SUCCESS ? (MKX_Datatype)dtype : BAD_DTYPE;
  if (persistent)
    mrc = MKX_Allgather_gemm_init(a, m_local, k, lda, b, n, ldb,
                                  (MKX_Trans)transb, c, ldc, aout, ld_aout, dt,
                                  (MKX_Datatype)ctype, (MKX_Order)order, comm,
                                  MPI_Info_f2c(info), request);
  else
    mrc = MKX_Allgather_gemm(a, m_local, k, lda, b, n, ldb, (MKX_Trans)transb,
                             c, ldc, aout, ld_aout, dt, (MKX_Datatype)ctype,
                             (MKX_Order)order, comm, stream);
  return finish(rc, mrc);
}

/* GEMM+ReduceScatter and GEMM+AllReduce take the same arguments: one body
 * serves both, given the calls of the one at hand. */
typedef struct red_calls {
  const char *name, *init_name;
  int (*call)(const void *, int64_t, int64_t, int64_t, const void *, int64_t,
              int64_t, MKX_Trans, void *, int64_t, MKX_Datatype,
              MKX_Datatype, MKX_Order, MKX_Comm, MKX_Stream);
  int (*init)(const void *, int64_t, int64_t, int64_t, const void *, int64_t,
              int64_t, MKX_Trans, void *, int64_t, MKX_Datatype,
              MKX_Datatype, MKX_Order, MKX_Comm, MPI_Info, MKX_Request *);
} red_calls;

static const red_calls rs_calls = {"MKX_Gemm_reduce_scatter",
                                   "MKX_Gemm_reduce_scatter_init",
                                   MKX_Gemm_reduce_scatter,
                                   MKX_Gemm_reduce_scatter_init};
static const red_calls ar_calls = {"MKX_Gemm_allreduce",
                                   "MKX_Gemm_allreduce_init",
                                   MKX_Gemm_allreduce, MKX_Gemm_allreduce_init};

static int gemm_red_a(const red_calls *ops, const CFI_cdesc_t *A, int64_t M,
                      int64_t k_local, int64_t lda, const CFI_cdesc_t *B,
                      int64_t n, int64_t ldb, int transb,
                      const CFI_cdesc_t *C, int64_t ldc, int dtype, int ctype,
                      int order, MKX_Comm comm, void *stream, int persistent,
                      MPI_Fint info, MKX_Request *request) {
  const char *fn = persistent ? ops->init_name : ops->name;
  void *a = NULL, *b = NULL, *c = NULL;
  int rc = MKX_SUCCESS, mrc;
  shim_failed = 0;
  ARG("A", A, esize(dtype), -1, &a);
  ARG("B", B, esize(dtype), -1, &b);
  ARG("C", C, esize(ctype), -1, &c);
  MKX_Datatype dt = rc == MKX_SUCCESS ? (MKX_Datatype)dtype : BAD_DTYPE;
  if (persistent)
    mrc = ops->init(a, M, k_local, lda, b, n, ldb, (MKX_Trans)transb, c, ldc,
                    dt, (MKX_Datatype)ctype, (MKX_Order)order, comm,
                    MPI_Info_f2c(info), request);
  else
    mrc = ops->call(a, M, k_local, lda, b, n, ldb, (MKX_Trans)transb, c, ldc,
                    dt, (MKX_Datatype)ctype, (MKX_Order)order, comm, stream);
  return finish(rc, mrc);
}

int mkx_f08_gemm_reduce_scatter_a(const CFI_cdesc_t *A, int64_t M,
                                  int64_t k_local, int64_t lda,
                                  const CFI_cdesc_t *B, int64_t n, int64_t ldb,
                                  int transb, const CFI_cdesc_t *C,
                                  int64_t ldc, int dtype, int ctype, int order,
                                  MKX_Comm comm, void *stream, int persistent,
                                  MPI_Fint info, MKX_Request *request) {
  return gemm_red_a(&rs_calls, A, M, k_local, lda, B, n, ldb, transb, C, ldc,
                    dtype, ctype, order, comm, stream, persistent, info,
                    request);
}

int mkx_f08_gemm_allreduce_a(const CFI_cdesc_t *A, int64_t M, int64_t k_local,
                             int64_t lda, const CFI_cdesc_t *B, int64_t n,
                             int64_t ldb, int transb, const CFI_cdesc_t *C,
                             int64_t ldc, int dtype, int ctype, int order,
                             MKX_Comm comm, void *stream, int persistent,
                             MPI_Fint info, MKX_Request *request) {
  return gemm_red_a(&ar_calls, A, M, k_local, lda, B, n, ldb, transb, C, ldc,
                    dtype, ctype, order, comm, stream, persistent, info,
                    request);
}

int mkx_f08_ring_attention_a(const CFI_cdesc_t *Q, const CFI_cdesc_t *K,
                             const CFI_cdesc_t *V, const CFI_cdesc_t *O,
                             const CFI_cdesc_t *LSE, int64_t batch,
                             int64_t seq_local, int64_t heads_q,
                             int64_t heads_kv, int64_t head_dim, int causal,
                             double scale, int dtype, MKX_Comm comm,
                             void *stream) {
  const char *fn = "MKX_Ring_attention";
  void *q = NULL, *k = NULL, *v = NULL, *o = NULL, *lse = NULL;
  int rc = MKX_SUCCESS;
  shim_failed = 0;
  ARG("Q", Q, esize(dtype), -1, &q);
  ARG("K", K, esize(dtype), -1, &k);
  ARG("V", V, esize(dtype), -1, &v);
  ARG("O", O, esize(dtype), -1, &o);
  ARG("LSE", LSE, sizeof(float), CFI_type_float, &lse);
  MKX_Datatype dt = rc == MKX_SUCCESS ? (MKX_Datatype)dtype : BAD_DTYPE;
  return finish(rc, MKX_Ring_attention(q, k, v, o, lse, batch, seq_local,
                                       heads_q, heads_kv, head_dim, causal,
                                       scale, dt, comm, stream));
}

int mkx_f08_moe_dispatch_gemm_a(const CFI_cdesc_t *X, int64_t num_tokens,
                                int64_t hidden, const CFI_cdesc_t *topk_ids,
                                const CFI_cdesc_t *topk_weight, int64_t topk,
                                int64_t num_experts, const CFI_cdesc_t *W,
                                int64_t n, const CFI_cdesc_t *Y,
                                int64_t y_rows,
                                const CFI_cdesc_t *expert_rows,
                                const CFI_cdesc_t *origin, int dtype,
                                MKX_Comm comm, void *stream) {
  const char *fn = "MKX_Moe_dispatch_gemm";
  void *x = NULL, *ids = NULL, *wt = NULL, *w = NULL, *y = NULL,
       *rows = NULL, *org = NULL;
  int rc = MKX_SUCCESS;
  shim_failed = 0;
  ARG("X", X, esize(dtype), -1, &x);
  ARG("topk_ids", topk_ids, sizeof(int32_t), CFI_type_int32_t, &ids);
  ARG("topk_weight", topk_weight, sizeof(float), CFI_type_float, &wt);
  ARG("W", W, esize(dtype), -1, &w);
  ARG("Y", Y, esize(dtype), -1, &y);
  ARG("expert_rows", expert_rows, sizeof(int64_t), CFI_type_int64_t, &rows);
  ARG("origin", origin, sizeof(int32_t), CFI_type_int32_t, &org);
  MKX_Datatype dt = rc == MKX_SUCCESS ? (MKX_Datatype)dtype : BAD_DTYPE;
  return finish(rc, MKX_Moe_dispatch_gemm(x, num_tokens, hidden, ids, wt, topk,
                                          num_experts, w, n, y, y_rows, rows,
                                          org, dt, comm, stream));
}

int mkx_f08_moe_layer_a(const CFI_cdesc_t *X, int64_t num_tokens,
                        int64_t hidden, const CFI_cdesc_t *topk_ids,
                        const CFI_cdesc_t *topk_weight, int64_t topk,
                        int64_t num_experts, const CFI_cdesc_t *W1,
                        const CFI_cdesc_t *W2, int64_t ffn,
                        const CFI_cdesc_t *out, int dtype, MKX_Comm comm,
                        void *stream) {
  const char *fn = "MKX_Moe_layer";
  void *x = NULL, *ids = NULL, *wt = NULL, *w1 = NULL, *w2 = NULL, *o = NULL;
  int rc = MKX_SUCCESS;
  shim_failed = 0;
  ARG("X", X, esize(dtype), -1, &x);
  ARG("topk_ids", topk_ids, sizeof(int32_t), CFI_type_int32_t, &ids);
  ARG("topk_weight", topk_weight, sizeof(float), CFI_type_float, &wt);
  ARG("W1", W1, esize(dtype), -1, &w1);
  ARG("W2", W2, esize(dtype), -1, &w2);
  ARG("out", out, esize(dtype), -1, &o);
  MKX_Datatype dt = rc == MKX_SUCCESS ? (MKX_Datatype)dtype : BAD_DTYPE;
  return finish(rc, MKX_Moe_layer(x, num_tokens, hidden, ids, wt, topk,
                                  num_experts, w1, w2, ffn, o, dt, comm,
                                  stream));
}

/* ---- the C values of the constants, for the test of the module ---------- */

int mkx_f08_c_constant(const char *name, int *value);

int mkx_f08_c_constant(const char *name, int *value) {
#define K(x) {#x, (int)(x)}
  static const struct {
    const char *name;
    int value;
  } table[] = {
      K(MKX_VERSION_MAJOR), K(MKX_VERSION_MINOR), K(MKX_VERSION_PATCH),
      K(MKX_VERSION), K(MKX_SUCCESS), K(MKX_ERR_INVALID_ARG),
      K(MKX_ERR_NULL_POINTER), K(MKX_ERR_BAD_SIZE), K(MKX_ERR_BAD_LD),
      K(MKX_ERR_UNSUPPORTED), K(MKX_ERR_SHAPE_MISMATCH), K(MKX_ERR_TRUNCATE),
      K(MKX_ERR_CUDA), K(MKX_ERR_MPI), K(MKX_ERR_NET), K(MKX_ERR_TIMEOUT),
      K(MKX_ERR_NOMEM), K(MKX_ERR_PEER), K(MKX_ERR_INVALID_COMM),
      K(MKX_ERR_INVALID_REQUEST), K(MKX_ERR_INTERNAL), K(MKX_ERR_LASTCODE),
      K(MKX_BF16), K(MKX_FP16), K(MKX_FP32), K(MKX_FP64),
      K(MKX_ROW_MAJOR), K(MKX_COL_MAJOR), K(MKX_NO_TRANS), K(MKX_TRANS),
  };
#undef K
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
    if (strcmp(name, table[i].name) == 0) {
      *value = table[i].value;
      return 1;
    }
  return 0;
}
