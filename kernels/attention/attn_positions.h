/*
 * Sequence positions of ring attention's layouts, and the keys a query
 * may see under the causal mask: one definition for the engine (device
 * code) and its unit test (host).  C11 and CUDA.
 *
 * p chunks (ranks) of S positions each; local index i of chunk r sits at
 *   contiguous  r*S + i
 *   zigzag      r*h + i for i < h, else (2p-1-r)*h + i - h  (h = S/2, S even)
 *   striped     i*p + r
 * (the layouts of option attn_layout, mkx.h).  In every layout the
 * positions of a chunk grow with the local index, so the keys of chunk c
 * that a query at position q sees (positions <= q) are its first ones:
 * mkx_attn_visible counts them.
 */
#ifndef MKX_ATTN_POSITIONS_H
#define MKX_ATTN_POSITIONS_H

#include <stdint.h>

#ifdef __CUDACC__
#define MKX_ATTN_HD __host__ __device__ __forceinline__
#else
#define MKX_ATTN_HD static inline
#endif

enum { MKX_ATTN_POS_CONTIGUOUS = 0, MKX_ATTN_POS_ZIGZAG = 1, MKX_ATTN_POS_STRIPED = 2 };

MKX_ATTN_HD int64_t mkx_attn_pos(int layout, int p, int S, int r, int i) {
  if (layout == MKX_ATTN_POS_STRIPED) return (int64_t)i * p + r;
  if (layout == MKX_ATTN_POS_ZIGZAG) {
    const int h = S >> 1;
    return i < h ? (int64_t)r * h + i : (int64_t)(2 * p - 1 - r) * h + (i - h);
  }
  return (int64_t)r * S + i;
}

MKX_ATTN_HD int64_t mkx_attn_clamp(int64_t v, int64_t hi) { return v < 0 ? 0 : v > hi ? hi : v; }

/* Keys of chunk c at positions <= q. */
MKX_ATTN_HD int mkx_attn_visible(int layout, int p, int S, int c, int64_t q) {
  if (layout == MKX_ATTN_POS_STRIPED) return (int)mkx_attn_clamp(q < c ? 0 : (q - c) / p + 1, S);
  if (layout == MKX_ATTN_POS_ZIGZAG) {
    const int h = S >> 1;
    return (int)(mkx_attn_clamp(q - (int64_t)c * h + 1, h) + mkx_attn_clamp(q - (int64_t)(2 * p - 1 - c) * h + 1, h));
  }
  return (int)mkx_attn_clamp(q - (int64_t)c * S + 1, S);
}

#endif /* MKX_ATTN_POSITIONS_H */
