/*
 * A rank that never arrives, on the fused GPU paths of the three
 * tensor-parallel calls.  For each call, with and without option
 * blocking, on a fresh communicator with mkx_timeout_ms=300:
 *
 *  1. every rank starts a persistent plan once: it must take the fused path
 *     and give the right product (double-precision reference); with
 *     blocking the stream must be idle when MKX_Start returns, and a start
 *     captured into a CUDA graph must not synchronise (replayed once);
 *  2. rank 1 skips a start that the others make.  They must get
 *     MKX_ERR_TIMEOUT naming rank 1 and the call barrier, within BOUND_S
 *     seconds and not before about timeout_ms: with blocking from that
 *     start itself, without it from the next start (after synchronising
 *     the stream, which must return: every GPU wait is bounded);
 *  3. the communicator is then unusable: the next start fails at once with
 *     MKX_ERR_INVALID_COMM naming the timeout.  Rank 1 waits at a barrier
 *     until the others are done; its C, poisoned before, must be as it
 *     was: no peer writes into the memory of a rank that never joined the
 *     run (GEMM+AllReduce stores every rank's rows into every C).  Then
 *     every rank frees the request and the communicator, which must
 *     neither hang nor crash;
 *  4. each case again with rank 1 late instead of absent: it makes the
 *     start 2 x timeout_ms after the others, who time out as in 2.  Their
 *     runs go on after giving up, so its run finds every flag set; it must
 *     still fail, told by them: MKX_ERR_PEER naming the rank that gave up
 *     and what it waited for, at once, reported as in 2, then 3;
 *  5. rank 1 starts another plan than the others (of another call, or a
 *     second plan of the same call), after both plans ran once everywhere:
 *     every rank must get MKX_ERR_SHAPE_MISMATCH naming both plans, well
 *     before a long bound (MISMATCH_MS: found, not waited out), reported
 *     as in 2, then 3 (one node only).
 *
 * With --net shm|tcp the ranks are virtual nodes of one rank over that
 * transport and the calls are driven by the GPU (option hier_gemm=proxy):
 * the same cases, but a missing rank is found at its arrival over the
 * network, a late rank is not told (no peer writes into its memory after
 * giving up) and reports its own timeout, naming a rank, within the bound;
 * the captured graph replays three times, each a call of its own over the
 * network, then a plain start follows, and a plan that would grow the
 * network region the graph holds is refused with MKX_ERR_UNSUPPORTED on
 * every rank.  With --vnode G as well (G > 1: virtual nodes of G ranks)
 * the three calls run on such nodes, and a missing rank may be reported by
 * each rank as what it waited for (the node's barrier, a column peer's
 * arrival, a forwarded chunk, a node rank's partial, the node's meeting
 * before the rounded rows: the chain starts at the missing
 * rank but a rank may name the link next to it), so each must fail within
 * the bound naming a rank.
 *
 * Persistent plans, because MKX_Start does no collective host work: a
 * skipped plain call would time out in its host agreement before any GPU
 * work (that path is tests/mpi/test_bad_input's).  A case that hangs is
 * ended by alarm() after GUARD_S seconds and fails the test.  Skips (77)
 * without a GPU or with one rank.  Ranks may share a GPU (MPS or time
 * slices).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cuda_runtime.h>
#include "mkx_test.h"
#include "cuda_check.h"
#include "ops/path.h"
#include "ops/fused/fused.h"

#define TIMEOUT_MS 300    /* the communicators' bound on every wait */
#define BOUND_S 20.0      /* a missing rank is reported within this */
#define GUARD_S 120       /* a case still running after this hangs: fail */
#define LATE 1            /* the rank that skips a start */
#define MISMATCH_MS 20000 /* the bound of the mismatch cases */

#define CUDA(call) MT_CUDA(call)

static const char *net; /* --net: virtual nodes of 1 over it, GPU-driven */
static const char *vnode = "1"; /* --vnode: of that many ranks */

/* Starts on the fused paths under test so far (ops/path.h). */
static long fused_starts(void) {
  if (net) return mkx_path_starts(MKX_PATH_HIER_PROXY);
  return mkx_path_starts(MKX_PATH_TP_OVERLAP) +
         mkx_path_starts(MKX_PATH_TP_PULL) + mkx_path_starts(MKX_PATH_TP_SPLIT);
}

/* Where a missing rank is found: the call barrier, or over the network
 * its arrival at the call. */
static const char *missed_where(void) {
  return net ? "arrival over the network" : "call barrier";
}

enum { OP_AG = 0, OP_RS, OP_AR };
static const char *const op_name[] = {"allgather_gemm", "gemm_rs", "gemm_ar"};

static cudaStream_t st;

/* ---- one problem per call: small shapes the fused path takes ------------- */

typedef struct prob {
  int op;
  int64_t m, k, n;      /* AG: m_local, k; RS/AR: M, k_local */
  int64_t first, crows; /* this rank's C: rows [first, first + crows) */
  void *A, *B, *C;      /* device */
  double *ref;          /* expected C, crows x n */
} prob;

/* Every problem has inputs of its own: a call that read what an earlier
 * one left in a reused buffer (a row that had not landed yet) is wrong. */
static uint64_t prob_seed;
static int probs;

static void *upload(int64_t rows, int64_t cols, int q, int tensor,
                    double **vals) {
  *vals = mt_gen(rows, cols, MKX_BF16, prob_seed, q, tensor);
  size_t bytes = (size_t)(rows * cols) * 2;
  void *h = malloc(bytes), *d = NULL;
  mt_store(h, MKX_BF16, MKX_ROW_MAJOR, rows, cols, cols, *vals);
  CUDA(cudaMalloc(&d, bytes));
  mt_dev_copy(d, h, bytes, st);
  free(h);
  return d;
}

/* The reference from every rank's A (and, for RS/AR, B) regenerated here:
 * AG: [A_0; ...; A_p-1] B_r; RS/AR: sum_q A_q B_q, rows of this rank's C. */
static void reference(prob *p, const double *B) {
  const int64_t M = p->op == OP_AG ? p->m * mt.size : p->m;
  double *full = calloc((size_t)(M * p->n), sizeof *full);
  for (int q = 0; q < mt.size; q++) {
    double *a = mt_gen(p->m, p->k, MKX_BF16, prob_seed, q, 1);
    double *b =
        p->op == OP_AG ? NULL : mt_gen(p->k, p->n, MKX_BF16, prob_seed, q, 2);
    if (p->op == OP_AG)
      mt_ref_gemm_acc(full + q * p->m * p->n, a, B, p->m, p->k, p->n);
    else
      mt_ref_gemm_acc(full, a, b, M, p->k, p->n);
    free(a), free(b);
  }
  p->ref = malloc((size_t)(p->crows * p->n) * sizeof *p->ref);
  memcpy(p->ref, full + p->first * p->n,
         (size_t)(p->crows * p->n) * sizeof *full);
  free(full);
}

/* scale: times the rows of the usual problem */
static void prob_init(prob *p, int op, int64_t scale) {
  double *a, *b;
  memset(p, 0, sizeof *p);
  p->op = op;
  prob_seed = mt.seed + (uint64_t)probs++;
  p->m = (op == OP_AG ? 256 : 512) * scale;
  p->k = 128;
  p->n = 256;
  p->crows = op == OP_AG ? p->m * mt.size : p->m;
  if (op == OP_RS)
    MKX_Block_range(p->m, mt.size, mt.rank, &p->first, &p->crows);
  p->A = upload(p->m, p->k, mt.rank, 1, &a);
  p->B = upload(p->k, p->n, mt.rank, 2, &b);
  reference(p, b);
  CUDA(cudaMalloc(&p->C, (size_t)(p->crows * p->n) * 4));
  mt_dev_fill(p->C, 0xff, (size_t)(p->crows * p->n) * 4, st); /* NaN */
  free(a), free(b);
}

static void prob_free(prob *p) {
  CUDA(cudaFree(p->A));
  CUDA(cudaFree(p->B));
  CUDA(cudaFree(p->C));
  free(p->ref);
}

static int plan_init(const prob *p, MKX_Comm c, MKX_Request *r) {
  if (p->op == OP_AG)
    return MKX_Allgather_gemm_init(
        p->A, p->m, p->k, p->k, p->B, p->n, p->n, MKX_NO_TRANS, p->C, p->n,
        NULL, 0, MKX_BF16, MKX_FP32, MKX_ROW_MAJOR, c, MPI_INFO_NULL, r);
  if (p->op == OP_RS)
    return MKX_Gemm_reduce_scatter_init(
        p->A, p->m, p->k, p->k, p->B, p->n, p->n, MKX_NO_TRANS, p->C, p->n,
        MKX_BF16, MKX_FP32, MKX_ROW_MAJOR, c, MPI_INFO_NULL, r);
  return MKX_Gemm_allreduce_init(p->A, p->m, p->k, p->k, p->B, p->n, p->n,
                                 MKX_NO_TRANS, p->C, p->n, MKX_BF16, MKX_FP32,
                                 MKX_ROW_MAJOR, c, MPI_INFO_NULL, r);
}

/* Where C is wrong: the first few values off by more than 1e-3 of the
 * reference's largest, and how many there are, for the log. */
static void where_wrong(const prob *p, const float *h) {
  double big = 0;
  int64_t bad = 0;
  for (int64_t i = 0; i < p->crows * p->n; i++)
    if (fabs(p->ref[i]) > big) big = fabs(p->ref[i]);
  for (int64_t i = 0; i < p->crows; i++)
    for (int64_t j = 0; j < p->n; j++) {
      const double x = h[i * p->n + j], r = p->ref[i * p->n + j];
      if (!(fabs(x - r) <= 1e-3 * big) && bad++ < 4)
        mt_diag("[rank %d/%d] %s: C row %lld col %lld is %g, expected %g",
                mt.rank, mt.size, op_name[p->op], (long long)(p->first + i),
                (long long)j, x, r);
    }
  mt_diag("[rank %d/%d] %s: %lld of %lld values of C wrong", mt.rank, mt.size,
          op_name[p->op], (long long)bad, (long long)(p->crows * p->n));
}

/* C (after the stream) against the reference; poisons C for the next run. */
static int check_c(prob *p, const char *what) {
  size_t bytes = (size_t)(p->crows * p->n) * 4;
  float *h = malloc(bytes);
  CUDA(cudaStreamSynchronize(st));
  mt_dev_copy(h, p->C, bytes, st);
  double err =
      mt_relerr_mat(h, MKX_FP32, MKX_ROW_MAJOR, p->n, p->crows, p->n, p->ref);
  if (!(err <= mt_tol(MKX_BF16, MKX_FP32))) where_wrong(p, h);
  free(h);
  mt_dev_fill(p->C, 0xff, bytes, st);
  return CHECK(err <= mt_tol(MKX_BF16, MKX_FP32),
               "%s %s: relative error "
               "%.2e",
               op_name[p->op], what, err);
}

/* ---- the phases of a case -------------------------------------------------- */

/* Rank LATE's C, poisoned before the others' start that it skips, once
 * they are done with it: every byte as it was. */
static void untouched_c(const prob *p) {
  const size_t bytes = (size_t)(p->crows * p->n) * 4;
  unsigned char *h = malloc(bytes);
  mt_dev_copy(h, p->C, bytes, st);
  size_t changed = 0, first = 0;
  for (size_t i = 0; i < bytes; i++)
    if (h[i] != 0xff && !changed++) first = i;
  free(h);
  CHECK(changed == 0,
        "%s: C of rank %d, which never joined the run, left alone by the "
        "ranks that gave up on it (%zu bytes changed, the first in element "
        "%zu)",
        op_name[p->op], LATE, changed, first / 4);
}

static MKX_Comm make_comm(int timeout_ms, int blocking, const char *overlap) {
  MPI_Info info;
  MKX_Comm c = NULL;
  char ms[24];
  snprintf(ms, sizeof ms, "%d", timeout_ms);
  MPI_Info_create(&info);
  MPI_Info_set(info, "mkx_timeout_ms", ms);
  MPI_Info_set(info, "mkx_fused", "auto"); /* whatever MKX_FUSED says */
  MPI_Info_set(info, "mkx_blocking", blocking ? "true" : "false");
  MPI_Info_set(info, "mkx_tp_overlap", overlap); /* yes, no: both paths */
  if (net) {
    MPI_Info_set(info, "mkx_virtual_node_size", vnode);
    MPI_Info_set(info, "mkx_net", net);
    MPI_Info_set(info, "mkx_hier_gemm", "proxy");
  }
  MPI_Barrier(MPI_COMM_WORLD); /* start together: the bound is short */
  int rc = MKX_Comm_create(MPI_COMM_WORLD, info, &c);
  MPI_Info_free(&info);
  CHECK_RC(rc, MKX_SUCCESS, "comm with timeout_ms=%d blocking=%d", timeout_ms,
           blocking);
  return rc == MKX_SUCCESS ? c : NULL;
}

/* One start by every rank: fused, correct; with blocking, already done. */
static int good_start(prob *p, MKX_Request r, int blocking) {
  long before = fused_starts();
  MPI_Barrier(MPI_COMM_WORLD);
  int rc = MKX_Start(r, st);
  CHECK_RC(rc, MKX_SUCCESS, "%s: start by every rank", op_name[p->op]);
  CHECK(fused_starts() == before + 1, "%s: fused path taken", op_name[p->op]);
  if (blocking) {
    cudaError_t idle = cudaStreamQuery(st);
    (void)cudaGetLastError(); /* a "not ready" must not reach a launch */
    CHECK(idle == cudaSuccess,
          "%s: blocking start returns with its run "
          "done (%s)",
          op_name[p->op], cudaGetErrorString(idle));
  }
  int ok = check_c(p, "good start") && rc == MKX_SUCCESS;
  return mt_all(ok);
}

/* Driven by the GPU, a graph holds the network region's address: a plan
 * that needs a larger region is refused on every rank, saying why, and
 * the communicator stays usable. */
static int no_growth(const prob *p, MKX_Comm c) {
  prob big;
  MKX_Request r = NULL;
  prob_init(&big, p->op, 4);
  int rc = plan_init(&big, c, &r);
  CHECK_RC(rc, MKX_ERR_UNSUPPORTED,
           "%s: a plan that would grow a captured region is refused",
           op_name[p->op]);
  CHECK(strstr(MKX_Get_last_error(), "CUDA graph") != NULL,
        "%s: and says why: %s", op_name[p->op], MKX_Get_last_error());
  if (r) MKX_Request_free(&r);
  prob_free(&big);
  return mt_all(rc == MKX_ERR_UNSUPPORTED);
}

/* Option blocking under graph capture: MKX_Start must not synchronise (it
 * would end the capture); the graph replays correctly on every rank.
 * Driven by the GPU, every launch is a call of its own over the network
 * (a new epoch): replayed three times, then a plain start after them. */
static int captured_start(prob *p, MKX_Comm c, MKX_Request r) {
  cudaGraph_t g = NULL;
  cudaGraphExec_t ge = NULL;
  CUDA(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
  int rc = MKX_Start(r, st);
  cudaError_t e = cudaStreamEndCapture(st, &g);
  CHECK_RC(rc, MKX_SUCCESS, "%s: blocking start under capture", op_name[p->op]);
  CHECK(e == cudaSuccess, "%s: capture survives a blocking start (%s)",
        op_name[p->op], cudaGetErrorString(e));
  int ok = mt_all(rc == MKX_SUCCESS && e == cudaSuccess &&
                  cudaGraphInstantiate(&ge, g, 0) == cudaSuccess);
  for (int i = 0; ok && i < (net ? 3 : 1); i++) {
    MPI_Barrier(MPI_COMM_WORLD);
    CUDA(cudaGraphLaunch(ge, st));
    ok = mt_all(check_c(p, "graph replay"));
  }
  if (ge) CUDA(cudaGraphExecDestroy(ge));
  if (g) CUDA(cudaGraphDestroy(g));
  (void)cudaGetLastError();
  if (ok && net) ok = good_start(p, r, 1);
  if (ok && net) ok = no_growth(p, c);
  return ok;
}

/* This phase's start, taking *dt seconds: with blocking the start returns
 * the run's status; without, it must only enqueue, and after the stream
 * (which must come back: every wait is bounded) the asynchronous error
 * query (query) or the next start reports the run's failure. */
static int start_status(const char *name, MKX_Comm c, MKX_Request r,
                        int blocking, int query, double *dt) {
  const double t0 = mt_now_s();
  int rc = MKX_Start(r, st);
  if (!blocking) {
    CHECK_RC(rc, MKX_SUCCESS,
             "%s: a start that fails on the GPU only "
             "enqueues",
             name);
    CUDA(cudaStreamSynchronize(st));
    if (query) {
      int qrc = MKX_Comm_get_async_error(c, &rc);
      CHECK_RC(qrc, MKX_SUCCESS, "%s: MKX_Comm_get_async_error", name);
    } else {
      rc = MKX_Start(r, st);
    }
  }
  *dt = mt_now_s() - t0;
  return rc;
}

/* Who reports a run's failure (start_status). */
static const char *reporter(int blocking, int query) {
  return blocking ? "same start" : query ? "async query" : "next start";
}

/* After a failure the communicator is unusable: the next start fails at
 * once with MKX_ERR_INVALID_COMM and a message that says why, naming
 * `who` ("rank 1"; "rank " for any). */
static void check_unusable(const char *name, MKX_Request r, const char *why,
                           const char *who) {
  int rc = MKX_Start(r, st);
  CHECK_RC(rc, MKX_ERR_INVALID_COMM,
           "%s: communicator unusable after "
           "the failure",
           name);
  const char *msg = MKX_Get_last_error();
  CHECK(strstr(msg, why) && strstr(msg, who), "%s: and says why: %s", name,
        msg);
  CUDA(cudaStreamSynchronize(st));
}

/* Rank LATE skips this start, or makes it too late; on the others it must
 * time out, naming it: with blocking that start says so, else the next
 * start or (query) the asynchronous error query.  With more than two ranks
 * one of them may be told by another that gave up first (MKX_ERR_PEER,
 * naming rank LATE as the one waited for). */
/* The message says which run on the workspace failed: here (each start
 * waited for) the last one started, or on the split path, which counts a
 * run when it ends, the one before.  After `replays` replays of a graph
 * (runs without a start; captured_start) the run's number is past the
 * starts and the message gives it alone: the good start, the replays, the
 * start after them, then this one. */
static void run_named(const char *name, const char *msg, int replays) {
  const char *at = strstr(msg, "; run ");
  int e = 0;
  long s = 0;
  const int n = at ? sscanf(at, "; run %d of the %ld started", &e, &s) : 0;
  if (replays) {
    CHECK(n == 1 && strstr(at, " on its workspace") && e == replays + 3,
          "%s: names the run that failed, run %d (%d graph replays): %s", name,
          replays + 3, replays, msg);
    return;
  }
  CHECK(n == 2 && s >= 1 && (e == s || e == s - 1),
        "%s: names the run that failed, the last one started on its "
        "workspace: %s",
        name, msg);
}

static void missed_start(const prob *p, MKX_Comm c, MKX_Request r, int blocking,
                         int query) {
  const char *name = op_name[p->op];
  double dt;
  int rc = start_status(name, c, r, blocking, query, &dt);
  const char *msg = MKX_Get_last_error();
  char late[16];
  snprintf(late, sizeof late, "rank %d", LATE);
  if (atoi(vnode) > 1) { /* any rank in the chain, within the bound */
    CHECK(rc == MKX_ERR_TIMEOUT || rc == MKX_ERR_PEER,
          "%s: missing rank %d: this rank's run fails (%s), reported by the "
          "%s",
          name, LATE, MKX_Error_string(rc), reporter(blocking, query));
    CHECK(strstr(msg, "rank ") != NULL, "%s: and names a rank: %s", name, msg);
    CHECK(dt < BOUND_S, "%s: reported after %.3f s (< %g s)", name, dt,
          BOUND_S);
    check_unusable(name, r, "", "rank ");
    return;
  }
  /* told while its own wait went on: the message says which one */
  if (mt.size > 2 && rc == MKX_ERR_PEER) {
    CHECK(strstr(msg, "this rank was then waiting for rank") != NULL,
          "%s: told, and says what it was waiting for: %s", name, msg);
    rc = MKX_ERR_TIMEOUT;
  }
  CHECK_RC(rc, MKX_ERR_TIMEOUT, "%s: missing rank %d reported by the %s", name,
           LATE, reporter(blocking, query));
  CHECK(strstr(msg, late) && strstr(msg, missed_where()),
        "%s: message names %s and the %s: %s", name, late, missed_where(), msg);
  run_named(name, msg, blocking && net ? 3 : 0);
  CHECK(dt < BOUND_S, "%s: reported after %.3f s (< %g s)", name, dt, BOUND_S);
  CHECK(dt >= 0.5e-3 * TIMEOUT_MS,
        "%s: not before the bound (%.3f s, "
        "timeout_ms=%d)",
        name, dt, TIMEOUT_MS);
  check_unusable(name, r, mt.size > 2 ? "" : "timed out", late);
}

/* Rank LATE starts 2 x timeout_ms after the others, who have given up on
 * it by then (missed_start) and gone on.  Its run must not succeed on what
 * they sent after giving up: MKX_ERR_PEER, naming a rank that gave up
 * waiting for it at the call barrier, reported as a timeout would be, and
 * at once (it was told; it did not wait out a bound of its own). */
static void late_start(const prob *p, MKX_Comm c, MKX_Request r, int blocking,
                       int query) {
  const char *name = op_name[p->op];
  const struct timespec nap = {0, 2 * TIMEOUT_MS * 1000000L};
  nanosleep(&nap, NULL);
  double dt;
  int rc = start_status(name, c, r, blocking, query, &dt);
  if (net) {
    /* not told across the network: its own bound, naming a rank */
    CHECK(rc == MKX_ERR_TIMEOUT || rc == MKX_ERR_PEER,
          "%s: the late rank's run fails (%s), reported by the %s", name,
          MKX_Error_string(rc), reporter(blocking, query));
    CHECK(strstr(MKX_Get_last_error(), "rank ") != NULL,
          "%s: and names a rank: %s", name, MKX_Get_last_error());
    CHECK(dt < BOUND_S, "%s: reported after %.3f s (< %g s)", name, dt,
          BOUND_S);
    check_unusable(name, r, "", "rank ");
    return;
  }
  const char *msg = MKX_Get_last_error();
  char late[32];
  snprintf(late, sizeof late, "waiting for rank %d", LATE);
  CHECK_RC(rc, MKX_ERR_PEER,
           "%s: the late rank's run fails, reported "
           "by the %s",
           name, reporter(blocking, query));
  CHECK(strstr(msg, "gave up") && strstr(msg, late) &&
            strstr(msg, "call barrier"),
        "%s: message says that a peer "
        "gave up %s at the call barrier: %s",
        name, late, msg);
  CHECK(dt < 1e-3 * TIMEOUT_MS,
        "%s: told after %.3f s, sooner than its "
        "own bound (timeout_ms=%d)",
        name, dt, TIMEOUT_MS);
  snprintf(late, sizeof late, "rank %d", LATE);
  check_unusable(name, r, "gave up", late);
}

/* How often `what` occurs in s. */
static int occurrences(const char *s, const char *what) {
  int n = 0;
  for (const char *at = strstr(s, what); at; at = strstr(at + 1, what)) n++;
  return n;
}

/* Case 5: rank LATE starts p2's plan r2, the others p's plan r. */
static void other_plan(const prob *p, const prob *p2, MKX_Comm c, MKX_Request r,
                       MKX_Request r2, int blocking, int query,
                       const char *what) {
  static const char *const call[] = {
      "MKX_Allgather_gemm", "MKX_Gemm_reduce_scatter", "MKX_Gemm_allreduce"};
  double dt;
  MKX_Request mine = mt.rank == LATE ? r2 : r;
  int rc = start_status(what, c, mine, blocking, query, &dt);
  const char *msg = MKX_Get_last_error();
  CHECK_RC(rc, MKX_ERR_SHAPE_MISMATCH,
           "%s: rank %d started another plan, reported by the %s", what, LATE,
           reporter(blocking, query));
  CHECK(occurrences(msg, " plan made by call ") == 2 &&
            strstr(msg, call[p->op]) && strstr(msg, call[p2->op]) &&
            strstr(msg, "every rank must start the same plan"),
        "%s: the message names both plans: %s", what, msg);
  CHECK(dt < 0.25e-3 * MISMATCH_MS,
        "%s: found after %.3f s, not waited out (timeout_ms=%d)", what, dt,
        MISMATCH_MS);
  check_unusable(what, mine, "started the", "rank ");
}

static void mismatch_case(int op, int op2, int blocking, const char *overlap) {
  char what[96];
  snprintf(what, sizeof what,
           "%s (blocking=%d, tp_overlap=%s, rank %d starts a %s plan)",
           op_name[op], blocking, overlap, LATE, op_name[op2]);
  mt_guard(what, GUARD_S);
  MKX_Comm c = make_comm(MISMATCH_MS, blocking, overlap);
  MKX_Request r = NULL, r2 = NULL;
  prob p, p2;
  prob_init(&p, op, 1);
  prob_init(&p2, op2, 1);
  int ok = mt_all(c != NULL);
  if (ok) {
    int rc = plan_init(&p, c, &r);
    if (rc == MKX_SUCCESS) rc = plan_init(&p2, c, &r2);
    CHECK_RC(rc, MKX_SUCCESS, "%s: plans", what);
    ok = mt_all(rc == MKX_SUCCESS);
  }
  if (ok) ok = good_start(&p, r, blocking);
  if (ok) ok = good_start(&p2, r2, blocking);
  MPI_Barrier(MPI_COMM_WORLD);
  if (ok) other_plan(&p, &p2, c, r, r2, blocking, !strcmp(overlap, "no"), what);
  MPI_Barrier(MPI_COMM_WORLD);
  if (r) CHECK_RC(MKX_Request_free(&r), MKX_SUCCESS, "%s: request free", what);
  if (r2)
    CHECK_RC(MKX_Request_free(&r2), MKX_SUCCESS, "%s: request free", what);
  if (c) CHECK_RC(MKX_Comm_free(&c), MKX_SUCCESS, "%s: comm free", what);
  prob_free(&p);
  prob_free(&p2);
  mt_guard_off();
}

static void run_case(int op, int blocking, const char *overlap, int tardy) {
  char what[80];
  snprintf(what, sizeof what, "%s (blocking=%d, tp_overlap=%s, rank %d %s)",
           op_name[op], blocking, overlap, LATE, tardy ? "late" : "absent");
  mt_guard(what, GUARD_S);
  MKX_Comm c = make_comm(TIMEOUT_MS, blocking, overlap);
  MKX_Request r = NULL;
  prob p;
  prob_init(&p, op, 1);
  int ok = mt_all(c != NULL);
  if (ok) {
    int rc = plan_init(&p, c, &r);
    CHECK_RC(rc, MKX_SUCCESS, "%s: plan", what);
    ok = mt_all(rc == MKX_SUCCESS);
  }
  if (ok) ok = good_start(&p, r, blocking);
  if (ok && blocking) ok = captured_start(&p, c, r);
  if (ok && mt.rank == LATE && !tardy)
    mt_dev_fill(p.C, 0xff, (size_t)(p.crows * p.n) * 4, st);
  MPI_Barrier(MPI_COMM_WORLD);
  const int query = !strcmp(overlap, "no");
  if (ok && mt.rank != LATE) missed_start(&p, c, r, blocking, query);
  if (ok && mt.rank == LATE && tardy) late_start(&p, c, r, blocking, query);
  MPI_Barrier(MPI_COMM_WORLD); /* LATE waits here until the others are done */
  if (ok && mt.rank == LATE && !tardy) untouched_c(&p);
  if (r) CHECK_RC(MKX_Request_free(&r), MKX_SUCCESS, "%s: request free", what);
  if (c) CHECK_RC(MKX_Comm_free(&c), MKX_SUCCESS, "%s: comm free", what);
  prob_free(&p);
  mt_guard_off();
}

/* First use of each call, on a comm with the default bound: CUDA context,
 * kernel modules and IPC set up before the 300 ms bound applies. */
static void warm_up(MKX_Comm c, int ops) {
  for (int op = 0; op < ops; op++) {
    prob p;
    MKX_Request r = NULL;
    prob_init(&p, op, 1);
    int rc = plan_init(&p, c, &r);
    if (rc == MKX_SUCCESS) rc = MKX_Start(r, st);
    CHECK_RC(rc, MKX_SUCCESS, "%s: warm-up start", op_name[op]);
    check_c(&p, "warm-up");
    if (r) MKX_Request_free(&r);
    prob_free(&p);
  }
}

int main(int argc, char **argv) {
  mt_init(&argc, &argv);
  for (int i = 1; i + 1 < argc; i++) {
    if (!strcmp(argv[i], "--net")) net = argv[i + 1];
    if (!strcmp(argv[i], "--vnode")) vnode = argv[i + 1];
  }
  const int ops = 3;
  int skip = mt_gpu_count() == 0;
  MPI_Allreduce(MPI_IN_PLACE, &skip, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  const int G = atoi(vnode) > 0 ? atoi(vnode) : 1;
  if (skip || mt.size < 2 || (net && (mt.size % G || mt.size / G < 2))) {
    if (mt.rank == 0)
      printf("1..0 # SKIP %s: %s\n", mt.prog,
             skip ? "no GPU" : "needs 2 ranks or more (2 nodes or more)");
    MPI_Finalize();
    return CHECK_SKIP;
  }
  mt_guard("warm-up", GUARD_S);
  MKX_Comm c0 =
      make_comm(300000, 0, "yes"); /* also makes this rank's GPU current */
  MKX_Comm c1 = make_comm(300000, 0, "no");
  if (!mt_all(c0 != NULL && c1 != NULL)) MPI_Abort(MPI_COMM_WORLD, 1);
  CUDA(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  warm_up(c0, ops);
  warm_up(c1, ops);
  MKX_Comm_free(&c1);
  MKX_Comm_free(&c0);
  mt_guard_off();
  for (int tardy = 0; tardy < 2; tardy++)
    for (int blocking = 0; blocking < 2; blocking++)
      for (int op = 0; op < ops; op++) {
        run_case(op, blocking, "yes", tardy);
        run_case(op, blocking, "no", tardy);
      }
  for (int blocking = 0; !net && blocking < 2; blocking++)
    for (int op = 0; op < ops; op++) {
      mismatch_case(op, (op + 1) % ops, blocking, "yes");
      mismatch_case(op, op, blocking, "no");
    }
  CUDA(cudaStreamDestroy(st));
  return mt_finish();
}
