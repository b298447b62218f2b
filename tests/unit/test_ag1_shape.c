/* Which AllGather+GEMM products the split path runs as one kernel
 * (mkx_tp_ag1_shape, kernels/tp/ag_oneshot.cu; host code, no GPU needed):
 * the shapes measured on 2 H200, and on random shapes the rule's
 * invariants: at most 116 tiles of the tile the plain engine picks on 132
 * SMs, K >= 2048 unless any K is asked for, and K chunks that cover the K
 * blocks exactly, at most 8 of them. */
#include <stdlib.h>
#include <string.h>
#include "mkx.h"
#include "gemm/gemm_engine.h"
#include "tp/tp.h"
#include "../common/check.h"

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

static int shape(int64_t m, int64_t n, int64_t k, int any_k, int *tile,
                 int *chunk_kb, int *nkc) {
  mkx_tp_ag_desc d;
  memset(&d, 0, sizeof d);
  d.m = m, d.n = n, d.k = k;
  d.ab_type = MKX_GEMM_BF16, d.c_type = MKX_GEMM_BF16, d.b_kmajor = 1;
  return mkx_tp_ag1_shape(&d, any_k, tile, chunk_kb, nkc);
}

/* The rule's invariants for one product. */
static void check_rule(int64_t m, int64_t n, int64_t k) {
  int tile = 0, ckb = 0, nkc = 0, tile1 = 0, ckb1 = 0, nkc1 = 0;
  const int fits = shape(m, n, k, 0, &tile, &ckb, &nkc);
  const int fits1 = shape(m, n, k, 1, &tile1, &ckb1, &nkc1);
  mkx_gemm_desc g;
  memset(&g, 0, sizeof g);
  g.m = m, g.n = n, g.k = k;
  const int want = mkx_gemm_pick_tile(&g, 132);
  const int64_t tiles =
      cdiv(m, 128) * cdiv(n, want == MKX_GEMM_TILE_128x256 ? 256 : 128);
  const int64_t nk = cdiv(k, 64);
  CHECK(fits1 == (tiles <= 116), "%lldx%lldx%lld: any K %d, %lld tiles",
        (long long)m, (long long)n, (long long)k, fits1, (long long)tiles);
  CHECK(fits == (fits1 && nk >= 32), "%lldx%lldx%lld: auto %d (any K %d)",
        (long long)m, (long long)n, (long long)k, fits, fits1);
  if (!fits1) return;
  CHECK(tile1 == want, "%lldx%lldx%lld: tile %d, the engine's %d", (long long)m,
        (long long)n, (long long)k, tile1, want);
  CHECK(ckb1 >= 1 && nkc1 >= 1 && nkc1 <= 8 &&
            (int64_t)ckb1 * (nkc1 - 1) < nk && (int64_t)ckb1 * nkc1 >= nk,
        "%lldx%lldx%lld: %d chunks of %d K blocks for %lld", (long long)m,
        (long long)n, (long long)k, nkc1, ckb1, (long long)nk);
  if (fits)
    CHECK(tile == tile1 && ckb == ckb1 && nkc == nkc1,
          "%lldx%lldx%lld: auto and any K disagree", (long long)m, (long long)n,
          (long long)k);
}

int main(void) {
  int tile, ckb, nkc;
  /* measured (tests/perf/results/tp-h200x2.md) */
  CHECK(shape(512, 2048, 2048, 0, &tile, &ckb, &nkc) == 1 &&
            tile == MKX_GEMM_TILE_128x128 && ckb == 4 && nkc == 8,
        "512 x 2048 x 2048: one kernel, 128 x 128 tiles, 8 chunks of 4");
  CHECK(shape(768, 4096, 4096, 0, &tile, &ckb, &nkc) == 1 &&
            tile == MKX_GEMM_TILE_128x256,
        "768 x 4096 x 4096: one kernel, 128 x 256 tiles");
  CHECK(!shape(512, 4096, 4096, 1, &tile, &ckb, &nkc),
        "512 x 4096 x 4096: 128 tiles, two kernels");
  CHECK(!shape(1024, 2048, 8192, 1, &tile, &ckb, &nkc),
        "1024 x 2048 x 8192: 128 tiles, two kernels");
  CHECK(!shape(128, 1024, 1024, 0, &tile, &ckb, &nkc) &&
            shape(128, 1024, 1024, 1, &tile, &ckb, &nkc) && ckb == 2,
        "128 x 1024 x 1024: two kernels under auto, one when asked");
  CHECK(shape(3, 8, 8, 1, &tile, &ckb, &nkc) && ckb == 1 && nkc == 1,
        "3 x 8 x 8: one chunk");
  /* not a product for it */
  CHECK(!shape(0, 128, 128, 1, &tile, &ckb, &nkc), "m = 0");
  CHECK(!shape(128, 128, 1ll << 31, 1, &tile, &ckb, &nkc), "k = 2^31");
  srand(7);
  for (int i = 0; i < 20000; i++) {
    const int64_t m = 1 + rand() % 20000, n = 8 * (1 + rand() % 2048);
    const int64_t k = 8 * (1 + rand() % (i % 2 ? 512 : 4096));
    check_rule(m, n, k);
  }
  return check_done("test_ag1_shape");
}
