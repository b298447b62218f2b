/*
 * test_plans.c - persistent plans: MKX_Allgather_gemm_init,
 * MKX_Gemm_reduce_scatter_init, MKX_Gemm_allreduce_init, then MKX_Start
 * several times with the inputs changed in place between starts, each
 * result checked against a naive double reference; several plans alive at
 * once, interleaved with immediate calls; MKX_Request_free sets the handle
 * to NULL; MKX_Start(NULL) returns MKX_ERR_INVALID_REQUEST.
 *
 *   mpirun -np P ./test_plans [--seed N] [--device] [-v]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mkx_test.h"

enum { K_AG = 0, K_RS = 1, K_AR = 2 };
enum { T_A = 1, T_B = 2 };
#define GUARD 19
#define STARTS 4

static const char *kname[3] = {"allgather_gemm", "gemm_reduce_scatter",
                               "gemm_allreduce"};

typedef struct {
  int kind, id;
  MKX_Order order;
  MKX_Trans tb;
  MKX_Datatype dt, ct;
  int64_t *loc;    /* [p] m_local (AG) or k_local (RS/AR) */
  int64_t M, k, n; /* AG: k shared; RS/AR: M, n shared */
  int64_t lda, ldb, ldc, ldo;
  int64_t crow, c0; /* rows of C on this rank and their first global row */
  int64_t sbr, sbc;
  tbuf A, B, C, O;
  size_t nc, no;
  int with_aout;
  MKX_Request req;
  char desc[400];
} pcase;

static void setup(pcase *P, int kind, int id, MKX_Order order, MKX_Trans tb,
                  MKX_Datatype dt, MKX_Datatype ct) {
  int p = mt.size, r = mt.rank;
  mt_rng g;
  mt_rng_init(&g, mt.seed, -1, 9000 + id);
  memset(P, 0, sizeof *P);
  P->kind = kind;
  P->id = id;
  P->order = order;
  P->tb = tb;
  P->dt = dt;
  P->ct = ct;
  P->loc = calloc((size_t)p, sizeof *P->loc);
  int64_t tot = 0;
  for (int q = 0; q < p; q++) {
    P->loc[q] = (q == 0 && p > 1 && id % 2 == 0) ? 0 : mt_rng_int(&g, 1, 40);
    tot += P->loc[q];
  }
  P->n = mt_rng_int(&g, 1, 37);
  if (kind == K_AG) {
    P->M = tot;
    P->k = mt_rng_int(&g, 1, 45);
    P->crow = P->M;
    P->c0 = 0;
  } else {
    P->M = mt_rng_int(&g, 1, 50);
    P->k = tot;
    int64_t base = P->M / p, rem = P->M % p, first = 0;
    for (int q = 0; q < r; q++) first += base + (q < rem);
    P->crow = kind == K_AR ? P->M : base + (r < rem);
    P->c0 = kind == K_AR ? 0 : first;
  }
  P->with_aout = kind == K_AG && id % 3 != 0;
  int64_t am = kind == K_AG ? P->loc[r] : P->M;
  int64_t ak = kind == K_AG ? P->k : P->loc[r];
  P->lda = mt_min_ld(order, am, ak) + id % 3;
  mt_B_dims(tb, ak, P->n, &P->sbr, &P->sbc);
  P->ldb = mt_min_ld(order, P->sbr, P->sbc) + (id + 1) % 3;
  P->ldc = mt_min_ld(order, P->crow, P->n) + (id + 2) % 3;
  P->ldo = mt_min_ld(order, P->M, P->k) + 1;
  size_t es = mt_type_size(dt), cs = mt_type_size(ct);
  tbuf_alloc(&P->A, mt_mat_elems(order, am, ak, P->lda) * es);
  tbuf_alloc(&P->B, mt_mat_elems(order, P->sbr, P->sbc, P->ldb) * es);
  P->nc = mt_mat_elems(order, P->crow, P->n, P->ldc) + GUARD;
  P->no = mt_mat_elems(order, P->M, P->k, P->ldo) + GUARD;
  tbuf_alloc(&P->C, P->nc * cs);
  tbuf_alloc(&P->O, P->no * es);
  char ls[200];
  size_t o = 0;
  ls[0] = 0;
  for (int q = 0; q < p && o + 20 < sizeof ls; q++)
    o += (size_t)snprintf(ls + o, sizeof ls - o, "%s%lld", q ? "," : "",
                          (long long)P->loc[q]);
  snprintf(P->desc, sizeof P->desc,
           "plan %s #%d: M=%lld k=%lld n=%lld %s=[%s] %s %s dtype=%s ctype=%s "
           "lda=%lld ldb=%lld ldc=%lld%s",
           kname[kind], id, (long long)P->M, (long long)P->k, (long long)P->n,
           kind == K_AG ? "m_local" : "k_local", ls, mt_order_name(order),
           tb == MKX_TRANS ? "T" : "N", mt_type_name(dt), mt_type_name(ct),
           (long long)P->lda, (long long)P->ldb, (long long)P->ldc,
           kind == K_AG ? (P->with_aout ? " A_out" : " A_out=NULL") : "");
}

static int init_plan(pcase *P, MKX_Comm comm, MPI_Info info) {
  void *A = tbuf_ptr(&P->A), *B = tbuf_ptr(&P->B), *C = tbuf_ptr(&P->C);
  int r = mt.rank;
  switch (P->kind) {
    case K_AG:
      return MKX_Allgather_gemm_init(
          A, P->loc[r], P->k, P->lda, B, P->n, P->ldb, P->tb, C, P->ldc,
          P->with_aout ? tbuf_ptr(&P->O) : NULL, P->ldo, P->dt, P->ct, P->order,
          comm, info, &P->req);
    case K_RS:
      return MKX_Gemm_reduce_scatter_init(A, P->M, P->loc[r], P->lda, B, P->n,
                                          P->ldb, P->tb, C, P->ldc, P->dt,
                                          P->ct, P->order, comm, info, &P->req);
    default:
      return MKX_Gemm_allreduce_init(A, P->M, P->loc[r], P->lda, B, P->n,
                                     P->ldb, P->tb, C, P->ldc, P->dt, P->ct,
                                     P->order, comm, info, &P->req);
  }
}

/* Fill inputs for start `it` in place; returns the reference of this
 * rank's C (dense crow x n) followed by the same sums of absolute values
 * (for mt_tol_cond) and, for AG, the gathered A in *Aall. */
static double *fill(pcase *P, int it, double **Aall) {
  int p = mt.size, r = mt.rank;
  int tA = (P->id * 8 + it) * 4 + T_A, tB = (P->id * 8 + it) * 4 + T_B;
  const size_t nr = (size_t)(P->crow * P->n);
  double *ref = calloc(2 * nr + 1, sizeof(double)), *refabs = ref + nr;
  if (P->kind == K_AG) {
    double *all = malloc((size_t)(P->M * P->k + 1) * sizeof(double));
    int64_t row = 0, mine = 0;
    for (int q = 0; q < p; q++) {
      double *Aq = mt_gen(P->loc[q], P->k, P->dt, mt.seed, q, tA);
      if (q == r) mine = row;
      memcpy(all + row * P->k, Aq, (size_t)(P->loc[q] * P->k) * sizeof(double));
      row += P->loc[q];
      free(Aq);
    }
    double *Bv = mt_gen(P->k, P->n, P->dt, mt.seed, r, tB);
    mt_ref_gemm_acc(ref, all, Bv, P->M, P->k, P->n);
    mt_ref_gemm_abs(refabs, all, Bv, P->M, P->k, P->n);
    mt_store(P->A.host, P->dt, P->order, P->loc[r], P->k, P->lda,
             all + mine * P->k);
    mt_store_B(P->B.host, P->dt, P->order, P->tb, P->k, P->n, P->ldb, Bv);
    free(Bv);
    *Aall = all;
  } else {
    const size_t nf = (size_t)(P->M * P->n);
    double *full = calloc(2 * nf + 1, sizeof(double)), *fullabs = full + nf;
    for (int q = 0; q < p; q++) {
      double *Aq = mt_gen(P->M, P->loc[q], P->dt, mt.seed, q, tA);
      double *Bq = mt_gen(P->loc[q], P->n, P->dt, mt.seed, q, tB);
      mt_ref_gemm_acc(full, Aq, Bq, P->M, P->loc[q], P->n);
      mt_ref_gemm_abs(fullabs, Aq, Bq, P->M, P->loc[q], P->n);
      if (q == r) {
        mt_store(P->A.host, P->dt, P->order, P->M, P->loc[q], P->lda, Aq);
        mt_store_B(P->B.host, P->dt, P->order, P->tb, P->loc[q], P->n, P->ldb,
                   Bq);
      }
      free(Aq);
      free(Bq);
    }
    memcpy(ref, full + P->c0 * P->n, nr * sizeof(double));
    memcpy(refabs, fullabs + P->c0 * P->n, nr * sizeof(double));
    free(full);
    *Aall = NULL;
  }
  tbuf_upload(&P->A);
  tbuf_upload(&P->B);
  tbuf_poison(&P->C);
  tbuf_poison(&P->O);
  return ref;
}

static void check(pcase *P, int it, const double *ref, const double *Aall) {
  tbuf_download(&P->C);
  tbuf_download(&P->O);
  size_t oob, unw;
  mt_check_bounds(P->C.host, P->ct, P->order, P->crow, P->n, P->ldc, P->nc,
                  &oob, &unw);
  CHECK(oob == 0 && unw == 0,
        "%s start %d: C fully written, nothing outside (%zu unwritten, %zu "
        "oob)",
        P->desc, it, unw, oob);
  if (P->crow > 0) {
    const size_t nr = (size_t)(P->crow * P->n);
    const double *refabs = ref + nr, t0 = mt_tol(P->dt, P->ct);
    double e =
        mt_relerr_mat(P->C.host, P->ct, P->order, P->ldc, P->crow, P->n, ref);
    double tol = mt_tol_cond(t0, ref, refabs, nr);
    CHECK(e <= tol || mt_within_cond(P->C.host, P->ct, P->order, P->ldc,
                                     P->crow, P->n, ref, refabs, t0),
          "%s start %d: C rel err %.3g <= %.3g, or every element within the "
          "componentwise bound",
          P->desc, it, e, tol);
  }
  if (P->kind == K_AG && P->with_aout) {
    size_t diff = 0;
    for (int64_t i = 0; i < P->M; i++)
      for (int64_t j = 0; j < P->k; j++)
        diff += mt_mat_get(P->O.host, P->dt, P->order, P->ldo, i, j) !=
                Aall[i * P->k + j];
    CHECK(diff == 0, "%s start %d: A_out is the gathered A (%zu differ)",
          P->desc, it, diff);
  }
  if (P->kind == K_AR) {
    uint64_t h = mt_hash(P->C.host, P->nc * mt_type_size(P->ct), 0), h0 = h;
    MPI_Bcast(&h0, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    CHECK(mt_all(h == h0), "%s start %d: same C bits on every rank", P->desc,
          it);
  }
}

static void release(pcase *P) {
  tbuf_free(&P->A);
  tbuf_free(&P->B);
  tbuf_free(&P->C);
  tbuf_free(&P->O);
  free(P->loc);
}

static const MKX_Datatype types[4] = {MKX_BF16, MKX_FP16, MKX_FP32, MKX_FP64};

/* Ranks that start different plans, or start a plan while the others
 * make a plain call (host buffers: the host path, whose transfers would
 * otherwise pair up): every rank fails, the message names both calls, and
 * the communicator stays in step for the next start. */
static void mismatched_starts(MKX_Comm comm) {
  double a[2] = {1, 2}, b[2] = {0.5, -1}, c1[4], c2[4], c3[8];
  double want[4] = {0.5 * mt.size, -1.0 * mt.size, 1.0 * mt.size,
                    -2.0 * mt.size};
  MKX_Request ar1 = NULL, ar2 = NULL, ag = NULL;
  int rc = MKX_Gemm_allreduce_init(a, 2, 1, 1, b, 2, 2, MKX_NO_TRANS, c1, 2,
                                   MKX_FP64, MKX_FP64, MKX_ROW_MAJOR, comm,
                                   MPI_INFO_NULL, &ar1);
  if (rc == MKX_SUCCESS)
    rc = MKX_Gemm_allreduce_init(a, 2, 1, 1, b, 2, 2, MKX_NO_TRANS, c2, 2,
                                 MKX_FP64, MKX_FP64, MKX_ROW_MAJOR, comm,
                                 MPI_INFO_NULL, &ar2);
  if (rc == MKX_SUCCESS)
    rc = MKX_Allgather_gemm_init(a, 1, 1, 1, b, 2, 2, MKX_NO_TRANS, c3, 2, NULL,
                                 0, MKX_FP64, MKX_FP64, MKX_ROW_MAJOR, comm,
                                 MPI_INFO_NULL, &ag);
  CHECK_RC(rc, MKX_SUCCESS, "mismatch: three plans on host buffers");
  if (!mt_all(rc == MKX_SUCCESS)) return;
  /* two plans of one operation */
  rc = MKX_Start(mt.rank == 0 ? ar1 : ar2, NULL);
  if (CHECK_RC(rc, MKX_ERR_SHAPE_MISMATCH, "rank 0 starts another plan"))
    CHECK(strstr(MKX_Get_last_error(), "same plan") != NULL,
          "the message says so: %s", MKX_Get_last_error());
  /* plans of two operations */
  rc = MKX_Start(mt.rank == 0 ? ag : ar1, NULL);
  if (CHECK_RC(rc, MKX_ERR_SHAPE_MISMATCH, "rank 0 starts another operation"))
    CHECK(strstr(MKX_Get_last_error(), "MKX_Allgather_gemm") &&
              strstr(MKX_Get_last_error(), "MKX_Gemm_allreduce"),
          "the message names both: %s", MKX_Get_last_error());
  /* a start against a plain call */
  if (mt.rank == 0)
    rc = MKX_Start(ar1, NULL);
  else
    rc = MKX_Gemm_allreduce(a, 2, 1, 1, b, 2, 2, MKX_NO_TRANS, c2, 2, MKX_FP64,
                            MKX_FP64, MKX_ROW_MAJOR, comm, NULL);
  if (CHECK_RC(rc, MKX_ERR_SHAPE_MISMATCH, "a start against a plain call"))
    CHECK(strstr(MKX_Get_last_error(), "MKX_Start") != NULL,
          "the message names the start: %s", MKX_Get_last_error());
  /* still in step */
  memset(c1, 0, sizeof c1);
  rc = MKX_Start(ar1, NULL);
  CHECK_RC(rc, MKX_SUCCESS, "the same plan on every rank afterwards");
  CHECK(rc != MKX_SUCCESS || !memcmp(c1, want, sizeof want),
        "and its result is right");
  MKX_Request_free(&ag);
  MKX_Request_free(&ar2);
  MKX_Request_free(&ar1);
}

/* What a plan and the communicator's last call ran, on host buffers: the
 * host path, not capturable, no CTAs; "none" on a new communicator; bad
 * handles and NULL outputs refused. */
static void path_query(void) {
  MKX_Comm c = NULL;
  const char *name = NULL;
  int cap = -1, ctas = -1;
  int rc = MKX_Comm_create(MPI_COMM_WORLD, MPI_INFO_NULL, &c);
  CHECK_RC(rc, MKX_SUCCESS, "path query: MKX_Comm_create");
  if (!mt_all(rc == MKX_SUCCESS)) return;
  rc = MKX_Comm_get_last_path(c, &name, &cap, &ctas);
  CHECK(rc == MKX_SUCCESS && !strcmp(name, "none") && cap == 0 && ctas == 0,
        "path query: \"none\" before any call (%s)", name ? name : "NULL");
  double a[2] = {1, 2}, b[2] = {0.5, -1}, out[4];
  MKX_Request r = NULL;
  rc = MKX_Gemm_allreduce_init(a, 2, 1, 1, b, 2, 2, MKX_NO_TRANS, out, 2,
                               MKX_FP64, MKX_FP64, MKX_ROW_MAJOR, c,
                               MPI_INFO_NULL, &r);
  CHECK_RC(rc, MKX_SUCCESS, "path query: a plan");
  name = NULL, cap = ctas = -1;
  if (rc == MKX_SUCCESS) rc = MKX_Request_get_path(r, &name, &cap, &ctas);
  CHECK(rc == MKX_SUCCESS && !strcmp(name, "host") && cap == 0 && ctas == 0,
        "path query: the plan runs on the host, not capturable (%s, %d, %d)",
        name ? name : "NULL", cap, ctas);
  if (rc == MKX_SUCCESS) rc = MKX_Start(r, NULL);
  name = NULL;
  if (rc == MKX_SUCCESS) rc = MKX_Comm_get_last_path(c, &name, &cap, &ctas);
  CHECK(rc == MKX_SUCCESS && !strcmp(name, "host"),
        "path query: the last call ran on the host (%s)", name ? name : "NULL");
  CHECK_RC(MKX_Request_get_path(r, NULL, &cap, &ctas), MKX_ERR_NULL_POINTER,
           "path query: name NULL");
  CHECK_RC(MKX_Comm_get_last_path(c, &name, &cap, NULL), MKX_ERR_NULL_POINTER,
           "path query: ctas NULL");
  MKX_Request gone = r;
  MKX_Request_free(&r);
  CHECK_RC(MKX_Request_get_path(gone, &name, &cap, &ctas),
           MKX_ERR_INVALID_REQUEST, "path query: a freed request");
  CHECK_RC(MKX_Request_get_path(NULL, &name, &cap, &ctas),
           MKX_ERR_INVALID_REQUEST, "path query: a NULL request");
  MKX_Comm_free(&c);
  CHECK_RC(MKX_Comm_get_last_path(NULL, &name, &cap, &ctas),
           MKX_ERR_INVALID_COMM, "path query: a NULL communicator");
}

int main(int argc, char **argv) {
  mt_init(&argc, &argv);
  MKX_Comm comm = NULL;
  int rc = MKX_Comm_create(MPI_COMM_WORLD, MPI_INFO_NULL, &comm);
  CHECK_RC(rc, MKX_SUCCESS, "MKX_Comm_create");
  if (!mt_all(rc == MKX_SUCCESS)) return mt_finish();
  double t0 = MPI_Wtime();

  /* 1. one plan at a time, every op, several layouts and types */
  int id = 0;
  for (int kind = 0; kind < 3; kind++)
    for (int v = 0; v < 4; v++, id++) {
      pcase P;
      MKX_Order order = v % 2 ? MKX_COL_MAJOR : MKX_ROW_MAJOR;
      MKX_Trans tb = v / 2 ? MKX_TRANS : MKX_NO_TRANS;
      MKX_Datatype dt = types[(v + kind) % 4];
      /* v == 3: C in fp32 from 16-bit inputs (fp64 stays fp64) */
      MKX_Datatype ct = v == 3 && dt != MKX_FP64 ? MKX_FP32 : dt;
      setup(&P, kind, id, order, tb, dt, ct);
      MPI_Info info = MPI_INFO_NULL;
      if (v == 1) MPI_Info_create(&info); /* an empty, real MPI_Info */
      double *Aall = NULL;
      double *ref = fill(&P, 0, &Aall); /* inputs present at init */
      rc = init_plan(&P, comm, info);
      if (info != MPI_INFO_NULL) MPI_Info_free(&info);
      CHECK_RC(rc, MKX_SUCCESS, "%s: _init returns MKX_SUCCESS", P.desc);
      CHECK(rc != MKX_SUCCESS || P.req != NULL, "%s: _init gives a request",
            P.desc);
      int ok = mt_all(rc == MKX_SUCCESS && P.req != NULL);
      for (int it = 0; ok && it < STARTS; it++) {
        if (it > 0) {
          free(ref);
          free(Aall);
          ref = fill(&P, it, &Aall);
        }
        rc = MKX_Start(P.req, NULL);
        CHECK_RC(rc, MKX_SUCCESS, "%s start %d: MKX_Start", P.desc, it);
        if (!(ok = mt_all(rc == MKX_SUCCESS))) break;
        check(&P, it, ref, Aall);
      }
      free(ref);
      free(Aall);
      if (P.req) {
        rc = MKX_Request_free(&P.req);
        CHECK_RC(rc, MKX_SUCCESS, "%s: MKX_Request_free", P.desc);
        CHECK(P.req == NULL, "%s: MKX_Request_free sets the handle to NULL",
              P.desc);
      }
      release(&P);
    }

  /* 2. three plans alive at once, started interleaved with an immediate
   *    call between the starts */
  {
    pcase P[3];
    setup(&P[0], K_AG, id++, MKX_ROW_MAJOR, MKX_TRANS, MKX_FP32, MKX_FP32);
    setup(&P[1], K_RS, id++, MKX_COL_MAJOR, MKX_NO_TRANS, MKX_BF16, MKX_FP32);
    setup(&P[2], K_AR, id++, MKX_ROW_MAJOR, MKX_NO_TRANS, MKX_FP64, MKX_FP64);
    double *ref[3], *Aall[3];
    int ok = 1;
    for (int i = 0; i < 3; i++) {
      ref[i] = fill(&P[i], 0, &Aall[i]);
      rc = init_plan(&P[i], comm, MPI_INFO_NULL);
      CHECK_RC(rc, MKX_SUCCESS, "%s (concurrent): _init", P[i].desc);
      ok &= mt_all(rc == MKX_SUCCESS);
    }
    for (int it = 0; ok && it < 3; it++) {
      for (int i = 2; i >= 0 && ok; i--) {
        if (it > 0) {
          free(ref[i]);
          free(Aall[i]);
          ref[i] = fill(&P[i], it, &Aall[i]);
        }
        rc = MKX_Start(P[i].req, NULL);
        CHECK_RC(rc, MKX_SUCCESS, "%s (concurrent) start %d", P[i].desc, it);
        ok &= mt_all(rc == MKX_SUCCESS);
        if (ok) check(&P[i], it, ref[i], Aall[i]);
        /* an immediate call on other buffers between the starts */
        if (ok && i == 1) {
          double one_a[2] = {1, 2}, one_b[2] = {0.5, -1}, cc[4] = {0};
          /* every rank: A_r = [1;2] (2 x 1), B_r = [0.5 -1] (1 x 2); host
           * pointers (the host path, also on a GPU communicator) */
          rc = MKX_Gemm_allreduce(one_a, 2, 1, 1, one_b, 2, 2, MKX_NO_TRANS, cc,
                                  2, MKX_FP64, MKX_FP64, MKX_ROW_MAJOR, comm,
                                  NULL);
          int good = rc == MKX_SUCCESS;
          double want[4] = {0.5 * mt.size, -1.0 * mt.size, 1.0 * mt.size,
                            -2.0 * mt.size};
          for (int e = 0; e < 4; e++) good &= cc[e] == want[e];
          CHECK(good, "immediate gemm_allreduce between plan starts (it %d)",
                it);
          ok &= mt_all(rc == MKX_SUCCESS);
        }
      }
    }
    for (int i = 0; i < 3; i++) {
      if (P[i].req) {
        rc = MKX_Request_free(&P[i].req);
        CHECK_RC(rc, MKX_SUCCESS, "%s (concurrent): MKX_Request_free",
                 P[i].desc);
        CHECK(P[i].req == NULL, "%s (concurrent): handle NULL after free",
              P[i].desc);
      }
      free(ref[i]);
      free(Aall[i]);
      release(&P[i]);
    }
  }

  /* 3. NULL requests */
  rc = MKX_Start(NULL, NULL);
  CHECK_RC(rc, MKX_ERR_INVALID_REQUEST,
           "MKX_Start(NULL) returns MKX_ERR_INVALID_REQUEST");
  {
    MKX_Request nr = NULL;
    rc = MKX_Start(nr, NULL);
    CHECK_RC(
        rc, MKX_ERR_INVALID_REQUEST,
        "MKX_Start on a freed (NULL) handle returns MKX_ERR_INVALID_REQUEST");
    CHECK(*MKX_Get_last_error() != '\0',
          "MKX_Get_last_error set after MKX_Start(NULL)");
  }

  if (mt.size > 1) mismatched_starts(comm);
  path_query();

  if (mt.rank == 0) mt_diag("plans done in %.2f s", MPI_Wtime() - t0);
  rc = MKX_Comm_free(&comm);
  CHECK_RC(rc, MKX_SUCCESS, "MKX_Comm_free");
  CHECK(comm == NULL, "MKX_Comm_free sets the handle to NULL");
  return mt_finish();
}
