/*
 * Fused tensor-parallel kernels inside one node (issue 4): C interface of
 * the kernels/tp .cu files, called by src/ops/tp_gpu.c, ag_gemm_gpu.c and
 * gemm_red_gpu.c.  Includable from C11 (needs cuda_runtime.h, stdint.h).
 *
 * Every rank owns one symmetric workspace (same layout on every rank,
 * mapped into its node peers through CUDA IPC):
 *
 *   +0     int epoch             this rank's call counter (GPU-side only)
 *   +64    int bar[MKX_TP_MAX]   bar[q] = epoch at which rank q last arrived
 *   +192   int done[MKX_TP_MAX]  GEMM+AllReduce: epoch at which owner q's
 *                                reduced rows had all landed here
 *   +256   int count             reduce blocks finished (self-resetting)
 *   +4096  int src[src_cap]      src[i] = epoch: the copy engine copies these
 *                                into peers' flags (graph-safe flag values)
 *   flags[flags_cap], data       at offsets fixed per workspace (tp_gpu.c)
 *
 * Every flag holds the epoch at which it was last set (never a count), so
 * whatever operation or shape used a workspace before, its flags are all
 * below the current epoch: a workspace can be reused by any call.
 */
#ifndef MKX_KERNELS_TP_H
#define MKX_KERNELS_TP_H

#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MKX_TP_MAX 8               /* ranks of a node the kernels handle */
#define MKX_TP_OFF_EPOCH 0
#define MKX_TP_OFF_BAR 64
#define MKX_TP_OFF_DONE 192
#define MKX_TP_OFF_COUNT 256
#define MKX_TP_OFF_SRC 4096
#define MKX_TP_REDUCE_BLOCKS 264   /* grid of the reduce kernel */

/* The error word (host-mapped, 4 ints): err[0] = MKX_TP_ERR_TIMEOUT once a
 * bounded wait ran out, err[1] = peer (or -1), err[2] = tile, err[3] = where. */
#define MKX_TP_ERR_TIMEOUT 11
enum { MKX_TP_AT_BARRIER = 1, MKX_TP_AT_AG_TILE = 2, MKX_TP_AT_RS_TILE = 3,
       MKX_TP_AT_AR_DONE = 4 };

/* What every kernel of a call needs to meet its peers. */
typedef struct mkx_tp_sync {
  int rank, size;                  /* local rank and node size */
  char *ws[MKX_TP_MAX];            /* every node rank's workspace, as mapped here */
  int src_n;                       /* ints of src[] the prologue fills */
  uint64_t timeout_ns;
  int *err;                        /* device pointer of the host-mapped error word */
} mkx_tp_sync;

/* Start of a call: epoch += 1 on this GPU, src[] = epoch, arrive at every
 * peer (bar), wait (bounded) until every peer has arrived at this epoch:
 * then each peer has finished its previous call, so its buffers may be
 * written.  <<<1, 32>>> on the user's stream. */
int mkx_tp_prologue(const mkx_tp_sync *s, cudaStream_t st);

/* AllGather+GEMM: C = Aws * B where Aws (M x k, row-major, in this rank's
 * workspace) fills while the kernel runs; the producer waits (bounded) for
 * flags[t] >= epoch before loading A rows [128 t, 128 t + 128). */
typedef struct mkx_tp_ag_desc {
  int64_t m, n, k;
  const void *a; int64_t lda;               /* the gathered A (workspace) */
  const void *b; int64_t ldb; int b_kmajor;
  void *c; int64_t ldc;
  int ab_type, c_type;                      /* MKX_GEMM_* values */
  const int *flags;                         /* local, m / 128 of them */
  const int *epoch;                         /* local workspace epoch */
  int first_tile_m;
  uint64_t timeout_ns;
  int *err;
} mkx_tp_ag_desc;
int mkx_tp_ag_gemm(const mkx_tp_ag_desc *d, cudaStream_t st);

/* GEMM+ReduceScatter, first half: this rank's partial P = A * B (fp32),
 * 64-row sub-tile by sub-tile, stored by TMA straight into slot [rank] of
 * each owner's receive buffer (owner q: rows [bnd[q], bnd[q+1]), slot of
 * bnd[q+1] - bnd[q] rows x n fp32 at recv[q] (as mapped here)); after the
 * stores land, the owner's flag [rank][sub-tile row][column tile] = epoch
 * (flags[q] below already points at [rank]).  Tile rows start at owner
 * rank+1's rows (the owner's own rows come last). */
typedef struct mkx_tp_rs_desc {
  int64_t m, n, k;
  const void *a; int64_t lda;
  const void *b; int64_t ldb; int b_kmajor;
  int ab_type;
  int size, rank;
  int64_t bnd[MKX_TP_MAX + 1];
  float *recv[MKX_TP_MAX];                  /* owner q's slot for this rank */
  int *flags[MKX_TP_MAX];                   /* owner q's flags for this rank */
  const int *epoch;                         /* local workspace epoch */
  int bn;                                   /* 128 or 256: fixes the flag grid */
} mkx_tp_rs_desc;
int mkx_tp_rs_gemm(const mkx_tp_rs_desc *d, cudaStream_t st);

/* GEMM+ReduceScatter, second half, on the owner: wait (bounded) for the
 * flags of each sub-tile from every source, sum the size slots in
 * rank order (deterministic), round once to c_type and store into C
 * (rows [first, first + count) of the product; c_row0 = first for
 * allreduce, 0 for reduce-scatter).  For allreduce the rows go to every
 * peer's C too (peer_c / peer_ldc), and the last block to finish sets
 * done[rank] = epoch on every peer. */
typedef struct mkx_tp_red_desc {
  const float *slots;                       /* size slots of count x n */
  int64_t slot_stride;                      /* elements between slots */
  int64_t first, count, n;
  int bn, tiles_n;
  const int *flags, *epoch;                 /* flags[s * flag_stride + sr * tiles_n + tn] */
  int64_t flag_stride;
  int c_type;
  void *c; int64_t ldc; int64_t c_row0;
  int allreduce;
  void *peer_c[MKX_TP_MAX]; int64_t peer_ldc[MKX_TP_MAX];
  mkx_tp_sync sync;
} mkx_tp_red_desc;
int mkx_tp_reduce(const mkx_tp_red_desc *d, cudaStream_t st);

/* GEMM+AllReduce tail: wait (bounded) until every owner's rows have
 * landed here (done[q] >= epoch). */
int mkx_tp_ar_wait(const mkx_tp_sync *s, cudaStream_t st);

#ifdef __cplusplus
}
#endif
#endif
