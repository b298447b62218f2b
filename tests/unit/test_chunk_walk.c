/*
 * MKX_Tiles_gemm's order of chunks (src/ops/tiles/chunk_walk.h), for 1 to
 * 9 ranks, rows from 0 to 700 (fewer rows than ranks included) and chunks
 * of 1 to 300 rows, every rank:
 *  - both orders: every row in exactly one chunk, chunks non-empty and at
 *    most `chunk` rows;
 *  - from its own block: the first chunk holds the first row of the
 *    rank's block (where it has rows), chunks are aligned to `chunk` and
 *    follow each other, wrapping once;
 *  - in rounds: no chunk crosses a block's end, chunk k of a block starts
 *    at its block's row k * chunk, the chunks of round k come before
 *    those of round k + 1, and within a round the blocks go from rank + 1
 *    on with this rank's last.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../common/check.h"
#include "mkx.h"
#include "ops/tiles/chunk_walk.h"

#define MAX_ROWS 700

static int block_of(int64_t row, int64_t rows, int size) {
  for (int q = 0; q < size; q++) {
    int64_t r0, nr;
    MKX_Block_range(rows, size, q, &r0, &nr);
    if (row >= r0 && row < r0 + nr) return q;
  }
  return -1;
}

/* One walk checked; 1 if it holds. */
static int walk_ok(int how, int64_t rows, int size, int rank, int64_t chunk,
                   char *why, size_t len) {
  static int seen[MAX_ROWS];
  memset(seen, 0, sizeof seen);
  mkx_chunk_walk w;
  mkx_chunk_walk_init(&w, how, rows, size, rank, chunk);
  int64_t lo, hi, prev_hi = -1, n = 0;
  int prev_round = -1, prev_pos = 0;
  int64_t own0, own_n;
  MKX_Block_range(rows, size, rank, &own0, &own_n);
  while (mkx_chunk_walk_next(&w, &lo, &hi)) {
    if (++n > rows + 1) return snprintf(why, len, "too many chunks"), 0;
    if (lo < 0 || hi > rows || hi <= lo || hi - lo > chunk)
      return snprintf(why, len, "chunk [%lld, %lld)", (long long)lo,
                      (long long)hi),
             0;
    for (int64_t r = lo; r < hi; r++)
      if (seen[r]++)
        return snprintf(why, len, "row %lld twice", (long long)r), 0;
    if (how == MKX_WALK_FROM_OWN) {
      if (lo % chunk)
        return snprintf(why, len, "chunk at %lld unaligned", (long long)lo), 0;
      if (n == 1 && own_n > 0 && !(own0 >= lo && own0 < hi))
        return snprintf(why, len, "first chunk [%lld, %lld) misses row %lld",
                        (long long)lo, (long long)hi, (long long)own0),
               0;
      if (prev_hi >= 0 && lo != (prev_hi == rows ? 0 : prev_hi))
        return snprintf(why, len, "chunk at %lld after one ending at %lld",
                        (long long)lo, (long long)prev_hi),
               0;
    } else {
      const int b = block_of(lo, rows, size);
      int64_t r0, nr;
      MKX_Block_range(rows, size, b, &r0, &nr);
      if (hi > r0 + nr || (lo - r0) % chunk)
        return snprintf(why, len,
                        "chunk [%lld, %lld) in block %d [%lld, +%lld)",
                        (long long)lo, (long long)hi, b, (long long)r0,
                        (long long)nr),
               0;
      const int round = (int)((lo - r0) / chunk);
      const int pos = (b - rank - 1 + 2 * size) % size; /* own block: size-1 */
      if (round < prev_round || (round == prev_round && pos <= prev_pos))
        return snprintf(why, len,
                        "chunk %d of block %d after chunk %d at position %d",
                        round, b, prev_round, prev_pos),
               0;
      prev_round = round, prev_pos = pos;
    }
    prev_hi = hi;
  }
  for (int64_t r = 0; r < rows; r++)
    if (!seen[r]) return snprintf(why, len, "row %lld missed", (long long)r), 0;
  return 1;
}

int main(void) {
  static const int64_t row_set[] = {0,   1,   2,   5,   8,  127,
                                    128, 129, 300, 512, 700};
  static const int64_t chunk_set[] = {1, 3, 64, 128, 300};
  for (int how = MKX_WALK_FROM_OWN; how <= MKX_WALK_ROUNDS; how++) {
    int bad = 0, n = 0;
    char first[256] = "";
    for (size_t ri = 0; ri < sizeof row_set / sizeof row_set[0]; ri++)
      for (size_t ci = 0; ci < sizeof chunk_set / sizeof chunk_set[0]; ci++)
        for (int size = 1; size <= 9; size++)
          for (int rank = 0; rank < size; rank++, n++) {
            char why[200];
            if (walk_ok(how, row_set[ri], size, rank, chunk_set[ci], why,
                        sizeof why))
              continue;
            if (!bad++)
              snprintf(first, sizeof first,
                       "rows %lld, %d ranks, rank %d, chunk %lld: %s",
                       (long long)row_set[ri], size, rank,
                       (long long)chunk_set[ci], why);
          }
    CHECK(bad == 0, "%s: %d of %d walks hold%s%s",
          how == MKX_WALK_ROUNDS ? "in rounds" : "from the own block", n - bad,
          n, bad ? "; first failure: " : "", first);
  }
  return check_done("test_chunk_walk");
}
