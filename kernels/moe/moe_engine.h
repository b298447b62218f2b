/*
 * MKX grouped expert GEMM for Hopper: C interface (kernels/moe/grouped_gemm.cu).
 * Includable from C11; needs only cuda_runtime.h and stdint.h.
 *
 * One persistent launch over every local expert.  The rows of expert e are
 * rows [offsets[e], offsets[e+1]) of A (row-major, lda), back to back in
 * expert order; the counts live in device memory and are never read by the
 * host, so the rows may be placed by an earlier kernel on the same stream.
 *   plain:   C[r, :]  = scale[r] * (A[r, :] W[e])                  (n columns)
 *   SwiGLU:  C[r, j]  = scale[r] * silu(G[r, j]) * U[r, j],  G = A[r,:] W[e][:, 0:n],
 *                       U = A[r,:] W[e][:, u:u+n],  silu(v) = v / (1 + exp(-v))
 * with scale[r] = row_scale[r], or 1 if row_scale is NULL; W is
 * [experts][k][ldw] row-major (N contiguous), n (plain) or u + n (SwiGLU)
 * columns used; u = up_col, or n if up_col is 0, a multiple of 8 (the
 * tensor map's loads of the up half start on 16-byte boundaries).  C has the rows of A (same row index, ldc); rows of C
 * outside [offsets[0], offsets[E]) are not written.  Operands bf16 or
 * fp16 (the same), fp32 accumulation, C bf16, fp16 or fp32, rounded once.
 *
 * Tiles are 128 rows of one expert by 128 or 256 columns (SwiGLU: the
 * gate and up halves of the same output columns in one tile), so an
 * expert with r rows costs ceil(r / 128) tile rows.
 *
 * Offsets are clamped to [0, a_rows] and made nondecreasing on the GPU, so
 * bad offsets never make the kernel read or write outside A and C; the
 * caller computes them (MKX's routing does).
 */
#ifndef MKX_MOE_ENGINE_H
#define MKX_MOE_ENGINE_H

#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  int experts;         /* E >= 1 */
  int64_t k;           /* inner size: columns of A, rows of each W[e] */
  int64_t n;           /* columns of C */
  const void *a;       /* a_rows x k, row stride lda */
  int64_t lda, a_rows; /* a_rows: rows A and C hold (a bound, not a count) */
  const int *offsets;  /* device: E + 1 row offsets */
  const void *w;       /* [E][k][ldw] */
  int64_t ldw;         /* >= n, or >= u + n with swiglu */
  void *c;             /* a_rows x n, row stride ldc */
  int64_t ldc;
  const float *row_scale; /* device, a_rows entries, or NULL */
  int ab_type;            /* MKX_GEMM_BF16 or MKX_GEMM_FP16 (gemm_engine.h) */
  int c_type;             /* MKX_GEMM_BF16, MKX_GEMM_FP16 or MKX_GEMM_FP32 */
  int swiglu;             /* 1: the SwiGLU form above */
  int num_ctas;           /* persistent CTAs; 0: one per SM */
  int block_n;            /* 0 (picked), 128 or 256: tile columns of W */
  int *work;              /* device, mkx_moe_gemm_work_ints(E) ints, one per concurrent run */
  int64_t up_col;         /* SwiGLU: first column of the up half (0: n) */
} mkx_moe_gemm_desc;

/* Ints of device workspace a run needs (the tile-row prefix over experts). */
int64_t mkx_moe_gemm_work_ints(int experts);

/* 1 if the engine can run d, else 0 and (if why != NULL) a static reason:
 * lda and ldw multiples of 8 (the tensor maps' row strides), 16-byte
 * aligned A, W, C, sizes below 2^31.  Any k and n.  Does not look at the
 * device. */
int mkx_moe_gemm_supported(const mkx_moe_gemm_desc *d, const char **why);

/* Enqueue the grouped GEMM on stream s (current device): 0, a cudaError_t
 * (> 0), or a negative MKX_GEMM_E* code of gemm_engine.h. */
int mkx_moe_gemm_run(const mkx_moe_gemm_desc *d, cudaStream_t s);

/* ---- routing on the GPU --------------------------------------------------
 * The rows a rank's token slots become on the owner of their expert, as a
 * stable counting sort: the rows of local expert le are grouped in expert
 * order, and within an expert ordered by slot index (token, then slot).
 * Slot i = t * topk + j of token t is "bad" if its id is outside
 * [0, experts) or repeats an earlier slot of its token; bad slots and slots
 * of other ranks' experts get no row.
 *   route:   ids -> offsets[0..local_experts] (row offsets of the local
 *            experts' groups), row_of_slot[i] (its row, or -1), status[0]
 *            (the first bad slot, or MKX_MOE_NO_BAD_SLOT), status[1] (rows
 *            in all = offsets[local_experts]).  Deterministic: the same ids
 *            give the same rows.
 *   gather:  A[row_of_slot[i]][0:hidden] = X[token(i)][0:hidden] (the
 *            columns up to lda zeroed), and where not NULL row_scale[row] =
 *            weight[i], origin[3 row ..] = (origin_rank, token, slot).
 *   combine: out[t][h] = sum over j in slot order of weight[t][j] *
 *            Y[row_of_slot[t*topk+j]][h] (fp32 Y, slots without a row
 *            skipped), rounded once to out's type.
 *   counts:  expert_rows[le] = offsets[le+1] - offsets[le] (int64). */
#define MKX_MOE_NO_BAD_SLOT 0x7F7F7F7F

typedef struct {
  int64_t tokens;
  int topk, experts; /* experts: in all (global ids) */
  int first_expert, local_experts;
  const int32_t *ids; /* device, tokens x topk */
  int *offsets;       /* device, local_experts + 1 */
  int *row_of_slot;   /* device, tokens x topk */
  int *status;        /* device, 2 ints */
  int *work;          /* device, mkx_moe_route_work_ints() ints */
} mkx_moe_route_desc;

int64_t mkx_moe_route_work_ints(int64_t tokens, int topk, int local_experts);
/* tokens * topk < MKX_MOE_NO_BAD_SLOT, 1 <= local_experts <= 8192 */
int mkx_moe_route_supported(const mkx_moe_route_desc *d, const char **why);
int mkx_moe_route_run(const mkx_moe_route_desc *d, cudaStream_t s);

/* elem: 2 (bf16, fp16) or 4 bytes; lda >= hidden. */
int mkx_moe_gather_run(const void *x, int64_t tokens, int topk, int64_t hidden, int elem, const int *row_of_slot,
                       const float *weight, int origin_rank, void *a, int64_t lda, float *row_scale, int32_t *origin,
                       cudaStream_t s);
/* out_type: MKX_GEMM_BF16 or MKX_GEMM_FP16; y: fp32 rows, row stride ldy. */
int mkx_moe_combine_run(const float *y, int64_t ldy, const int *row_of_slot, const float *weight, int64_t tokens,
                        int topk, int64_t hidden, void *out, int out_type, cudaStream_t s);
int mkx_moe_counts_run(const int *offsets, int local_experts, int64_t *expert_rows, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif /* MKX_MOE_ENGINE_H */
