/*
 * The split of a call's CTAs between a role (ops/roles.h) and the kernels
 * beside it, for each run of a shape (a plan's, or repeated plain calls'):
 * the role's rule, a split pinned by hand, or (option tune=adapt) the
 * across-run search of kernels/common/tune_search.h on that shape's own
 * run times.
 *
 * A run's time is measured on its stream by two CUDA events, from after
 * the prologue (every node rank has arrived, so a late peer does not
 * count) to the end of the run's last kernel, and read at a later start
 * once the GPU has passed it (cudaEventQuery): no host synchronisation, so
 * a start stays as cheap as without it.  The host usually runs ahead of
 * the GPU, so the search's next probe may be asked for again before its
 * time comes back: one probe run is in flight at a time, and the runs
 * begun meanwhile take the incumbent (their times count where the search
 * asks for a reference run).  Under graph capture a start records no
 * events and takes the search's incumbent.  Ranks search on their own
 * times: the role's CTAs are a grid size of this rank's kernels, which
 * its peers never see.
 *
 * With option trace every run not under capture is timed so, and the
 * role's kernels on their side stream by two more events (mkx_tuner_role_
 * begin and _end); once the GPU has passed them, the run and the role go
 * to the communicator's trace (ops/trace_file.h), placed on the host's
 * real-time clock by an event the tuner synchronised with when it was
 * made (plan time, never a start).
 * C11; only built with CUDA.
 */
#ifndef MKX_OPS_FUSED_TUNER_H
#define MKX_OPS_FUSED_TUNER_H

#include <cuda_runtime.h>
#include "core/comm.h"
#include "ops/roles.h"
#include "ops/trace_file.h"
#include "ops/tune_cache.h"
#include "common/tune_search.h"

#define MKX_TUNER_RING 8 /* runs in flight whose times are awaited */

typedef struct mkx_tuner {
  MKX_Comm comm;
  int adapt; /* searching (tune=adapt, no pinned split) */
  int trace; /* option trace: every run and its role timed */
  mkx_role role;
  int all;  /* the rank's CTAs */
  int ctas; /* the role's CTAs in the run begun last */
  mkx_tune_state s;
  cudaEvent_t t0[MKX_TUNER_RING], t1[MKX_TUNER_RING];
  int x[MKX_TUNER_RING];      /* the split each run in flight used */
  int probed[MKX_TUNER_RING]; /* ... a probe's, not the incumbent's */
  int probing;                /* probe runs in flight (at most 1) */
  unsigned begun, read;       /* runs timed, runs whose time was read */
  int timing;                 /* the run begun last records its events */
  char key[MKX_TUNE_KEY_MAX]; /* in the tuner cache ("": none) */
  /* trace: the role's kernels in each run, and where GPU time 0 of
   * `origin` lies on the host's real-time clock */
  cudaEvent_t r0[MKX_TUNER_RING], r1[MKX_TUNER_RING], origin;
  int roled[MKX_TUNER_RING]; /* the run's role events recorded */
  double origin_us;
  int traced; /* runs traced */
  char what[MKX_TRACE_WHAT];
} mkx_tuner;

/* At plan time: the role's range and rule on c's rank; events only where
 * it adapts.  key (mkx_tune_key, or NULL): where the tuner cache holds a
 * split for it, the search starts settled there (and searches again if
 * the runs slow down); mkx_tuner_free puts a settled split back. */
int mkx_tuner_init(MKX_Comm c, mkx_tuner *t, mkx_role r, const char *key,
                   const char *fn);
void mkx_tuner_free(mkx_tuner *t);
/* The communicator's tuner of role r for one shape (operation, path,
 * sizes, datatype), made at its first use and shared by every plan and
 * plain call of that shape, so that repeated plain calls adapt as a plan
 * does; freed with the communicator, when its settled split goes to the
 * tuner cache (keyed by the shape's powers of two, mkx_tune_key). */
int mkx_tuner_for(MKX_Comm c, mkx_role r, const char *op, mkx_path path,
                  int64_t m, int64_t n, int64_t k, int dtype, const char *fn,
                  mkx_tuner **t);
/* Start of a run (after the prologue on st): read the times of the runs
 * the GPU has passed into the search, choose this run's CTAs (t->ctas),
 * and time it from here. */
int mkx_tuner_begin(mkx_tuner *t, cudaStream_t st, const char *fn);
/* (mkx_tuner_begin and _end take a NULL tuner: nothing to do.) */
/* End of the run on st. */
int mkx_tuner_end(mkx_tuner *t, cudaStream_t st, const char *fn);
/* Around the role's kernels of the run on their stream `side` (a role of
 * several kernels: around each; the first begin and the last end count);
 * without option trace they do nothing. */
int mkx_tuner_role_begin(mkx_tuner *t, cudaStream_t side, const char *fn);
int mkx_tuner_role_end(mkx_tuner *t, cudaStream_t side, const char *fn);
/* The CTAs the kernels beside the role may take in this run: the rank's
 * less the role's, at least 1 (mkx_role_leave says why). */
int mkx_tuner_leave(const mkx_tuner *t);
/* The tuner of c whose run began last (for benchmarks): the CTAs of that
 * run, the search's incumbent (the rule's or pinned count where it does
 * not adapt) and whether it has settled (1 where it does not adapt);
 * returns 0, setting nothing, where no run of c has had a role. */
int mkx_tuner_last(MKX_Comm c, int *ctas, int *best, int *settled);

#endif
