/*
 * mkx_comm_agree_u64 and mkx_comm_agree_rc (src/core/comm_agree.c) on 1-4
 * ranks: every rank gets the same max / and / or of the ranks' numbers (they
 * depend on the rank, so a rank that combined only its own, or only some,
 * would differ), and the same verdict on a local step.  Then a rank that
 * arrives after the others gave up: they time out within the bound, the
 * buffers of the exchange they abandoned are still MKX's when the late
 * rank's data lands in them (under ASan a use-after-free otherwise), and
 * the late rank learns that the others gave up (MKX_ERR_PEER).
 * Then ranks out of step: rank 0 in a call while the others are in
 * another exchange (an agreement of another size: matched by size alone,
 * Open MPI would end the job with MPI_ERR_TRUNCATE); rank 0 alone makes a
 * call on a communicator of virtual nodes over shm (one whose free ends with an exchange), the
 * others go straight to MKX_Comm_free, before or after rank 0 gave up.
 * The free's exchange meets the abandoned one: every rank returns, none
 * aborts the job (Open MPI reports a size mismatch of non-blocking
 * collectives to MPI_COMM_WORLD's handler), within the bound.
 */
#include <stdint.h>
#include <string.h>
#include <time.h>
#include "core/comm.h"
#include "mkx_test.h"

static void agree_rc(MKX_Comm c) {
  int rc = mkx_comm_agree_rc(c, MKX_SUCCESS, "step");
  CHECK_RC(rc, MKX_SUCCESS, "agree_rc: every rank got through");
  const int bad = mt.size - 1;
  int mine = mt.rank == bad ? MKX_ERR_NOMEM : MKX_SUCCESS;
  rc = mkx_comm_agree_rc(c, mine, "step");
  if (mt.rank == bad) {
    CHECK_RC(rc, MKX_ERR_NOMEM,
             "agree_rc: the failing rank keeps its "
             "code");
  } else {
    char who[32];
    snprintf(who, sizeof who, "rank %d", bad);
    CHECK_RC(rc, MKX_ERR_PEER, "agree_rc: the others learn it");
    CHECK(strstr(MKX_Get_last_error(), who) != NULL,
          "agree_rc: message "
          "names %s: %s",
          who, MKX_Get_last_error());
  }
}

/* A communicator whose waits give up after timeout_ms, of virtual nodes of
 * one rank over shm if vnodes; NULL on every rank if any failed. */
static MKX_Comm make_comm(const char *timeout_ms, int vnodes,
                          const char *what) {
  MPI_Info info;
  MPI_Info_create(&info);
  MPI_Info_set(info, "mkx_timeout_ms", timeout_ms);
  if (vnodes) MPI_Info_set(info, "mkx_virtual_node_size", "1");
  if (vnodes) MPI_Info_set(info, "mkx_net", "shm");
  MKX_Comm c = NULL;
  int rc = MKX_Comm_create(MPI_COMM_WORLD, info, &c);
  MPI_Info_free(&info);
  CHECK_RC(rc, MKX_SUCCESS, "%s: MKX_Comm_create (timeout_ms=%s)", what,
           timeout_ms);
  if (!mt_all(rc == MKX_SUCCESS)) {
    if (c) MKX_Comm_free(&c);
    return NULL;
  }
  return c;
}

static void nap_ms(long ms) {
  const struct timespec nap = {ms / 1000, ms % 1000 * 1000000L};
  nanosleep(&nap, NULL);
}

/* The last rank joins an agreement (alloc: MKX_Alloc_mem's) 3 bounds
 * late. */
static void late_rank(int alloc) {
  MKX_Comm c = make_comm("300", 0, "late rank");
  if (!c) return;
  const int late = mt.size - 1;
  if (mt.rank == late) nap_ms(900);
  const double t0 = MPI_Wtime();
  void *p = NULL;
  int rc = alloc ? MKX_Alloc_mem(c, 64, &p)
                 : mkx_comm_agree_rc(c, MKX_SUCCESS, "late step");
  CHECK(p == NULL, "late rank: no memory handed out");
  const double dt = MPI_Wtime() - t0;
  if (mt.rank != late) {
    CHECK_RC(rc, MKX_ERR_TIMEOUT, "late rank: the others time out");
    CHECK(dt < 3.0, "late rank: within the bound (%.2f s)", dt);
    CHECK(mkx_comm_check(c) != MKX_SUCCESS,
          "late rank: the "
          "communicator is unusable after the timeout");
  } else {
    /* its exchange completes with what the others sent before they gave
     * up, and they told it so: void, not a success */
    if (CHECK_RC(rc, MKX_ERR_PEER,
                 "late rank: told that the others gave "
                 "up"))
      CHECK(strstr(MKX_Get_last_error(), "gave up waiting") != NULL,
            "late rank: says so: %s", MKX_Get_last_error());
    CHECK(mkx_comm_check(c) != MKX_SUCCESS,
          "late rank: its communicator "
          "is unusable too");
  }
  /* then every rank can still free the communicator */
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK_RC(MKX_Comm_free(&c), MKX_SUCCESS, "late rank: MKX_Comm_free");
}

/* The last rank joins an agreement late, after the others gave up on it
 * and freed the communicator: its data lands on ranks whose communicator
 * is gone from the user's view, and MPI must not find it freed. */
static void late_after_free(void) {
  MKX_Comm c = make_comm("300", 0, "late after free");
  if (!c) return;
  if (mt.rank == mt.size - 1) nap_ms(900);
  int rc = mkx_comm_agree_rc(c, MKX_SUCCESS, "late step");
  CHECK(rc != MKX_SUCCESS, "late after free: the step fails (%s)",
        MKX_Error_string(rc));
  CHECK_RC(MKX_Comm_free(&c), MKX_SUCCESS, "late after free: MKX_Comm_free");
  /* the late rank's data arrives while the others wait here */
  MPI_Barrier(MPI_COMM_WORLD);
  for (int i = 0; i < 3; i++) {
    rc = MKX_Comm_create(MPI_COMM_WORLD, MPI_INFO_NULL, &c);
    CHECK_RC(rc, MKX_SUCCESS, "late after free: a new communicator (%d)", i);
    if (rc == MKX_SUCCESS) rc = mkx_comm_agree_rc(c, MKX_SUCCESS, "next step");
    CHECK_RC(rc, MKX_SUCCESS, "late after free: works (%d)", i);
    MKX_Comm_free(&c);
  }
}

/* Rank 0 makes a call while the others are in an exchange of another
 * size: each gets MKX_ERR_PEER naming both exchanges, at once (not after
 * the bound), and its communicator is unusable. */
static void out_of_step(void) {
  MKX_Comm c = make_comm("20000", 0, "out of step");
  if (!c) return;
  int rc;
  const double t0 = MPI_Wtime();
  double a[2] = {1, 2}, b[2] = {3, 4}, out[4];
  if (mt.rank == 0)
    rc = MKX_Gemm_allreduce(a, 2, 1, 1, b, 1, 2, MKX_NO_TRANS, out, 2, MKX_FP64,
                            MKX_FP64, MKX_ROW_MAJOR, c, NULL);
  else
    rc = mkx_comm_agree_rc(c, MKX_SUCCESS, "another step");
  if (CHECK_RC(rc, MKX_ERR_PEER, "out of step: every rank fails"))
    CHECK(strstr(MKX_Get_last_error(), "another step") &&
              strstr(MKX_Get_last_error(), "the call's agreement"),
          "out of step: the message names both: %s", MKX_Get_last_error());
  CHECK(MPI_Wtime() - t0 < 10.0, "out of step: found before the bound");
  CHECK(mkx_comm_check(c) != MKX_SUCCESS,
        "out of step: the communicator is unusable");
  CHECK_RC(MKX_Comm_free(&c), MKX_SUCCESS, "out of step: MKX_Comm_free");
  MPI_Barrier(MPI_COMM_WORLD);
}

/* Rank 0 alone makes a call; the others free the communicator at once
 * (early) or after rank 0 gave up (!early). */
static void skipped_call(int early) {
  MKX_Comm c = make_comm("300", 1, "skipped call (virtual nodes)");
  if (!c) return;
  int rc;
  const double t0 = MPI_Wtime();
  double a[2] = {1, 2}, b[2] = {3, 4}, out[4];
  if (mt.rank == 0) {
    rc = MKX_Gemm_allreduce(a, 2, 1, 1, b, 1, 2, MKX_NO_TRANS, out, 2, MKX_FP64,
                            MKX_FP64, MKX_ROW_MAJOR, c, NULL);
    /* it times out, or meets the others' free, whichever comes first */
    CHECK(rc == MKX_ERR_TIMEOUT || rc == MKX_ERR_PEER,
          "skipped call (%s): rank 0 fails: %s", early ? "early" : "late",
          MKX_Get_last_error());
  } else if (!early) {
    nap_ms(600);
  }
  rc = MKX_Comm_free(&c);
  CHECK(c == NULL, "skipped call (%s): MKX_Comm_free returns (%s)",
        early ? "early" : "late", MKX_Error_string(rc));
  const double dt = MPI_Wtime() - t0;
  CHECK(dt < 3.0, "skipped call: within the bound (%.2f s)", dt);
  MPI_Barrier(MPI_COMM_WORLD);
}

int main(int argc, char **argv) {
  mt_init(&argc, &argv);
  MKX_Comm c = NULL;
  int rc = MKX_Comm_create(MPI_COMM_WORLD, MPI_INFO_NULL, &c);
  CHECK_RC(rc, MKX_SUCCESS, "MKX_Comm_create");
  if (!mt_all(rc == MKX_SUCCESS)) return mt_finish();
  const uint64_t big = (uint64_t)1 << 40; /* more than an int holds */
  uint64_t got = 0;
  rc = mkx_comm_agree_u64(c, big + 7 * (uint64_t)mt.rank, MKX_AGREE_MAX, &got,
                          "max");
  CHECK(rc == MKX_SUCCESS && got == big + 7 * (uint64_t)(mt.size - 1),
        "max of the ranks' numbers: %llu", (unsigned long long)got);
  rc = mkx_comm_agree_u64(c, mt.rank == mt.size - 1 ? 0 : 1, MKX_AGREE_AND,
                          &got, "and");
  CHECK(rc == MKX_SUCCESS && got == 0, "and: the last rank's 0 wins");
  rc = mkx_comm_agree_u64(c, 1, MKX_AGREE_AND, &got, "and");
  CHECK(rc == MKX_SUCCESS && got == 1, "and: every rank 1");
  rc = mkx_comm_agree_u64(c, (uint64_t)1 << mt.rank, MKX_AGREE_OR, &got, "or");
  CHECK(rc == MKX_SUCCESS && got == ((uint64_t)1 << mt.size) - 1,
        "or: every rank's bit (%llx)", (unsigned long long)got);
  rc = mkx_comm_agree_u64(c, mt.rank == 0 ? 2 : 0, MKX_AGREE_OR, &got, "or");
  CHECK(rc == MKX_SUCCESS && got == 2, "or: rank 0's bit alone");
  agree_rc(c);
  MKX_Comm_free(&c);
  if (mt.size > 1) late_rank(0);
  if (mt.size > 1) late_rank(1);
  if (mt.size > 1) late_after_free();
  if (mt.size > 1) out_of_step();
  if (mt.size > 1) skipped_call(1);
  if (mt.size > 1) skipped_call(0);
  if (mt.size > 1) skipped_call(1);
  return mt_finish();
}
