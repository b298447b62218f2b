/* The bootstrap's out-of-band callbacks over MPI.  Waits poll a
 * non-blocking request against a deadline so that a missing rank turns
 * into MKX_ERR_TIMEOUT instead of a hang. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
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
 * communicator abandons anything, so the list stays short.
 *
 * MPI_Finalize is where a pending one would do harm: Open MPI's finalize
 * frees every communicator, and one that an abandoned MPI_Comm_idup has not
 * finished making crashes it (mca_pml_ob1_del_comm).  So the first abandon
 * hangs a callback on MPI_COMM_SELF, whose attributes MPI_Finalize deletes
 * before anything else: it keeps completing what the ranks that are still
 * there complete (each is in its own finalize, doing the same), for a
 * bounded time.  A communicator such an idup made is freed only then: a
 * peer whose idup finished in time may have sent on it, and the context
 * id of one freed earlier could be reused by the next. */
typedef struct abandoned {
  MPI_Request req;
  void *owned;
  int made_comm;   /* owned: the MPI_Comm an idup makes, freed at finalize */
  MPI_Comm parent; /* an idup's: the communicator it duplicates */
  struct abandoned *next;
} abandoned;

static abandoned *g_abandoned;
static pthread_mutex_t g_abandoned_lock = PTHREAD_MUTEX_INITIALIZER;
#define FINALIZE_DRAIN_MS 2000.0

/* Frees what completed; at_finalize: the communicators made too.  Returns
 * how many are left. */
static int reap(int at_finalize) {
  int left = 0;
  pthread_mutex_lock(&g_abandoned_lock);
  for (abandoned **a = &g_abandoned; *a;) {
    int done = 0;
    if (MPI_Test(&(*a)->req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
      done = 0; /* unknown: keep it */
    if (!done || ((*a)->made_comm && !at_finalize)) {
      left += !done;
      a = &(*a)->next;
      continue;
    }
    abandoned *gone = *a;
    *a = gone->next;
    if (gone->made_comm) MPI_Comm_free((MPI_Comm *)gone->owned);
    free(gone->owned);
    free(gone);
  }
  pthread_mutex_unlock(&g_abandoned_lock);
  return left;
}

void mkx_mpi_reap(void) { (void)reap(0); }

static int drain_at_finalize(MPI_Comm self, int key, void *value, void *x) {
  (void)self, (void)key, (void)value, (void)x;
  const double deadline = now_ms() + FINALIZE_DRAIN_MS;
  const struct timespec nap = {0, 1000000};
  while (reap(1) > 0 && now_ms() < deadline) nanosleep(&nap, NULL);
  return MPI_SUCCESS;
}

static void drain_once_at_finalize(void) {
  static int hooked;
  int key = MPI_KEYVAL_INVALID;
  if (hooked) return;
  hooked = 1;
  if (MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, drain_at_finalize, &key,
                             NULL) != MPI_SUCCESS)
    return;
  MPI_Comm_set_attr(MPI_COMM_SELF, key, NULL);
  MPI_Comm_free_keyval(&key); /* the attribute keeps it until finalize */
}

static void abandon(MPI_Request *req, void *owned, int made_comm,
                    MPI_Comm parent) {
  abandoned *a = malloc(sizeof *a);
  mkx_mpi_reap();
  if (!a) return; /* then `owned` leaks: never freed under MPI's feet */
  a->req = *req;
  a->owned = owned;
  a->made_comm = made_comm;
  a->parent = parent;
  pthread_mutex_lock(&g_abandoned_lock);
  drain_once_at_finalize();
  a->next = g_abandoned;
  g_abandoned = a;
  pthread_mutex_unlock(&g_abandoned_lock);
  *req = MPI_REQUEST_NULL;
}

void mkx_mpi_abandon(MPI_Request *req, void *owned) {
  abandon(req, owned, 0, MPI_COMM_NULL);
}

void mkx_mpi_abandon_dup(MPI_Request *req, MPI_Comm *dup, MPI_Comm parent) {
  abandon(req, dup, 1, parent);
}

/* Whether an abandoned idup of `parent` is still pending. */
static int dup_pending(MPI_Comm parent) {
  int n = 0;
  pthread_mutex_lock(&g_abandoned_lock);
  for (abandoned *a = g_abandoned; a && !n; a = a->next) {
    int done = 0;
    if (!a->made_comm || a->parent != parent) continue;
    if (MPI_Test(&a->req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || !done)
      n = 1;
  }
  pthread_mutex_unlock(&g_abandoned_lock);
  return n;
}

int mkx_mpi_dup_settle(MPI_Comm parent, int64_t timeout_ms) {
  const double deadline = now_ms() + (double)timeout_ms;
  const struct timespec nap = {0, 100000};
  while (dup_pending(parent)) {
    if (now_ms() >= deadline)
      return mkx_error(MKX_ERR_TIMEOUT,
                       "MKX_Comm_create: an earlier MKX_Comm_create's "
                       "duplicate of this communicator, abandoned after its "
                       "timeout, is still pending after %lld ms (option "
                       "timeout_ms): a rank has not reached it",
                       (long long)timeout_ms);
    nanosleep(&nap, NULL);
  }
  return MKX_SUCCESS;
}

/* ---- exchanges in slots ------------------------------------------------ */

/* Every exchange starts as one slot per rank, of one size whatever the
 * exchange, headed by what it is and how many bytes it carries.  Ranks out
 * of step (one skipped a call, or gave up on an exchange that a late rank
 * then meets with its next one) then meet slot against slot: Open MPI
 * matches non-blocking collectives of a communicator in order whatever
 * their kind, and a size mismatch there is MPI_ERR_TRUNCATE raised on
 * MPI_COMM_WORLD's handler (it aborts the job), not on the duplicate's
 * MPI_ERRORS_RETURN.  Equal sizes never truncate, and the heads tell each
 * rank what the others were in.  Data of up to SLOT_DATA bytes rides in
 * the slot (every agreement, the call's record included); more follows in
 * a second exchange once every head matched. */
enum { SLOT_BYTES = 256, SLOT_WHAT = 48 };
typedef struct slot_head {
  uint32_t magic, rank;
  uint64_t bytes;
  char what[SLOT_WHAT];
} slot_head;
#define SLOT_DATA (SLOT_BYTES - sizeof(slot_head))
#define SLOT_MAGIC 0x4d4b5853u /* "MKXS" */

/* One Iallgather of `bytes` from own into own + bytes, waited for.  On a
 * timeout own goes to the abandoned list (the caller must not free it). */
static int gather_own(char *own, size_t bytes, MPI_Comm comm,
                      int64_t timeout_ms, const char *what) {
  MPI_Request req;
  int rc = mkx_mpi_check(MPI_Iallgather(own, (int)bytes, MPI_BYTE, own + bytes,
                                        (int)bytes, MPI_BYTE, comm, &req),
                         what);
  if (rc == MKX_SUCCESS) rc = mkx_mpi_wait(&req, timeout_ms, what);
  if (rc == MKX_ERR_TIMEOUT) mkx_mpi_abandon(&req, own);
  return rc;
}

static int heads_match(const char *slots, int size, const slot_head *mine) {
  for (int q = 0; q < size; q++) {
    slot_head o;
    memcpy(&o, slots + (size_t)q * SLOT_BYTES, sizeof o);
    o.what[SLOT_WHAT - 1] = '\0';
    if (o.magic == SLOT_MAGIC && o.bytes == mine->bytes &&
        !strcmp(o.what, mine->what))
      continue;
    if (o.magic != SLOT_MAGIC)
      return mkx_error(MKX_ERR_PEER,
                       "%s on rank %u met something not MKX's from rank %d: "
                       "the ranks are out of step",
                       mine->what, mine->rank, q);
    return mkx_error(MKX_ERR_PEER,
                     "%s (%llu bytes) on rank %u met %s (%llu bytes) on "
                     "rank %d: the ranks are out of step (a rank skipped a "
                     "call, or gave up waiting in one)",
                     mine->what, (unsigned long long)mine->bytes, mine->rank,
                     o.what, (unsigned long long)o.bytes, q);
  }
  return MKX_SUCCESS;
}

/* The data too large for a slot, once every rank said it sends as much. */
static int gather_large(const void *send, void *recv, size_t bytes, int size,
                        MPI_Comm comm, int64_t timeout_ms, const char *what) {
  if (bytes > (size_t)2147483647 / (size_t)(size + 1))
    return mkx_error(MKX_ERR_UNSUPPORTED, "%s: %zu bytes from each of %d ranks",
                     what, bytes, size);
  char *own = malloc(bytes * (size_t)(size + 1));
  if (!own) return mkx_error(MKX_ERR_NOMEM, "%s: %d ranks", what, size);
  memcpy(own, send, bytes);
  int rc = gather_own(own, bytes, comm, timeout_ms, what);
  if (rc == MKX_ERR_TIMEOUT) return rc;
  if (rc == MKX_SUCCESS) memcpy(recv, own + bytes, bytes * (size_t)size);
  free(own);
  return rc;
}

int mkx_mpi_allgather(const void *send, void *recv, size_t bytes, MPI_Comm comm,
                      int64_t timeout_ms, const char *what) {
  int size = 0, rank = 0;
  MKX_TRY(mkx_mpi_check(MPI_Comm_size(comm, &size), what));
  MKX_TRY(mkx_mpi_check(MPI_Comm_rank(comm, &rank), what));
  /* send and receive through MKX's own copy, which outlives a timeout */
  char *own = calloc((size_t)size + 1, SLOT_BYTES);
  if (!own) return mkx_error(MKX_ERR_NOMEM, "%s: %d ranks", what, size);
  slot_head h = {SLOT_MAGIC, (uint32_t)rank, bytes, ""};
  snprintf(h.what, sizeof h.what, "%s", what);
  memcpy(own, &h, sizeof h);
  const int in_slot = bytes <= SLOT_DATA;
  if (in_slot && bytes) memcpy(own + sizeof h, send, bytes);
  int rc = gather_own(own, SLOT_BYTES, comm, timeout_ms, what);
  if (rc == MKX_ERR_TIMEOUT) return rc;
  if (rc == MKX_SUCCESS) rc = heads_match(own + SLOT_BYTES, size, &h);
  for (int q = 0; rc == MKX_SUCCESS && in_slot && bytes && q < size; q++)
    memcpy((char *)recv + (size_t)q * bytes,
           own + (size_t)(q + 1) * SLOT_BYTES + sizeof h, bytes);
  free(own);
  if (rc == MKX_SUCCESS && !in_slot)
    rc = gather_large(send, recv, bytes, size, comm, timeout_ms, what);
  return rc;
}

static int mpi_allgather(void *ctx, const void *send, void *recv, size_t bytes,
                         int64_t timeout_ms, const char *what) {
  return mkx_mpi_allgather(send, recv, bytes, *(MPI_Comm *)ctx, timeout_ms,
                           what);
}

/* an exchange of heads alone: out of step ranks meet it as any other */
static int mpi_barrier(void *ctx, int64_t timeout_ms, const char *what) {
  return mkx_mpi_allgather(NULL, NULL, 0, *(MPI_Comm *)ctx, timeout_ms, what);
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
