/*
 * Kernel tiles over data tiles (include/mkx_tile_map.h), against a
 * count element by element, on 2000 seeded random dimensions (n, data
 * tile d, kernel tile k, most of them dividing neither each other nor n)
 * and on the plain cases (equal tiles, one a multiple of the other, a
 * single tile, tiles larger than n):
 *  - each kernel tile's span is exactly the data tiles its elements fall
 *    in, and every data tile's target is the number of kernel tiles whose
 *    span holds it;
 *  - the spans' extents add up to the targets' sum;
 *  - the elements each kernel tile puts in each data tile
 *    (mkx_tile_overlap, what a tile set's signals count) add up to the
 *    kernel tile's length, and over the kernel tiles to each data tile's
 *    own elements;
 *  - irregular tilings (random cut points: kernel tiles of their own
 *    lengths, some of one element) through mkx_tile_span: the same;
 *  - in two dimensions, the product rule: the target of a data tile is
 *    the number of (row, column) kernel tiles that cover it, counted.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include "../common/check.h"
#include "mkx_tile_map.h"

static uint64_t seed = 0x9e3779b97f4a7c15ull;

static int64_t rnd(int64_t lo, int64_t hi) { /* in [lo, hi] */
  seed = seed * 6364136223846793005ull + 1442695040888963407ull;
  return lo + (int64_t)((seed >> 33) % (uint64_t)(hi - lo + 1));
}

/* Kernel tiles given by cut points: tile i is [cut[i], cut[i + 1]). */
typedef struct tiling {
  int64_t n, nk;
  int64_t cut[4100];
} tiling;

static void regular(tiling *t, int64_t n, int64_t k) {
  t->n = n;
  t->nk = mkx_tile_count(n, k);
  for (int64_t i = 0; i <= t->nk; i++) t->cut[i] = i * k < n ? i * k : n;
}

static void irregular(tiling *t, int64_t n) {
  t->n = n;
  t->nk = 0;
  t->cut[0] = 0;
  while (t->cut[t->nk] < n && t->nk < 4095) {
    const int64_t len = rnd(1, 1 + n / 8);
    t->cut[t->nk + 1] = t->cut[t->nk] + len < n ? t->cut[t->nk] + len : n;
    t->nk++;
  }
  t->cut[t->nk] = n;
}

/* One dimension: spans and targets against the element-wise count.
 * k > 0: the tiling is regular of k (mkx_tile_cover, mkx_tile_target
 * checked too).  Returns 1 if all agree. */
static int check_dim(const tiling *t, int64_t d, int64_t k) {
  const int64_t nd = mkx_tile_count(t->n, d);
  int64_t *count = calloc((size_t)nd, sizeof *count), sum_ext = 0, sum_t = 0;
  int64_t *elems = calloc((size_t)nd, sizeof *elems);
  int ok = count != NULL && elems != NULL;
  for (int64_t i = 0; ok && i < t->nk; i++) {
    int64_t first, extent;
    mkx_tile_span(t->cut[i], t->cut[i + 1], d, &first, &extent);
    if (k > 0) {
      int64_t f2, e2;
      mkx_tile_cover(t->n, k, d, i, &f2, &e2);
      ok &= f2 == first && e2 == extent;
    }
    /* exactly the data tiles of its first and last element, and all
     * between */
    ok &= first == t->cut[i] / d &&
          first + extent - 1 == (t->cut[i + 1] - 1) / d && extent >= 1;
    for (int64_t j = first; ok && j < first + extent; j++) count[j]++;
    /* the elements signalled into each tile (mkx_tile_overlap): the
     * kernel tile's length in all, none outside its span */
    int64_t in = 0;
    for (int64_t j = first; ok && j < first + extent; j++) {
      const int64_t o = mkx_tile_overlap(t->cut[i], t->cut[i + 1], d, j);
      ok &= o >= 1;
      elems[j] += o;
      in += o;
    }
    ok &= in == t->cut[i + 1] - t->cut[i];
    ok &= mkx_tile_overlap(t->cut[i], t->cut[i + 1], d, first - 1) == 0 &&
          mkx_tile_overlap(t->cut[i], t->cut[i + 1], d, first + extent) == 0;
    sum_ext += extent;
  }
  /* every data tile completed by exactly its own elements */
  for (int64_t j = 0; ok && j < nd; j++)
    ok &= elems[j] == mkx_tile_overlap(0, t->n, d, j) &&
          elems[j] == (t->n - j * d < d ? t->n - j * d : d);
  for (int64_t j = 0; ok && j < nd; j++) {
    if (k > 0) ok &= mkx_tile_target(t->n, k, d, j) == count[j];
    ok &= count[j] >= 1;
    sum_t += count[j];
  }
  free(count);
  free(elems);
  return ok && sum_ext == sum_t;
}

static void plain(void) {
  static const int64_t c[][3] = {
      {1024, 128, 128}, {1024, 64, 128}, {1024, 128, 64}, {1000, 128, 64},
      {1, 1, 1},        {7, 16, 32},     {4096, 4096, 1}, {4097, 1, 4096}};
  int ok = 1;
  for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
    tiling t;
    regular(&t, c[i][0], c[i][2]);
    ok &= check_dim(&t, c[i][1], c[i][2]);
  }
  CHECK(ok, "plain tilings: equal, multiples, one tile, tiles beyond n");
  CHECK(mkx_tile_target(1024, 64, 128, 3) == 2 &&
            mkx_tile_target(1024, 128, 64, 3) == 1 &&
            mkx_tile_target(1000, 96, 64, 1) == 2,
        "targets: two 64-row kernel tiles per 128-row data tile, one for "
        "the reverse, two where 96 straddles 64");
  CHECK(mkx_tile_count(0, 8) == 0 && mkx_tile_count(9, 0) == 0 &&
            mkx_tile_count(9, 8) == 2,
        "counts: none of an empty dimension or a tile of 0; 9 over 8 is 2");
}

static void random_regular(void) {
  int ok = 1;
  for (int r = 0; r < 2000 && ok; r++) {
    tiling t;
    const int64_t n = rnd(1, 5000), d = rnd(1, 700), k = rnd(1, 700);
    if (mkx_tile_count(n, k) > 4096) continue;
    regular(&t, n, k);
    ok &= check_dim(&t, d, k);
    if (!ok)
      printf("# first disagreement: n %lld d %lld k %lld\n", (long long)n,
             (long long)d, (long long)k);
  }
  CHECK(ok, "2000 random regular tilings: spans and targets exact");
}

static void random_irregular(void) {
  int ok = 1;
  for (int r = 0; r < 500 && ok; r++) {
    tiling t;
    irregular(&t, rnd(1, 4000));
    ok &= check_dim(&t, rnd(1, 500), 0);
  }
  CHECK(ok, "500 irregular tilings: spans and targets exact");
}

static void two_d(void) {
  int ok = 1;
  for (int r = 0; r < 200 && ok; r++) {
    const int64_t m = rnd(1, 600), n = rnd(1, 600), dm = rnd(1, 90),
                  dn = rnd(1, 90), km = rnd(1, 90), kn = rnd(1, 90);
    const int64_t tm = mkx_tile_count(m, km), tn = mkx_tile_count(n, kn);
    const int64_t nd = mkx_tile_count(m, dm) * mkx_tile_count(n, dn);
    int64_t *count = calloc((size_t)nd, sizeof *count);
    if (!count) break;
    for (int64_t i = 0; i < tm; i++)
      for (int64_t j = 0; j < tn; j++) {
        int64_t fr, er, fc, ec;
        mkx_tile_cover(m, km, dm, i, &fr, &er);
        mkx_tile_cover(n, kn, dn, j, &fc, &ec);
        for (int64_t a = fr; a < fr + er; a++)
          for (int64_t b = fc; b < fc + ec; b++)
            count[a * mkx_tile_count(n, dn) + b]++;
      }
    for (int64_t a = 0; a < mkx_tile_count(m, dm); a++)
      for (int64_t b = 0; b < mkx_tile_count(n, dn); b++)
        ok &= count[a * mkx_tile_count(n, dn) + b] ==
              mkx_tile_target(m, km, dm, a) * mkx_tile_target(n, kn, dn, b);
    free(count);
  }
  CHECK(ok,
        "200 random 2-D tilings: targets are products of the "
        "dimensions'");
}

int main(void) {
  check_show_passes(1);
  plain();
  random_regular();
  random_irregular();
  two_d();
  return check_done("test_tile_map");
}
