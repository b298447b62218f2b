/* mkx_info: print MKX's version, build features, options and, under MPI,
 * each rank's placement and GPU.  Usage: mkx_info [--no-comm] */
#include <stdio.h>
#include <string.h>
#include "mkx.h"

static int report(int rc, const char *what) {
  if (rc != MKX_SUCCESS)
    fprintf(stderr, "mkx_info: %s: %s: %s\n", what, MKX_Error_string(rc),
            MKX_Get_last_error());
  return rc;
}

int main(int argc, char **argv) {
  int no_comm = argc > 1 && strcmp(argv[1], "--no-comm") == 0;
  if (argc > 1 && !no_comm) {
    fprintf(stderr, "usage: %s [--no-comm]\n", argv[0]);
    return 2;
  }
  if (MPI_Init(&argc, &argv) != MPI_SUCCESS) return 1;
  MKX_Comm comm = NULL;
  int rc = no_comm
               ? MKX_SUCCESS
               : report(MKX_Comm_create(MPI_COMM_WORLD, MPI_INFO_NULL, &comm),
                        "MKX_Comm_create");
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  /* Print rank by rank so the output of several ranks does not interleave. */
  for (int r = 0; r < size; r++) {
    if (r == rank && rc == MKX_SUCCESS && (r == 0 || comm != NULL)) {
      if (r > 0) printf("--- rank %d\n", r);
      rc = report(MKX_Info_print(comm, stdout), "MKX_Info_print");
      fflush(stdout);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  if (comm) report(MKX_Comm_free(&comm), "MKX_Comm_free");
  MPI_Finalize();
  return rc == MKX_SUCCESS ? 0 : 1;
}
