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
 * Two kernels (field `kernel`; 0 picks):
 *   MKX_MOE_GEMM_ROWS  tiles of 128 rows of one expert by 128 or 256 W
 *                      columns (SwiGLU: the gate and up halves of the same
 *                      output columns in one tile), so an expert with r
 *                      rows costs ceil(r / 128) tile rows;
 *   MKX_MOE_GEMM_SWAP  the operands swapped: 64 W columns per wgmma row
 *                      side, up to 128 rows of one expert on the other, an
 *                      expert's rows in blocks of 256, so W is read once
 *                      per 256 rows and rows cost r rounded up to 8.
 * Picked: SWAP where a_rows <= MKX_MOE_SWAP_ROWS x experts, and always
 * for fp8 operands (fp8 below).
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

struct mkx_fused_sync; /* kernels/fused/fused.h */

/* The scales of fp8 operands (mkx_moe_gemm_desc.fp8), A's in layout
 * a_layout and W's in w_layout, each of gemm_engine.h's
 * mkx_gemm_scale_layout: for row r of A, W column j (a row of the K-major
 * W: the up half's start at up, as the columns) of expert e and K block kb
 * of 128,
 *   MKX_GEMM_SCALE_NONE    1 and 1
 *   MKX_GEMM_SCALE_TENSOR  a[0] and w[e * w_e]
 *   MKX_GEMM_SCALE_ROW     a[r * a_row] and w[e * w_e + j * w_col]
 *   MKX_GEMM_SCALE_BLOCK   a[r * a_row + kb * a_kb] and
 *                          w[e * w_e + (j / 128) * w_col + kb * w_kb]
 * Device memory, finite; strides >= 0 (0 repeats one value). */
typedef struct {
  int a_layout, w_layout;
  const float *a, *w;
  int64_t a_row, a_kb;
  int64_t w_e, w_col, w_kb;
} mkx_moe_fp8_scales;

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
  int ab_type;            /* MKX_GEMM_BF16 or MKX_GEMM_FP16 (gemm_engine.h), or fp8 (below) */
  int c_type;             /* MKX_GEMM_BF16, MKX_GEMM_FP16 or MKX_GEMM_FP32 */
  int swiglu;             /* 1: the SwiGLU form above */
  int num_ctas;           /* persistent CTAs; 0: one per SM */
  int block_n;            /* 0 (picked), 128 or 256: tile columns of W (rows kernel) */
  int *work;              /* device, mkx_moe_gemm_work_ints(E) ints, one per concurrent run */
  int64_t up_col;         /* SwiGLU: first column of the up half (0: n) */
  const int *gate;        /* device, or NULL: nonzero = no tiles (mkx_moe_settle_run) */
  int kernel;             /* 0 (picked), MKX_MOE_GEMM_ROWS or MKX_MOE_GEMM_SWAP */
  /* Rows that land while the GEMM runs (several ranks of a node,
   * mkx_moe_release): before loading A rows of expert e, the tiles wait
   * (bounded by sync's timeout, a timeout recorded in its error word) until
   * ready[e * sync->size + q] has reached the call's epoch for every node
   * rank q.  NULL: no wait. */
  const int *ready;
  const struct mkx_fused_sync *sync;
  /* fp8 operands (ab_type MKX_GEMM_E4M3 or MKX_GEMM_E5M2, A and W alike;
   * the swapped kernel, picked whatever `kernel` says): W is stored with
   * its columns as rows, K contiguous, [E][w_rows][ldw] with w_rows = n
   * (plain) or u + n (SwiGLU) and ldw >= k; k, lda and ldw multiples of 16.
   * Each 128-deep K block's products are summed apart (Hopper's fp8
   * tensor cores keep fewer bits than fp32) and added in fp32 times the
   * block's scales; the rows go in blocks of 128, 64 per warpgroup. */
  mkx_moe_fp8_scales fp8;
} mkx_moe_gemm_desc;

#define MKX_MOE_GEMM_ROWS 1
#define MKX_MOE_GEMM_SWAP 2
/* rows per expert (a_rows / experts) up to which the swapped kernel is picked */
#define MKX_MOE_SWAP_ROWS 192

/* Ints of device workspace a run needs (the tile prefix over experts). */
int64_t mkx_moe_gemm_work_ints(int experts);

/* 1 if the engine can run d, else 0 and (if why != NULL) a static reason:
 * lda and ldw multiples of 8 (the tensor maps' row strides), 16-byte
 * aligned A, W, C, sizes below 2^31.  Any k and n (fp8: k a multiple of
 * 16; A's scales may be NULL with a_rows 0).  Does not look at the
 * device. */
int mkx_moe_gemm_supported(const mkx_moe_gemm_desc *d, const char **why);

/* Enqueue the grouped GEMM on stream s (current device): 0, a cudaError_t
 * (> 0), or a negative MKX_GEMM_E* code of gemm_engine.h. */
int mkx_moe_gemm_run(const mkx_moe_gemm_desc *d, cudaStream_t s);

/* 16-bit rows rounded to fp8, a scale per row and 128 columns
 * (kernels/moe/quant.cu): for rows r < min(*rows_end, max_rows) and each
 * group g of 128 columns (the last may be shorter),
 *   scales[r * lds + g] = max |x| over the group / the fp8 type's largest
 *                         finite value (1 for a group of zeros),
 *   q[r * ldq + c]      = x[r * ldx + c] / that scale, rounded to nearest,
 *                         saturating.
 * x_type MKX_GEMM_BF16 or MKX_GEMM_FP16, fp8_type MKX_GEMM_E4M3 or
 * MKX_GEMM_E5M2; rows_end in device memory (e.g. the experts' last offset). */
typedef struct {
  const void *x;
  int64_t ldx;
  int x_type;
  const int *rows_end;
  int64_t max_rows, cols;
  uint8_t *q;
  int64_t ldq;
  float *scales;
  int64_t lds;
  int fp8_type;
} mkx_moe_quant_desc;
int mkx_moe_quant_run(const mkx_moe_quant_desc *d, cudaStream_t s);

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
 *   gather:  slot i's row of X, X[token(i)][0:hidden], into row r of
 *            A on rank q (mkx_moe_place: on one rank r = row_of_slot[i],
 *            q = 0), the columns up to lda zeroed; where not NULL
 *            scale[q][r] = weight[i] (1 without weights), origin[q][3r ..]
 *            = (origin_rank, token, slot), dest_row[i] = r (-1: no row).
 *   combine: out[t][h] = sum over j in slot order of weight[t][j] *
 *            Y_q[r][h] for slot t*topk+j at row r (rows[], e.g. dest_row)
 *            of rank q (fp32 Y, slots without a row skipped), rounded once
 *            to out's type.
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

/* Where the rows of this rank's slots go.  One rank: base NULL, slots 1.
 * Several ranks: slot i (expert e = ids[i]) goes to owner rank
 * q = e / experts_per_rank, into entry target[q] of mkx_moe_rows_at (an
 * owner's own grouped rows as mapped here, or this rank's send area for
 * owners on other nodes), at row base[e] + row_of_slot[i] -
 * own_offsets[e] there (the route of this rank's slots over every expert
 * gives own_offsets and row_of_slot; base[e], from every rank's counts:
 * where this rank's rows of expert e start there; src/ops/moe/moe_layout.h).
 * The combine reads each slot's output from the same entry and row of
 * mkx_moe_outs_at. */
#define MKX_MOE_MAX_RANKS 8
#define MKX_MOE_SLOTS (MKX_MOE_MAX_RANKS + 1) /* a node's ranks and the send area */
typedef struct {
  const int32_t *ids;
  const int *base;        /* device, experts ints, or NULL */
  const int *own_offsets; /* device, experts + 1 ints */
  const int *target;      /* device, experts / experts_per_rank ints, or NULL: entry q */
  int experts_per_rank;
  int slots;       /* entries of mkx_moe_rows_at / mkx_moe_outs_at used */
  const int *gate; /* device, or NULL: gather and combine do nothing where nonzero */
} mkx_moe_place;

/* Each entry's A (row stride lda), and optional scale and origin arrays
 * (pointers this GPU can write: peers' through their mappings, the send
 * area in mapped pinned host memory). */
typedef struct {
  void *a[MKX_MOE_SLOTS];
  float *scale[MKX_MOE_SLOTS];
  int32_t *origin[MKX_MOE_SLOTS];
  int64_t lda;
} mkx_moe_rows_at;

/* Each rank's fp32 expert outputs (row stride ldy). */
typedef struct {
  const float *y[MKX_MOE_SLOTS];
  int64_t ldy;
} mkx_moe_outs_at;

/* Rows released as they land (several ranks of one node; instead of a
 * meet after the gather).  The gather walks this rank's rows local expert
 * by local expert (every owner's first expert, then every owner's second,
 * ...), and once all its rows of owner q's local expert le are written
 * (with their scales and origins) it sets ready[q][le * ranks + rank] to
 * the call's epoch (release, system scope); an expert it has no rows of is
 * released at once.  The owner's first grouped GEMM waits for them
 * (mkx_moe_gemm_desc.ready). */
typedef struct {
  int *ready[MKX_MOE_MAX_RANKS]; /* every owner's flags, ep x ranks ints, as mapped here */
  int *done;                     /* device, experts ints: rows written per expert */
  int *order;                    /* device, experts + 1 ints: the walk's prefix */
  int *slot_at;                  /* device, tokens x topk ints: the slot of each row */
  const int *epoch;              /* this rank's epoch word */
  int rank, ranks;
} mkx_moe_release;

/* Before the gather, on the same stream: the walk order of this rank's
 * rows (own_offsets, row_of_slot of mkx_moe_place's route), its counters
 * zeroed, and the experts it has no rows of released. */
int mkx_moe_release_prepare_run(const mkx_moe_release *rel, const mkx_moe_place *pl, const int *row_of_slot,
                                int64_t slots, cudaStream_t s);

/* elem: 1 (fp8), 2 (bf16, fp16) or 4 bytes; lda >= hidden; dest_row may be NULL;
 * rel: NULL (rows in slot order, no flags) or as prepared. */
int mkx_moe_gather_run(const void *x, int64_t tokens, int topk, int64_t hidden, int elem, const int *row_of_slot,
                       const float *weight, int origin_rank, const mkx_moe_place *pl, const mkx_moe_rows_at *at,
                       int *dest_row, const mkx_moe_release *rel, cudaStream_t s);
/* out_type: MKX_GEMM_BF16 or MKX_GEMM_FP16; rows: each slot's row on its
 * owner (-1: none). */
int mkx_moe_combine_run(const mkx_moe_place *pl, const mkx_moe_outs_at *y, const int *rows, const float *weight,
                        int64_t tokens, int topk, int64_t hidden, void *out, int out_type, cudaStream_t s);
/* Rows between a staging area and their places (several nodes: rows
 * received over the network, outputs sent back): staging row r
 * (0 <= r < seg_start[nseg]) is row seg_row[j] + r - seg_start[j] of
 * `rows`, j the segment with seg_start[j] <= r < seg_start[j + 1] (device
 * arrays, seg_start nondecreasing).  to_rows: staging to rows, else rows
 * to staging.  row_bytes a multiple of 4; strides in bytes, multiples of
 * 4; the staging area may be mapped pinned host memory. */
int mkx_moe_rows_move_run(void *stage, int64_t ld_stage, void *rows, int64_t ld_rows, int64_t row_bytes,
                          const int *seg_start, const int *seg_row, int nseg, int64_t total, int to_rows,
                          cudaStream_t s);
/* gate: device or NULL; nothing written where it is MKX_MOE_GATE_BAD. */
int mkx_moe_counts_run(const int *offsets, int local_experts, int64_t *expert_rows, const int *gate, cudaStream_t s);

/* ---- the verdict on the GPU (no host wait) -------------------------------
 * A call that does not wait for its routing decides on the GPU whether its
 * run goes on: the gate word is 0 (go), MKX_MOE_GATE_TRUNC (more rows
 * than y_rows on some rank: only expert_rows is written) or
 * MKX_MOE_GATE_BAD (a bad expert id or fp8 scale somewhere: nothing
 * written), and the first such failure goes into the input record of the
 * host-mapped error word (fused/fused.h, err + MKX_FUSED_ERR_INPUT):
 *   [0] MKX_MOE_ERR_SCALE  [1] rank [2] array (mkx_moe_scan's) [3], [4]
 *                          the index's high and low 32 bits [5] the value's
 *                          bits
 *   [0] MKX_MOE_ERR_ID     [1] rank [2] token [3] slot [4] id [5] 1: a
 *                          repeat within its token, 0: out of range
 *   [0] MKX_MOE_ERR_TRUNC  [1] rank [2] rows it receives [3] its y_rows
 * (MKX_ERR_INVALID_ARG's and MKX_ERR_TRUNCATE's values; a bad scale's is
 * none, it is an MKX_ERR_INVALID_ARG too), a bad scale before a bad id.
 * A record already there (not yet reported) is kept. */
#define MKX_MOE_GATE_TRUNC 1
#define MKX_MOE_GATE_BAD 2
#define MKX_MOE_ERR_ID 1
#define MKX_MOE_ERR_TRUNC 7
#define MKX_MOE_ERR_SCALE 101

/* The fp8 scales' scan a verdict reads (fused/fused.h:
 * mkx_fused_scales_scan): its first[] (count arrays, host-mapped) and the
 * arrays, to read a bad value.  count 0: no scales. */
#define MKX_MOE_SCAN_ARRAYS 3
typedef struct mkx_moe_scan {
  const long long *first;
  const float *p[MKX_MOE_SCAN_ARRAYS];
  int count;
} mkx_moe_scan;

/* One rank: from the scales' scan (NULL: none), the routing's status
 * (first bad slot, rows in all) and y_rows (-1: no limit). */
int mkx_moe_verdict_run(const int *status, const int32_t *ids, int topk, int experts, int64_t y_rows, int rank,
                        const mkx_moe_scan *scan, int *gate, int *err_input, cudaStream_t s);

/* Several ranks of a node.  Each rank's record (MKX_MOE_REC_HEAD ints,
 * then its rows per expert over every expert), in slot `rank` of every
 * rank's records area (rec[q]: rank q's area as mapped here, ranks x
 * (MKX_MOE_REC_HEAD + experts) ints, then experts + 1 ints of scratch):
 * first bad slot (or MKX_MOE_NO_BAD_SLOT), its id, y_rows (clamped below
 * 2^31; -1: no limit), the first bad scale's array + 1 (0: none), its
 * index's high and low 32 bits, its bits, 0 (scan: NULL, none).  `own` is
 * the route of this rank's slots over every expert.  Then all ranks meet (mkx_fused_meet), and settle reads
 * every record here and writes this rank's local expert offsets
 * (experts / ranks + 1), the row bases of its own slots on their owners
 * (base, mkx_moe_place), the gate and, first bad rank or truncated rank
 * first, the input record: every rank reaches the same verdict. */
#define MKX_MOE_REC_HEAD 8
typedef struct {
  int *rec[MKX_MOE_MAX_RANKS];
} mkx_moe_records;
int64_t mkx_moe_records_ints(int ranks, int experts);
int mkx_moe_record_run(const mkx_moe_records *r, int ranks, int rank, int experts, const int *own, const int *status,
                       const int32_t *ids, int64_t y_rows, const mkx_moe_scan *scan, cudaStream_t s);
int mkx_moe_settle_run(int *records, int ranks, int rank, int experts, int topk, int *offsets, int *base, int *gate,
                       int *err_input, cudaStream_t s);

/* The owner's origins (3 ints per row, offsets[local_experts] rows) from
 * src to dst, unless the gate is nonzero. */
int mkx_moe_origin_copy_run(const int32_t *src, int32_t *dst, const int *offsets, int local_experts, const int *gate,
                            cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif /* MKX_MOE_ENGINE_H */
