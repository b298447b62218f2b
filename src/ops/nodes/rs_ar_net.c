/* MKX_Gemm_reduce_scatter and MKX_Gemm_allreduce over several nodes,
 * driven by the GPU (option hier_gemm=proxy or auto): nodes of one rank each
 * (below), then equal nodes of several ranks.
 *
 * The communicator's device region of its network endpoint
 * (mkx_comm_net_gpu_region), the same layout on every rank:
 *   P  M x n fp32          this rank's partial product A B
 *   R  size x rmax x n fp32  slot r: rank r's partial of this rank's rows
 *   Y  M x n (C's type)    GEMM+AllReduce: every owner's rounded rows
 * rmax is the most rows an owner has (MKX_Block_range: rank 0's).
 *
 * A call, all on the user's stream: the prologue; mkx_fused_net_begin (the
 * ranks meet over the network, so nobody writes into a region a peer's
 * previous call still reads); then owner by owner, from the next rank on
 * and this rank's own rows last, each chunk of the owner's rows is
 * multiplied into P by the GEMM engine and, for another owner, posted
 * into its slot of R at once by a one-thread kernel, so the network
 * carries a chunk while the GPU multiplies the next; mkx_fused_net_sum adds
 * the partials of this rank's rows in rank order (the same bits every
 * run) chunk by chunk as their signal words arrive, into C (or, for
 * GEMM+AllReduce, into Y, each chunk of whose rows the sum kernel sends
 * to every peer as soon as it is summed; the peers' come back into Y,
 * then C).  Each partial row crosses the network once, to
 * its owner: the minimum for nodes of one rank.  Words per sender
 * (comm_net.h): 0 its arrival, 1-16 the partial chunks, 17-32 Y's chunks.
 * 16 chunks: the link starts after a sixteenth of the peers' GEMM.
 *
 * GEMM+ReduceScatter on equal nodes of several ranks (rank (node n,
 * local g) of N nodes of G): the network joins columns and
 * each node's partial of an owner's rows crosses once, summed inside the
 * node first.  The partial P is in the node's symmetric workspace, so the
 * node's ranks read each other's; after each chunk's GEMM its flag (flag
 * q * CHUNKS + j of this rank's workspace) takes the workspace's epoch.
 *   - Owners on other nodes first, node by node, and inside a node in
 *     local order, the same order on every rank of the node.
 *   - For owner (b, g) of another node this rank is its node's column
 *     rank: a sum kernel on a side stream (mkx_fused_net_sum with named
 *     sources; the node sums' CTAs (ops/roles.h), the GEMMs' in chunk_desc) waits
 *     for chunk j's flag of every node rank, adds their chunks in local
 *     order into S[b] of the region and posts it to the owner's R[n]
 *     (word 1 + j): one write per node and chunk.
 *   - The owner sums, in node order, its node's G chunks (flags) and the
 *     N - 1 node partials that land in R (words), the same bits every run.
 * Region: S then R, N x rmax x n fp32 each.
 *
 * GEMM+AllReduce on equal nodes of several ranks: as
 * GEMM+ReduceScatter, then every owner's rounded rows to every rank.  The
 * owner's sum rounds into Y of the region (after S and R; M x n in C's
 * type) and into Y of its workspace (after P), and sends each chunk to
 * its column peers as soon as it is summed (word W_ROWS + j).  It then
 * takes its column peers' rows, as they land in the region's Y, into its
 * workspace's Y, so that rank (n, g)'s workspace holds the rows of every
 * owner (m, g).  The node's ranks meet; each then copies every owner's
 * rows from the workspace of the node rank of its local index into C
 * (the copy engines, over NVLink).  Each rounded row crosses to each
 * other node once.  Words: the node sums count their chunks at words
 * [2, 18), the owner's sum at [20, 36), since they run at once.
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

#define CHUNKS 16
#define W_PART 1  /* first word of the partial chunks */
#define W_ROWS 17 /* first word of Y's chunks */
_Static_assert(CHUNKS <= MKX_FUSED_NET_MAXCH &&
                   W_ROWS + CHUNKS <= MKX_COMM_NET_GPU_WORDS,
               "chunks and their words");

typedef struct rn_plan {
  int op;          /* MKX_TP_OP_RS or MKX_TP_OP_AR */
  mkx_net_plan np; /* region: P, R, Y; nodes of several ranks: S, R */
  int64_t M, n, rmax, chunk_rows;
  int64_t bnd[MKX_FUSED_MAX + 1]; /* owner q's rows [bnd[q], bnd[q + 1]) */
  size_t off_r, off_y, es_c;
  int node;    /* nodes of several ranks */
  size_t ws_y; /* nodes of several ranks, GEMM+AllReduce: Y in the
                  workspace, after P */
} rn_plan;

static const char *fn_of(int op) {
  return op == MKX_TP_OP_AR ? "MKX_Gemm_allreduce" : "MKX_Gemm_reduce_scatter";
}

/* Chunks of 128-row multiples: every owner's rows in at most CHUNKS. */
static int64_t chunk_rows_of(int64_t rmax) {
  const int64_t r = (rmax + CHUNKS - 1) / CHUNKS;
  return r < 128 ? 128 : (r + 127) / 128 * 128;
}

int mkx_rs_ar_net_fits(MKX_Comm c, int op, const void *args,
                       const struct mkx_agreed *g, char *why, size_t len) {
  const mkx_rs_ar_args *a = args;
  (void)op;
  const char *w = mkx_net_fits_comm(c);
  mkx_gemm_desc d;
  if (!w && mkx_is_fp8(a->dtype)) w = "fp8 operands";
  if (!w && g->gpu_adapt) w = "a rank's operands need adapting";
  if (!w && (a->M >= (1ll << 31) || a->k_local >= (1ll << 31) - 8 ||
             a->n >= (1ll << 31) - 8))
    w = "sizes >= 2^31";
  if (!w) {
    mkx_tp_gemm_of_red(a, (void *)(uintptr_t)4096, MKX_GEMM_FP32, &d);
    if (!mkx_gemm_supported(&d, NULL)) w = "the GEMM engine does not take it";
  }
  if (w) snprintf(why, len, "%s", w);
  return !w;
}

static int chunks_of(const rn_plan *p, int q);
static void chunk_desc(MKX_Comm c, const rn_plan *p, const mkx_rs_ar_args *a,
                       int q, int j, mkx_gemm_desc *d, int64_t *r0p,
                       int64_t *r1p);

int mkx_rs_ar_net_plan(MKX_Comm c, int op, const void *args,
                       const struct mkx_agreed *g, void **plan) {
  const mkx_rs_ar_args *a = args;
  (void)g;
  rn_plan *p = calloc(1, sizeof *p);
  if (!p) return mkx_error(MKX_ERR_NOMEM, "%s: plan", fn_of(op));
  p->op = op;
  p->M = a->M;
  p->n = a->n;
  for (int q = 0; q < c->size; q++) {
    int64_t first, count;
    MKX_Block_range(a->M, c->size, q, &first, &count);
    p->bnd[q] = first;
    p->bnd[q + 1] = first + count;
    if (count > p->rmax) p->rmax = count;
  }
  p->chunk_rows = chunk_rows_of(p->rmax);
  p->es_c = MKX_Type_size(a->ctype);
  p->node = c->place.num_nodes != c->size;
  const size_t row = (size_t)a->n * sizeof(float);
  const size_t area = (size_t)p->rmax * row;
  p->off_r = p->node ? (size_t)c->place.num_nodes * area : (size_t)p->M * row;
  p->off_y = p->off_r + (size_t)(p->node ? c->place.num_nodes : c->size) * area;
  const size_t bytes =
      p->off_y +
      (op == MKX_TP_OP_AR ? (size_t)p->M * (size_t)a->n * p->es_c : 0);
  /* nodes of several ranks: P (GEMM+AllReduce: and Y) and the chunks'
   * flags in the workspace */
  p->ws_y = (size_t)p->M * row;
  const size_t y =
      op == MKX_TP_OP_AR ? (size_t)p->M * (size_t)a->n * p->es_c : 0;
  const mkx_fused_need ws = {1, p->node ? (int64_t)c->size * CHUNKS : 1,
                             p->node ? p->ws_y + y : 0, 0};
  int rc = mkx_net_plan_init(c, bytes, &ws, &p->np);
  if (rc != MKX_SUCCESS) {
    free(p);
    return rc;
  }
  mkx_fused_net_desc n;
  if (p->node)
    rc = mkx_tuner_for(c, MKX_ROLE_NODE_SUM, fn_of(op), MKX_PATH_HIER_PROXY,
                       a->M, a->n, a->k_local, (int)a->dtype, fn_of(op),
                       &p->np.tune);
  if (rc == MKX_SUCCESS) rc = mkx_net_plan_load(c, &p->np, &n, fn_of(op));
  for (int q = 0; rc == MKX_SUCCESS && q < c->size; q++)
    for (int j = 0; rc == MKX_SUCCESS && j < chunks_of(p, q); j++) {
      mkx_gemm_desc d;
      chunk_desc(c, p, a, q, j, &d, NULL, NULL);
      rc =
          mkx_fused_launch_rc(mkx_gemm_load(&d), fn_of(op), "loading its GEMM");
    }
  if (rc != MKX_SUCCESS) {
    mkx_rs_ar_net_free(c, p);
    return rc;
  }
  *plan = p;
  return MKX_SUCCESS;
}

void mkx_rs_ar_net_free(MKX_Comm c, void *plan) {
  rn_plan *p = plan;
  (void)c;
  if (!p) return;
  mkx_net_plan_fini(&p->np);
  free(p);
}

static int chunks_of(const rn_plan *p, int q) {
  const int64_t rows = p->bnd[q + 1] - p->bnd[q];
  return (int)((rows + p->chunk_rows - 1) / p->chunk_rows);
}

/* Owner q's chunk j: rows [*r0p, *r1p) and their GEMM into P. */
static void chunk_desc(MKX_Comm c, const rn_plan *p, const mkx_rs_ar_args *a,
                       int q, int j, mkx_gemm_desc *d, int64_t *r0p,
                       int64_t *r1p) {
  const int64_t r0 = p->bnd[q] + j * p->chunk_rows;
  int64_t r1 = r0 + p->chunk_rows;
  if (r1 > p->bnd[q + 1]) r1 = p->bnd[q + 1];
  const size_t row = (size_t)p->n * sizeof(float);
  char *P =
      p->node ? mkx_fused_ws_data(p->np.ws, c->place.local_rank) : p->np.region;
  mkx_tp_gemm_of_red(a, P + (size_t)r0 * row, MKX_GEMM_FP32, d);
  d->m = r1 - r0;
  d->a = (const char *)a->A +
         (size_t)r0 * (size_t)a->lda * MKX_Type_size(a->dtype);
  /* nodes of several ranks: on a GPU of its own the rank's node sums
   * beside it keep their CTAs (a GEMM on every SM would hold them back);
   * on a shared one the GEMM, which waits for nobody, takes the rank's
   * share, and the sums get SMs as its CTAs retire */
  d->num_ctas =
      p->node && !c->share.ctas ? mkx_tuner_leave(p->np.tune) : c->share.ctas;
  if (r0p) *r0p = r0, *r1p = r1;
}

/* Owner q's chunk j: its GEMM into P, then (another owner) its post. */
static int chunk(MKX_Comm c, const rn_plan *p, const mkx_rs_ar_args *a,
                 const mkx_fused_net_desc *n, int q, int j, cudaStream_t st) {
  const char *fn = fn_of(p->op);
  const size_t row = (size_t)p->n * sizeof(float);
  int64_t r0, r1;
  mkx_gemm_desc d;
  chunk_desc(c, p, a, q, j, &d, &r0, &r1);
  MKX_TRY(mkx_fused_launch_rc(mkx_gemm_run(&d, st), fn, "GEMM of a chunk"));
  if (p->node) { /* the chunk's flag, after it in stream order */
    const int me = c->place.local_rank;
    return mkx_cuda_rc(
        cudaMemcpyAsync(mkx_fused_ws_flags(p->np.ws, me) + q * CHUNKS + j,
                        mkx_fused_ws_word(p->np.ws, me, MKX_FUSED_OFF_EPOCH),
                        sizeof(int), cudaMemcpyDeviceToDevice, st),
        fn, "copy of a chunk's flag");
  }
  if (q == c->rank) return MKX_SUCCESS;
  const size_t dst =
      p->off_r +
      ((size_t)c->rank * (size_t)p->rmax + (size_t)(r0 - p->bnd[q])) * row;
  return mkx_fused_launch_rc(
      mkx_fused_net_post(n, q, (size_t)r0 * row, dst, (size_t)(r1 - r0) * row,
                         W_PART + (uint32_t)j, st),
      fn, "network post");
}

/* Most CTAs of the kernels that wait for chunks: a rank sharing the GPU
 * leaves the SMs to the peers' chunk GEMMs that its waits depend on. */
static int sum_blocks(MKX_Comm c) {
  return c->share.mode != MKX_SHARE_NONE ? 16 : 0;
}

static int sum_own(MKX_Comm c, const rn_plan *p, const mkx_rs_ar_args *a,
                   const mkx_fused_net_desc *n, cudaStream_t st) {
  mkx_fused_net_sum_desc s;
  memset(&s, 0, sizeof s);
  s.net = *n;
  const int me = c->rank;
  const size_t row = (size_t)p->n * sizeof(float);
  for (int q = 0; q < c->size; q++)
    s.part[q] =
        (const float *)(q == me ? p->np.region + (size_t)p->bnd[me] * row
                                : p->np.region + p->off_r +
                                      (size_t)q * (size_t)p->rmax * row);
  s.ld_part = p->n;
  s.rows = p->bnd[me + 1] - p->bnd[me];
  s.n = p->n;
  s.chunk_rows = p->chunk_rows;
  s.w0 = W_PART;
  s.c_type = mkx_fused_gemm_type(a->ctype);
  s.max_blocks = sum_blocks(c);
  if (p->op == MKX_TP_OP_AR) {
    /* each summed chunk of Y leaves for every peer at once */
    s.post_off = p->off_y + (size_t)p->bnd[me] * (size_t)p->n * p->es_c;
    s.post_row_bytes = p->n * (int64_t)p->es_c;
    s.post_w0 = W_ROWS;
    s.chunk_done = p->np.words + MKX_NET_WORD_SUM;
    s.out = p->np.region + s.post_off;
    s.ldc = p->n;
    /* and C's own rows at once */
    s.out2 = (char *)a->C + (size_t)p->bnd[me] * (size_t)a->ldc * p->es_c;
    s.ldc2 = a->ldc;
  } else {
    s.out = a->C;
    s.ldc = a->ldc;
  }
  return mkx_fused_launch_rc(mkx_fused_net_sum(&s, st), fn_of(p->op), "sum");
}

/* GEMM+AllReduce, while the sum sends this rank's rounded rows to every
 * peer (and writes them into C): every other owner's rows into C, chunk by
 * chunk as they land in Y. */
static int gather_rows(MKX_Comm c, const rn_plan *p, const mkx_rs_ar_args *a,
                       const mkx_fused_net_desc *n, cudaStream_t st) {
  mkx_fused_net_take_desc t;
  memset(&t, 0, sizeof t);
  t.net = *n;
  for (int q = 0; q <= c->size; q++) t.bnd[q] = p->bnd[q];
  t.chunk_rows = p->chunk_rows;
  t.w0 = W_ROWS;
  t.row_bytes = p->n * (int64_t)p->es_c;
  t.src = p->np.region + p->off_y;
  t.ld_src = t.row_bytes;
  t.dst = a->C;
  t.ld_dst = a->ldc * (int64_t)p->es_c;
  t.max_blocks = sum_blocks(c);
  return mkx_fused_launch_rc(mkx_fused_net_take(&t, st), fn_of(p->op),
                             "rows of the other owners");
}

/* ---- nodes of several ranks (GEMM+ReduceScatter; top of the file) ---- */

/* Node rank l's chunks of owner q's partial: source s of d. */
static void node_source(MKX_Comm c, const rn_plan *p, int q, int l,
                        mkx_fused_net_sum_desc *d, int s) {
  const size_t row = (size_t)p->n * sizeof(float);
  d->part[s] =
      (const float *)(mkx_fused_ws_data(p->np.ws, l) + (size_t)p->bnd[q] * row);
  d->src_rank[s] = -1;
  d->src_flag[s] = mkx_fused_ws_flags(p->np.ws, l) + q * CHUNKS;
  d->src_name[s] = mkx_placement_rank_at(&c->place, c->size, c->place.node, l);
}

static void node_sum_desc(MKX_Comm c, const rn_plan *p, int q,
                          const mkx_fused_net_desc *n,
                          mkx_fused_net_sum_desc *d) {
  memset(d, 0, sizeof *d);
  d->net = *n;
  d->flag_epoch =
      mkx_fused_ws_word(p->np.ws, c->place.local_rank, MKX_FUSED_OFF_EPOCH);
  d->ld_part = p->n;
  d->rows = p->bnd[q + 1] - p->bnd[q];
  d->n = p->n;
  d->chunk_rows = p->chunk_rows;
  d->w0 = W_PART;
}

/* Owner (b, g) of node b: this node's partial of its rows, summed from
 * every node rank's chunks as their flags rise, into S[b] and on to the
 * owner's R[node] chunk by chunk. */
static int node_sum(MKX_Comm c, const rn_plan *p, const mkx_fused_net_desc *n,
                    int b, cudaStream_t s) {
  const int G = c->place.local_size;
  const int q =
      mkx_placement_rank_at(&c->place, c->size, b, c->place.local_rank);
  const size_t row = (size_t)p->n * sizeof(float);
  const size_t area = (size_t)p->rmax * row;
  mkx_fused_net_sum_desc d;
  node_sum_desc(c, p, q, n, &d);
  d.nsrc = G;
  for (int l = 0; l < G; l++) node_source(c, p, q, l, &d, l);
  d.c_type = MKX_GEMM_FP32;
  d.out = p->np.region + (size_t)b * area;
  d.ldc = p->n;
  d.post_w0 = W_PART;
  d.post_off = (size_t)b * area;
  d.post_row_bytes = (int64_t)row;
  d.post_one = q + 1;
  d.post_dst_off = p->off_r + (size_t)c->place.node * area;
  d.chunk_done = p->np.words + MKX_NET_WORD_SUM;
  d.max_blocks = p->np.tune->ctas;
  MKX_TRY(mkx_tuner_role_begin(p->np.tune, s, fn_of(p->op)));
  MKX_TRY(
      mkx_fused_launch_rc(mkx_fused_net_sum(&d, s), fn_of(p->op), "node sum"));
  return mkx_tuner_role_end(p->np.tune, s, fn_of(p->op));
}

/* This rank's rows: in node order, its node's G chunks (flags) and every
 * other node's partial as it lands in R (words), into C. */
static int node_own_sum(MKX_Comm c, const rn_plan *p, const mkx_rs_ar_args *a,
                        const mkx_fused_net_desc *n, cudaStream_t st) {
  const int G = c->place.local_size, N = c->place.num_nodes;
  const size_t area = (size_t)p->rmax * (size_t)p->n * sizeof(float);
  mkx_fused_net_sum_desc d;
  node_sum_desc(c, p, c->rank, n, &d);
  for (int m = 0; m < N; m++) {
    if (m == c->place.node) {
      for (int l = 0; l < G; l++) node_source(c, p, c->rank, l, &d, d.nsrc++);
      continue;
    }
    const int s = d.nsrc++;
    d.part[s] = (const float *)(p->np.region + p->off_r + (size_t)m * area);
    d.src_rank[s] =
        mkx_placement_rank_at(&c->place, c->size, m, c->place.local_rank);
    d.src_name[s] = d.src_rank[s];
  }
  d.c_type = mkx_fused_gemm_type(a->ctype);
  d.out = a->C;
  d.ldc = a->ldc;
  d.max_blocks = sum_blocks(c);
  if (p->op == MKX_TP_OP_AR) {
    /* into the region's Y, each chunk to the column peers once summed,
     * and into the workspace's Y for the node's ranks */
    const size_t yrow = (size_t)p->n * p->es_c;
    d.post_off = p->off_y + (size_t)p->bnd[c->rank] * yrow;
    d.post_row_bytes = (int64_t)yrow;
    d.post_w0 = W_ROWS;
    d.chunk_done = p->np.words + MKX_NET_WORD_SUM2;
    d.out = p->np.region + d.post_off;
    d.ldc = p->n;
    d.out2 = mkx_fused_ws_data(p->np.ws, c->place.local_rank) + p->ws_y +
             (size_t)p->bnd[c->rank] * yrow;
    d.ldc2 = p->n;
  }
  return mkx_fused_launch_rc(mkx_fused_net_sum(&d, st), fn_of(p->op), "sum");
}

/* GEMM+AllReduce on nodes of several ranks, after this rank's sum: its
 * column peers' rows into its workspace's Y as they land, the node's
 * ranks meet, and every owner's rows into C from the workspace of the
 * node rank of the owner's local index. */
static int node_rows(MKX_Comm c, const rn_plan *p, const mkx_rs_ar_args *a,
                     const mkx_fused_net_desc *n, cudaStream_t st) {
  const char *fn = fn_of(p->op);
  const size_t yrow = (size_t)p->n * p->es_c;
  mkx_fused_net_take_desc t;
  memset(&t, 0, sizeof t);
  t.net = *n; /* peers: the column */
  for (int q = 0; q <= c->size; q++) t.bnd[q] = p->bnd[q];
  t.chunk_rows = p->chunk_rows;
  t.w0 = W_ROWS;
  t.row_bytes = (int64_t)yrow;
  t.src = p->np.region + p->off_y;
  t.ld_src = t.row_bytes;
  t.dst = mkx_fused_ws_data(p->np.ws, c->place.local_rank) + p->ws_y;
  t.ld_dst = t.row_bytes;
  t.max_blocks = sum_blocks(c);
  MKX_TRY(mkx_fused_launch_rc(mkx_fused_net_take(&t, st), fn,
                              "rows of the column's owners"));
  mkx_fused_sync sync;
  mkx_fused_sync_fill(c, p->np.ws, 0, &sync);
  MKX_TRY(mkx_fused_launch_rc(
      mkx_fused_meet(&sync, MKX_FUSED_OFF_DONE, MKX_FUSED_AT_AR_DONE, st), fn,
      "meeting of the node's ranks"));
  for (int q = 0; q < c->size; q++) {
    const int64_t rows = p->bnd[q + 1] - p->bnd[q];
    if (rows == 0) continue;
    const char *src = mkx_fused_ws_data(p->np.ws, c->place.local_rank_of[q]) +
                      p->ws_y + (size_t)p->bnd[q] * yrow;
    MKX_TRY(mkx_cuda_rc(
        cudaMemcpy2DAsync(
            (char *)a->C + (size_t)p->bnd[q] * (size_t)a->ldc * p->es_c,
            (size_t)a->ldc * p->es_c, src, yrow, yrow, (size_t)rows,
            cudaMemcpyDeviceToDevice, st),
        fn, "copy of an owner's rows into C"));
  }
  return MKX_SUCCESS;
}

/* The owners node by node from the next node on, each in local order,
 * this node's last (the same order on every rank of the node).  Work in
 * a hardware queue starts in the order it came: each node sum is forked
 * after this rank's GEMMs of its owners, never ahead of them. */
static int node_start(MKX_Comm c, const rn_plan *p, const mkx_rs_ar_args *a,
                      mkx_fused_net_desc *n, cudaStream_t st) {
  const char *fn = fn_of(p->op);
  const int G = c->place.local_size, N = c->place.num_nodes;
  n->peers = mkx_net_column_peers(c);
  MKX_TRY(mkx_fused_launch_rc(mkx_fused_net_begin(n, st), fn, "network meet"));
  for (int k = 1; k <= N; k++) {
    const int b = (c->place.node + k) % N;
    for (int l = 0; l < G; l++) {
      const int q = mkx_placement_rank_at(&c->place, c->size, b, l);
      for (int j = 0; j < chunks_of(p, q); j++)
        MKX_TRY(chunk(c, p, a, n, q, j, st));
    }
    if (b == c->place.node) continue;
    MKX_TRY(mkx_net_fork(p->np.ws, G, st, fn));
    MKX_TRY(node_sum(c, p, n, b, p->np.ws->side[G]));
  }
  MKX_TRY(node_own_sum(c, p, a, n, st));
  if (p->op == MKX_TP_OP_AR) MKX_TRY(node_rows(c, p, a, n, st));
  /* the node sums wait on the node's flags and the proxy's ring only */
  return mkx_net_join(p->np.ws, G, st, fn);
}

int mkx_rs_ar_net_start(MKX_Comm c, void *plan, const void *args,
                        MKX_Stream stream) {
  rn_plan *p = plan;
  const mkx_rs_ar_args *a = args;
  const char *fn = fn_of(p->op);
  cudaStream_t st = (cudaStream_t)stream;
  mkx_fused_net_desc n;
  MKX_TRY(mkx_net_call_begin(c, &p->np, stream, fn, &n));
  if (p->node) {
    MKX_TRY(node_start(c, p, a, &n, st));
    return mkx_net_call_end(c, &p->np, stream, fn, &n);
  }
  MKX_TRY(mkx_fused_launch_rc(mkx_fused_net_begin(&n, st), fn, "network meet"));
  for (int i = 1; i <= c->size; i++) {
    const int q = (c->rank + i) % c->size;
    for (int j = 0; j < chunks_of(p, q); j++)
      MKX_TRY(chunk(c, p, a, &n, q, j, st));
  }
  MKX_TRY(sum_own(c, p, a, &n, st));
  if (p->op == MKX_TP_OP_AR) MKX_TRY(gather_rows(c, p, a, &n, st));
  return mkx_net_call_end(c, &p->np, stream, fn, &n);
}
#else
typedef int mkx_rs_ar_net_unused; /* ISO C: not an empty unit */
#endif
