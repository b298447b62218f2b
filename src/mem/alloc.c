/* MKX_Alloc_mem: memory MKX can use without registration: on the GPU path
 * symmetric device memory (mapped into every rank of the node, see
 * mem/symm.h), on the host path aligned host memory. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "boot/oob_mpi.h"
#include "core/comm.h"
#include "core/device.h"
#include "core/error.h"
#include "core/handles.h"
#include "mem/symm.h"

/* Host memory: the owning communicator's serial in a header of HEAD bytes
 * before what the caller gets (which stays 256-byte aligned), read only
 * once the pointer is known to be live host memory of MKX_Alloc_mem. */
#define HEAD ((size_t)256)

/* Every rank takes part, even one whose own arguments are bad (local_rc),
 * so that no rank is left in the next collective: all fail alike. */
static int agree_size(MKX_Comm c, int local_rc, size_t size) {
  typedef struct {
    int64_t rc;
    uint64_t size;
  } rec;
  rec mine = {local_rc, size}, *all = malloc(sizeof *all * (size_t)c->size);
  if (!all) return mkx_error(MKX_ERR_NOMEM, "MKX_Alloc_mem");
  /* a rank that came late completes the exchange with what the others sent
   * before they gave up: they told it, and it fails too */
  int rc = mkx_comm_exchange(c, &mine, all, sizeof mine, "MKX_Alloc_mem");
  if (rc == MKX_SUCCESS && local_rc != MKX_SUCCESS) rc = local_rc;
  for (int q = 0; rc == MKX_SUCCESS && q < c->size; q++)
    if (all[q].rc != MKX_SUCCESS)
      rc = mkx_error(MKX_ERR_PEER, "MKX_Alloc_mem failed on rank %d (%s)", q,
                     MKX_Error_string((int)all[q].rc));
    else if (all[q].size != mine.size)
      rc = mkx_error(MKX_ERR_SHAPE_MISMATCH,
                     "MKX_Alloc_mem: size %llu on rank %d but %llu on rank "
                     "%d",
                     (unsigned long long)mine.size, c->rank,
                     (unsigned long long)all[q].size, q);
  free(all);
  return rc;
}

int MKX_Alloc_mem(MKX_Comm comm, size_t size, void **ptr) {
  mkx_error_clear();
  if (ptr) *ptr = NULL;
  MKX_TRY(mkx_comm_check(comm));
  int local_rc = MKX_SUCCESS;
  if (ptr == NULL)
    local_rc = mkx_error(MKX_ERR_NULL_POINTER, "MKX_Alloc_mem: ptr is NULL");
  MKX_TRY(agree_size(comm, local_rc, size));
  if (comm->device >= 0) {
    MKX_TRY(mkx_device_set(comm->device));
    return mkx_symm_alloc(comm, size, ptr);
  }
  if (size > SIZE_MAX - 2 * HEAD)
    return mkx_error(MKX_ERR_NOMEM, "MKX_Alloc_mem: %zu bytes", size);
  const size_t rounded = (size + HEAD - 1) / HEAD * HEAD;
  char *base = aligned_alloc(HEAD, HEAD + rounded);
  if (!base) return mkx_error(MKX_ERR_NOMEM, "MKX_Alloc_mem: %zu bytes", size);
  memcpy(base, &comm->serial, sizeof comm->serial);
  int rc = mkx_handle_add(base + HEAD, MKX_HANDLE_HOST_MEM);
  if (rc != MKX_SUCCESS) {
    free(base);
    return rc;
  }
  *ptr = base + HEAD;
  return MKX_SUCCESS;
}

int MKX_Free_mem(MKX_Comm comm, void *ptr) {
  mkx_error_clear();
  if (!mkx_comm_live(comm))
    return mkx_error(MKX_ERR_INVALID_COMM, "MKX_Free_mem: invalid comm");
  if (comm->device >= 0) {
    MKX_TRY(mkx_device_set(comm->device));
    return mkx_symm_free(comm, ptr);
  }
  if (ptr == NULL) return MKX_SUCCESS;
  /* only what MKX_Alloc_mem handed out, and only once */
  if (!mkx_handle_is(ptr, MKX_HANDLE_HOST_MEM))
    return mkx_error(MKX_ERR_INVALID_ARG,
                     "MKX_Free_mem: %p was not returned "
                     "by MKX_Alloc_mem, or was freed already",
                     ptr);
  char *base = (char *)ptr - HEAD;
  uint64_t owner;
  memcpy(&owner, base, sizeof owner);
  if (owner != comm->serial)
    return mkx_error(MKX_ERR_INVALID_ARG,
                     "MKX_Free_mem: %p was allocated on another communicator",
                     ptr);
  mkx_handle_remove(ptr);
  free(base);
  return MKX_SUCCESS;
}
