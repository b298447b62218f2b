/*
 * mkx_tiles.cuh - device functions for kernels that take part in an MKX
 * tile set (include/mkx_tiles.h; docs/tiles.md): wait for the data tiles
 * a kernel tile reads, signal the data tiles it wrote.  CUDA C++, sm_70 or
 * later; header only; includes no MKX host header.
 *
 * Ranks are communicator ranks of the tile set's communicator, on this
 * rank's node.  Rectangles are in elements of the tensor: rows
 * [row0, row0 + nrows) and columns [col0, col0 + ncols), within it.
 *
 * A rank or rectangle outside the set records MKX_ERR_INVALID_ARG and
 * tells the other ranks, as a failed wait does.
 *
 * Waits are bounded by the tile set's timeout: a wait that runs out
 * records MKX_ERR_TIMEOUT for the host (MKX_Tiles_get_async_error), tells
 * the node's other ranks (their waits then end at once with MKX_ERR_PEER)
 * and returns false; the kernel should then stop using the tiles (their
 * data is undefined) and return.  Once one wait of this rank has failed,
 * every later one that would have to wait fails at once.
 *
 * The block functions are called by every thread of a block; the thread
 * functions by one thread, which then orders the rest of its block
 * (__syncthreads) itself.
 */
#ifndef MKX_TILES_CUH
#define MKX_TILES_CUH

#include <stdint.h>
#include "mkx_tile_map.h"
#include "mkx_tiles_dev.h"

namespace mkx_tiles_detail {

__device__ __forceinline__ uint64_t ld_acquire_u64(const uint64_t *p) {
  uint64_t v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];"
               : "=l"(v)
               : "l"(p)
               : "memory");
  return v;
}
__device__ __forceinline__ int ld_acquire_s32(const int *p) {
  int v;
  asm volatile("ld.acquire.sys.global.s32 %0, [%1];"
               : "=r"(v)
               : "l"(p)
               : "memory");
  return v;
}
__device__ __forceinline__ void st_release_s32(int *p, int v) {
  asm volatile("st.release.sys.global.s32 [%0], %1;" ::"l"(p), "r"(v)
               : "memory");
}
/* Relaxed: after one fence.sc.sys (__threadfence_system) that orders the
 * signaller's writes before every add of a signal, where a release per add
 * would fence once per data tile (a signal of hundreds of tiles would cost
 * as much as a GEMM chunk). */
__device__ __forceinline__ void red_relaxed_add_u64(uint64_t *p, uint64_t v) {
  asm volatile("red.relaxed.sys.global.add.u64 [%0], %1;" ::"l"(p), "l"(v)
               : "memory");
}
__device__ __forceinline__ uint64_t globaltimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ int *word(const MKX_Tiles_dev &t, int node_rank,
                                     int off) {
  return reinterpret_cast<int *>(t.area[node_rank] + off);
}
__device__ __forceinline__ uint64_t *sem(const MKX_Tiles_dev &t, int node_rank,
                                         int64_t i, int64_t j) {
  return reinterpret_cast<uint64_t *>(t.area[node_rank] + MKX_TILES_OFF_SEMS) +
         i * t.tiles_c + j;
}
__device__ __forceinline__ int epoch(const MKX_Tiles_dev &t) {
  return *(volatile const int *)word(t, t.rank, MKX_TILES_OFF_EPOCH);
}
/* Node rank of communicator rank r, or -1. */
__device__ __forceinline__ int node_rank(const MKX_Tiles_dev &t, int r) {
  for (int i = 0; i < t.size; ++i)
    if (t.comm_rank[i] == r) return i;
  return -1;
}
/* Elements of data tile (i, j), and of its part inside a rectangle. */
__host__ __device__ __forceinline__ uint64_t tile_elems(const MKX_Tiles_dev &t,
                                                        int64_t i, int64_t j) {
  return (uint64_t)mkx_tile_overlap(0, t.rows, t.tile_rows, i) *
         (uint64_t)mkx_tile_overlap(0, t.cols, t.tile_cols, j);
}
__host__ __device__ __forceinline__ uint64_t part_elems(const MKX_Tiles_dev &t,
                                                        int64_t i, int64_t j,
                                                        int64_t r0, int64_t nr,
                                                        int64_t c0,
                                                        int64_t nc) {
  return (uint64_t)mkx_tile_overlap(r0, r0 + nr, t.tile_rows, i) *
         (uint64_t)mkx_tile_overlap(c0, c0 + nc, t.tile_cols, j);
}
/* The data tiles [*i0, *i1) x [*j0, *j1) a rectangle (checked) touches. */
__host__ __device__ __forceinline__ void rect_tiles(const MKX_Tiles_dev &t,
                                                    int64_t r0, int64_t nr,
                                                    int64_t c0, int64_t nc,
                                                    int64_t *i0, int64_t *i1,
                                                    int64_t *j0, int64_t *j1) {
  int64_t ni, nj;
  mkx_tile_span(r0, r0 + nr, t.tile_rows, i0, &ni);
  mkx_tile_span(c0, c0 + nc, t.tile_cols, j0, &nj);
  *i1 = *i0 + ni;
  *j1 = *j0 + nj;
}
__host__ __device__ __forceinline__ bool rect_ok(const MKX_Tiles_dev &t,
                                                 int64_t r0, int64_t nr,
                                                 int64_t c0, int64_t nc) {
  return r0 >= 0 && c0 >= 0 && nr > 0 && nc > 0 && r0 + nr <= t.rows &&
         c0 + nc <= t.cols;
}

/* The first failure of this rank: claimed (err[0] 0 -> -1), the words,
 * then the code, each visible to the host before the next; and before
 * that the tell in every peer's area, so that their waits end too. */
__device__ __forceinline__ void give_up(const MKX_Tiles_dev &t, int code,
                                        int peer, int64_t i, int64_t j,
                                        int where, int first) {
  volatile int *err = t.err;
  if (atomicCAS(t.err, 0, -1) != 0) return;
  const int tell = 1 << 28 | first << 20 | where << 8 | (peer + 1);
  for (int q = 0; q < t.size; ++q)
    if (q != t.rank)
      st_release_s32(word(t, q, MKX_TILES_OFF_TOLD) + t.rank, tell);
  err[1] = peer;
  err[2] = (int)i;
  err[3] = (int)j;
  err[4] = where;
  err[5] = epoch(t);
  err[6] = first;
  __threadfence_system();
  err[0] = code;
  __threadfence_system();
}

/* True (and the failure recorded) once this rank failed or was told. */
__device__ __forceinline__ bool failed(const MKX_Tiles_dev &t, int peer,
                                       int64_t i, int64_t j, int where) {
  if (((volatile const int *)t.err)[0] != 0) return true;
  const volatile int *told = word(t, t.rank, MKX_TILES_OFF_TOLD);
  for (int q = 0; q < t.size; ++q) {
    const int v = told[q];
    if (v) {
      give_up(t, 13 /* MKX_ERR_PEER */, peer, i, j, where, v >> 20 & 0xff);
      return true;
    }
  }
  return false;
}

/* A rank or rectangle outside the set, given to a device function:
 * recorded as MKX_ERR_INVALID_ARG (the rank given, the rectangle's first
 * row and column) and told to the node's other ranks, whose waits then end
 * instead of running out. */
__device__ __forceinline__ bool bad_args(const MKX_Tiles_dev &t, int rank,
                                         int64_t r0, int64_t nr, int64_t c0,
                                         int64_t nc) {
  if (node_rank(t, rank) >= 0 && rect_ok(t, r0, nr, c0, nc)) return false;
  give_up(t, 1 /* MKX_ERR_INVALID_ARG */, rank, r0, c0, MKX_TILES_AT_ARGS,
          t.rank);
  return true;
}

/* Spin until ready(), within the bound (then MKX_ERR_TIMEOUT naming what
 * was waited for).  The error record is host memory, so it and the tells
 * are read every 256 spins only. */
template <typename Ready>
__device__ __forceinline__ bool wait_for(const MKX_Tiles_dev &t, Ready ready,
                                         int peer, int64_t i, int64_t j,
                                         int where) {
  if (ready()) return true;
  const uint64_t t0 = globaltimer();
  for (unsigned n = 1;; ++n) {
    __nanosleep(128);
    if (ready()) return true;
    if (n % 256) continue;
    if (failed(t, peer, i, j, where)) return false;
    if (globaltimer() - t0 > t.timeout_ns) {
      give_up(t, 11 /* MKX_ERR_TIMEOUT */, peer, i, j, where, t.rank);
      return false;
    }
  }
}

/* The data tiles the rectangle (checked) touches on node rank q complete
 * in this epoch; this thread takes every `step`-th tile from `first`. */
__device__ __forceinline__ bool wait_tiles(const MKX_Tiles_dev &t, int q,
                                           int64_t r0, int64_t nr, int64_t c0,
                                           int64_t nc, int where, int first,
                                           int step) {
  int64_t i0, i1, j0, j1;
  rect_tiles(t, r0, nr, c0, nc, &i0, &i1, &j0, &j1);
  const uint64_t e = (uint64_t)(unsigned)epoch(t);
  const int64_t nj = j1 - j0, n = (i1 - i0) * nj;
  for (int64_t k = first; k < n; k += step) {
    const int64_t i = i0 + k / nj, j = j0 + k % nj;
    const uint64_t target = e * tile_elems(t, i, j);
    const uint64_t *s = sem(t, q, i, j);
    if (!wait_for(
            t, [&] { return ld_acquire_u64(s) >= target; }, q, i, j, where))
      return false;
  }
  return true;
}

}  // namespace mkx_tiles_detail

/* The current epoch of the set on this rank (MKX_Tiles_begin counts them
 * from 1), for kernels whose work depends on it. */
__device__ __forceinline__ int mkx_tiles_epoch(const MKX_Tiles_dev &t) {
  return mkx_tiles_detail::epoch(t);
}

/* Thread: wait until every data tile that the rectangle touches on rank
 * `rank`'s copy is complete in this epoch.  False: the wait failed (see
 * the top), or the rank or rectangle is outside the set (then recorded as
 * MKX_ERR_INVALID_ARG, and the set is unusable as after a timeout; the
 * same for a signal). */
__device__ __forceinline__ bool mkx_tiles_wait(const MKX_Tiles_dev &t, int rank,
                                               int64_t row0, int64_t nrows,
                                               int64_t col0, int64_t ncols) {
  namespace d = mkx_tiles_detail;
  const int q = d::node_rank(t, rank);
  if (d::bad_args(t, rank, row0, nrows, col0, ncols)) return false;
  return d::wait_tiles(t, q, row0, nrows, col0, ncols, MKX_TILES_AT_KERNEL, 0,
                       1);
}

/* Thread: the rectangle of rank `rank`'s copy is written: everything this
 * thread wrote before (and what it has seen of others' writes) becomes
 * visible to the rank's waits first.  Each element of a tile is signalled
 * exactly once per epoch, by one of its producers. */
__device__ __forceinline__ void mkx_tiles_signal(const MKX_Tiles_dev &t,
                                                 int rank, int64_t row0,
                                                 int64_t nrows, int64_t col0,
                                                 int64_t ncols) {
  namespace d = mkx_tiles_detail;
  const int q = d::node_rank(t, rank);
  if (d::bad_args(t, rank, row0, nrows, col0, ncols)) return;
  int64_t i0, i1, j0, j1;
  d::rect_tiles(t, row0, nrows, col0, ncols, &i0, &i1, &j0, &j1);
  __threadfence_system();
  for (int64_t i = i0; i < i1; ++i)
    for (int64_t j = j0; j < j1; ++j)
      d::red_relaxed_add_u64(d::sem(t, q, i, j),
                             d::part_elems(t, i, j, row0, nrows, col0, ncols));
}

/* Block: as mkx_tiles_wait, the block's threads sharing the tiles; every
 * thread gets the same answer and may read the tiles after a true. */
__device__ __forceinline__ bool mkx_tiles_block_wait(const MKX_Tiles_dev &t,
                                                     int rank, int64_t row0,
                                                     int64_t nrows,
                                                     int64_t col0,
                                                     int64_t ncols) {
  namespace d = mkx_tiles_detail;
  const int q = d::node_rank(t, rank);
  bool ok = !d::bad_args(t, rank, row0, nrows, col0, ncols);
  const int threads = (int)(blockDim.x * blockDim.y * blockDim.z);
  const int me = (int)(threadIdx.x +
                       blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z));
  if (ok)
    ok = d::wait_tiles(t, q, row0, nrows, col0, ncols, MKX_TILES_AT_KERNEL, me,
                       threads);
  return !__syncthreads_or(!ok);
}

/* Block: every thread has written its part of the rectangle; then one
 * signals it (mkx_tiles_signal). */
__device__ __forceinline__ void mkx_tiles_block_signal(const MKX_Tiles_dev &t,
                                                       int rank, int64_t row0,
                                                       int64_t nrows,
                                                       int64_t col0,
                                                       int64_t ncols) {
  __syncthreads();
  if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0)
    mkx_tiles_signal(t, rank, row0, nrows, col0, ncols);
}

/* The rectangle of kernel tile (i, j) when the tensor is cut into kernel
 * tiles of krows x kcols (the last ones clipped): plain tilings. */
__device__ __forceinline__ void mkx_tiles_kernel_rect(
    const MKX_Tiles_dev &t, int64_t krows, int64_t kcols, int64_t i, int64_t j,
    int64_t *row0, int64_t *nrows, int64_t *col0, int64_t *ncols) {
  *row0 = i * krows;
  *col0 = j * kcols;
  *nrows = *row0 + krows < t.rows ? krows : t.rows - *row0;
  *ncols = *col0 + kcols < t.cols ? kcols : t.cols - *col0;
}

/* Block, irregular tilings: map(i, j, &row0, &nrows, &col0, &ncols) gives
 * kernel tile (i, j)'s rectangle; wait for it. */
template <typename Map>
__device__ __forceinline__ bool mkx_tiles_block_wait_map(const MKX_Tiles_dev &t,
                                                         int rank, int64_t i,
                                                         int64_t j, Map map) {
  int64_t r0, nr, c0, nc;
  map(i, j, &r0, &nr, &c0, &nc);
  return mkx_tiles_block_wait(t, rank, r0, nr, c0, nc);
}
template <typename Map>
__device__ __forceinline__ void mkx_tiles_block_signal_map(
    const MKX_Tiles_dev &t, int rank, int64_t i, int64_t j, Map map) {
  int64_t r0, nr, c0, nc;
  map(i, j, &r0, &nr, &c0, &nc);
  mkx_tiles_block_signal(t, rank, r0, nr, c0, nc);
}

/* Element (r, c) of node rank q's buffer as mapped here (the set's
 * buffer; NULL where it has none): for reading a peer's tile after a
 * wait, or writing it before a signal. */
template <typename T>
__device__ __forceinline__ T *mkx_tiles_elem(const MKX_Tiles_dev &t, int rank,
                                             int64_t r, int64_t c) {
  const int q = mkx_tiles_detail::node_rank(t, rank);
  if (q < 0 || !t.data[q]) return nullptr;
  const int64_t off = t.col_major ? r + c * t.ld[q] : r * t.ld[q] + c;
  return reinterpret_cast<T *>(t.data[q]) + off;
}

#endif /* MKX_TILES_CUH */
