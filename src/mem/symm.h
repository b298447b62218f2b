/* Symmetric device memory inside a node: each rank's buffer mapped into
 * every other rank of its (virtual) node through CUDA IPC, so kernels can
 * load from and store to peers' buffers directly (unicast; never NVLink
 * multicast). */
#ifndef MKX_MEM_SYMM_H
#define MKX_MEM_SYMM_H

#include <stddef.h>
#include "mkx.h"

typedef struct mkx_symm_buf {
  void *local; /* this rank's buffer */
  size_t bytes;
  int local_size;
  void **peer; /* [local_size]: node rank i's buffer, as mapped here */
  void **held; /* [local_size]: mappings of users' buffers held, or NULL */
} mkx_symm_buf;

/* Collective over the communicator: every rank passes its own buffer (of
 * device memory; NULL with bytes 0 is allowed) and gets the node peers'
 * buffers mapped.  MKX_Alloc_mem memory is mapped once, at allocation.
 * The mappings of users' buffers are held by the registration until
 * mkx_symm_buf_free, then kept open idle for the next call on the same
 * buffer (at most a few, process-wide; one that blocks a new mapping, say
 * of a freed buffer's memory handed out again, is closed). */
int mkx_symm_register(MKX_Comm c, void *ptr, size_t bytes, mkx_symm_buf *b);
void mkx_symm_buf_free(mkx_symm_buf *b);
/* The registration was used in a stream capture: its mappings stay open
 * until the communicator is freed, since the graph may replay any time. */
int mkx_symm_buf_pin(MKX_Comm c, const mkx_symm_buf *b);
/* Mappings of users' buffers open in this process, held or idle (tests). */
int mkx_symm_cached(void);
/* 1 if mkx_symm_register can map `ptr` into node peers (plain cudaMalloc
 * or MKX_Alloc_mem memory; not cudaMallocAsync pool memory), else 0. */
int mkx_symm_ipc_capable(const void *ptr);

/* MKX_Alloc_mem / MKX_Free_mem on the GPU path (collective). */
int mkx_symm_alloc(MKX_Comm c, size_t bytes, void **ptr);
int mkx_symm_free(MKX_Comm c, void *ptr);

#endif
