/* MKX_Ring_attention: checks and entry point. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "core/error.h"
#include "host/host_ops.h"
#include "ops/op.h"
#include "ops/validate.h"
#if HAVE_CUDA
#include "ops/attn/attn_gpu.h"
#endif

static const char *const FN = "MKX_Ring_attention";
static const char *const sig_names[] = {"batch",    "seq_local", "heads_q",
                                        "heads_kv", "head_dim",  "causal",
                                        "scale",    "dtype",     NULL};

static int check(MKX_Comm c, void *args, mkx_signature *s) {
  mkx_attn_args *a = args;
  int64_t scale_bits;
  MKX_TRY(mkx_check_dtype(FN, "dtype", a->dtype));
  MKX_TRY(mkx_check_not_fp8(FN, a->dtype));
  MKX_TRY(mkx_check_size(FN, "batch", a->batch, 1));
  MKX_TRY(mkx_check_size(FN, "seq_local", a->seq_local, 1));
  a->layout = c->opt.attn_layout; /* agreed when the communicator was made */
  if (a->layout == MKX_ATTN_ZIGZAG && a->seq_local % 2)
    return mkx_error(MKX_ERR_BAD_SIZE,
                     "%s: seq_local = %lld must be even "
                     "with option attn_layout=zigzag (two halves per rank)",
                     FN, (long long)a->seq_local);
  MKX_TRY(mkx_check_size(FN, "heads_q", a->heads_q, 1));
  MKX_TRY(mkx_check_size(FN, "heads_kv", a->heads_kv, 1));
  MKX_TRY(mkx_check_size(FN, "head_dim", a->head_dim, 1));
  if (a->heads_q % a->heads_kv != 0)
    return mkx_error(MKX_ERR_BAD_SIZE,
                     "%s: heads_q = %lld is not a multiple "
                     "of heads_kv = %lld",
                     FN, (long long)a->heads_q, (long long)a->heads_kv);
  MKX_TRY(MKX_CHECK_ELEMS(FN, "Q (batch x seq_local x heads_q x head_dim)",
                          a->batch, a->seq_local, a->heads_q, a->head_dim));
  MKX_TRY(MKX_CHECK_ELEMS(FN, "K (batch x seq_local x heads_kv x head_dim)",
                          a->batch, a->seq_local, a->heads_kv, a->head_dim));
  if (isnan(a->scale) || isinf(a->scale))
    return mkx_error(MKX_ERR_INVALID_ARG, "%s: scale is not finite", FN);
  if (a->scale <= 0) a->scale = 1.0 / sqrt((double)a->head_dim);
  MKX_TRY(mkx_check_ptr(FN, "Q", a->Q));
  MKX_TRY(mkx_check_ptr(FN, "K", a->K));
  MKX_TRY(mkx_check_ptr(FN, "V", a->V));
  MKX_TRY(mkx_check_ptr(FN, "O", a->O));
  a->causal = a->causal != 0;
  memcpy(&scale_bits, &a->scale, sizeof scale_bits);
  *s = (mkx_signature){.sig = {a->batch, a->seq_local, a->heads_q, a->heads_kv,
                               a->head_dim, a->causal, scale_bits, a->dtype},
                       .local = a->seq_local,
                       .late = {-1, -1, -1}};
  return MKX_SUCCESS;
}

static int buffers(MKX_Comm c, void *args, const mkx_agreed *g, mkx_buffer *b) {
  mkx_attn_args *a = args;
  size_t es = MKX_Type_size(a->dtype);
  size_t rows = (size_t)(a->batch * a->seq_local);
  (void)c, (void)g;
  b[0] =
      (mkx_buffer){"Q", (void **)&a->Q,
                   rows * (size_t)(a->heads_q * a->head_dim) * es, MKX_BUF_IN};
  b[1] =
      (mkx_buffer){"K", (void **)&a->K,
                   rows * (size_t)(a->heads_kv * a->head_dim) * es, MKX_BUF_IN};
  b[2] = (mkx_buffer){"V", (void **)&a->V, b[1].bytes, MKX_BUF_IN};
  b[3] = (mkx_buffer){"O", &a->O, b[0].bytes, MKX_BUF_OUT};
  b[4] = (mkx_buffer){"LSE", (void **)&a->LSE,
                      rows * (size_t)a->heads_q * sizeof(float), MKX_BUF_OUT};
  return 5;
}

static int host(MKX_Comm c, const void *args, const mkx_agreed *g) {
  return mkx_host_ring_attention(c, args, g);
}

/* scale travels as its bits (compared exactly); say it as a number */
static int sig_text(int i, int64_t v, char *buf, size_t len) {
  if (strcmp(sig_names[i], "scale")) return 0;
  double d;
  memcpy(&d, &v, sizeof d);
  snprintf(buf, len, "%.17g", d);
  return 1;
}

const mkx_op_class mkx_op_ring_attention = {
    .name = "MKX_Ring_attention",
    .kind = MKX_OP_RING_ATTENTION,
    .args_size = sizeof(mkx_attn_args),
    .sig_names = sig_names,
    .sig_text = sig_text,
    .check = check,
    .buffers = buffers,
    .host = host,
#if HAVE_CUDA
    .gpu_check = mkx_attn_gpu_check,
    .gpu_choose = mkx_attn_gpu_choose,
#endif
};

int MKX_Ring_attention(const void *Q, const void *K, const void *V, void *O,
                       float *LSE, int64_t batch, int64_t seq_local,
                       int64_t heads_q, int64_t heads_kv, int64_t head_dim,
                       int causal, double scale, MKX_Datatype dtype,
                       MKX_Comm comm, MKX_Stream stream) {
  mkx_attn_args a = {Q,      K,         V,       O,        LSE,
                     batch,  seq_local, heads_q, heads_kv, head_dim,
                     causal, scale,     dtype};
  return mkx_op_call(comm, &mkx_op_ring_attention, &a, stream);
}

int MKX_Ring_attention_init(const void *Q, const void *K, const void *V,
                            void *O, float *LSE, int64_t batch,
                            int64_t seq_local, int64_t heads_q,
                            int64_t heads_kv, int64_t head_dim, int causal,
                            double scale, MKX_Datatype dtype, MKX_Comm comm,
                            MPI_Info info, MKX_Request *request) {
  mkx_attn_args a = {Q,      K,         V,       O,        LSE,
                     batch,  seq_local, heads_q, heads_kv, head_dim,
                     causal, scale,     dtype};
  return mkx_plan_create(comm, &mkx_op_ring_attention, &a, info, request);
}
