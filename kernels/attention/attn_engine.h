/*
 * MKX Hopper attention engine (sm_90a): C interface of
 * kernels/attention/attention.cu.  Includable from C11 (needs
 * cuda_runtime.h and stdint.h).
 *
 *   O = softmax(scale * Q K^T + mask) V, LSE = log-sum-exp of each row's
 *   scaled visible scores (natural log), forward only.
 *
 * Layouts (dense, row-major, the public MKX_Ring_attention's):
 *   Q, O  [batch][seq_q][heads_q][head_dim]       type dtype
 *   K, V  [batch][seq_k][heads_kv][head_dim]      one chunk, type dtype
 *   LSE   [batch][heads_q][seq_q]                 fp32 (NULL: not written)
 * Query head h reads key/value head h / (heads_q / heads_kv).
 *
 * Keys and values come in nchunks chunks of seq_k positions each (the
 * ranks' shards of a sequence-parallel ring; one chunk on one GPU).
 * Chunk `self` is read from k, v; chunk c != self from slot c of k_ring,
 * v_ring ([nchunks][batch][seq_k][heads_kv][head_dim] each, slots
 * ring_stride elements apart), once ready[c] >= *ready_target (a bounded
 * wait, reported through the error word of `sync`; for a chunk of
 * net_mask, raised by the engine itself from the network's word).
 * Queries are the shard of rank `self`.  Global
 * positions follow `layout` (MKX_ATTN_*: contiguous, zigzag, striped, as
 * mkx.h says, with p = nchunks and seq_local = seq_q = seq_k); causal
 * masks on them, and blocks of keys no row of a query tile may see are
 * skipped.  The softmax state of each row stays in fp32 registers across
 * all chunks: partial results are never rounded or merged through memory.
 *
 * Rows with no visible key give O = 0 and LSE = -inf.
 *
 * Requirements (mkx_attn_supported says which fails): sm_90 device;
 * head_dim % 8 == 0 and head_dim <= 128 (64 and 128 are the tuned sizes;
 * others are zero-padded up to them); q, k, v, o, k_ring, v_ring 16-byte
 * aligned; every size < 2^31.
 */
#ifndef MKX_ATTN_ENGINE_H
#define MKX_ATTN_ENGINE_H

#include <cuda_runtime.h>
#include <stdint.h>
#include "fused/fused.h"

#ifdef __cplusplus
extern "C" {
#endif

/* error codes besides cudaError_t values (which are >= 0), as the GEMM
 * engine's */
#define MKX_ATTN_EINVAL (-1)
#define MKX_ATTN_ENODEV (-2)
#define MKX_ATTN_ETMAP (-3)

#define MKX_ATTN_MAX_CHUNKS 32

typedef struct mkx_attn_desc {
  int64_t batch, seq_q, seq_k, heads_q, heads_kv, head_dim;
  const void *q, *k, *v;
  void *o;
  float *lse;
  int dtype;  /* MKX_GEMM_BF16 or MKX_GEMM_FP16 (the public values) */
  int causal; /* 0 or 1 */
  float scale;
  int layout; /* 0 contiguous, 1 zigzag, 2 striped: the values of the
                 option attn_layout (MKX_ATTN_*) */
  int nchunks, self;
  const void *k_ring, *v_ring; /* NULL when nchunks == 1 */
  const int *ready;            /* ready[c]: NULL when nchunks == 1 */
  const int *order;            /* the chunks in the order to take them,
                                  `self` first (NULL: the ring's, self,
                                  self-1, self-2, ...: rank r sends to r+1
                                  first) */
  const int *ready_target;     /* device int: the value ready[c] reaches
                                  (the call's epoch, written on the GPU) */
  int64_t ring_stride;         /* elements from one chunk of k_ring, v_ring
                                  to the next: 0 for batch * seq_k *
                                  heads_kv * head_dim (packed); more lets
                                  each chunk's K and V lie side by side, as
                                  one network write lands them */
  unsigned net_mask;           /* bit c: chunk c comes over the network
                                  and net_ready[c * net_ready_stride]
                                  (host-mapped: a signal word's low half)
                                  says it has landed once it reaches
                                  *net_target; the first CTA to wait for
                                  it reads that word and raises ready[c],
                                  the others wait for ready[c] (one reader
                                  across PCIe instead of every CTA) */
  const int *net_ready;        /* host-mapped */
  int net_ready_stride;        /* ints between chunks' words */
  const int *net_target;       /* device int */
  int *net_claim;              /* device ints, one per chunk, zero before
                                  the run: who reads net_ready */
  const mkx_fused_sync *sync;  /* bounded waits and their error word; NULL
                              when nchunks == 1 */
  int num_ctas;                /* persistent CTAs; 0: one per SM (at most
                              sync->ctas) */
  int *tile_counter;           /* NULL: each CTA takes every num_ctas-th tile;
                              else one int of device memory that the run
                              zeroes on its stream and the CTAs take tiles
                              from (balances the causal mask's uneven
                              tiles); one per concurrent run */
  int block_n;                 /* keys per block: 0 or 128; 192 with
                                  head_dim <= 64 and 2 warpgroups */
  int warpgroups;              /* consumer warpgroups (64 query rows each):
                                  0 (mkx_attn_warpgroups picks), 2, or 3
                                  with head_dim <= 64 and 128 keys per
                                  block */
  int no_turns;                /* 1: the consumer warpgroups issue their
                                  products whenever ready instead of in
                                  turns (for measurements) */
} mkx_attn_desc;

/* 1 if the engine can run d, else 0 and (if why != NULL) a static reason.
 * Does not look at the device. */
int mkx_attn_supported(const mkx_attn_desc *d, const char **why);

/* The keys per block and the consumer warpgroups a run of d takes. */
int mkx_attn_block_n(const mkx_attn_desc *d);
int mkx_attn_warpgroups(const mkx_attn_desc *d);

/* Enqueue the attention on stream s (current device).  0, a cudaError_t
 * value (> 0) or a negative MKX_ATTN_E* code. */
int mkx_attn_run(const mkx_attn_desc *d, cudaStream_t s);

/* Load the kernel mkx_attn_run would launch for d, launching nothing: with
 * lazy loading a kernel's first launch waits for the device to be idle,
 * which under MPS includes a peer's kernels that wait for this rank's
 * chunk.  0 or as mkx_attn_run. */
int mkx_attn_load(const mkx_attn_desc *d);

#ifdef MKX_ATTN_TIMELINE
/* The timeline of attn_timeline.cuh: stamps[warpgroup][warp 0 or 2][block]
 * [step] (2 x 2 x 256 x 8 long long, clock64, 0 where none), and a clear
 * before a run.  0 or a cudaError_t value. */
int mkx_attn_timeline_read(long long *stamps);
int mkx_attn_timeline_clear(void);
#endif

#ifdef __cplusplus
}
#endif

#endif /* MKX_ATTN_ENGINE_H */
