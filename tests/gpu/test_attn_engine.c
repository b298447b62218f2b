/*
 * GPU test of the MKX attention engine (kernels/attention): mkx_attn_run
 * against an fp64 reference of this file's own, on fresh random inputs:
 * head dims 64, 128 and padded ones, grouped- and multi-query heads,
 * causal and not, partial tiles, bf16 and fp16, and the ring's view of a
 * sequence in chunks (every layout, every own chunk) with the ready flags
 * already set, or never set (then the bounded wait must report a timeout),
 * and as the network lands them: each chunk's K and V side by side
 * (ring_stride), landed once a host-mapped word (net_ready) rises, which
 * the host raises after the launch, or never.
 * O and LSE are poisoned before each run and guarded past their ends.
 * One check (tests/common/check.h) per run.  Exit 77 without an sm_90 GPU,
 * 1 on any failure.
 *   --bench   also time the engine on the shapes of the attention issue
 *             table (bf16, one GPU) and print TFLOP/s (causal counts half)
 *   --bench-only  the timings alone
 *   --profile only one run of one shape, after two warm-ups, non-causal
 *             then causal (for ncu)
 */
#define _POSIX_C_SOURCE 200809L
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attention/attn_engine.h"
#include "attn_bench_desc.h"
#include "check.h"
#include "engine_check.h"
#include "cuda_check.h"
#include "gemm/gemm_engine.h"
#include "num16.h"

static int g_runs; /* runs vary: tile counter, block size, warpgroups */
static int *g_counter;

/* The summary ci/gpu-check shows, then check.h's verdict and status. */
static int engine_finish(void) {
  printf("# %d ok, %d failed\n", check_count() - check_failed(),
         check_failed());
  return check_done("test_attn_engine");
}

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static double rnd(void) { /* [-1, 1) */
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return (double)(g_rng >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

typedef struct {
  int b, s, hq, hkv, d, causal, f16;
  double spread; /* inputs of Q scaled by this: peaky or flat softmax */
  int p, layout; /* chunks (1: one GPU's attention) and positions */
} tcase;

static uint16_t to16(double v, int f16) {
  return f16 ? mt_f32_to_f16((float)v) : mt_f32_to_bf16((float)v);
}
static double from16(uint16_t h, int f16) {
  return f16 ? mt_f16_to_f32(h) : mt_bf16_to_f32(h);
}

static int64_t pos(int layout, int p, int r, int64_t S, int64_t i) {
  if (layout == 2) return i * p + r;
  if (layout == 1) {
    const int64_t h = S / 2;
    return i < h ? r * h + i : (2 * (int64_t)p - 1 - r) * h + (i - h);
  }
  return (int64_t)r * S + i;
}

/* Reference of one query row: O (d values) and LSE over every chunk. */
static void ref_row(const tcase *t, int self, const uint16_t *q,
                    const uint16_t *kr, const uint16_t *vr, int b, int i, int h,
                    double scale, double *o, double *lse) {
  const int hk = h / (t->hq / t->hkv);
  const int64_t qpos = pos(t->layout, t->p, self, t->s, i);
  const uint16_t *qrow = q + (((int64_t)b * t->s + i) * t->hq + h) * t->d;
  const int64_t n = (int64_t)t->p * t->s;
  double *sc = host_alloc(sizeof(double) * (size_t)n);
  double mx = -INFINITY;
  for (int c = 0; c < t->p; ++c)
    for (int j = 0; j < t->s; ++j) {
      double v = -INFINITY;
      if (!t->causal || pos(t->layout, t->p, c, t->s, j) <= qpos) {
        const uint16_t *krow =
            kr + ((((int64_t)c * t->b + b) * t->s + j) * t->hkv + hk) * t->d;
        double acc = 0;
        for (int e = 0; e < t->d; ++e)
          acc += from16(qrow[e], t->f16) * from16(krow[e], t->f16);
        v = acc * scale;
      }
      sc[(int64_t)c * t->s + j] = v;
      if (v > mx) mx = v;
    }
  for (int e = 0; e < t->d; ++e) o[e] = 0;
  if (mx == -INFINITY) {
    *lse = -INFINITY;
    free(sc);
    return;
  }
  double sum = 0;
  for (int c = 0; c < t->p; ++c)
    for (int j = 0; j < t->s; ++j) {
      const double w = exp(sc[(int64_t)c * t->s + j] - mx);
      if (w == 0) continue;
      sum += w;
      const uint16_t *vrow =
          vr + ((((int64_t)c * t->b + b) * t->s + j) * t->hkv + hk) * t->d;
      for (int e = 0; e < t->d; ++e) o[e] += w * from16(vrow[e], t->f16);
    }
  for (int e = 0; e < t->d; ++e) o[e] /= sum;
  *lse = mx + log(sum);
  free(sc);
}

enum { GUARD = 4096 };

/* The network's view of the other chunks (mkx_attn_desc net_*): K and V of
 * chunk c side by side at c * 2 * kn elements; chunk c's word, the low
 * half of words[c * NET_WORDS + 1] in host-mapped memory, lands it at 7. */
enum { NET_WORDS = 3 };
typedef struct {
  void *ring;
  uint64_t *words; /* host */
  int *claim;
} net_view;

static void net_view_make(const tcase *t, int64_t kn, const uint16_t *kr,
                          const uint16_t *vr, net_view *n, mkx_attn_desc *d) {
  uint16_t *h = host_alloc(4 * kn * t->p);
  for (int c = 0; c < t->p; ++c) {
    memcpy(h + 2 * kn * c, kr + kn * c, 2 * kn);
    memcpy(h + 2 * kn * c + kn, vr + kn * c, 2 * kn);
  }
  n->ring = upload(h, 4 * kn * t->p);
  free(h);
  CUDA(cudaHostAlloc((void **)&n->words, sizeof(uint64_t) * NET_WORDS * t->p,
                     cudaHostAllocMapped));
  for (int x = 0; x < NET_WORDS * t->p; ++x) n->words[x] = 6;
  uint64_t *dw = NULL;
  CUDA(cudaHostGetDevicePointer((void **)&dw, n->words, 0));
  CUDA(cudaMalloc((void **)&n->claim, sizeof(int) * MKX_ATTN_MAX_CHUNKS));
  CUDA(cudaMemset(n->claim, 0, sizeof(int) * MKX_ATTN_MAX_CHUNKS));
  d->k_ring = n->ring;
  d->v_ring = (const uint16_t *)n->ring + kn;
  d->ring_stride = 2 * kn;
  d->net_mask = ((1u << t->p) - 1) & ~(1u << d->self);
  d->net_ready = (const int *)(dw + 1);
  d->net_ready_stride = 2 * NET_WORDS;
  d->net_claim = n->claim;
}

/* The network lands every chunk: after the launch, so the engine waits. */
static void net_land(const tcase *t, net_view *n) {
  const struct timespec nap = {0, 20000000};
  nanosleep(&nap, NULL);
  for (int c = 0; c < t->p; ++c)
    __atomic_store_n(&n->words[c * NET_WORDS + 1], 7, __ATOMIC_RELEASE);
}

static void net_view_free(net_view *n) {
  if (n->ring) CUDA(cudaFree(n->ring));
  if (n->words) CUDA(cudaFreeHost(n->words));
  if (n->claim) CUDA(cudaFree(n->claim));
}

/* The run's name in its lines, d's choices (block size, tile counter,
 * warpgroups) with it once there is one. */
static void name_run(const tcase *t, int self, int ready, int net,
                     const mkx_attn_desc *d) {
  char how[64] = "";
  if (d)
    snprintf(how, sizeof how, " bn %d%s%s", d->block_n,
             d->tile_counter ? " counter" : "",
             mkx_attn_warpgroups(d) == 3 ? " 3 warpgroups" : "");
  snprintf(g_case, sizeof g_case,
           "b%d s%d hq%d hkv%d d%d %s %s spread %g p%d layout %d self %d"
           "%s%s%s",
           t->b, t->s, t->hq, t->hkv, t->d, t->causal ? "causal" : "full",
           t->f16 ? "fp16" : "bf16", t->spread, t->p, t->layout, self, how,
           net ? " network" : "", ready ? "" : " (flags never set)");
}

/* One run of case t as chunk `self`; ready: set the other chunks' flags
 * (else expect the bounded wait to time out); net: the chunks as the
 * network lands them (net_view), landed after the launch if ready. */
static void run_case(const tcase *t, int self, int ready, int net) {
  const int64_t qn = (int64_t)t->b * t->s * t->hq * t->d,
                kn = (int64_t)t->b * t->s * t->hkv * t->d;
  const int64_t ln = (int64_t)t->b * t->hq * t->s;
  name_run(t, self, ready, net, NULL);
  uint16_t *q = host_alloc(2 * qn), *kr = host_alloc(2 * kn * t->p),
           *vr = host_alloc(2 * kn * t->p);
  for (int64_t x = 0; x < qn; ++x) q[x] = to16(rnd() * t->spread, t->f16);
  for (int64_t x = 0; x < kn * t->p; ++x) kr[x] = to16(rnd(), t->f16);
  for (int64_t x = 0; x < kn * t->p; ++x) vr[x] = to16(rnd(), t->f16);
  void *dq = upload(q, 2 * qn);
  void *dk = upload(kr + kn * self, 2 * kn),
       *dv = upload(vr + kn * self, 2 * kn);
  void *dkr = NULL, *dvr = NULL;
  uint8_t *do_ = NULL;
  float *dl = NULL;
  CUDA(cudaMalloc((void **)&do_, 2 * qn + GUARD));
  CUDA(cudaMalloc((void **)&dl, 4 * ln + GUARD));
  CUDA(cudaMemset(do_, 0xff, 2 * qn + GUARD));
  CUDA(cudaMemset(dl, 0xff, 4 * ln + GUARD));
  int *flags = NULL, *err = NULL, *derr = NULL;
  char *ws = NULL;
  net_view nv = {NULL, NULL, NULL};
  mkx_fused_sync sync;
  memset(&sync, 0, sizeof sync);
  mkx_attn_desc d;
  memset(&d, 0, sizeof d);
  d.batch = t->b;
  d.seq_q = d.seq_k = t->s;
  d.heads_q = t->hq;
  d.heads_kv = t->hkv;
  d.head_dim = t->d;
  d.q = dq;
  d.k = dk;
  d.v = dv;
  d.o = do_;
  d.lse = dl;
  d.dtype = t->f16 ? MKX_GEMM_FP16 : MKX_GEMM_BF16;
  d.causal = t->causal;
  d.scale = (float)(1.0 / sqrt((double)t->d));
  d.layout = t->layout;
  d.nchunks = t->p;
  d.self = self;
  const int run = g_runs++;
  d.tile_counter = run % 2 ? g_counter : NULL;
  /* either block size, whatever the mask; head dim 64 at 128 keys: 2
   * warpgroups or the default 3 */
  d.block_n = run % 3 == 2 || t->d > 64 ? 128 : 192;
  d.warpgroups = run % 4 < 2 ? 0 : 2;
  if (t->p > 1) {
    dkr = upload(kr, 2 * kn * t->p);
    dvr = upload(vr, 2 * kn * t->p);
    /* flags[0..7]: one per chunk; flags[8]: the value they must reach;
     * flags[9]: the value the network's words must reach */
    CUDA(cudaMalloc((void **)&flags, sizeof(int) * 10));
    int host_flags[10];
    for (int c = 0; c < 8; ++c) host_flags[c] = ready && !net ? 5 : 4;
    host_flags[8] = 5;
    host_flags[9] = 7;
    CUDA(cudaMemcpy(flags, host_flags, sizeof host_flags,
                    cudaMemcpyHostToDevice));
    CUDA(cudaMalloc((void **)&ws, 8192));
    CUDA(cudaMemset(ws, 0, 8192));
    CUDA(cudaHostAlloc((void **)&err, sizeof(int) * MKX_FUSED_ERR_WORDS,
                       cudaHostAllocMapped));
    memset(err, 0, sizeof(int) * MKX_FUSED_ERR_WORDS);
    CUDA(cudaHostGetDevicePointer((void **)&derr, err, 0));
    sync.rank = 0;
    sync.size = 1;
    sync.ws[0] = ws;
    sync.timeout_ns = 200000000ull;
    sync.err = derr;
    d.k_ring = dkr;
    d.v_ring = dvr;
    d.ready = flags;
    d.ready_target = flags + 8;
    d.sync = &sync;
    if (net) {
      net_view_make(t, kn, kr, vr, &nv, &d);
      d.net_target = flags + 9;
    }
  }
  const char *why = NULL;
  name_run(t, self, ready, net, &d);
  if (!mkx_attn_supported(&d, &why)) {
    CHECK(0, "%s: unsupported: %s", g_case, why);
    goto out;
  }
  int rc = mkx_attn_run(&d, 0);
  if (rc) {
    CHECK(0, "%s: mkx_attn_run = %d", g_case, rc);
    goto out;
  }
  if (net && ready) net_land(t, &nv);
  CUDA(cudaDeviceSynchronize());
  if (!ready) {
    CHECK(err[0] == MKX_FUSED_ERR_TIMEOUT && err[3] == MKX_FUSED_AT_KV_CHUNK &&
              err[1] != self,
          "%s: timeout reported at another chunk's keys and values: error "
          "word %d %d %d %d (code, chunk, row block, where)",
          g_case, err[0], err[1], err[2], err[3]);
    goto out;
  }
  if (err && err[0]) {
    CHECK(0, "%s: error word %d", g_case, err[0]);
    goto out;
  }
  {
    uint8_t *ho = host_alloc(2 * qn + GUARD);
    float *hl = host_alloc(4 * ln + GUARD);
    CUDA(cudaMemcpy(ho, do_, 2 * qn + GUARD, cudaMemcpyDeviceToHost));
    CUDA(cudaMemcpy(hl, dl, 4 * ln + GUARD, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int64_t x = 2 * qn; x < 2 * qn + GUARD; ++x) bad += ho[x] != 0xff;
    for (int64_t x = 4 * ln; x < 4 * ln + GUARD; ++x)
      bad += ((uint8_t *)hl)[x] != 0xff;
    if (bad) printf("# %s: %d guard bytes written\n", g_case, bad);
    const double tol_o = t->f16 ? 4e-3 : 1.6e-2;
    double worst_o = 0, worst_l = 0;
    int64_t rows = (int64_t)t->b * t->s * t->hq, checked = 0;
    double *o = host_alloc(sizeof(double) * t->d);
    for (int64_t r = 0; r < rows; ++r) {
      /* every row of small cases; else ~1500 rows at random, tile edges included */
      const int i = (int)(r / t->hq % t->s);
      if (rows > 1500 && (rnd() + 1) * rows > 3000 && i % 128 != 0 &&
          i % 128 != 127 && i != t->s - 1)
        continue;
      const int b = (int)(r / ((int64_t)t->hq * t->s)), h = (int)(r % t->hq);
      double lse;
      ref_row(t, self, q, kr, vr, b, i, h, d.scale, o, &lse);
      double omax = 0;
      for (int e = 0; e < t->d; ++e) omax = fmax(omax, fabs(o[e]));
      const uint16_t *got =
          (const uint16_t *)ho + (((int64_t)b * t->s + i) * t->hq + h) * t->d;
      for (int e = 0; e < t->d; ++e) {
        const double g = from16(got[e], t->f16);
        const double eo = fabs(g - o[e]) / (omax + 1e-30);
        if (!(eo <= tol_o)) bad++;
        if (!(eo <= worst_o)) worst_o = isnan(eo) ? INFINITY : eo;
      }
      const float gl = hl[((int64_t)b * t->hq + h) * t->s + i];
      const double el = fabs((double)gl - lse);
      if (!(el <= 2e-3 + 1e-4 * fabs(lse))) bad++;
      if (!(el <= worst_l)) worst_l = isnan(el) ? INFINITY : el;
      checked++;
    }
    CHECK(!bad,
          "%s: %d bad values in %lld rows (worst O %.3g of the row's max, "
          "LSE %.3g)",
          g_case, bad, (long long)checked, worst_o, worst_l);
    free(o);
    free(ho);
    free(hl);
  }
out:
  CUDA(cudaDeviceSynchronize());
  free(q);
  free(kr);
  free(vr);
  CUDA(cudaFree(dq));
  CUDA(cudaFree(dk));
  CUDA(cudaFree(dv));
  CUDA(cudaFree(do_));
  CUDA(cudaFree(dl));
  if (dkr) CUDA(cudaFree(dkr));
  if (dvr) CUDA(cudaFree(dvr));
  if (flags) CUDA(cudaFree(flags));
  if (ws) CUDA(cudaFree(ws));
  net_view_free(&nv);
  if (err) CUDA(cudaFreeHost(err));
}

/* Random bf16 values in [-1, 1) for n elements of device memory. */
static void *dev_random16(size_t n) {
  uint16_t *h = host_alloc(2 * n);
  for (size_t x = 0; x < n; ++x) h[x] = to16(rnd(), 0);
  void *d = upload(h, 2 * n);
  free(h);
  return d;
}

static int run_once(const void *d) { return mkx_attn_run(d, 0); }

/* Median time (ms) of `reps` runs of d after two warm-ups; 0 on failure. */
static float time_runs(const mkx_attn_desc *d, int reps) {
  const float ms = mt_gpu_median_ms(run_once, d, reps);
  if (ms < 0) {
    CHECK(0, "%s: bench run failed", g_case);
    return 0;
  }
  return ms;
}

/* Engine time of the issue table's shapes, bf16, random inputs (as
 * torch_sdpa.py's), median of 10; profile: one shape, one run after the
 * warm-ups, non-causal then causal (for ncu --launch-skip 2
 * --launch-count 4: the first and the last). */
static void bench(int profile) {
  static const int shapes[][5] = {{4, 4096, 16, 16, 128},
                                  {4, 8192, 16, 16, 128},
                                  {4, 16384, 16, 16, 128},
                                  {1, 16384, 32, 8, 128},
                                  {4, 8192, 16, 16, 64}};
  printf(
      "# engine, bf16, random inputs: batch seq heads_q/heads_kv head_dim: "
      "TFLOP/s non-causal, causal; head dim 64: each with 2 warpgroups at "
      "128 / at 192 keys per block / 3 warpgroups at 128 (the default)\n");
  for (size_t x = profile ? 1 : 0; x < (profile ? 2 : 5); ++x) {
    const int *s = shapes[x];
    const size_t qn = (size_t)s[0] * s[1] * s[2] * s[4],
                 kn = (size_t)s[0] * s[1] * s[3] * s[4];
    void *q = dev_random16(qn), *k = dev_random16(kn), *v = dev_random16(kn);
    void *o;
    float *l;
    CUDA(cudaMalloc(&o, 2 * qn));
    CUDA(cudaMalloc((void **)&l, 4 * (size_t)s[0] * s[2] * s[1]));
    double tf[6] = {0, 0, 0, 0, 0, 0};
    for (int var = 0; var < 6; ++var) {
      const int causal = var / 3, kind = var % 3;
      if (kind && (s[4] > 64 || profile)) continue;
      mkx_attn_desc d;
      attn_bench_desc(&d, s, q, k, v, o);
      d.lse = l;
      d.causal = causal;
      d.scale = (float)(1.0 / sqrt((double)s[4]));
      d.tile_counter = g_counter;
      d.block_n = kind == 1 ? 192 : 128;
      d.warpgroups = kind == 2 ? 3 : 2;
      snprintf(g_case, sizeof g_case,
               "bench %d %d %d/%d %d %s, %d keys per block, %d warpgroups",
               s[0], s[1], s[2], s[3], s[4], causal ? "causal" : "non-causal",
               d.block_n, d.warpgroups);
      const float ms = time_runs(&d, profile ? 1 : 10);
      const double flops =
          4.0 * s[0] * s[2] * (double)s[1] * s[1] * s[4] / (causal ? 2 : 1);
      if (ms > 0) tf[var] = flops / (ms * 1e-3) / 1e12;
    }
    if (s[4] > 64)
      printf("# %d %d %d/%d %d: %.0f, %.0f\n", s[0], s[1], s[2], s[3], s[4],
             tf[0], tf[3]);
    else
      printf("# %d %d %d/%d %d: %.0f / %.0f / %.0f, %.0f / %.0f / %.0f\n", s[0],
             s[1], s[2], s[3], s[4], tf[0], tf[1], tf[2], tf[3], tf[4], tf[5]);
    CUDA(cudaFree(q));
    CUDA(cudaFree(k));
    CUDA(cudaFree(v));
    CUDA(cudaFree(o));
    CUDA(cudaFree(l));
  }
}

int main(int argc, char **argv) {
  if (!mt_sm90_here()) return CHECK_SKIP;
  g_rng ^= (uint64_t)time(NULL);
  check_set_note("seed %llu", (unsigned long long)g_rng);
  check_show_passes(1);
  CUDA(cudaMalloc((void **)&g_counter, sizeof(int)));
  if (argc > 1 &&
      (!strcmp(argv[1], "--profile") || !strcmp(argv[1], "--bench-only"))) {
    bench(!strcmp(argv[1], "--profile"));
    return engine_finish();
  }
  printf("# seed %llu\n", (unsigned long long)g_rng);
  static const tcase cases[] = {
      /* b, s, hq, hkv, d, causal, f16, spread, p, layout */
      {1, 1, 1, 1, 64, 0, 0, 1, 1, 0},
      {1, 1, 1, 1, 128, 1, 0, 1, 1, 0},
      {1, 77, 4, 1, 64, 1, 0, 4, 1, 0},
      {2, 128, 8, 8, 128, 0, 0, 4, 1, 0},
      {3, 1000, 4, 4, 128, 1, 0, 4, 1, 0},
      {1, 1000, 8, 1, 64, 0, 0, 6, 1, 0},
      {1, 4096, 8, 8, 128, 1, 0, 4, 1, 0},
      {2, 300, 4, 2, 96, 1, 0, 4, 1, 0},
      {1, 200, 2, 2, 40, 0, 0, 4, 1, 0},
      {1, 129, 1, 1, 128, 1, 1, 4, 1, 0},
      {2, 513, 8, 4, 64, 0, 1, 8, 1, 0},
      {1, 4096, 4, 1, 128, 0, 1, 4, 1, 0},
      {1, 2048, 4, 4, 128, 1, 0, 12, 1, 0},
      {1, 8, 2, 2, 8, 1, 0, 4, 1, 0},
      /* a sequence in chunks: every layout, every own chunk */
      {1, 256, 4, 2, 128, 1, 0, 4, 2, 0},
      {1, 256, 4, 2, 128, 1, 0, 4, 2, 1},
      {1, 256, 4, 2, 128, 1, 0, 4, 2, 2},
      {2, 200, 2, 1, 64, 1, 0, 4, 3, 1},
      {2, 77, 2, 2, 64, 0, 1, 4, 4, 2},
      {1, 1000, 2, 2, 128, 1, 0, 4, 4, 0},
      {1, 1000, 2, 2, 128, 1, 0, 4, 4, 1},
      {1, 1001, 2, 2, 64, 1, 1, 4, 3, 2},
  };
  for (size_t x = 0; x < sizeof cases / sizeof cases[0]; ++x) {
    const tcase *t = &cases[x];
    if (t->p == 1)
      run_case(t, 0, 1, 0);
    else
      for (int self = 0; self < t->p; ++self) run_case(t, self, 1, 0);
  }
  run_case(&cases[14], 1, 0, 0);
  /* as the network lands the chunks: every layout, and one never landed */
  for (size_t x = 14; x < sizeof cases / sizeof cases[0]; ++x)
    run_case(&cases[x], (int)(x % (size_t)cases[x].p), 1, 1);
  run_case(&cases[19], 2, 0, 1);
  if (argc > 1 && !strcmp(argv[1], "--bench")) bench(0);
  return engine_finish();
}
