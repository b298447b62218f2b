/* MKX_Allgather_gemm's fused single-node GPU path.
 *
 * Each rank copies its rows of A (any m_local, 0 included) into every node
 * rank's symmetric workspace (the gathered A) with the copy engine, one
 * side stream per peer, in chunks that end on 128-row tile boundaries of
 * the gathered A (so all of a rank's rows of a tile travel in one chunk);
 * after each chunk the copy engine also copies the call's epoch into the
 * destination's ready flags [this rank][tile] of the tiles the chunk's rows
 * meet.  Meanwhile the gated GEMM engine on the user's stream computes this
 * rank's own rows first, straight from its A (only the own rows of tiles
 * shared with a neighbour are copied into its own gathered A), then the
 * other tiles as the flags of every rank with rows in them arrive.  No SMs
 * move data, so the GEMM keeps all of them (its last wave split along K
 * over every SM, option tp_stream_k).  Small products take the split path
 * instead (option tp_overlap): products whose tiles fit in one wave run as
 * one kernel whose spare CTAs store the rows into every rank's gathered A
 * in K chunks while the GEMM CTAs consume them (kernels/tp/ag_oneshot.cu);
 * larger ones store them in one kernel (kernels/tp/split.cu) before the
 * same gated GEMM runs; with option tp_split_gemm=cublas that kernel also
 * waits until every rank's rows have landed and cuBLAS multiplies
 * (src/ops/fused/blas.c). */
#include <string.h>
#include <stdlib.h>
#include "core/error.h"
#include "core/log.h"
#include "host/dtype.h"
#include "host/scales.h"
#include "ops/op.h"
#include "ops/path.h"

#if HAVE_CUDA
#include "ops/fused/fused.h"
#include "gemm/gemm_engine.h"

static const char *const FN = "MKX_Allgather_gemm";

typedef struct ag_plan {
  mkx_fused_ws *ws;
  mkx_tp_ag_rows r;
  int64_t chunk_tiles, first_tile;
  int split;
  int oneshot, chunk_kb, nkc; /* split path in one kernel (ag_oneshot.cu) */
  int stream_k;               /* overlapped path: shares of the last wave */
  size_t sk_off;              /* their slots in the workspace's data */
  size_t es;
  int pull;          /* every rank's rows read from its own A (tp_pull) */
  mkx_symm_buf areg; /* pull: every rank's A */
  int64_t peer_lda[MKX_FUSED_MAX];
  int fp8;              /* split path: the rows' scales along, fp8 GEMM */
  int64_t s_cols;       /* floats of scales per gathered row (0: none) */
  size_t s_off;         /* the gathered scales in the workspace's data */
  mkx_tp_fp8_host host; /* this rank's count of scales */
} ag_plan;

#define TILE 128 /* rows of the GEMM's tile: one ready flag per source */

static int is16(MKX_Datatype t) { return t == MKX_BF16 || t == MKX_FP16; }

static int check_types(const mkx_ag_gemm_args *a) {
  if (!is16(a->dtype))
    return mkx_error(MKX_ERR_UNSUPPORTED,
                     "%s: fused path takes bf16/fp16 "
                     "A and B only",
                     FN);
  if (!is16(a->ctype) && a->ctype != MKX_FP32)
    return mkx_error(MKX_ERR_UNSUPPORTED,
                     "%s: fused path writes bf16, fp16 "
                     "or fp32 C only",
                     FN);
  return MKX_SUCCESS;
}

int mkx_ag_gemm_gpu_check(MKX_Comm c, const void *args,
                          const struct mkx_agreed *g) {
  const mkx_ag_gemm_args *a = args;
  if (c->place.num_nodes > 1)
    return mkx_hier_gpu_check(c, MKX_TP_OP_AG, args, g);
  MKX_TRY(mkx_fused_node_ok(c, FN));
  if (mkx_is_fp8(a->dtype))
    return mkx_tp_fp8_check(FN, MKX_TP_OP_AG, a, g->total, g->captured);
  MKX_TRY(check_types(a));
  const char *why =
      c->opt.fused_pad ? NULL : mkx_tp_adapt_misfit(MKX_TP_OP_AG, a);
  if (why)
    return mkx_error(MKX_ERR_UNSUPPORTED,
                     "%s: fused path: %s (option "
                     "fused_pad=yes copies such operands)",
                     FN, why);
  if (g->total >= (1ll << 31) || a->k >= (1ll << 31) - 8 ||
      a->n >= (1ll << 31) - 8)
    return mkx_error(MKX_ERR_UNSUPPORTED, "%s: sizes >= 2^31", FN);
  return MKX_SUCCESS;
}

/* The split path runs as one kernel (option tp_ag_oneshot) when the
 * engine multiplies (option tp_split_gemm) and the product's tiles fit in
 * one wave with SMs to spare.  The tiles depend on this rank's n and
 * transb, which may differ between ranks: whether every rank's product
 * fits is agreed (MKX_GPU_LOCAL_NO_ONE_KERNEL), and the plan takes one
 * kernel only where none said no. */
static int oneshot_fits(MKX_Comm c, const mkx_ag_gemm_args *a, int64_t M,
                        int *chunk_kb, int *nkc) {
  mkx_gemm_desc g;
  mkx_tp_gemm_of_ag(a, NULL, M, &g);
  if (c->opt.tp_ag_oneshot == MKX_ONESHOT_NO || mkx_tp_split_blas(c, &g))
    return 0;
  mkx_tp_ag_desc d;
  memset(&d, 0, sizeof d);
  d.m = M, d.n = a->n, d.k = a->k;
  d.ab_type = g.ab_type, d.c_type = g.c_type, d.b_kmajor = g.b_kmajor;
  d.sync.ctas = c->share.ctas; /* agreed: the grid must fit in it */
  int tile;
  return mkx_tp_ag1_shape(&d, c->opt.tp_ag_oneshot == MKX_ONESHOT_YES, &tile,
                          chunk_kb, nkc);
}

unsigned mkx_ag_gemm_gpu_local(MKX_Comm c, const void *args,
                               const struct mkx_agreed *g) {
  int chunk_kb, nkc;
  if (mkx_is_fp8(((const mkx_ag_gemm_args *)args)->dtype))
    return MKX_GPU_LOCAL_NO_ONE_KERNEL; /* no adapter: mkx_tp_fp8_check */
  unsigned bits =
      mkx_tp_adapt_local(c, MKX_TP_OP_AG, args, g) ? MKX_GPU_LOCAL_ADAPT : 0;
  if (!oneshot_fits(c, args, g->total, &chunk_kb, &nkc))
    bits |= MKX_GPU_LOCAL_NO_ONE_KERNEL;
  return bits;
}

int mkx_ag_gemm_one_kernel(MKX_Comm c, const void *args,
                           const struct mkx_agreed *g) {
  int chunk_kb, nkc;
  return !(g->gpu_any & MKX_GPU_LOCAL_NO_ONE_KERNEL) &&
         oneshot_fits(c, args, g->total, &chunk_kb, &nkc);
}

int mkx_ag_gemm_pull_fits(MKX_Comm c, const struct mkx_agreed *g) {
  mkx_tp_ag_rows r;
  mkx_tp_ag_rows_of(c, g, &r);
  for (int q = 0; q < c->size; q++)
    if (r.bnd[q + 1] <= r.bnd[q] || (q + 1 < c->size && r.bnd[q + 1] % TILE))
      return 0;
  return 1;
}

/* Pull: map every rank's A; where some rank's cannot be (agreed), the
 * rows move instead: the plan becomes an overlap plan. */
static int pull_maps(MKX_Comm c, const mkx_ag_gemm_args *a, ag_plan *p) {
  MKX_TRY(mkx_tp_node_values(c, &a->lda, 1, p->peer_lda));
  const int rc =
      mkx_tp_map_matrix(c, a->A, a->m_local, a->k, a->lda, p->es, &p->areg);
  if (rc == MKX_SUCCESS || c->broken) return rc;
  mkx_log(MKX_LOG_INFO,
          "%s: A cannot be mapped into the node's peers (%s): rows move "
          "instead",
          FN, MKX_Get_last_error());
  mkx_symm_buf_free(&p->areg);
  p->pull = 0;
  return MKX_SUCCESS;
}

static mkx_fused_need need_of(MKX_Comm c, const mkx_ag_gemm_args *a,
                              const ag_plan *p) {
  if (p->pull && p->fp8) /* only the rows' scale records move */
    return (mkx_fused_need){
        0, (int64_t)c->size * p->r.tiles_m,
        p->s_off + sizeof(float) * (size_t)p->r.M * (size_t)p->s_cols + 256, 1};
  if (p->pull) return (mkx_fused_need){1, 0, 0, 0};
  if (p->fp8)
    return (mkx_fused_need){
        0, (int64_t)c->size * p->r.tiles_m,
        p->s_off + sizeof(float) * (size_t)p->r.M * (size_t)p->s_cols, 1};
  return (mkx_fused_need){
      p->split ? 0 : p->r.tiles_m,
      (int64_t)c->size * p->r.tiles_m * (p->oneshot ? p->nkc : 1) +
          (p->stream_k ? 2 * MKX_TP_SK_SLOTS : 0),
      p->stream_k ? p->sk_off + (size_t)MKX_TP_SK_SLOTS * MKX_TP_SK_SLOT_BYTES
                  : (size_t)p->r.M * (size_t)a->k * p->es,
      p->split};
}

int mkx_ag_gemm_gpu_plan(MKX_Comm c, const void *args,
                         const struct mkx_agreed *g, mkx_path path,
                         void **plan) {
  const mkx_ag_gemm_args *a = args;
  ag_plan *p = calloc(1, sizeof *p);
  if (!p) return mkx_error(MKX_ERR_NOMEM, "%s: plan", FN);
  mkx_tp_ag_rows_of(c, g, &p->r);
  p->es = MKX_Type_size(a->dtype);
  /* tiles this rank's rows meet (the first and last may be shared with
   * the neighbouring ranks' rows) */
  const int64_t ntiles =
      a->m_local > 0 ? (p->r.row1 - 1) / TILE - p->r.row0 / TILE + 1 : 0;
  /* ~8 chunks per peer: the first tiles arrive early, and each chunk is
   * still megabytes (copy-engine set-up per copy is microseconds) */
  p->chunk_tiles = ntiles > 8 ? (ntiles + 7) / 8 : 1;
  /* Start on the first tile that begins inside this rank's rows (own rows
   * land first, by a local copy; it may end in the next rank's first rows,
   * which come early), else on the tile holding its rows.  The tile with
   * the previous rank's last rows comes last in the rotated order: that
   * rank's copy engine delivers them last. */
  p->first_tile = (p->r.row0 + TILE - 1) / TILE;
  if (a->m_local == 0 || p->first_tile * TILE >= p->r.row1)
    p->first_tile = p->r.row0 / TILE;
  p->first_tile %= p->r.tiles_m;
  /* Agreed values only (M, size), so that every rank's pool takes the same
   * decision: src[] covers the largest flag copy (the own rows' tiles),
   * flags one per (source, tile). */
  p->split = path != MKX_PATH_TP_OVERLAP && path != MKX_PATH_TP_PULL;
  p->oneshot = path == MKX_PATH_TP_ONE_KERNEL;
  if (p->oneshot && !oneshot_fits(c, a, p->r.M, &p->chunk_kb, &p->nkc)) {
    free(p);
    return mkx_error(MKX_ERR_INTERNAL,
                     "%s: one-kernel plan for a shape that does not fit", FN);
  }
  p->stream_k = !p->split && c->opt.tp_stream_k;
  p->sk_off = ((size_t)p->r.M * (size_t)a->k * p->es + 255) & ~(size_t)255;
  p->pull = path == MKX_PATH_TP_PULL;
  p->fp8 = mkx_is_fp8(a->dtype);
  p->s_cols = mkx_scales_row_floats(a->sc.layout, a->k);
  /* after the gathered A; reading A in place, nothing before them */
  p->s_off = p->pull && p->fp8 ? 0 : p->sk_off;
  int rc = p->pull ? pull_maps(c, a, p) : MKX_SUCCESS;
  if (p->fp8 && !p->pull && path == MKX_PATH_TP_PULL) {
    p->split = 1; /* fp8 has no overlapped form: the rows move instead */
    p->s_off = p->sk_off;
  }
  if (rc == MKX_SUCCESS && p->fp8)
    rc = mkx_tp_fp8_host_make(&p->host, MKX_TP_OP_AG, a, 0, FN);
  mkx_fused_need need = need_of(c, a, p);
  if (rc == MKX_SUCCESS) rc = mkx_fused_ws_acquire(c, &need, &p->ws);
  if (rc != MKX_SUCCESS) {
    mkx_symm_buf_free(&p->areg);
    mkx_tp_fp8_host_free(&p->host);
    free(p);
    return rc;
  }
  *plan = p;
  return MKX_SUCCESS;
}

void mkx_ag_gemm_gpu_free(MKX_Comm c, void *plan) {
  ag_plan *p = plan;
  (void)c;
  if (!p) return;
  mkx_fused_ws_release(p->ws);
  mkx_symm_buf_free(&p->areg);
  mkx_tp_fp8_host_free(&p->host);
  free(p);
}

/* Rows [g0, g1) of the gathered A (this rank's, row0 <= g0 < g1 <= row1)
 * into node rank lq's gathered A (the data of ws), then the epoch into
 * lq's flags [this rank][tile] of every tile those rows meet, on stream
 * s: stream order makes the flags land after the rows.  The caller passes
 * every tile's rows of this rank in one piece (chunks end on tile
 * boundaries or at row1), so a flag is set only once all of this rank's
 * rows of its tile are there. */
static int push_rows(MKX_Comm c, const mkx_fused_ws *ws,
                     const mkx_tp_ag_rows *r, const mkx_ag_gemm_args *a, int lq,
                     int64_t g0, int64_t g1, cudaStream_t s) {
  const int me = c->place.local_rank;
  const size_t es = MKX_Type_size(a->dtype), row = (size_t)a->k * es;
  const int64_t r0 = g0 - r->row0, nrows = g1 - g0;
  char *dst = mkx_fused_ws_data(ws, lq) + (size_t)g0 * row;
  const char *src = (const char *)a->A + (size_t)r0 * (size_t)a->lda * es;
  cudaError_t e =
      a->lda == a->k
          ? cudaMemcpyAsync(dst, src, row * (size_t)nrows,
                            cudaMemcpyDeviceToDevice, s)
          : cudaMemcpy2DAsync(dst, row, src, (size_t)a->lda * es, row,
                              (size_t)nrows, cudaMemcpyDeviceToDevice, s);
  MKX_TRY(mkx_cuda_rc(e, FN, "copy of A rows"));
  const int64_t t0 = g0 / TILE, t1 = (g1 - 1) / TILE; /* tiles met */
  int *flags = mkx_fused_ws_flags(ws, lq) + c->rank * r->tiles_m + t0;
  const int *epoch = mkx_fused_ws_word(ws, me, MKX_FUSED_OFF_SRC);
  e = cudaMemcpyAsync(flags, epoch, sizeof(int) * (size_t)(t1 - t0 + 1),
                      cudaMemcpyDeviceToDevice, s);
  return mkx_cuda_rc(e, FN, "copy of ready flags");
}

int mkx_tp_ag_push_peers(MKX_Comm c, const mkx_fused_ws *ws,
                         const mkx_tp_ag_rows *r, int64_t chunk_tiles,
                         const mkx_ag_gemm_args *a, cudaStream_t st) {
  const int G = c->place.local_size, me = c->place.local_rank;
  MKX_TRY(mkx_cuda_rc(cudaEventRecord(ws->ev_fork, st), FN, "fork"));
  for (int i = 1; i < G; i++) {
    cudaStream_t s = ws->side[i];
    MKX_TRY(
        mkx_cuda_rc(cudaStreamWaitEvent(s, ws->ev_fork, 0), FN, "fork wait"));
    /* chunks of chunk_tiles tiles of the gathered A: the first starts at
     * row0 (maybe inside a tile), every other one on a tile boundary; each
     * ends on a tile boundary or at row1 */
    for (int64_t g0 = r->row0, g1; g0 < r->row1; g0 = g1) {
      g1 = (g0 / TILE + chunk_tiles) * TILE;
      if (g1 > r->row1) g1 = r->row1;
      MKX_TRY(push_rows(c, ws, r, a, (me + i) % G, g0, g1, s));
    }
    MKX_TRY(mkx_cuda_rc(cudaEventRecord(ws->ev_join[i], s), FN, "join"));
  }
  return MKX_SUCCESS;
}

int mkx_tp_ag_join_peers(MKX_Comm c, const mkx_fused_ws *ws, cudaStream_t st) {
  for (int i = 1; i < c->place.local_size; i++)
    MKX_TRY(mkx_cuda_rc(cudaStreamWaitEvent(st, ws->ev_join[i], 0), FN,
                        "join wait"));
  return MKX_SUCCESS;
}

/* The gated GEMM on this rank's gathered A. */
static void gemm_desc(MKX_Comm c, const ag_plan *p, const mkx_ag_gemm_args *a,
                      mkx_tp_ag_desc *dp) {
  const int me = c->place.local_rank;
  mkx_tp_ag_desc d;
  memset(&d, 0, sizeof d);
  d.m = p->r.M;
  d.n = a->n;
  d.k = a->k;
  d.a = mkx_fused_ws_data(p->ws, me);
  d.lda = a->k;
  d.b = a->B;
  d.ldb = a->ldb;
  d.b_kmajor = a->transb == MKX_TRANS;
  d.c = a->C;
  d.ldc = a->ldc;
  d.ab_type = mkx_fused_gemm_type(a->dtype);
  d.c_type = mkx_fused_gemm_type(a->ctype);
  d.flags = mkx_fused_ws_flags(p->ws, me);
  d.epoch = mkx_fused_ws_word(p->ws, me, MKX_FUSED_OFF_EPOCH);
  d.size = c->size;
  for (int q = 0; q <= c->size; q++) d.bnd[q] = p->r.bnd[q];
  d.first_tile_m = (int)p->first_tile;
  mkx_fused_sync_fill(c, p->ws, 0, &d.sync);
  *dp = d;
}

/* in_place: the tiles of own rows only come from A itself. */
static int run_gemm(MKX_Comm c, const ag_plan *p, const mkx_ag_gemm_args *a,
                    int in_place, cudaStream_t st) {
  mkx_tp_ag_desc d;
  gemm_desc(c, p, a, &d);
  if (in_place && p->stream_k) { /* slots and flags after the tiles' */
    d.sk_part =
        (float *)(mkx_fused_ws_data(p->ws, c->place.local_rank) + p->sk_off);
    d.sk_flags =
        mkx_fused_ws_flags(p->ws, c->place.local_rank) + c->size * p->r.tiles_m;
  }
  if (in_place && p->r.own_t1 > p->r.own_t0) {
    d.a_own = a->A;
    d.lda_own = a->lda;
    d.own_row0 = p->r.row0;
    d.own_rows = a->m_local;
    d.own_t0 = (int)p->r.own_t0;
    d.own_t1 = (int)p->r.own_t1;
  }
  return mkx_fused_launch_rc(mkx_tp_ag_gemm(&d, st), FN, "gated GEMM");
}

int mkx_tp_ag_push_own_edges(MKX_Comm c, const mkx_fused_ws *ws,
                             const mkx_tp_ag_rows *r, const mkx_ag_gemm_args *a,
                             cudaStream_t st) {
  const int me = c->place.local_rank;
  if (a->m_local == 0) return MKX_SUCCESS;
  if (r->own_t1 == r->own_t0)
    return push_rows(c, ws, r, a, me, r->row0, r->row1, st);
  const int64_t in0 = r->own_t0 * TILE, in1 = r->own_t1 * TILE;
  if (r->row0 < in0) MKX_TRY(push_rows(c, ws, r, a, me, r->row0, in0, st));
  if (in1 < r->row1) MKX_TRY(push_rows(c, ws, r, a, me, in1, r->row1, st));
  return MKX_SUCCESS;
}

/* The split path's copy: this rank's rows into every rank's gathered A and
 * its flags, by one kernel after the ranks meet; wait_all: and until every
 * rank's rows are here (a GEMM without the flag gate follows). */
static void push_desc(MKX_Comm c, const ag_plan *p, const mkx_ag_gemm_args *a,
                      int wait_all, mkx_tp_split_ag_desc *dp) {
  mkx_tp_split_ag_desc d;
  memset(&d, 0, sizeof d);
  d.a = a->A;
  d.lda = a->m_local > 0 ? a->lda : a->k; /* a rank with no rows: any lda */
  d.rows = a->m_local;
  d.k = p->pull ? 0 : a->k; /* pull: only the rows' scales move */
  d.esz = (int)p->es;
  d.row0 = p->r.row0;
  for (int lq = 0; lq < c->place.local_size; lq++) {
    d.gathered[lq] = mkx_fused_ws_data(p->ws, lq);
    d.flags[lq] = mkx_fused_ws_flags(p->ws, lq);
  }
  d.tiles_m = (int)p->r.tiles_m;
  if (a->m_local > 0) {
    d.t0 = (int)(p->r.row0 / TILE);
    d.t1 = (int)((p->r.row1 - 1) / TILE + 1);
  }
  d.wait_all = wait_all;
  if (p->s_cols) {
    d.sa = a->sc.a;
    d.sa_ld = a->sc.layout == MKX_SCALE_TENSOR ? 0 : p->s_cols;
    d.s_cols = p->s_cols;
    d.s_off = p->s_off;
  }
  mkx_fused_sync_fill(c, p->ws, 0, &d.sync);
  *dp = d;
}

static int push_split(MKX_Comm c, const ag_plan *p, const mkx_ag_gemm_args *a,
                      int wait_all, cudaStream_t st) {
  mkx_tp_split_ag_desc d;
  push_desc(c, p, a, wait_all, &d);
  return mkx_fused_launch_rc(mkx_tp_split_push(&d, st), FN, "copy of A rows");
}

/* The split path in one kernel: the copy in K chunks and the GEMM. */
static int oneshot_run(MKX_Comm c, const ag_plan *p, const mkx_ag_gemm_args *a,
                       cudaStream_t st) {
  mkx_tp_ag1_desc d;
  gemm_desc(c, p, a, &d.gemm);
  push_desc(c, p, a, 0, &d.push);
  d.chunk_kb = p->chunk_kb;
  d.nkc = p->nkc;
  mkx_path_count(MKX_PATH_TP_ONE_KERNEL);
  return mkx_fused_launch_rc(mkx_tp_ag1(&d, st), FN, "AllGather+GEMM kernel");
}

/* fp8: the rows and their scales, then once every rank's are here the fp8
 * GEMM on the gathered A with its scales, one record per row (a per-tensor
 * scale of A, one per rank, is a row scale of the gathered A). */
static int fp8_run(MKX_Comm c, const ag_plan *p, const mkx_ag_gemm_args *a,
                   cudaStream_t st) {
  const int me = c->place.local_rank;
  mkx_gemm_desc g;
  mkx_tp_gemm_of_ag(a, mkx_fused_ws_data(p->ws, me), p->r.M, &g);
  const mkx_gemm_scales s = mkx_tp_fp8_gathered_scales(
      &a->sc, a->k, (const float *)(mkx_fused_ws_data(p->ws, me) + p->s_off));
  MKX_TRY(push_split(c, p, a, 1, st));
  return mkx_tp_fp8_gemm(c, &g, &s, st, FN);
}

/* The split path: one kernel, or the copy, then the gated engine, or
 * cuBLAS (option tp_split_gemm) once every rank's rows are here. */
static int split_run(MKX_Comm c, const ag_plan *p, const mkx_ag_gemm_args *a,
                     cudaStream_t st) {
  if (p->fp8) return fp8_run(c, p, a, st);
  if (p->oneshot) return oneshot_run(c, p, a, st);
  mkx_gemm_desc g; /* the whole product from the gathered A */
  mkx_tp_gemm_of_ag(a, mkx_fused_ws_data(p->ws, c->place.local_rank), p->r.M,
                    &g);
  const int blas = mkx_tp_split_blas(c, &g);
  MKX_TRY(push_split(c, p, a, blas, st));
  return blas ? mkx_tp_split_gemm(c, &g, st, FN) : run_gemm(c, p, a, 0, st);
}

/* Rows [r0, r1) of the gathered A into A_out, from src (leading dimension
 * ld_src bytes, holding row r0 first). */
static cudaError_t out_rows(const ag_plan *p, const mkx_ag_gemm_args *a,
                            int64_t r0, int64_t r1, const void *src,
                            size_t ld_src, cudaStream_t st) {
  if (r1 <= r0) return cudaSuccess;
  const size_t ld = (size_t)a->ld_aout * p->es;
  return cudaMemcpy2DAsync((char *)a->A_out + (size_t)r0 * ld, ld, src, ld_src,
                           (size_t)a->k * p->es, (size_t)(r1 - r0),
                           cudaMemcpyDeviceToDevice, st);
}

/* The gathered A into A_out; own: this rank's rows from A instead (the
 * overlapped path leaves most of them out of the gathered A). */
static int copy_out(const ag_plan *p, const mkx_ag_gemm_args *a, int me,
                    int own, cudaStream_t st) {
  const size_t row = (size_t)a->k * p->es;
  const char *gathered = mkx_fused_ws_data(p->ws, me);
  cudaError_t e;
  if (!own) {
    e = out_rows(p, a, 0, p->r.M, gathered, row, st);
  } else {
    e = out_rows(p, a, 0, p->r.row0, gathered, row, st);
    if (e == cudaSuccess)
      e = out_rows(p, a, p->r.row0, p->r.row1, a->A, (size_t)a->lda * p->es,
                   st);
    if (e == cudaSuccess)
      e = out_rows(p, a, p->r.row1, p->r.M, gathered + (size_t)p->r.row1 * row,
                   row, st);
  }
  return mkx_cuda_rc(e, FN, "copy to A_out");
}

/* The gathered scales into a_out (dense, a record per row). */
static int scales_out(MKX_Comm c, const ag_plan *p, const mkx_ag_gemm_args *a,
                      cudaStream_t st) {
  const char *src = mkx_fused_ws_data(p->ws, c->place.local_rank) + p->s_off;
  return mkx_cuda_rc(
      cudaMemcpyAsync(a->sc.a_out, src,
                      sizeof(float) * (size_t)p->r.M * (size_t)p->s_cols,
                      cudaMemcpyDeviceToDevice, st),
      FN, "copy to scales->a_out");
}

/* Pull: the GEMM loads every rank's rows from its own A, A_out takes them
 * from there too (fp8: a_out the gathered scale records), then the ranks
 * meet: after it no rank reads a peer's A (it may change) nor its own
 * records (a peer's next push may write them). */
static int pull_run(MKX_Comm c, const ag_plan *p, const mkx_ag_gemm_args *a,
                    cudaStream_t st) {
  mkx_tp_ag_pull_desc d;
  memset(&d, 0, sizeof d);
  d.size = c->size;
  d.m = p->r.M;
  d.n = a->n;
  d.k = a->k;
  for (int q = 0; q < c->size; q++) {
    const int lq = c->place.local_rank_of[q];
    d.bnd[q] = p->r.bnd[q];
    d.a[q] = p->areg.peer[lq];
    d.lda[q] = p->peer_lda[lq];
  }
  d.bnd[c->size] = p->r.M;
  d.b = a->B;
  d.ldb = a->ldb;
  d.b_kmajor = a->transb == MKX_TRANS;
  d.ab_type = mkx_fused_gemm_type(a->dtype);
  d.c_type = mkx_fused_gemm_type(a->ctype);
  d.c = a->C;
  d.ldc = a->ldc;
  /* it waits for no one: every SM the rank has (mkx_tp_rs_pull's note) */
  d.ctas = c->share.ctx_sms;
  mkx_gemm_desc g;
  mkx_tp_gemm_of_ag(a, NULL, p->r.M, &g);
  d.bn = mkx_gemm_pick_tile(&g, d.ctas > 0 ? d.ctas : c->share.dev_sms) ==
                 MKX_GEMM_TILE_128x256
             ? 256
             : 128;
  if (p->fp8) { /* 128 x 128 tiles; A's scales as gathered records */
    d.bn = 128;
    d.sc = mkx_tp_fp8_gathered_scales(
        &a->sc, a->k,
        (const float *)(mkx_fused_ws_data(p->ws, c->place.local_rank) +
                        p->s_off));
  }
  MKX_TRY(mkx_fused_launch_rc(mkx_tp_ag_pull(&d, st), FN,
                              "GEMM on the ranks' own A"));
  for (int q = 0; a->A_out && q < c->size; q++)
    MKX_TRY(mkx_cuda_rc(out_rows(p, a, d.bnd[q], d.bnd[q + 1], d.a[q],
                                 (size_t)d.lda[q] * p->es, st),
                        FN, "copy to A_out"));
  /* mkx.h: a_out is written with A_out only */
  if (p->fp8 && a->A_out && a->sc.a_out && p->s_cols)
    MKX_TRY(scales_out(c, p, a, st));
  return mkx_tp_pull_end(c, p->ws, FN, st);
}

/* fp8 read in place: every rank's rows' scale records into every rank's
 * workspace and a meeting (the split path's push without the rows: every
 * rank's A is ready then), the fp8 GEMM on the ranks' own A, the meeting
 * after it. */
static int fp8_pull_start(MKX_Comm c, const ag_plan *p,
                          const mkx_ag_gemm_args *a, cudaStream_t st) {
  MKX_TRY(mkx_tp_fp8_scales_ok(c, &p->host, &a->sc, p->ws, FN, st));
  MKX_TRY(mkx_fused_begin_met(c, p->ws, FN, (MKX_Stream)st, MKX_PATH_TP_PULL));
  const mkx_symm_buf *maps[] = {&p->areg};
  MKX_TRY(mkx_tp_pin_if_captured(c, st, FN, maps, 1));
  MKX_TRY(push_split(c, p, a, 1, st));
  MKX_TRY(pull_run(c, p, a, st));
  return mkx_fused_end(p->ws, (MKX_Stream)st);
}

int mkx_ag_gemm_gpu_start(MKX_Comm c, void *plan, const void *args,
                          MKX_Stream stream) {
  ag_plan *p = plan;
  const mkx_ag_gemm_args *a = args;
  cudaStream_t st = (cudaStream_t)stream;
  if (p->split) {
    if (p->fp8)
      MKX_TRY(mkx_tp_fp8_scales_ok(c, &p->host, &a->sc, p->ws, FN, st));
    MKX_TRY(mkx_fused_begin_split(c, p->ws, FN, stream));
    MKX_TRY(split_run(c, p, a, st));
    if (a->A_out) MKX_TRY(copy_out(p, a, c->place.local_rank, 0, st));
    /* mkx.h: a_out is written with A_out only */
    if (p->fp8 && a->A_out && a->sc.a_out && p->s_cols)
      MKX_TRY(scales_out(c, p, a, st));
    return mkx_fused_end(p->ws, stream);
  }
  if (p->pull && p->fp8) return fp8_pull_start(c, p, a, st);
  if (p->pull) {
    MKX_TRY(mkx_fused_begin(c, p->ws, FN, stream, 1, MKX_PATH_TP_PULL));
    /* a graph may replay the loads from the peers' A long after this */
    const mkx_symm_buf *maps[] = {&p->areg};
    MKX_TRY(mkx_tp_pin_if_captured(c, st, FN, maps, 1));
    MKX_TRY(pull_run(c, p, a, st));
    return mkx_fused_end(p->ws, stream);
  }
  MKX_TRY(mkx_fused_begin(c, p->ws, FN, stream, (int)p->r.tiles_m,
                          MKX_PATH_TP_OVERLAP));
  MKX_TRY(mkx_tp_ag_push_peers(c, p->ws, &p->r, p->chunk_tiles, a, st));
  /* Own rows of shared tiles on the user's stream, before the GEMM: a
   * device-local copy may run as a kernel, which must not wait behind the
   * persistent GEMM. */
  MKX_TRY(mkx_tp_ag_push_own_edges(c, p->ws, &p->r, a, st));
  MKX_TRY(run_gemm(c, p, a, 1, st));
  MKX_TRY(mkx_tp_ag_join_peers(c, p->ws, st));
  if (a->A_out) MKX_TRY(copy_out(p, a, c->place.local_rank, 1, st));
  return mkx_fused_end(p->ws, stream);
}
#else
typedef int mkx_ag_gemm_gpu_unused; /* ISO C: not an empty unit */
#endif
