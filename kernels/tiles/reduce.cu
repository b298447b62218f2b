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
 * per element, four loads in flight per thread and copy.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include "tiles/tiles.h"
#include "mkx_tiles.cuh"
#include "common/modules.cuh"

namespace {

/* One data tile's rectangle as laid out in memory: n segments of len
 * contiguous elements (rows when row-major, columns when column-major);
 * segment s of node rank q's copy starts at off(q) + s * ld[q]. */
struct Rect {
  int64_t lo, hi, c0, c1; /* rows [lo, hi), columns [c0, c1) */
  int64_t n, len;
};

__device__ __forceinline__ int64_t at(int col_major, int64_t ld, int64_t r, int64_t c) {
  return col_major ? r + c * ld : r * ld + c;
}

template <typename T>
struct Sum {
  static constexpr int V = 16 / sizeof(T); /* elements in 16 bytes */
  const T *src[MKX_TILES_MAX_RANKS];       /* segment 0 of each copy */
  int64_t sld[MKX_TILES_MAX_RANKS];
  T *dst[MKX_TILES_MAX_RANKS + 1]; /* recv, then the copies of out */
  int64_t dld[MKX_TILES_MAX_RANKS + 1];
  int nsrc, ndst;

  __device__ bool aligned(int64_t len) const {
    bool ok = len % V == 0;
    for (int q = 0; q < nsrc; ++q) ok = ok && (uintptr_t)src[q] % 16 == 0 && (sld[q] * (int64_t)sizeof(T)) % 16 == 0;
    for (int p = 0; p < ndst; ++p) ok = ok && (uintptr_t)dst[p] % 16 == 0 && (dld[p] * (int64_t)sizeof(T)) % 16 == 0;
    return ok;
  }

  /* U steps of the block at once: item k + u * blockDim.x (those below
   * total) is W elements of the n x len rectangle, segment idx / per.
   * Each copy's U loads are issued together (stores to other buffers in
   * between would keep the compiler from hoisting them), so that a thread
   * keeps U x 16 bytes in flight. */
  template <int W, int U>
  __device__ __forceinline__ void step(int k, int per, int total) const {
    float acc[U][W];
    int64_t off[U][2]; /* segment, element */
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int idx = k + u * (int)blockDim.x;
      off[u][0] = idx / per;
      off[u][1] = (int64_t)(idx % per) * W;
#pragma unroll
      for (int x = 0; x < W; ++x) acc[u][x] = 0.f;
    }
    for (int q = 0; q < nsrc; ++q) {
      T v[U][W];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if (k + u * (int)blockDim.x >= total) continue;
        const T *p = src[q] + off[u][0] * sld[q] + off[u][1];
        if constexpr (W == 1)
          v[u][0] = *p;
        else
          *reinterpret_cast<uint4 *>(v[u]) = *reinterpret_cast<const uint4 *>(p);
      }
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int x = 0; x < W; ++x) acc[u][x] += static_cast<float>(v[u][x]);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (k + u * (int)blockDim.x >= total) continue;
      T out[W];
#pragma unroll
      for (int x = 0; x < W; ++x) out[x] = T(acc[u][x]); /* bf16, fp16: rounded to nearest */
      for (int p = 0; p < ndst; ++p) {
        T *d = dst[p] + off[u][0] * dld[p] + off[u][1];
        if constexpr (W == 1)
          *d = out[0];
        else
          *reinterpret_cast<uint4 *>(d) = *reinterpret_cast<const uint4 *>(out);
      }
    }
  }

  /* The block sums the n x len rectangle, W elements per thread and item. */
  template <int W>
  __device__ __forceinline__ void all(int64_t n, int64_t len) const {
    constexpr int U = 4;
    const int per = (int)(len / W), total = (int)(n * per), stride = U * (int)blockDim.x;
    for (int k = threadIdx.x; k < total; k += stride) step<W, U>(k, per, total);
  }
};

/* Rows [r0, r1) of the sum of the copies of `in`: into recv (this rank's
 * block, leading dimension ld_recv; NULL: none) and, if has_out, into
 * every node rank's copy of `out`, each tile signalled there. */
template <typename T>
__global__ void __launch_bounds__(512)
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
    Sum<T> s;
    s.nsrc = in.size;
    for (int q = 0; q < in.size; ++q) {
      s.src[q] = reinterpret_cast<const T *>(in.data[q]) + at(cm, in.ld[q], t.lo, t.c0);
      s.sld[q] = in.ld[q];
    }
    s.ndst = 0;
    if (recv) {
      s.dst[s.ndst] = recv + at(cm, ld_recv, t.lo - r0, t.c0);
      s.dld[s.ndst++] = ld_recv;
    }
    if (has_out)
      for (int p = 0; p < out.size; ++p) {
        s.dst[s.ndst] = reinterpret_cast<T *>(out.data[p]) + at(cm, out.ld[p], t.lo, t.c0);
        s.dld[s.ndst++] = out.ld[p];
      }
    if (s.aligned(t.len))
      s.template all<Sum<T>::V>(t.n, t.len);
    else
      s.template all<1>(t.n, t.len);
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
  reduce_kernel<T><<<ctas, 512, 0, st>>>(*in, r0, r1, (T *)recv, ld_recv, out ? *out : none, out != nullptr);
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
