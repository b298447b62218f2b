/* The attention engine's positions and causal key counts
 * (kernels/attention/attn_positions.h) against brute force, for every
 * layout, chunk count and chunk length up to small sizes: each layout is
 * a permutation of the sequence, increasing inside a chunk, the same as
 * the host path's (the oracle's) positions, and mkx_attn_visible counts
 * exactly the keys at or before a query. */
#include <stdint.h>
#include <stdlib.h>
#include "../common/check.h"
#include "attention/attn_positions.h"
#include "core/options.h"
#include "host/op_args.h"

static void layout_case(int layout, int p, int S) {
  const int n = p * S;
  char *seen = calloc((size_t)n, 1);
  int perm = 1, rising = 1, oracle = 1, counts = 1;
  for (int r = 0; r < p; r++)
    for (int i = 0; i < S; i++) {
      const int64_t x = mkx_attn_pos(layout, p, S, r, i);
      if (x < 0 || x >= n || seen[x]++) perm = 0;
      if (i > 0 && x <= mkx_attn_pos(layout, p, S, r, i - 1)) rising = 0;
      if (x != mkx_attn_position(layout, p, r, S, i)) oracle = 0;
    }
  for (int c = 0; c < p; c++)
    for (int64_t q = -1; q <= n; q++) {
      int want = 0;
      for (int j = 0; j < S; j++) want += mkx_attn_pos(layout, p, S, c, j) <= q;
      if (mkx_attn_visible(layout, p, S, c, q) != want) counts = 0;
    }
  free(seen);
  CHECK(perm && rising && oracle && counts,
        "layout %d, %d chunks of %d: permutation %d, rising %d, as the host "
        "path %d, visible keys %d",
        layout, p, S, perm, rising, oracle, counts);
}

int main(void) {
  static const int lens[] = {1, 2, 3, 7, 8, 10, 33, 128};
  for (int layout = 0; layout < 3; layout++)
    for (int p = 1; p <= 8; p++)
      for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
        /* zigzag halves each chunk: even lengths, or one chunk (the
         * engine runs a single chunk as contiguous) */
        if (layout == MKX_ATTN_POS_ZIGZAG && lens[k] % 2) continue;
        layout_case(layout, p, lens[k]);
      }
  CHECK((int)MKX_ATTN_POS_CONTIGUOUS == (int)MKX_ATTN_CONTIGUOUS &&
            (int)MKX_ATTN_POS_ZIGZAG == (int)MKX_ATTN_ZIGZAG &&
            (int)MKX_ATTN_POS_STRIPED == (int)MKX_ATTN_STRIPED,
        "the engine's layout numbers are option attn_layout's");
  return check_done("test_attn_positions");
}
