/* The order in which MKX_Tiles_gemm runs its chunks of rows (pure; the
 * reasons are in mkx_tiles.h and docs/tiles.md):
 *   MKX_WALK_FROM_OWN  chunks of `chunk` rows from 0, in turn from the one
 *                      holding the first row of this rank's block
 *                      (MKX_Block_range over `size` ranks) on, wrapping;
 *   MKX_WALK_ROUNDS    in rounds: the k-th chunk of each rank's block, the
 *                      blocks from rank + 1 on and this rank's last;
 *                      chunks start at their block's first row and never
 *                      cross a block's end.
 * Every row of [0, rows) is in exactly one chunk. */
#ifndef MKX_OPS_TILES_CHUNK_WALK_H
#define MKX_OPS_TILES_CHUNK_WALK_H

#include <stdint.h>

enum { MKX_WALK_FROM_OWN = 0, MKX_WALK_ROUNDS = 1 };

typedef struct mkx_chunk_walk {
  int how, size, rank;
  int64_t rows, chunk;
  int64_t i; /* FROM_OWN: chunks taken; ROUNDS: the round */
  int o;     /* ROUNDS: the next block of the round, 1 .. size */
  int more;  /* ROUNDS: a block of this round has rows past it */
} mkx_chunk_walk;

/* rows >= 0, chunk >= 1, 0 <= rank < size. */
void mkx_chunk_walk_init(mkx_chunk_walk *w, int how, int64_t rows, int size,
                         int rank, int64_t chunk);
/* 1 and the next chunk's rows [*lo, *hi); 0 after the last. */
int mkx_chunk_walk_next(mkx_chunk_walk *w, int64_t *lo, int64_t *hi);

#endif
