/* MKX_Moe_dispatch_gemm and MKX_Moe_layer: checks and entry points.
 * Expert ids are checked by the path that reads them (they may live in
 * device memory). */
#include "core/error.h"
#include "host/host_ops.h"
#include "host/scales.h"
#include "ops/op.h"
#include "ops/validate.h"
#if HAVE_CUDA
#include "ops/moe/moe_gpu.h"
#endif

/* The _scaled calls agree also on their output type, weight layout and
 * scale layouts (signature() fills all nine values; each class names its
 * own). */
static const char *const sig_names[] = {"hidden",     "topk",  "num_experts",
                                        "n (or ffn)", "dtype", NULL};
static const char *const scaled_sig_names[] = {
    "hidden", "topk",   "num_experts",    "n (or ffn)", "dtype",
    "ytype",  "transw", "scales->layout", NULL};
static const char *const layer_scaled_sig_names[] = {
    "hidden", "topk",   "num_experts",    "n (or ffn)",      "dtype",
    "otype",  "transw", "scales->layout", "scales2->layout", NULL};

static const char *const scaled_fn = "MKX_Moe_dispatch_gemm_scaled";
static const char *const layer_scaled_fn = "MKX_Moe_layer_scaled";

/* The types: fp8, scales and transposed weights only through the _scaled
 * calls (fn). */
static int check_types(MKX_Comm c, const char *fn, mkx_moe_args *a) {
  if (fn != scaled_fn && fn != layer_scaled_fn) {
    MKX_TRY(mkx_check_dtype(fn, "dtype", a->dtype));
    return mkx_check_not_fp8(fn, a->dtype);
  }
  const int layer = fn == layer_scaled_fn;
  if (a->transw != MKX_NO_TRANS && a->transw != MKX_TRANS)
    return mkx_error(MKX_ERR_INVALID_ARG,
                     "%s: transw = %d on rank %d is not MKX_NO_TRANS or "
                     "MKX_TRANS",
                     fn, (int)a->transw, c->rank);
  MKX_TRY(
      mkx_check_gemm_types(fn, layer ? "otype" : "ytype", a->dtype, a->ytype));
  MKX_TRY(mkx_check_scales(fn, &a->sc, a->dtype, a->num_tokens > 0, 1));
  if (!layer) return MKX_SUCCESS;
  MKX_TRY(mkx_check_scales_named(fn, "scales2", &a->sc2, a->dtype, 0, 1));
  a->sc2.a = NULL; /* never read */
  return MKX_SUCCESS;
}

static int check_common(MKX_Comm c, const char *fn, mkx_moe_args *a) {
  MKX_TRY(check_types(c, fn, a));
  MKX_TRY(mkx_check_size(fn, "num_tokens", a->num_tokens, 0));
  MKX_TRY(mkx_check_size(fn, "hidden", a->hidden, 1));
  MKX_TRY(mkx_check_size(fn, "num_experts", a->num_experts, 1));
  MKX_TRY(mkx_check_size(fn, "topk", a->topk, 1));
  if (a->topk > a->num_experts)
    return mkx_error(MKX_ERR_BAD_SIZE,
                     "%s: topk = %lld exceeds num_experts "
                     "= %lld",
                     fn, (long long)a->topk, (long long)a->num_experts);
  if (a->num_experts % c->size != 0)
    return mkx_error(MKX_ERR_BAD_SIZE,
                     "%s: num_experts = %lld is not a "
                     "multiple of the communicator size %d",
                     fn, (long long)a->num_experts, c->size);
  MKX_TRY(
      MKX_CHECK_ELEMS(fn, "X (num_tokens x hidden)", a->num_tokens, a->hidden));
  MKX_TRY(MKX_CHECK_ELEMS(fn, "topk_ids (num_tokens x topk)", a->num_tokens,
                          a->topk));
  if (a->num_tokens > 0) {
    MKX_TRY(mkx_check_ptr(fn, "X", a->X));
    MKX_TRY(mkx_check_ptr(fn, "topk_ids", a->topk_ids));
  }
  return MKX_SUCCESS;
}

static void signature(const mkx_moe_args *a, int64_t width, mkx_signature *s) {
  *s = (mkx_signature){
      .sig = {a->hidden, a->topk, a->num_experts, width, a->dtype, a->ytype,
              a->transw, a->sc.layout, a->sc2.layout},
      .local = a->num_tokens,
      .late = {-1, -1, -1}};
}

static int dispatch_check_as(MKX_Comm c, const char *fn, mkx_moe_args *a,
                             mkx_signature *s) {
  MKX_TRY(check_common(c, fn, a));
  MKX_TRY(mkx_check_size(fn, "n", a->n, 1));
  MKX_TRY(mkx_check_size(fn, "y_rows", a->y_rows, 0));
  MKX_TRY(mkx_check_ptr(fn, "W", a->W));
  MKX_TRY(mkx_check_ptr(fn, "expert_rows", a->expert_rows));
  if (a->y_rows > 0) MKX_TRY(mkx_check_ptr(fn, "Y", a->Y));
  const int64_t ep = a->num_experts / c->size;
  MKX_TRY(MKX_CHECK_ELEMS(fn, "W (local experts x hidden x n)", ep, a->hidden,
                          a->n));
  MKX_TRY(MKX_CHECK_ELEMS(fn, "Y (y_rows x n)", a->y_rows, a->n));
  MKX_TRY(MKX_CHECK_ELEMS(fn, "origin (y_rows x 3)", a->y_rows, 3));
  signature(a, a->n, s);
  return MKX_SUCCESS;
}

static int dispatch_check(MKX_Comm c, void *args, mkx_signature *s) {
  return dispatch_check_as(c, "MKX_Moe_dispatch_gemm", args, s);
}
static int scaled_check(MKX_Comm c, void *args, mkx_signature *s) {
  return dispatch_check_as(c, scaled_fn, args, s);
}

static int layer_check_as(MKX_Comm c, const char *fn, mkx_moe_args *a,
                          mkx_signature *s) {
  MKX_TRY(check_common(c, fn, a));
  MKX_TRY(mkx_check_size(fn, "ffn", a->ffn, 1));
  MKX_TRY(mkx_check_ptr(fn, "W1", a->W));
  MKX_TRY(mkx_check_ptr(fn, "W2", a->W2));
  const int64_t ep = a->num_experts / c->size;
  MKX_TRY(MKX_CHECK_ELEMS(fn, "W1 (local experts x hidden x 2 ffn)", ep,
                          a->hidden, 2, a->ffn));
  MKX_TRY(MKX_CHECK_ELEMS(fn, "W2 (local experts x ffn x hidden)", ep, a->ffn,
                          a->hidden));
  if (a->num_tokens > 0) {
    MKX_TRY(mkx_check_ptr(fn, "topk_weight", a->topk_weight));
    MKX_TRY(mkx_check_ptr(fn, "out", a->out));
  }
  signature(a, a->ffn, s);
  return MKX_SUCCESS;
}

static int layer_check(MKX_Comm c, void *args, mkx_signature *s) {
  return layer_check_as(c, "MKX_Moe_layer", args, s);
}
static int layer_scaled_check(MKX_Comm c, void *args, mkx_signature *s) {
  return layer_check_as(c, layer_scaled_fn, args, s);
}

/* Buffers common to both calls: tokens and routing. */
static int token_buffers(mkx_moe_args *a, mkx_buffer *b) {
  size_t es = MKX_Type_size(a->dtype);
  size_t slots = (size_t)(a->num_tokens * a->topk);
  b[0] = (mkx_buffer){"X", (void **)&a->X,
                      (size_t)(a->num_tokens * a->hidden) * es, MKX_BUF_IN};
  b[1] = (mkx_buffer){"topk_ids", (void **)&a->topk_ids,
                      slots * sizeof(int32_t), MKX_BUF_IN};
  b[2] = (mkx_buffer){"topk_weight", (void **)&a->topk_weight,
                      slots * sizeof(float), MKX_BUF_IN};
  return 3;
}

/* scales->a (X's) and scales->b (each local expert's hidden x n weight's:
 * as many for either transw). */
static int scale_buffers(mkx_moe_args *a, size_t ep, int64_t n, mkx_buffer *b) {
  const MKX_Scale_layout l = a->sc.layout;
  b[0] = (mkx_buffer){
      "scales->a", (void **)&a->sc.a,
      sizeof(float) * (size_t)mkx_scales_a_count(l, a->num_tokens, a->hidden),
      MKX_BUF_IN};
  b[1] = (mkx_buffer){
      "scales->b", (void **)&a->sc.b,
      sizeof(float) * ep * (size_t)mkx_scales_b_count(l, a->hidden, n),
      MKX_BUF_IN};
  return 2;
}

static int dispatch_buffers(MKX_Comm c, void *args, const mkx_agreed *g,
                            mkx_buffer *b) {
  mkx_moe_args *a = args;
  size_t es = MKX_Type_size(a->dtype), ys = MKX_Type_size(a->ytype);
  size_t ep = (size_t)(a->num_experts / c->size);
  int n = token_buffers(a, b);
  (void)g;
  b[n++] = (mkx_buffer){"W", (void **)&a->W,
                        ep * (size_t)(a->hidden * a->n) * es, MKX_BUF_IN};
  b[n++] =
      (mkx_buffer){"Y", &a->Y, (size_t)(a->y_rows * a->n) * ys, MKX_BUF_OUT};
  n += scale_buffers(a, ep, a->n, b + n);
  b[n++] = (mkx_buffer){"expert_rows", (void **)&a->expert_rows,
                        ep * sizeof(int64_t), MKX_BUF_OUT};
  b[n++] = (mkx_buffer){"origin", (void **)&a->origin,
                        (size_t)a->y_rows * 3 * sizeof(int32_t), MKX_BUF_OUT};
  return n;
}

static int layer_buffers(MKX_Comm c, void *args, const mkx_agreed *g,
                         mkx_buffer *b) {
  mkx_moe_args *a = args;
  size_t es = MKX_Type_size(a->dtype), os = MKX_Type_size(a->ytype);
  size_t ep = (size_t)(a->num_experts / c->size);
  int n = token_buffers(a, b);
  (void)g;
  n += scale_buffers(a, ep, 2 * a->ffn, b + n);
  b[n++] = (mkx_buffer){
      "scales2->b", (void **)&a->sc2.b,
      sizeof(float) * ep *
          (size_t)mkx_scales_b_count(a->sc2.layout, a->ffn, a->hidden),
      MKX_BUF_IN};
  b[n++] = (mkx_buffer){"W1", (void **)&a->W,
                        ep * (size_t)(a->hidden * 2 * a->ffn) * es, MKX_BUF_IN};
  b[n++] = (mkx_buffer){"W2", (void **)&a->W2,
                        ep * (size_t)(a->ffn * a->hidden) * es, MKX_BUF_IN};
  b[n++] = (mkx_buffer){"out", &a->out,
                        (size_t)(a->num_tokens * a->hidden) * os, MKX_BUF_OUT};
  return n;
}

static int dispatch_host(MKX_Comm c, const void *a, const mkx_agreed *g) {
  return mkx_host_moe_dispatch_gemm(c, a, g);
}
static int layer_host(MKX_Comm c, const void *a, const mkx_agreed *g) {
  return mkx_host_moe_layer(c, a, g);
}

#if HAVE_CUDA
#define MOE_GPU_HOOKS(op)                                                      \
  .gpu_check = mkx_moe_##op##_gpu_check,                                       \
  .gpu_choose = mkx_moe_##op##_gpu_choose,
#else
#define MOE_GPU_HOOKS(op)
#endif

/* An operation under one of its public names, named in its messages and
 * agreement.  The _scaled calls share the plain calls' GPU paths, which
 * take only what the plain calls take (bf16/fp16 throughout, no scales,
 * weights hidden x n): fp8 or transposed weights on device buffers are
 * staged (moe_gpu_check.c). */
#define MOE_CLASS(public_name, KIND, names, op, ...)                           \
  {                                                                            \
    .name = public_name, .kind = MKX_OP_##KIND,                                \
    .args_size = sizeof(mkx_moe_args), .sig_names = names,                     \
    .buffers = op##_buffers, .host = op##_host, __VA_ARGS__                    \
  }

const mkx_op_class mkx_op_moe_dispatch_gemm =
    MOE_CLASS("MKX_Moe_dispatch_gemm", MOE_DISPATCH_GEMM, sig_names, dispatch,
              .check = dispatch_check, MOE_GPU_HOOKS(dispatch));
static const mkx_op_class mkx_op_moe_dispatch_gemm_scaled = MOE_CLASS(
    "MKX_Moe_dispatch_gemm_scaled", MOE_DISPATCH_GEMM, scaled_sig_names,
    dispatch, .check = scaled_check, MOE_GPU_HOOKS(dispatch));
const mkx_op_class mkx_op_moe_layer =
    MOE_CLASS("MKX_Moe_layer", MOE_LAYER, sig_names, layer,
              .check = layer_check, MOE_GPU_HOOKS(layer));
static const mkx_op_class mkx_op_moe_layer_scaled =
    MOE_CLASS("MKX_Moe_layer_scaled", MOE_LAYER, layer_scaled_sig_names, layer,
              .check = layer_scaled_check, MOE_GPU_HOOKS(layer));

/* The arguments of a dispatch call, or of a layer call (W2 != NULL). */
static mkx_moe_args dispatch_args(const void *X, int64_t num_tokens,
                                  int64_t hidden, const int32_t *topk_ids,
                                  const float *topk_weight, int64_t topk,
                                  int64_t num_experts, const void *W, int64_t n,
                                  void *Y, int64_t y_rows, int64_t *expert_rows,
                                  int32_t *origin, MKX_Datatype dtype) {
  return (mkx_moe_args){.X = X,
                        .num_tokens = num_tokens,
                        .hidden = hidden,
                        .topk_ids = topk_ids,
                        .topk_weight = topk_weight,
                        .topk = topk,
                        .num_experts = num_experts,
                        .W = W,
                        .n = n,
                        .Y = Y,
                        .y_rows = y_rows,
                        .expert_rows = expert_rows,
                        .origin = origin,
                        .dtype = dtype,
                        .ytype = dtype,
                        .sc = mkx_scales_arg(NULL),
                        .sc2 = mkx_scales_arg(NULL),
                        .transw = MKX_NO_TRANS};
}

static mkx_moe_args layer_args(const void *X, int64_t num_tokens,
                               int64_t hidden, const int32_t *topk_ids,
                               const float *topk_weight, int64_t topk,
                               int64_t num_experts, const void *W1,
                               const void *W2, int64_t ffn, void *out,
                               MKX_Datatype dtype) {
  return (mkx_moe_args){.X = X,
                        .num_tokens = num_tokens,
                        .hidden = hidden,
                        .topk_ids = topk_ids,
                        .topk_weight = topk_weight,
                        .topk = topk,
                        .num_experts = num_experts,
                        .W = W1,
                        .W2 = W2,
                        .ffn = ffn,
                        .out = out,
                        .dtype = dtype,
                        .ytype = dtype,
                        .sc = mkx_scales_arg(NULL),
                        .sc2 = mkx_scales_arg(NULL),
                        .transw = MKX_NO_TRANS};
}

int MKX_Moe_dispatch_gemm(const void *X, int64_t num_tokens, int64_t hidden,
                          const int32_t *topk_ids, const float *topk_weight,
                          int64_t topk, int64_t num_experts, const void *W,
                          int64_t n, void *Y, int64_t y_rows,
                          int64_t *expert_rows, int32_t *origin,
                          MKX_Datatype dtype, MKX_Comm comm,
                          MKX_Stream stream) {
  mkx_moe_args a =
      dispatch_args(X, num_tokens, hidden, topk_ids, topk_weight, topk,
                    num_experts, W, n, Y, y_rows, expert_rows, origin, dtype);
  return mkx_op_call(comm, &mkx_op_moe_dispatch_gemm, &a, stream);
}

int MKX_Moe_dispatch_gemm_init(
    const void *X, int64_t num_tokens, int64_t hidden, const int32_t *topk_ids,
    const float *topk_weight, int64_t topk, int64_t num_experts, const void *W,
    int64_t n, void *Y, int64_t y_rows, int64_t *expert_rows, int32_t *origin,
    MKX_Datatype dtype, MKX_Comm comm, MPI_Info info, MKX_Request *request) {
  mkx_moe_args a =
      dispatch_args(X, num_tokens, hidden, topk_ids, topk_weight, topk,
                    num_experts, W, n, Y, y_rows, expert_rows, origin, dtype);
  return mkx_plan_create(comm, &mkx_op_moe_dispatch_gemm, &a, info, request);
}

int MKX_Moe_layer(const void *X, int64_t num_tokens, int64_t hidden,
                  const int32_t *topk_ids, const float *topk_weight,
                  int64_t topk, int64_t num_experts, const void *W1,
                  const void *W2, int64_t ffn, void *out, MKX_Datatype dtype,
                  MKX_Comm comm, MKX_Stream stream) {
  mkx_moe_args a = layer_args(X, num_tokens, hidden, topk_ids, topk_weight,
                              topk, num_experts, W1, W2, ffn, out, dtype);
  return mkx_op_call(comm, &mkx_op_moe_layer, &a, stream);
}

int MKX_Moe_layer_init(const void *X, int64_t num_tokens, int64_t hidden,
                       const int32_t *topk_ids, const float *topk_weight,
                       int64_t topk, int64_t num_experts, const void *W1,
                       const void *W2, int64_t ffn, void *out,
                       MKX_Datatype dtype, MKX_Comm comm, MPI_Info info,
                       MKX_Request *request) {
  mkx_moe_args a = layer_args(X, num_tokens, hidden, topk_ids, topk_weight,
                              topk, num_experts, W1, W2, ffn, out, dtype);
  return mkx_plan_create(comm, &mkx_op_moe_layer, &a, info, request);
}

/* The _scaled call's arguments: the plain call's, with the weights'
 * layout, Y's type and the scales. */
static mkx_moe_args scaled_args(const void *X, int64_t num_tokens,
                                int64_t hidden, const int32_t *topk_ids,
                                const float *topk_weight, int64_t topk,
                                int64_t num_experts, const void *W, int64_t n,
                                MKX_Trans transw, void *Y, int64_t y_rows,
                                int64_t *expert_rows, int32_t *origin,
                                MKX_Datatype dtype, MKX_Datatype ytype,
                                const MKX_Scales *scales) {
  mkx_moe_args a =
      dispatch_args(X, num_tokens, hidden, topk_ids, topk_weight, topk,
                    num_experts, W, n, Y, y_rows, expert_rows, origin, dtype);
  a.transw = transw;
  a.ytype = ytype;
  a.sc = mkx_scales_arg(scales);
  return a;
}

int MKX_Moe_dispatch_gemm_scaled(
    const void *X, int64_t num_tokens, int64_t hidden, const int32_t *topk_ids,
    const float *topk_weight, int64_t topk, int64_t num_experts, const void *W,
    int64_t n, MKX_Trans transw, void *Y, int64_t y_rows, int64_t *expert_rows,
    int32_t *origin, MKX_Datatype dtype, MKX_Datatype ytype,
    const MKX_Scales *scales, MKX_Comm comm, MKX_Stream stream) {
  mkx_moe_args a = scaled_args(X, num_tokens, hidden, topk_ids, topk_weight,
                               topk, num_experts, W, n, transw, Y, y_rows,
                               expert_rows, origin, dtype, ytype, scales);
  return mkx_op_call(comm, &mkx_op_moe_dispatch_gemm_scaled, &a, stream);
}

int MKX_Moe_dispatch_gemm_scaled_init(
    const void *X, int64_t num_tokens, int64_t hidden, const int32_t *topk_ids,
    const float *topk_weight, int64_t topk, int64_t num_experts, const void *W,
    int64_t n, MKX_Trans transw, void *Y, int64_t y_rows, int64_t *expert_rows,
    int32_t *origin, MKX_Datatype dtype, MKX_Datatype ytype,
    const MKX_Scales *scales, MKX_Comm comm, MPI_Info info,
    MKX_Request *request) {
  mkx_moe_args a = scaled_args(X, num_tokens, hidden, topk_ids, topk_weight,
                               topk, num_experts, W, n, transw, Y, y_rows,
                               expert_rows, origin, dtype, ytype, scales);
  return mkx_plan_create(comm, &mkx_op_moe_dispatch_gemm_scaled, &a, info,
                         request);
}

/* The layer's _scaled call's arguments. */
static mkx_moe_args layer_scaled_args(
    const void *X, int64_t num_tokens, int64_t hidden, const int32_t *topk_ids,
    const float *topk_weight, int64_t topk, int64_t num_experts, const void *W1,
    const void *W2, int64_t ffn, MKX_Trans transw, void *out,
    MKX_Datatype dtype, MKX_Datatype otype, const MKX_Scales *scales,
    const MKX_Scales *scales2) {
  mkx_moe_args a = layer_args(X, num_tokens, hidden, topk_ids, topk_weight,
                              topk, num_experts, W1, W2, ffn, out, dtype);
  a.transw = transw;
  a.ytype = otype;
  a.sc = mkx_scales_arg(scales);
  a.sc2 = mkx_scales_arg(scales2);
  return a;
}

int MKX_Moe_layer_scaled(const void *X, int64_t num_tokens, int64_t hidden,
                         const int32_t *topk_ids, const float *topk_weight,
                         int64_t topk, int64_t num_experts, const void *W1,
                         const void *W2, int64_t ffn, MKX_Trans transw,
                         void *out, MKX_Datatype dtype, MKX_Datatype otype,
                         const MKX_Scales *scales, const MKX_Scales *scales2,
                         MKX_Comm comm, MKX_Stream stream) {
  mkx_moe_args a = layer_scaled_args(
      X, num_tokens, hidden, topk_ids, topk_weight, topk, num_experts, W1, W2,
      ffn, transw, out, dtype, otype, scales, scales2);
  return mkx_op_call(comm, &mkx_op_moe_layer_scaled, &a, stream);
}

int MKX_Moe_layer_scaled_init(const void *X, int64_t num_tokens, int64_t hidden,
                              const int32_t *topk_ids, const float *topk_weight,
                              int64_t topk, int64_t num_experts, const void *W1,
                              const void *W2, int64_t ffn, MKX_Trans transw,
                              void *out, MKX_Datatype dtype, MKX_Datatype otype,
                              const MKX_Scales *scales,
                              const MKX_Scales *scales2, MKX_Comm comm,
                              MPI_Info info, MKX_Request *request) {
  mkx_moe_args a = layer_scaled_args(
      X, num_tokens, hidden, topk_ids, topk_weight, topk, num_experts, W1, W2,
      ffn, transw, out, dtype, otype, scales, scales2);
  return mkx_plan_create(comm, &mkx_op_moe_layer_scaled, &a, info, request);
}
