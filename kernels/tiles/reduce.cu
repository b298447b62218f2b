/*
 * ReduceScatter and AllReduce of a tile set (tiles/tiles.h): each data
 * tile of this rank's block of rows is summed over the node ranks' copies
 * as soon as every copy of it is complete, written to this rank's output
 * (and, for AllReduce, into every rank's copy of the output set, signalled
 * there).  Written on the device functions users' kernels use
 * (include/mkx_tiles.cuh).  A few persistent CTAs take the tiles in turn,
 * so that waiting CTAs never hold the SMs of the kernels that produce; so
 * each CTA must move its tile at a good share of the memory's rate: 16
 * bytes per load where every copy's addresses allow, no 64-bit division
 * per element, the loads of two copies and eight items in flight per
 * thread.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include "tiles/tiles.h"
#include "mkx_tiles.cuh"
#include "common/modules.cuh"

namespace {

constexpr int THREADS = 256;
constexpr int U = 8; /* items per thread in flight */

/* Element (r, c)'s offset in a buffer of leading dimension ld. */
__device__ __forceinline__ int64_t at(int col_major, int64_t ld, int64_t r, int64_t c) {
  return col_major ? r + c * ld : r * ld + c;
}

/* W elements at p: 16 bytes at once where W says so. */
template <typename T, int W>
__device__ __forceinline__ void load(T (&v)[W], const T *p) {
  if constexpr (W == 1)
    v[0] = *p;
  else
    *reinterpret_cast<uint4 *>(v) = *reinterpret_cast<const uint4 *>(p);
}
template <typename T, int W>
__device__ __forceinline__ void store(T *p, const T (&v)[W]) {
  if constexpr (W == 1)
    *p = v[0];
  else
    *reinterpret_cast<uint4 *>(p) = *reinterpret_cast<const uint4 *>(v);
}

/* One data tile's rectangle, rows [lo, hi) x columns [c0, c1), as laid out
 * in memory: n segments of len contiguous elements (rows when row-major,
 * columns when column-major); segment s of a copy starts at
 * at(lo, c0) + s * ld. */
struct Rect {
  int64_t lo, hi, c0, c1, n, len;
};

template <typename T>
struct Job {
  const MKX_Tiles_dev &in, &out;
  bool has_out;
  T *recv; /* the rectangle's first element in recv, or NULL */
  int64_t ld_recv;
  Rect t;

  __device__ const T *src(int q) const {
    return reinterpret_cast<const T *>(in.data[q]) + at(in.col_major, in.ld[q], t.lo, t.c0);
  }
  __device__ T *dst(int p) const {
    return reinterpret_cast<T *>(out.data[p]) + at(in.col_major, out.ld[p], t.lo, t.c0);
  }

  /* Every address 16-byte aligned for W = 16 / sizeof(T). */
  __device__ bool wide() const {
    constexpr int V = 16 / sizeof(T);
    bool ok = t.len % V == 0;
    for (int q = 0; q < in.size; ++q) ok = ok && (uintptr_t)src(q) % 16 == 0 && in.ld[q] % V == 0;
    if (recv) ok = ok && (uintptr_t)recv % 16 == 0 && ld_recv % V == 0;
    if (has_out)
      for (int p = 0; p < out.size; ++p) ok = ok && (uintptr_t)dst(p) % 16 == 0 && out.ld[p] % V == 0;
    return ok;
  }

  /* Items k + u * THREADS (u < U; those below total) of W elements each,
   * segment idx / per.  The loads of two copies for all U items are
   * issued before any sum, so that a thread keeps 2 x U x 16 bytes in
   * flight; the copies are indexed at compile time (unrolled), so the
   * descriptors stay in the kernel's parameters. */
  template <int W>
  __device__ __forceinline__ void items(int k, int per, int total) const {
    float acc[U][W];
    int seg[U], el[U]; /* a data tile has < 2^31 elements */
    bool live[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int idx = k + u * THREADS;
      live[u] = idx < total;
      seg[u] = idx / per;
      el[u] = idx % per * W;
#pragma unroll
      for (int x = 0; x < W; ++x) acc[u][x] = 0.f;
    }
#pragma unroll
    for (int q = 0; q < MKX_TILES_MAX_RANKS; q += 2) {
      if (q >= in.size) break;
      const bool two = q + 1 < in.size;
      const T *a = src(q), *b = two ? src(q + 1) : a;
      const int64_t la = in.ld[q], lb = two ? in.ld[q + 1] : la;
      T va[U][W], vb[U][W];
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (live[u]) {
          load<T, W>(va[u], a + seg[u] * la + el[u]);
          if (two) load<T, W>(vb[u], b + seg[u] * lb + el[u]);
        }
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int x = 0; x < W; ++x)
          acc[u][x] += static_cast<float>(va[u][x]) + (two ? static_cast<float>(vb[u][x]) : 0.f);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (!live[u]) continue;
      T v[W];
#pragma unroll
      for (int x = 0; x < W; ++x) v[x] = T(acc[u][x]); /* bf16, fp16: rounded to nearest */
      if (recv) store<T, W>(recv + seg[u] * ld_recv + el[u], v);
      if (has_out)
#pragma unroll
        for (int p = 0; p < MKX_TILES_MAX_RANKS; ++p) {
          if (p >= out.size) break;
          store<T, W>(dst(p) + seg[u] * out.ld[p] + el[u], v);
        }
    }
  }

  template <int W>
  __device__ __forceinline__ void all() const {
    const int per = (int)(t.len / W), total = (int)(t.n * per);
    for (int k = threadIdx.x; k < total; k += U * THREADS) items<W>(k, per, total);
  }
};

/* Rows [r0, r1) of the sum of the copies of `in`: into recv (this rank's
 * block, leading dimension ld_recv; NULL: none) and, if has_out, into
 * every node rank's copy of `out`, each tile signalled there. */
template <typename T>
__global__ void __launch_bounds__(THREADS)
    reduce_kernel(MKX_Tiles_dev in, int64_t r0, int64_t r1, T *recv, int64_t ld_recv, MKX_Tiles_dev out, int has_out) {
  const int64_t i0 = r0 / in.tile_rows, i1 = (r1 - 1) / in.tile_rows + 1;
  const int64_t n = (i1 - i0) * in.tiles_c;
  const int cm = in.col_major;
  for (int64_t k = blockIdx.x; k < n; k += gridDim.x) {
    const int64_t i = i0 + k / in.tiles_c, j = k % in.tiles_c;
    Rect t;
    t.lo = i * in.tile_rows > r0 ? i * in.tile_rows : r0;
    t.hi = (i + 1) * in.tile_rows < r1 ? (i + 1) * in.tile_rows : r1;
    t.c0 = j * in.tile_cols;
    t.c1 = t.c0 + in.tile_cols < in.cols ? t.c0 + in.tile_cols : in.cols;
    t.n = cm ? t.c1 - t.c0 : t.hi - t.lo;
    t.len = cm ? t.hi - t.lo : t.c1 - t.c0;
    bool ok = true;
    for (int q = 0; q < in.size && ok; ++q)
      ok = mkx_tiles_block_wait(in, in.comm_rank[q], t.lo, t.hi - t.lo, t.c0, t.c1 - t.c0);
    if (!ok) return; /* recorded for the host; the outputs are void */
    const Job<T> job{in, out, has_out != 0, recv ? recv + at(cm, ld_recv, t.lo - r0, t.c0) : nullptr, ld_recv, t};
    if (job.wide())
      job.template all<16 / sizeof(T)>();
    else
      job.template all<1>();
    if (has_out)
      for (int p = 0; p < out.size; ++p)
        mkx_tiles_block_signal(out, out.comm_rank[p], t.lo, t.hi - t.lo, t.c0, t.c1 - t.c0);
    else
      __syncthreads(); /* the block's reads of this tile before the next */
  }
}

template <typename T>
int launch(const MKX_Tiles_dev *in, int64_t r0, int64_t r1, void *recv, int64_t ld_recv, const MKX_Tiles_dev *out,
           int ctas, cudaStream_t st) {
  MKX_Tiles_dev none = {};
  reduce_kernel<T><<<ctas, THREADS, 0, st>>>(*in, r0, r1, (T *)recv, ld_recv, out ? *out : none, out != nullptr);
  return (int)cudaGetLastError();
}

}  // namespace

extern "C" int mkx_tiles_reduce_launch(const MKX_Tiles_dev *in, int dtype, int64_t r0, int64_t r1, void *recv,
                                       int64_t ld_recv, const MKX_Tiles_dev *out, int ctas, cudaStream_t st) {
  if (!in || r1 <= r0 || r0 < 0 || r1 > in->rows || ctas < 1) return (int)cudaErrorInvalidValue;
  switch (dtype) {
    case 1:
      return launch<__nv_bfloat16>(in, r0, r1, recv, ld_recv, out, ctas, st);
    case 2:
      return launch<__half>(in, r0, r1, recv, ld_recv, out, ctas, st);
    case 3:
      return launch<float>(in, r0, r1, recv, ld_recv, out, ctas, st);
  }
  return (int)cudaErrorInvalidValue;
}
