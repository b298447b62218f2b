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

/* Turn an MPI return code into MKX_ERR_MPI with MPI's message. */
int mkx_mpi_check(int mpi_rc, const char *what);

#endif
