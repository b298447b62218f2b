/* The out-of-band callbacks over MPI, with bounded waits. */
#ifndef MKX_BOOT_OOB_MPI_H
#define MKX_BOOT_OOB_MPI_H

#include <mpi.h>
#include "boot/bootstrap.h"

/* `comm` must outlive the oob; it is not duplicated here. */
int mkx_oob_mpi_init(mkx_oob *oob, MPI_Comm comm);
void mkx_oob_mpi_fini(mkx_oob *oob);

/* Wait for `req` until it completes or timeout_ms passes (then
 * MKX_ERR_TIMEOUT naming `what`).  Every MPI wait in MKX goes through it. */
int mkx_mpi_wait(MPI_Request *req, int64_t timeout_ms, const char *what);

/* Buffers of a non-blocking MPI operation MKX stopped waiting for (a
 * timeout): MPI may still use them when a late rank arrives, so
 * mkx_mpi_abandon keeps `owned` (malloc'd, may be NULL) with the request
 * and frees it only once the request completed (mkx_mpi_reap, also called
 * by every abandon).  *req becomes MPI_REQUEST_NULL.  Pending ones are
 * completed, for a bounded time, when MPI_Finalize starts (oob_mpi.c says
 * why). */
void mkx_mpi_abandon(MPI_Request *req, void *owned);
/* The same for an MPI_Comm_idup into *dup (malloc'd): the communicator it
 * makes is freed at finalize. */
void mkx_mpi_abandon_dup(MPI_Request *req, MPI_Comm *dup, MPI_Comm parent);
/* Before an MPI_Comm_idup of `parent`: wait (bounded) until no idup of it
 * that MKX abandoned is pending, since Open MPI stalls several idups
 * outstanding on one communicator; MKX_ERR_TIMEOUT if one still is. */
int mkx_mpi_dup_settle(MPI_Comm parent, int64_t timeout_ms);
void mkx_mpi_reap(void);
/* A bounded allgather of `bytes` from every rank of comm into recv, sent
 * and received through MKX's own buffer, so that neither send nor recv is
 * touched after a timeout (MKX_ERR_TIMEOUT).  `what` travels with it: a
 * rank in another exchange, or in the same one with another size, makes it
 * MKX_ERR_PEER naming both, never an MPI error (oob_mpi.c says why). */
int mkx_mpi_allgather(const void *send, void *recv, size_t bytes, MPI_Comm comm,
                      int64_t timeout_ms, const char *what);

/* Turn an MPI return code into MKX_ERR_MPI with MPI's message. */
int mkx_mpi_check(int mpi_rc, const char *what);

#endif
