/*
 * test_moe.c - MKX_Moe_dispatch_gemm and MKX_Moe_layer against naive double
 * references computed on every rank from regenerated inputs (public API
 * only): random routing (distinct experts per token), E = p * {1,2,3},
 * topk 1..4, ranks with no tokens, every token on one expert, every dtype,
 * gate scaling on/off, Y row order / expert_rows / origin, and
 * MKX_ERR_TRUNCATE on every rank when one rank's Y is too small.
 *
 * With --device also fixed awkward shapes in bf16 (hidden 77 to 7168, ffn
 * 16 to 100, 8 to 256 experts, top-1 to top-8, half the rows on one
 * expert, every token on one expert, a rank without tokens), and the
 * same checks again on a communicator with option moe_sync=no (bad input
 * through MKX_Comm_get_async_error, plans, CUDA graphs).
 * With --device (on several ranks unless MKX_MOE_GPU=one; never with
 * MKX_MOE_GPU=off), the bf16 and fp16 calls must take the GPU path where
 * the GPU is sm_90 (counted by path).
 *
 * With --vnode (or --vnode=G) the communicator has virtual nodes of 2 (G)
 * ranks over shm (--net tcp: over tcp), so the calls span nodes: with --device the GPU path over
 * several nodes where the nodes are equal, rows between nodes over the
 * transport (with MKX_HIER_MOE=proxy every such call drives it by the GPU,
 * with host none does).
 *
 *   mpirun -np P ./test_moe [--seed N] [--device] [--vnode[=G]] [--net NAME]
 *                           [-v]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mkx_test.h"
#ifdef MKX_TEST_CUDA
#include "cuda_check.h"
#endif
#include "ops/path.h"

enum { T_X = 1, T_IDS = 2, T_GATE = 3, T_W = 4, T_W1 = 5, T_W2 = 6, T_NT = 7 };
#define GUARD 23

static const MKX_Datatype types[4] = {MKX_BF16, MKX_FP16, MKX_FP32, MKX_FP64};

/* --vnode[=G]: virtual nodes of G ranks (2 by default) over shm (--net
 * NAME: over that transport); 0: off. */
static int vnode;
static const char *vnet = "shm";

/* The communicator options of --vnode into info. */
static void set_vnode(MPI_Info info) {
  char g[16];
  snprintf(g, sizeof g, "%d", vnode);
  MPI_Info_set(info, "mkx_virtual_node_size", g);
  MPI_Info_set(info, "mkx_net", vnet);
}

/* Calls that should have taken the GPU path (see gpu_eligible). */
static long gpu_calls;
static int gpu_hopper = -1;

static void gpu_eligible(MKX_Datatype dt) {
  if (gpu_hopper < 0) {
    gpu_hopper = 0;
#ifdef MKX_TEST_CUDA
    int dev = -1, major = 0, minor = 0;
    if (mt.device && cudaGetDevice(&dev) == cudaSuccess &&
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor,
                               dev) == cudaSuccess &&
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor,
                               dev) == cudaSuccess)
      gpu_hopper = major == 9 && minor == 0;
#endif
  }
  /* several ranks: unless option moe_gpu=one; at most 8 ranks per node,
   * and nodes of equal size */
  const char *opt = getenv("MKX_MOE_GPU");
  const int off = opt && !strcmp(opt, "off"), one = opt && !strcmp(opt, "one");
  const int per_node = vnode && vnode < mt.size ? vnode : mt.size;
  const int ranks_ok =
      !off &&
      (mt.size == 1 || (!one && per_node <= 8 && mt.size % per_node == 0));
  if (gpu_hopper && ranks_ok && (dt == MKX_BF16 || dt == MKX_FP16)) gpu_calls++;
}

/* A call's result once its GPU work is done: with option moe_sync=no the
 * call only enqueues, and a bad input of its run comes from
 * MKX_Comm_get_async_error (a no-op check with moe_sync=yes). */
static int settle(MKX_Comm comm, int rc) {
#ifdef MKX_TEST_CUDA
  if (rc == MKX_SUCCESS && mt.device) {
    MT_CUDA(cudaDeviceSynchronize());
    int async_rc = MKX_SUCCESS;
    rc = MKX_Comm_get_async_error(comm, &async_rc);
    if (rc == MKX_SUCCESS) rc = async_rc;
  }
#else
  (void)comm;
#endif
  return rc;
}

/* 1 if the first n 16-bit values of b's host copy are all alike (still
 * the poison). */
static int all_same16(const tbuf *b, size_t n) {
  int same = 1;
  for (size_t i = 0; i < n; i++)
    same &= ((const uint16_t *)b->host)[i] == ((const uint16_t *)b->host)[0];
  return same;
}

typedef enum { ROUTE_RANDOM = 0, ROUTE_ONE = 1, ROUTE_SKEW = 2 } route_kind;

/* A fixed shape instead of the random small ones (GPU runs): bf16, gate
 * weights on; ROUTE_SKEW: every token's first expert is expert 0 (with
 * top-2, half the rows). */
typedef struct {
  int64_t E, topk, hidden, n, ffn, tokens;
  route_kind route;
  int empty_rank0; /* rank 0 has no tokens (several ranks) */
} mshape;

static const mshape shapes[] = {
    {8, 2, 1000, 154, 77, 48, ROUTE_SKEW, 0},
    {64, 8, 1000, 24, 77, 32, ROUTE_RANDOM, 1},
    {256, 8, 77, 200, 100, 40, ROUTE_RANDOM, 0},
    {8, 1, 7168, 16, 16, 24, ROUTE_ONE, 0},
    {16, 2, 2048, 2048, 56, 20, ROUTE_RANDOM, 1},
};

/* Everything every rank can regenerate about one case. */
typedef struct {
  int c;
  int64_t E, epr, topk, hidden, n, ffn;
  MKX_Datatype dt;
  route_kind route;
  int64_t one_expert; /* ROUTE_ONE: first expert of the common set */
  int gate;           /* dispatch: pass topk_weight */
  int64_t *nt;        /* [p] tokens per rank */
  int32_t **ids;      /* [p][nt*topk] */
  float **gw;         /* [p][nt*topk] */
  double **X;         /* [p][nt*hidden] rounded */
} mcase;

static void gen_case(mcase *m, int c,
                     int kind /* 0 dispatch, 1 layer, 2 trunc */,
                     const mshape *sh /* or NULL */) {
  int p = mt.size;
  mt_rng g;
  mt_rng_init(&g, mt.seed, -1, 7000 + kind * 1000 + c);
  memset(m, 0, sizeof *m);
  m->c = c + kind * 100;
  m->E = p * mt_rng_int(&g, 1, 3);
  m->epr = m->E / p;
  m->topk = mt_rng_int(&g, 1, 4);
  if (m->topk > m->E) m->topk = m->E;
  static const int64_t hs[] = {1, 3, 8, 16, 33, 64};
  static const int64_t ns[] = {1, 5, 16, 31, 48};
  static const int64_t fs[] = {1, 4, 9, 16, 24};
  m->hidden = hs[mt_rng_int(&g, 0, 5)];
  m->n = ns[mt_rng_int(&g, 0, 4)];
  m->ffn = fs[mt_rng_int(&g, 0, 4)];
  m->dt = types[c % 4];
  m->route = mt_rng_int(&g, 0, 3) == 0 ? ROUTE_ONE : ROUTE_RANDOM;
  m->one_expert = mt_rng_int(&g, 0, m->E - 1);
  m->gate = (int)mt_rng_int(&g, 0, 1);
  if (kind == 2) m->route = ROUTE_RANDOM;
  if (sh) {
    m->c = 500 + kind * 100 + c;
    m->E = sh->E, m->epr = sh->E / p, m->topk = sh->topk;
    m->hidden = sh->hidden, m->n = sh->n, m->ffn = sh->ffn;
    m->dt = MKX_BF16, m->route = sh->route, m->one_expert = 0, m->gate = 1;
  }
  m->nt = calloc((size_t)p, sizeof *m->nt);
  m->ids = calloc((size_t)p, sizeof *m->ids);
  m->gw = calloc((size_t)p, sizeof *m->gw);
  m->X = calloc((size_t)p, sizeof *m->X);
  for (int q = 0; q < p; q++) {
    m->nt[q] = mt_rng_int(&g, 0, 9) < 2 ? 0 : mt_rng_int(&g, 1, 13);
    if (c == 0 && q == 0 && p > 1) m->nt[q] = 0;
    if (kind == 2 && q == 0) m->nt[q] = 6;
    if (sh) m->nt[q] = sh->empty_rank0 && q == 0 && p > 1 ? 0 : sh->tokens;
  }
  for (int q = 0; q < p; q++) {
    int64_t nt = m->nt[q], K = m->topk;
    m->ids[q] = malloc((size_t)(nt * K + 1) * sizeof(int32_t));
    m->gw[q] = malloc((size_t)(nt * K + 1) * sizeof(float));
    mt_rng gi, gg;
    mt_rng_init(&gi, mt.seed, q, m->c * 16 + T_IDS);
    mt_rng_init(&gg, mt.seed, q, m->c * 16 + T_GATE);
    int32_t *perm = malloc((size_t)m->E * sizeof(int32_t));
    for (int64_t t = 0; t < nt; t++) {
      if (m->route == ROUTE_ONE) {
        for (int64_t j = 0; j < K; j++)
          m->ids[q][t * K + j] = (int32_t)((m->one_expert + j) % m->E);
      } else {
        for (int64_t e = 0; e < m->E; e++) perm[e] = (int32_t)e;
        for (int64_t j = 0; j < K; j++) { /* partial Fisher-Yates */
          int64_t s = m->route == ROUTE_SKEW && j == 0
                          ? 0 /* perm is the identity here */
                          : mt_rng_int(&gi, j, m->E - 1);
          int32_t tmp = perm[j];
          perm[j] = perm[s];
          perm[s] = tmp;
          m->ids[q][t * K + j] = perm[j];
        }
      }
      for (int64_t j = 0; j < K; j++)
        m->gw[q][t * K + j] = (float)(0.05 + 0.95 * mt_rng_unit(&gg));
    }
    free(perm);
    m->X[q] = mt_gen(nt, m->hidden, m->dt, mt.seed, q, m->c * 16 + T_X);
  }
}

static void free_case(mcase *m) {
  for (int q = 0; q < mt.size; q++) {
    free(m->ids[q]);
    free(m->gw[q]);
    free(m->X[q]);
  }
  free(m->ids);
  free(m->gw);
  free(m->X);
  free(m->nt);
}

static void describe(const mcase *m, const char *op, char *buf, size_t len) {
  char nts[200];
  size_t o = 0;
  nts[0] = 0;
  for (int q = 0; q < mt.size && o + 20 < sizeof nts; q++)
    o += (size_t)snprintf(nts + o, sizeof nts - o, "%s%lld", q ? "," : "",
                          (long long)m->nt[q]);
  snprintf(buf, len,
           "%s case %d: E=%lld topk=%lld tokens=[%s] hidden=%lld n=%lld "
           "ffn=%lld dtype=%s routing=%s gate=%s",
           op, m->c, (long long)m->E, (long long)m->topk, nts,
           (long long)m->hidden, (long long)m->n, (long long)m->ffn,
           mt_type_name(m->dt),
           m->route == ROUTE_ONE    ? "one-expert"
           : m->route == ROUTE_SKEW ? "skewed (expert 0 first)"
                                    : "random",
           m->gate ? "on" : "off");
}

/* Rows rank `dst` receives, in contract order: (source rank, token, slot)
 * grouped by local expert.  Fills counts[epr]; returns total; rows[3*i]. */
static int64_t expected_rows(const mcase *m, int dst, int64_t *counts,
                             int32_t **rows_out) {
  int p = mt.size;
  int64_t cap = 0;
  for (int q = 0; q < p; q++) cap += m->nt[q] * m->topk;
  int32_t *rows = malloc((size_t)(3 * cap + 3) * sizeof(int32_t));
  int64_t total = 0;
  for (int64_t le = 0; le < m->epr; le++) {
    int32_t e = (int32_t)(dst * m->epr + le);
    counts[le] = 0;
    for (int q = 0; q < p; q++)
      for (int64_t t = 0; t < m->nt[q]; t++)
        for (int64_t j = 0; j < m->topk; j++)
          if (m->ids[q][t * m->topk + j] == e) {
            rows[3 * total] = q;
            rows[3 * total + 1] = (int32_t)t;
            rows[3 * total + 2] = (int32_t)j;
            total++;
            counts[le]++;
          }
  }
  *rows_out = rows;
  return total;
}

/* Upload this rank's X, ids, weights. */
static void load_inputs(const mcase *m, tbuf *tx, tbuf *ti, tbuf *tg) {
  int r = mt.rank;
  int64_t nt = m->nt[r];
  size_t es = mt_type_size(m->dt);
  tbuf_alloc(tx, (size_t)(nt * m->hidden) * es);
  tbuf_alloc(ti, (size_t)(nt * m->topk) * sizeof(int32_t));
  tbuf_alloc(tg, (size_t)(nt * m->topk) * sizeof(float));
  for (int64_t i = 0; i < nt * m->hidden; i++)
    mt_set(tx->host, m->dt, (size_t)i, m->X[r][i]);
  if (nt) {
    memcpy(ti->host, m->ids[r], (size_t)(nt * m->topk) * sizeof(int32_t));
    memcpy(tg->host, m->gw[r], (size_t)(nt * m->topk) * sizeof(float));
  }
  tbuf_upload(tx);
  tbuf_upload(ti);
  tbuf_upload(tg);
}

/* ---- dispatch + GEMM ---------------------------------------------------- */

static void case_dispatch(MKX_Comm comm, int c, int truncate,
                          const mshape *sh) {
  int p = mt.size, r = mt.rank;
  mcase m;
  gen_case(&m, c, truncate ? 2 : 0, sh);
  if (truncate) m.gate = 1;
  char desc[500];
  describe(&m, truncate ? "moe_dispatch_gemm TRUNCATE" : "moe_dispatch_gemm",
           desc, sizeof desc);
  int64_t *counts = calloc((size_t)m.epr, sizeof(int64_t));
  int32_t *rows;
  int64_t total = expected_rows(&m, r, counts, &rows);

  /* y_rows: exact or with spare rows; for TRUNCATE one victim rank gets
   * one row too few (the rank receiving the most rows). */
  mt_rng g;
  mt_rng_init(&g, mt.seed, r, 7700 + c);
  int64_t y_rows = (total > 0 ? total : 1) + mt_rng_int(&g, 0, 3);
  int victim = -1;
  if (truncate) {
    int64_t best = 0, *tmpc = calloc((size_t)m.epr, sizeof(int64_t));
    for (int q = 0; q < p; q++) {
      int32_t *rr;
      int64_t tq = expected_rows(&m, q, tmpc, &rr);
      free(rr);
      if (tq > best) {
        best = tq;
        victim = q;
      }
    }
    free(tmpc);
    y_rows = total > 0 ? total : 1;
    if (best < 2) victim = -1; /* can't make y_rows >= 1 and too small */
    if (r == victim) y_rows = total - 1;
    snprintf(desc + strlen(desc), sizeof desc - strlen(desc),
             " victim=%d y_rows=%lld", victim, (long long)y_rows);
  }

  /* W of this rank: [epr][hidden][n] */
  double *W = mt_gen(m.epr * m.hidden, m.n, m.dt, mt.seed, r, m.c * 16 + T_W);
  double *ref = calloc((size_t)(total * m.n) + 1, sizeof(double));
  double *refabs = calloc((size_t)(total * m.n) + 1, sizeof(double));
  {
    int64_t i = 0;
    for (int64_t le = 0; le < m.epr; le++)
      for (int64_t k = 0; k < counts[le]; k++, i++) {
        int q = rows[3 * i], t = rows[3 * i + 1], j = rows[3 * i + 2];
        double gs = m.gate ? (double)m.gw[q][t * m.topk + j] : 1.0;
        const double *x = m.X[q] + (int64_t)t * m.hidden;
        for (int64_t h = 0; h < m.hidden; h++)
          for (int64_t cc = 0; cc < m.n; cc++) {
            const double term = gs * x[h] * W[(le * m.hidden + h) * m.n + cc];
            ref[i * m.n + cc] += term;
            refabs[i * m.n + cc] += fabs(term);
          }
      }
  }

  size_t es = mt_type_size(m.dt);
  tbuf tx, ti, tg, tw, ty, te, to;
  load_inputs(&m, &tx, &ti, &tg);
  tbuf_alloc(&tw, (size_t)(m.epr * m.hidden * m.n) * es);
  for (int64_t i = 0; i < m.epr * m.hidden * m.n; i++)
    mt_set(tw.host, m.dt, (size_t)i, W[i]);
  tbuf_upload(&tw);
  size_t ny = (size_t)(y_rows * m.n) + GUARD, no = (size_t)(3 * y_rows) + GUARD;
  tbuf_alloc(&ty, ny * es);
  tbuf_alloc(&te, ((size_t)m.epr + 4) * sizeof(int64_t));
  tbuf_alloc(&to, no * sizeof(int32_t));
  /* origin is a per-rank output: NULL on some ranks, not on others */
  int with_origin = truncate ? 1 : (int)mt_rng_int(&g, 0, 3) != 0;

  gpu_eligible(m.dt);
  int rc = MKX_Moe_dispatch_gemm(
      tbuf_ptr(&tx), m.nt[r], m.hidden, tbuf_ptr(&ti),
      m.gate ? tbuf_ptr(&tg) : NULL, m.topk, m.E, tbuf_ptr(&tw), m.n,
      tbuf_ptr(&ty), y_rows, tbuf_ptr(&te), with_origin ? tbuf_ptr(&to) : NULL,
      m.dt, comm, NULL);
  rc = settle(comm, rc);
  int want = truncate && victim >= 0 ? MKX_ERR_TRUNCATE : MKX_SUCCESS;
  CHECK_RC(rc, want, "%s: returns %s", desc,
           want == MKX_SUCCESS ? "MKX_SUCCESS" : "MKX_ERR_TRUNCATE");
  tbuf_download(&te);
  tbuf_download(&ty);
  tbuf_download(&to);
  const int64_t *er = te.host;
  int cnt_ok = 1;
  for (int64_t le = 0; le < m.epr; le++) cnt_ok &= er[le] == counts[le];
  if (rc == want) {
    char got[200] = "";
    size_t o = 0;
    for (int64_t le = 0; le < m.epr && o + 24 < sizeof got; le++)
      o += (size_t)snprintf(got + o, sizeof got - o, "%lld/%lld ",
                            (long long)er[le], (long long)counts[le]);
    CHECK(cnt_ok, "%s: expert_rows (got/want %s)", desc, got);
    size_t past = 0;
    for (size_t i = (size_t)m.epr; i < (size_t)m.epr + 4; i++)
      past += !mt_is_poison(te.host, MKX_FP64, i);
    CHECK(past == 0, "%s: nothing written past expert_rows", desc);
  }
  if (rc == MKX_SUCCESS && want == MKX_SUCCESS) {
    /* Y rows: values and nothing past y_rows */
    size_t oob, unw;
    mt_check_bounds(ty.host, m.dt, MKX_ROW_MAJOR, total, m.n, m.n, ny, &oob,
                    &unw);
    size_t past = 0;
    for (size_t i = (size_t)(y_rows * m.n); i < ny; i++)
      past += !mt_is_poison(ty.host, m.dt, i);
    CHECK(unw == 0 && past == 0,
          "%s: Y rows [0,%lld) written, nothing past y_rows=%lld (%zu "
          "unwritten, %zu past)",
          desc, (long long)total, (long long)y_rows, unw, past);
    if (total > 0) {
      double e =
          mt_relerr_mat(ty.host, m.dt, MKX_ROW_MAJOR, m.n, total, m.n, ref);
      double t0 = mt_tol(m.dt, m.dt);
      double tol = mt_tol_cond(t0, ref, refabs, (size_t)(total * m.n));
      CHECK(e <= tol || mt_within_cond(ty.host, m.dt, MKX_ROW_MAJOR, m.n, total,
                                       m.n, ref, refabs, t0),
            "%s: Y rel err %.3g <= %.3g, or every element within the "
            "componentwise bound",
            desc, e, tol);
    }
    if (with_origin) {
      const int32_t *og = to.host;
      int64_t bad = -1;
      for (int64_t i = 0; i < 3 * total && bad < 0; i++)
        if (og[i] != rows[i]) bad = i / 3;
      size_t opast = 0;
      for (size_t i = (size_t)(3 * y_rows); i < no; i++)
        opast += !mt_is_poison(to.host, MKX_FP32, i);
      if (bad >= 0)
        mt_diag("origin row %lld: got (%d,%d,%d) want (%d,%d,%d)",
                (long long)bad, og[3 * bad], og[3 * bad + 1], og[3 * bad + 2],
                rows[3 * bad], rows[3 * bad + 1], rows[3 * bad + 2]);
      CHECK(bad < 0 && opast == 0,
            "%s: origin = (source rank, token, slot) in order, nothing "
            "past 3*y_rows",
            desc);
    } else {
      size_t touched = 0;
      for (size_t i = 0; i < no; i++)
        touched += !mt_is_poison(to.host, MKX_FP32, i);
      CHECK(touched == 0, "%s: origin NULL, spare buffer untouched", desc);
    }
  }
  if (truncate && r == victim) {
    size_t past = 0;
    for (size_t i = (size_t)(y_rows * m.n); i < ny; i++)
      past += !mt_is_poison(ty.host, m.dt, i);
    CHECK(past == 0, "%s: nothing written past y_rows on the victim", desc);
  }
  mt_all(1);
  tbuf_free(&tx);
  tbuf_free(&ti);
  tbuf_free(&tg);
  tbuf_free(&tw);
  tbuf_free(&ty);
  tbuf_free(&te);
  tbuf_free(&to);
  free(W);
  free(ref);
  free(refabs);
  free(rows);
  free(counts);
  free_case(&m);
}

/* ---- whole layer ----------------------------------------------------------- */

static double silu(double x) { return x / (1.0 + exp(-x)); }

static void case_layer(MKX_Comm comm, int c, const mshape *sh) {
  int p = mt.size, r = mt.rank;
  mcase m;
  gen_case(&m, c, 1, sh);
  char desc[500];
  describe(&m, "moe_layer", desc, sizeof desc);
  int64_t H = m.hidden, F = m.ffn, nt = m.nt[r];
  /* every rank's W1, W2 */
  double **W1 = calloc((size_t)p, sizeof *W1),
         **W2 = calloc((size_t)p, sizeof *W2);
  for (int q = 0; q < p; q++) {
    W1[q] = mt_gen(m.epr * H, 2 * F, m.dt, mt.seed, q, m.c * 16 + T_W1);
    W2[q] = mt_gen(m.epr * F, H, m.dt, mt.seed, q, m.c * 16 + T_W2);
  }
  double *ref = calloc((size_t)(nt * H) + 1, sizeof(double));
  double *refabs = calloc((size_t)(nt * H) + 1, sizeof(double));
  double *a = malloc((size_t)F * sizeof(double));
  /* rounding sizes of a: first-order sensitivity of silu(g) u to the
   * rounding of the two dot products (|terms| sums), plus a's own */
  double *a_err = malloc((size_t)F * sizeof(double));
  for (int64_t t = 0; t < nt; t++) {
    const double *x = m.X[r] + t * H;
    for (int64_t j = 0; j < m.topk; j++) {
      int32_t e = m.ids[r][t * m.topk + j];
      int q = (int)(e / m.epr);
      int64_t le = e % m.epr;
      const double *w1 = W1[q] + le * H * 2 * F, *w2 = W2[q] + le * F * H;
      for (int64_t f = 0; f < F; f++) {
        double gsum = 0, usum = 0, gabs = 0, uabs = 0;
        for (int64_t h = 0; h < H; h++) {
          gsum += x[h] * w1[h * 2 * F + f];
          usum += x[h] * w1[h * 2 * F + F + f];
          gabs += fabs(x[h] * w1[h * 2 * F + f]);
          uabs += fabs(x[h] * w1[h * 2 * F + F + f]);
        }
        a[f] = silu(gsum) * usum;
        const double sg = 1.0 / (1.0 + exp(-gsum));
        a_err[f] = fabs(sg * (1.0 + gsum * (1.0 - sg)) * usum) * gabs +
                   fabs(silu(gsum)) * uabs + fabs(a[f]);
      }
      double gw = m.gw[r][t * m.topk + j];
      for (int64_t h = 0; h < H; h++) {
        double s = 0, sa = 0;
        for (int64_t f = 0; f < F; f++) {
          s += a[f] * w2[f * H + h];
          sa += a_err[f] * fabs(w2[f * H + h]);
        }
        ref[t * H + h] += gw * s;
        refabs[t * H + h] += fabs(gw) * sa;
      }
    }
  }
  size_t es = mt_type_size(m.dt);
  tbuf tx, ti, tg, t1, t2, tout;
  load_inputs(&m, &tx, &ti, &tg);
  tbuf_alloc(&t1, (size_t)(m.epr * H * 2 * F) * es);
  tbuf_alloc(&t2, (size_t)(m.epr * F * H) * es);
  for (int64_t i = 0; i < m.epr * H * 2 * F; i++)
    mt_set(t1.host, m.dt, (size_t)i, W1[r][i]);
  for (int64_t i = 0; i < m.epr * F * H; i++)
    mt_set(t2.host, m.dt, (size_t)i, W2[r][i]);
  tbuf_upload(&t1);
  tbuf_upload(&t2);
  size_t nout = (size_t)(nt * H) + GUARD;
  tbuf_alloc(&tout, nout * es);
  gpu_eligible(m.dt);
  int rc = MKX_Moe_layer(tbuf_ptr(&tx), nt, H, tbuf_ptr(&ti), tbuf_ptr(&tg),
                         m.topk, m.E, tbuf_ptr(&t1), tbuf_ptr(&t2), F,
                         tbuf_ptr(&tout), m.dt, comm, NULL);
  rc = settle(comm, rc);
  CHECK_RC(rc, MKX_SUCCESS, "%s: returns MKX_SUCCESS", desc);
  if (mt_all(rc == MKX_SUCCESS)) {
    tbuf_download(&tout);
    size_t oob, unw;
    mt_check_bounds(tout.host, m.dt, MKX_ROW_MAJOR, nt, H, H, nout, &oob, &unw);
    CHECK(oob == 0 && unw == 0,
          "%s: out fully written, nothing past it (%zu unwritten, %zu oob)",
          desc, unw, oob);
    if (nt > 0) {
      double e = mt_relerr_mat(tout.host, m.dt, MKX_ROW_MAJOR, H, nt, H, ref);
      double t0 = 2 * mt_tol(m.dt, m.dt);
      double tol = mt_tol_cond(t0, ref, refabs, (size_t)(nt * H));
      CHECK(e <= tol || mt_within_cond(tout.host, m.dt, MKX_ROW_MAJOR, H, nt, H,
                                       ref, refabs, t0),
            "%s: out rel err %.3g <= %.3g, or every element within the "
            "componentwise bound",
            desc, e, tol);
    }
  }
  tbuf_free(&tx);
  tbuf_free(&ti);
  tbuf_free(&tg);
  tbuf_free(&t1);
  tbuf_free(&t2);
  tbuf_free(&tout);
  for (int q = 0; q < p; q++) {
    free(W1[q]);
    free(W2[q]);
  }
  free(W1);
  free(W2);
  free(ref);
  free(refabs);
  free(a);
  free(a_err);
  free_case(&m);
}

/* ---- bad expert ids ------------------------------------------------------
 * In bf16 (the GPU path on one rank with --device, else the staged or host
 * path): an id out of range, or one repeated within a token, on the last
 * rank gives MKX_ERR_INVALID_ARG on every rank, naming the rank, and
 * neither Y nor out is written. */
static void case_bad_ids(MKX_Comm comm, int repeat, int layer) {
  const int p = mt.size, last = p - 1;
  /* dispatch takes W1 as its weights: n = 2F */
  const int64_t nt = 3, K = 2, E = 2 * p, H = 16, F = 8, N = 2 * F;
  int32_t ids[6] = {0, 1, 1, 0, 0, 1};
  float gw[6] = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f};
  if (mt.rank == last && repeat) ids[5] = ids[4]; /* token 2 */
  if (mt.rank == last && !repeat) ids[4] = (int32_t)(E + 3);
  tbuf tx, ti, tg, tw, tw2, ty, tc;
  tbuf_alloc(&tx, (size_t)(nt * H) * 2);
  tbuf_alloc(&ti, sizeof ids);
  tbuf_alloc(&tg, sizeof gw);
  tbuf_alloc(&tw, (size_t)(2 * H * 2 * F) * 2);
  tbuf_alloc(&tw2, (size_t)(2 * F * H) * 2);
  tbuf_alloc(&ty, (size_t)(p * nt * K * N) * 2);
  tbuf_alloc(&tc, 2 * sizeof(int64_t));
  memset(tx.host, 0, (size_t)(nt * H) * 2);
  memset(tw.host, 0, (size_t)(2 * H * 2 * F) * 2);
  memset(tw2.host, 0, (size_t)(2 * F * H) * 2);
  memcpy(ti.host, ids, sizeof ids);
  memcpy(tg.host, gw, sizeof gw);
  tbuf_upload(&tx);
  tbuf_upload(&ti);
  tbuf_upload(&tg);
  tbuf_upload(&tw);
  tbuf_upload(&tw2);
  tbuf_poison(&ty);
  gpu_eligible(MKX_BF16);
  int rc =
      layer ? MKX_Moe_layer(tbuf_ptr(&tx), nt, H, tbuf_ptr(&ti), tbuf_ptr(&tg),
                            K, E, tbuf_ptr(&tw), tbuf_ptr(&tw2), F,
                            tbuf_ptr(&ty), MKX_BF16, comm, NULL)
            : MKX_Moe_dispatch_gemm(tbuf_ptr(&tx), nt, H, tbuf_ptr(&ti),
                                    tbuf_ptr(&tg), K, E, tbuf_ptr(&tw), N,
                                    tbuf_ptr(&ty), p * nt * K, tbuf_ptr(&tc),
                                    NULL, MKX_BF16, comm, NULL);
  rc = settle(comm, rc);
  char want[32];
  snprintf(want, sizeof want, "on rank %d", last);
  CHECK(rc == MKX_ERR_INVALID_ARG && strstr(MKX_Get_last_error(), want) &&
            strstr(MKX_Get_last_error(), repeat ? "repeats" : "outside"),
        "%s, expert id %s on rank %d: MKX_ERR_INVALID_ARG naming the rank (got "
        "%d: %s)",
        layer ? "moe_layer" : "moe_dispatch_gemm",
        repeat ? "repeated" : "out of range", last, rc, MKX_Get_last_error());
  tbuf_download(&ty);
  CHECK(all_same16(&ty, (size_t)(p * nt * K * N)),
        "%s with a bad id writes no output",
        layer ? "moe_layer" : "moe_dispatch_gemm");
  tbuf_free(&tx);
  tbuf_free(&ti);
  tbuf_free(&tg);
  tbuf_free(&tw);
  tbuf_free(&tw2);
  tbuf_free(&ty);
  tbuf_free(&tc);
}

/* ---- persistent plans -----------------------------------------------------
 * A plan (MKX_Moe_*_init) started with changing inputs in its bound
 * buffers (routing included) gives, bit for bit, what the plain call gives
 * on the same inputs.  bf16: the GPU path where one rank has a GPU. */
static void fill_plan_inputs(tbuf *tx, tbuf *ti, tbuf *tg, int64_t nt,
                             int64_t K, int64_t E, int64_t H, int it) {
  for (int64_t i = 0; i < nt * H; i++)
    mt_set(tx->host, MKX_BF16, (size_t)i,
           (double)((i * 7 + it * 3 + mt.rank) % 11) / 8 - 0.5);
  for (int64_t t = 0; t < nt; t++)
    for (int64_t j = 0; j < K; j++) { /* distinct within a token */
      ((int32_t *)ti->host)[t * K + j] =
          (int32_t)((t * 3 + it + mt.rank + j) % E);
      ((float *)tg->host)[t * K + j] = (float)(0.25 + 0.125 * (double)j);
    }
  tbuf_upload(tx);
  tbuf_upload(ti);
  tbuf_upload(tg);
}

/* The plan and graph cases' problem: 5 tokens of top-2 among 2p experts,
 * hidden 16, ffn 8 (dispatch by W1: n = 16), bf16, fixed weights; out is
 * the plan's output, ref the plain call's, cnt / cnt_ref their
 * expert_rows. */
typedef struct {
  int layer;
  int64_t nt, K, E, H, F, N, rows, nout;
  tbuf x, ids, gate, w, w2, out, ref, cnt, cnt_ref;
} small_moe;

static void small_moe_alloc(small_moe *m, int layer) {
  m->layer = layer;
  m->nt = 5, m->K = 2, m->E = 2 * mt.size, m->H = 16, m->F = 8;
  m->N = 2 * m->F;
  m->rows = mt.size * m->nt * m->K;
  m->nout = layer ? m->nt * m->H : m->rows * m->N;
  tbuf_alloc(&m->x, (size_t)(m->nt * m->H) * 2);
  tbuf_alloc(&m->ids, (size_t)(m->nt * m->K) * sizeof(int32_t));
  tbuf_alloc(&m->gate, (size_t)(m->nt * m->K) * sizeof(float));
  tbuf_alloc(&m->w, (size_t)(2 * m->H * 2 * m->F) * 2);
  tbuf_alloc(&m->w2, (size_t)(2 * m->F * m->H) * 2);
  tbuf_alloc(&m->out, (size_t)m->nout * 2);
  tbuf_alloc(&m->ref, (size_t)m->nout * 2);
  tbuf_alloc(&m->cnt, 2 * sizeof(int64_t));
  tbuf_alloc(&m->cnt_ref, 2 * sizeof(int64_t));
  for (int64_t i = 0; i < 2 * m->H * 2 * m->F; i++)
    mt_set(m->w.host, MKX_BF16, (size_t)i, (double)(i % 13) / 16 - 0.4);
  for (int64_t i = 0; i < 2 * m->F * m->H; i++)
    mt_set(m->w2.host, MKX_BF16, (size_t)i, (double)(i % 7) / 8 - 0.3);
  tbuf_upload(&m->w);
  tbuf_upload(&m->w2);
}

static void small_moe_free(small_moe *m) {
  tbuf_free(&m->x);
  tbuf_free(&m->ids);
  tbuf_free(&m->gate);
  tbuf_free(&m->w);
  tbuf_free(&m->w2);
  tbuf_free(&m->out);
  tbuf_free(&m->ref);
  tbuf_free(&m->cnt);
  tbuf_free(&m->cnt_ref);
}

static void small_moe_inputs(small_moe *m, int it) {
  fill_plan_inputs(&m->x, &m->ids, &m->gate, m->nt, m->K, m->E, m->H, it);
}

/* The plan, writing out and cnt. */
static int small_moe_init(small_moe *m, MKX_Comm comm, MKX_Request *req) {
  return m->layer ? MKX_Moe_layer_init(
                        tbuf_ptr(&m->x), m->nt, m->H, tbuf_ptr(&m->ids),
                        tbuf_ptr(&m->gate), m->K, m->E, tbuf_ptr(&m->w),
                        tbuf_ptr(&m->w2), m->F, tbuf_ptr(&m->out), MKX_BF16,
                        comm, MPI_INFO_NULL, req)
                  : MKX_Moe_dispatch_gemm_init(
                        tbuf_ptr(&m->x), m->nt, m->H, tbuf_ptr(&m->ids),
                        tbuf_ptr(&m->gate), m->K, m->E, tbuf_ptr(&m->w), m->N,
                        tbuf_ptr(&m->out), m->rows, tbuf_ptr(&m->cnt), NULL,
                        MKX_BF16, comm, MPI_INFO_NULL, req);
}

/* The plain call into ref and cnt_ref (poisoned first), settled and
 * downloaded. */
static int small_moe_reference(small_moe *m, MKX_Comm comm) {
  tbuf_poison(&m->ref);
  tbuf_poison(&m->cnt_ref);
  gpu_eligible(MKX_BF16);
  int rc = m->layer
               ? MKX_Moe_layer(tbuf_ptr(&m->x), m->nt, m->H, tbuf_ptr(&m->ids),
                               tbuf_ptr(&m->gate), m->K, m->E, tbuf_ptr(&m->w),
                               tbuf_ptr(&m->w2), m->F, tbuf_ptr(&m->ref),
                               MKX_BF16, comm, NULL)
               : MKX_Moe_dispatch_gemm(
                     tbuf_ptr(&m->x), m->nt, m->H, tbuf_ptr(&m->ids),
                     tbuf_ptr(&m->gate), m->K, m->E, tbuf_ptr(&m->w), m->N,
                     tbuf_ptr(&m->ref), m->rows, tbuf_ptr(&m->cnt_ref), NULL,
                     MKX_BF16, comm, NULL);
  rc = settle(comm, rc);
  tbuf_download(&m->ref);
  tbuf_download(&m->cnt_ref);
  return rc;
}

/* The plan's outputs (downloaded) equal the plain call's. */
static int small_moe_same(small_moe *m) {
  tbuf_download(&m->out);
  tbuf_download(&m->cnt);
  return !memcmp(m->out.host, m->ref.host, (size_t)m->nout * 2) &&
         (m->layer ||
          !memcmp(m->cnt.host, m->cnt_ref.host, 2 * sizeof(int64_t)));
}

static void plan_case(MKX_Comm comm, int layer) {
  const char *what =
      layer ? "MKX_Moe_layer_init" : "MKX_Moe_dispatch_gemm_init";
  small_moe m;
  small_moe_alloc(&m, layer);
  MKX_Request req = NULL;
  int rc = small_moe_init(&m, comm, &req);
  if (CHECK_RC(rc, MKX_SUCCESS, "%s", what)) {
    for (int it = 0; it < 3; it++) {
      small_moe_inputs(&m, it);
      rc = small_moe_reference(&m, comm);
      CHECK_RC(rc, MKX_SUCCESS, "%s: plain call, inputs %d", what, it);
      tbuf_poison(&m.out);
      tbuf_poison(&m.cnt);
      gpu_eligible(MKX_BF16);
      rc = settle(comm, MKX_Start(req, NULL));
      CHECK_RC(rc, MKX_SUCCESS, "%s: MKX_Start, inputs %d", what, it);
      CHECK(small_moe_same(&m),
            "%s: the plan's output equals the plain call's, inputs %d", what,
            it);
    }
    CHECK_RC(MKX_Request_free(&req), MKX_SUCCESS, "%s: MKX_Request_free", what);
  }
  small_moe_free(&m);
}

/* ---- determinism and repetition ------------------------------------------
 * bf16 layer on fixed inputs: 10 calls give the same bits (the combine
 * sums in slot order, the routing is a stable sort), and `calls` back-to-
 * back calls on one stream (no synchronisation between them) end with the
 * same bits as well. */
static void repeat_case(MKX_Comm comm, int calls) {
  const int p = mt.size;
  const int64_t nt = 37, K = 3, E = 4 * p, H = 40, F = 24;
  tbuf tx, ti, tg, tw, tw2, to, tfirst;
  tbuf_alloc(&tx, (size_t)(nt * H) * 2);
  tbuf_alloc(&ti, (size_t)(nt * K) * sizeof(int32_t));
  tbuf_alloc(&tg, (size_t)(nt * K) * sizeof(float));
  tbuf_alloc(&tw, (size_t)(E / p * H * 2 * F) * 2);
  tbuf_alloc(&tw2, (size_t)(E / p * F * H) * 2);
  tbuf_alloc(&to, (size_t)(nt * H) * 2);
  tbuf_alloc(&tfirst, (size_t)(nt * H) * 2);
  fill_plan_inputs(&tx, &ti, &tg, nt, K, E, H, 5);
  for (int64_t i = 0; i < E / p * H * 2 * F; i++)
    mt_set(tw.host, MKX_BF16, (size_t)i, (double)((i * 5) % 17) / 16 - 0.5);
  for (int64_t i = 0; i < E / p * F * H; i++)
    mt_set(tw2.host, MKX_BF16, (size_t)i, (double)((i * 3) % 11) / 8 - 0.6);
  tbuf_upload(&tw);
  tbuf_upload(&tw2);
  int same = 1, rc = MKX_SUCCESS;
  for (int r = 0; r < 10 + calls && rc == MKX_SUCCESS; r++) {
    if (r < 10) tbuf_poison(&to);
    gpu_eligible(MKX_BF16);
    rc = MKX_Moe_layer(tbuf_ptr(&tx), nt, H, tbuf_ptr(&ti), tbuf_ptr(&tg), K, E,
                       tbuf_ptr(&tw), tbuf_ptr(&tw2), F, tbuf_ptr(&to),
                       MKX_BF16, comm, NULL);
    if (r >= 10 && r + 1 < 10 + calls) continue; /* back to back */
    rc = settle(comm, rc);
    tbuf_download(&to);
    if (r == 0)
      memcpy(tfirst.host, to.host, (size_t)(nt * H) * 2);
    else
      same &= !memcmp(tfirst.host, to.host, (size_t)(nt * H) * 2);
  }
  CHECK_RC(rc, MKX_SUCCESS, "moe_layer repeated");
  CHECK(same,
        "moe_layer: the same bits over 10 calls and after %d more "
        "back to back",
        calls);
  tbuf_free(&tx);
  tbuf_free(&ti);
  tbuf_free(&tg);
  tbuf_free(&tw);
  tbuf_free(&tw2);
  tbuf_free(&to);
  tbuf_free(&tfirst);
}

#ifdef MKX_TEST_CUDA
/* ---- CUDA graphs (option moe_sync=no) -------------------------------------
 * A plan's start (or a plain call, once it ran outside the capture)
 * captured on a stream and replayed with changing inputs
 * gives, bit for bit, what the plain call gives; a replay with a bad id on
 * the last rank writes nothing, and every rank gets MKX_ERR_INVALID_ARG
 * naming that rank from MKX_Comm_get_async_error; the replay after it is
 * right again. */
static int graph_replay(MKX_Comm comm, cudaGraphExec_t ge, cudaStream_t st) {
  int rc = MKX_SUCCESS;
  MT_CUDA(cudaDeviceSynchronize()); /* inputs and poison in place */
  MT_CUDA(cudaGraphLaunch(ge, st));
  MT_CUDA(cudaStreamSynchronize(st));
  MT_MKX_AT(mt.rank, MKX_Comm_get_async_error(comm, &rc));
  return rc;
}

/* The plain call into the plan's outputs, on st. */
static int small_moe_call(small_moe *m, MKX_Comm comm, cudaStream_t st) {
  return m->layer ? MKX_Moe_layer(tbuf_ptr(&m->x), m->nt, m->H,
                                  tbuf_ptr(&m->ids), tbuf_ptr(&m->gate), m->K,
                                  m->E, tbuf_ptr(&m->w), tbuf_ptr(&m->w2), m->F,
                                  tbuf_ptr(&m->out), MKX_BF16, comm, st)
                  : MKX_Moe_dispatch_gemm(
                        tbuf_ptr(&m->x), m->nt, m->H, tbuf_ptr(&m->ids),
                        tbuf_ptr(&m->gate), m->K, m->E, tbuf_ptr(&m->w), m->N,
                        tbuf_ptr(&m->out), m->rows, tbuf_ptr(&m->cnt), NULL,
                        MKX_BF16, comm, st);
}

static void graph_case(MKX_Comm comm, int layer, int plain) {
  const int last = mt.size - 1;
  char what[64];
  snprintf(what, sizeof what, "%s graph%s",
           layer ? "moe_layer" : "moe_dispatch_gemm",
           plain ? " of a plain call" : "");
  small_moe m;
  small_moe_alloc(&m, layer);
  cudaStream_t st;
  MT_CUDA(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  MKX_Request req = NULL;
  int rc;
  if (plain) { /* its workspace is made outside the capture */
    small_moe_inputs(&m, 0);
    gpu_eligible(MKX_BF16);
    rc = settle(comm, small_moe_call(&m, comm, st));
  } else {
    rc = small_moe_init(&m, comm, &req);
  }
  CHECK_RC(rc, MKX_SUCCESS, "%s: %s", what,
           plain ? "the call outside the capture" : "_init");
  cudaGraph_t g = NULL;
  cudaGraphExec_t ge = NULL;
  if (mt_all(rc == MKX_SUCCESS)) {
    gpu_eligible(MKX_BF16);
    MT_CUDA(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    rc = plain ? small_moe_call(&m, comm, st) : MKX_Start(req, st);
    const cudaError_t e = cudaStreamEndCapture(st, &g);
    CHECK_RC(rc, MKX_SUCCESS, "%s: %s under capture", what,
             plain ? "the call" : "MKX_Start");
    CHECK(e == cudaSuccess, "%s: capture ends (%s)", what,
          cudaGetErrorString(e));
    cudaError_t ie = cudaErrorUnknown;
    if (rc == MKX_SUCCESS && e == cudaSuccess)
      ie = cudaGraphInstantiate(&ge, g, 0);
    CHECK(ie == cudaSuccess, "%s: instantiate (%s)", what,
          cudaGetErrorString(ie));
    (void)cudaGetLastError();
    if (!mt_all(ie == cudaSuccess)) ge = NULL;
  }
  /* inputs 0, 1, 2, then a bad id, then 1 again */
  for (int it = 0; ge && it < 5; it++) {
    const int bad = it == 3;
    small_moe_inputs(&m, it == 4 ? 1 : it);
    if (!bad) {
      rc = small_moe_reference(&m, comm);
      CHECK_RC(rc, MKX_SUCCESS, "%s: plain call, inputs %d", what, it);
    } else if (mt.rank == last) {
      ((int32_t *)m.ids.host)[2 * m.K - 1] = (int32_t)m.E; /* token 1, slot 1 */
      tbuf_upload(&m.ids);
    }
    tbuf_poison(&m.out);
    tbuf_poison(&m.cnt);
    rc = graph_replay(comm, ge, st);
    if (bad) {
      char want[48];
      snprintf(want, sizeof want, "topk_ids[1][1] = %d on rank %d", (int)m.E,
               last);
      CHECK(rc == MKX_ERR_INVALID_ARG && strstr(MKX_Get_last_error(), want),
            "%s: a replay with a bad id: MKX_ERR_INVALID_ARG from "
            "MKX_Comm_get_async_error naming the rank (got %d: %s)",
            what, rc, MKX_Get_last_error());
      tbuf_download(&m.out);
      CHECK(all_same16(&m.out, (size_t)m.nout),
            "%s: a replay with a bad id writes no output", what);
    } else {
      CHECK_RC(rc, MKX_SUCCESS, "%s: replay %d, no error", what, it);
      CHECK(small_moe_same(&m), "%s: replay %d, bit for bit the plain call's",
            what, it);
    }
  }
  if (ge) MT_CUDA(cudaGraphExecDestroy(ge));
  if (g) MT_CUDA(cudaGraphDestroy(g));
  if (req)
    CHECK_RC(MKX_Request_free(&req), MKX_SUCCESS, "%s: MKX_Request_free", what);
  MT_CUDA(cudaStreamDestroy(st));
  small_moe_free(&m);
}

/* The GPU path without the host wait (option moe_sync=no) on a second
 * communicator: the same checks, bad input through
 * MKX_Comm_get_async_error (settle), plans, graphs, repetition. */
static void async_cases(void) {
  MPI_Info info;
  MKX_Comm ac = NULL;
  MPI_Info_create(&info);
  MPI_Info_set(info, "mkx_moe_sync", "no");
  if (vnode) set_vnode(info);
  int rc = MKX_Comm_create(MPI_COMM_WORLD, info, &ac);
  MPI_Info_free(&info);
  CHECK_RC(rc, MKX_SUCCESS, "MKX_Comm_create with mkx_moe_sync=no");
  if (!mt_all(rc == MKX_SUCCESS)) return;
  for (int c = 0; c < 8; c++) case_dispatch(ac, c, 0, NULL);
  for (int c = 0; c < 4; c++) case_dispatch(ac, c, 1, NULL);
  for (int c = 0; c < 8; c++) case_layer(ac, c, NULL);
  for (int k = 0; k < 4; k++) case_bad_ids(ac, k & 1, k >> 1);
  plan_case(ac, 0);
  plan_case(ac, 1);
  if (!vnode) { /* only the single-node GPU path can be captured */
    for (int plain = 0; plain < 2; plain++) {
      graph_case(ac, 0, plain);
      graph_case(ac, 1, plain);
    }
  }
  repeat_case(ac, 1000);
  CHECK_RC(MKX_Comm_free(&ac), MKX_SUCCESS, "MKX_Comm_free (moe_sync=no)");
}
#endif

int main(int argc, char **argv) {
  mt_init(&argc, &argv);
  MKX_Comm comm = NULL;
  MPI_Info info = MPI_INFO_NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--vnode")) vnode = 2;
    if (!strncmp(argv[i], "--vnode=", 8)) vnode = atoi(argv[i] + 8);
    if (!strcmp(argv[i], "--net") && i + 1 < argc) vnet = argv[++i];
  }
  if (vnode) {
    MPI_Info_create(&info);
    set_vnode(info);
  }
  int rc = MKX_Comm_create(MPI_COMM_WORLD, info, &comm);
  if (vnode) MPI_Info_free(&info);
  CHECK_RC(rc, MKX_SUCCESS, "MKX_Comm_create");
  if (!mt_all(rc == MKX_SUCCESS)) return mt_finish();
  double t0 = MPI_Wtime();
  for (int c = 0; c < 16; c++) case_dispatch(comm, c, 0, NULL);
  for (int c = 0; c < 4; c++) case_dispatch(comm, c, 1, NULL);
  for (int c = 0; c < 16; c++) case_layer(comm, c, NULL);
  /* the awkward shapes, where the GPU path runs (bf16) */
  for (size_t k = 0; mt.device && k < sizeof shapes / sizeof shapes[0]; k++)
    if (shapes[k].E % mt.size == 0) {
      case_dispatch(comm, (int)k, 0, &shapes[k]);
      case_layer(comm, (int)k, &shapes[k]);
    }
  for (int k = 0; k < 4; k++) case_bad_ids(comm, k & 1, k >> 1);
  plan_case(comm, 0);
  plan_case(comm, 1);
  repeat_case(comm, mt.device ? 1000 : 20);
#ifdef MKX_TEST_CUDA
  if (mt.device) async_cases();
#endif
  const long net_starts = mkx_path_starts(MKX_PATH_MOE_NET);
  const long gpu_starts = mkx_path_starts(MKX_PATH_MOE) +
                          mkx_path_starts(MKX_PATH_MOE_NODE) +
                          mkx_path_starts(MKX_PATH_MOE_NODES) + net_starts;
  CHECK(gpu_starts == gpu_calls, "%ld of %ld eligible calls took the GPU path",
        gpu_starts, gpu_calls);
  /* several nodes: the network driven by the GPU where MKX_HIER_MOE says */
  const char *hm = getenv("MKX_HIER_MOE");
  if (hm && !strcmp(hm, "proxy") && vnode && vnode < mt.size)
    CHECK(net_starts == gpu_calls,
          "%ld of %ld GPU calls drove the network by the GPU (hier_moe=proxy)",
          net_starts, gpu_calls);
  if (hm && !strcmp(hm, "host"))
    CHECK(net_starts == 0,
          "%ld calls drove the network by the GPU with "
          "hier_moe=host",
          net_starts);
  if (mt.rank == 0) mt_diag("cases in %.2f s", MPI_Wtime() - t0);
  rc = MKX_Comm_free(&comm);
  CHECK_RC(rc, MKX_SUCCESS, "MKX_Comm_free");
  return mt_finish();
}
