/* The arguments of each operation, as one struct per operation, shared by
 * validation, the host path, staging and the GPU kernels' launchers. */
#ifndef MKX_HOST_OP_ARGS_H
#define MKX_HOST_OP_ARGS_H

#include <stdint.h>
#include "core/options.h"
#include "mkx.h"

/* Every operation, once, in the order of its kind: X(KIND, name) gives
 * MKX_OP_KIND here and its class mkx_op_name (src/ops/op.h). */
#define MKX_OPERATIONS(X)                                                      \
  X(ALLGATHER_GEMM, allgather_gemm)                                            \
  X(GEMM_REDUCE_SCATTER, gemm_reduce_scatter)                                  \
  X(GEMM_ALLREDUCE, gemm_allreduce)                                            \
  X(RING_ATTENTION, ring_attention)                                            \
  X(MOE_DISPATCH_GEMM, moe_dispatch_gemm)                                      \
  X(MOE_LAYER, moe_layer)

typedef enum {
#define MKX_OP_KIND_OF(kind, name) MKX_OP_##kind,
  MKX_OPERATIONS(MKX_OP_KIND_OF)
#undef MKX_OP_KIND_OF
      MKX_OP_COUNT
} mkx_op_kind;

/* MKX_Allgather_gemm */
typedef struct mkx_ag_gemm_args {
  const void *A;
  int64_t m_local, k, lda;
  const void *B;
  int64_t n, ldb;
  MKX_Trans transb;
  void *C;
  int64_t ldc;
  void *A_out;
  int64_t ld_aout;
  MKX_Datatype dtype, ctype;
  MKX_Order order;
  MKX_Scales sc;  /* layout MKX_SCALE_NONE: none */
  const char *fn; /* the public call, for messages */
} mkx_ag_gemm_args;

/* MKX_Gemm_reduce_scatter and MKX_Gemm_allreduce */
typedef struct mkx_rs_ar_args {
  const void *A;
  int64_t M, k_local, lda;
  const void *B;
  int64_t n, ldb;
  MKX_Trans transb;
  void *C;
  int64_t ldc;
  MKX_Datatype dtype, ctype;
  MKX_Order order;
  MKX_Scales sc;  /* layout MKX_SCALE_NONE: none */
  const char *fn; /* the public call, for messages */
} mkx_rs_ar_args;

/* MKX_Ring_attention */
typedef struct mkx_attn_args {
  const void *Q, *K, *V;
  void *O;
  float *LSE;
  int64_t batch, seq_local, heads_q, heads_kv, head_dim;
  int causal;
  double scale; /* scale already resolved (> 0) */
  MKX_Datatype dtype;
  int layout; /* MKX_ATTN_*, from option attn_layout (set by the checks) */
} mkx_attn_args;

/* The sequence position of local position i of rank r's shard (p ranks,
 * S positions each) in layout MKX_ATTN_* (option attn_layout; zigzag: S
 * even). */
static inline int64_t mkx_attn_position(int layout, int p, int r, int64_t S,
                                        int64_t i) {
  if (layout == MKX_ATTN_STRIPED) return i * p + r;
  if (layout == MKX_ATTN_ZIGZAG) {
    const int64_t h = S / 2;
    return i < h ? r * h + i : (2 * (int64_t)p - 1 - r) * h + (i - h);
  }
  return (int64_t)r * S + i;
}

/* MKX_Moe_dispatch_gemm (W, n, Y, y_rows, expert_rows, origin) and
 * MKX_Moe_layer (W = W1, W2, ffn, out), and their _scaled forms. */
typedef struct mkx_moe_args {
  const void *X;
  int64_t num_tokens, hidden;
  const int32_t *topk_ids;
  const float *topk_weight;
  int64_t topk;
  int64_t num_experts;
  const void *W;
  int64_t n;
  void *Y;
  int64_t y_rows;
  int64_t *expert_rows;
  int32_t *origin;
  const void *W2;
  int64_t ffn;
  void *out;
  MKX_Datatype dtype;
  MKX_Datatype ytype; /* Y's or out's; dtype but for the _scaled calls */
  MKX_Scales sc;      /* X's (a) and W's or W1's (b); MKX_SCALE_NONE: none */
  MKX_Scales sc2;     /* the layer's W2's (b); MKX_SCALE_NONE: none */
  MKX_Trans transw;   /* MKX_TRANS: each expert's weights and their block
                         scales stored transposed (_scaled calls only) */
} mkx_moe_args;

/* Values every rank learned in the agreement exchange of a call or plan. */
/* Bits of an operation's gpu_local hook (src/ops/op.h). */
enum {
  MKX_GPU_LOCAL_ADAPT = 1,        /* this rank's operands need the adapter */
  MKX_GPU_LOCAL_NO_ONE_KERNEL = 2 /* AllGather+GEMM: this rank's product
                                     does not fit the one-kernel split path */
};

typedef struct mkx_agreed {
  int64_t *local;   /* [size]: each rank's per-rank size (m_local, k_local,
                      num_tokens) */
  int64_t total;    /* sum of local */
  int gpu_adapt;    /* fused path: some rank's operands need the adapter
                      (src/ops/fused/adapter.c), so every rank takes it */
  unsigned gpu_any; /* MKX_GPU_LOCAL_* bits some rank's gpu_local set */
  int captured;     /* a call whose stream is being captured into a CUDA
                       graph on every rank */
} mkx_agreed;

#endif
