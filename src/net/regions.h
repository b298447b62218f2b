/* What the providers without RDMA (tcp, shm) share: a table of registered
 * regions that peers address by id (the receiving side copies into them),
 * and the staging of GPU memory through two pinned buffers of the endpoint
 * (one for sending, one for receiving) with a stager (net.h).  C11. */
#ifndef MKX_NET_REGIONS_H
#define MKX_NET_REGIONS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include "net/net.h"

#define MKX_NET_MAX_REGIONS 256

typedef struct mkx_net_region {
  char *base;
  size_t len;
  int used;
  int dev; /* CUDA ordinal, -1: host memory */
} mkx_net_region;

typedef struct mkx_net_regions {
  const char *who;      /* the provider, for messages */
  pthread_mutex_t lock; /* the table */
  mkx_net_region table[MKX_NET_MAX_REGIONS];
  /* Staging of device memory (set up by the first device region). */
  const mkx_net_stager *stager; /* NULL: no device memory here */
  pthread_mutex_t stage_lock;   /* the send stage; the setup */
  void *stage_ctx;
  int stage_dev;         /* -1 until set up */
  char *sstage, *rstage; /* pinned, stager->stage_bytes each */
} mkx_net_regions;

void mkx_net_regions_init(mkx_net_regions *g, const char *who,
                          const mkx_net_stager *stager);
void mkx_net_regions_fini(mkx_net_regions *g);
/* Register a region (device pointers are recognised whatever the caller
 * called them; the first one sets up the staging). */
int mkx_net_regions_reg(mkx_net_regions *g, const mkx_net_reg_args *a,
                        mkx_net_mr *mr);
int mkx_net_regions_dereg(mkx_net_regions *g, mkx_net_mr *mr);
/* 1 and *out if [off, off + len) lies in registered region id, else 0. */
int mkx_net_regions_find(mkx_net_regions *g, uint32_t id, uint64_t off,
                         uint64_t len, mkx_net_region *out);

#endif
