/*
 * Option trace's file (src/ops/trace_file.c) on 1 to 4 ranks, from
 * records made here (the GPU's are made by ops/fused/tuner.c): rank 0
 * writes one Chrome trace with every rank's records as complete events,
 * a process per rank and a named thread per track, times from the
 * earliest record, names escaped, brackets balanced outside strings, and
 * nothing left beside it (and python3, where there is one, reads it as
 * JSON); a rank past MKX_TRACE_MAX records keeps that
 * many; a path that cannot be written is a warning, never a failure; an
 * unusable communicator writes nothing and is freed at once.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/comm.h"
#include "mkx_test.h"
#include "ops/trace_file.h"

static MKX_Comm traced(const char *path) {
  MPI_Info info;
  MKX_Comm c = NULL;
  MPI_Info_create(&info);
  MPI_Info_set(info, "mkx_trace", path);
  CHECK_RC(MKX_Comm_create(MPI_COMM_WORLD, info, &c), MKX_SUCCESS,
           "a communicator with trace=%s", path);
  MPI_Info_free(&info);
  return c;
}

static void add(MKX_Comm c, int n, double t0) {
  for (int i = 0; i < n; i++) {
    mkx_trace_rec r = {.track = i % 2, .run = i / 2, .ctas = 4 + i % 2};
    r.ts_us = t0 + 100.0 * i, r.dur_us = 50;
    snprintf(r.what, sizeof r.what, "ag \"q\\%d\"", mt.rank);
    mkx_trace_add(c, &r);
  }
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return NULL;
  size_t cap = 1 << 16, n = 0, k;
  char *s = malloc(cap);
  while (s && (k = fread(s + n, 1, cap - n - 1, f)) > 0)
    if ((n += k) + 1 == cap) s = realloc(s, cap *= 2);
  fclose(f);
  if (s) s[n] = '\0';
  return s;
}

static int count(const char *s, const char *what) {
  int n = 0;
  for (const char *p = s; (p = strstr(p, what)); p += strlen(what)) n++;
  return n;
}

/* Brackets and braces balanced outside strings, escapes honoured. */
static int balanced(const char *s) {
  int depth = 0, in = 0;
  for (const char *p = s; *p; p++) {
    if (in) {
      if (*p == '\\' && p[1])
        p++;
      else if (*p == '"')
        in = 0;
    } else if (*p == '"') {
      in = 1;
    } else if (*p == '{' || *p == '[') {
      depth++;
    } else if ((*p == '}' || *p == ']') && --depth < 0) {
      return 0;
    }
  }
  return depth == 0 && !in;
}

static void written(const char *path) {
  MKX_Comm c = traced(path);
  add(c, 6, 1000.0 + 10.0 * mt.rank);
  mkx_trace_close(c);
  CHECK_RC(MKX_Comm_free(&c), MKX_SUCCESS, "free");
  MPI_Barrier(MPI_COMM_WORLD);
  if (mt.rank != 0) return;
  char *s = slurp(path), tmp[300], pid[64];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  if (!CHECK(s != NULL, "rank 0 wrote %s", path)) return;
  CHECK(!strncmp(s, "{\"displayTimeUnit\"", 18) && balanced(s),
        "a JSON object, balanced outside strings");
  CHECK(count(s, "\"ph\": \"X\"") == 6 * mt.size,
        "%d complete events (6 per rank)", count(s, "\"ph\": \"X\""));
  int ranks = 0;
  for (int q = 0; q < mt.size; q++) {
    snprintf(pid, sizeof pid, "\"args\": {\"name\": \"rank %d\"}", q);
    ranks += count(s, pid) == 1;
  }
  CHECK(ranks == mt.size, "a process named for each of %d ranks", mt.size);
  CHECK(count(s, "\"thread_name\"") == 2 * mt.size &&
            count(s, "\"name\": \"run\"") == mt.size &&
            count(s, "\"name\": \"network forward\"") == mt.size,
        "tracks named: the run and the first role, on every rank");
  CHECK(count(s, "\"ts\": 0.000,") == 1 && count(s, "\"ts\": 500.000,") >= 1,
        "times from the earliest record");
  CHECK(count(s, "ag \\\"q\\\\0\\\"") == 6, "names escaped");
  CHECK(access(tmp, F_OK) != 0, "nothing left beside it");
  char cmd[400];
  snprintf(cmd, sizeof cmd,
           "python3 -c 'import json,sys; json.load(open(sys.argv[1]))' %s",
           path);
  if (system("command -v python3 >/dev/null 2>&1") == 0)
    CHECK(system(cmd) == 0, "python3's json module reads it");
  free(s);
  remove(path);
}

static void bounded(const char *path) {
  MKX_Comm c = traced(path);
  add(c, mt.rank == 0 ? MKX_TRACE_MAX + 5 : 2, 0);
  mkx_trace_close(c);
  CHECK_RC(MKX_Comm_free(&c), MKX_SUCCESS, "free");
  MPI_Barrier(MPI_COMM_WORLD);
  if (mt.rank != 0) return;
  char *s = slurp(path);
  const int want = MKX_TRACE_MAX + 2 * (mt.size - 1);
  CHECK(s && count(s, "\"ph\": \"X\"") == want,
        "rank 0 kept %d records, the others theirs: %d events", MKX_TRACE_MAX,
        s ? count(s, "\"ph\": \"X\"") : -1);
  free(s);
  remove(path);
}

static void unwritable(void) {
  MKX_Comm c = traced("/nonexistent-mkx-dir/trace.json");
  add(c, 2, 0);
  mkx_trace_close(c);
  CHECK_RC(MKX_Comm_free(&c), MKX_SUCCESS,
           "a trace that cannot be written: freed all the same");
}

/* A communicator a timeout left unusable: nothing gathered (no file),
 * freed at once. */
static void broken(const char *path) {
  MKX_Comm c = traced(path);
  add(c, 2, 0);
  c->broken = 1;
  snprintf(c->broken_why, sizeof c->broken_why, "test_trace: broken");
  mkx_trace_close(c);
  CHECK_RC(MKX_Comm_free(&c), MKX_SUCCESS, "an unusable communicator: freed");
  MPI_Barrier(MPI_COMM_WORLD);
  if (mt.rank == 0)
    CHECK(access(path, F_OK) != 0, "an unusable communicator: no file");
}

int main(int argc, char **argv) {
  mt_init(&argc, &argv);
  char path[256];
  long id = (long)getpid();
  MPI_Bcast(&id, 1, MPI_LONG, 0, MPI_COMM_WORLD);
  snprintf(path, sizeof path, "/tmp/mkx-test-trace-%ld.json", id);
  written(path);
  bounded(path);
  unwritable();
  broken(path);
  return mt_finish();
}
