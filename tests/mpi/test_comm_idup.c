/*
 * Communicators made with a bound too short for their MPI_Comm_idup
 * (mkx_timeout_ms=1), sixteen in a row on every rank: each creation
 * succeeds or gives up (MKX_ERR_TIMEOUT, or MKX_ERR_PEER where a peer gave
 * up first), and MPI_Finalize then neither crashes nor hangs.  Open MPI
 * stalls several idups outstanding on one communicator, and its finalize
 * crashes on a communicator an idup left half made, so MKX keeps its
 * idups of one communicator one at a time and completes the abandoned
 * ones at MPI_Finalize (src/boot/oob_mpi.c).  Most telling under srun.
 */
#if MKX_SANITIZERS
#include <sanitizer/lsan_interface.h>
#endif
#include "mkx_test.h"

int main(int argc, char **argv) {
  mt_init(&argc, &argv);
  /* right after start-up, unsynchronised, as ranks reach their first
   * creation in a job; what the abandoned idups leave pending is MPI's
   * until the end, so the leak check of MKX's own allocations runs at
   * once (the test's own set-up) */
#if MKX_SANITIZERS
  __lsan_do_leak_check();
#endif
  MKX_Comm c = NULL;
  int made = 0, gave_up = 0;
  for (int i = 0; i < 16; i++) {
    MPI_Info info;
    MPI_Info_create(&info);
    MPI_Info_set(info, "mkx_timeout_ms", "1");
    c = NULL;
    const int rc = MKX_Comm_create(MPI_COMM_WORLD, info, &c);
    MPI_Info_free(&info);
    CHECK(rc == MKX_SUCCESS || rc == MKX_ERR_TIMEOUT || rc == MKX_ERR_PEER,
          "timeout_ms=1, creation %d: succeeds or gives up (%s)", i,
          MKX_Error_string(rc));
    made += rc == MKX_SUCCESS, gave_up += rc != MKX_SUCCESS;
    if (c) CHECK_RC(MKX_Comm_free(&c), MKX_SUCCESS, "free %d", i);
  }
  mt_diag("[rank %d/%d] %d made, %d gave up", mt.rank, mt.size, made, gave_up);
  return mt_finish();
}
