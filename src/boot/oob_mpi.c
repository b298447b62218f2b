/* The bootstrap's out-of-band callbacks over MPI.  Waits poll a
 * non-blocking request against a deadline so that a missing rank turns
 * into MKX_ERR_TIMEOUT instead of a hang. */
#include <stdlib.h>
#include <time.h>
#include "boot/oob_mpi.h"
#include "core/error.h"

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

int mkx_mpi_check(int mpi_rc, const char *what) {
  if (mpi_rc == MPI_SUCCESS) return MKX_SUCCESS;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(mpi_rc, msg, &len) != MPI_SUCCESS) len = 0;
  msg[len] = '\0';
  return mkx_error(MKX_ERR_MPI, "%s: %s", what, msg);
}

int mkx_mpi_wait(MPI_Request *req, int64_t timeout_ms, const char *what) {
  double deadline = now_ms() + (double)timeout_ms;
  struct timespec nap = {0, 0};
  for (long spins = 0;; spins++) {
    int done = 0;
    int rc = mkx_mpi_check(MPI_Test(req, &done, MPI_STATUS_IGNORE), what);
    if (rc != MKX_SUCCESS || done) return rc;
    if (now_ms() > deadline)
      return mkx_error(MKX_ERR_TIMEOUT,
                       "%s: no answer from every rank after %lld ms "
                       "(option timeout_ms)", what, (long long)timeout_ms);
    /* Spin briefly for latency, then yield the core: ranks are often
     * oversubscribed on small machines. */
    if (spins > 1000) {
      nap.tv_nsec = spins > 100000 ? 1000000 : 20000;
      nanosleep(&nap, NULL);
    }
  }
}

static int mpi_allgather(void *ctx, const void *send, void *recv,
                         size_t bytes, int64_t timeout_ms) {
  MPI_Comm comm = *(MPI_Comm *)ctx;
  MPI_Request req;
  if (bytes > (size_t)2147483647)
    return mkx_error(MKX_ERR_UNSUPPORTED, "bootstrap blob of %zu bytes", bytes);
  int rc = mkx_mpi_check(MPI_Iallgather(send, (int)bytes, MPI_BYTE, recv,
                                        (int)bytes, MPI_BYTE, comm, &req),
                         "bootstrap allgather");
  return rc ? rc : mkx_mpi_wait(&req, timeout_ms, "bootstrap allgather");
}

static int mpi_barrier(void *ctx, int64_t timeout_ms) {
  MPI_Request req;
  int rc = mkx_mpi_check(MPI_Ibarrier(*(MPI_Comm *)ctx, &req),
                         "bootstrap barrier");
  return rc ? rc : mkx_mpi_wait(&req, timeout_ms, "bootstrap barrier");
}

int mkx_oob_mpi_init(mkx_oob *oob, MPI_Comm comm) {
  oob->ctx = NULL;
  MPI_Comm *keep = malloc(sizeof *keep);
  if (!keep) return mkx_error(MKX_ERR_NOMEM, "bootstrap context");
  *keep = comm;
  int rc = mkx_mpi_check(MPI_Comm_rank(comm, &oob->rank), "MPI_Comm_rank");
  if (!rc) rc = mkx_mpi_check(MPI_Comm_size(comm, &oob->size), "MPI_Comm_size");
  if (rc) {
    free(keep);
    return rc;
  }
  oob->allgather = mpi_allgather;
  oob->barrier = mpi_barrier;
  oob->ctx = keep;
  return MKX_SUCCESS;
}

void mkx_oob_mpi_fini(mkx_oob *oob) {
  free(oob->ctx);
  oob->ctx = NULL;
}
