/* A tile set's state behind the public calls of src/ops/tiles/tiles.c
 * (checked arguments only): its areas, buffers, error record and the
 * stream-side kernels.  Without CUDA in the build making one fails with
 * MKX_ERR_UNSUPPORTED. */
#ifndef MKX_OPS_TILES_TILE_SET_H
#define MKX_OPS_TILES_TILE_SET_H

#include <stdint.h>
#include "mkx_tiles.h"

/* The agreed shape, with every node rank's leading dimension. */
typedef struct mkx_tile_set_shape {
  int64_t rows, cols, tile_rows, tile_cols;
  MKX_Datatype dtype;
  int col_major;
  int64_t ld[MKX_TILES_MAX_RANKS];
} mkx_tile_set_shape;

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
int mkx_tile_set_wait(MKX_Tiles t, int q, int64_t row0, int64_t nrows,
                      int64_t col0, int64_t ncols, MKX_Stream st);
int mkx_tile_set_signal(MKX_Tiles t, int q, int64_t row0, int64_t nrows,
                        int64_t col0, int64_t ncols, MKX_Stream st);

#endif
