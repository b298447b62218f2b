/*
 * The stream-side work of a tile set (host side in src/ops/tiles/): the
 * epoch's begin, a stream's wait for tiles and its signal of them, each a
 * kernel of one block on the caller's stream, so that it orders with the
 * stream's other work and can be captured into a CUDA graph.  Includable
 * from C11 (needs cuda_runtime.h).  0 or a cudaError_t.
 */
#ifndef MKX_KERNELS_TILES_H
#define MKX_KERNELS_TILES_H

#include <cuda_runtime.h>
#include <stdint.h>
#include "mkx_tiles_dev.h"

#ifdef __cplusplus
extern "C" {
#endif

/* epoch += 1 on this rank, then the node's ranks meet (bounded,
 * MKX_TILES_AT_BEGIN). */
int mkx_tiles_begin_launch(const MKX_Tiles_dev *t, cudaStream_t st);
/* st waits for the data tiles the rectangle touches on node rank q
 * (bounded, MKX_TILES_AT_STREAM). */
int mkx_tiles_wait_launch(const MKX_Tiles_dev *t, int q, int64_t row0, int64_t nrows, int64_t col0, int64_t ncols,
                          cudaStream_t st);
/* After st's earlier work, the rectangle's elements signalled on node
 * rank q. */
int mkx_tiles_signal_launch(const MKX_Tiles_dev *t, int q, int64_t row0, int64_t nrows, int64_t col0, int64_t ncols,
                            cudaStream_t st);

#ifdef __cplusplus
}
#endif
#endif
