/*
 * The search of an adaptive split: one definition for the host (plans,
 * the tuner cache, its unit test) and for a controller in stream order
 * (device code).  C11 and CUDA; no allocation, no library call.
 *
 * A fused path splits its CTAs between two roles; x, the CTAs of one of
 * them, lies in [lo, hi].  The time of each run at the x it used comes
 * back (mkx_tune_observe_at) and gives the x of the next run
 * (mkx_tune_next).
 *
 * Steps are factors, not CTAs: a role's time varies smoothly in log(x),
 * and a step of a few CTAs means much at 2 and nothing at 30.  The search
 * climbs from an incumbent, `best`, in steps of 2^(step/8): it probes
 * best times or over the factor (at least one CTA away), and a probe
 * replaces the incumbent only when two runs in a row at it are each
 * faster by more than the hysteresis (a fraction of the incumbent's
 * time), so that one lucky run cannot move the split; after a move it
 * goes on in the same direction;
 * when both neighbours at this step were no better, the step halves, and
 * below MKX_TUNE_FINE the search settles on best.  From the rule's split,
 * where it is best: two warm runs, a reference, two probes at each of the
 * factors 2, 2^(1/2), 2^(1/4) and 2^(1/8), a reference after the first
 * four: 13 runs; each move two more.  A probe that would repeat a
 * neighbour already found no better (small x, where factors round to the
 * same CTAs) is skipped.
 *
 * The incumbent's time is the fastest of its reference runs: one before
 * the first probe and one after every MKX_TUNE_REF_AGE probes that did
 * not move it (a probe compared with one unlucky reference run would win
 * on noise).  The first MKX_TUNE_WARM times are not used: a plan's
 * first runs are slower whatever the split (first use of its areas).
 *
 * Settled, it follows the incumbent's time (a moving average);
 * MKX_TUNE_DRIFT_RUNS runs in a row slower than that by the drift fraction
 * mean the work changed, and the search starts again from best with a
 * factor of 2.  The state is plain data of fixed size, for device memory
 * and the tuner cache alike; every x it returns lies in [lo, hi].
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
enum {
  MKX_TUNE_DRIFT_RUNS = 6,
  MKX_TUNE_WARM = 2,   /* first times not used */
  MKX_TUNE_OCTAVE = 8, /* step units per factor of 2 */
  MKX_TUNE_FINE = 1,   /* the smallest step: a factor 2^(1/8) */
  MKX_TUNE_REF_AGE = 4 /* probes compared with one reference run */
};

typedef struct mkx_tune_state {
  int32_t lo, hi;       /* the range of x */
  int32_t best;         /* the incumbent */
  int32_t probe;        /* the x probed next (== best: none) */
  int32_t step;         /* > 0 while searching: the factor 2^(step/8) */
  int32_t dir;          /* +1 or -1: the side probed next */
  int32_t phase;        /* MKX_TUNE_SEARCH or MKX_TUNE_SETTLED */
  int32_t tried;        /* at this step, no better: bit 0 above best, bit 1 below */
  int32_t ref;          /* searching: the next run measures the incumbent */
  int32_t age;          /* probes compared with the incumbent's time so far */
  int32_t no_up, no_dn; /* the incumbent's neighbours found no better (-1: none) */
  int32_t slow;         /* settled: slow runs in a row */
  int32_t runs;         /* times observed */
  float best_t;         /* the incumbent's time (0: none yet) */
  float won;            /* the probe's first time, faster: a second one decides */
  float hyst;           /* a probe must be faster by this fraction */
  float drift;          /* settled: slower by this fraction is a slow run */
} mkx_tune_state;

MKX_TUNE_HD int32_t mkx_tune_clamp(const mkx_tune_state *s, int32_t x) {
  return x < s->lo ? s->lo : x > s->hi ? s->hi : x;
}

/* best times (dir > 0) or over 2^(step/8), at least one CTA away from it,
 * in the range.  Integers only: 2^(k/8) in 1/1024ths. */
MKX_TUNE_HD int32_t mkx_tune_step_x(const mkx_tune_state *s, int32_t dir) {
  const int32_t f[MKX_TUNE_OCTAVE + 1] = {1024, 1117, 1218, 1328, 1448, 1579, 1722, 1878, 2048};
  int32_t st = s->step, num = 1;
  for (; st > MKX_TUNE_OCTAVE; st -= MKX_TUNE_OCTAVE) num *= 2;
  const int64_t b = s->best, g = (int64_t)f[st] * num;
  int64_t x = dir > 0 ? (b * g + 512) / 1024 : (b * 1024 + g / 2) / g;
  if (dir > 0 && x <= b) x = b + 1;
  if (dir < 0 && x >= b) x = b - 1;
  return mkx_tune_clamp(s, (int32_t)(x > s->hi ? s->hi : x));
}

/* Search from `start` (clamped), first steps 2^(step0/8) (MKX_TUNE_OCTAVE:
 * a factor of 2). */
MKX_TUNE_HD void mkx_tune_init(mkx_tune_state *s, int32_t lo, int32_t hi, int32_t start, int32_t step0, float hyst,
                               float drift) {
  s->lo = lo;
  s->hi = hi < lo ? lo : hi;
  s->best = s->probe = mkx_tune_clamp(s, start);
  s->step = step0 > MKX_TUNE_FINE ? step0 : MKX_TUNE_FINE;
  s->dir = 1;
  s->phase = MKX_TUNE_SEARCH;
  s->tried = s->slow = s->runs = s->age = 0;
  s->no_up = s->no_dn = -1;
  s->ref = 1;
  s->best_t = s->won = 0;
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
  s->tried = s->slow = s->ref = s->age = 0;
  s->no_up = s->no_dn = -1;
  s->won = 0;
}

/* The x of the next run: the incumbent for a reference run, else the
 * probe. */
MKX_TUNE_HD int32_t mkx_tune_next(const mkx_tune_state *s) { return s->ref ? s->best : s->probe; }

/* The next probe around best, or settle: each pass marks a side or halves
 * the step, so it ends.  An incumbent's time compared with
 * MKX_TUNE_REF_AGE probes is measured again first. */
MKX_TUNE_HD void mkx_tune_propose(mkx_tune_state *s) {
  for (;;) {
    if (s->tried == 3) {
      s->step /= 2;
      s->tried = 0;
      if (s->step < MKX_TUNE_FINE) {
        mkx_tune_settle(s, s->best, s->best_t);
        return;
      }
    }
    const int32_t bit = s->dir > 0 ? 1 : 2;
    const int32_t x = mkx_tune_step_x(s, s->dir);
    if ((s->tried & bit) || x == s->best || x == (s->dir > 0 ? s->no_up : s->no_dn)) {
      s->tried |= bit;
      s->dir = -s->dir;
      continue;
    }
    s->probe = x;
    s->ref = s->age >= MKX_TUNE_REF_AGE;
    return;
  }
}

/* Settled: a run at best took t. */
MKX_TUNE_HD void mkx_tune_follow(mkx_tune_state *s, float t) {
  if (s->best_t > 0 && t > s->best_t * (1 + s->drift)) {
    if (++s->slow >= MKX_TUNE_DRIFT_RUNS) { /* the work changed */
      s->phase = MKX_TUNE_SEARCH;
      s->step = MKX_TUNE_OCTAVE;
      s->tried = s->slow = s->ref = s->age = 0;
      s->no_up = s->no_dn = -1;
      s->best_t = t;
      mkx_tune_propose(s);
    }
    return;
  }
  s->slow = 0;
  s->best_t = s->best_t > 0 ? 0.75f * s->best_t + 0.25f * t : t;
}

/* A run at x took t (any unit, > 0); times at an x the search is not
 * asking about are dropped. */
MKX_TUNE_HD void mkx_tune_observe_at(mkx_tune_state *s, int32_t x, float t) {
  if (++s->runs <= MKX_TUNE_WARM) return;
  if (s->phase == MKX_TUNE_SETTLED) {
    if (x == s->best) mkx_tune_follow(s, t);
    return;
  }
  if (s->ref) { /* the incumbent's reference */
    if (x != s->best) return;
    if (s->best_t <= 0 || t < s->best_t) s->best_t = t;
    s->ref = s->age = 0;
    mkx_tune_propose(s);
    return;
  }
  if (x != s->probe) return;
  const int faster = t < s->best_t * (1 - s->hyst);
  if (faster && s->won <= 0) { /* once may be noise: again */
    s->won = t;
    return;
  }
  if (faster) {
    s->best = s->probe; /* a move: on in the same direction */
    s->best_t = 0.5f * (s->won + t);
    s->won = 0;
    s->tried = s->age = 0;
    s->no_up = s->no_dn = -1;
  } else {
    s->won = 0;
    s->age++;
    if (s->dir > 0)
      s->no_up = s->probe;
    else
      s->no_dn = s->probe;
    s->tried |= s->dir > 0 ? 1 : 2;
    s->dir = -s->dir;
  }
  mkx_tune_propose(s);
}

/* The run at mkx_tune_next(s) took t. */
MKX_TUNE_HD void mkx_tune_observe(mkx_tune_state *s, float t) { mkx_tune_observe_at(s, mkx_tune_next(s), t); }

#endif
