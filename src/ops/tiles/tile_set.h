/* A tile set's state behind the public calls of src/ops/tiles/tiles.c
 * (checked arguments only): its areas, buffers, error record and the
 * stream-side kernels.  Without CUDA in the build making one fails with
 * MKX_ERR_UNSUPPORTED. */
#ifndef MKX_OPS_TILES_TILE_SET_H
#define MKX_OPS_TILES_TILE_SET_H

#include <stdint.h>
#include "mkx_tiles.h"
#include "core/sm_partition.h"
#include "mem/symm.h"

/* The agreed shape, with every node rank's leading dimension. */
typedef struct mkx_tile_set_shape {
  int64_t rows, cols, tile_rows, tile_cols;
  MKX_Datatype dtype;
  int col_major;
  int64_t ld[MKX_TILES_MAX_RANKS];
} mkx_tile_set_shape;

#if HAVE_CUDA
#include <cuda_runtime.h>

/* Side streams forked from a caller's stream and joined back (ordered
 * after what it holds, captured along with it), made on an SM partition
 * (part NULL: ordinary streams). */
typedef struct mkx_tile_fan {
  int n;
  cudaStream_t s[MKX_TILES_MAX_RANKS];
  cudaEvent_t fork, join[MKX_TILES_MAX_RANKS];
} mkx_tile_fan;
int mkx_tile_fan_make(mkx_tile_fan *f, int n, mkx_sm_part *part,
                      const char *fn);
int mkx_tile_fan_fork(mkx_tile_fan *f, cudaStream_t user, const char *fn);
int mkx_tile_fan_join(mkx_tile_fan *f, cudaStream_t user, const char *fn);
void mkx_tile_fan_free(mkx_tile_fan *f);

struct mkx_tp_blas;
struct MKX_Tiles_s {
  MKX_Comm comm;
  MKX_Tiles_dev dev;
  MKX_Datatype dtype;
  void *area; /* this rank's, from mkx_symm_alloc */
  mkx_symm_buf area_map, data_map;
  int *err_host;
  int failure; /* the recorded failure, once read */
  char why[320];
  mkx_tile_fan ag;             /* MKX_Allgather_tiles: one per node rank */
  mkx_tile_fan gemm;           /* MKX_Tiles_gemm: two, made on first use */
  mkx_part_lane lane;          /* the set's SM kernels (the AllGather's, the
                       * reductions') on the rank's SM partition, if any */
  struct mkx_tp_blas *blas[2]; /* cuBLAS of MKX_Tiles_gemm's streams */
  struct MKX_Tiles_s *next;    /* the communicator's list */
};
#endif

/* Collective: the areas (symmetric, zeroed), buf mapped into the node's
 * ranks (if not NULL on every rank), the error record; *out NULL on
 * failure, on every rank. */
int mkx_tile_set_make(MKX_Comm c, void *buf, const mkx_tile_set_shape *s,
                      MKX_Tiles *out);
/* Collective (the areas are symmetric memory). */
int mkx_tile_set_free(MKX_Tiles t);
/* MKX_SUCCESS, or the failure a wait recorded (the message names the rank,
 * tile, place and epoch); `fn` heads the message. */
int mkx_tile_set_failure(MKX_Tiles t, const char *fn);
/* The node rank of communicator rank `rank`, or an error naming it. */
int mkx_tile_set_node_rank(MKX_Tiles t, const char *fn, int rank, int *q);
void mkx_tile_set_dims(MKX_Tiles t, int64_t *rows, int64_t *cols);
void mkx_tile_set_dev(MKX_Tiles t, MKX_Tiles_dev *dev);
int mkx_tile_set_begin(MKX_Tiles t, MKX_Stream st);
/* st waits for (signal 0) or signals (1) the rectangle of node rank q. */
int mkx_tile_set_rect(MKX_Tiles t, int signal, int q, int64_t row0,
                      int64_t nrows, int64_t col0, int64_t ncols,
                      MKX_Stream st);

#endif
