/*
 * The fused calls across nodes driven by the GPU: C interface of
 * kernels/fused/net.cu, the kernels that hand data to the network proxy,
 * wait for the peers' signal words and sum or forward what lands.  Called
 * by src/ops/nodes (the tensor-parallel calls), src/ops/attn (ring
 * attention) and src/ops/moe.  Includable from C11 (needs cuda_runtime.h,
 * stdint.h).
 */
#ifndef MKX_KERNELS_FUSED_NET_H
#define MKX_KERNELS_FUSED_NET_H

#include <cuda_runtime.h>
#include <stdint.h>
#include "fused/fused.h"
#include "proxy/proxy_dev.h"

#ifdef __cplusplus
extern "C" {
#endif

/* AllGather+GEMM across nodes, driven by the GPU: every rank's gathered
 * A (m x k rows, the same layout everywhere) is a region of the network
 * endpoint, index `region` on every rank (on nodes of several ranks the
 * rows that come over the network, which mkx_fused_net_fwd hands on).
 *   begin (<<<1, 32>>>, before the gated GEMM, after this rank's rows are
 *   in its gathered A): the call's network epoch e = ++*epoch; a write of
 *   no bytes to every peer sets its word slot0 + rank * words to e (this
 *   rank has finished its previous call: the peer may write into it);
 *   once every peer's word here is >= e, this rank's rows go to every
 *   peer in chunks of chunk_tiles tiles of 128 rows (from the tile of
 *   bnd[rank]; each ends on a tile boundary or at bnd[rank + 1]), chunk j
 *   setting the peer's word slot0 + rank * words + 1 + j to e.
 *   end (<<<1, 32>>>, after the GEMM): waits until the proxy has completed
 *   every command of the call (the rows may be overwritten).
 * A wait that runs out leaves MKX_FUSED_ERR_TIMEOUT in sync.err (where:
 * MKX_FUSED_AT_NET_*; peer: the rank), a dead ring its code likewise. */
#define MKX_FUSED_NET_MAXCH 16
typedef struct mkx_fused_net_desc {
  mkx_proxy_dev proxy;
  uint64_t *epoch;    /* device: GPU-driven calls so far */
  uint64_t *last_seq; /* device: the call's last command */
  int rank, size;     /* size <= 32; rows (bnd) only with size <= MKX_FUSED_MAX */
  unsigned peers;     /* bit q: rank q is met and written; 0: every other */
  uint32_t slot0, words, region;
  int64_t row_bytes;
  int64_t bnd[MKX_FUSED_MAX + 1];
  int chunk_tiles;
  mkx_fused_sync sync; /* bound and error word */
  /* device, or NULL: the epoch at which the call's forward (below) ended;
   * end waits for it first */
  const uint64_t *fwd_done;
} mkx_fused_net_desc;
int mkx_fused_net_begin(const mkx_fused_net_desc *d, cudaStream_t st);
int mkx_fused_net_end(const mkx_fused_net_desc *d, cudaStream_t st);

/* GEMM+ReduceScatter / GEMM+AllReduce over nodes of one rank each, driven
 * by the GPU (src/ops/nodes/rs_ar_net.c), with the same descriptor (bnd: all
 * zeros, so begin only meets the peers):
 *   post (<<<1, 32>>>): one write of len bytes at src_off of the region to
 *   dst_off of the region at `peer`, setting the peer's word
 *   slot0 + rank * words + word to the call's network epoch, once the
 *   stream's earlier work (the chunk's GEMM) has ended. */
int mkx_fused_net_post(const mkx_fused_net_desc *d, int peer, uint64_t src_off, uint64_t dst_off, uint64_t len,
                       uint32_t word, cudaStream_t st);
/*   wait (<<<1, 32>>>): until word slot0 + q * words + word of every peer
 *   q has reached the call's epoch (bounded; a wait that runs out is
 *   recorded at `where`, MKX_FUSED_AT_*, naming q). */
int mkx_fused_net_wait(const mkx_fused_net_desc *d, uint32_t word, int where, cudaStream_t st);

/* The owner's sum of its rows: out[i] = sum over ranks r in rank order of
 * part[r] row i (fp32, n wide, leading dimension ld_part), rows [0, rows)
 * in chunks of chunk_rows (a multiple of 8); chunk j of rank r != rank
 * waits first for its word slot0 + r * words + w0 + j (mkx_fused_net_desc)
 * to reach the epoch.  out: c_type (MKX_GEMM_*), leading dimension ldc.
 * With post_w0 != 0 (GEMM+AllReduce) out lies in the region at offset
 * post_off, rows post_row_bytes apart, and as soon as chunk j of out is
 * summed it goes to every peer (net.peers) at the same offset, setting
 * the peer's word slot0 + rank * words + post_w0 + j to the epoch; chunk_done: at
 * least MKX_FUSED_NET_MAXCH device words, zero before the kernel and after
 * it (the blocks count their groups of each chunk there).
 * Nodes of several ranks name their sources instead (nsrc > 0, at most
 * MKX_FUSED_MAX, summed in that order): source s is part[s]; its chunk j
 * waits for rank src_rank[s]'s word w0 + j if src_rank[s] >= 0, else for
 * src_flag[s][j] (a node rank's flag, as mapped here) to reach
 * *flag_epoch if src_flag[s], else for nothing; a failed flag wait names
 * rank src_name[s] (MKX_FUSED_AT_NODE_PART, tile j).  post_one = q + 1 sends
 * each summed chunk to rank q only, to post_dst_off (+ the chunk's
 * offset) instead of post_off; 0: to every peer. */
typedef struct mkx_fused_net_sum_desc {
  mkx_fused_net_desc net;
  const float *part[MKX_FUSED_MAX];
  int64_t ld_part, rows, n, chunk_rows;
  uint32_t w0;
  void *out;
  int64_t ldc;
  void *out2; /* NULL, or a second copy of out (leading dimension ldc2) */
  int64_t ldc2;
  int c_type;
  int max_blocks; /* most CTAs (0: one per 8 rows) */
  uint32_t post_w0;
  uint64_t post_off;
  int64_t post_row_bytes;
  uint64_t *chunk_done;
  int nsrc;
  int src_rank[MKX_FUSED_MAX];
  const int *src_flag[MKX_FUSED_MAX];
  int src_name[MKX_FUSED_MAX];
  const int *flag_epoch;
  int post_one;
  uint64_t post_dst_off;
} mkx_fused_net_sum_desc;
int mkx_fused_net_sum(const mkx_fused_net_sum_desc *d, cudaStream_t st);
/* The other owners' rows as they land: rows [bnd[q], bnd[q + 1]) of every
 * peer q (net.peers), in chunks of chunk_rows from bnd[q], chunk j waiting
 * first for word slot0 + q * words + w0 + j to reach the epoch, copied
 * row_bytes per row from src (ld_src bytes apart) to dst (ld_dst). */
typedef struct mkx_fused_net_take_desc {
  mkx_fused_net_desc net;
  int64_t bnd[MKX_FUSED_MAX + 1];
  int64_t chunk_rows;
  uint32_t w0;
  const char *src;
  char *dst;
  int64_t ld_src, ld_dst, row_bytes;
  int max_blocks; /* most CTAs (0: one per 8 rows) */
} mkx_fused_net_take_desc;
int mkx_fused_net_take(const mkx_fused_net_take_desc *d, cudaStream_t st);
/* The network forward on nodes of several ranks: what the column peers
 * (net.peers: the ranks of this rank's local index on the other nodes)
 * send lands in this rank's region (src), and the node's ranks all need
 * it.  A unit is one source's piece for one destination: once the
 * piece's word (slot0 + q * words + word) reaches the epoch, it is copied
 * from src to dst[i] (the node ranks' buffers, this rank's included, as
 * mapped here), and then flags of destination i are set to *flag_epoch:
 *   MKX_FUSED_FWD_ROWS (AllGather+GEMM): chunk j of peer q as
 *     mkx_fused_net_begin posts it (word 1 + j), the same rows of dst (the
 *     gathered A, rows row_bytes apart), flags[i][q * tiles_m + t] for
 *     every tile t the rows meet (mkx_tp_ag_desc.flags);
 *   MKX_FUSED_FWD_KV (ring attention): peer q's K then V (kv_chunk bytes
 *     each, at 2 q kv_chunk of src; word kv_word) to K slot q and V slot
 *     q of dst (q kv_chunk and (size + q) kv_chunk), flags[i][q].
 * Units are taken early chunks first, over at most max_blocks CTAs: each
 * waits on the network itself, so no stream ever waits for the proxy,
 * and no stream waits for the forward either: the last CTA out sets
 * net.fwd_done to the epoch (count: a device word, zero before and
 * after), and mkx_fused_net_end waits for it.  It starts after
 * mkx_fused_net_begin and the call's posts (forked from their stream): the
 * call's epoch is *net.epoch, and whatever shares a hardware queue with it
 * and comes later in that queue is nothing it waits for. */
enum { MKX_FUSED_FWD_ROWS = 0, MKX_FUSED_FWD_KV = 1 };
typedef struct mkx_fused_net_fwd_desc {
  mkx_fused_net_desc net;
  int kind;
  const char *src;
  int ndst;
  char *dst[MKX_FUSED_MAX];
  int *flags[MKX_FUSED_MAX];
  int64_t tiles_m;   /* rows */
  uint64_t kv_chunk; /* key/value */
  uint32_t kv_word;
  const int *flag_epoch; /* local: the node workspace's epoch */
  unsigned *count;
  int max_blocks;
} mkx_fused_net_fwd_desc;
int mkx_fused_net_fwd(const mkx_fused_net_fwd_desc *d, cudaStream_t st);
/* Load every kernel above, launching nothing (mkx_gemm_load says why). */
int mkx_fused_net_load(void);

#ifdef __cplusplus
}
#endif
#endif
