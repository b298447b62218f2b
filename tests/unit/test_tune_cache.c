/* The tuner cache's file (src/ops/tune_cache.c), in a directory of its
 * own: entries written and read back; merged with what another writer
 * left (its keys kept, ours winning); lines that do not parse skipped and
 * counted, the rest kept; a file of another version or not a cache at
 * all refused whole (the table unchanged), then replaced when written; a
 * missing file an empty cache; a directory that cannot be written fails
 * the write with nothing left behind; keys with a space refused. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "ops/tune_cache.h"
#include "../common/check.h"

static char dir[256], path[512];

static void write_text(const char *text) {
  FILE *f = fopen(path, "w");
  if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
    perror(path);
    exit(1);
  }
}

static int has(const mkx_tune_table *t, const char *key, int ctas, float ms,
               int runs) {
  const mkx_tune_entry *e = mkx_tune_table_get(t, key);
  return e && e->ctas == ctas && e->ms > 0.999f * ms && e->ms < 1.001f * ms &&
         e->runs == runs;
}

static void round_trip(void) {
  mkx_tune_table t = {0}, u = {0};
  int bad = -1;
  CHECK(mkx_tune_file_read(path, &t, &bad) == 0 && t.n == 0 && bad == 0,
        "a missing file: an empty cache");
  CHECK(mkx_tune_table_put(&t, "H100,132sm,a", 8, 1.25f, 12) == 0 &&
            mkx_tune_table_put(&t, "H100,132sm,b", 3, 0.5f, 7) == 0 &&
            mkx_tune_table_put(&t, "H100,132sm,a", 9, 1.125f, 20) == 0 &&
            t.n == 2,
        "put twice: one entry per key, the last put wins");
  CHECK(mkx_tune_table_put(&t, "a key", 1, 1, 1) != 0 && t.n == 2,
        "a key with a space is refused");
  CHECK(mkx_tune_file_write(path, &t) == 0, "written");
  CHECK(mkx_tune_file_read(path, &u, &bad) == 0 && u.n == 2 && bad == 0 &&
            has(&u, "H100,132sm,a", 9, 1.125f, 20) &&
            has(&u, "H100,132sm,b", 3, 0.5f, 7),
        "read back: both entries");
  mkx_tune_table_free(&t);
  mkx_tune_table_free(&u);
}

static void merge(void) {
  mkx_tune_table mine = {0}, all = {0};
  /* another job's entries, one of them a key of ours */
  write_text("mkx-tune-cache 1\nother,key 4 2.5 9\nH100,132sm,b 5 0.75 3\n");
  mkx_tune_table_put(&mine, "H100,132sm,b", 2, 0.25f, 30);
  mkx_tune_table_put(&mine, "H200,132sm,c", 16, 3.0f, 11);
  CHECK(mkx_tune_file_write(path, &mine) == 0, "merged write");
  CHECK(mkx_tune_file_read(path, &all, NULL) == 0 && all.n == 3 &&
            has(&all, "other,key", 4, 2.5f, 9) &&
            has(&all, "H100,132sm,b", 2, 0.25f, 30) &&
            has(&all, "H200,132sm,c", 16, 3.0f, 11),
        "the other writer's key kept, ours won, ours added");
  mkx_tune_table_free(&mine);
  mkx_tune_table_free(&all);
}

static void bad_lines(void) {
  mkx_tune_table t = {0};
  int bad = 0;
  write_text(
      "mkx-tune-cache 1\n"
      "good,one 4 2.5 9\n"
      "# a comment\n"
      "\n"
      "no,numbers\n"
      "zero,ctas 0 1.0 3\n"
      "neg,time 4 -1 3\n"
      "trailing,words 4 1.0 3 and more\n"
      "good,two 8 0.5 1\n");
  CHECK(mkx_tune_file_read(path, &t, &bad) == 0 && t.n == 2 && bad == 4 &&
            has(&t, "good,one", 4, 2.5f, 9) && has(&t, "good,two", 8, 0.5f, 1),
        "bad lines skipped and counted (%d of 4), the good ones kept (%d of 2)",
        bad, t.n);
  mkx_tune_table_free(&t);
}

static void foreign(const char *text, const char *what) {
  mkx_tune_table t = {0}, u = {0};
  mkx_tune_table_put(&t, "kept,entry", 3, 1.0f, 2);
  write_text(text);
  CHECK(mkx_tune_file_read(path, &t, NULL) == -1 && t.n == 1 &&
            has(&t, "kept,entry", 3, 1.0f, 2),
        "%s: refused whole, the table unchanged", what);
  CHECK(mkx_tune_file_write(path, &t) == 0 &&
            mkx_tune_file_read(path, &u, NULL) == 0 && u.n == 1 &&
            has(&u, "kept,entry", 3, 1.0f, 2),
        "%s: replaced by a cache when written", what);
  mkx_tune_table_free(&t);
  mkx_tune_table_free(&u);
}

static void unwritable(void) {
  char sub[600], p[700];
  mkx_tune_table t = {0};
  snprintf(sub, sizeof sub, "%s/none", dir);
  snprintf(p, sizeof p, "%s/cache", sub); /* a directory that is not there */
  mkx_tune_table_put(&t, "a,key", 1, 1.0f, 1);
  CHECK(mkx_tune_file_write(p, &t) == -1 && access(p, F_OK) != 0,
        "an unwritable place: the write fails, no file");
  mkx_tune_table_free(&t);
}

int main(void) {
  snprintf(dir, sizeof dir, "%s/mkx-tune-XXXXXX",
           getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  if (!mkdtemp(dir)) {
    perror(dir);
    return 1;
  }
  snprintf(path, sizeof path, "%s/cache", dir);
  round_trip();
  merge();
  bad_lines();
  foreign("mkx-tune-cache 2\nsome,key 4 2.5 9\n", "another version");
  foreign("#!/bin/sh\necho not a cache\n", "not a cache");
  unwritable();
  unlink(path);
  char lock[600];
  snprintf(lock, sizeof lock, "%s.lock", path);
  unlink(lock);
  rmdir(dir);
  return check_done("test_tune_cache");
}
