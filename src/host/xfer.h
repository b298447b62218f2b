/* MPI and memory helpers shared by the host operations: bounded
 * non-blocking collectives counted in rows, agreement on local failures,
 * and an allocation list freed in one place. */
#ifndef MKX_HOST_XFER_H
#define MKX_HOST_XFER_H

#include "core/comm.h"
#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

/* ---- memory ------------------------------------------------------------ */

#define MKX_ARENA_MAX 24

typedef struct mkx_arena {
  void *p[MKX_ARENA_MAX];
  int n;
} mkx_arena;

/* a * b * c bytes, MKX_ERR_NOMEM naming `what` if it overflows size_t. */
int mkx_host_bytes(int64_t a, int64_t b, size_t c, size_t *out,
                   const char *what);
/* MKX_ERR_NOMEM, naming `what`, where `bytes` of scratch per rank would
 * take more than this host's memory shared by the communicator's ranks on
 * it: such a call fails cleanly instead of being ended by the kernel's
 * out-of-memory killer once the pages are touched (allocations succeed
 * long before that). */
int mkx_host_fits(MKX_Comm c, size_t bytes, const char *what);
/* At least one byte, so NULL always means failure (MKX_ERR_NOMEM). */
int mkx_arena_alloc(mkx_arena *ar, size_t bytes, void **p, const char *what);
/* As mkx_arena_alloc for a*b*c bytes. */
int mkx_arena_array(mkx_arena *ar, int64_t a, int64_t b, size_t c, void **p,
                    const char *what);
/* Free everything, except after MKX_ERR_TIMEOUT: then a collective may
 * still be writing into these buffers, so they are leaked on purpose (the
 * communicator is marked broken by the caller). */
void mkx_arena_release(mkx_arena *ar, int rc);

/* ---- transfers --------------------------------------------------------- */

/* One non-blocking collective counted in rows of row_bytes bytes. */
typedef struct mkx_xfer {
  MPI_Request req;
  int *cnt; /* counts and displacements: MPI reads them until completion */
} mkx_xfer;

void mkx_xfer_init(mkx_xfer *x);

/* MKX_ERR_UNSUPPORTED unless every count, their sum and row_bytes fit an
 * MPI int.  Call it where all ranks take the same decision. */
int mkx_xfer_fit(int p, const int64_t *rows, size_t row_bytes,
                 const char *what);

/* Rank q contributes rows_of[q] rows; recv gets them in rank order. */
int mkx_xfer_iallgatherv(MKX_Comm c, const void *send, void *recv,
                         const int64_t *rows_of, size_t row_bytes, mkx_xfer *x,
                         const char *what);
/* srows[q] rows to rank q from send (in rank order), rrows[q] rows from
 * rank q into recv (in rank order). */
int mkx_xfer_ialltoallv(MKX_Comm c, const void *send, const int64_t *srows,
                        void *recv, const int64_t *rrows, size_t row_bytes,
                        mkx_xfer *x, const char *what);
/* Bounded by c->opt.timeout_ms; releases x (after a timeout its counts
 * stay with MPI: mkx_mpi_abandon). */
int mkx_xfer_wait(MKX_Comm c, mkx_xfer *x, const char *what);

/* ---- agreement --------------------------------------------------------- */

/* What one rank reports before a data exchange: an MKX code and up to
 * three numbers describing it (e.g. token, slot, id). */
typedef struct mkx_host_status {
  int64_t rc, d[3];
} mkx_host_status;

/* Allgather every rank's status (bounded).  *bad_rank = the lowest rank
 * with the smallest non-zero rc (its status in *bad), or -1: argument
 * errors (MKX_ERR_INVALID_ARG = 1) win over resource ones, and every rank
 * picks the same. */
int mkx_host_agree(MKX_Comm c, const mkx_host_status *mine, int *bad_rank,
                   mkx_host_status *bad, const char *what);

#endif
