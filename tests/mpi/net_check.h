/* What the network and proxy tests share: a check that names the rank and
 * line of a failure (and MKX's last error), and a main that runs a test's
 * `run` on 2 to 8 MPI ranks over the MPI out-of-band channel. */
#ifndef MKX_TESTS_NET_CHECK_H
#define MKX_TESTS_NET_CHECK_H

#include <mpi.h>
#include <stdio.h>
#include "boot/oob_mpi.h"
#include "mkx.h"

static int rank, size, failures, checks;

#define CHECK(cond, ...)                                                     \
  do {                                                                       \
    checks++;                                                                \
    if (!(cond)) {                                                           \
      failures++;                                                            \
      printf("not ok - rank %d line %d: ", rank, __LINE__);                  \
      printf(__VA_ARGS__);                                                   \
      printf(" (%s)\n", MKX_Get_last_error());                               \
      fflush(stdout);                                                        \
    }                                                                        \
  } while (0)

/* MPI_Init, run(oob) on 2..8 ranks (else skip: 77), a summary line, exit
 * status 1 if any rank's check failed. */
static inline int net_check_main(int argc, char **argv, const char *name,
                                 int (*run)(const mkx_oob *)) {
  mkx_oob oob;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size < 2 || size > 8) {
    if (rank == 0) printf("%s needs 2..8 ranks: skipped\n", name);
    MPI_Finalize();
    return 77;
  }
  int rc = mkx_oob_mpi_init(&oob, MPI_COMM_WORLD);
  if (rc == MKX_SUCCESS) rc = run(&oob);
  CHECK(rc == MKX_SUCCESS, "setup and run");
  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0)
    printf("%s %s: %d ranks, %d checks on rank 0, %d failures\n",
           total ? "FAIL" : "PASS", name, size, checks, total);
  mkx_oob_mpi_fini(&oob);
  MPI_Finalize();
  return total ? 1 : 0;
}

#endif
