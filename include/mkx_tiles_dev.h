/*
 * mkx_tiles_dev.h - what a kernel needs of an MKX tile set: the descriptor
 * MKX_Tiles_device fills (include/mkx_tiles.h) and the layout its device
 * functions (include/mkx_tiles.cuh) rely on.  C and CUDA; includes no MPI
 * and no CUDA header.  Pass the descriptor to a kernel by value.
 *
 * Each rank of a tile set owns an area of memory mapped into every rank of
 * its node: a header, then one 64-bit semaphore per data tile (row-major
 * over the grid of data tiles).  A semaphore counts the elements of its
 * data tile that producers have signalled; in epoch e (MKX_Tiles_begin
 * counts them from 1) the tile is complete once its semaphore holds
 * e x (the tile's elements).  Nothing is ever reset: each epoch adds
 * exactly the tile's elements, so a signal of an earlier epoch can never
 * complete a later one.
 *
 * The layout is part of the contract of this version (the device
 * functions are compiled into the user's code).
 */
#ifndef MKX_TILES_DEV_H
#define MKX_TILES_DEV_H

#include <stdint.h>

#define MKX_TILES_MAX_RANKS 8 /* ranks of a node a tile set reaches */

/* Byte offsets in a rank's area: its epoch (int), the ranks' arrival
 * at MKX_Tiles_begin (int per node rank), the tells of ranks that gave up
 * (int per node rank, never reset), the semaphores (uint64 per tile). */
#define MKX_TILES_OFF_EPOCH 0
#define MKX_TILES_OFF_BAR 64
#define MKX_TILES_OFF_TOLD 128
#define MKX_TILES_OFF_SEMS 256

/* The error record (host-mapped ints, one per tile set and rank): the
 * first failure of a wait on this rank.  err[0]: 0, -1 while being
 * written, then the code (MKX_ERR_TIMEOUT: a wait of this rank ran out;
 * MKX_ERR_PEER: a rank gave up first and told this one;
 * MKX_ERR_INVALID_ARG: a device function of this rank was given a rank or
 * rectangle outside the set); err[1]: the node rank waited for (-1: none;
 * for MKX_ERR_INVALID_ARG the communicator rank given), err[2], err[3]:
 * the data tile's row and column (-1: none; for MKX_ERR_INVALID_ARG the
 * rectangle's first row and column), err[4]: where (MKX_TILES_AT_*),
 * err[5]: the epoch, err[6]: for MKX_ERR_PEER the node rank that gave up
 * first. */
#define MKX_TILES_ERR_WORDS 8
enum {
  MKX_TILES_AT_KERNEL = 1, /* a device function in a user's kernel */
  MKX_TILES_AT_STREAM = 2, /* MKX_Tiles_wait */
  MKX_TILES_AT_BEGIN = 3,  /* MKX_Tiles_begin's meeting of the ranks */
  MKX_TILES_AT_ARGS = 4    /* a device function's rank or rectangle */
};

typedef struct MKX_Tiles_dev {
  int rank;                           /* this rank's index in its node */
  int size;                           /* ranks of the node */
  int comm_rank[MKX_TILES_MAX_RANKS]; /* communicator rank of node rank i */
  int64_t rows, cols;                 /* the tensor */
  int64_t tile_rows, tile_cols;       /* a data tile (the last ones shorter) */
  int64_t tiles_r, tiles_c;           /* the grid of data tiles */
  int64_t ld[MKX_TILES_MAX_RANKS];    /* node rank i's leading dimension */
  int elem_size;                      /* bytes of an element */
  int col_major;                      /* element (i, j) at i + j * ld */
  char *area[MKX_TILES_MAX_RANKS];    /* node rank i's area, mapped here */
  char *data[MKX_TILES_MAX_RANKS];    /* node rank i's buffer, mapped here
                                         (NULL: the set has none) */
  int *err;                           /* device pointer of the error record */
  uint64_t timeout_ns;                /* bound of every wait */
} MKX_Tiles_dev;

#endif /* MKX_TILES_DEV_H */
