/* The main of the network and proxy tests: a test's `run` on 2 to 8 MPI
 * ranks over the MPI out-of-band channel, checking with check.h. */
#ifndef MKX_TESTS_NET_MAIN_H
#define MKX_TESTS_NET_MAIN_H

#include <mpi.h>
#include <stdio.h>
#include "boot/oob_mpi.h"
#include "mkx.h"
#include "../common/check.h"

static int rank, size;

/* MPI_Init, run(oob) on 2..8 ranks (else skip), a summary line, exit
 * status 1 if any rank's check failed. */
static inline int net_main(int argc, char **argv, const char *name,
                           int (*run)(const mkx_oob *)) {
  mkx_oob oob;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size < 2 || size > 8) {
    if (rank == 0) printf("%s needs 2..8 ranks: skipped\n", name);
    MPI_Finalize();
    return CHECK_SKIP;
  }
  check_set_rank(rank, size);
  int rc = mkx_oob_mpi_init(&oob, MPI_COMM_WORLD);
  if (rc == MKX_SUCCESS) rc = run(&oob);
  CHECK_RC(rc, MKX_SUCCESS, "setup and run");
  int failed = check_failed(), total = 0;
  MPI_Allreduce(&failed, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0)
    printf("%s %s: %d ranks, %d checks on rank 0, %d failures\n",
           total ? "FAIL" : "PASS", name, size, check_count(), total);
  mkx_oob_mpi_fini(&oob);
  MPI_Finalize();
  return total ? 1 : 0;
}

#endif
