/*
 * A rank that dies (here: exits right after MKX_Comm_create) under a
 * launcher that keeps the survivors alive (tests/peer_loss.sh): every
 * survivor's next call returns MKX_ERR_TIMEOUT or MKX_ERR_PEER within the
 * bound, the communicator then refuses calls, can be freed, and MPI
 * finalises.  The script checks that every survivor printed its last
 * line, so a hang or a crash anywhere fails it.
 */
#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "../common/check.h"
#include "mkx.h"

#define N 8

int main(int argc, char **argv) {
  int rank = 0, size = 0;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  check_set_rank(rank, size);
  if (size < 2) {
    printf("skip: needs 2 or more ranks\n");
    MPI_Finalize();
    return CHECK_SKIP;
  }
  MPI_Info info;
  MPI_Info_create(&info);
  MPI_Info_set(info, "mkx_timeout_ms", "2000");
  MKX_Comm c = NULL;
  int rc = MKX_Comm_create(MPI_COMM_WORLD, info, &c);
  MPI_Info_free(&info);
  CHECK_RC(rc, MKX_SUCCESS, "MKX_Comm_create");
  fflush(stdout);
  if (rank == size - 1) _exit(0); /* dies without a word to MPI */
  float A[N * N], B[N * N], C[N * N];
  for (int i = 0; i < N * N; i++) A[i] = B[i] = 1.0f;
  const double t0 = MPI_Wtime();
  rc = MKX_Gemm_allreduce(A, N, 2, N, B, N, N, MKX_NO_TRANS, C, N, MKX_FP32,
                          MKX_FP32, MKX_ROW_MAJOR, c, NULL);
  const double dt = MPI_Wtime() - t0;
  CHECK(rc == MKX_ERR_TIMEOUT || rc == MKX_ERR_PEER,
        "survivor: the call "
        "fails (%d: %s)",
        rc, MKX_Get_last_error());
  CHECK(dt < 10.0, "survivor: within the bound (%.1f s, timeout_ms 2000)", dt);
  rc = MKX_Gemm_allreduce(A, N, 2, N, B, N, N, MKX_NO_TRANS, C, N, MKX_FP32,
                          MKX_FP32, MKX_ROW_MAJOR, c, NULL);
  CHECK_RC(rc, MKX_ERR_INVALID_COMM,
           "survivor: the communicator refuses "
           "the next call");
  CHECK_RC(MKX_Comm_free(&c), MKX_SUCCESS, "survivor: MKX_Comm_free");
  const int failed = check_failed();
  MPI_Finalize();
  printf("survivor %d finalized, %d failed\n", rank, failed);
  return failed ? 1 : 0;
}
