/*
 * The attention engine's timeline (kernels/attention/attn_timeline.cuh):
 * one run of one shape, bf16, random inputs, then for each consumer
 * warpgroup (warps 0 and 2) the mean cycles of each step of the main loop
 * over blocks 8..55 of CTA 0's first tile, and the cycles per block; then
 * when warpgroup 1's steps come relative to warpgroup 0's, and how long
 * both are in their softmax at once (they share the exponential units).
 * Built by the `timeline` stage of ci/gpu-check with -DMKX_ATTN_TIMELINE
 * (not part of make check: a measurement, not a test).
 *   attn_timeline [batch seq heads_q heads_kv head_dim causal]
 * (default 4 8192 16 16 128 0)
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention/attn_engine.h"
#include "attn_bench_desc.h"
#include "cuda_check.h"
#include "gemm/gemm_engine.h"
#include "num16.h"

#define BLOCKS 256
#define STEPS 8
#define FIRST 8
#define LAST 56

static const char *const step_name[STEPS] = {"top", "landed",  "turn", "issued",
                                             "qk",  "softmax", "pv",   "end"};

static void *dev_random16(size_t n, uint64_t *rng) {
  uint16_t *h = malloc(2 * n);
  if (!h) {
    fprintf(stderr, "attn_timeline: out of host memory\n");
    exit(1);
  }
  for (size_t x = 0; x < n; ++x) {
    *rng ^= *rng << 13;
    *rng ^= *rng >> 7;
    *rng ^= *rng << 17;
    h[x] = mt_f32_to_bf16(
        (float)((double)(*rng >> 11) * (2.0 / 9007199254740992.0) - 1.0));
  }
  void *d = mt_dev_upload(h, 2 * n);
  free(h);
  return d;
}

int main(int argc, char **argv) {
  int v[6] = {4, 8192, 16, 16, 128, 0};
  for (int i = 1; i < argc && i <= 6; ++i) v[i - 1] = atoi(argv[i]);
  if (!mt_sm90_here()) return 77;
  uint64_t rng = 0x9E3779B97F4A7C15ull;
  const size_t qn = (size_t)v[0] * v[1] * v[2] * v[4],
               kn = (size_t)v[0] * v[1] * v[3] * v[4];
  void *q = dev_random16(qn, &rng), *k = dev_random16(kn, &rng),
       *vv = dev_random16(kn, &rng), *o;
  CK(cudaMalloc(&o, 2 * qn));
  mkx_attn_desc d;
  attn_bench_desc(&d, v, q, k, vv, o);
  d.causal = v[5];
  d.scale = 0.088f;
  CK(cudaMalloc((void **)&d.tile_counter, sizeof(int)));
  static long long t[2][2][BLOCKS][STEPS];
  CK(mkx_attn_timeline_clear());
  const int rc = mkx_attn_run(&d, 0);
  CK(cudaDeviceSynchronize());
  if (rc) {
    printf("not ok - mkx_attn_run: %d\n", rc);
    return 1;
  }
  CK(mkx_attn_timeline_read(&t[0][0][0][0]));
  printf(
      "# %d %d %d/%d %d causal %d: cycles per step, blocks %d..%d of CTA 0's "
      "first tile\n",
      v[0], v[1], v[2], v[3], v[4], v[5], FIRST, LAST - 1);
  for (int w = 0; w < 2; ++w)
    for (int x = 0; x < 2; ++x) {
      double seg[STEPS] = {0};
      int n = 0, last = FIRST;
      for (int it = FIRST; it < LAST && t[w][x][it + 1][0]; ++it, last = it) {
        for (int e = 1; e < STEPS; ++e)
          seg[e] += (double)(t[w][x][it][e] - t[w][x][it][e - 1]);
        seg[0] += (double)(t[w][x][it + 1][0] - t[w][x][it][STEPS - 1]);
        ++n;
      }
      printf("warpgroup %d warp %d:", w, 2 * x);
      for (int e = 1; e < STEPS; ++e)
        printf(" %s %.0f", step_name[e], n ? seg[e] / n : 0.);
      printf(" (end to top %.0f); per block %.0f\n", n ? seg[0] / n : 0.,
             n ? (double)(t[w][x][last][0] - t[w][x][FIRST][0]) / n : 0.);
    }
  /* warpgroup 1 against warpgroup 0 (warps on the same scheduler): when
   * its steps come after warpgroup 0's top of the same block, and how
   * long per block both are in their softmax at once */
  for (int x = 0; x < 2; ++x) {
    double off[STEPS] = {0}, both = 0;
    int n = 0;
    for (int it = FIRST; it < LAST && t[0][x][it + 1][0] && t[1][x][it + 1][0];
         ++it, ++n) {
      for (int e = 0; e < STEPS; ++e)
        off[e] += (double)(t[1][x][it][e] - t[0][x][it][0]);
      const long long a0 = t[0][x][it][4], a1 = t[0][x][it][5];
      for (int j = it - 1; j <= it + 1; ++j) {
        const long long b0 = t[1][x][j][4], b1 = t[1][x][j][5];
        const long long lo = a0 > b0 ? a0 : b0, hi = a1 < b1 ? a1 : b1;
        if (hi > lo) both += (double)(hi - lo);
      }
    }
    printf("warpgroup 1 warp %d after warpgroup 0's top:", 2 * x);
    for (int e = 0; e < STEPS; ++e)
      printf(" %s %.0f", step_name[e], n ? off[e] / n : 0.);
    printf("; both in softmax %.0f per block\n", n ? both / n : 0.);
  }
  return 0;
}
