/* MKX_Allgather_gemm over several nodes, driven by the GPU (option
 * hier_gemm=proxy).
 *
 * Every rank's gathered A (all M rows, the same layout everywhere) is the
 * communicator's device region of its network endpoint
 * (mkx_comm_net_gpu_region).  A call, all on the user's stream:
 *   1. the prologue of the fused paths (epoch, error word);
 *   2. this rank's rows of A copied into its gathered A (they are the
 *      source of the network writes: the user's A is not registered);
 *   3. mkx_fused_net_begin: one thread tells every peer it has arrived (its
 *      previous call's GEMM has ended, so its gathered A may be written),
 *      waits for every peer's arrival, then posts its rows to every peer
 *      in chunks into the proxy's ring (kernels/tp/net.cu);
 *   4. the gated GEMM (kernels/tp/ag_gemm.cu) over the gathered A: tiles
 *      of this rank's own rows first, straight from its A, then every
 *      other tile as soon as the signal word of the chunk that holds its
 *      rows reaches the call's network epoch, so the GEMM runs while the
 *      network carries the rest;
 *   5. mkx_fused_net_end: until the proxy has completed the call's writes;
 *   6. A_out, if asked, from the gathered A.
 * On nodes of several ranks (equal sizes) the network joins columns only
 * (rank l of every node) and the node shares what it gets:
 *   - the gathered A every GEMM reads is the node's symmetric workspace,
 *     filled as inside one node: this rank's rows go to every node peer's
 *     by the copy engines with their ready flags (mkx_tp_ag_push_peers),
 *     and its own edge tiles to its own;
 *   - its rows go over the network to its column peers only (step 3);
 *   - a forwarding kernel beside the GEMM (mkx_fused_net_fwd, a few CTAs the
 *     GEMM leaves free) waits for each chunk of a column peer to land in
 *     the region, copies it into every node rank's gathered A (its own
 *     included) and sets their ready flags: the GEMM waits on flags only.
 *     It is forked after step 3 (work in a hardware queue starts in the
 *     order it came: forked first, it could sit ahead of the posts it
 *     waits for), and mkx_fused_net_end, not a stream, waits for its end.
 * No host thread waits inside the call: the proxy thread only moves what
 * the kernel posted.  Each row crosses the network once per other node,
 * the minimum.  Calls of this path on one communicator run in turn (the
 * next one's stream waits for the previous one's end), and the host's own
 * exchanges wait for them (comm_net.h), in a CUDA graph as well.
 */
#include <stdlib.h>
#include <string.h>
#include "core/error.h"
#include "host/dtype.h"
#include "ops/op.h"
#include "ops/path.h"

#if HAVE_CUDA
#include "core/comm_net.h"
#include "ops/nodes/net_gpu.h"
#include "ops/fused/fused.h"
#include "gemm/gemm_engine.h"

static const char *const FN = "MKX_Allgather_gemm";

#define TILE 128
#define CHUNKS 8 /* chunks per rank's rows (at most words - 1) */

typedef struct an_plan {
  mkx_net_plan np; /* region: the gathered A (nodes of several ranks: the
                      rows that come over the network, and this rank's) */
  mkx_tp_ag_rows r;
  int64_t chunk_tiles;
  size_t es;
  int node; /* nodes of several ranks */
} an_plan;

static void net_rows(MKX_Comm c, const an_plan *p, const mkx_ag_gemm_args *a,
                     mkx_fused_net_desc *d);
static void gemm_desc(MKX_Comm c, const an_plan *p, const mkx_ag_gemm_args *a,
                      const mkx_fused_net_desc *n, mkx_tp_ag_desc *d);

/* Tiles per chunk: every rank's rows in at most CHUNKS chunks. */
static int64_t chunk_tiles_of(const mkx_tp_ag_rows *r, int size) {
  int64_t most = 1;
  for (int q = 0; q < size; q++) {
    const int64_t b0 = r->bnd[q], b1 = r->bnd[q + 1];
    const int64_t t = b1 > b0 ? (b1 - 1) / TILE - b0 / TILE + 1 : 0;
    if (t > most) most = t;
  }
  return (most + CHUNKS - 1) / CHUNKS;
}

int mkx_ag_net_fits(MKX_Comm c, const void *args, const struct mkx_agreed *g,
                    char *why, size_t len) {
  const mkx_ag_gemm_args *a = args;
  mkx_gemm_desc d;
  const char *w = mkx_net_fits_comm(c);
  if (!w && mkx_is_fp8(a->dtype)) w = "fp8 operands";
  if (!w && g->gpu_adapt) w = "a rank's operands need adapting";
  if (!w && (g->total >= (1ll << 31) || a->k >= (1ll << 31) - 8 ||
             a->n >= (1ll << 31) - 8))
    w = "sizes >= 2^31";
  if (!w) {
    mkx_tp_gemm_of_ag(a, (void *)(uintptr_t)4096, g->total, &d);
    if (!mkx_gemm_supported(&d, NULL)) w = "the GEMM engine does not take it";
  }
  if (w) snprintf(why, len, "%s", w);
  return !w;
}

static size_t region_bytes(const an_plan *p, const mkx_ag_gemm_args *a) {
  return (size_t)p->r.M * (size_t)a->k * p->es;
}

int mkx_ag_net_plan(MKX_Comm c, int op, const void *args,
                    const struct mkx_agreed *g, void **plan) {
  const mkx_ag_gemm_args *a = args;
  (void)op;
  an_plan *p = calloc(1, sizeof *p);
  if (!p) return mkx_error(MKX_ERR_NOMEM, "%s: plan", FN);
  mkx_tp_ag_rows_of(c, g, &p->r);
  p->es = MKX_Type_size(a->dtype);
  p->chunk_tiles = chunk_tiles_of(&p->r, c->size);
  p->node = c->place.local_size > 1;
  /* one node: net_landed, a word per (source, chunk); several ranks: the
   * node's gathered A and its flags, one per (source, tile), and src[]
   * for the copy engines' flag copies */
  const mkx_fused_need ws =
      p->node ? (mkx_fused_need){p->r.tiles_m, (int64_t)c->size * p->r.tiles_m,
                                 region_bytes(p, a), 0}
              : (mkx_fused_need){1, (int64_t)c->size * MKX_COMM_NET_GPU_WORDS,
                                 0, 0};
  int rc = mkx_net_plan_init(c, region_bytes(p, a), &ws, &p->np);
  if (rc != MKX_SUCCESS) {
    free(p);
    return rc;
  }
  mkx_fused_net_desc n;
  mkx_tp_ag_desc d;
  if (p->node)
    rc = mkx_tuner_for(c, MKX_ROLE_NET_FWD, FN, MKX_PATH_HIER_PROXY, p->r.M,
                       a->n, a->k, (int)a->dtype, FN, &p->np.tune);
  if (rc == MKX_SUCCESS) rc = mkx_net_plan_load(c, &p->np, &n, FN);
  if (rc == MKX_SUCCESS) {
    net_rows(c, p, a, &n);
    gemm_desc(c, p, a, &n, &d);
    rc = mkx_fused_launch_rc(mkx_tp_ag_gemm_load(&d), FN, "loading its GEMM");
  }
  if (rc != MKX_SUCCESS) {
    mkx_ag_net_free(c, p);
    return rc;
  }
  *plan = p;
  return MKX_SUCCESS;
}

void mkx_ag_net_free(MKX_Comm c, void *plan) {
  an_plan *p = plan;
  (void)c;
  if (!p) return;
  mkx_net_plan_fini(&p->np);
  free(p);
}

/* The rows of every rank, to post in chunks. */
static void net_rows(MKX_Comm c, const an_plan *p, const mkx_ag_gemm_args *a,
                     mkx_fused_net_desc *d) {
  d->row_bytes = a->k * (int64_t)p->es;
  for (int q = 0; q <= c->size; q++) d->bnd[q] = p->r.bnd[q];
  d->chunk_tiles = (int)p->chunk_tiles;
}

static void gemm_desc(MKX_Comm c, const an_plan *p, const mkx_ag_gemm_args *a,
                      const mkx_fused_net_desc *n, mkx_tp_ag_desc *d) {
  const int me = c->place.local_rank;
  memset(d, 0, sizeof *d);
  d->m = p->r.M, d->n = a->n, d->k = a->k;
  d->a = p->node ? mkx_fused_ws_data(p->np.ws, me) : p->np.region;
  d->lda = a->k;
  d->b = a->B, d->ldb = a->ldb, d->b_kmajor = a->transb == MKX_TRANS;
  d->c = a->C, d->ldc = a->ldc;
  d->ab_type = mkx_fused_gemm_type(a->dtype);
  d->c_type = mkx_fused_gemm_type(a->ctype);
  d->flags = mkx_fused_ws_flags(p->np.ws, me);
  d->epoch = mkx_fused_ws_word(p->np.ws, me, MKX_FUSED_OFF_EPOCH);
  d->size = c->size;
  for (int q = 0; q <= c->size; q++) d->bnd[q] = p->r.bnd[q];
  d->first_tile_m =
      (int)(p->r.own_t1 > p->r.own_t0 ? p->r.own_t0 : p->r.row0 / TILE);
  if (p->r.own_t1 > p->r.own_t0) {
    d->a_own = a->A;
    d->lda_own = a->lda;
    d->own_row0 = p->r.row0;
    d->own_rows = a->m_local;
    d->own_t0 = (int)p->r.own_t0;
    d->own_t1 = (int)p->r.own_t1;
  }
  d->sync = n->sync;
  /* own rows: copied before the kernel on its stream */
  d->ready_mask = 1u << c->rank;
  if (p->node) { /* every other source's rows come with their flags */
    d->sync.ctas = mkx_tuner_leave(p->np.tune);
    return;
  }
  d->net_mask = ((1u << c->size) - 1) & ~d->ready_mask;
  d->net_signals = n->proxy.signals;
  d->net_epoch = n->epoch;
  d->net_slot0 = n->slot0;
  d->net_words = n->words;
  d->net_chunk_tiles = n->chunk_tiles;
  d->net_landed = mkx_fused_ws_flags(p->np.ws, 0);
}

/* Nodes of several ranks: the forward of the column peers' rows into
 * every node rank's gathered A, on the workspace's side stream G (the
 * copy engines' pushes take 1 .. G - 1). */
static int forward(MKX_Comm c, const an_plan *p, mkx_fused_net_desc *n,
                   cudaStream_t st) {
  mkx_fused_net_fwd_desc f;
  memset(&f, 0, sizeof f);
  f.kind = MKX_FUSED_FWD_ROWS;
  f.src = p->np.region;
  f.tiles_m = p->r.tiles_m;
  return mkx_net_fwd_start(c, p->np.ws, c->place.local_size, n, p->np.words, &f,
                           p->np.tune, st, FN);
}

/* (cudaMemcpyDefault where the region is a side: it may be mapped host
 * memory, option net_gpu_region.) */
static int copy_rows(const an_plan *p, const mkx_ag_gemm_args *a,
                     cudaStream_t st) {
  if (a->m_local == 0) return MKX_SUCCESS;
  const size_t row = (size_t)a->k * p->es;
  return mkx_cuda_rc(
      cudaMemcpy2DAsync(p->np.region + (size_t)p->r.row0 * row, row, a->A,
                        (size_t)a->lda * p->es, row, (size_t)a->m_local,
                        cudaMemcpyDefault, st),
      FN, "copy of A rows");
}

/* A_out from the gathered A (nodes of several ranks: this rank's rows
 * of tiles of its own only are not there, they come from A) */
static int copy_out(const an_plan *p, const mkx_ag_gemm_args *a,
                    const char *gathered, cudaStream_t st) {
  const size_t row = (size_t)a->k * p->es;
  const size_t ld = (size_t)a->ld_aout * p->es;
  MKX_TRY(mkx_cuda_rc(cudaMemcpy2DAsync(a->A_out, ld, gathered, row, row,
                                        (size_t)p->r.M, cudaMemcpyDefault, st),
                      FN, "copy to A_out"));
  if (gathered == p->np.region || a->m_local == 0) return MKX_SUCCESS;
  return mkx_cuda_rc(
      cudaMemcpy2DAsync((char *)a->A_out + (size_t)p->r.row0 * ld, ld, a->A,
                        (size_t)a->lda * p->es, row, (size_t)a->m_local,
                        cudaMemcpyDeviceToDevice, st),
      FN, "copy to A_out");
}

/* Nodes of several ranks: see the top of the file. */
static int node_start(MKX_Comm c, an_plan *p, const mkx_ag_gemm_args *a,
                      mkx_fused_net_desc *n, cudaStream_t st) {
  mkx_fused_ws *ws = p->np.ws;
  MKX_TRY(mkx_tp_ag_push_peers(c, ws, &p->r, p->chunk_tiles, a, st));
  MKX_TRY(mkx_tp_ag_push_own_edges(c, ws, &p->r, a, st));
  n->peers = mkx_net_column_peers(c);
  MKX_TRY(mkx_fused_launch_rc(mkx_fused_net_begin(n, st), FN, "network post"));
  MKX_TRY(forward(c, p, n, st));
  mkx_tp_ag_desc d;
  gemm_desc(c, p, a, n, &d);
  MKX_TRY(mkx_fused_launch_rc(mkx_tp_ag_gemm(&d, st), FN, "gated GEMM"));
  MKX_TRY(mkx_tp_ag_join_peers(c, ws, st));
  MKX_TRY(mkx_net_fwd_join(ws, c->place.local_size, st, FN));
  if (a->A_out)
    MKX_TRY(copy_out(p, a, mkx_fused_ws_data(ws, c->place.local_rank), st));
  return MKX_SUCCESS;
}

int mkx_ag_net_start(MKX_Comm c, void *plan, const void *args,
                     MKX_Stream stream) {
  an_plan *p = plan;
  const mkx_ag_gemm_args *a = args;
  cudaStream_t st = (cudaStream_t)stream;
  mkx_fused_net_desc n;
  MKX_TRY(mkx_net_call_begin(c, &p->np, stream, FN, &n));
  MKX_TRY(copy_rows(p, a, st));
  net_rows(c, p, a, &n);
  if (p->node) {
    MKX_TRY(node_start(c, p, a, &n, st));
  } else {
    mkx_tp_ag_desc d;
    gemm_desc(c, p, a, &n, &d);
    MKX_TRY(
        mkx_fused_launch_rc(mkx_fused_net_begin(&n, st), FN, "network post"));
    MKX_TRY(mkx_fused_launch_rc(mkx_tp_ag_gemm(&d, st), FN, "gated GEMM"));
    if (a->A_out) MKX_TRY(copy_out(p, a, p->np.region, st));
  }
  return mkx_net_call_end(c, &p->np, stream, FN, &n);
}
#else
typedef int mkx_ag_net_unused; /* ISO C: not an empty unit */
#endif
