/*
 * The search of an adaptive split: one definition for the host (plans,
 * the tuner cache, its unit test) and for a controller in stream order
 * (device code).  C11 and CUDA; no allocation, no library call.
 *
 * A fused path splits its CTAs between two roles; x, the CTAs of one of
 * them, lies in [lo, hi].  The time of each run at the x it used comes
 * back (mkx_tune_observe) and gives the x of the next run (mkx_tune_next).
 *
 * The search climbs from an incumbent, `best`, in halving steps: it probes
 * best + dir * step, and a probe replaces the incumbent only when it is
 * faster by more than the hysteresis (a fraction of the incumbent's time),
 * so that noise below it cannot move the split; after a move it goes on in
 * the same direction; when both neighbours at this step were no better,
 * the step halves, and below a 64th of the range (at least 1) the search
 * settles on best.  The incumbent's time is its fastest run while
 * searching, so every accepted move lowers it by the hysteresis at least:
 * the search ends.  Settled, it
 * follows the incumbent's time (a moving average); `DRIFT_RUNS` runs in a
 * row slower than that by the drift fraction mean the work changed, and
 * the search starts again from best with a quarter of the range.
 *
 * On a time with one minimum it settles after about 2 * log2(step0 /
 * that smallest step) runs plus one per move (tests/unit/test_tune_search
 * measures it), and every x it returns lies in [lo, hi].  The state is
 * plain data of fixed size, for device memory and the tuner cache alike.
 */
#ifndef MKX_TUNE_SEARCH_H
#define MKX_TUNE_SEARCH_H

#include <stdint.h>

#ifdef __CUDACC__
#define MKX_TUNE_HD __host__ __device__ __forceinline__
#else
#define MKX_TUNE_HD static inline
#endif

enum { MKX_TUNE_SEARCH = 0, MKX_TUNE_SETTLED = 1 };
enum { MKX_TUNE_DRIFT_RUNS = 6 };

typedef struct mkx_tune_state {
  int32_t lo, hi; /* the range of x */
  int32_t best;   /* the incumbent */
  int32_t probe;  /* the x of the next run */
  int32_t step;   /* > 0 while searching */
  int32_t dir;    /* +1 or -1: the side probed next */
  int32_t phase;  /* MKX_TUNE_SEARCH or MKX_TUNE_SETTLED */
  int32_t tried;  /* at this step, no better: bit 0 above best, bit 1 below */
  int32_t slow;   /* settled: slow runs in a row */
  int32_t runs;   /* times observed */
  float best_t;   /* the incumbent's time (0: none yet) */
  float hyst;     /* a probe must be faster by this fraction */
  float drift;    /* settled: slower by this fraction is a slow run */
} mkx_tune_state;

MKX_TUNE_HD int32_t mkx_tune_clamp(const mkx_tune_state *s, int32_t x) {
  return x < s->lo ? s->lo : x > s->hi ? s->hi : x;
}

/* Search from `start` (clamped) in steps of step0 (at least 1). */
MKX_TUNE_HD void mkx_tune_init(mkx_tune_state *s, int32_t lo, int32_t hi, int32_t start, int32_t step0, float hyst,
                               float drift) {
  s->lo = lo;
  s->hi = hi < lo ? lo : hi;
  s->best = s->probe = mkx_tune_clamp(s, start);
  s->step = step0 > 0 ? step0 : 1;
  s->dir = 1;
  s->phase = MKX_TUNE_SEARCH;
  s->tried = s->slow = s->runs = 0;
  s->best_t = 0;
  s->hyst = hyst;
  s->drift = drift;
}

/* Settled on x from the start (a split pinned by hand, or a cached one
 * that is followed for drift only). */
MKX_TUNE_HD void mkx_tune_settle(mkx_tune_state *s, int32_t x, float t) {
  s->best = s->probe = mkx_tune_clamp(s, x);
  s->best_t = t;
  s->phase = MKX_TUNE_SETTLED;
  s->step = 0;
  s->tried = s->slow = 0;
}

MKX_TUNE_HD int32_t mkx_tune_next(const mkx_tune_state *s) { return s->probe; }

/* The next probe around best, or settle: each pass marks a side or halves
 * the step, so it ends. */
MKX_TUNE_HD void mkx_tune_propose(mkx_tune_state *s) {
  const int32_t fine = (s->hi - s->lo) / 64 > 1 ? (s->hi - s->lo) / 64 : 1;
  for (;;) {
    if (s->tried == 3) {
      s->step /= 2;
      s->tried = 0;
      if (s->step < fine) {
        mkx_tune_settle(s, s->best, s->best_t);
        return;
      }
    }
    const int32_t bit = s->dir > 0 ? 1 : 2;
    const int32_t x = mkx_tune_clamp(s, s->best + s->dir * s->step);
    if ((s->tried & bit) || x == s->best) {
      s->tried |= bit;
      s->dir = -s->dir;
      continue;
    }
    s->probe = x;
    return;
  }
}

/* The run at mkx_tune_next(s) took t (any unit, > 0). */
MKX_TUNE_HD void mkx_tune_observe(mkx_tune_state *s, float t) {
  s->runs++;
  if (s->phase == MKX_TUNE_SETTLED) {
    if (s->best_t > 0 && t > s->best_t * (1 + s->drift)) {
      if (++s->slow >= MKX_TUNE_DRIFT_RUNS) { /* the work changed */
        const int32_t quarter = (s->hi - s->lo) / 4;
        s->phase = MKX_TUNE_SEARCH;
        s->step = quarter > 0 ? quarter : 1;
        s->tried = s->slow = 0;
        s->best_t = t;
        mkx_tune_propose(s);
      }
      return;
    }
    s->slow = 0;
    s->best_t = s->best_t > 0 ? 0.75f * s->best_t + 0.25f * t : t;
    return;
  }
  if (s->probe == s->best) { /* the incumbent itself */
    if (s->best_t <= 0 || t < s->best_t) s->best_t = t;
  } else if (t < s->best_t * (1 - s->hyst)) {
    s->best = s->probe; /* a move: on in the same direction */
    s->best_t = t;
    s->tried = 0;
  } else {
    s->tried |= s->dir > 0 ? 1 : 2;
    s->dir = -s->dir;
  }
  mkx_tune_propose(s);
}

#endif
