/* Device buffers on several nodes, option hier_gemm=nvlink (the
 * first step of docs/inter-node.md): the node's part of each call is the
 * single-node GPU call (fused over NVLink where it fits) on a communicator
 * of the node's ranks, and only the network part goes through the host
 * path's column collectives (src/host/hier.c).
 *
 * N nodes of G ranks; local rank g of every node forms column g, whose rows
 * R_g are the blocks of the column's ranks, nodes in order.  With the rows
 * permuted so that R_0, R_1, ... follow each other, the node's even split
 * of M over its G ranks gives rank g exactly |R_g| rows when ranks are
 * numbered node by node (checked; else the staged path).  So:
 *   ReduceScatter: permuted A -> the node's ReduceScatter in fp32 (GPU g
 *     holds its node's sum of R_g) -> column reduce over the network, in
 *     up to 4 column slices of C so that the GPUs work on slice s + 1 while
 *     slice s crosses the network;
 *   AllReduce: the same, then the host path's allgather of each slice;
 *   AllGather+GEMM: column gather over the network (R_g) -> the node's
 *     AllGather+GEMM of R_g -> product (and A_out) rows put back in order,
 *     in up to 4 chunks of every rank's rows, the GPUs multiplying chunk c
 *     while chunk c + 1 crosses the network.
 * Network bytes are those of hier_gemm=gpu, the minimum.  Blocking, as
 * hier_gemm=gpu. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "core/error.h"
#include "host/dtype.h"
#include "host/hier.h"
#include "host/xfer.h"
#include "ops/op.h"
#include "ops/path.h"

#if HAVE_CUDA
#include "core/cuda_rc.h"
#include "ops/fused/fused.h"
#include "ops/nodes/hier.h"

#define op_name mkx_hier_op_name

static int cuda_rc(cudaError_t e, int op, const char *what) {
  return mkx_cuda_rc(e, op_name(op), what);
}

/* Rows of column `local`: its ranks' rows, over every node. */
static int64_t column_rows(MKX_Comm c, const int64_t *rows, int local) {
  int64_t s = 0;
  for (int q = 0; q < c->size; q++)
    if (c->place.local_rank_of[q] == local) s += rows[q];
  return s;
}

int mkx_hier_nvlink_check(MKX_Comm c, int op, const void *args,
                          const struct mkx_agreed *g) {
  (void)g;
  for (int k = 0; k < c->place.num_nodes; k++)
    for (int l = 0; l < c->place.local_size; l++)
      if (mkx_placement_rank_at(&c->place, c->size, k, l) < 0)
        return mkx_error(MKX_ERR_UNSUPPORTED,
                         "%s: hier_gemm=nvlink: nodes "
                         "of unequal size",
                         op_name(op));
  if (op != MKX_TP_OP_AG &&
      !mkx_hier_split_matches(c, ((const mkx_rs_ar_args *)args)->M))
    return mkx_error(MKX_ERR_UNSUPPORTED,
                     "%s: hier_gemm=nvlink needs ranks "
                     "numbered node by node",
                     op_name(op));
  return MKX_SUCCESS;
}

/* Every rank's rows (AG: m_local; RS/AR: its block of M). */
static int rows_of_ranks(MKX_Comm c, int op, const void *args,
                         const struct mkx_agreed *g, int64_t **out) {
  int64_t *rows = calloc((size_t)c->size, sizeof *rows), first;
  if (!rows) return mkx_error(MKX_ERR_NOMEM, "%s: plan", op_name(op));
  for (int q = 0; q < c->size; q++) {
    if (op == MKX_TP_OP_AG)
      rows[q] = g->local[q];
    else
      MKX_Block_range(((const mkx_rs_ar_args *)args)->M, c->size, q, &first,
                      &rows[q]);
  }
  *out = rows;
  return MKX_SUCCESS;
}

/* Memory and copies: on the GPU, or (p->host, mkx_hier_nvlink_host: the
 * CPU tests of this file's logic) in host memory with the host path's
 * calls on the node communicator. */
static int x_alloc(const hg_plan *p, void **ptr, size_t bytes, int op) {
  if (!p->host) return cuda_rc(cudaMalloc(ptr, bytes + 16), op, "cudaMalloc");
  *ptr = malloc(bytes + 16);
  return *ptr ? MKX_SUCCESS
              : mkx_error(MKX_ERR_NOMEM, "%s: buffers", op_name(op));
}
static int x_alloc_pinned(const hg_plan *p, void **ptr, size_t bytes, int op) {
  if (p->host) return x_alloc(p, ptr, bytes, op);
  return cuda_rc(cudaMallocHost(ptr, bytes + 16), op, "cudaMallocHost");
}
static void x_free(const hg_plan *p, void *ptr, int pinned) {
  if (p->host)
    free(ptr);
  else if (pinned)
    MKX_CUDA_RELEASE(cudaFreeHost(ptr));
  else
    MKX_CUDA_RELEASE(cudaFree(ptr));
}
static int x_copy2d(const hg_plan *p, void *dst, size_t dpitch, const void *src,
                    size_t spitch, size_t width, size_t rows, cudaStream_t st) {
  if (rows == 0 || width == 0) return MKX_SUCCESS;
  if (!p->host)
    return cuda_rc(cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, rows,
                                     cudaMemcpyDefault, st),
                   p->op, "copy of rows");
  for (size_t r = 0; r < rows; r++)
    memcpy((char *)dst + r * dpitch, (const char *)src + r * spitch, width);
  return MKX_SUCCESS;
}
static int x_sync(const hg_plan *p, cudaStream_t st) {
  if (p->host) return MKX_SUCCESS;
  return cuda_rc(cudaStreamSynchronize(st), p->op, "stream synchronise");
}
/* A point in the stream to wait for later (host: everything is done). */
static int x_mark(const hg_plan *p, cudaEvent_t *ev, cudaStream_t st) {
  if (p->host) return MKX_SUCCESS;
  MKX_TRY(cuda_rc(cudaEventCreateWithFlags(ev, cudaEventDisableTiming), p->op,
                  "cudaEventCreate"));
  return cuda_rc(cudaEventRecord(*ev, st), p->op, "cudaEventRecord");
}
static int x_wait(const hg_plan *p, cudaEvent_t ev) {
  if (p->host) return MKX_SUCCESS;
  return cuda_rc(cudaEventSynchronize(ev), p->op, "event synchronise");
}

/* Device buffers: RS/AR the permuted A and the node's column sums; AG the
 * column's rows of A, the permuted product and (A_out) gathered A. */
static int alloc_bufs(MKX_Comm c, int op, const void *args, int64_t M,
                      hg_plan *p) {
  if (op == MKX_TP_OP_AG) {
    const mkx_ag_gemm_args *a = args;
    const size_t es = MKX_Type_size(a->dtype), cs = MKX_Type_size(a->ctype);
    const size_t row = (size_t)a->k * es;
    MKX_TRY(x_alloc(p, &p->dtmp, (size_t)p->col_rows * row, op));
    MKX_TRY(x_alloc(p, &p->dcol, (size_t)M * (size_t)a->n * cs, op));
    if (a->A_out) MKX_TRY(x_alloc(p, &p->daout, (size_t)M * row, op));
    MKX_TRY(x_alloc_pinned(p, (void **)&p->hsend,
                           (size_t)p->rows[c->rank] * row, op));
    return x_alloc_pinned(p, (void **)&p->hrows, (size_t)p->col_rows * row, op);
  }
  const mkx_rs_ar_args *a = args;
  const size_t es = MKX_Type_size(a->dtype);
  const size_t col = (size_t)p->col_rows * (size_t)a->n * 4;
  MKX_TRY(x_alloc(p, &p->dtmp, (size_t)a->M * (size_t)a->k_local * es, op));
  const size_t mine = (size_t)p->rows[c->rank] * (size_t)a->n;
  const size_t cs = MKX_Type_size(a->ctype);
  MKX_TRY(x_alloc(p, &p->dcol, col, op));
  MKX_TRY(x_alloc_pinned(p, (void **)&p->hsend, mine * 4, op));
  MKX_TRY(x_alloc_pinned(p, (void **)&p->hrows, mine * cs, op));
  if (op == MKX_TP_OP_AR)
    MKX_TRY(x_alloc_pinned(p, (void **)&p->hout,
                           (size_t)a->M * (size_t)a->n * cs, op));
  return x_alloc_pinned(p, (void **)&p->hcol, col, op);
}

void mkx_hier_nvlink_free(hg_plan *p) {
  if (!p) return;
  x_free(p, p->dtmp, 0);
  x_free(p, p->dcol, 0);
  x_free(p, p->daout, 0);
  x_free(p, p->hcol, 1);
  x_free(p, p->hsend, 1);
  x_free(p, p->hrows, 1);
  x_free(p, p->hout, 1);
  free(p->rows);
  free(p);
}

static int plan_make(MKX_Comm c, int op, const void *args,
                     const struct mkx_agreed *g, int host, void **out) {
  hg_plan *p = calloc(1, sizeof *p);
  if (p) p->host = host;
  int rc = p ? rows_of_ranks(c, op, args, g, &p->rows)
             : mkx_error(MKX_ERR_NOMEM, "%s: plan", op_name(op));
  if (rc == MKX_SUCCESS) rc = mkx_comm_node(c, &p->node); /* collective */
  if (rc == MKX_SUCCESS && p->node->rank != c->place.local_rank)
    rc = mkx_error(MKX_ERR_INTERNAL,
                   "%s: node communicator rank %d, local "
                   "rank %d",
                   op_name(op), p->node->rank, c->place.local_rank);
  if (rc == MKX_SUCCESS) {
    p->col_rows = column_rows(c, p->rows, c->place.local_rank);
    rc = alloc_bufs(c, op, args, g->total, p);
  }
  rc = mkx_comm_agree_rc(c, rc, op_name(op));
  if (rc != MKX_SUCCESS) {
    mkx_hier_nvlink_free(p);
    return rc;
  }
  p->op = op;
  p->nvlink = 1;
  *out = p;
  return MKX_SUCCESS;
}

int mkx_hier_nvlink_plan(MKX_Comm c, int op, const void *args,
                         const struct mkx_agreed *g, void **out) {
  return plan_make(c, op, args, g, 0, out);
}

/* Row blocks between rank order (a, lda) and column order (b, ldb): rank
 * q's rows[q] rows start at row first[q] of a; in b rank (node k, local l)
 * comes at position l, then k; to_col: a -> b, else b -> a. */
static int permute_rows(MKX_Comm c, const hg_plan *p, const int64_t *rows,
                        const int64_t *first, char *a, int64_t lda, char *b,
                        int64_t ldb, int64_t cols, size_t es, int to_col,
                        cudaStream_t st) {
  int64_t at = 0;
  for (int l = 0; l < c->place.local_size; l++)
    for (int k = 0; k < c->place.num_nodes; k++) {
      const int q = mkx_placement_rank_at(&c->place, c->size, k, l);
      const int64_t n = rows[q];
      char *ra = a + (size_t)first[q] * (size_t)lda * es;
      char *rb = b + (size_t)at * (size_t)ldb * es;
      at += n;
      const size_t pa = (size_t)lda * es, pb = (size_t)ldb * es;
      const size_t w = (size_t)cols * es;
      MKX_TRY(to_col ? x_copy2d(p, rb, pb, ra, pa, w, (size_t)n, st)
                     : x_copy2d(p, ra, pa, rb, pb, w, (size_t)n, st));
    }
  return MKX_SUCCESS;
}

/* The whole matrix: rank q's block starts after the ranks before it. */
static int permute(MKX_Comm c, const hg_plan *p, char *a, int64_t lda, char *b,
                   int64_t ldb, int64_t cols, size_t es, int to_col,
                   cudaStream_t st) {
  int64_t *first = malloc(sizeof *first * (size_t)c->size);
  if (!first)
    return mkx_error(MKX_ERR_NOMEM, "%s: row offsets", op_name(p->op));
  for (int q = 0; q < c->size; q++)
    first[q] = q ? first[q - 1] + p->rows[q - 1] : 0;
  int rc =
      permute_rows(c, p, p->rows, first, a, lda, b, ldb, cols, es, to_col, st);
  free(first);
  return rc;
}

#define MAX_SLICES MKX_HIER_MAX_SLICES
#define slices_of mkx_hier_slices

/* One slice's node part, enqueued: the node's ReduceScatter of the
 * permuted A times B's columns [j0, j1) into the slice's fp32 sums, then
 * those to the host. */
static int red_node(const hg_plan *p, const mkx_rs_ar_args *a, int64_t j0,
                    int64_t j1, float *colsum, cudaStream_t st) {
  const size_t bs = MKX_Type_size(a->dtype);
  const char *b =
      (const char *)a->B +
      (a->transb == MKX_TRANS ? (size_t)j0 * (size_t)a->ldb : (size_t)j0) * bs;
  float *dsum = (float *)p->dcol + (size_t)p->col_rows * (size_t)j0;
  const size_t len = (size_t)p->col_rows * (size_t)(j1 - j0);
  MKX_TRY(MKX_Gemm_reduce_scatter(p->dtmp, a->M, a->k_local, a->k_local, b,
                                  j1 - j0, a->ldb, a->transb, dsum, j1 - j0,
                                  a->dtype, MKX_FP32, MKX_ROW_MAJOR, p->node,
                                  (MKX_Stream)st));
  return x_copy2d(p, colsum + (size_t)p->col_rows * (size_t)j0, len * 4, dsum,
                  len * 4, len * 4, len > 0, st);
}

/* One slice's network part: the column reduce, rounding, and for AR the
 * allgather of the rounded blocks into `out`; RS leaves them in `conv`. */
static int red_net(MKX_Comm c, const hg_plan *p, const mkx_rs_ar_args *a,
                   int64_t j0, int64_t j1, const float *colsum, float *block,
                   char *conv, char *out) {
  const size_t cs = MKX_Type_size(a->ctype), w = (size_t)(j1 - j0);
  const int64_t mine = p->rows[c->rank];
  MKX_TRY(mkx_hier_column_reduce(c, MKX_FP32, colsum + (size_t)p->col_rows * j0,
                                 p->rows, j1 - j0, block));
  mkx_convert(MKX_FP32, block, 1, a->ctype, conv, 1, (size_t)mine * w);
  if (p->op != MKX_TP_OP_AR) return MKX_SUCCESS;
  return mkx_hier_allgather_rows(c, conv, p->rows, w * cs, out);
}

/* Every slice's result into C's columns, once the network is done with
 * them all: the stream still holds the later slices' node parts, which a
 * copy enqueued earlier would have waited behind. */
static int red_copy_out(MKX_Comm c, const hg_plan *p, const mkx_rs_ar_args *a,
                        const int64_t *j, int S, const char *conv,
                        const char *out, cudaStream_t st) {
  const size_t cs = MKX_Type_size(a->ctype);
  const int ar = p->op == MKX_TP_OP_AR;
  const int64_t rows = ar ? a->M : p->rows[c->rank];
  for (int s = 0; rows > 0 && s < S; s++) {
    const size_t w = (size_t)(j[s + 1] - j[s]);
    const char *src =
        ar ? out + (size_t)a->M * j[s] * cs : conv + (size_t)rows * j[s] * cs;
    MKX_TRY(x_copy2d(p, (char *)a->C + (size_t)j[s] * cs, (size_t)a->ldc * cs,
                     src, w * cs, w * cs, (size_t)rows, st));
  }
  return MKX_SUCCESS;
}

static int red_start(MKX_Comm c, hg_plan *p, const mkx_rs_ar_args *a,
                     cudaStream_t st) {
  const size_t es = MKX_Type_size(a->dtype), cs = MKX_Type_size(a->ctype);
  const size_t mine = (size_t)p->rows[c->rank];
  int64_t j[MAX_SLICES + 1];
  cudaEvent_t ev[MAX_SLICES] = {0};
  const int S = slices_of(a->n, j);
  float *colsum = p->hcol, *block = (float *)p->hsend;
  char *conv = p->hrows, *out = p->hout; /* out: AR's gathered blocks */
  int rc = permute(c, p, (char *)a->A, a->lda, p->dtmp, a->k_local, a->k_local,
                   es, 1, st);
  for (int s = 0; rc == MKX_SUCCESS && s < S; s++) {
    rc = red_node(p, a, j[s], j[s + 1], colsum, st);
    if (rc == MKX_SUCCESS) rc = x_mark(p, &ev[s], st);
  }
  /* slices in order, each waiting only for its own node part: the GPUs
   * work on the later slices meanwhile; every slice has its own host
   * buffers */
  for (int s = 0; s < S; s++) {
    if (rc == MKX_SUCCESS) rc = x_wait(p, ev[s]);
    rc = mkx_comm_agree_rc(c, rc, op_name(p->op));
    if (rc != MKX_SUCCESS) break;
    rc = red_net(c, p, a, j[s], j[s + 1], colsum, block + mine * j[s],
                 conv + mine * j[s] * cs,
                 out ? out + (size_t)a->M * j[s] * cs : NULL);
  }
  if (rc == MKX_SUCCESS) rc = red_copy_out(c, p, a, j, S, conv, out, st);
  const int src = x_sync(p, st);
  for (int s = 0; s < S; s++)
    if (ev[s]) MKX_CUDA_RELEASE(cudaEventDestroy(ev[s]));
  /* the last slice's failure, or the stream's, on every rank */
  return mkx_comm_agree_rc(c, rc != MKX_SUCCESS ? rc : src, op_name(p->op));
}

/* AllGather+GEMM in up to 4 chunks of every rank's rows (agreed from M):
 * the GPUs multiply chunk c while chunk c + 1 crosses the network. */
typedef struct ag_chunks {
  int S;
  int64_t *rows, *first, *col0,
      *out0; /* [S * size], [S * size], [S+1], [S+1] */
} ag_chunks;

static int64_t chunk_start(int64_t rows, int c, int S) { return rows * c / S; }

/* ch->S is set first (from the agreed M), so that every rank runs as
 * many chunk rounds whatever fails here. */
static int chunks_make(MKX_Comm c, const hg_plan *p, int64_t M, ag_chunks *ch) {
  const int P = c->size, me = c->place.local_rank;
  const int S = M / 256 < 1 ? 1 : M / 256 > 4 ? 4 : (int)(M / 256);
  ch->S = S;
  ch->rows = calloc((size_t)(2 * S * P + 2 * (S + 1)), sizeof(int64_t));
  if (!ch->rows) return mkx_error(MKX_ERR_NOMEM, "%s: chunks", op_name(p->op));
  ch->first = ch->rows + S * P;
  ch->col0 = ch->first + S * P;
  ch->out0 = ch->col0 + S + 1;
  int64_t off = 0; /* rank q's first row */
  for (int q = 0; q < P; q++) {
    for (int k = 0; k < S; k++) {
      const int64_t a = chunk_start(p->rows[q], k, S);
      ch->rows[k * P + q] = chunk_start(p->rows[q], k + 1, S) - a;
      ch->first[k * P + q] = off + a;
    }
    off += p->rows[q];
  }
  for (int k = 0; k < S; k++) {
    int64_t all = 0;
    for (int q = 0; q < P; q++) all += ch->rows[k * P + q];
    ch->col0[k + 1] = ch->col0[k] + column_rows(c, ch->rows + k * P, me);
    ch->out0[k + 1] = ch->out0[k] + all;
  }
  return MKX_SUCCESS;
}

/* Chunk k: its column's rows over the network, to the GPU, the node's
 * AllGather+GEMM, its rows of C (and A_out) put back in place. */
static int ag_chunk(MKX_Comm c, hg_plan *p, const mkx_ag_gemm_args *a,
                    const ag_chunks *ch, int k, const char *send, char *col,
                    cudaStream_t st) {
  const size_t es = MKX_Type_size(a->dtype), row = (size_t)a->k * es;
  const size_t cs = MKX_Type_size(a->ctype);
  const int P = c->size;
  const int64_t *rows = ch->rows + k * P, *first = ch->first + k * P;
  const int64_t ncol = ch->col0[k + 1] - ch->col0[k];
  char *dcol = (char *)p->dtmp + (size_t)ch->col0[k] * row;
  char *dc = (char *)p->dcol + (size_t)ch->out0[k] * (size_t)a->n * cs;
  char *dao = p->daout ? (char *)p->daout + (size_t)ch->out0[k] * row : NULL;
  char *hcol = col + (size_t)ch->col0[k] * row;
  MKX_TRY(mkx_hier_column_gather(
      c, send + (size_t)chunk_start(p->rows[c->rank], k, ch->S) * row, rows,
      row, hcol));
  MKX_TRY(x_copy2d(p, dcol, row, hcol, row, row, (size_t)ncol, st));
  MKX_TRY(MKX_Allgather_gemm(dcol, ncol, a->k, a->k, a->B, a->n, a->ldb,
                             a->transb, dc, a->n, dao, a->k, a->dtype, a->ctype,
                             MKX_ROW_MAJOR, p->node, (MKX_Stream)st));
  MKX_TRY(
      permute_rows(c, p, rows, first, a->C, a->ldc, dc, a->n, a->n, cs, 0, st));
  if (!a->A_out) return MKX_SUCCESS;
  return permute_rows(c, p, rows, first, a->A_out, a->ld_aout, dao, a->k, a->k,
                      es, 0, st);
}

static int ag_start(MKX_Comm c, hg_plan *p, const mkx_ag_gemm_args *a,
                    cudaStream_t st) {
  const size_t es = MKX_Type_size(a->dtype), row = (size_t)a->k * es;
  int64_t M = 0;
  for (int q = 0; q < c->size; q++) M += p->rows[q];
  ag_chunks ch = {0};
  char *send = p->hsend, *col = p->hrows;
  int rc = chunks_make(c, p, M, &ch);
  if (rc == MKX_SUCCESS)
    rc = x_copy2d(p, send, row, a->A, (size_t)a->lda * es, row,
                  (size_t)a->m_local, st);
  if (rc == MKX_SUCCESS) rc = x_sync(p, st);
  /* every chunk's network part is collective: the ranks agree before each */
  for (int k = 0; k < ch.S; k++) {
    rc = mkx_comm_agree_rc(c, rc, op_name(p->op));
    if (rc != MKX_SUCCESS) break;
    rc = ag_chunk(c, p, a, &ch, k, send, col, st);
  }
  /* the copies above read the host rows: done before the next start */
  const int src = x_sync(p, st);
  free(ch.rows);
  /* a node whose call failed must not leave the others reporting success */
  return mkx_comm_agree_rc(c, rc != MKX_SUCCESS ? rc : src, op_name(p->op));
}

int mkx_hier_nvlink_start(MKX_Comm c, hg_plan *p, const void *args,
                          cudaStream_t st) {
  mkx_path_count(MKX_PATH_HIER_NVLINK);
  if (p->op == MKX_TP_OP_AG) return ag_start(c, p, args, st);
  return red_start(c, p, args, st);
}

int mkx_hier_nvlink_host(MKX_Comm c, int op, const void *args) {
  const int64_t mine = op == MKX_TP_OP_AG
                           ? ((const mkx_ag_gemm_args *)args)->m_local
                           : ((const mkx_rs_ar_args *)args)->k_local;
  struct mkx_agreed g = {0};
  void *plan = NULL;
  g.local = calloc((size_t)c->size, sizeof *g.local);
  int rc = g.local ? mkx_comm_exchange(c, &mine, g.local, sizeof mine,
                                       "the ranks' sizes")
                   : mkx_error(MKX_ERR_NOMEM, "%s: sizes", op_name(op));
  for (int q = 0; rc == MKX_SUCCESS && q < c->size; q++) g.total += g.local[q];
  if (rc == MKX_SUCCESS) rc = mkx_hier_nvlink_check(c, op, args, &g);
  rc = mkx_comm_agree_rc(c, rc, op_name(op));
  if (rc == MKX_SUCCESS) rc = plan_make(c, op, args, &g, 1, &plan);
  if (rc == MKX_SUCCESS) rc = mkx_hier_nvlink_start(c, plan, args, NULL);
  mkx_hier_nvlink_free(plan);
  free(g.local);
  return rc;
}
#else
typedef int mkx_hier_nvlink_unused; /* ISO C: not an empty unit */
#endif
