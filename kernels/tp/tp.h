/*
 * Fused tensor-parallel kernels: C interface of the kernels/tp .cu files,
 * called by src/ops/tp, src/ops/nodes and ops/fused/adapter.c (the network
 * kernels, mkx_fused_net_*, by ring attention and MoE across nodes as well).
 * What every fused path shares (workspace layout, error word, sync
 * descriptor, prologue and meet) is in fused/fused.h.  Includable from C11
 * (needs cuda_runtime.h, stdint.h).
 */
#ifndef MKX_KERNELS_TP_H
#define MKX_KERNELS_TP_H

#include <cuda_runtime.h>
#include <stdint.h>
#include "fused/fused.h"
#include "gemm/gemm_engine.h"
#include "proxy/proxy_dev.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Stream-K shares of the AllGather+GEMM's last wave (mkx_tp_ag_desc):
 * one slot of fp32 accumulators per CTA (the most the tile of 128 x 256
 * holds), two flags per slot (one per consumer warpgroup). */
#define MKX_TP_SK_SLOTS 160
#define MKX_TP_SK_SLOT_BYTES (128 * 256 * 4)

/* AllGather+GEMM: C = Aws * B where Aws (M x k, row-major, in this rank's
 * workspace) fills while the kernel runs.  Source rank s (0 <= s < size)
 * fills rows [bnd[s], bnd[s+1]) (any share, 0 included) and then sets
 * flags[s * ceil(m / 128) + t] = epoch for each 128-row tile t its rows
 * meet; before loading A rows [128 t, 128 t + 128) the producer waits
 * (bounded) for the flag of every source whose rows meet them. */
typedef struct mkx_tp_ag_desc {
  int64_t m, n, k;
  const void *a;
  int64_t lda; /* the gathered A (workspace) */
  const void *b;
  int64_t ldb;
  int b_kmajor;
  void *c;
  int64_t ldc;
  int ab_type, c_type;            /* MKX_GEMM_* values */
  const int *flags;               /* local, size * ceil(m / 128) */
  const int *epoch;               /* local workspace epoch */
  int size;                       /* source ranks */
  int64_t bnd[MKX_FUSED_MAX + 1]; /* bnd[0] = 0 ... bnd[size] = m */
  int first_tile_m;
  /* Tiles [own_t0, own_t1) hold only this rank's rows, which need not be
   * in the gathered A: row r of them is row r - own_row0 of a_own (own_rows
   * rows, leading dimension lda_own, 16-byte aligned rows), loaded from
   * there without a wait.  own_t1 <= own_t0: none. */
  const void *a_own;
  int64_t lda_own, own_row0, own_rows;
  int own_t0, own_t1;
  /* Stream-K (NULL: none): when the tiles leave the last wave uneven, its
   * tiles are split along K over every CTA; sk_part: MKX_TP_SK_SLOTS slots
   * of MKX_TP_SK_SLOT_BYTES, sk_flags: 2 * MKX_TP_SK_SLOTS flags (below
   * the epoch before the first call), both local */
  float *sk_part;
  int *sk_flags;
  mkx_fused_sync sync; /* bounds, error word, tells */
  /* Sources whose rows are in place before the kernel (bit s): no wait. */
  unsigned ready_mask;
  /* Sources on other nodes (bit s, mkx_fused_net_desc): their rows come over
   * the network in chunks of net.chunk_tiles tiles from the tile of
   * bnd[s]; a tile waits for net.signals[slot0 + s * words + 1 + chunk]
   * >= the call's network epoch instead of a flag.  net_landed: an int
   * per (source, chunk), net_landed[s * net_words + chunk], local device
   * memory (below the epoch before the first call): the first CTA to see a
   * chunk's word sets it to the epoch, and every CTA looks there first. */
  unsigned net_mask;
  const uint64_t *net_signals;
  const uint64_t *net_epoch;
  uint32_t net_slot0, net_words;
  int net_chunk_tiles;
  int *net_landed;
} mkx_tp_ag_desc;
int mkx_tp_ag_gemm(const mkx_tp_ag_desc *d, cudaStream_t st);
/* Load the kernel mkx_tp_ag_gemm would launch for d, launching nothing
 * (mkx_gemm_load says why). */
int mkx_tp_ag_gemm_load(const mkx_tp_ag_desc *d);

/* Launches of mkx_tp_ag_gemm that split their last wave (for tests). */
long mkx_tp_ag_sk_launches(void);

/* GEMM+ReduceScatter / GEMM+AllReduce (owner q holds product rows
 * [bnd[q], bnd[q+1])).  Which 128-row tile rows go which way, the same on
 * every rank (computed once per plan by mkx_tp_rs_layout_make):
 *   - owner q's clean tile rows [clean_a[q], clean_b[q]) hold only q's
 *     rows; they form nchunk[q] chunks of chunk_tr[q] tile rows;
 *   - late tile rows (at most p - 1) hold rows of several owners. */
typedef struct mkx_tp_rs_layout {
  int tiles_m, tiles_n, bn;
  int nlate, late_tm[MKX_FUSED_MAX];
  int clean_a[MKX_FUSED_MAX], clean_b[MKX_FUSED_MAX];
  int chunk_tr[MKX_FUSED_MAX], nchunk[MKX_FUSED_MAX];
} mkx_tp_rs_layout;
void mkx_tp_rs_layout_make(int64_t m, int64_t n, int size, const int64_t *bnd, int bn, mkx_tp_rs_layout *L);
/* Product rows [*r0, *r1) of owner q's chunk c. */
void mkx_tp_rs_chunk_rows(const mkx_tp_rs_layout *L, int64_t m, const int64_t *bnd, int q, int c, int64_t *r0,
                          int64_t *r1);
/* Sub-tiles (64 x bn) the GEMM counts for owner q's chunk c. */
int mkx_tp_rs_chunk_subtiles(const mkx_tp_rs_layout *L, int q, int c);

/* The GEMM on rank `rank`: partial P = A B tile by tile in the order late
 * tile rows, peers' chunks (dealt: chunk 0 of every peer, chunk 1, ...),
 * own chunks.  Epilogue by tile kind:
 *   - peer owner q: the sub-tile in p_type (fp32 or C's type) by TMA into
 *     `stage` (local; rows outside this rank's own, compacted), then
 *     counters[q][chunk] += 1 once landed: the copy engine (host side) waits
 *     for the chunk's count, copies it to q's slot [rank] and sets q's
 *     arrived[rank][chunk] = epoch; push_sm: by TMA straight into q's slot
 *     [rank] (peer_slot[q], q's rows of it), then q's
 *     counters[rank][chunk] += 1 once landed (peer_counters[q]);
 *   - own: bounded wait for arrived[s][chunk] >= epoch of every peer s
 *     (push_sm: counters[s][chunk] >= the chunk's sub-tiles), add
 *     their slots (`slots`, slot s at s * slot_stride elements, count x n of
 *     p_type) to the fp32 accumulators in a fixed order (own first, then
 *     peers by rank: the same bits every run), round once into C (row
 *     `row - c_row0`); allreduce: the same TMA stores also write the
 *     rounded sub-tile into every peer's C (peer_c), and once all own
 *     sub-tiles have landed the last one sets every peer's done[rank] =
 *     epoch (counted in counters[rank][0]);
 *   - late: fp32 partial into `late` (tile row i of late_tm: rows
 *     [i * 128, i * 128 + 128) x n), summed later by mkx_tp_rs_late. */
typedef struct mkx_tp_rs_desc {
  int64_t m, n, k;
  const void *a;
  int64_t lda;
  const void *b;
  int64_t ldb;
  int b_kmajor;
  int ab_type, p_type, c_type;
  int size, rank, allreduce;
  int64_t bnd[MKX_FUSED_MAX + 1];
  mkx_tp_rs_layout layout;
  void *stage; /* local staging of p_type */
  const void *slots;
  int64_t slot_stride; /* local receive slots */
  float *late;         /* local late partials */
  void *c;
  int64_t ldc, c_row0;
  int *counters;
  const int *arrived; /* this rank's workspace */
  const int *epoch;
  /* allreduce: every rank's C as mapped here (own entry unused) and its
   * leading dimension, and every rank's done[] flags */
  void *peer_c[MKX_FUSED_MAX];
  int64_t peer_ldc[MKX_FUSED_MAX];
  int *peer_done[MKX_FUSED_MAX];
  /* push_sm: owner q's slot [rank] (bnd[q + 1] - bnd[q] rows of n, p_type)
   * and counters[] as mapped here (own entries unused) */
  int push_sm;
  void *peer_slot[MKX_FUSED_MAX];
  int *peer_counters[MKX_FUSED_MAX];
  mkx_fused_sync sync; /* bounds, error word, tells */
} mkx_tp_rs_desc;
int mkx_tp_rs_gemm(const mkx_tp_rs_desc *d, cudaStream_t st);

/* GEMM+ReduceScatter / GEMM+AllReduce where the node's ranks share one
 * GPU and read each other's operands (option tp_pull, kernels/tp/pull.cu):
 * no partial moves.  This rank computes rows [row0, row0 + rows) of C over the whole
 * K: source s's slice is k[s] columns of a[s] (m rows, leading dimension
 * lda[s]) times k[s] rows of b[s] (as the call's B, ldb[s]), both as
 * mapped here, the slices summed in source order (the same order on every
 * rank; with every k[s] a multiple of 64, the bits of one GEMM over the
 * whole K).  c: row row0 of this rank's C; allreduce: peer_c[q] likewise
 * in rank q's C (own entry unused), whose rows this rank writes too.  The
 * caller meets the peers before (their operands are ready) and after it
 * (no rank changes them while a peer reads them, and every C is whole);
 * the kernel itself waits for no one.  ctas: the most CTAs (0: one per SM). */
typedef struct mkx_tp_pull_desc {
  int size;
  int64_t m, n, row0, rows;
  const void *a[MKX_FUSED_MAX];
  const void *b[MKX_FUSED_MAX];
  int64_t lda[MKX_FUSED_MAX], ldb[MKX_FUSED_MAX], k[MKX_FUSED_MAX];
  int b_kmajor, ab_type, c_type, bn;
  void *c;
  int64_t ldc;
  int allreduce, rank;
  void *peer_c[MKX_FUSED_MAX];
  int64_t peer_ldc[MKX_FUSED_MAX];
  int ctas;
  /* allreduce: this rank's told words (MKX_FUSED_OFF_TOLD of its
   * workspace): where the run is void when the kernel starts (the meet
   * before it failed, kernels/fused/flags.cuh: run_void), nothing is
   * written into peer_c */
  const int *told;
} mkx_tp_pull_desc;
int mkx_tp_rs_pull(const mkx_tp_pull_desc *d, cudaStream_t st);
/* AllGather+GEMM the same way: C (m x n) = the gathered A times this
 * rank's B, tile rows of source s's rows [bnd[s], bnd[s + 1]) loaded from
 * a[s] (its own A, as mapped here, leading dimension lda[s]); every bnd
 * but the last a multiple of 128, so that no tile mixes sources. */
typedef struct mkx_tp_ag_pull_desc {
  int size;
  int64_t m, n, k;
  int64_t bnd[MKX_FUSED_MAX + 1];
  const void *a[MKX_FUSED_MAX];
  int64_t lda[MKX_FUSED_MAX];
  const void *b;
  int64_t ldb;
  int b_kmajor, ab_type, c_type, bn;
  void *c;
  int64_t ldc;
  int ctas;
  /* fp8 ab_type (e4m3, e5m2; B K-major, k, every lda and ldb multiples of
   * 16, bn 128): the engine's fp8 GEMM with these scales, A's indexed by
   * the gathered row (records of every rank's rows, as the split path
   * gathers them) */
  mkx_gemm_scales sc;
} mkx_tp_ag_pull_desc;
int mkx_tp_ag_pull(const mkx_tp_ag_pull_desc *d, cudaStream_t st);

/* Late tile rows, on every rank after its GEMM: publish late_ready[rank],
 * wait (bounded) for every rank's, sum every rank's fp32 late partial of
 * this rank's rows in rank order, round once into C; allreduce: also into
 * every peer's C, and the last block sets done_late[rank] = epoch there. */
typedef struct mkx_tp_late_desc {
  int64_t m, n;
  int rank; /* in bnd, late[], peer_c[] */
  int64_t bnd[MKX_FUSED_MAX + 1];
  int nlate, late_tm[MKX_FUSED_MAX];
  const float *late[MKX_FUSED_MAX]; /* every rank's late buffer, mapped */
  int c_type, allreduce;
  void *c;
  int64_t ldc, c_row0;
  void *peer_c[MKX_FUSED_MAX];
  int64_t peer_ldc[MKX_FUSED_MAX];
  mkx_fused_sync sync;
} mkx_tp_late_desc;
int mkx_tp_rs_late(const mkx_tp_late_desc *d, cudaStream_t st);

/* The split path (kernels/tp/split.cu): the GEMM and the communication
 * one after the other, for shapes too small to gain from overlap (fewer
 * launches, no copy-engine set-up, one meeting of the GPUs per kernel).
 * Its workspaces are never shared with the overlapped path's (mkx_fused_need
 * .split), whose last kernels may still read a peer's workspace after
 * their own rank has moved on. */

/* AllGather: meet every rank at bar (each has finished its previous call,
 * so its gathered A may be written), store this rank's rows of A into
 * every rank's gathered A (own included) with SM stores, set every rank's
 * flags [rank * tiles_m + t] = epoch for t in [t0, t1) (mkx_tp_ag_gemm on
 * the same stream waits for those), with wait_all also meet at pushed
 * (every rank's rows are in place here: a plain GEMM may follow), and bump
 * the epoch.  fp8 rows take their scales along: row r's s_cols floats
 * sa[r * sa_ld ...] (sa_ld 0: one value for every row, a per-tensor scale)
 * into every rank's gathered scales, s_off bytes into its gathered A's
 * region, dense rows of s_cols (s_cols 0: none). */
typedef struct mkx_tp_split_ag_desc {
  const void *a;
  int64_t lda, rows, k;          /* this rank's rows of A */
  int esz;                       /* bytes per element: 1 (fp8) or 2 */
  int64_t row0;                  /* their first row in the gathered A */
  void *gathered[MKX_FUSED_MAX]; /* every rank's gathered A (ld k), mapped */
  int *flags[MKX_FUSED_MAX];     /* every rank's flags, mapped */
  int tiles_m, t0, t1, wait_all;
  const float *sa; /* this rank's scales of A */
  int64_t sa_ld, s_cols;
  size_t s_off;
  mkx_fused_sync sync;
} mkx_tp_split_ag_desc;
int mkx_tp_split_push(const mkx_tp_split_ag_desc *d, cudaStream_t st);

/* AllGather+GEMM in one kernel (kernels/tp/ag_oneshot.cu), for products
 * of at most 116 tiles: push CTAs store this rank's rows
 * into every rank's gathered A (own first; the peers' after meeting them
 * at bar) in units of (K chunk of chunk_kb 64-wide blocks, 128-row tile)
 * and set the destination's flags [(rank * tiles_m + tile) * nkc + chunk]
 * = epoch; GEMM CTAs (one tile each) wait for each chunk's flags just
 * before loading it.  gemm.flags: this rank's, size * tiles_m * nkc ints;
 * gemm.epoch unused (the kernel bumps the workspace's own); push: as for
 * mkx_tp_split_push, wait_all unused. */
typedef struct mkx_tp_ag1_desc {
  mkx_tp_ag_desc gemm;
  mkx_tp_split_ag_desc push;
  int chunk_kb, nkc;
} mkx_tp_ag1_desc;
/* 1 and the engine tile, chunk_kb and nkc if the product (gemm's m, n, k,
 * types, layout) suits the one-kernel path, else 0; any_k: also with
 * K < 2048 (where it ran slower).  Depends only on the shape, so every
 * rank decides alike. */
int mkx_tp_ag1_shape(const mkx_tp_ag_desc *d, int any_k, int *tile, int *chunk_kb, int *nkc);
int mkx_tp_ag1(const mkx_tp_ag1_desc *d, cudaStream_t st);

/* ReduceScatter / AllReduce after a plain GEMM wrote each rank's partial
 * (m x n, dense, p_type) into its workspace: meet at bar (every partial is
 * complete), sum rows [r0, r1) of every rank's partial in rank order in
 * fp32 (the same bits every run, and on every rank for an allreduce),
 * round once into C (row `row - c_row0`), then meet at drained (nobody
 * reads a partial any more, so the next call's GEMM may overwrite it) and
 * bump the epoch.  n, ldc multiples of 8, C 16-byte aligned. */
typedef struct mkx_tp_split_red_desc {
  int64_t m, n, r0, r1;
  const void *part[MKX_FUSED_MAX]; /* every rank's partial, mapped */
  int p_type, c_type;
  void *c;
  int64_t ldc, c_row0;
  mkx_fused_sync sync;
} mkx_tp_split_red_desc;
int mkx_tp_split_reduce(const mkx_tp_split_red_desc *d, cudaStream_t st);

/* dst (cols x rows, leading dimension ldd) = src^T (rows x cols, leading
 * dimension lds), row-major, elements of esz = 2 or 4 bytes: column-major
 * operands of the fused paths (src/ops/fused/adapter.c). */
int mkx_tp_transpose(const void *src, int64_t rows, int64_t cols, int64_t lds, void *dst, int64_t ldd, int esz,
                     cudaStream_t st);

/* GEMM+AllReduce tail: wait (bounded) until every owner's rows have
 * landed here (done[q] >= epoch, and done_late[q] if `late`). */
int mkx_tp_ar_wait(const mkx_fused_sync *s, int late, cudaStream_t st);

#ifdef __cplusplus
}
#endif
#endif
