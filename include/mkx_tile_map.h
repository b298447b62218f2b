/*
 * mkx_tile_map.h - kernel tiles over data tiles, per dimension: one
 * definition for the host and for kernels (include/mkx_tiles.cuh's waits
 * and signals use it; so may a user's code, to size or check its own
 * tilings).  C11 and CUDA; no allocation, no library call.
 *
 * A dimension of n elements is cut into data tiles of d elements (the
 * last may be shorter); a kernel cuts the same dimension its own way,
 * into kernel tiles of k elements, or into ranges of its own (irregular
 * tilings).  A kernel tile covers the data tiles that its elements fall
 * in: a span [first, first + extent).  A data tile's target is the
 * number of kernel tiles that cover it: the producers that signal it, so
 * the count a consumer waits for.  Neither size need divide the other
 * or n.  In two dimensions a kernel tile covers the product of its row
 * and column spans, and a data tile's target is the product of its row
 * and column targets (each pair of a row and a column kernel tile that
 * covers it is one producer).
 */
#ifndef MKX_TILE_MAP_H
#define MKX_TILE_MAP_H

#include <stdint.h>

#ifdef __CUDACC__
#define MKX_TILE_HD __host__ __device__ __forceinline__
#else
#define MKX_TILE_HD static inline
#endif

/* Tiles of t elements over n (0 if t < 1). */
MKX_TILE_HD int64_t mkx_tile_count(int64_t n, int64_t t) {
  return t > 0 && n > 0 ? (n + t - 1) / t : 0;
}

/* The data tiles of d elements that elements [lo, hi) fall in (hi > lo). */
MKX_TILE_HD void mkx_tile_span(int64_t lo, int64_t hi, int64_t d,
                               int64_t *first, int64_t *extent) {
  *first = lo / d;
  *extent = (hi - 1) / d - *first + 1;
}

/* Kernel tile i (of k elements over n) over data tiles of d elements. */
MKX_TILE_HD void mkx_tile_cover(int64_t n, int64_t k, int64_t d, int64_t i,
                                int64_t *first, int64_t *extent) {
  const int64_t lo = i * k, hi = lo + k < n ? lo + k : n;
  mkx_tile_span(lo, hi, d, first, extent);
}

/* The kernel tiles of k elements over n that cover data tile j of d
 * elements: its target. */
MKX_TILE_HD int64_t mkx_tile_target(int64_t n, int64_t k, int64_t d,
                                    int64_t j) {
  const int64_t lo = j * d, hi = lo + d < n ? lo + d : n;
  int64_t first, extent;
  mkx_tile_span(lo, hi, k, &first, &extent);
  return extent;
}

/* Elements of [lo, hi) that fall in data tile j of d elements. */
MKX_TILE_HD int64_t mkx_tile_overlap(int64_t lo, int64_t hi, int64_t d,
                                     int64_t j) {
  const int64_t a = j * d > lo ? j * d : lo,
                b = (j + 1) * d < hi ? (j + 1) * d : hi;
  return b > a ? b - a : 0;
}

#endif
