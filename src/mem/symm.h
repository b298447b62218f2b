/* Symmetric device memory inside a node: each rank's buffer mapped into
 * every other rank of its (virtual) node through CUDA IPC, so kernels can
 * load from and store to peers' buffers directly (unicast; never NVLink
 * multicast). */
#ifndef MKX_MEM_SYMM_H
#define MKX_MEM_SYMM_H

#include <stddef.h>
#include <stdint.h>
#include "mkx.h"

/* A peer's buffer whose mapping a registration holds (rank -1: none). */
typedef struct mkx_symm_hold {
  int rank;
  uint64_t id;
} mkx_symm_hold;

typedef struct mkx_symm_buf {
  void *local;   /* this rank's buffer */
  size_t bytes;
  int local_size;
  void **peer;   /* [local_size]: node rank i's buffer, as mapped here */
  mkx_symm_hold *held; /* [local_size] */
} mkx_symm_buf;

/* Collective over the communicator: every rank passes its own buffer (of
 * device memory; NULL with bytes 0 is allowed) and gets the node peers'
 * buffers mapped.  Peer mappings are cached per peer allocation (checked
 * by CUDA's buffer id, so a freed and reused address is not confused).
 * The registration holds the mappings of users' buffers until
 * mkx_symm_buf_free; afterwards at most a few unused ones stay cached, and
 * an unused one that blocks a new buffer's mapping is closed. */
int mkx_symm_register(MKX_Comm c, void *ptr, size_t bytes, mkx_symm_buf *b);
void mkx_symm_buf_free(MKX_Comm c, mkx_symm_buf *b);
/* The registration was used in a stream capture: its mappings stay open
 * until the communicator is freed, since the graph may replay any time. */
void mkx_symm_buf_pin(MKX_Comm c, const mkx_symm_buf *b);
/* Mappings of users' buffers cached on this communicator (tests). */
int mkx_symm_cached(MKX_Comm c);
/* 1 if mkx_symm_register can map `ptr` into node peers (plain cudaMalloc
 * or MKX_Alloc_mem memory; not cudaMallocAsync pool memory), else 0. */
int mkx_symm_ipc_capable(const void *ptr);

/* MKX_Alloc_mem / MKX_Free_mem on the GPU path (collective). */
int mkx_symm_alloc(MKX_Comm c, size_t bytes, void **ptr);
int mkx_symm_free(MKX_Comm c, void *ptr);

/* Close every mapping and free what mkx_symm_alloc allocated (comm free). */
void mkx_symm_release(MKX_Comm c);

#endif
