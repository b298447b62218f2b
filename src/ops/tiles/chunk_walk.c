/* MKX_Tiles_gemm's order of chunks (ops/tiles/chunk_walk.h). */
#include "ops/tiles/chunk_walk.h"
#include "mkx.h"

void mkx_chunk_walk_init(mkx_chunk_walk *w, int how, int64_t rows, int size,
                         int rank, int64_t chunk) {
  *w = (mkx_chunk_walk){how, size, rank, rows, chunk, 0, 1, 0};
}

static int from_own(mkx_chunk_walk *w, int64_t *lo, int64_t *hi) {
  const int64_t n = (w->rows + w->chunk - 1) / w->chunk;
  if (w->i >= n) return 0;
  int64_t own, count;
  MKX_Block_range(w->rows, w->size, w->rank, &own, &count);
  const int64_t first = count > 0 ? own / w->chunk : 0;
  *lo = (first + w->i++) % n * w->chunk;
  *hi = *lo + w->chunk < w->rows ? *lo + w->chunk : w->rows;
  return 1;
}

static int rounds(mkx_chunk_walk *w, int64_t *lo, int64_t *hi) {
  for (;;) {
    if (w->o > w->size) { /* the round is over */
      if (!w->more) return 0;
      w->i++, w->o = 1, w->more = 0;
    }
    int64_t r0, nr;
    MKX_Block_range(w->rows, w->size, (w->rank + w->o++) % w->size, &r0, &nr);
    if (w->i * w->chunk >= nr) continue;
    *lo = r0 + w->i * w->chunk;
    *hi = *lo + w->chunk < r0 + nr ? *lo + w->chunk : r0 + nr;
    w->more |= *hi < r0 + nr;
    return 1;
  }
}

int mkx_chunk_walk_next(mkx_chunk_walk *w, int64_t *lo, int64_t *hi) {
  return w->how == MKX_WALK_ROUNDS ? rounds(w, lo, hi) : from_own(w, lo, hi);
}
