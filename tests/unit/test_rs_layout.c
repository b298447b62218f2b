/* The GEMM+ReduceScatter/AllReduce layout (src/ops/tp/rs_layout.c) on many
 * random splits: every product row belongs to exactly one place (a chunk
 * of its owner's clean tile rows, or a late tile row holding rows of
 * several owners); chunks hold only their owner's rows; late rows are few;
 * sub-tile counts match the tiles the GEMM walks. */
#include <stdlib.h>
#include <string.h>
#include "mkx.h"
#include "tp/tp.h"
#include "../common/check.h"

static int owner_of(const int64_t *bnd, int p, int64_t row) {
  int q = 0;
  while (q + 1 < p && row >= bnd[q + 1]) q++;
  return q;
}

static void check_split(int64_t m, int p, int64_t n, const int64_t *bnd) {
  mkx_tp_rs_layout L;
  mkx_tp_rs_layout_make(m, n, p, bnd, n <= 128 ? 128 : 256, &L);
  char *seen = calloc((size_t)m, 1);
  int64_t rows_in_late = 0;
  for (int q = 0; q < p; q++)
    for (int c = 0; c < L.nchunk[q]; c++) {
      int64_t r0, r1;
      mkx_tp_rs_chunk_rows(&L, m, bnd, q, c, &r0, &r1);
      CHECK(r0 < r1 && r0 % 128 == 0,
            "m=%lld p=%d q=%d chunk %d rows [%lld,%lld)", (long long)m, p, q, c,
            (long long)r0, (long long)r1);
      for (int64_t r = r0; r < r1; r++) {
        CHECK(owner_of(bnd, p, r) == q, "row %lld in owner %d's chunk",
              (long long)r, q);
        seen[r]++;
      }
      int t0 = (int)(r0 / 128), t1 = (int)((r1 + 127) / 128);
      CHECK(mkx_tp_rs_chunk_subtiles(&L, q, c) == 2 * (t1 - t0) * L.tiles_n,
            "sub-tile count of owner %d chunk %d", q, c);
    }
  CHECK(L.nlate <= p - 1, "m=%lld p=%d: %d late tile rows", (long long)m, p,
        L.nlate);
  for (int i = 0; i < L.nlate; i++) {
    int64_t t0 = (int64_t)L.late_tm[i] * 128, t1 = t0 + 128 < m ? t0 + 128 : m;
    CHECK(owner_of(bnd, p, t0) != owner_of(bnd, p, t1 - 1),
          "late tile row %d has one owner", L.late_tm[i]);
    for (int64_t r = t0; r < t1; r++) seen[r]++;
    rows_in_late += t1 - t0;
  }
  int64_t bad = 0;
  for (int64_t r = 0; r < m; r++) bad += seen[r] != 1;
  CHECK(bad == 0, "m=%lld p=%d: %lld rows not covered exactly once",
        (long long)m, p, (long long)bad);
  CHECK(L.tiles_m == (int)((m + 127) / 128), "tiles_m");
  free(seen);
}

int main(void) {
  srand(7);
  const int64_t fixed[] = {1,   3,   64,  100,  127,  128,  129,  255,
                           256, 513, 777, 1000, 4095, 4096, 8192, 12345};
  for (int p = 1; p <= 8; p++) {
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) {
      int64_t bnd[MKX_FUSED_MAX + 1];
      for (int q = 0; q < p; q++) {
        int64_t first, count;
        MKX_Block_range(fixed[i], p, q, &first, &count);
        bnd[q] = first;
        bnd[q + 1] = first + count;
      }
      check_split(fixed[i], p, 8 * (1 + rand() % 64), bnd);
    }
    for (int it = 0; it < 200;
         it++) { /* arbitrary boundaries, empty owners too */
      int64_t m = 1 + rand() % 5000, bnd[MKX_FUSED_MAX + 1];
      bnd[0] = 0;
      bnd[p] = m;
      for (int q = 1; q < p; q++) bnd[q] = rand() % (m + 1);
      for (int q = 1; q < p; q++) /* sort */
        for (int j = q; j > 1 && bnd[j] < bnd[j - 1]; j--) {
          int64_t t = bnd[j];
          bnd[j] = bnd[j - 1];
          bnd[j - 1] = t;
        }
      check_split(m, p, 8 * (1 + rand() % 64), bnd);
    }
  }
  return check_done("test_rs_layout");
}
