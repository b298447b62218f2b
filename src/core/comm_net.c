/* The communicator's network endpoint and the inter-node exchange of the
 * host path; see comm_net.h.
 *
 * An exchange is pipelined in pieces of `piece` bytes through two small
 * registered host regions, fixed once per communicator: for every pair
 * (this rank, peer) the send region has DEPTH (4) piece slots and the
 * receive region DEPTH (4) slots per source.  The host thread copies piece
 * g of its message to q into send slot g % DEPTH and posts it (a write
 * with a signal) to q's receive slot (rank, g % DEPTH), while the proxy
 * thread sends the pieces before it and the peers' pieces arrive; each
 * arrived piece is handed to the caller (copied out, or added in place)
 * and a credit (a write of no bytes with a signal) tells its sender the
 * slot is free.  So the copies in and out overlap the transport, memory
 * does not grow with the message, and no barrier ends an exchange.
 *
 * Signals: data slot (source, i) is word source * DEPTH + i, and its
 * value is the piece's number + 1 (counted over the communicator's life).
 * At most one write is in flight per word (a slot is reused only after
 * its credit), so providers that do not order writes (efa) still show
 * each piece's data before its signal.  Credits from peer q go to word
 * size * DEPTH + q, holding how many of our pieces q has taken; it only
 * grows, which efa's rebuilt values keep even out of order. */
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "core/comm.h"
#include "boot/oob_mpi.h"
#include "core/comm_net.h"
#include "core/error.h"
#include "core/log.h"
#include "net/net.h"
#include "proxy/proxy.h"
#if HAVE_CUDA
#include <cuda_runtime.h>
#include "core/cuda_rc.h"
#include "proxy/proxy_gpu.h"
#endif

#define RING_ENTRIES 256
/* Pieces of 2 MiB, 4 in flight per pair: a piece's copies overlap the
 * transfer of the others, and a piece is long enough that the per-piece
 * costs (a credit, a wake-up) vanish; smaller or larger pieces and more
 * in flight moved the same on loopback (docs/inter-node.md).  Each region
 * is size * DEPTH pieces; large communicators get smaller pieces so that
 * it stays within STAGE_BUDGET. */
#define PIECE_MAX ((size_t)2 << 20)
#define PIECE_MIN ((size_t)64 << 10)
#define DEPTH 4
#define STAGE_BUDGET ((size_t)64 << 20)
/* A kernels' region's tail, for its first write (warm_up). */
#define WARM_BYTES 256

#if HAVE_CUDA
/* A region of the kernels that drive the network: memory grown only,
 * registered with the endpoint under one proxy index on every rank. */
typedef struct gpu_region {
  mkx_net_mr mr;
  mkx_net_rkey *keys;
  void *buf;
  size_t cap;
  int host; /* pinned host memory mapped for the GPU, else device memory */
} gpu_region;
#endif

typedef struct mkx_comm_net {
  mkx_net *net;
  mkx_proxy *proxy;
  size_t piece;      /* bytes per piece slot */
  char *send, *recv; /* staging regions: size * DEPTH slots each */
  int ready;         /* the regions are registered everywhere */
  mkx_net_mr smr, rmr;
  mkx_net_rkey *skeys, *rkeys;
  uint64_t *sent_to;  /* pieces sent to each rank so far */
  uint64_t *got_from; /* pieces taken from each rank so far */
  uint64_t *slot_seq; /* [size * DEPTH]: last command per send slot */
  size_t *done_to;    /* [size]: bytes of the current exchange posted */
#if HAVE_CUDA
  /* With a GPU the ring is mapped for it (mkx_proxy_gpu): kernels post
   * too, never while the host does (mkx_comm_net_gpu_quiet). */
  mkx_proxy_gpu *gpu;
  cudaEvent_t gpu_done; /* after the last kernel that used the ring */
  int gpu_used;
  int gpu_captured;    /* a CUDA graph holds the region's address and may
                     * launch at any time: no growth, quiet always waits */
  gpu_region greg[2];  /* MKX_COMM_NET_GPU_REGION, _HOST_REGION */
  uint64_t *gwords;    /* device: mkx_comm_net_gpu_region's words */
  uint64_t warmed;     /* writes of warm_up so far */
  uint64_t warm_bytes; /* their payload: not the calls' */
#endif
} mkx_comm_net;

#if HAVE_CUDA
static gpu_region *region_at(mkx_comm_net *cn, uint32_t index) {
  return &cn->greg[index - MKX_COMM_NET_GPU_REGION];
}

static void region_free(gpu_region *g) {
  if (g->buf)
    MKX_CUDA_RELEASE(g->host ? cudaFreeHost(g->buf) : cudaFree(g->buf));
  g->buf = NULL, g->cap = 0;
}
#endif

static int one_host(MKX_Comm c) {
  for (int q = 0; q < c->size; q++)
    if (c->place.host_of_rank[q] != 0) return 0;
  return 1;
}

static size_t test_piece;

void mkx_comm_net_test_piece(size_t bytes) { test_piece = bytes; }

static size_t piece_bytes(int size) {
  if (test_piece) return (test_piece + 63) & ~(size_t)63;
  size_t p = STAGE_BUDGET / ((size_t)size * DEPTH);
  p = p > PIECE_MAX ? PIECE_MAX : p < PIECE_MIN ? PIECE_MIN : p;
  return p & ~(size_t)63; /* pieces start 64-byte aligned */
}

/* A rank bound to a single core runs the network's threads (the proxy,
 * a transport's progress thread) on the core of the application's thread:
 * the network then moves only when the scheduler lets it, and a call
 * whose kernels wait for the network takes milliseconds more.  Said once
 * per process. */
static void warn_one_core(MKX_Comm c) {
  static atomic_int said;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) != 0 || CPU_COUNT(&set) != 1 ||
      atomic_exchange(&said, 1))
    return;
  mkx_log(MKX_LOG_WARN,
          "rank %d is bound to one core: the network proxy thread shares it "
          "with the application and the network waits for the scheduler; "
          "give each rank 2 or more cores (srun --cpus-per-task=2, mpirun "
          "--map-by slot:PE=2 or --bind-to none)",
          c->rank);
}

/* CUDA_DEVICE_MAX_CONNECTIONS=1 puts every stream of the process in one
 * hardware queue, where work starts in the order it came: a kernel that
 * waits for the network holds the queue while the next launch on its
 * stream waits for its end, and the copies that land the network's bytes
 * (tcp's, shm's) queue behind it.  Calls driven by the GPU across nodes
 * then stop at their bound, so a communicator with such a rank keeps the
 * network part on the host. */
static int one_queue_env(void) {
  const char *v = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  return v && atoi(v) == 1;
}

static int start_proxy(MKX_Comm c, mkx_comm_net *cn) {
  warn_one_core(c);
#if HAVE_CUDA
  /* only where kernels will post (the host alone needs no mapping): the
   * GEMM calls' auto takes the GPU on equal nodes (AllGather+GEMM on
   * nodes of several ranks, all three on nodes of one), attention's on
   * nodes of one rank and, over a transport that copies device memory,
   * of several; MoE's on equal nodes */
  const int hg = c->opt.hier_gemm, ha = c->opt.hier_attn;
  const int ones = c->place.num_nodes == c->size;
  const int stages = !(mkx_net_caps(cn->net) & MKX_NET_CAP_DEVICE_MEM);
  const int gemm = hg == MKX_HIER_GEMM_PROXY ||
                   (hg == MKX_HIER_GEMM_AUTO && c->place.equal_nodes);
  const int attn = ha == MKX_HIER_ATTN_PROXY ||
                   (ha == MKX_HIER_ATTN_AUTO && (ones || stages));
  const int moe = c->opt.hier_moe != MKX_HIER_MOE_HOST && c->place.equal_nodes;
  if (c->device >= 0 && (gemm || attn || moe) && !c->one_queue) {
    MKX_TRY(mkx_proxy_gpu_create(cn->net, c->device, RING_ENTRIES,
                                 c->opt.timeout_ms, &cn->gpu));
    cn->proxy = mkx_proxy_gpu_proxy(cn->gpu);
    MKX_TRY(mkx_cuda_rc(
        cudaEventCreateWithFlags(&cn->gpu_done, cudaEventDisableTiming),
        "network endpoint", "cudaEventCreate"));
    const size_t gw = MKX_COMM_NET_GPU_DWORDS * sizeof(uint64_t);
    MKX_TRY(mkx_cuda_rc(cudaMalloc((void **)&cn->gwords, gw),
                        "network endpoint", "cudaMalloc"));
    MKX_TRY(mkx_cuda_rc(cudaMemset(cn->gwords, 0, gw), "network endpoint",
                        "cudaMemset"));
  }
#endif
  if (!cn->proxy)
    MKX_TRY(mkx_proxy_create(cn->net, RING_ENTRIES, NULL, c->opt.timeout_ms,
                             &cn->proxy));
  return mkx_proxy_start(cn->proxy, c->has_gpu_map ? c->gpu_map.cpus : NULL);
}

static int alloc_tables(MKX_Comm c, mkx_comm_net *cn) {
  size_t n = (size_t)c->size;
  cn->skeys = calloc(n, sizeof *cn->skeys);
  cn->rkeys = calloc(n, sizeof *cn->rkeys);
  cn->sent_to = calloc(n, sizeof *cn->sent_to);
  cn->got_from = calloc(n, sizeof *cn->got_from);
  cn->slot_seq = calloc(n * DEPTH, sizeof *cn->slot_seq);
  cn->done_to = calloc(n, sizeof *cn->done_to);
#if HAVE_CUDA
  for (int i = 0; i < 2; i++)
    if (!(cn->greg[i].keys = calloc(n, sizeof *cn->greg[i].keys)))
      return mkx_error(MKX_ERR_NOMEM, "network endpoint tables");
#endif
  if (!cn->skeys || !cn->rkeys || !cn->sent_to || !cn->got_from ||
      !cn->slot_seq || !cn->done_to)
    return mkx_error(MKX_ERR_NOMEM, "network endpoint tables");
  return MKX_SUCCESS;
}

int mkx_comm_options_load(mkx_options *opt, MPI_Info info) {
  MKX_TRY(mkx_net_options_register());
  return mkx_options_load(opt, info);
}

int mkx_comm_net_open(MKX_Comm c) {
  if (c->place.num_nodes < 2) return MKX_SUCCESS;
  /* Inside a node the host path talks MPI (standing for NVLink). */
  MKX_TRY(mkx_mpi_check(
      MPI_Comm_split(c->mpi, c->place.node, c->place.local_rank, &c->node_mpi),
      "MPI_Comm_split by node"));
  mkx_comm_net *cn = calloc(1, sizeof *cn);
  mkx_options opt = c->opt;
  if (!cn) return mkx_error(MKX_ERR_NOMEM, "network endpoint");
  c->net = cn;
  cn->piece = piece_bytes(c->size);
  int rc = alloc_tables(c, cn);
  /* Virtual nodes of one host talk over loopback unless told otherwise. */
  if (opt.net_tcp_bind[0] == '\0' && one_host(c))
    strcpy(opt.net_tcp_bind, "lo");
  mkx_net_params p = {.rank = c->rank,
                      .size = c->size,
                      .num_signals = (uint32_t)c->size *
                                     (DEPTH + 1 + MKX_COMM_NET_GPU_WORDS + 1),
                      .timeout_ms = c->opt.timeout_ms,
                      .opt = &opt,
                      .device = c->has_gpu_map && c->gpu_map.num_nics
                                    ? c->gpu_map.nic_names[0]
                                    : NULL};
  /* a rank whose transport did not open must not leave the others in
   * the connect's exchange */
  if (rc == MKX_SUCCESS) rc = mkx_net_open(&p, &cn->net);
  MKX_TRY(mkx_comm_agree_rc(c, rc, "network open"));
  /* every rank is here (the open was agreed), before anything that may
   * fail on one rank alone */
  uint64_t one = 0;
  MKX_TRY(mkx_comm_agree_u64(c, (uint64_t)one_queue_env(), MKX_AGREE_OR, &one,
                             "hardware queues"));
  c->one_queue = one != 0;
  MKX_TRY(mkx_net_connect(cn->net, &c->oob));
  MKX_TRY(start_proxy(c, cn));
  mkx_log(MKX_LOG_INFO, "network: %s between %d nodes, pieces of %zu bytes",
          mkx_net_name(cn->net), c->place.num_nodes, cn->piece);
  return MKX_SUCCESS;
}

static void release_regions(mkx_comm_net *cn) {
  if (cn->smr.base) mkx_net_dereg(cn->net, &cn->smr);
  if (cn->rmr.base) mkx_net_dereg(cn->net, &cn->rmr);
  memset(&cn->smr, 0, sizeof cn->smr);
  memset(&cn->rmr, 0, sizeof cn->rmr);
  free(cn->send);
  free(cn->recv);
  cn->send = cn->recv = NULL;
  cn->ready = 0;
}

void mkx_comm_net_close(MKX_Comm c) {
  mkx_comm_net *cn = c->net;
  if (!cn) return;
  if (!c->broken)
    c->oob.barrier(c->oob.ctx, c->opt.timeout_ms, "MKX_Comm_free: network");
  if (cn->proxy) {
    mkx_proxy_stats st;
    mkx_proxy_stop(cn->proxy);
    mkx_proxy_get_stats(cn->proxy, &st);
    mkx_log(MKX_LOG_INFO,
            "network proxy: %.1f ms of CPU for %llu commands, %.1f MB, the "
            "transport busy %.1f ms",
            (double)st.cpu_ns / 1e6, (unsigned long long)st.commands,
            (double)st.bytes / 1e6, (double)st.busy_ns / 1e6);
  }
#if HAVE_CUDA
  if (cn->gpu) {
    (void)cudaEventSynchronize(cn->gpu_done);
    for (int i = 0; i < 2; i++)
      if (cn->greg[i].mr.base) mkx_net_dereg(cn->net, &cn->greg[i].mr);
    mkx_proxy_gpu_destroy(cn->gpu); /* the proxy with it */
    cn->proxy = NULL;
    MKX_CUDA_RELEASE(cudaEventDestroy(cn->gpu_done));
    for (int i = 0; i < 2; i++) region_free(&cn->greg[i]);
    if (cn->gwords) MKX_CUDA_RELEASE(cudaFree(cn->gwords));
  }
  for (int i = 0; i < 2; i++) free(cn->greg[i].keys);
#endif
  mkx_proxy_destroy(cn->proxy);
  if (cn->net) {
    release_regions(cn);
    mkx_net_close(cn->net);
  }
  free(cn->skeys), free(cn->rkeys), free(cn->sent_to), free(cn->got_from);
  free(cn->slot_seq), free(cn->done_to);
  free(cn);
  c->net = NULL;
}

static int register_regions(MKX_Comm c, mkx_comm_net *cn, size_t bytes) {
  mkx_net_reg_args sa = {cn->send, bytes, MKX_NET_MEM_HOST, -1, 0};
  mkx_net_reg_args ra = {cn->recv, bytes, MKX_NET_MEM_HOST, -1, 0};
  MKX_TRY(mkx_net_reg(cn->net, &sa, &cn->smr));
  MKX_TRY(mkx_net_reg(cn->net, &ra, &cn->rmr));
  MKX_TRY(mkx_net_exchange_keys(cn->net, &c->oob, &cn->smr, cn->skeys));
  MKX_TRY(mkx_net_exchange_keys(cn->net, &c->oob, &cn->rmr, cn->rkeys));
  MKX_TRY(mkx_proxy_set_region(cn->proxy, 0, &cn->smr, cn->skeys));
  return mkx_proxy_set_region(cn->proxy, 1, &cn->rmr, cn->rkeys);
}

/* The staging regions, made by the first exchange (every rank calls it,
 * so the key exchange is collective).  They are touched here, once, so
 * page faults never land in a transfer. */
static int setup_regions(MKX_Comm c, mkx_comm_net *cn) {
  size_t bytes = (size_t)c->size * DEPTH * cn->piece;
  if (cn->ready) return MKX_SUCCESS;
  release_regions(cn); /* what a failed attempt left */
  cn->send = malloc(bytes);
  cn->recv = malloc(bytes);
  if (!cn->send || !cn->recv)
    return mkx_error(MKX_ERR_NOMEM, "staging regions of 2 x %zu bytes", bytes);
  memset(cn->send, 0, bytes);
  memset(cn->recv, 0, bytes);
  MKX_TRY(register_regions(c, cn, bytes));
  cn->ready = 1;
  return MKX_SUCCESS;
}

/* ---- one exchange ---- */

typedef struct xchg {
  MKX_Comm c;
  mkx_comm_net *cn;
  mkx_proxy_ring *ring;
  const void *const *send;
  const size_t *send_len, *recv_len;
  const mkx_comm_net_sink *sink;
  int *order, norder; /* sources in delivery order (recv_len > 0) */
  int at;             /* next source of this round: order[at] */
  size_t round;       /* pieces [round * piece, ...) are being taken */
  int held_by;        /* a rank whose credit holds our next piece back */
  uint64_t last_seq;  /* the last data write posted */
} xchg;

static uint32_t data_word(int src, uint64_t g) {
  return (uint32_t)((uint64_t)src * DEPTH + g % DEPTH);
}

static uint32_t credit_word(const MKX_Comm c, int peer) {
  return (uint32_t)c->size * DEPTH + (uint32_t)peer;
}

/* A piece may go to q once q took the piece that last used the slot (its
 * credit) and the proxy is done with our copy in the send slot. */
static int slot_free(const xchg *x, int q, uint64_t g) {
  const mkx_comm_net *cn = x->cn;
  if (g >= DEPTH &&
      mkx_net_signal(cn->net, credit_word(x->c, q)) < g - DEPTH + 1)
    return 0;
  uint64_t seq = cn->slot_seq[data_word(q, g)];
  return atomic_load_explicit(&x->ring->completed, memory_order_acquire) >= seq;
}

static int post_piece(xchg *x, int q) {
  mkx_comm_net *cn = x->cn;
  const uint64_t g = cn->sent_to[q];
  const size_t off = cn->done_to[q], slot = data_word(q, g);
  const size_t left = x->send_len[q] - off;
  const size_t len = left < cn->piece ? left : cn->piece;
  memcpy(cn->send + slot * cn->piece, (const char *)x->send[q] + off, len);
  mkx_proxy_cmd cmd = {.op = MKX_PROXY_OP_WRITE,
                       .peer = q,
                       .src = 0,
                       .dst = 1,
                       .src_off = slot * cn->piece,
                       .dst_off = (size_t)data_word(x->c->rank, g) * cn->piece,
                       .len = len,
                       .slot = data_word(x->c->rank, g),
                       .value = g + 1};
  MKX_TRY(mkx_proxy_post(x->ring, &cmd, &x->last_seq, x->c->opt.timeout_ms));
  cn->slot_seq[slot] = x->last_seq;
  cn->sent_to[q] = g + 1;
  cn->done_to[q] = off + len;
  return MKX_SUCCESS;
}

/* Post what the credits allow, one piece per peer in turn (staggered from
 * rank + 1, so not everyone feeds rank 0 first).  *moved counts pieces. */
static int send_some(xchg *x, int *moved) {
  const MKX_Comm c = x->c;
  for (int more = 1; more;) {
    more = 0;
    for (int i = 1; i < c->size; i++) {
      int q = (c->rank + i) % c->size;
      if (x->cn->done_to[q] >= x->send_len[q]) continue;
      if (!slot_free(x, q, x->cn->sent_to[q])) {
        x->held_by = q;
        continue;
      }
      MKX_TRY(post_piece(x, q));
      ++*moved, more = 1;
    }
  }
  return MKX_SUCCESS;
}

/* Tell q its piece g left our slot: it may write that slot again. */
static int post_credit(xchg *x, int q, uint64_t taken) {
  uint64_t seq;
  mkx_proxy_cmd cmd = {.op = MKX_PROXY_OP_WRITE,
                       .peer = q,
                       .src = 0,
                       .dst = 1,
                       .len = 0,
                       .slot = credit_word(x->c, x->c->rank),
                       .value = taken};
  return mkx_proxy_post(x->ring, &cmd, &seq, x->c->opt.timeout_ms);
}

/* Take arrived pieces in order: round by round, sources in x->order. */
static int recv_some(xchg *x, int *moved) {
  mkx_comm_net *cn = x->cn;
  while (x->norder > 0) {
    const int q = x->order[x->at];
    const uint64_t g = cn->got_from[q];
    if (mkx_net_signal(cn->net, data_word(q, g)) < g + 1) return MKX_SUCCESS;
    const size_t off = x->round * cn->piece, left = x->recv_len[q] - off;
    const size_t len = left < cn->piece ? left : cn->piece;
    const char *data = cn->recv + (size_t)data_word(q, g) * cn->piece;
    MKX_TRY(x->sink->take(x->sink->ctx, q, off, data, len));
    cn->got_from[q] = g + 1;
    MKX_TRY(post_credit(x, q, g + 1));
    ++*moved;
    /* Next source; a source whose message ended leaves the rounds. */
    if (left <= cn->piece) {
      memmove(x->order + x->at, x->order + x->at + 1,
              sizeof *x->order * (size_t)(x->norder - x->at - 1));
      x->norder--;
    } else {
      x->at++;
    }
    if (x->at >= x->norder) x->at = 0, x->round++;
  }
  return MKX_SUCCESS;
}

/* Short waits first (a piece takes ~100 us to cross), then naps that
 * leave the cores to the proxy and transport threads. */
static void backoff(long spins) {
  struct timespec nap = {0, 20000};
  if (spins < 64)
    sched_yield();
  else
    nanosleep(&nap, NULL);
}

/* A timeout names whom we wait for: a source, or a peer not taking ours. */
static int stalled(const xchg *x) {
  const long long tmo = (long long)x->c->opt.timeout_ms;
  if (x->norder > 0)
    return mkx_error(MKX_ERR_TIMEOUT,
                     "network exchange: no data from rank "
                     "%d for %lld ms (option timeout_ms)",
                     x->order[x->at], tmo);
  return mkx_error(MKX_ERR_TIMEOUT,
                   "network exchange: rank %d took none of "
                   "our data for %lld ms (option timeout_ms)",
                   x->held_by, tmo);
}

static int run(xchg *x) {
  const int64_t tmo = x->c->opt.timeout_ms;
  int64_t deadline = mkx_net_now_ms() + tmo;
  for (long spins = 0;; spins++) {
    int moved = 0;
    MKX_TRY(send_some(x, &moved));
    MKX_TRY(recv_some(x, &moved));
    int sending = 0;
    for (int q = 0; q < x->c->size; q++)
      sending |= x->cn->done_to[q] < x->send_len[q];
    if (!sending && x->norder == 0) return MKX_SUCCESS;
    int err = atomic_load(&x->ring->error);
    if (err != MKX_SUCCESS)
      return mkx_error(err, "network exchange: the proxy stopped (%s)",
                       MKX_Error_string(err));
    if (moved) {
      deadline = mkx_net_now_ms() + tmo, spins = 0;
      continue;
    }
    if (mkx_net_now_ms() > deadline) return stalled(x);
    backoff(spins);
  }
}

/* order: every source with data once, as the caller's sink wants them. */
static int set_order(xchg *x, const int *order, int norder) {
  const MKX_Comm c = x->c;
  int *seen = calloc((size_t)c->size, sizeof *seen);
  if (!seen) return mkx_error(MKX_ERR_NOMEM, "exchange order");
  x->norder = 0;
  for (int i = 0; i < (order ? norder : c->size); i++) {
    int q = order ? order[i] : i;
    if (q < 0 || q >= c->size || seen[q]++) {
      free(seen);
      return mkx_error(MKX_ERR_INTERNAL, "exchange order: rank %d", q);
    }
    if (x->recv_len[q]) x->order[x->norder++] = q;
  }
  int missing = -1;
  for (int q = 0; q < c->size; q++)
    if (x->recv_len[q] && !seen[q]) missing = q;
  free(seen);
  if (missing >= 0)
    return mkx_error(MKX_ERR_INTERNAL,
                     "exchange order: no place for rank "
                     "%d's data",
                     missing);
  return MKX_SUCCESS;
}

int mkx_comm_net_exchange_to(MKX_Comm c, const void *const *send,
                             const size_t *send_len, const size_t *recv_len,
                             const mkx_comm_net_sink *sink) {
  mkx_comm_net *cn = c->net;
  if (!cn) return mkx_error(MKX_ERR_INTERNAL, "no network endpoint");
  if (send_len[c->rank] || recv_len[c->rank])
    return mkx_error(MKX_ERR_INTERNAL, "network exchange with oneself");
  MKX_TRY(mkx_comm_net_gpu_quiet(c));
  MKX_TRY(setup_regions(c, cn));
  xchg x = {.c = c,
            .cn = cn,
            .ring = mkx_proxy_ring_of(cn->proxy),
            .send = send,
            .send_len = send_len,
            .recv_len = recv_len,
            .sink = sink,
            .held_by = -1};
  if (!(x.order = malloc(sizeof *x.order * (size_t)c->size)))
    return mkx_error(MKX_ERR_NOMEM, "exchange order");
  memset(cn->done_to, 0, sizeof *cn->done_to * (size_t)c->size);
  int rc = set_order(&x, sink->order, sink->norder);
  if (rc == MKX_SUCCESS) rc = run(&x);
  free(x.order);
  /* Posted is not yet sent: wait until the proxy has passed our last
   * write to the transport, so the byte counters are complete. */
  if (rc == MKX_SUCCESS && x.last_seq)
    rc = mkx_proxy_wait(x.ring, x.last_seq, c->opt.timeout_ms);
  return rc;
}

typedef struct copy_ctx {
  void *const *recv;
} copy_ctx;

static int copy_take(void *ctx, int src, size_t off, const void *data,
                     size_t len) {
  memcpy((char *)((copy_ctx *)ctx)->recv[src] + off, data, len);
  return MKX_SUCCESS;
}

int mkx_comm_net_exchange(MKX_Comm c, const void *const *send,
                          const size_t *send_len, void *const *recv,
                          const size_t *recv_len) {
  copy_ctx ctx = {recv};
  mkx_comm_net_sink sink = {.take = copy_take, .ctx = &ctx};
  return mkx_comm_net_exchange_to(c, send, send_len, recv_len, &sink);
}

void mkx_comm_net_proxy_stats(MKX_Comm c, mkx_proxy_stats *s) {
  const mkx_comm_net *cn = c->net;
  memset(s, 0, sizeof *s);
  if (cn && cn->proxy) mkx_proxy_get_stats(cn->proxy, s);
}

int mkx_comm_net_stages_device(MKX_Comm c) {
  const mkx_comm_net *cn = c->net;
  return cn && !(mkx_net_caps(cn->net) & MKX_NET_CAP_DEVICE_MEM);
}

int64_t mkx_comm_net_link_mbps(MKX_Comm c) {
  const mkx_comm_net *cn = c->net;
  if (!cn || strcmp(mkx_net_name(cn->net), "shm") != 0) return 0;
  return c->opt.net_shm_bandwidth;
}

uint64_t mkx_comm_net_bytes_sent(MKX_Comm c) {
  mkx_comm_net *cn = c->net;
  uint64_t sum = 0;
  for (int q = 0; cn && q < c->size; q++) sum += mkx_net_bytes_sent(cn->net, q);
#if HAVE_CUDA
  if (cn) sum -= cn->warm_bytes;
#endif
  return sum;
}

uint32_t mkx_comm_net_gpu_slot(MKX_Comm c, int src) {
  return (uint32_t)c->size * (DEPTH + 1) +
         (uint32_t)src * MKX_COMM_NET_GPU_WORDS;
}

#if HAVE_CUDA
/* The word of src's first write into the region: after every rank's
 * block of the kernels' words. */
static uint32_t warm_slot(MKX_Comm c, int src) {
  return mkx_comm_net_gpu_slot(c, c->size) + (uint32_t)src;
}

const mkx_proxy_gpu *mkx_comm_net_gpu(MKX_Comm c) {
  const mkx_comm_net *cn = c->net;
  return cn ? cn->gpu : NULL;
}

int mkx_comm_net_gpu_quiet(MKX_Comm c) {
  mkx_comm_net *cn = c->net;
  if (!cn || !cn->gpu_used) return MKX_SUCCESS;
  MKX_TRY(mkx_cuda_rc(cudaEventSynchronize(cn->gpu_done), "network endpoint",
                      "the last kernel that drove the network"));
  cn->gpu_used = cn->gpu_captured;
  return MKX_SUCCESS;
}

static int capturing(MKX_Stream st, int *yes) {
  enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  MKX_TRY(mkx_cuda_rc(cudaStreamIsCapturing((cudaStream_t)st, &cap),
                      "network endpoint", "cudaStreamIsCapturing"));
  *yes = cap != cudaStreamCaptureStatusNone;
  return MKX_SUCCESS;
}

/* In a graph the event is external: every launch of the graph waits for
 * the latest record made before it (a call or an earlier launch) and
 * records it again, so graphs and plain calls still run in turn. */
int mkx_comm_net_gpu_after(MKX_Comm c, MKX_Stream st) {
  mkx_comm_net *cn = c->net;
  int cap = 0;
  if (!cn) return MKX_SUCCESS;
  MKX_TRY(capturing(st, &cap));
  if (!cap && !cn->gpu_used) return MKX_SUCCESS;
  return mkx_cuda_rc(
      cudaStreamWaitEvent((cudaStream_t)st, cn->gpu_done,
                          cap ? cudaEventWaitExternal : cudaEventWaitDefault),
      "network endpoint", "cudaStreamWaitEvent");
}

int mkx_comm_net_gpu_mark(MKX_Comm c, MKX_Stream st) {
  mkx_comm_net *cn = c->net;
  int cap = 0;
  MKX_TRY(capturing(st, &cap));
  MKX_TRY(mkx_cuda_rc(cudaEventRecordWithFlags(cn->gpu_done, (cudaStream_t)st,
                                               cap ? cudaEventRecordExternal
                                                   : cudaEventRecordDefault),
                      "network endpoint", "cudaEventRecord"));
  cn->gpu_used = 1;
  if (cap) cn->gpu_captured = 1;
  return MKX_SUCCESS;
}

/* A first write into every peer's new region, by the host while no kernel
 * waits: what a transport sets up on a region's first write (shm maps the
 * peer's memory through CUDA IPC) may wait for the device, which would
 * deadlock behind a kernel that waits for this very write.  It goes to the
 * region's tail, past what calls use, and sets a word no kernel waits on.
 * The sender knows when it has sent, not when the peer has landed it:
 * over tcp a thread of the peer's copies it into device memory
 * later, and a copy made once the call's kernels are queued can wait in
 * a hardware queue behind a launch that waits for a kernel that waits for
 * the network.  So each rank also waits until every peer's first write
 * has landed here (warm_landed) before any kernel is launched. */
static int warm_up(MKX_Comm c, mkx_comm_net *cn, uint32_t index) {
  mkx_proxy_ring *ring = mkx_proxy_ring_of(cn->proxy);
  const size_t len = WARM_BYTES, tail = region_at(cn, index)->cap;
  uint64_t seq = 0;
  cn->warmed++;
  for (int q = 0; q < c->size; q++) {
    if (q == c->rank) continue;
    mkx_proxy_cmd cmd = {.op = MKX_PROXY_OP_WRITE,
                         .peer = q,
                         .src = index,
                         .dst = index,
                         .src_off = tail,
                         .dst_off = tail,
                         .len = len,
                         .slot = warm_slot(c, c->rank),
                         .value = cn->warmed};
    MKX_TRY(mkx_proxy_post(ring, &cmd, &seq, c->opt.timeout_ms));
    cn->warm_bytes += len;
  }
  return seq ? mkx_proxy_wait(ring, seq, c->opt.timeout_ms) : MKX_SUCCESS;
}

static int warm_landed(MKX_Comm c, mkx_comm_net *cn) {
  const int bits = mkx_net_signal_bits(cn->net);
  const uint64_t mask = bits >= 64 ? ~(uint64_t)0 : ((uint64_t)1 << bits) - 1;
  const int64_t deadline = mkx_net_now_ms() + c->opt.timeout_ms;
  mkx_proxy_ring *ring = mkx_proxy_ring_of(cn->proxy);
  for (int q = 0; q < c->size; q++) {
    if (q == c->rank) continue;
    for (long spins = 0; (mkx_net_signal(cn->net, warm_slot(c, q)) & mask) !=
                         (cn->warmed & mask);
         spins++) {
      const int err = atomic_load(&ring->error);
      if (err != MKX_SUCCESS)
        return mkx_error(err,
                         "network region: the proxy stopped (%s) before rank "
                         "%d's first write landed",
                         MKX_Error_string(err), q);
      if (mkx_net_now_ms() > deadline)
        return mkx_error(MKX_ERR_TIMEOUT,
                         "network region: rank %d's first write into this "
                         "rank's new region did not land within %lld ms "
                         "(option timeout_ms)",
                         q, (long long)c->opt.timeout_ms);
      backoff(spins);
    }
  }
  return MKX_SUCCESS;
}

/* A buffer of `len` bytes for the kernels, registered on this rank: GPU
 * memory, or pinned host memory mapped for the GPU at the same address
 * (unified addressing), which no transport copies with CUDA. */
static int gpu_buffer(mkx_comm_net *cn, gpu_region *g, int host, size_t len,
                      mkx_net_mr *mr) {
  memset(mr, 0, sizeof *mr);
  region_free(g);
  g->host = host;
  MKX_TRY(mkx_cuda_rc(
      host ? cudaHostAlloc(&g->buf, len + WARM_BYTES,
                           cudaHostAllocMapped | cudaHostAllocPortable)
           : cudaMalloc(&g->buf, len + WARM_BYTES),
      "network endpoint",
      host ? "cudaHostAlloc of a network region in host memory"
           : "cudaMalloc of the device region"));
  g->cap = len;
  mkx_net_reg_args a = {g->buf, len + WARM_BYTES,
                        host ? MKX_NET_MEM_HOST : MKX_NET_MEM_DEVICE, -1, 0};
  return mkx_net_reg(cn->net, &a, mr);
}

int mkx_comm_net_gpu_in_host(MKX_Comm c, uint32_t index) {
  return index == MKX_COMM_NET_GPU_HOST_REGION ||
         c->opt.net_gpu_region == MKX_NET_REGION_HOST;
}

int mkx_comm_net_gpu_region(MKX_Comm c, uint32_t index, size_t len, void **base,
                            uint64_t **words) {
  mkx_comm_net *cn = c->net;
  if (!cn || !cn->gpu)
    return mkx_error(MKX_ERR_UNSUPPORTED, "no network ring mapped for a GPU");
  if (index != MKX_COMM_NET_GPU_REGION && index != MKX_COMM_NET_GPU_HOST_REGION)
    return mkx_error(MKX_ERR_INTERNAL, "network region %u", index);
  gpu_region *g = region_at(cn, index);
  *words = cn->gwords;
  if (len <= g->cap) { /* agreed sizes: every rank takes this branch */
    *base = g->buf;
    return MKX_SUCCESS;
  }
  char why[320] = "";
  if (cn->gpu_captured)
    snprintf(why, sizeof why,
             "the network region of the calls driven by the GPU (%zu bytes) "
             "is in a CUDA graph captured on this communicator and cannot "
             "grow to %zu: "
             "make the plan with the largest operands before capturing",
             g->cap, len);
  MKX_TRY(mkx_comm_agree_rc(
      c, why[0] ? mkx_error(MKX_ERR_UNSUPPORTED, "%s", why) : MKX_SUCCESS,
      "growth of the network region"));
  MKX_TRY(mkx_comm_net_gpu_quiet(c));
  /* The staging regions hold indices 0 and 1: made first if not yet. */
  MKX_TRY(setup_regions(c, cn));
  if (g->mr.base) mkx_net_dereg(cn->net, &g->mr);
  memset(&g->mr, 0, sizeof g->mr);
  mkx_net_mr mr;
  int rc = gpu_buffer(cn, g, mkx_comm_net_gpu_in_host(c, index),
                      (len + 4095) & ~(size_t)4095, &mr);
  if (rc == MKX_SUCCESS) g->mr = mr;
  MKX_TRY(mkx_comm_agree_rc(c, rc, "registration of a network region"));
  MKX_TRY(mkx_net_exchange_keys(cn->net, &c->oob, &mr, g->keys));
  MKX_TRY(mkx_proxy_set_region(cn->proxy, index, &mr, g->keys));
  rc = warm_up(c, cn, index);
  if (rc == MKX_SUCCESS) rc = warm_landed(c, cn);
  MKX_TRY(mkx_comm_agree_rc(c, rc, "first writes to the region"));
  *base = g->buf;
  return MKX_SUCCESS;
}
#endif
