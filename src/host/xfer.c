/* Bounded MPI transfers, agreement and allocation for the host path. */
#include <limits.h>
#include <stdlib.h>
#include <unistd.h>
#include "boot/oob_mpi.h"
#include "core/error.h"
#include "host/xfer.h"

int mkx_host_bytes(int64_t a, int64_t b, size_t c, size_t *out,
                   const char *what) {
  if (a < 0 || b < 0)
    return mkx_error(MKX_ERR_INTERNAL, "%s: negative size", what);
  size_t ua = (size_t)a, ub = (size_t)b;
  if ((ub && ua > SIZE_MAX / ub) || (c && ua * ub > SIZE_MAX / c))
    return mkx_error(MKX_ERR_NOMEM, "%s: %lld x %lld x %zu bytes overflow",
                     what, (long long)a, (long long)b, c);
  *out = ua * ub * c;
  return MKX_SUCCESS;
}

int mkx_host_fits(MKX_Comm c, size_t bytes, const char *what) {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return MKX_SUCCESS; /* not known: no bound */
  const int ranks = c->place.local_size > 0 ? c->place.local_size : 1;
  const size_t share = (size_t)pages / (size_t)ranks * (size_t)page;
  if (bytes <= share) return MKX_SUCCESS;
  return mkx_error(MKX_ERR_NOMEM,
                   "%s: %zu bytes of scratch per rank, more than this host's "
                   "memory shared by its %d rank(s) (%zu bytes each)",
                   what, bytes, ranks, share);
}

int mkx_arena_alloc(mkx_arena *ar, size_t bytes, void **p, const char *what) {
  *p = NULL;
  if (ar->n >= MKX_ARENA_MAX)
    return mkx_error(MKX_ERR_INTERNAL, "%s: host arena full", what);
  void *q = malloc(bytes ? bytes : 1);
  if (!q) return mkx_error(MKX_ERR_NOMEM, "%s: %zu bytes", what, bytes);
  ar->p[ar->n++] = q;
  *p = q;
  return MKX_SUCCESS;
}

int mkx_arena_array(mkx_arena *ar, int64_t a, int64_t b, size_t c, void **p,
                    const char *what) {
  size_t bytes;
  *p = NULL;
  MKX_TRY(mkx_host_bytes(a, b, c, &bytes, what));
  return mkx_arena_alloc(ar, bytes, p, what);
}

void mkx_arena_release(mkx_arena *ar, int rc) {
  if (rc != MKX_ERR_TIMEOUT)
    for (int i = 0; i < ar->n; i++) free(ar->p[i]);
  ar->n = 0;
}

void mkx_xfer_init(mkx_xfer *x) {
  x->req = MPI_REQUEST_NULL;
  x->cnt = NULL;
}

int mkx_xfer_fit(int p, const int64_t *rows, size_t row_bytes,
                 const char *what) {
  int64_t sum = 0;
  if (row_bytes > (size_t)INT_MAX)
    return mkx_error(MKX_ERR_UNSUPPORTED,
                     "%s: a row of %zu bytes exceeds MPI's int count", what,
                     row_bytes);
  for (int q = 0; q < p; q++) {
    sum += rows[q];
    if (rows[q] > INT_MAX || sum > INT_MAX)
      return mkx_error(MKX_ERR_UNSUPPORTED,
                       "%s: %lld rows (rank %d) exceed MPI's int count", what,
                       (long long)sum, q);
  }
  return MKX_SUCCESS;
}

/* Counts and displacements of `rows` into cnt[0..p) and cnt[p..2p). */
static void fill_counts(int p, const int64_t *rows, int *cnt) {
  int disp = 0;
  for (int q = 0; q < p; q++) {
    cnt[q] = (int)rows[q];
    cnt[p + q] = disp;
    disp += cnt[q];
  }
}

/* A committed type of one row, so counts are in rows, not bytes. */
static int row_type(size_t row_bytes, MPI_Datatype *t, const char *what) {
  int rc =
      mkx_mpi_check(MPI_Type_contiguous((int)row_bytes, MPI_BYTE, t), what);
  if (rc) return rc;
  rc = mkx_mpi_check(MPI_Type_commit(t), what);
  if (rc) MPI_Type_free(t);
  return rc;
}

static void xfer_release(mkx_xfer *x) {
  free(x->cnt);
  x->cnt = NULL;
}

int mkx_xfer_iallgatherv(MKX_Comm c, const void *send, void *recv,
                         const int64_t *rows_of, size_t row_bytes, mkx_xfer *x,
                         const char *what) {
  int p = c->size;
  MPI_Datatype t;
  mkx_xfer_init(x);
  if (row_bytes == 0) return MKX_SUCCESS; /* agreed: nothing to move */
  MKX_TRY(mkx_xfer_fit(p, rows_of, row_bytes, what));
  if (!(x->cnt = malloc(2 * (size_t)p * sizeof *x->cnt)))
    return mkx_error(MKX_ERR_NOMEM, "%s: counts", what);
  fill_counts(p, rows_of, x->cnt);
  int rc = row_type(row_bytes, &t, what);
  if (!rc)
    rc = mkx_mpi_check(MPI_Iallgatherv(send, x->cnt[c->rank], t, recv, x->cnt,
                                       x->cnt + p, t, c->mpi, &x->req),
                       what);
  /* Freeing a type in use is allowed: pending operations keep it. */
  if (!rc) rc = mkx_mpi_check(MPI_Type_free(&t), what);
  if (rc) xfer_release(x);
  return rc;
}

int mkx_xfer_ialltoallv(MKX_Comm c, const void *send, const int64_t *srows,
                        void *recv, const int64_t *rrows, size_t row_bytes,
                        mkx_xfer *x, const char *what) {
  int p = c->size;
  MPI_Datatype t;
  mkx_xfer_init(x);
  if (row_bytes == 0) return MKX_SUCCESS;
  MKX_TRY(mkx_xfer_fit(p, srows, row_bytes, what));
  MKX_TRY(mkx_xfer_fit(p, rrows, row_bytes, what));
  if (!(x->cnt = malloc(4 * (size_t)p * sizeof *x->cnt)))
    return mkx_error(MKX_ERR_NOMEM, "%s: counts", what);
  fill_counts(p, srows, x->cnt);
  fill_counts(p, rrows, x->cnt + 2 * p);
  int rc = row_type(row_bytes, &t, what);
  if (!rc)
    rc = mkx_mpi_check(
        MPI_Ialltoallv(send, x->cnt, x->cnt + p, t, recv, x->cnt + 2 * p,
                       x->cnt + 3 * p, t, c->mpi, &x->req),
        what);
  if (!rc) rc = mkx_mpi_check(MPI_Type_free(&t), what);
  if (rc) xfer_release(x);
  return rc;
}

int mkx_xfer_wait(MKX_Comm c, mkx_xfer *x, const char *what) {
  if (x->req == MPI_REQUEST_NULL) {
    xfer_release(x);
    return MKX_SUCCESS;
  }
  int rc = mkx_mpi_wait(&x->req, c->opt.timeout_ms, what);
  if (rc == MKX_ERR_TIMEOUT) {
    mkx_mpi_abandon(&x->req, x->cnt); /* MPI may still read cnt */
    x->cnt = NULL;
  }
  xfer_release(x);
  return rc;
}

int mkx_host_agree(MKX_Comm c, const mkx_host_status *mine, int *bad_rank,
                   mkx_host_status *bad, const char *what) {
  int p = c->size;
  mkx_host_status *all = malloc((size_t)p * sizeof *all);
  *bad_rank = -1;
  if (!all) return mkx_error(MKX_ERR_NOMEM, "%s: status of %d ranks", what, p);
  int rc = mkx_mpi_allgather(mine, all, sizeof *mine, c->mpi, c->opt.timeout_ms,
                             what);
  for (int q = 0; !rc && q < p; q++)
    if (all[q].rc != MKX_SUCCESS && (*bad_rank < 0 || all[q].rc < bad->rc)) {
      *bad_rank = q;
      *bad = all[q];
    }
  free(all);
  return rc;
}
