/* The communicator's network endpoint: a transport (src/net) and its
 * proxy (src/proxy), opened when the communicator spans several nodes,
 * with staging regions through which the host path's inter-node traffic
 * flows and the counters that show how many bytes crossed nodes. */
#ifndef MKX_CORE_COMM_NET_H
#define MKX_CORE_COMM_NET_H

#include <stddef.h>
#include <stdint.h>
#include "core/options.h"
#include "mkx.h"
#include "proxy/proxy.h"

/* mkx_options_load with the transports' rows registered first: comm is the
 * layer that knows both base and net, so it hands net's rows over here,
 * before every load of a communicator's options or of MKX_Info_print's. */
int mkx_comm_options_load(mkx_options *opt, MPI_Info info);

/* Collective; a no-op on a single node. */
int mkx_comm_net_open(MKX_Comm c);
/* Collective (meets the peers first, so nobody closes mid-transfer). */
void mkx_comm_net_close(MKX_Comm c);

/* One inter-node exchange: this rank sends send_len[q] bytes from
 * send[q] to each rank q (0: nothing; never to itself), and receives
 * recv_len[q] bytes from each rank q into recv[q].  Every rank must call
 * it with lengths that match pairwise (what q sends to r is what r
 * expects from q).  Collective over the communicator: the first one sets
 * up the staging regions.  The send buffers may be reused on return. */
int mkx_comm_net_exchange(MKX_Comm c, const void *const *send,
                          const size_t *send_len, void *const *recv,
                          const size_t *recv_len);

/* Where the data of an exchange go as they arrive, in pieces (so the
 * receiver works on the first pieces while the later ones cross): take()
 * gets bytes [off, off + len) of what rank src sent, `data` valid only
 * during the call; a non-zero return ends the exchange with that code.
 * Pieces come in rounds: round r holds bytes [r P, (r + 1) P) of every
 * message still that long (P the same for all sources), and within a
 * round the sources come in `order` (norder ranks, each source with data
 * exactly once; NULL: rank order).  So a sink that sums the sources'
 * pieces adds them in a fixed order. */
typedef struct mkx_comm_net_sink {
  int (*take)(void *ctx, int src, size_t off, const void *data, size_t len);
  void *ctx;
  const int *order;
  int norder;
} mkx_comm_net_sink;

/* mkx_comm_net_exchange with the received data handed to `sink`. */
int mkx_comm_net_exchange_to(MKX_Comm c, const void *const *send,
                             const size_t *send_len, const size_t *recv_len,
                             const mkx_comm_net_sink *sink);

/* Tests: communicators opened from now on move exchanges in pieces of
 * `bytes` (rounded up to 64; 0: the default, 2 MiB), so that short
 * messages take many pieces and wrap the slots. */
void mkx_comm_net_test_piece(size_t bytes);

/* Payload bytes this rank's calls have sent over the network so far (0
 * without an endpoint; the first writes into a new device region, a
 * set-up, not counted). */
uint64_t mkx_comm_net_bytes_sent(MKX_Comm c);

/* Whether the endpoint's transport moves device memory with CUDA copies
 * of its own (tcp, shm: no MKX_NET_CAP_DEVICE_MEM); 0 without one. */
int mkx_comm_net_stages_device(MKX_Comm c);

/* The emulated link's cap in MB/s where the endpoint is shm's with one
 * (option net_shm_bandwidth), else 0: benchmarks set a call's bytes
 * against it. */
int64_t mkx_comm_net_link_mbps(MKX_Comm c);

/* What this rank's network proxy thread has cost and carried so far
 * (mkx_proxy_get_stats; zeros without an endpoint). */
void mkx_comm_net_proxy_stats(MKX_Comm c, mkx_proxy_stats *s);

/* Kernels that drive the network (src/ops/nodes/net_gpu.h) use, on every
 * endpoint, MKX_COMM_NET_GPU_WORDS signal words per sending rank from
 * mkx_comm_net_gpu_slot(c, src), consecutive by rank, and a region up to
 * the length they asked for: MKX_COMM_NET_GPU_REGION (device memory, or
 * with option net_gpu_region=host pinned host memory) or
 * MKX_COMM_NET_GPU_HOST_REGION (always pinned host memory; both mapped
 * for the GPU).  A region's first write from each rank (a set-up: what a
 * transport maps on it) goes to bytes after that length, with a word of
 * its own after every rank's block: it may land after a call has begun,
 * and must not touch what the call reads or waits for. */
#define MKX_COMM_NET_GPU_WORDS 33
#define MKX_COMM_NET_GPU_REGION 2
#define MKX_COMM_NET_GPU_HOST_REGION 3
#define MKX_COMM_NET_GPU_DWORDS 36
uint32_t mkx_comm_net_gpu_slot(MKX_Comm c, int src);

#if HAVE_CUDA
#include "proxy/proxy_gpu.h"
/* The proxy whose ring a kernel may drive (NULL: none: no endpoint, or a
 * rank without a GPU). */
const mkx_proxy_gpu *mkx_comm_net_gpu(MKX_Comm c);
/* Whether region `index` is pinned host memory (else device memory). */
int mkx_comm_net_gpu_in_host(MKX_Comm c, uint32_t index);
/* Collective, with the same index and len on every rank: *base, memory of
 * at least `len` bytes, region `index` (MKX_COMM_NET_GPU_REGION or
 * _HOST_REGION) on every rank (grown only: a larger len replaces it once
 * the kernels of earlier calls are done with the ring), and *words,
 * MKX_COMM_NET_GPU_DWORDS device words for those kernels: [0] the calls'
 * network epoch, [1] the last command (mkx_fused_net_desc), then
 * MKX_FUSED_NET_MAXCH counts, zero between calls
 * (mkx_fused_net_sum_desc.chunk_done), then the network forward's [18]
 * epoch done and [19] count (mkx_fused_net_fwd_desc), then MKX_FUSED_NET_MAXCH
 * counts more for a second sum running beside the first. */
int mkx_comm_net_gpu_region(MKX_Comm c, uint32_t index, size_t len, void **base,
                            uint64_t **words);
/* Host and GPU never post into the ring at once: a call whose kernels
 * post marks its stream after the last of them (mark); the host waits
 * for that before it posts or changes a region (quiet), and the next such
 * call's stream waits for it (after), so their kernels run in turn.
 * Under stream capture the mark and the wait are the graph's external
 * event nodes, and from then on the region never grows (the graph holds
 * its address) and quiet always waits (a launch may come at any time). */
int mkx_comm_net_gpu_mark(MKX_Comm c, MKX_Stream st);
int mkx_comm_net_gpu_quiet(MKX_Comm c);
int mkx_comm_net_gpu_after(MKX_Comm c, MKX_Stream st);
#else
static inline int mkx_comm_net_gpu_quiet(MKX_Comm c) {
  (void)c;
  return 0;
}
#endif

#endif
