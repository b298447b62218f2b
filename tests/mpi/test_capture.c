/*
 * The capture decision of a call (src/ops/run.c) on 1-4 ranks, driven
 * through mkx_op_prepare and mkx_op_start_check as a stream being captured
 * into a CUDA graph drives them (so no GPU is needed):
 *  - a call captured on every rank whose path cannot be captured (host
 *    buffers) returns MKX_ERR_UNSUPPORTED on every rank, saying why, and
 *    the communicator stays usable: the next call computes right;
 *  - a call captured on one rank only: MKX_ERR_SHAPE_MISMATCH on every
 *    rank, naming the capturing rank (its kernels would meet the others'
 *    only when its graph is launched);
 *  - MKX_Start on the host path: the same mismatch from its small
 *    exchange, and no complaint when every rank captures (the refusal is
 *    then the start's own, the same on every rank);
 *  - the name of a plan's trace range: operation, path, agreed values.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/comm.h"
#include "core/error.h"
#include "ops/op.h"
#include "mkx_test.h"

enum { M_LOCAL = 3, K = 5, N = 4 };

static MKX_Comm make_comm(void) {
  MPI_Info info;
  MPI_Info_create(&info);
  MPI_Info_set(info, "mkx_timeout_ms", "20000");
  MKX_Comm c = NULL;
  int rc = MKX_Comm_create(MPI_COMM_WORLD, info, &c);
  MPI_Info_free(&info);
  if (!CHECK_RC(rc, MKX_SUCCESS, "MKX_Comm_create"))
    MPI_Abort(MPI_COMM_WORLD, 1);
  return c;
}

typedef struct host_call {
  double A[M_LOCAL * K], B[K * N], *C, *ref;
  mkx_ag_gemm_args a;
} host_call;

/* AllGather+GEMM on host memory in fp64: rank q's A holds q + i + j / 8. */
static void host_call_init(host_call *h) {
  const int64_t M = (int64_t)M_LOCAL * mt.size;
  h->C = calloc((size_t)(M * N), sizeof(double));
  h->ref = calloc((size_t)(M * N), sizeof(double));
  for (int i = 0; i < M_LOCAL * K; i++)
    h->A[i] = mt.rank + i / K + (i % K) / 8.0;
  for (int i = 0; i < K * N; i++) h->B[i] = (i % 7) - 3 + mt.rank;
  for (int64_t r = 0; r < M; r++)
    for (int j = 0; j < N; j++) {
      double s = 0;
      const int q = (int)(r / M_LOCAL), i = (int)(r % M_LOCAL);
      for (int l = 0; l < K; l++) s += (q + i + l / 8.0) * h->B[l * N + j];
      h->ref[r * N + j] = s;
    }
  h->a = (mkx_ag_gemm_args){
      h->A,         M_LOCAL, K, K,    h->B, N,        N,
      MKX_NO_TRANS, h->C,    N, NULL, 0,    MKX_FP64, MKX_FP64,
      MKX_ROW_MAJOR};
}

static void host_call_free(host_call *h) {
  free(h->C);
  free(h->ref);
}

static int prepare(MKX_Comm c, host_call *h, int captured) {
  mkx_prepared p;
  const int rc = mkx_op_prepare(c, &mkx_op_allgather_gemm, MKX_VARIANT_CALL,
                                &h->a, MKX_SUCCESS, captured, &p);
  if (rc == MKX_SUCCESS) mkx_prepared_free(c, &p);
  return rc;
}

/* The communicator still works: a plain call, checked exactly (small
 * integers and eighths: fp64 sums without rounding). */
static void still_usable(MKX_Comm c, host_call *h, const char *after) {
  const int64_t M = (int64_t)M_LOCAL * mt.size;
  memset(h->C, 0, (size_t)(M * N) * sizeof(double));
  int rc =
      MKX_Allgather_gemm(h->A, M_LOCAL, K, K, h->B, N, N, MKX_NO_TRANS, h->C, N,
                         NULL, 0, MKX_FP64, MKX_FP64, MKX_ROW_MAJOR, c, NULL);
  CHECK_RC(rc, MKX_SUCCESS, "after %s: the next call succeeds", after);
  CHECK(rc == MKX_SUCCESS &&
            !memcmp(h->C, h->ref, (size_t)(M * N) * sizeof(double)),
        "after %s: and computes the product", after);
}

static void refused_everywhere(MKX_Comm c, host_call *h) {
  const int rc = prepare(c, h, 1);
  if (CHECK_RC(rc, MKX_ERR_UNSUPPORTED, "captured host call: refused"))
    CHECK(strstr(MKX_Get_last_error(), "CUDA graph") &&
              strstr(MKX_Get_last_error(), "(host)"),
          "captured host call: the message names the path and the graph "
          "(%s)",
          MKX_Get_last_error());
  still_usable(c, h, "the refused capture");
}

static void one_rank_captures(MKX_Comm c, host_call *h) {
  const int rc = prepare(c, h, mt.rank == 0);
  if (CHECK_RC(rc, MKX_ERR_SHAPE_MISMATCH,
               "captured on rank 0 only: mismatch on rank %d", mt.rank))
    CHECK(strstr(MKX_Get_last_error(), "CUDA graph on rank 0 but not"),
          "the message names the capturing rank (%s)", MKX_Get_last_error());
  still_usable(c, h, "the mismatched capture");
}

static void start_checks(MKX_Comm c, host_call *h) {
  mkx_prepared p;
  int rc = mkx_op_prepare(c, &mkx_op_allgather_gemm, MKX_VARIANT_INIT, &h->a,
                          MKX_SUCCESS, 0, &p);
  if (!CHECK_RC(rc, MKX_SUCCESS, "a host plan")) return;
  char want[96];
  snprintf(want, sizeof want,
           "MKX_Allgather_gemm (host) k=5 dtype=MKX_FP64 ctype=MKX_FP64 "
           "order=MKX_ROW_MAJOR total=%d",
           M_LOCAL * mt.size);
  CHECK(!strcmp(p.label, want), "the plan's trace range: \"%s\" (want \"%s\")",
        p.label, want);
  rc = mkx_op_start_check(c, &p, mt.rank == mt.size - 1);
  if (mt.size > 1) {
    if (CHECK_RC(rc, MKX_ERR_SHAPE_MISMATCH,
                 "start captured on the last rank only: mismatch"))
      CHECK(strstr(MKX_Get_last_error(), "MKX_Start") != NULL,
            "the message names MKX_Start (%s)", MKX_Get_last_error());
  }
  rc = mkx_op_start_check(c, &p, 1);
  CHECK_RC(rc, MKX_SUCCESS, "start captured on every rank: they agree");
  rc = mkx_op_start_check(c, &p, 0);
  CHECK_RC(rc, MKX_SUCCESS, "start captured on none: they agree");
  mkx_prepared_free(c, &p);
  still_usable(c, h, "the starts' checks");
}

int main(int argc, char **argv) {
  mt_init(&argc, &argv);
  MKX_Comm c = make_comm();
  host_call h;
  host_call_init(&h);
  refused_everywhere(c, &h);
  if (mt.size > 1) one_rank_captures(c, &h);
  start_checks(c, &h);
  host_call_free(&h);
  CHECK_RC(MKX_Comm_free(&c), MKX_SUCCESS, "MKX_Comm_free");
  return mt_finish();
}
