/* MKX_Ring_attention over several nodes with the network part driven by
 * the GPU (option hier_attn=proxy, attn_gpu.h): no host work in a call.
 *
 * The communicator's device region of the network endpoint
 * (mkx_comm_net_gpu_region, the same layout on every rank) has a slot per
 * node: node m's slot holds K then V of this rank's column peer there
 * (the rank of m with this rank's local rank); this rank's own node's slot
 * holds its own K and V, the source of its writes.  A call, on the user's
 * stream after the prologue and before the engine:
 *   1. this rank's K and V into its node's slot;
 *   2. mkx_tp_net_begin with the column as peers: epoch + 1, arrival at
 *      every column peer (its previous call has handed its slots on, so
 *      they may be written), a bounded wait for theirs;
 *   3. one write of K and V to each column peer, at the same offset,
 *      setting word W_KV of this rank's block there;
 * then, forked from the user's stream, without SMs (the engine may hold
 * them all, waiting for these chunks):
 *   4. for each other node m, side stream 0 waits until word W_KV of
 *      column peer m is nonzero (cuStreamWaitValue32), sets it back to 0
 *      and each side stream i copies the chunk into node rank me + i's
 *      workspace with its ready flag (mkx_attn_push_chunk).  The values
 *      are constants, so a graph replays them; a nonzero word is this
 *      call's, since the peer writes only after this rank's arrival at the
 *      next call, which follows the reset;
 *   5. watch (a kernel on a stream of its own) bounds step 4: a chunk not
 *      handed on within timeout_ms records the timeout and sets the word
 *      itself, so the streams go on and the call ends, failed.
 * After the engine and the side streams: mkx_tp_net_end, until the proxy
 * has completed this rank's writes.  Each chunk crosses to each other
 * node once, as with the host's exchange (attn_gpu.c). */
#include <stdlib.h>
#include <string.h>
#include "core/error.h"

#if HAVE_CUDA
#include "core/comm_net.h"
#include "ops/attn_gpu.h"
#include "ops/net_gpu.h"

static const char *const FN = "MKX_Ring_attention";

#define W_KV 1     /* the chunk's word in its source's block */
#define ALIGN 4096 /* slots start on pages */

struct mkx_attn_net {
  size_t chunk, slot; /* bytes: K (and V, right after K), a slot */
  int *col_rank;      /* [node]: the column's rank there */
  unsigned srcs;      /* bit q: rank q's chunk comes over the net */
  cudaStream_t watch;
  cudaEvent_t ev_watch;
  cudaEvent_t ev_got[MKX_TP_MAX * 4]; /* per node: its chunk is here */
  mkx_tp_net_desc d; /* the kernels' descriptor, this start's */
};

static size_t round_up(size_t n) { return (n + ALIGN - 1) / ALIGN * ALIGN; }

int mkx_attn_net_fits(MKX_Comm c, char *why, size_t len) {
  const char *w = NULL;
  if (c->opt.hier_attn != MKX_HIER_ATTN_PROXY)
    w = "option hier_attn=host";
  else if (!mkx_comm_net_gpu(c))
    w = "no network ring mapped for the GPU";
  else if (c->place.local_size > 1)
    w = "driven by the GPU on nodes of one rank only";
  else if (c->size > 32 || c->place.num_nodes > MKX_TP_MAX * 4)
    w = "driven by the GPU on at most 32 ranks";
  if (w) snprintf(why, len, "%s", w);
  return !w;
}

void mkx_attn_net_free(mkx_attn_net *n) {
  if (!n) return;
  if (n->watch) cudaStreamDestroy(n->watch);
  if (n->ev_watch) cudaEventDestroy(n->ev_watch);
  for (int m = 0; m < MKX_TP_MAX * 4; m++)
    if (n->ev_got[m]) cudaEventDestroy(n->ev_got[m]);
  free(n->col_rank);
  free(n);
}

static int events(const MKX_Comm c, mkx_attn_net *n) {
  const unsigned fl = cudaEventDisableTiming;
  MKX_TRY(
      mkx_cuda_rc(cudaStreamCreateWithFlags(&n->watch, cudaStreamNonBlocking),
                  FN, "cudaStreamCreate"));
  MKX_TRY(mkx_cuda_rc(cudaEventCreateWithFlags(&n->ev_watch, fl), FN,
                      "cudaEventCreate"));
  for (int m = 0; m < c->place.num_nodes; m++)
    MKX_TRY(mkx_cuda_rc(cudaEventCreateWithFlags(&n->ev_got[m], fl), FN,
                        "cudaEventCreate"));
  return MKX_SUCCESS;
}

static size_t region_bytes(const MKX_Comm c, const mkx_attn_net *n) {
  return (size_t)c->place.num_nodes * n->slot;
}

static int init(MKX_Comm c, mkx_attn_net *n) {
  n->col_rank = calloc((size_t)c->place.num_nodes, sizeof *n->col_rank);
  if (!n->col_rank) return mkx_error(MKX_ERR_NOMEM, "%s: plan", FN);
  for (int q = 0; q < c->size; q++)
    if (c->place.local_rank_of[q] == c->place.local_rank) {
      n->col_rank[c->place.node_of_rank[q]] = q;
      if (q != c->rank) n->srcs |= 1u << q;
    }
  MKX_TRY(events(c, n));
  return mkx_tp_launch_rc(mkx_tp_net_load(), FN, "loading its kernels");
}

int mkx_attn_net_init(MKX_Comm c, size_t chunk, mkx_attn_net **out) {
  mkx_attn_net *n = calloc(1, sizeof *n);
  if (!n) return mkx_error(MKX_ERR_NOMEM, "%s: plan", FN);
  n->chunk = chunk;
  n->slot = round_up(2 * chunk);
  int rc = mkx_comm_agree_rc(c, init(c, n), "ring attention network plan");
  void *base = NULL;
  uint64_t *words = NULL;
  if (rc == MKX_SUCCESS)
    rc = mkx_comm_net_gpu_region(c, region_bytes(c, n), &base, &words);
  if (rc != MKX_SUCCESS) {
    mkx_attn_net_free(n);
    return rc;
  }
  *out = n;
  return MKX_SUCCESS;
}

/* The kernels' descriptor: the column as peers. */
static void desc(MKX_Comm c, mkx_tp_ws *ws, uint64_t *words,
                 const mkx_attn_net *n, mkx_tp_net_desc *d) {
  mkx_net_desc_fill(c, ws, words, d);
  d->peers = n->srcs;
}

/* Steps 1-3: this rank's chunk into its slot, the meeting, the writes. */
static int send(MKX_Comm c, const mkx_attn_net *n, const mkx_tp_net_desc *d,
                char *region, const void *K, const void *V, cudaStream_t st) {
  const size_t mine = (size_t)c->place.node * n->slot;
  MKX_TRY(mkx_cuda_rc(
      cudaMemcpyAsync(region + mine, K, n->chunk, cudaMemcpyDeviceToDevice, st),
      FN, "copy of K to the network region"));
  MKX_TRY(mkx_cuda_rc(cudaMemcpyAsync(region + mine + n->chunk, V, n->chunk,
                                      cudaMemcpyDeviceToDevice, st),
                      FN, "copy of V to the network region"));
  MKX_TRY(mkx_tp_launch_rc(mkx_tp_net_begin(d, st), FN, "network meet"));
  for (int m = 0; m < c->place.num_nodes; m++)
    if (m != c->place.node)
      MKX_TRY(mkx_tp_launch_rc(mkx_tp_net_post(d, n->col_rank[m], mine, mine,
                                               2 * n->chunk, W_KV, st),
                               FN, "network post"));
  return MKX_SUCCESS;
}

/* The signal word of rank q's chunk here, as the stream operations see
 * it (the low half of the 64-bit word: the values stay below 2^32). */
static int *kv_word(const mkx_tp_net_desc *d, int q) {
  const uint64_t *w =
      d->proxy.signals + d->slot0 + (uint32_t)q * d->words + W_KV;
  return (int *)(uintptr_t)w;
}

/* Step 4 for node m: wait on side stream 0, hand on from every side
 * stream. */
static int hand_on(MKX_Comm c, const mkx_attn_net *n, mkx_tp_ws *ws,
                   const mkx_tp_net_desc *d, const char *region, int m) {
  const int G = c->place.local_size, me = c->place.local_rank;
  const int q = n->col_rank[m];
  int *word = kv_word(d, q);
  MKX_TRY(mkx_tp_launch_rc(mkx_tp_stream_wait_geq(ws->side[0], word, 1), FN,
                           "wait for a chunk over the network"));
  MKX_TRY(mkx_tp_launch_rc(mkx_tp_stream_write(ws->side[0], word, 0), FN,
                           "reset of a chunk's word"));
  MKX_TRY(mkx_cuda_rc(cudaEventRecord(n->ev_got[m], ws->side[0]), FN,
                      "cudaEventRecord"));
  const char *k = region + (size_t)m * n->slot;
  for (int i = 0; i < G; i++) {
    if (i)
      MKX_TRY(mkx_cuda_rc(cudaStreamWaitEvent(ws->side[i], n->ev_got[m], 0), FN,
                          "cudaStreamWaitEvent"));
    MKX_TRY(mkx_attn_push_chunk(c, ws, n->chunk, q, k, k + n->chunk,
                                (me + i) % G, ws->side[i]));
  }
  return MKX_SUCCESS;
}

/* Step 5, forked like the side streams. */
static int watch(MKX_Comm c, const mkx_attn_net *n, mkx_tp_ws *ws,
                 const mkx_tp_net_desc *d) {
  const int me = c->place.local_rank;
  mkx_tp_net_watch_desc w;
  memset(&w, 0, sizeof w);
  w.net = *d;
  w.flags = mkx_tp_ws_flags(ws, me);
  w.target = mkx_tp_ws_word(ws, me, MKX_TP_OFF_EPOCH);
  w.srcs = n->srcs;
  w.word = W_KV;
  MKX_TRY(mkx_cuda_rc(cudaStreamWaitEvent(n->watch, ws->ev_fork, 0), FN,
                      "cudaStreamWaitEvent"));
  MKX_TRY(mkx_tp_launch_rc(mkx_tp_net_watch(&w, n->watch), FN, "watch"));
  return mkx_cuda_rc(cudaEventRecord(n->ev_watch, n->watch), FN,
                     "cudaEventRecord");
}

int mkx_attn_net_send(MKX_Comm c, mkx_attn_net *n, mkx_tp_ws *ws, const void *K,
                      const void *V, cudaStream_t st) {
  void *base = NULL;
  uint64_t *words = NULL;
  MKX_TRY(mkx_comm_net_gpu_after(c, st));
  MKX_TRY(mkx_comm_net_gpu_region(c, region_bytes(c, n), &base, &words));
  desc(c, ws, words, n, &n->d);
  MKX_TRY(send(c, n, &n->d, base, K, V, st));
  MKX_TRY(mkx_cuda_rc(cudaEventRecord(ws->ev_fork, st), FN, "fork"));
  MKX_TRY(mkx_cuda_rc(cudaStreamWaitEvent(ws->side[0], ws->ev_fork, 0), FN,
                      "fork wait"));
  MKX_TRY(watch(c, n, ws, &n->d));
  /* the nodes after this one first, as the engine takes them */
  for (int i = 1; i < c->place.num_nodes; i++)
    MKX_TRY(hand_on(c, n, ws, &n->d, base,
                    (c->place.node + i) % c->place.num_nodes));
  return MKX_SUCCESS;
}

int mkx_attn_net_end(MKX_Comm c, mkx_attn_net *n, cudaStream_t st) {
  MKX_TRY(
      mkx_cuda_rc(cudaStreamWaitEvent(st, n->ev_watch, 0), FN, "join wait"));
  MKX_TRY(mkx_tp_launch_rc(mkx_tp_net_end(&n->d, st), FN, "network drain"));
  return mkx_comm_net_gpu_mark(c, st);
}
#else
typedef int mkx_attn_net_gpu_unused; /* ISO C: not an empty unit */
#endif
