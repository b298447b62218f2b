/* The communicator object behind the opaque MKX_Comm handle. */
#ifndef MKX_CORE_COMM_H
#define MKX_CORE_COMM_H

#include <stdint.h>
#include "mkx.h"
#include "boot/bootstrap.h"
#include "core/gpu_share.h"
#include "core/options.h"
#include "core/sm_partition.h"
#include "topo/topo.h"

/* State an upper layer keeps on a communicator, which core does not know:
 * `release` (may be NULL) runs when the communicator is freed, the latest
 * registered first, while its bootstrap still works; `async_error` (may be
 * NULL) answers MKX_Comm_get_async_error with a failure of work enqueued
 * earlier.  `key` names the registrant: registering it again does nothing. */
typedef struct mkx_comm_hook {
  const void *key;
  void (*release)(struct MKX_Comm_s *c);
  int (*async_error)(struct MKX_Comm_s *c);
  struct mkx_comm_hook *next;
} mkx_comm_hook;

struct MKX_Comm_s {
  MPI_Comm mpi;      /* private duplicate of the user's communicator */
  MPI_Comm node_mpi; /* the ranks of this node (several nodes only) */
  int rank, size;
  mkx_placement place;
  mkx_options opt;
  mkx_oob oob;
  int device;             /* CUDA ordinal, -1 on the host path */
  int broken;             /* a timed-out collective is pending: unusable */
  char broken_why[256];   /* the message of the failure that broke it */
  int live_requests;      /* persistent requests not yet freed */
  int last_path;          /* the path of the last call's run (ops/path.h),
                             -1: none yet (MKX_Comm_get_last_path) */
  int capturing;          /* while a call captured on every rank makes its
                             plan: the fused workspace pool makes nothing
                             then and holds what it hands out for the
                             graph (src/ops/fused/workspace.c) */
  int told;               /* the other ranks know this one gave up, or told
                             it that they did (mkx_comm_exchanged) */
  uint64_t serial;        /* unique in the process, never reused: the owner
                             that MKX_Alloc_mem's host memory records */
  int64_t calls;          /* operations agreed on so far (each rank's count
                             goes into the agreement: a rank that missed one
                             is out of step) */
  unsigned run_ident;     /* the run being enqueued (mkx_run_ident): the
                             fused prologue's start record */
  void *tune_table;       /* option tune_cache's entries (ops/tune_cache.c) */
  void *tuners;           /* the roles' tuners by shape (ops/fused/tuner.c) */
  const void *tuner_last; /* the tuner whose run began last */
  void *trace;            /* option trace's records (ops/trace_file.c) */
  void *symm;             /* symmetric memory state (src/mem/symm.c) */
  void *tiles;            /* live tile sets (src/ops/tiles/tile_set.c) */
  void *net;              /* network endpoint (src/core/comm_net.c) */
  int one_queue;          /* several nodes: on some rank every stream shares
                             one hardware queue (CUDA_DEVICE_MAX_CONNECTIONS=1;
                             agreed): nothing across nodes is driven by the
                             GPU (comm_net.c says why) */
  int has_gpu_map;        /* gpu_map is valid */
  mkx_gpu_share share;    /* who else drives this GPU; CTAs of fused kernels */
  mkx_sm_part *part;      /* this rank's SM partition (share.part GREEN) */
  mkx_part_lane lane;     /* the calls' stream on it (mkx_comm_part_fork) */
  mkx_gpu_map gpu_map;    /* nearest NICs, proxy cores, peer domain */
  char topo_desc[384];    /* the map in one line, for logs and mkx_info */
  struct MKX_Comm_s *node_comm; /* this node's ranks (mkx_comm_node) */
  mkx_comm_hook *hooks;         /* upper layers' state (mkx_comm_add_hook) */
};

/* 1 if c is a communicator MKX made and has not freed (read from the
 * handle table, never from the memory behind c). */
int mkx_comm_live(MKX_Comm c);
/* MKX_SUCCESS if c is a live, usable communicator, else the error. */
int mkx_comm_check(MKX_Comm c);

/* Map this rank's GPU on its node (collective; failures to map are
 * logged, not fatal). */
int mkx_comm_map_topology(MKX_Comm c);

/* Collective (bounded by the option timeout_ms): *out = every rank's
 * `mine` combined by op, the same on every rank. */
typedef enum { MKX_AGREE_MAX, MKX_AGREE_AND, MKX_AGREE_OR } mkx_agree_op;
int mkx_comm_agree_u64(MKX_Comm c, uint64_t mine, mkx_agree_op op,
                       uint64_t *out, const char *what);

/* Collective (bounded): every rank learns whether every rank got through
 * a local step.  rc: this rank's result; returns it if it failed (its
 * message kept), else MKX_ERR_PEER naming the lowest failing rank and its
 * code, else MKX_SUCCESS; a failed exchange breaks the communicator. */
int mkx_comm_agree_rc(MKX_Comm c, int rc, const char *what);

/* The stream a fused call's GPU work goes on: the communicator's lane on
 * its SM partition, ordered after the caller's stream (the caller's
 * stream itself where there is no partition); _join orders the caller's
 * stream after it.  Every fused path's work runs between the two. */
int mkx_comm_part_fork(MKX_Comm c, void *user, void **run);
int mkx_comm_part_join(MKX_Comm c, void *user, void *run);

/* Collective over c: the ranks of this node as a communicator of their
 * own, with c's options and GPU (made on first use, freed with c). */
int mkx_comm_node(MKX_Comm c, MKX_Comm *node);

/* Register an upper layer's hook (see mkx_comm_hook); MKX_ERR_NOMEM. */
int mkx_comm_add_hook(MKX_Comm c, const void *key, void (*release)(MKX_Comm c),
                      int (*async_error)(MKX_Comm c));

/* Mark the communicator unusable after `rc` (timeouts leave MPI state
 * behind, and GPU epochs out of step) and keep the current error message
 * for later calls; returns rc. */
int mkx_comm_fail(MKX_Comm c, int rc);
/* After a collective exchange on c that returned rc: a failure as
 * mkx_comm_fail (a timeout also tells the other ranks); success, unless
 * another rank told this one that it gave up waiting for it, which voids
 * the exchange (MKX_ERR_PEER naming that rank; c broken).  Every
 * agreement goes through it, so a late rank learns it was late. */
int mkx_comm_exchanged(MKX_Comm c, int rc);
/* One exchange of `bytes` from every rank on c (the bootstrap's
 * allgather, named `what`), then as mkx_comm_exchanged.  Ranks out of
 * step (the exchange met another: MKX_ERR_PEER) break c; every rank in
 * the exchange saw the mismatch, so none is told (a tell left unreceived
 * on a communicator that is then freed stalls Open MPI's next
 * communicator creation). */
int mkx_comm_exchange(MKX_Comm c, const void *mine, void *all, size_t bytes,
                      const char *what);
/* The same for any failure rc: the caller knows the ranks are out of step
 * (a GPU run a peer gave up on). */
int mkx_comm_break(MKX_Comm c, int rc);

#endif
