/* MKX_Ring_attention's GPU paths: the attention engine
 * (kernels/attention) on one rank's buffers, the ring of one node, and
 * the ring over several nodes.
 *
 * The ring: every rank's K and V chunk travels, by the copy engine (no
 * SMs), into its slot of every other rank's symmetric workspace, the
 * chunk's ready flag after it (the call's epoch, copied from the
 * workspace's src[] word so that graph replays carry the epoch of their
 * own run).  Meanwhile the engine on the user's stream computes on its
 * own chunk, then on the others in ring order (self-1, self-2, ...: rank
 * r pushes to r+1 first), each once its flag is up.  Every query row keeps
 * one softmax state in registers across all chunks, so no partial result
 * is rounded or merged through memory.  The workspace holds every rank's
 * K and V (p chunks each): memory for the whole key sequence, in exchange
 * for no step-by-step merge.
 *
 * Workspace data (this rank's, same layout on every rank):
 *   [0, p*chunk)            K of rank c at c*chunk ([batch][seq][heads_kv]
 *                           [head_dim], rank `self`'s slot unused)
 *   [p*chunk, 2*p*chunk)    V, likewise
 *   counter                 the engine's tile counter (own runs only)
 * flags[c] = epoch once rank c's K and V have landed here.
 *
 * Several nodes: the node's chunks travel as above; the others, after the
 * engine has been launched, through the host: each rank sends its K and V
 * over the network to the ranks of its column (the same local rank on
 * every node, src/host/hier.c: each chunk crosses to each node once) and
 * puts the column's chunks it receives into every node rank's workspace
 * with their flags.  The engine computes the node's chunks meanwhile, and
 * takes the other nodes' last.  The call returns once the exchange is done
 * (host work: not capturable in a CUDA graph).  With option hier_attn
 * (auto or proxy on nodes of one rank, proxy on nodes of several) the GPU
 * drives that part instead (attn/attn_net.c): on nodes of one rank the
 * chunks land in the engine's ring, on nodes of several a forwarding
 * kernel puts them into every node rank's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/error.h"
#include "core/log.h"
#include "ops/op.h"
#include "ops/path.h"

#if HAVE_CUDA
#include "core/cuda_rc.h"
#include "ops/attn/attn_gpu.h"
#include "host/hier.h"
#include "ops/fused/fused.h"
#include "attention/attn_engine.h"

static const char *const FN = "MKX_Ring_attention";

typedef struct attn_plan {
  mkx_path path; /* the table entry that made it (and its start counter) */
  mkx_fused_ws *ws;
  int ring;           /* several ranks */
  int hier;           /* several nodes */
  size_t chunk;       /* bytes of one rank's K (and of its V) */
  size_t counter_off; /* the tile counter, in the workspace's data */
  /* Several nodes: the engine's order of chunks; this rank's K then V,
   * and its column's K and V as gathered over the network (pinned host
   * memory); the column's rank on each node; one row per rank (the
   * gather's unit is a rank's K and V). */
  int order[MKX_ATTN_MAX_CHUNKS];
  mkx_attn_net *net; /* driven by the GPU; else the host's buffers: */
  char *hsend, *hcol;
  int *col_rank;
  int64_t *rows;
} attn_plan;

/* The engine's description of a call on this rank (ring pointers: NULL
 * without a plan, which is enough for the checks). */
static void desc_of(MKX_Comm c, const mkx_attn_args *a, const attn_plan *p,
                    mkx_attn_desc *d) {
  memset(d, 0, sizeof *d);
  d->batch = a->batch;
  d->seq_q = d->seq_k = a->seq_local;
  d->heads_q = a->heads_q;
  d->heads_kv = a->heads_kv;
  d->head_dim = a->head_dim;
  d->q = a->Q;
  d->k = a->K;
  d->v = a->V;
  d->o = a->O;
  d->lse = a->LSE;
  d->dtype = mkx_fused_gemm_type(a->dtype);
  d->causal = a->causal;
  d->scale = (float)a->scale;
  d->layout = a->layout;
  d->nchunks = 1;
  d->block_n = c->opt.attn_block_n == MKX_ATTN_BLOCK_128 ? 128
               : c->opt.attn_block_n == MKX_ATTN_BLOCK_192 && a->head_dim <= 64
                   ? 192
                   : 0;
  if (!p) return;
  const int me = c->place.local_rank;
  char *data = mkx_fused_ws_data(p->ws, me);
  d->tile_counter = (int *)(data + p->counter_off);
  if (!p->ring) return;
  d->nchunks = c->size;
  d->self = c->rank;
  d->k_ring = data;
  d->v_ring = data + (size_t)c->size * p->chunk;
  d->ready = mkx_fused_ws_flags(p->ws, me);
  d->ready_target = mkx_fused_ws_word(p->ws, me, MKX_FUSED_OFF_EPOCH);
  if (p->hier) d->order = p->order;
}

/* Several nodes: equal nodes joined by MKX's transport (the column
 * exchange of src/host/hier.c), at most MKX_FUSED_MAX ranks per node and
 * MKX_ATTN_MAX_CHUNKS in all. */
static int hier_ok(MKX_Comm c) {
  if (!mkx_hier_usable(c))
    return mkx_error(MKX_ERR_UNSUPPORTED,
                     "%s: GPU path over several nodes needs nodes of equal "
                     "size and a network transport",
                     FN);
  if (c->place.local_size > MKX_FUSED_MAX || c->size > MKX_ATTN_MAX_CHUNKS)
    return mkx_error(MKX_ERR_UNSUPPORTED,
                     "%s: GPU path takes at most %d ranks per node and %d "
                     "in all (%d, %d)",
                     FN, MKX_FUSED_MAX, MKX_ATTN_MAX_CHUNKS,
                     c->place.local_size, c->size);
  return mkx_fused_share_ok(c, FN);
}

int mkx_attn_gpu_check(MKX_Comm c, const void *args, const mkx_agreed *g) {
  const mkx_attn_args *a = args;
  (void)g;
  if (a->dtype != MKX_BF16 && a->dtype != MKX_FP16)
    return mkx_error(MKX_ERR_UNSUPPORTED,
                     "%s: GPU path takes bf16 and fp16 "
                     "only",
                     FN);
  if (c->place.num_nodes > 1)
    MKX_TRY(hier_ok(c));
  else if (c->size > 1)
    MKX_TRY(mkx_fused_node_ok(c, FN));
  mkx_attn_desc d;
  const char *why = NULL;
  desc_of(c, a, NULL, &d);
  if (!mkx_attn_supported(&d, &why))
    return mkx_error(MKX_ERR_UNSUPPORTED, "%s: GPU path: %s", FN, why);
  const int64_t kv = a->batch * a->seq_local * a->heads_kv * a->head_dim;
  char net_why[64];
  /* driven by the GPU, the ring holds each rank's K and V side by side */
  const int64_t span = c->place.num_nodes > 1 && c->place.local_size == 1 &&
                               mkx_attn_net_fits(c, net_why, sizeof net_why)
                           ? 2 * kv
                           : kv;
  if (span >= (1ll << 31) / c->size)
    return mkx_error(MKX_ERR_UNSUPPORTED,
                     "%s: GPU path: every rank's K "
                     "together (with V, on nodes driven by the GPU) has "
                     "2^31 elements or more",
                     FN);
  return MKX_SUCCESS;
}

/* The engine's order of chunks over several nodes: own, the node's other
 * ranks (ring order inside the node), then the other nodes' (the nodes
 * after this one first): the other nodes' chunks come last. */
static void hier_order(MKX_Comm c, int *order) {
  const int G = c->place.local_size, N = c->place.num_nodes;
  int n = 0;
  for (int dn = 0; dn < N; dn++)
    for (int dl = 0; dl < G; dl++) {
      const int node = (c->place.node + dn) % N;
      const int l = (c->place.local_rank - dl + G) % G;
      const int q = mkx_placement_rank_at(&c->place, c->size, node, l);
      if (q >= 0) order[n++] = q;
    }
}

/* Several nodes: the order and, where the host drives the network
 * (by_gpu = 0), who is in this rank's column and the pinned host buffers
 * of its exchange. */
static int hier_plan(MKX_Comm c, attn_plan *p, int by_gpu) {
  const int N = c->place.num_nodes;
  hier_order(c, p->order);
  if (by_gpu) return MKX_SUCCESS;
  p->col_rank = calloc((size_t)N, sizeof *p->col_rank);
  p->rows = calloc((size_t)c->size, sizeof *p->rows);
  if (!p->col_rank || !p->rows) return mkx_error(MKX_ERR_NOMEM, "%s: plan", FN);
  for (int q = 0; q < c->size; q++) {
    p->rows[q] = 1;
    if (c->place.local_rank_of[q] == c->place.local_rank)
      p->col_rank[c->place.node_of_rank[q]] = q;
  }
  MKX_TRY(mkx_cuda_rc(cudaHostAlloc((void **)&p->hsend, 2 * p->chunk, 0), FN,
                      "cudaHostAlloc (send)"));
  return mkx_cuda_rc(
      cudaHostAlloc((void **)&p->hcol, (size_t)N * 2 * p->chunk, 0), FN,
      "cudaHostAlloc (column)");
}

static void plan_free(attn_plan *p) {
  mkx_attn_net_free(p->net);
  if (p->hsend) MKX_CUDA_RELEASE(cudaFreeHost(p->hsend));
  if (p->hcol) MKX_CUDA_RELEASE(cudaFreeHost(p->hcol));
  free(p->col_rank);
  free(p->rows);
  free(p);
}

/* The engine's kernel for this call, loaded now: on several ranks a
 * lazily loaded first launch could wait for a peer's kernels that wait
 * for this rank (mkx_attn_load). */
static int load_engine(MKX_Comm c, const mkx_attn_args *a) {
  mkx_attn_desc d;
  desc_of(c, a, NULL, &d);
  MKX_TRY(mkx_fused_launch_rc(mkx_fused_prologue_load(), FN,
                              "loading the prologue"));
  return mkx_fused_launch_rc(mkx_attn_load(&d), FN, "loading the engine");
}

/* The plan of the entry of `path` (mkx_attn_gpu_choose: the only place
 * that picks it). */
static int plan_path(MKX_Comm c, const void *args, mkx_path path, void **plan) {
  const mkx_attn_args *a = args;
  attn_plan *p = calloc(1, sizeof *p);
  if (!p) return mkx_error(MKX_ERR_NOMEM, "%s: plan", FN);
  p->path = path;
  p->ring = path != MKX_PATH_ATTN;
  p->hier = path == MKX_PATH_ATTN_HIER || path == MKX_PATH_ATTN_NET;
  p->chunk = (size_t)(a->batch * a->seq_local * a->heads_kv * a->head_dim) *
             MKX_Type_size(a->dtype);
  p->counter_off = p->ring ? 2 * (size_t)c->size * p->chunk : 0;
  /* agreed values only: every rank's pool takes the same decision */
  mkx_fused_need need = {1, c->size, p->counter_off + 256, 0};
  const int by_gpu = path == MKX_PATH_ATTN_NET;
  int rc = p->hier ? hier_plan(c, p, by_gpu) : MKX_SUCCESS;
  rc = mkx_comm_agree_rc(c, rc, "ring attention plan");
  if (rc == MKX_SUCCESS && by_gpu) rc = mkx_attn_net_init(c, p->chunk, &p->net);
  if (rc == MKX_SUCCESS) {
    rc = mkx_fused_ws_acquire(c, &need, &p->ws);
    if (rc == MKX_SUCCESS) rc = load_engine(c, a);
    rc = mkx_comm_agree_rc(c, rc, "ring attention workspace");
  }
  if (rc != MKX_SUCCESS) {
    if (p->ws) mkx_fused_ws_release(p->ws);
    plan_free(p);
    return rc;
  }
  *plan = p;
  return MKX_SUCCESS;
}

static void attn_free(MKX_Comm c, void *plan) {
  attn_plan *p = plan;
  (void)c;
  if (!p) return;
  mkx_fused_ws_release(p->ws);
  plan_free(p);
}

/* Rank src's K and V (at k and v: device memory or pinned host memory)
 * into slot src of node rank lq's workspace, then the epoch into lq's
 * flag of src, on stream s (stream order: the flag after the data). */
static int push_chunk(MKX_Comm c, const attn_plan *p, int src, const void *k,
                      const void *v, int lq, cudaStream_t s) {
  char *data = mkx_fused_ws_data(p->ws, lq);
  char *kd = data + (size_t)src * p->chunk;
  char *vd = data + ((size_t)c->size + (size_t)src) * p->chunk;
  MKX_TRY(mkx_cuda_rc(cudaMemcpyAsync(kd, k, p->chunk, cudaMemcpyDefault, s),
                      FN, "copy of K"));
  MKX_TRY(mkx_cuda_rc(cudaMemcpyAsync(vd, v, p->chunk, cudaMemcpyDefault, s),
                      FN, "copy of V"));
  const int *epoch =
      mkx_fused_ws_word(p->ws, c->place.local_rank, MKX_FUSED_OFF_SRC);
  return mkx_cuda_rc(cudaMemcpyAsync(mkx_fused_ws_flags(p->ws, lq) + src, epoch,
                                     sizeof(int), cudaMemcpyDeviceToDevice, s),
                     FN, "copy of a ready flag");
}

/* The first side stream a start uses: 0 where the host drives the
 * network part (side stream 0), else 1. */
static int first_side(const attn_plan *p) { return p->hier && !p->net ? 0 : 1; }

/* Side streams forked from st: side stream i (i >= 1) serves node rank
 * me + i; side stream 0, the host's network part of several nodes.  This
 * rank's chunk goes to every other rank of its node. */
static int push_peers(MKX_Comm c, const attn_plan *p, const mkx_attn_args *a,
                      cudaStream_t st) {
  mkx_fused_ws *ws = p->ws;
  const int G = c->place.local_size, me = c->place.local_rank;
  MKX_TRY(mkx_cuda_rc(cudaEventRecord(ws->ev_fork, st), FN, "fork"));
  for (int i = first_side(p); i < G; i++)
    MKX_TRY(mkx_cuda_rc(cudaStreamWaitEvent(ws->side[i], ws->ev_fork, 0), FN,
                        "fork wait"));
  for (int i = 1; i < G; i++)
    MKX_TRY(push_chunk(c, p, c->rank, a->K, a->V, (me + i) % G, ws->side[i]));
  return MKX_SUCCESS;
}

/* Several nodes, on the host while the engine computes the node's chunks:
 * this rank's K and V to the host (side stream 0), its column's from every
 * node over the network, then each into every node rank's workspace with
 * its flag (side stream i for node rank me + i). */
static int hier_exchange(MKX_Comm c, const attn_plan *p,
                         const mkx_attn_args *a) {
  cudaStream_t s0 = p->ws->side[0];
  const int G = c->place.local_size, N = c->place.num_nodes;
  MKX_TRY(mkx_cuda_rc(
      cudaMemcpyAsync(p->hsend, a->K, p->chunk, cudaMemcpyDeviceToHost, s0), FN,
      "copy of K to the host"));
  MKX_TRY(mkx_cuda_rc(cudaMemcpyAsync(p->hsend + p->chunk, a->V, p->chunk,
                                      cudaMemcpyDeviceToHost, s0),
                      FN, "copy of V to the host"));
  MKX_TRY(mkx_cuda_rc(cudaStreamSynchronize(s0), FN, "copies to the host"));
  MKX_TRY(mkx_hier_column_gather(c, p->hsend, p->rows, 2 * p->chunk, p->hcol));
  for (int m = 0; m < N; m++) {
    if (m == c->place.node) continue;
    const char *k = p->hcol + (size_t)m * 2 * p->chunk;
    for (int i = 0; i < G; i++)
      MKX_TRY(push_chunk(c, p, p->col_rank[m], k, k + p->chunk,
                         (c->place.local_rank + i) % G, p->ws->side[i]));
  }
  return MKX_SUCCESS;
}

/* The exchange between nodes failed: raise the flags of the other nodes'
 * chunks in this rank's column all the same, so that the engine, already
 * running, ends now instead of at its wait's bound (its output is void:
 * the call reports the failure).  Best effort: the failure is what counts. */
static void release_column(MKX_Comm c, const attn_plan *p) {
  const int G = c->place.local_size;
  const int *epoch =
      mkx_fused_ws_word(p->ws, c->place.local_rank, MKX_FUSED_OFF_SRC);
  for (int m = 0; m < c->place.num_nodes; m++) {
    if (m == c->place.node) continue;
    for (int lq = 0; lq < G; lq++)
      (void)cudaMemcpyAsync(mkx_fused_ws_flags(p->ws, lq) + p->col_rank[m],
                            epoch, sizeof(int), cudaMemcpyDeviceToDevice,
                            p->ws->side[0]);
  }
}

static int attn_start(MKX_Comm c, void *plan, const void *args,
                      MKX_Stream stream) {
  attn_plan *p = plan;
  const mkx_attn_args *a = args;
  cudaStream_t st = (cudaStream_t)stream;
  mkx_attn_desc d;
  mkx_fused_sync sync;
  MKX_TRY(mkx_fused_begin(c, p->ws, FN, stream, 1, p->path));
  if (p->ring) MKX_TRY(push_peers(c, p, a, st));
  desc_of(c, a, p, &d);
  if (p->net) MKX_TRY(mkx_attn_net_send(c, p->net, p->ws, a->K, a->V, st, &d));
  mkx_fused_sync_fill(c, p->ws, 1, &sync);
  if (p->net) mkx_attn_net_ctas(p->net, &sync.ctas);
  d.sync = &sync;
  MKX_TRY(mkx_fused_launch_rc(mkx_attn_run(&d, st), FN, "attention kernel"));
  if (p->hier && !p->net) {
    const int rc = hier_exchange(c, p, a);
    if (rc != MKX_SUCCESS) {
      release_column(c, p);
      return rc;
    }
  }
  for (int i = first_side(p); p->ring && i < c->place.local_size; i++) {
    MKX_TRY(mkx_cuda_rc(cudaEventRecord(p->ws->ev_join[i], p->ws->side[i]), FN,
                        "join"));
    MKX_TRY(mkx_cuda_rc(cudaStreamWaitEvent(st, p->ws->ev_join[i], 0), FN,
                        "join wait"));
  }
  if (p->net) MKX_TRY(mkx_attn_net_end(c, p->net, st));
  return mkx_fused_end(p->ws, stream);
}

/* One entry per path, each with its plan; they share the start, which
 * reads the path from the plan. */
#define ATTN_PLAN(name, path)                                                  \
  static int name(MKX_Comm c, int op, const void *args, const mkx_agreed *g,   \
                  void **plan) {                                               \
    (void)op, (void)g;                                                         \
    return plan_path(c, args, path, plan);                                     \
  }
ATTN_PLAN(plan_one, MKX_PATH_ATTN)
ATTN_PLAN(plan_ring, MKX_PATH_ATTN_RING)
ATTN_PLAN(plan_hier, MKX_PATH_ATTN_HIER)
ATTN_PLAN(plan_net, MKX_PATH_ATTN_NET)
#undef ATTN_PLAN

static const mkx_path_ops attn_one = {MKX_PATH_ATTN, plan_one, attn_start,
                                      attn_free};
static const mkx_path_ops attn_ring = {MKX_PATH_ATTN_RING, plan_ring,
                                       attn_start, attn_free};
static const mkx_path_ops attn_hier = {MKX_PATH_ATTN_HIER, plan_hier,
                                       attn_start, attn_free};
static const mkx_path_ops attn_net = {MKX_PATH_ATTN_NET, plan_net, attn_start,
                                      attn_free};

int mkx_attn_gpu_choose(MKX_Comm c, const void *args, const mkx_agreed *g,
                        mkx_path_choice *out) {
  (void)args, (void)g;
  out->op = 0;
  char why[64];
  if (c->place.num_nodes > 1 && mkx_attn_net_fits(c, why, sizeof why)) {
    out->ops = &attn_net;
    snprintf(out->why, sizeof out->why,
             "%d nodes: the others' chunks posted by the GPU to the network, "
             "landing in the engine's ring while it computes",
             c->place.num_nodes);
  } else if (c->place.num_nodes > 1) {
    out->ops = &attn_hier;
    snprintf(out->why, sizeof out->why,
             "%d nodes: the node's chunks by the copy engine, the others "
             "over the network by the host (%s)",
             c->place.num_nodes, why);
  } else if (c->size > 1) {
    out->ops = &attn_ring;
    snprintf(out->why, sizeof out->why,
             "%d ranks of one node: key/value chunks by the copy engine",
             c->size);
  } else {
    out->ops = &attn_one;
    snprintf(out->why, sizeof out->why, "one rank");
  }
  return MKX_SUCCESS;
}
#else
typedef int mkx_attn_gpu_unused; /* ISO C: not an empty unit */
#endif
