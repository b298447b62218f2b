/* MKX_Ring_attention over several nodes with the network part driven by
 * the GPU (option hier_attn, attn_gpu.h): no host work in a call,
 * and no copy of what arrives.
 *
 * A network region of the communicator (mkx_comm_net_gpu_region, the
 * same layout on every rank; mkx_net_region_index says which) is the
 * engine's ring: slot q (2 * chunk bytes at q * 2 * chunk) holds rank q's
 * K then V; this rank's own slot is the source of its writes.  A call, on
 * the user's stream after the prologue and before the engine:
 *   1. this rank's K and V into its slot;
 *   2. mkx_fused_net_begin with the other ranks as peers: epoch + 1, arrival
 *      at each (its previous call's engine is done with its ring, so its
 *      slots may be written), a bounded wait for theirs;
 *   3. one write of the slot to each peer, at the same offset, setting
 *      word W_KV of this rank's block there to the epoch.
 * The engine then reads chunk q from slot q once q's word reaches the
 * call's epoch (mkx_attn_desc's net_* fields; one CTA reads the word and
 * raises the chunk's flag for the others): a bounded wait of the engine's
 * own, so a chunk that never comes fails the call on every rank instead of
 * hanging it.  After the engine:
 * mkx_fused_net_end, until the proxy has completed this rank's writes.  Each
 * chunk crosses to each other node once, as with the host's exchange
 * (attn_gpu.c).
 *
 * On nodes of several ranks (equal sizes) the network joins columns (rank
 * l of every node) and the node shares what arrives: the engine's ring is
 * the node's symmetric workspace as inside one node (attn_gpu.c: the
 * node's chunks by the copy engines, with their flags), the writes go to
 * the column peers only, and a forwarding kernel (mkx_fused_net_fwd, key/
 * value kind) copies each column peer's chunk, once landed in the region,
 * into every node rank's ring and raises its flag there; the engine waits
 * on flags only.  The forward starts after the writes and
 * mkx_fused_net_end waits for its end (mkx_net_fwd_start says why).  Each
 * chunk still crosses to each other node once. */
#include <stdlib.h>
#include <string.h>
#include "core/error.h"

#if HAVE_CUDA
#include "core/comm_net.h"
#include "attention/attn_engine.h"
#include "ops/attn/attn_gpu.h"
#include "ops/nodes/net_gpu.h"

static const char *const FN = "MKX_Ring_attention";

#define W_KV 1 /* the chunk's word in its source's block */

struct mkx_attn_net {
  size_t chunk;         /* bytes of K, and of V right after it */
  unsigned peers;       /* bit q: rank q's chunk comes over the network */
  int node;             /* nodes of several ranks: the forward */
  mkx_fused_ws *ws;     /* this start's workspace */
  mkx_fused_net_desc d; /* the kernels' descriptor, this start's */
  mkx_tuner *tune;      /* nodes of several ranks: the forward's CTAs */
};

int mkx_attn_net_fits(MKX_Comm c, char *why, size_t len) {
  const char *w = c->opt.hier_attn == MKX_HIER_ATTN_HOST
                      ? "option hier_attn=host"
                      : mkx_net_ring_why_not(c);
  if (!w && c->place.local_size > 1 &&
      c->opt.hier_attn != MKX_HIER_ATTN_PROXY &&
      !mkx_comm_net_gpu_in_host(c, mkx_net_region_index(c)))
    w = "option hier_attn=auto takes the host on nodes of several ranks "
        "with the network region in device memory";
  if (!w && c->place.local_size > 1 && !c->place.equal_nodes)
    w = "nodes of unequal sizes";
  if (w) snprintf(why, len, "%s", w);
  return !w;
}

void mkx_attn_net_free(mkx_attn_net *n) { free(n); }

static size_t region_bytes(const MKX_Comm c, const mkx_attn_net *n) {
  return (size_t)c->size * 2 * n->chunk;
}

int mkx_attn_net_init(MKX_Comm c, size_t chunk, mkx_attn_net **out) {
  mkx_attn_net *n = calloc(1, sizeof *n);
  int rc = n ? MKX_SUCCESS : mkx_error(MKX_ERR_NOMEM, "%s: plan", FN);
  if (n) {
    n->chunk = chunk;
    n->node = c->place.local_size > 1;
    n->peers =
        n->node ? mkx_net_column_peers(c)
                : (unsigned)(((uint64_t)1 << c->size) - 1) & ~(1u << c->rank);
  }
  if (rc == MKX_SUCCESS && n->node) /* the shape: the chunk's bytes */
    rc = mkx_tuner_for(c, MKX_ROLE_NET_FWD, FN, MKX_PATH_ATTN_NET,
                       (int64_t)chunk, 1, 1, 0, FN, &n->tune);
  /* loaded now: under MPS a lazily loaded first launch would wait for a
   * peer's engine, which waits for this rank's chunk */
  if (rc == MKX_SUCCESS)
    rc = mkx_fused_launch_rc(mkx_fused_net_load(), FN, "loading its kernels");
  rc = mkx_comm_agree_rc(c, rc, "ring attention network plan");
  void *base = NULL;
  uint64_t *words = NULL;
  if (rc == MKX_SUCCESS)
    rc = mkx_comm_net_gpu_region(c, mkx_net_region_index(c), region_bytes(c, n),
                                 &base, &words);
  if (rc != MKX_SUCCESS) {
    mkx_attn_net_free(n);
    return rc;
  }
  *out = n;
  return MKX_SUCCESS;
}

/* Steps 1-3: this rank's chunk into its slot, the meeting, the writes.
 * (cudaMemcpyDefault: the region may be mapped host memory, option
 * net_gpu_region.) */
static int send(MKX_Comm c, const mkx_attn_net *n, char *region, const void *K,
                const void *V, cudaStream_t st) {
  const size_t mine = (size_t)c->rank * 2 * n->chunk;
  MKX_TRY(mkx_cuda_rc(
      cudaMemcpyAsync(region + mine, K, n->chunk, cudaMemcpyDefault, st), FN,
      "copy of K to the network region"));
  MKX_TRY(mkx_cuda_rc(cudaMemcpyAsync(region + mine + n->chunk, V, n->chunk,
                                      cudaMemcpyDefault, st),
                      FN, "copy of V to the network region"));
  MKX_TRY(
      mkx_fused_launch_rc(mkx_fused_net_begin(&n->d, st), FN, "network meet"));
  for (int q = 0; q < c->size; q++)
    if (n->peers >> q & 1u)
      MKX_TRY(mkx_fused_launch_rc(
          mkx_fused_net_post(&n->d, q, mine, mine, 2 * n->chunk, W_KV, st), FN,
          "network post"));
  return MKX_SUCCESS;
}

/* Nodes of several ranks: the forward of the column peers' chunks into
 * every node rank's ring, on the workspace's side stream 0 (the copy
 * engines' pushes take 1 .. G - 1). */
static int forward(MKX_Comm c, mkx_attn_net *n, char *region, uint64_t *words,
                   cudaStream_t st) {
  mkx_fused_net_fwd_desc f;
  memset(&f, 0, sizeof f);
  f.kind = MKX_FUSED_FWD_KV;
  f.src = region;
  f.kv_chunk = n->chunk;
  f.kv_word = W_KV;
  return mkx_net_fwd_start(c, n->ws, 0, &n->d, words, &f, n->tune, st, FN);
}

int mkx_attn_net_send(MKX_Comm c, mkx_attn_net *n, mkx_fused_ws *ws,
                      const void *K, const void *V, cudaStream_t st,
                      mkx_attn_desc *e) {
  void *base = NULL;
  uint64_t *words = NULL;
  MKX_TRY(mkx_comm_net_gpu_after(c, st));
  MKX_TRY(mkx_comm_net_gpu_region(c, mkx_net_region_index(c),
                                  region_bytes(c, n), &base, &words));
  mkx_net_desc_fill(c, ws, words, &n->d);
  n->d.region = mkx_net_region_index(c);
  n->d.peers = n->peers;
  n->ws = ws;
  if (n->node) MKX_TRY(mkx_tuner_begin(n->tune, st, FN));
  if (n->node) { /* the engine's ring and flags stay the workspace's */
    MKX_TRY(send(c, n, base, K, V, st));
    return forward(c, n, base, words, st);
  }
  MKX_TRY(send(c, n, base, K, V, st));
  /* the engine's view: K and V of a chunk side by side; the signal words'
   * low half (the epochs stay below 2^32), the epoch's low half as their
   * target; its claims: the counters the prologue zeroes */
  e->k_ring = base;
  e->v_ring = (char *)base + n->chunk;
  e->ring_stride = 2 * e->batch * e->seq_k * e->heads_kv * e->head_dim;
  e->net_mask = n->peers;
  e->net_ready =
      (const int *)(uintptr_t)(n->d.proxy.signals + n->d.slot0 + W_KV);
  e->net_ready_stride = (int)(2 * n->d.words);
  e->net_target = (const int *)(uintptr_t)n->d.epoch;
  e->net_claim =
      mkx_fused_ws_word(ws, c->place.local_rank, MKX_FUSED_OFF_COUNTERS);
  return MKX_SUCCESS;
}

void mkx_attn_net_ctas(const mkx_attn_net *n, int *ctas) {
  if (n->node) *ctas = mkx_tuner_leave(n->tune);
}

int mkx_attn_net_end(MKX_Comm c, mkx_attn_net *n, cudaStream_t st) {
  if (n->node) MKX_TRY(mkx_net_fwd_join(n->ws, 0, st, FN));
  MKX_TRY(
      mkx_fused_launch_rc(mkx_fused_net_end(&n->d, st), FN, "network drain"));
  MKX_TRY(mkx_comm_net_gpu_mark(c, st));
  return n->node ? mkx_tuner_end(n->tune, st, FN) : MKX_SUCCESS;
}
#else
typedef int mkx_attn_net_unused; /* ISO C: not an empty unit */
#endif
