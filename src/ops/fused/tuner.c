#define _POSIX_C_SOURCE 200809L
/* The split of a plan's CTAs between a role and the kernels beside it,
 * run by run (fused/tuner.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "core/cuda_rc.h"
#include "core/device.h"
#include "core/error.h"
#include "core/log.h"
#include "ops/fused/tuner.h"

#if HAVE_CUDA
/* A probe must win by more than this share of the incumbent's time to
 * move the split (run-to-run noise of a fused call is about 1%), and a
 * settled split whose runs are slower by the drift share
 * MKX_TUNE_DRIFT_RUNS times in a row is searched again. */
#define TUNE_HYSTERESIS 0.015f
#define TUNE_DRIFT 0.08f

static void event_free(cudaEvent_t *e) {
  if (*e) MKX_CUDA_RELEASE(cudaEventDestroy(*e));
  *e = NULL;
}

static void events_free(mkx_tuner *t) {
  for (int i = 0; i < MKX_TUNER_RING; i++) {
    event_free(&t->t0[i]);
    event_free(&t->t1[i]);
    event_free(&t->r0[i]);
    event_free(&t->r1[i]);
  }
  event_free(&t->origin);
}

static int event_make(cudaEvent_t *e, const char *fn) {
  return mkx_cuda_rc(cudaEventCreate(e), fn, "cudaEventCreate");
}

/* The runs' events (and with trace the roles'); all or none. */
static int events_make(mkx_tuner *t, const char *fn) {
  int rc = MKX_SUCCESS;
  for (int i = 0; rc == MKX_SUCCESS && i < MKX_TUNER_RING; i++) {
    rc = event_make(&t->t0[i], fn);
    if (rc == MKX_SUCCESS) rc = event_make(&t->t1[i], fn);
    if (rc == MKX_SUCCESS && t->trace) rc = event_make(&t->r0[i], fn);
    if (rc == MKX_SUCCESS && t->trace) rc = event_make(&t->r1[i], fn);
  }
  if (rc != MKX_SUCCESS) events_free(t);
  return rc;
}

/* trace: `origin` recorded on an idle stream of its own and waited for,
 * then read against the host's real-time clock (plan time only). */
static int origin_make(mkx_tuner *t, const char *fn) {
  cudaStream_t s = NULL;
  struct timespec ts;
  MKX_TRY(event_make(&t->origin, fn));
  int rc = mkx_cuda_rc(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), fn,
                       "cudaStreamCreateWithFlags");
  if (rc == MKX_SUCCESS)
    rc = mkx_cuda_rc(cudaEventRecord(t->origin, s), fn, "cudaEventRecord");
  if (rc == MKX_SUCCESS)
    rc = mkx_cuda_rc(cudaEventSynchronize(t->origin), fn,
                     "cudaEventSynchronize");
  if (s) MKX_CUDA_RELEASE(cudaStreamDestroy(s));
  if (rc != MKX_SUCCESS) return rc;
  clock_gettime(CLOCK_REALTIME, &ts);
  t->origin_us = (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
  return MKX_SUCCESS;
}

/* Start settled on the cache's split for the key, where it has one that
 * fits the range. */
static void from_cache(mkx_tuner *t, const char *key, const char *fn) {
  const mkx_tune_entry *e = key ? mkx_tune_cache_get(t->comm, key) : NULL;
  if (key) snprintf(t->key, sizeof t->key, "%s", key);
  if (!e || e->ctas < t->s.lo || e->ctas > t->s.hi) return;
  mkx_tune_settle(&t->s, e->ctas, e->ms);
  t->ctas = e->ctas;
  mkx_log(MKX_LOG_DEBUG, "%s: %s starts at %d CTAs (tuner cache, %.3f ms)", fn,
          mkx_role_range_of(t->role)->name, e->ctas, (double)e->ms);
}

/* tune=fixed: the cache's split for the key where it has one in [lo, hi],
 * kept for every run. */
static void fixed_from_cache(mkx_tuner *t, const char *key, int lo, int hi,
                             const char *fn) {
  const mkx_tune_entry *e = key ? mkx_tune_cache_get(t->comm, key) : NULL;
  if (!e || e->ctas < lo || e->ctas > hi) return;
  t->ctas = e->ctas;
  mkx_log(MKX_LOG_DEBUG, "%s: %s takes %d CTAs (tuner cache, tune=fixed)", fn,
          mkx_role_range_of(t->role)->name, e->ctas);
}

int mkx_tuner_init(MKX_Comm c, mkx_tuner *t, mkx_role r, const char *key,
                   const char *fn) {
  const mkx_role_range *g = mkx_role_range_of(r);
  memset(t, 0, sizeof *t);
  t->comm = c;
  t->role = r;
  t->all = mkx_role_rank_ctas(c);
  t->ctas = mkx_role_ctas(c, r);
  t->trace = c->opt.trace[0] != '\0';
  const int free_split = mkx_role_pinned(c, r) <= 0 && t->all >= 2;
  const int hi = g->most < t->all - 1 ? g->most : t->all - 1;
  if (free_split && c->opt.tune == MKX_TUNE_FIXED)
    fixed_from_cache(t, key, g->lo, hi, fn);
  const int adapt = free_split && c->opt.tune == MKX_TUNE_ADAPT;
  if (!adapt && !t->trace) return MKX_SUCCESS;
  MKX_TRY(events_make(t, fn));
  if (t->trace) {
    const int rc = origin_make(t, fn);
    if (rc != MKX_SUCCESS) {
      events_free(t);
      return rc;
    }
  }
  if (!adapt) return MKX_SUCCESS;
  mkx_tune_init(&t->s, g->lo, hi, t->ctas, MKX_TUNE_OCTAVE, TUNE_HYSTERESIS,
                TUNE_DRIFT);
  t->adapt = 1;
  from_cache(t, key, fn);
  mkx_log(MKX_LOG_DEBUG, "%s: %s adapts its CTAs in [%d, %d] from %d", fn,
          g->name, g->lo, hi, t->ctas);
  return MKX_SUCCESS;
}

/* trace: run i (the run's time ms) and its role into the communicator's
 * trace, placed by `origin`. */
static void trace_run(mkx_tuner *t, int i, float ms) {
  float at = 0, a0 = 0, a1 = 0;
  if (cudaEventElapsedTime(&at, t->origin, t->t0[i]) != cudaSuccess) return;
  mkx_trace_rec r = {.track = 0, .run = t->traced++, .ctas = t->all};
  snprintf(r.what, sizeof r.what, "%s", t->what);
  r.ts_us = t->origin_us + 1e3 * at;
  r.dur_us = 1e3 * ms;
  mkx_trace_add(t->comm, &r);
  if (!t->roled[i] ||
      cudaEventElapsedTime(&a0, t->t0[i], t->r0[i]) != cudaSuccess ||
      cudaEventElapsedTime(&a1, t->t0[i], t->r1[i]) != cudaSuccess)
    return;
  r.track = 1 + (int)t->role;
  r.ctas = t->x[i];
  r.ts_us = t->origin_us + 1e3 * (at + a0);
  r.dur_us = 1e3 * (a1 - a0);
  mkx_trace_add(t->comm, &r);
}

/* The search's step on run i's time ms (the search drops a time at a
 * split it is not asking about). */
static void observe(mkx_tuner *t, int i, float ms, const char *fn) {
  if (!t->adapt) return;
  const int before = t->s.best, settled = t->s.phase;
  mkx_tune_observe_at(&t->s, t->x[i], ms);
  if (t->s.phase != settled || t->s.best != before)
    mkx_log(MKX_LOG_DEBUG, "%s: %s at %d CTAs: %.3f ms; %s %d", fn,
            mkx_role_range_of(t->role)->name, t->x[i], (double)ms,
            t->s.phase == MKX_TUNE_SETTLED ? "settled on" : "now at",
            t->s.best);
}

/* The times of the runs the GPU has passed, oldest first, into the search
 * and the trace; stops at the first still running (with trace, whose
 * role is). */
static void read_times(mkx_tuner *t, const char *fn) {
  while (t->read != t->begun) {
    const int i = (int)(t->read % MKX_TUNER_RING);
    cudaError_t q = cudaEventQuery(t->t1[i]);
    if (q == cudaSuccess && t->trace && t->roled[i])
      q = cudaEventQuery(t->r1[i]);
    if (q == cudaErrorNotReady) return;
    float ms = 0;
    if (q == cudaSuccess &&
        cudaEventElapsedTime(&ms, t->t0[i], t->t1[i]) == cudaSuccess &&
        ms > 0) {
      if (t->trace) trace_run(t, i, ms);
      observe(t, i, ms, fn);
    }
    if (q != cudaSuccess) (void)cudaGetLastError(); /* a failed run: no time */
    t->probing -= t->probed[i];
    t->read++;
  }
}

void mkx_tuner_free(mkx_tuner *t) {
  if (t->trace && t->begun != t->read) { /* the last runs, waited for */
    const int i = (int)((t->begun - 1) % MKX_TUNER_RING);
    (void)cudaEventSynchronize(t->t1[i]);
    if (t->roled[i]) (void)cudaEventSynchronize(t->r1[i]);
    (void)cudaGetLastError();
    read_times(t, "MKX_Comm_free");
  }
  if (t->adapt && t->key[0] && t->s.phase == MKX_TUNE_SETTLED &&
      t->s.best_t > 0)
    mkx_tune_cache_put(t->comm, t->key, t->s.best, t->s.best_t, t->s.runs);
  events_free(t);
  t->adapt = t->trace = 0;
}

int mkx_tuner_begin(mkx_tuner *t, cudaStream_t st, const char *fn) {
  if (!t) return MKX_SUCCESS;
  t->comm->tuner_last = t;
  t->timing = 0;
  if (!t->adapt && !t->trace) return MKX_SUCCESS;
  read_times(t, fn);
  if (mkx_stream_capturing(st)) { /* a replay's time never comes back */
    if (t->adapt) t->ctas = t->s.best;
    return MKX_SUCCESS;
  }
  const int full = t->begun - t->read >= MKX_TUNER_RING;
  if (t->adapt) {
    /* one probe in flight: the host runs ahead of the GPU, and a probe's
     * split served until its time came back would cost a run per start */
    const int x = mkx_tune_next(&t->s);
    t->ctas = x == t->s.best || t->probing || full ? t->s.best : x;
  }
  if (full) return MKX_SUCCESS; /* untimed */
  const int i = (int)(t->begun % MKX_TUNER_RING);
  MKX_TRY(mkx_cuda_rc(cudaEventRecord(t->t0[i], st), fn, "cudaEventRecord"));
  t->x[i] = t->ctas;
  t->probed[i] = t->adapt && t->ctas != t->s.best;
  t->probing += t->probed[i];
  t->roled[i] = 0;
  t->timing = 1;
  return MKX_SUCCESS;
}

int mkx_tuner_end(mkx_tuner *t, cudaStream_t st, const char *fn) {
  if (!t || !t->timing) return MKX_SUCCESS;
  const int i = (int)(t->begun % MKX_TUNER_RING);
  t->timing = 0;
  MKX_TRY(mkx_cuda_rc(cudaEventRecord(t->t1[i], st), fn, "cudaEventRecord"));
  t->begun++;
  return MKX_SUCCESS;
}

int mkx_tuner_role_begin(mkx_tuner *t, cudaStream_t side, const char *fn) {
  if (!t || !t->timing || !t->trace) return MKX_SUCCESS;
  const int i = (int)(t->begun % MKX_TUNER_RING);
  if (t->roled[i]) return MKX_SUCCESS;
  MKX_TRY(mkx_cuda_rc(cudaEventRecord(t->r0[i], side), fn, "cudaEventRecord"));
  t->roled[i] = 1;
  return MKX_SUCCESS;
}

int mkx_tuner_role_end(mkx_tuner *t, cudaStream_t side, const char *fn) {
  if (!t || !t->timing || !t->trace) return MKX_SUCCESS;
  const int i = (int)(t->begun % MKX_TUNER_RING);
  if (!t->roled[i]) return MKX_SUCCESS;
  return mkx_cuda_rc(cudaEventRecord(t->r1[i], side), fn, "cudaEventRecord");
}

/* ---- the communicator's tuners, one per role and shape ------------------ */

typedef struct tuner_node {
  char shape[MKX_TUNE_KEY_MAX + 64]; /* the cache's key (role included),
                                        then the exact sizes */
  mkx_tuner t;
  struct tuner_node *next;
} tuner_node;

static const int store_key = 0;

/* At MKX_Comm_free: the settled splits into the cache, then the cache to
 * its file. */
static void store_release(MKX_Comm c) {
  for (tuner_node *n = c->tuners; n;) {
    tuner_node *next = n->next;
    mkx_tuner_free(&n->t);
    free(n);
    n = next;
  }
  c->tuners = NULL;
  c->tuner_last = NULL;
  mkx_trace_close(c);
  mkx_tune_cache_close(c);
}

int mkx_tuner_for(MKX_Comm c, mkx_role r, const char *op, mkx_path path,
                  int64_t m, int64_t n, int64_t k, int dtype, const char *fn,
                  mkx_tuner **t) {
  char key[MKX_TUNE_KEY_MAX], shape[MKX_TUNE_KEY_MAX + 64];
  mkx_tune_key(c, op, mkx_path_name(path), (int)r, m, n, k, dtype, key);
  snprintf(shape, sizeof shape, "%s,%lldx%lldx%lld", key, (long long)m,
           (long long)n, (long long)k);
  for (tuner_node *x = c->tuners; x; x = x->next)
    if (!strcmp(x->shape, shape)) {
      *t = &x->t;
      return MKX_SUCCESS;
    }
  MKX_TRY(mkx_comm_add_hook(c, &store_key, store_release, NULL));
  tuner_node *x = calloc(1, sizeof *x);
  if (!x) return mkx_error(MKX_ERR_NOMEM, "%s: tuner", fn);
  const int rc = mkx_tuner_init(c, &x->t, r, key, fn);
  if (rc != MKX_SUCCESS) {
    free(x);
    return rc;
  }
  snprintf(x->shape, sizeof x->shape, "%s", shape);
  snprintf(x->t.what, sizeof x->t.what, "%s %s %lldx%lldx%lld", op,
           mkx_path_name(path), (long long)m, (long long)n, (long long)k);
  x->next = c->tuners;
  c->tuners = x;
  *t = &x->t;
  return MKX_SUCCESS;
}

int mkx_tuner_last(MKX_Comm c, int *ctas, int *best, int *settled) {
  const mkx_tuner *t = c->tuner_last;
  if (!t) return 0;
  *ctas = t->ctas;
  *best = t->adapt ? t->s.best : t->ctas;
  *settled = !t->adapt || t->s.phase == MKX_TUNE_SETTLED;
  return 1;
}

int mkx_tuner_leave(const mkx_tuner *t) {
  return mkx_role_rest(t->all, t->ctas);
}
#else
typedef int mkx_tuner_unused; /* ISO C: not an empty unit */
#endif
