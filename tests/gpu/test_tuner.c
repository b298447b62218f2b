/* The run-by-run split of a plan's role (src/ops/fused/tuner.c) timed by
 * the GPU, one rank (skips without a GPU).  A run is one kernel that spins
 * for a modelled time of the CTAs the tuner gave it, slower by SLOPE per
 * CTA away from an optimum OPT of the role's range:
 *   - option tune=adapt: every run's CTAs lie in the role's range, and
 *     with the stream synchronised after each run (the time of a run is
 *     read at the next start) the search settles within SETTLE_RUNS runs
 *     on the optimum or a neighbour, and stays there;
 *   - runs enqueued ahead of the GPU (no synchronisation) keep to the
 *     range, at most MKX_TUNER_RING of them wait for their times, and
 *     at most one of those is a probe;
 *   - a start under graph capture takes the incumbent and records no
 *     event (the capture stays valid and replays);
 *   - tune=off, and tune=adapt with the count pinned (net_fwd_ctas): no
 *     search, the role's share or the pinned count in every run;
 *   - tune=fixed: the tuner cache's split for the key in every run, the
 *     share for a key the cache lacks, and the file left as it was;
 *   - option trace: each run and its role's kernel on a side stream
 *     become two complete events of the file, the role's inside the
 *     run's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cuda_runtime.h>
#include "core/comm.h"
#include "ops/fused/tuner.h"
#include "mkx.h"
#include "sm_hold_kernels.h"
#include "../common/check.h"
#include "../common/cuda_check.h"

#define CUDA(call) MT_CUDA_AT(0, call)
#define MKX(call) MT_MKX_AT(0, call)

#define BASE_NS 200000ull /* the run at the optimum: 0.2 ms */
#define SLOPE 0.03        /* slower by this share per CTA off the optimum */
#define SETTLE_RUNS 40

static int opt_of(const mkx_tuner *t) {
  return t->s.lo + (t->s.hi - t->s.lo) * 2 / 3;
}

static uint64_t run_ns(const mkx_tuner *t, int x) {
  const int d = x > opt_of(t) ? x - opt_of(t) : opt_of(t) - x;
  return (uint64_t)((double)BASE_NS * (1 + SLOPE * d));
}

static MKX_Comm comm_cached(const char *tune, const char *pin,
                            const char *cache) {
  MPI_Info info;
  MKX_Comm c = NULL;
  MPI_Info_create(&info);
  MPI_Info_set(info, "mkx_tune", tune);
  if (pin) MPI_Info_set(info, "mkx_net_fwd_ctas", pin);
  if (cache) MPI_Info_set(info, "mkx_tune_cache", cache);
  MKX(MKX_Comm_create(MPI_COMM_WORLD, info, &c));
  MPI_Info_free(&info);
  return c;
}

static MKX_Comm comm_with(const char *tune, const char *pin) {
  return comm_cached(tune, pin, NULL);
}

/* One run on st at the tuner's split; 1 if its CTAs lay in the range. */
static int one_run(mkx_tuner *t, cudaStream_t st) {
  MKX(mkx_tuner_begin(t, st, "test_tuner"));
  const int x = t->ctas;
  CUDA((cudaError_t)sm_spin_launch(run_ns(t, x), st));
  MKX(mkx_tuner_end(t, st, "test_tuner"));
  return x >= t->s.lo && x <= t->s.hi;
}

static void settles(MKX_Comm c, cudaStream_t st) {
  mkx_tuner t;
  MKX(mkx_tuner_init(c, &t, MKX_ROLE_NET_FWD, NULL, "test_tuner"));
  if (!CHECK(t.adapt, "tune=adapt: the tuner searches (range [%d, %d])", t.s.lo,
             t.s.hi))
    return;
  int in_range = 1, settled_at = 0;
  for (int r = 1; r <= SETTLE_RUNS + 10; r++) {
    in_range &= one_run(&t, st);
    CUDA(cudaStreamSynchronize(st));
    if (!settled_at && t.s.phase == MKX_TUNE_SETTLED) settled_at = r;
  }
  MKX(mkx_tuner_begin(&t, st, "test_tuner")); /* reads the last run */
  CHECK(in_range, "every run's CTAs in [%d, %d]", t.s.lo, t.s.hi);
  CHECK(settled_at > 0 && settled_at <= SETTLE_RUNS,
        "settled after %d runs (at most %d), from the share, on %d", settled_at,
        SETTLE_RUNS, t.s.best);
  const int d = t.s.best - opt_of(&t);
  CHECK(d >= -1 && d <= 1 && t.s.phase == MKX_TUNE_SETTLED,
        "on the optimum %d or a neighbour (%d), and still settled", opt_of(&t),
        t.s.best);
  MKX(mkx_tuner_end(&t, st, "test_tuner"));
  mkx_tuner_free(&t);
}

static void ahead(MKX_Comm c, cudaStream_t st) {
  mkx_tuner t;
  MKX(mkx_tuner_init(c, &t, MKX_ROLE_NET_FWD, NULL, "test_tuner"));
  int in_range = 1, most = 0, probes = 0;
  for (int r = 0; r < 3 * MKX_TUNER_RING; r++) {
    in_range &= one_run(&t, st);
    if ((int)(t.begun - t.read) > most) most = (int)(t.begun - t.read);
    if (t.probing > probes) probes = t.probing;
  }
  CUDA(cudaStreamSynchronize(st));
  CHECK(in_range && most <= MKX_TUNER_RING,
        "runs ahead of the GPU: CTAs in range, at most %d awaited (%d)",
        MKX_TUNER_RING, most);
  CHECK(probes <= 1, "runs ahead of the GPU: one probe in flight (%d)", probes);
  mkx_tuner_free(&t);
}

static void captured(MKX_Comm c, cudaStream_t st) {
  mkx_tuner t;
  cudaGraph_t g = NULL;
  cudaGraphExec_t ge = NULL;
  MKX(mkx_tuner_init(c, &t, MKX_ROLE_NET_FWD, NULL, "test_tuner"));
  const unsigned before = t.begun;
  CUDA(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
  const int ok = one_run(&t, st);
  CUDA(cudaStreamEndCapture(st, &g));
  CHECK(ok && t.ctas == t.s.best && t.begun == before,
        "under capture: the incumbent (%d), no event recorded", t.ctas);
  CUDA(cudaGraphInstantiate(&ge, g, 0));
  for (int i = 0; i < 3; i++) CUDA(cudaGraphLaunch(ge, st));
  CUDA(cudaStreamSynchronize(st));
  CUDA(cudaGraphExecDestroy(ge));
  CUDA(cudaGraphDestroy(g));
  mkx_tuner_free(&t);
}

/* Two-number field `key` of the n-th event named `what` in s; -1: none. */
static double field(const char *s, int nth, const char *key) {
  const char *p = s;
  for (int i = 0; p && i <= nth; i++)
    if ((p = strstr(p, "\"ph\": \"X\"")) && i < nth) p++;
  if (!p || !(p = strstr(p, key))) return -1;
  return atof(p + strlen(key));
}

static void traced(const char *path) {
  MPI_Info info;
  MKX_Comm c = NULL;
  MPI_Info_create(&info);
  MPI_Info_set(info, "mkx_trace", path);
  MKX(MKX_Comm_create(MPI_COMM_WORLD, info, &c));
  MPI_Info_free(&info);
  cudaStream_t st, side;
  cudaEvent_t fork, join;
  CUDA(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  CUDA(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  CUDA(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  CUDA(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  mkx_tuner t;
  MKX(mkx_tuner_init(c, &t, MKX_ROLE_NET_FWD, NULL, "test_tuner"));
  snprintf(t.what, sizeof t.what, "test_tuner");
  for (int r = 0; r < 5; r++) { /* run: 50 us, its role 200 us beside */
    MKX(mkx_tuner_begin(&t, st, "test_tuner"));
    CUDA((cudaError_t)sm_spin_launch(50000, st));
    CUDA(cudaEventRecord(fork, st));
    CUDA(cudaStreamWaitEvent(side, fork, 0));
    MKX(mkx_tuner_role_begin(&t, side, "test_tuner"));
    CUDA((cudaError_t)sm_spin_launch(200000, side));
    MKX(mkx_tuner_role_end(&t, side, "test_tuner"));
    CUDA(cudaEventRecord(join, side));
    CUDA(cudaStreamWaitEvent(st, join, 0));
    MKX(mkx_tuner_end(&t, st, "test_tuner"));
  }
  mkx_tuner_free(&t); /* waits for the last runs */
  mkx_trace_close(c); /* (mkx_tuner_for's hook does it for plans) */
  MKX(MKX_Comm_free(&c));
  FILE *f = fopen(path, "r");
  static char s[1 << 16];
  const size_t n = f ? fread(s, 1, sizeof s - 1, f) : 0;
  if (f) fclose(f);
  s[n] = '\0';
  int runs = 0, roles = 0, inside = 1;
  for (int i = 0; i < 10; i++) {
    const double tid = field(s, i, "\"tid\": ");
    runs += tid == 0, roles += tid == 1;
  }
  for (int i = 0; i + 1 < 10; i += 2) { /* a run, then its role */
    const double ts = field(s, i, "\"ts\": "), dur = field(s, i, "\"dur\": ");
    const double rts = field(s, i + 1, "\"ts\": "),
                 rdur = field(s, i + 1, "\"dur\": ");
    inside &= rdur >= 150 && rts >= ts && rts + rdur <= ts + dur + 1;
  }
  CHECK(runs == 5 && roles == 5 && inside,
        "trace: 5 runs and 5 roles (%d, %d), each role inside its run, at "
        "least 150 us",
        runs, roles);
  remove(path);
  CUDA(cudaEventDestroy(fork));
  CUDA(cudaEventDestroy(join));
  CUDA(cudaStreamDestroy(st));
  CUDA(cudaStreamDestroy(side));
}

static void fixed(const char *tune, const char *pin, const char *cache,
                  const char *key, int want) {
  MKX_Comm c = comm_cached(tune, pin, cache);
  cudaStream_t st;
  CUDA(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  mkx_tuner t;
  MKX(mkx_tuner_init(c, &t, MKX_ROLE_NET_FWD, key, "test_tuner"));
  int same = !t.adapt;
  for (int r = 0; r < 8; r++) {
    MKX(mkx_tuner_begin(&t, st, "test_tuner"));
    same &= t.ctas == (want ? want : mkx_role_ctas(c, MKX_ROLE_NET_FWD));
    MKX(mkx_tuner_end(&t, st, "test_tuner"));
  }
  CHECK(same, "tune=%s%s%s%s%s: no search, %d CTAs in every run", tune,
        pin ? ", net_fwd_ctas=" : "", pin ? pin : "", key ? ", key " : "",
        key ? key : "", t.ctas);
  mkx_tuner_free(&t);
  mkx_tune_cache_close(c); /* (mkx_tuner_for's hook does it for plans) */
  CUDA(cudaStreamDestroy(st));
  MKX(MKX_Comm_free(&c));
}

/* tune=fixed over a cache that holds 3 CTAs for key "test-fixed": those
 * for that key, the share for another, and the file as it was. */
static void fixed_cached(void) {
  char path[] = "/tmp/mkx-test-tuner-XXXXXX";
  const int fd = mkstemp(path);
  if (!CHECK(fd >= 0, "a temporary tuner cache")) return;
  close(fd);
  mkx_tune_table w = {0}, r = {0};
  const int put = mkx_tune_table_put(&w, "test-fixed", 3, 0.5f, 12) == 0 &&
                  mkx_tune_file_write(path, &w) == 0;
  if (CHECK(put, "the tuner cache %s written", path)) {
    fixed("fixed", NULL, path, "test-fixed", 3);
    fixed("fixed", NULL, path, "test-absent", 0);
    const mkx_tune_entry *e = mkx_tune_file_read(path, &r, NULL) == 0
                                  ? mkx_tune_table_get(&r, "test-fixed")
                                  : NULL;
    CHECK(r.n == 1 && e && e->ctas == 3 && e->runs == 12,
          "tune=fixed left the cache as it was (%d entries)", r.n);
  }
  mkx_tune_table_free(&w);
  mkx_tune_table_free(&r);
  unlink(path);
}

int main(int argc, char **argv) {
  int ndev = 0;
  MPI_Init(&argc, &argv);
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    MPI_Finalize();
    return CHECK_SKIP;
  }
  check_set_rank(0, 1);
  check_show_passes(1);
  MKX_Comm c = comm_with("adapt", NULL);
  cudaStream_t st;
  CUDA(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  CUDA((cudaError_t)sm_spin_launch(1000, st)); /* loaded before any timing */
  CUDA(cudaStreamSynchronize(st));
  settles(c, st);
  ahead(c, st);
  captured(c, st);
  CUDA(cudaStreamDestroy(st));
  MKX(MKX_Comm_free(&c));
  fixed("off", NULL, NULL, NULL, 0);
  fixed("adapt", "5", NULL, NULL, 5);
  fixed_cached();
  char trace[64];
  snprintf(trace, sizeof trace, "/tmp/mkx-test-tuner-%ld.json", (long)getpid());
  traced(trace);
  const int failed = check_done("test_tuner");
  MPI_Finalize();
  return failed;
}
