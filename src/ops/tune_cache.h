/*
 * The tuner cache (option tune_cache=PATH): the splits that a plan's
 * search (ops/fused/tuner.h) settled on, kept across jobs so that the next
 * job's plans of the same kind start there.  A text file:
 *
 *   mkx-tune-cache 1
 *   KEY CTAS MS RUNS
 *
 * KEY (no spaces): the GPU model and its SMs, the rank's CTAs, ranks per
 * node and nodes, the operation, path and role, the log2 buckets of the
 * shape's three sizes and the datatype (mkx_tune_key); CTAS the split, MS
 * its run time in milliseconds, RUNS the runs it was settled on.  A file
 * of another version, or not a cache at all, is ignored with a warning; so
 * is a line that does not parse, alone.  Entries of other keys (another GPU,
 * another shape) are kept when the file is written again.  Writing never
 * fails a call: the file is merged with what is there, written beside it
 * and renamed over it, under a lock; a failure is a warning.
 */
#ifndef MKX_OPS_TUNE_CACHE_H
#define MKX_OPS_TUNE_CACHE_H

#include <stdint.h>
#include "core/comm.h"

#define MKX_TUNE_KEY_MAX 192

typedef struct mkx_tune_entry {
  char key[MKX_TUNE_KEY_MAX];
  int ctas, runs;
  float ms;
} mkx_tune_entry;

typedef struct mkx_tune_table {
  mkx_tune_entry *e;
  int n, cap;
  int dirty; /* entries put since it was read */
} mkx_tune_table;

/* The key of a plan's role on c's rank: operation and path names, role
 * index, the shape's sizes and its datatype. */
void mkx_tune_key(MKX_Comm c, const char *op, const char *path, int role,
                  int64_t m, int64_t n, int64_t k, int dtype,
                  char key[MKX_TUNE_KEY_MAX]);

/* File and table (tests use them directly). */
/* Read `path` into t (entries added or replaced); 0, or -1 if the file
 * exists but is not a cache of this version (t unchanged).  Lines that do
 * not parse are skipped and counted in *bad (may be NULL).  A missing
 * file is an empty cache. */
int mkx_tune_file_read(const char *path, mkx_tune_table *t, int *bad);
/* Merge t into `path` (t's entries win) and write it; 0 or -1 (errno
 * kept), never a partly written file. */
int mkx_tune_file_write(const char *path, const mkx_tune_table *t);
const mkx_tune_entry *mkx_tune_table_get(const mkx_tune_table *t,
                                         const char *key);
/* 0, or -1 without memory (t unchanged). */
int mkx_tune_table_put(mkx_tune_table *t, const char *key, int ctas, float ms,
                       int runs);
void mkx_tune_table_free(mkx_tune_table *t);

/* The communicator's cache: read from option tune_cache's file at the
 * first lookup; _close writes it back if anything was put, and frees it
 * (when the communicator is freed, after its tuners put their splits:
 * ops/fused/tuner.c).  Without the option they do nothing. */
const mkx_tune_entry *mkx_tune_cache_get(MKX_Comm c, const char *key);
void mkx_tune_cache_put(MKX_Comm c, const char *key, int ctas, float ms,
                        int runs);
void mkx_tune_cache_close(MKX_Comm c);

#endif
