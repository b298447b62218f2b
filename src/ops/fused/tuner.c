/* The split of a plan's CTAs between a role and the kernels beside it,
 * run by run (fused/tuner.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/cuda_rc.h"
#include "core/device.h"
#include "core/error.h"
#include "core/log.h"
#include "ops/fused/tuner.h"

#if HAVE_CUDA
/* A probe must win by more than this share of the incumbent's time to
 * move the split (run-to-run noise of a fused call is about 1%), and a
 * settled split whose runs are slower by the drift share three times in
 * a row is searched again. */
#define TUNE_HYSTERESIS 0.015f
#define TUNE_DRIFT 0.08f

static void events_free(mkx_tuner *t) {
  for (int i = 0; i < MKX_TUNER_RING; i++) {
    if (t->t0[i]) cudaEventDestroy(t->t0[i]);
    if (t->t1[i]) cudaEventDestroy(t->t1[i]);
    t->t0[i] = t->t1[i] = NULL;
  }
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
  if (mkx_role_pinned(c, r) > 0 || t->all < 2) return MKX_SUCCESS;
  const int hi = g->most < t->all - 1 ? g->most : t->all - 1;
  if (c->opt.tune == MKX_TUNE_FIXED) fixed_from_cache(t, key, g->lo, hi, fn);
  if (c->opt.tune != MKX_TUNE_ADAPT) return MKX_SUCCESS;
  const int step0 = (hi - g->lo) / 4 > 1 ? (hi - g->lo) / 4 : 1;
  mkx_tune_init(&t->s, g->lo, hi, t->ctas, step0, TUNE_HYSTERESIS, TUNE_DRIFT);
  for (int i = 0; i < MKX_TUNER_RING; i++) {
    int rc = mkx_cuda_rc(cudaEventCreate(&t->t0[i]), fn, "cudaEventCreate");
    if (rc == MKX_SUCCESS)
      rc = mkx_cuda_rc(cudaEventCreate(&t->t1[i]), fn, "cudaEventCreate");
    if (rc != MKX_SUCCESS) {
      events_free(t);
      return rc;
    }
  }
  t->adapt = 1;
  from_cache(t, key, fn);
  mkx_log(MKX_LOG_DEBUG, "%s: %s adapts its CTAs in [%d, %d] from %d", fn,
          g->name, g->lo, hi, t->ctas);
  return MKX_SUCCESS;
}

void mkx_tuner_free(mkx_tuner *t) {
  if (t->adapt && t->key[0] && t->s.phase == MKX_TUNE_SETTLED &&
      t->s.best_t > 0)
    mkx_tune_cache_put(t->comm, t->key, t->s.best, t->s.best_t, t->s.runs);
  events_free(t);
  t->adapt = 0;
}

/* The times of the runs the GPU has passed, oldest first, into the search
 * (those of the split it probes now); stops at the first still running. */
static void read_times(mkx_tuner *t, const char *fn) {
  while (t->read != t->begun) {
    const int i = (int)(t->read % MKX_TUNER_RING);
    const cudaError_t q = cudaEventQuery(t->t1[i]);
    if (q == cudaErrorNotReady) return;
    float ms = 0;
    if (q == cudaSuccess &&
        cudaEventElapsedTime(&ms, t->t0[i], t->t1[i]) == cudaSuccess &&
        ms > 0 && t->x[i] == mkx_tune_next(&t->s)) {
      const int before = t->s.best, settled = t->s.phase;
      mkx_tune_observe(&t->s, ms);
      if (t->s.phase != settled || t->s.best != before)
        mkx_log(MKX_LOG_DEBUG, "%s: %s at %d CTAs: %.3f ms; %s %d", fn,
                mkx_role_range_of(t->role)->name, t->x[i], (double)ms,
                t->s.phase == MKX_TUNE_SETTLED ? "settled on" : "now at",
                t->s.best);
    }
    if (q != cudaSuccess) (void)cudaGetLastError(); /* a failed run: no time */
    t->read++;
  }
}

int mkx_tuner_begin(mkx_tuner *t, cudaStream_t st, const char *fn) {
  if (!t) return MKX_SUCCESS;
  t->comm->tuner_last = t;
  t->timing = 0;
  if (!t->adapt) return MKX_SUCCESS;
  read_times(t, fn);
  if (mkx_stream_capturing(st)) { /* a replay's time never comes back */
    t->ctas = t->s.best;
    return MKX_SUCCESS;
  }
  t->ctas = mkx_tune_next(&t->s);
  if (t->begun - t->read >= MKX_TUNER_RING) return MKX_SUCCESS; /* untimed */
  const int i = (int)(t->begun % MKX_TUNER_RING);
  MKX_TRY(mkx_cuda_rc(cudaEventRecord(t->t0[i], st), fn, "cudaEventRecord"));
  t->x[i] = t->ctas;
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
