/*
 * mkx_tiles.h - data tiles: kernels that are not MKX's own (cuBLAS, the
 * user's) synchronise with each other and with MKX across the ranks of a
 * node, on data rather than on kernels (docs/tiles.md).
 *
 * A tile set is a tensor of rows x cols elements that every rank of a
 * communicator holds a copy of, cut into data tiles of tile_rows x
 * tile_cols elements (the last row and column of tiles may be shorter),
 * with one semaphore per data tile on every rank.  Producers signal the
 * elements they wrote; a consumer waits until every data tile its reads
 * touch is complete.  Neither needs to know the other's tiling.  The
 * semaphores live in memory mapped into every rank of the node, so a
 * kernel may wait for or signal a tile of another rank's copy.
 *
 * Epochs.  Work on a tile set runs in epochs (one iteration, one layer):
 * every rank calls MKX_Tiles_begin on a stream before the epoch's work,
 * in the same order with its other calls on the set.  In an epoch each
 * element of each data tile is signalled exactly once (by any producer,
 * on any rank of the node); a tile is complete once all its elements are.
 * Nothing is reset between epochs, and MKX_Tiles_begin meets the node's
 * ranks on the GPU, so the next epoch's signals cannot reach a rank
 * before its stream has passed the epoch's begin.  What a rank's other
 * streams do with the tiles must be ordered before its next
 * MKX_Tiles_begin (events).  Begins, waits and signals enqueue work on a
 * stream and may be captured into a CUDA graph; every rank then replays
 * its graphs alike.
 *
 * Ranks.  `rank` arguments are ranks of the tile set's communicator, on
 * the calling rank's node (another node's: MKX_ERR_UNSUPPORTED).  Up to
 * MKX_TILES_MAX_RANKS ranks per node, sharing GPUs or not.  Where a rank
 * has an SM partition of its own (ranks sharing a GPU under MPS, option
 * gpu_partition), the kernels of the calls below run in it.
 *
 * Waits are bounded by option timeout_ms (MKX_TIMEOUT_MS).  A wait that runs
 * out, on the GPU, records MKX_ERR_TIMEOUT naming the rank and data tile it
 * waited for and tells the node's other ranks, whose waits end at once with
 * MKX_ERR_PEER; nothing hangs.  A device function given a rank or rectangle
 * outside the set records MKX_ERR_INVALID_ARG the same way. The set is then
 * unusable: its calls return the recorded error (MKX_Tiles_get_async_error
 * reports it without a call), and data written in that epoch is undefined.
 * The communicator stays usable (its own calls do not report the set's
 * failure).
 *
 * Contract of every call here: returns MKX_SUCCESS or an error code, with
 * MKX_Get_last_error() naming the argument, rank or tile at fault.
 */
#ifndef MKX_TILES_H
#define MKX_TILES_H

#include "mkx.h"
#include "mkx_tiles_dev.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct MKX_Tiles_s *MKX_Tiles;

/*
 * Collective over comm.  A tile set over each rank's buf (device memory:
 * cudaMalloc or MKX_Alloc_mem, mapped into the node's ranks; NULL on every
 * rank: semaphores only), a rows x cols matrix of dtype elements, leading
 * dimension ld, storage order `order`.
 *   agreed:   rows, cols, tile_rows, tile_cols (each >= 1; a data tile at
 *             most 2^31 elements), dtype, order, whether buf is NULL.
 *   per rank: buf, ld (>= cols row-major, >= rows column-major).
 * Needs a communicator on the GPU path (MKX_Comm_device >= 0) with at
 * most MKX_TILES_MAX_RANKS ranks per node.  The semaphores start at 0
 * (epoch 0: no begin yet).
 * Errors: MKX_ERR_NULL_POINTER (tiles), MKX_ERR_BAD_SIZE, MKX_ERR_BAD_LD,
 * MKX_ERR_INVALID_ARG (dtype, order, a buffer that is not device memory
 * or cannot be mapped), MKX_ERR_UNSUPPORTED (an fp8 dtype, host path, too
 * many ranks on a node), MKX_ERR_SHAPE_MISMATCH, MKX_ERR_PEER, MKX_ERR_NOMEM,
 * MKX_ERR_CUDA, MKX_ERR_TIMEOUT, MKX_ERR_MPI, MKX_ERR_INVALID_COMM.
 * On failure *tiles = NULL on every rank.
 */
int MKX_Tiles_create(void *buf, int64_t rows, int64_t cols, int64_t ld,
                     int64_t tile_rows, int64_t tile_cols, MKX_Datatype dtype,
                     MKX_Order order, MKX_Comm comm, MKX_Tiles *tiles);

/* Collective; sets *tiles to NULL.  Work enqueued on the set must be
 * complete.  Works on a set made unusable by a failure.  Sets not freed
 * are freed by MKX_Comm_free.  Errors: MKX_ERR_NULL_POINTER,
 * MKX_ERR_INVALID_ARG (*tiles NULL or freed), MKX_ERR_TIMEOUT, MKX_ERR_MPI. */
int MKX_Tiles_free(MKX_Tiles *tiles);

/* Start the next epoch on `stream` (every rank, in the same order): the
 * set's epoch counter advances on the GPU, and the node's ranks meet
 * there (bounded) before anything after it on `stream` runs.  Returns the
 * set's recorded failure, if any, instead of enqueuing. */
int MKX_Tiles_begin(MKX_Tiles tiles, MKX_Stream stream);

/* Local.  `stream` waits (on the GPU, bounded) until every data tile that
 * rows [row0, row0 + nrows) x columns [col0, col0 + ncols) touch on rank
 * `rank`'s copy is complete in this epoch: for kernels without source,
 * such as cuBLAS, and for copies.  Enqueue it after this process's work
 * that completes those tiles: what follows it on `stream` holds a hardware
 * queue that the producer's stream may share (docs/tiles.md).
 * Errors: MKX_ERR_INVALID_ARG (rank,
 * rectangle outside the tensor), MKX_ERR_UNSUPPORTED (rank on another
 * node), MKX_ERR_CUDA, the set's recorded failure. */
int MKX_Tiles_wait(MKX_Tiles tiles, int rank, int64_t row0, int64_t nrows,
                   int64_t col0, int64_t ncols, MKX_Stream stream);

/* Local.  After the work before it on `stream`, signal the rectangle's
 * elements on rank `rank`'s copy (each element once per epoch; what that
 * work wrote is visible to the rank's waits first).  Errors as
 * MKX_Tiles_wait. */
int MKX_Tiles_signal(MKX_Tiles tiles, int rank, int64_t row0, int64_t nrows,
                     int64_t col0, int64_t ncols, MKX_Stream stream);

/* Local.  The descriptor for kernels that use the device functions of
 * mkx_tiles.cuh (copy it; valid until MKX_Tiles_free).  Errors:
 * MKX_ERR_INVALID_ARG (tiles), MKX_ERR_NULL_POINTER (dev). */
int MKX_Tiles_device(MKX_Tiles tiles, MKX_Tiles_dev *dev);

/* Local, never blocks: *async_error = MKX_SUCCESS, or the failure of a
 * wait on this rank's GPU (MKX_ERR_TIMEOUT, MKX_ERR_PEER; the message
 * names the rank, the data tile and the epoch).  Errors:
 * MKX_ERR_INVALID_ARG (tiles), MKX_ERR_NULL_POINTER (async_error). */
int MKX_Tiles_get_async_error(MKX_Tiles tiles, int *async_error);

/* ---- communication and closed-source kernels on tiles ------------------- */

/*
 * AllGather into a tile set, in an epoch.  Every rank of the node calls it
 * after its MKX_Tiles_begin (no host wait, no exchange: it may be
 * captured).  Node rank i owns rows MKX_Block_range(rows, node ranks, i)
 * of the tensor; `send` holds this rank's (that many rows x cols, the
 * set's dtype and order, leading dimension ld_send; NULL when it owns
 * none).  They go into every node rank's copy (this rank's first), in
 * chunks of whole data-tile rows, by the copy engines on side streams
 * forked from `stream`, or when they are at most option tiles_ag_sm_bytes
 * by an SM kernel on `stream`; each chunk is signalled on its destination
 * as soon as it has landed, so a consumer there can start on the first
 * tiles.  Together the ranks signal every element once.  `stream` has
 * passed the copies when the call's work on it ends.
 * Errors: MKX_ERR_INVALID_ARG (tiles; a set without buffers),
 * MKX_ERR_NULL_POINTER (send), MKX_ERR_BAD_LD (ld_send), MKX_ERR_CUDA,
 * the set's recorded failure.
 */
int MKX_Allgather_tiles(const void *send, int64_t ld_send, MKX_Tiles tiles,
                        MKX_Stream stream);

/*
 * ReduceScatter and AllReduce of a tile set, in an epoch.  Every node rank
 * calls it (no host wait; may be captured).  Each node rank's copy holds a
 * partial of the whole tensor, signalled by its producers as written (a
 * user's kernel, MKX_Tiles_gemm with c_tiles, copies).  Node rank i sums
 * rows MKX_Block_range(rows, node ranks, i) over the copies, each data
 * tile as soon as every rank's copy of it is complete, in fp32, rounded
 * once to the set's dtype (bf16, fp16 or fp32; else MKX_ERR_UNSUPPORTED):
 *  - MKX_Reduce_scatter_tiles: into recv, that many rows x cols in the
 *    set's order, leading dimension ld_recv, ready in `stream`'s order;
 *  - MKX_Allreduce_tiles: into every node rank's copy of `out` (a set of
 *    the same communicator, shape, data tiles, dtype and order, with
 *    buffers), each tile signalled there, so consumers of `out` wait for
 *    it (every rank begins `out`'s epoch too).
 * The reduction runs on `stream`: one kernel of a few CTAs that wait for
 * each tile, or (option tiles_reduce=staged) groups of rows, each a
 * one-block wait followed by a kernel.  Enqueue it on another stream than
 * the producers', after them (host order: a stream whose work waits holds
 * the hardware queue it shares with other streams, docs/tiles.md), so
 * that it runs while they do.  The copies must not change until `stream`
 * has passed it.
 * Errors: MKX_ERR_INVALID_ARG (sets; out unlike tiles; a set without
 * buffers), MKX_ERR_NULL_POINTER (recv), MKX_ERR_BAD_LD, MKX_ERR_UNSUPPORTED,
 * MKX_ERR_CUDA, the sets' recorded failures.
 */
int MKX_Reduce_scatter_tiles(MKX_Tiles tiles, void *recv, int64_t ld_recv,
                             MKX_Stream stream);
int MKX_Allreduce_tiles(MKX_Tiles tiles, MKX_Tiles out, MKX_Stream stream);

/*
 * A closed-source GEMM on tiles: C = A x B by cuBLAS, where A is rank
 * a_rank's copy of set `a` (its rows x cols = M x K, row-major, with a
 * buffer), in chunks of chunk_rows rows (rounded up to whole data-tile
 * rows of `a`; 0: one data-tile row), round-robin on two streams forked
 * from `stream`; each chunk first waits for its rows of A (MKX_Tiles_wait).
 * Without c_tiles the chunks run from the one holding this rank's own
 * block of rows (MKX_Block_range over the node's ranks, which
 * MKX_Allgather_tiles lands first) on.  With c_tiles (a set of M x n, for
 * a reduction) each chunk signals its rows of C on this rank's copy of it
 * after its GEMM, and the chunks run in rounds, the k-th chunk of every
 * node rank's block in turn (the next rank's first, this rank's last), so
 * that every block of C completes at the same pace.  Local.
 * B: K x n (MKX_NO_TRANS, leading dimension ldb >= n) or n x K
 * (MKX_TRANS, ldb >= K) of a's dtype; C: M x n of ctype, ldc >= n.
 * Types: bf16 or fp16 A and B with bf16, fp16 or fp32 C, or fp32 for all.
 * The first call on a set makes its cuBLAS handles and streams: make it
 * outside a CUDA graph capture (inside: MKX_ERR_UNSUPPORTED).
 * Errors: MKX_ERR_INVALID_ARG (sets, rank, types, transb),
 * MKX_ERR_NULL_POINTER (B, C), MKX_ERR_BAD_SIZE (n, chunk_rows),
 * MKX_ERR_BAD_LD, MKX_ERR_UNSUPPORTED (column-major a, the capture
 * above), MKX_ERR_CUDA, MKX_ERR_NOMEM, the sets' recorded failures.
 */
int MKX_Tiles_gemm(MKX_Tiles a, int a_rank, const void *B, int64_t n,
                   int64_t ldb, MKX_Trans transb, void *C, int64_t ldc,
                   MKX_Datatype ctype, MKX_Tiles c_tiles, int64_t chunk_rows,
                   MKX_Stream stream);

#ifdef __cplusplus
}
#endif
#endif /* MKX_TILES_H */
