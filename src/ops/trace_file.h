/*
 * The role timeline of option trace=PATH: each rank keeps a record of
 * every timed run of a shape that has roles (ops/fused/tuner.h: the run,
 * then each role's kernels beside it), and at MKX_Comm_free rank 0
 * gathers them and writes PATH as a Chrome trace: a JSON object whose
 * "traceEvents" are complete events ("ph": "X", microseconds from the
 * earliest record), one process per rank and one thread per track (the
 * run, then each role), with the run's index and the role's CTAs as
 * arguments.  Perfetto (ui.perfetto.dev) and chrome://tracing show it.
 *
 * Times are each rank's CUDA event times placed on its host's real-time
 * clock once, when the shape's tuner was made: ranks on one host share
 * that clock; across hosts their offset is the hosts' clock offset.  A
 * run's place is an event time since then (a float of milliseconds: a
 * microsecond, plus about 0.2 ms an hour after the plan was made); the
 * role's place and length within its run are times since the run began.
 * A rank keeps at most MKX_TRACE_MAX records (later ones are counted and
 * said in a warning); writing never fails a call: a failure is a warning.
 * C11, no CUDA.
 */
#ifndef MKX_OPS_TRACE_FILE_H
#define MKX_OPS_TRACE_FILE_H

#include <stdint.h>
#include <stdio.h>
#include "core/comm.h"

#define MKX_TRACE_WHAT 96
#define MKX_TRACE_MAX 16384
#define MKX_TRACE_TRACKS 3 /* the run, then one per role (ops/roles.h) */

typedef struct mkx_trace_rec {
  int32_t rank;
  int32_t track; /* 0: the run; 1 + r: role r */
  int32_t run;   /* the run's index among its shape's timed runs */
  int32_t ctas;  /* the role's CTAs in that run (the run: the rank's) */
  double ts_us, dur_us;
  char what[MKX_TRACE_WHAT]; /* operation, path and shape */
} mkx_trace_rec;

/* The communicator's records (with option trace set), appended. */
void mkx_trace_add(MKX_Comm c, const mkx_trace_rec *r);
/* Collective, at MKX_Comm_free (ops/fused/tuner.c's hook, after the
 * tuners' last records): rank 0 gathers every rank's records (bounded by
 * option timeout_ms) and writes the file; frees the records.  On a
 * communicator a timeout left unusable nothing is gathered (a warning). */
void mkx_trace_close(MKX_Comm c);

/* n records as a Chrome trace into f, track k named names[k]; 0, or -1
 * on a write error (tests use it directly). */
int mkx_trace_json(FILE *f, const mkx_trace_rec *r, int n,
                   const char *const names[MKX_TRACE_TRACKS]);

#endif
