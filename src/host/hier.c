/* Hierarchical host collectives; see hier.h.  N nodes of G ranks: rank
 * (j, l) is the l-th rank of node j; its "column" is the ranks (k, l) of
 * every node k, the ones it talks to over the network. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include "boot/oob_mpi.h"
#include "core/comm_net.h"
#include "core/error.h"
#include "host/hier.h"
#include "host/xfer.h"

typedef struct grid {
  int N, G, j, l;
  int *at;      /* [N * G]: the rank of (node, local rank) */
  int64_t *off; /* [p + 1]: first row of each rank, rank order */
} grid;

int mkx_hier_usable(MKX_Comm c) {
  /* Columns pair rank l of every node: all nodes need the same size. */
  return c->net != NULL && c->node_mpi != MPI_COMM_NULL && c->place.equal_nodes;
}

static int grid_init(MKX_Comm c, const int64_t *rows, mkx_arena *ar, grid *g) {
  g->N = c->place.num_nodes;
  g->G = c->place.local_size;
  g->j = c->place.node;
  g->l = c->place.local_rank;
  MKX_TRY(mkx_arena_array(ar, g->N * g->G, 1, sizeof(int), (void **)&g->at,
                          "node grid"));
  MKX_TRY(mkx_arena_array(ar, c->size + 1, 1, sizeof(int64_t), (void **)&g->off,
                          "row offsets"));
  for (int q = 0; q < c->size; q++)
    g->at[c->place.node_of_rank[q] * g->G + c->place.local_rank_of[q]] = q;
  g->off[0] = 0;
  for (int q = 0; q < c->size; q++) g->off[q + 1] = g->off[q] + rows[q];
  return MKX_SUCCESS;
}

static int64_t rows_of(const grid *g, int node, int local) {
  int q = g->at[node * g->G + local];
  return g->off[q + 1] - g->off[q];
}

/* Rows of the column of local rank `local`, over every node. */
static int64_t column_rows(const grid *g, int local) {
  int64_t s = 0;
  for (int k = 0; k < g->N; k++) s += rows_of(g, k, local);
  return s;
}

static int fits_int(int64_t bytes, const char *what) {
  if (bytes <= INT_MAX) return MKX_SUCCESS;
  return mkx_error(MKX_ERR_UNSUPPORTED,
                   "%s: %lld bytes exceed MPI's int "
                   "count",
                   what, (long long)bytes);
}

/* Byte counts and displacements of one intra-node exchange. */
typedef struct counts {
  int *cnt, *dsp;
} counts;

static int counts_init(const grid *g, mkx_arena *ar, counts *k) {
  MKX_TRY(
      mkx_arena_array(ar, g->G, 1, sizeof(int), (void **)&k->cnt, "counts"));
  return mkx_arena_array(ar, g->G, 1, sizeof(int), (void **)&k->dsp, "displs");
}

static int counts_set(counts *k, int G, const int64_t *bytes) {
  int64_t d = 0;
  for (int i = 0; i < G; i++) {
    MKX_TRY(fits_int(bytes[i], "intra-node exchange"));
    MKX_TRY(fits_int(d, "intra-node exchange"));
    k->cnt[i] = (int)bytes[i];
    k->dsp[i] = (int)d;
    d += bytes[i];
  }
  return fits_int(d, "intra-node exchange");
}

static int wait_node(MKX_Comm c, MPI_Request *req, int mpi_rc,
                     const char *what) {
  MKX_TRY(mkx_mpi_check(mpi_rc, what));
  return mkx_mpi_wait(req, c->opt.timeout_ms, what);
}

static int ag_network(MKX_Comm c, const grid *g, const void *send,
                      size_t row_bytes, char *col, mkx_arena *ar) {
  const void **sp;
  void **rp;
  size_t *sl, *rl;
  MKX_TRY(
      mkx_arena_array(ar, c->size, 1, sizeof(void *), (void **)&sp, "ptrs"));
  MKX_TRY(
      mkx_arena_array(ar, c->size, 1, sizeof(void *), (void **)&rp, "ptrs"));
  MKX_TRY(
      mkx_arena_array(ar, c->size, 1, sizeof(size_t), (void **)&sl, "lens"));
  MKX_TRY(
      mkx_arena_array(ar, c->size, 1, sizeof(size_t), (void **)&rl, "lens"));
  memset(sl, 0, sizeof *sl * (size_t)c->size);
  memset(rl, 0, sizeof *rl * (size_t)c->size);
  size_t at = 0;
  for (int k = 0; k < g->N; k++) {
    int q = g->at[k * g->G + g->l];
    size_t bytes = (size_t)rows_of(g, k, g->l) * row_bytes;
    if (q == c->rank) {
      memcpy(col + at, send, bytes);
    } else {
      sp[q] = send, sl[q] = (size_t)rows_of(g, g->j, g->l) * row_bytes;
      rp[q] = col + at, rl[q] = bytes;
    }
    at += bytes;
  }
  return mkx_comm_net_exchange(c, sp, sl, rp, rl);
}

int mkx_hier_slices(int64_t n, int64_t *j) {
  const int64_t want = n / 32 < 1                     ? 1
                       : n / 32 > MKX_HIER_MAX_SLICES ? MKX_HIER_MAX_SLICES
                                                      : n / 32;
  /* ceil(n / want) rounded up to 8: never more than `want` slices */
  const int64_t w = ((n + want - 1) / want + 7) / 8 * 8;
  int S = 0;
  j[0] = 0;
  while (j[S] < n) {
    j[S + 1] = j[S] + w < n ? j[S] + w : n;
    S++;
  }
  return S;
}

int mkx_hier_split_matches(MKX_Comm c, int64_t M) {
  mkx_arena ar = {0};
  grid g;
  int64_t *rows = malloc(sizeof *rows * (size_t)c->size), first, count;
  int ok = rows != NULL;
  for (int q = 0; ok && q < c->size; q++)
    MKX_Block_range(M, c->size, q, &first, &rows[q]);
  ok = ok && grid_init(c, rows, &ar, &g) == MKX_SUCCESS;
  for (int l = 0; ok && l < g.G; l++) {
    MKX_Block_range(M, g.G, l, &first, &count);
    ok = column_rows(&g, l) == count;
  }
  mkx_arena_release(&ar, MKX_SUCCESS);
  free(rows);
  return ok;
}

int mkx_hier_column_gather(MKX_Comm c, const void *send, const int64_t *rows,
                           size_t row_bytes, void *col) {
  mkx_arena ar = {0};
  grid g;
  int rc = grid_init(c, rows, &ar, &g);
  rc = mkx_comm_agree_rc(c, rc, "column allgather");
  if (!rc) rc = ag_network(c, &g, send, row_bytes, col, &ar);
  mkx_arena_release(&ar, rc);
  return rc;
}

int mkx_hier_allgather_rows(MKX_Comm c, const void *send, const int64_t *rows,
                            size_t row_bytes, void *full) {
  mkx_arena ar = {0};
  grid g;
  counts k;
  char *col, *all;
  int64_t *bytes;
  MPI_Request req;
  int rc = grid_init(c, rows, &ar, &g);
  if (!rc) rc = counts_init(&g, &ar, &k);
  if (!rc)
    rc =
        mkx_arena_array(&ar, g.G, 1, sizeof(int64_t), (void **)&bytes, "bytes");
  for (int l = 0; !rc && l < g.G; l++)
    bytes[l] = column_rows(&g, l) * (int64_t)row_bytes;
  if (!rc) rc = counts_set(&k, g.G, bytes);
  if (!rc)
    rc = mkx_arena_alloc(&ar, (size_t)bytes[g.l], (void **)&col, "column");
  if (!rc)
    rc = mkx_arena_array(&ar, g.off[c->size], (int64_t)row_bytes, 1,
                         (void **)&all, "gathered rows");
  rc = mkx_comm_agree_rc(c, rc, "hierarchical allgather");
  if (!rc) rc = ag_network(c, &g, send, row_bytes, col, &ar);
  if (!rc)
    rc = wait_node(c, &req,
                   MPI_Iallgatherv(col, k.cnt[g.l], MPI_BYTE, all, k.cnt, k.dsp,
                                   MPI_BYTE, c->node_mpi, &req),
                   "hierarchical allgather: node");
  /* all: local rank l's column (nodes in order) for each l; put every
   * rank's rows at its place in rank order. */
  for (int l = 0; !rc && l < g.G; l++) {
    size_t at = (size_t)k.dsp[l];
    for (int n = 0; n < g.N; n++) {
      int q = g.at[n * g.G + l];
      size_t b = (size_t)rows_of(&g, n, l) * row_bytes;
      memcpy((char *)full + (size_t)g.off[q] * row_bytes, all + at, b);
      at += b;
    }
  }
  mkx_arena_release(&ar, rc);
  return rc;
}

/* d = a + b, or d += b where a is NULL.  The blocks of 16 with restrict
 * pointers are what -O2 vectorises (it leaves loops of unknown length
 * scalar): these sums run as the pieces arrive and must keep pace. */
#define SUM_LOOP(T)                                                            \
  static void sum_##T(T *restrict d, const T *restrict a, const T *restrict b, \
                      size_t n) {                                              \
    size_t i = 0;                                                              \
    if (a) {                                                                   \
      for (; i + 16 <= n; i += 16)                                             \
        for (size_t k = 0; k < 16; k++) d[i + k] = a[i + k] + b[i + k];        \
      for (; i < n; i++) d[i] = a[i] + b[i];                                   \
    } else {                                                                   \
      for (; i + 16 <= n; i += 16)                                             \
        for (size_t k = 0; k < 16; k++) d[i + k] += b[i + k];                  \
      for (; i < n; i++) d[i] += b[i];                                         \
    }                                                                          \
  }
SUM_LOOP(float)
SUM_LOOP(double)
#undef SUM_LOOP

/* dst = a + b (a distinct from dst) in the working type. */
static void sum_into(MKX_Datatype wt, void *dst, const void *a, const void *b,
                     size_t len) {
  if (wt == MKX_FP64)
    sum_double(dst, a, b, len);
  else
    sum_float(dst, a, b, len);
}

static void add_into(MKX_Datatype wt, void *dst, const void *src, size_t len) {
  sum_into(wt, dst, NULL, src, len);
}

/* Node peers swap partials so that this rank holds its node's sum of
 * every block of its column (nodes in order) in `colsum`. */
static int rs_node(MKX_Comm c, const grid *g, MKX_Datatype wt, const char *part,
                   int64_t n, char *colsum, mkx_arena *ar) {
  size_t rb = (size_t)n * MKX_Type_size(wt);
  counts sk, rk;
  int64_t *sb, *rbytes;
  char *sendbuf, *recvbuf;
  MPI_Request req;
  MKX_TRY(counts_init(g, ar, &sk));
  MKX_TRY(counts_init(g, ar, &rk));
  MKX_TRY(mkx_arena_array(ar, g->G, 2, sizeof(int64_t), (void **)&sb, "bytes"));
  rbytes = sb + g->G;
  for (int l = 0; l < g->G; l++) {
    sb[l] = column_rows(g, l) * (int64_t)rb;
    rbytes[l] = column_rows(g, g->l) * (int64_t)rb;
  }
  MKX_TRY(counts_set(&sk, g->G, sb));
  MKX_TRY(counts_set(&rk, g->G, rbytes));
  MKX_TRY(mkx_arena_alloc(ar, (size_t)(sk.dsp[g->G - 1] + sk.cnt[g->G - 1]),
                          (void **)&sendbuf, "node send"));
  MKX_TRY(mkx_arena_alloc(ar, (size_t)(rk.dsp[g->G - 1] + rk.cnt[g->G - 1]),
                          (void **)&recvbuf, "node receive"));
  /* For node peer l: the blocks of column l, nodes in order. */
  char *at = sendbuf;
  for (int l = 0; l < g->G; l++)
    for (int k = 0; k < g->N; k++) {
      int q = g->at[k * g->G + l];
      size_t b = (size_t)rows_of(g, k, l) * rb;
      memcpy(at, part + (size_t)g->off[q] * rb, b);
      at += b;
    }
  MKX_TRY(wait_node(c, &req,
                    MPI_Ialltoallv(sendbuf, sk.cnt, sk.dsp, MPI_BYTE, recvbuf,
                                   rk.cnt, rk.dsp, MPI_BYTE, c->node_mpi, &req),
                    "hierarchical reduce: node"));
  size_t len = (size_t)column_rows(g, g->l) * (size_t)n;
  memcpy(colsum, recvbuf, len * MKX_Type_size(wt));
  for (int l = 1; l < g->G; l++)
    add_into(wt, colsum, recvbuf + (size_t)rk.dsp[l], len);
  return MKX_SUCCESS;
}

/* Buffers of the network half, taken before the ranks agree to go on (a
 * rank short of memory must not leave the others in the exchange). */
typedef struct col_bufs {
  const void **sp;
  size_t *sl;
  int *order; /* the column's ranks but this one, nodes in order */
} col_bufs;

static int col_bufs_get(MKX_Comm c, const grid *g, mkx_arena *ar, col_bufs *b) {
  MKX_TRY(
      mkx_arena_array(ar, c->size, 2, sizeof(void *), (void **)&b->sp, "ptrs"));
  MKX_TRY(
      mkx_arena_array(ar, g->N, 1, sizeof(int), (void **)&b->order, "order"));
  return mkx_arena_array(ar, c->size, 2, sizeof(size_t), (void **)&b->sl,
                         "lens");
}

/* The sum of one block over nodes, made as the node partials arrive.
 * Pieces of the partials come round by round, the column's other nodes
 * in node order; this node's own partial is added where its node falls
 * in that order, so every element is ((p_0 + p_1) + p_2) + ... exactly as
 * when the partials were all gathered first. */
typedef struct red_sink {
  MKX_Datatype wt;
  size_t es;          /* bytes per element */
  int j, last;        /* this node; the last other node */
  const int *node_of; /* [size]: node of each rank */
  const char *own;    /* this node's partial of this rank's block */
  char *block;
} red_sink;

static int red_take(void *ctx, int q, size_t off, const void *data,
                    size_t len) {
  const red_sink *s = ctx;
  const int k = s->node_of[q], prev = k - 1 == s->j ? k - 2 : k - 1;
  const size_t n = len / s->es;
  char *dst = s->block + off;
  if (prev < 0) { /* the first other node starts the sum */
    if (s->j < k)
      sum_into(s->wt, dst, s->own + off, data, n);
    else
      memcpy(dst, data, len);
  } else {
    if (prev < s->j && s->j < k) add_into(s->wt, dst, s->own + off, n);
    add_into(s->wt, dst, data, n);
  }
  if (k == s->last && s->j > k) add_into(s->wt, dst, s->own + off, n);
  return MKX_SUCCESS;
}

/* The network half: each node's partial of a block crosses the network
 * once, to its owner, which adds the pieces into `block` as they come;
 * this node's partial of this rank's block stays. */
static int reduce_column(MKX_Comm c, const grid *g, MKX_Datatype wt,
                         const char *colsum, int64_t n, void *block,
                         const col_bufs *b) {
  const size_t rb = (size_t)n * MKX_Type_size(wt);
  const int64_t mine = g->off[c->rank + 1] - g->off[c->rank];
  const void **sp = b->sp;
  size_t *sl = b->sl, *rl = sl + c->size;
  red_sink rs = {.wt = wt,
                 .es = MKX_Type_size(wt),
                 .j = g->j,
                 .last = g->j == g->N - 1 ? g->N - 2 : g->N - 1,
                 .node_of = c->place.node_of_rank,
                 .block = block};
  mkx_comm_net_sink sink = {.take = red_take, .ctx = &rs, .order = b->order};
  memset(sl, 0, sizeof *sl * 2 * (size_t)c->size);
  size_t at = 0;
  for (int k = 0; k < g->N; k++) {
    int q = g->at[k * g->G + g->l];
    size_t bytes = (size_t)rows_of(g, k, g->l) * rb;
    if (q == c->rank) {
      rs.own = colsum + at;
    } else {
      sp[q] = colsum + at, sl[q] = bytes;
      rl[q] = (size_t)mine * rb;
      b->order[sink.norder++] = q;
    }
    at += bytes;
  }
  return mkx_comm_net_exchange_to(c, sp, sl, rl, &sink);
}

int mkx_hier_column_reduce(MKX_Comm c, MKX_Datatype wt, const void *colsum,
                           const int64_t *rows, int64_t n, void *block) {
  mkx_arena ar = {0};
  grid g;
  col_bufs b;
  int rc = grid_init(c, rows, &ar, &g);
  if (!rc) rc = col_bufs_get(c, &g, &ar, &b);
  rc = mkx_comm_agree_rc(c, rc, "column reduce");
  if (!rc) rc = reduce_column(c, &g, wt, colsum, n, block, &b);
  mkx_arena_release(&ar, rc);
  return rc;
}

int mkx_hier_reduce_rows(MKX_Comm c, MKX_Datatype wt, const void *part,
                         const int64_t *rows, int64_t n, void *block) {
  mkx_arena ar = {0};
  grid g;
  char *colsum;
  col_bufs b;
  size_t rb = (size_t)n * MKX_Type_size(wt);
  int rc = grid_init(c, rows, &ar, &g);
  if (!rc)
    rc = mkx_arena_array(&ar, column_rows(&g, g.l), (int64_t)rb, 1,
                         (void **)&colsum, "column sums");
  if (!rc) rc = col_bufs_get(c, &g, &ar, &b);
  rc = mkx_comm_agree_rc(c, rc, "hierarchical reduce");
  if (!rc) rc = rs_node(c, &g, wt, part, n, colsum, &ar);
  if (!rc) rc = reduce_column(c, &g, wt, colsum, n, block, &b);
  mkx_arena_release(&ar, rc);
  return rc;
}

int mkx_host_allgather_rows(MKX_Comm c, const void *send, const int64_t *rows,
                            size_t row_bytes, void *full, const char *what) {
  mkx_xfer x;
  if (mkx_hier_usable(c))
    return mkx_hier_allgather_rows(c, send, rows, row_bytes, full);
  MKX_TRY(mkx_xfer_iallgatherv(c, send, full, rows, row_bytes, &x, what));
  return mkx_xfer_wait(c, &x, what);
}
