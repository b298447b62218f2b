/* The bootstrap's out-of-band callbacks over MPI.  Waits poll a
 * non-blocking request against a deadline so that a missing rank turns
 * into MKX_ERR_TIMEOUT instead of a hang. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
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
                       "%s: not every rank took part within %lld ms (option "
                       "timeout_ms): a rank that has not made this call, or "
                       "is held before it",
                       what, (long long)timeout_ms);
    /* Spin briefly for latency, then yield the core: ranks are often
     * oversubscribed on small machines. */
    if (spins > 1000) {
      nap.tv_nsec = spins > 100000 ? 1000000 : 20000;
      nanosleep(&nap, NULL);
    }
  }
}

/* ---- operations MKX stopped waiting for ---------------------------------- */

/* A request that timed out may still read or write its buffers when the
 * late rank arrives, so they stay here, never freed while it is pending;
 * completed ones are freed at the next abandon or reap.  Only a broken
 * communicator abandons anything, so the list stays short. */
typedef struct abandoned {
  MPI_Request req;
  void *owned;
  struct abandoned *next;
} abandoned;

static abandoned *g_abandoned;
static pthread_mutex_t g_abandoned_lock = PTHREAD_MUTEX_INITIALIZER;

void mkx_mpi_reap(void) {
  pthread_mutex_lock(&g_abandoned_lock);
  for (abandoned **a = &g_abandoned; *a;) {
    int done = 0;
    if (MPI_Test(&(*a)->req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
      done = 0; /* unknown: keep it */
    if (!done) {
      a = &(*a)->next;
      continue;
    }
    abandoned *gone = *a;
    *a = gone->next;
    free(gone->owned);
    free(gone);
  }
  pthread_mutex_unlock(&g_abandoned_lock);
}

void mkx_mpi_abandon(MPI_Request *req, void *owned) {
  abandoned *a = malloc(sizeof *a);
  mkx_mpi_reap();
  if (!a) return; /* then `owned` leaks: never freed under MPI's feet */
  a->req = *req;
  a->owned = owned;
  pthread_mutex_lock(&g_abandoned_lock);
  a->next = g_abandoned;
  g_abandoned = a;
  pthread_mutex_unlock(&g_abandoned_lock);
  *req = MPI_REQUEST_NULL;
}

int mkx_mpi_wait_owned(MPI_Request *req, void *owned, int64_t timeout_ms,
                       const char *what) {
  int rc = mkx_mpi_wait(req, timeout_ms, what);
  if (rc == MKX_ERR_TIMEOUT)
    mkx_mpi_abandon(req, owned);
  else
    free(owned);
  return rc;
}

int mkx_mpi_allgather(const void *send, void *recv, size_t bytes, MPI_Comm comm,
                      int64_t timeout_ms, const char *what) {
  int size = 0;
  MPI_Request req;
  MKX_TRY(mkx_mpi_check(MPI_Comm_size(comm, &size), what));
  if (bytes > (size_t)2147483647 / (size_t)(size + 1))
    return mkx_error(MKX_ERR_UNSUPPORTED,
                     "%s: %zu bytes from each of %d "
                     "ranks",
                     what, bytes, size);
  /* send and receive through MKX's own copy, which outlives a timeout */
  char *own = malloc(bytes * (size_t)(size + 1) + 1);
  if (!own) return mkx_error(MKX_ERR_NOMEM, "%s: %d ranks", what, size);
  memcpy(own, send, bytes);
  int rc = mkx_mpi_check(MPI_Iallgather(own, (int)bytes, MPI_BYTE, own + bytes,
                                        (int)bytes, MPI_BYTE, comm, &req),
                         what);
  if (rc != MKX_SUCCESS) {
    free(own);
    return rc;
  }
  rc = mkx_mpi_wait(&req, timeout_ms, what);
  if (rc == MKX_ERR_TIMEOUT) {
    mkx_mpi_abandon(&req, own);
    return rc;
  }
  if (rc == MKX_SUCCESS) memcpy(recv, own + bytes, bytes * (size_t)size);
  free(own);
  return rc;
}

static int mpi_allgather(void *ctx, const void *send, void *recv, size_t bytes,
                         int64_t timeout_ms) {
  return mkx_mpi_allgather(send, recv, bytes, *(MPI_Comm *)ctx, timeout_ms,
                           "bootstrap allgather");
}

static int mpi_barrier(void *ctx, int64_t timeout_ms) {
  MPI_Request req;
  int rc =
      mkx_mpi_check(MPI_Ibarrier(*(MPI_Comm *)ctx, &req), "bootstrap barrier");
  return rc ? rc
            : mkx_mpi_wait_owned(&req, NULL, timeout_ms, "bootstrap barrier");
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
