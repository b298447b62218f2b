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

/* MKX_Allgather_tiles by an SM kernel of `ctas` CTAs: rows [r0, r0 + nr)
 * of the tensor, from send (leading dimension ld_send, the set's order),
 * into every node rank's copy, each chunk of data-tile rows signalled
 * there once stored. */
int mkx_tiles_ag_sm_launch(const MKX_Tiles_dev *t, const void *send, int64_t ld_send, int64_t r0, int64_t nr, int ctas,
                           cudaStream_t st);

/* Rows [r0, r1) of the sum over the node ranks' copies of `in`, each
 * data tile as soon as every copy of it is complete (bounded waits,
 * MKX_TILES_AT_KERNEL): into recv (leading dimension ld_recv, in's order;
 * NULL: none) and, if out is not NULL, into every node rank's copy of out
 * (same shape), signalled there.  dtype: 1 bf16, 2 fp16, 3 fp32 (the
 * MKX_Datatype values); sums in fp32.  `ctas` persistent CTAs. */
int mkx_tiles_reduce_launch(const MKX_Tiles_dev *in, int dtype, int64_t r0, int64_t r1, void *recv, int64_t ld_recv,
                            const MKX_Tiles_dev *out, int ctas, cudaStream_t st);

#ifdef __cplusplus
}
#endif
#endif
