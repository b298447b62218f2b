/* The role timeline of option trace=PATH (trace_file.h). */
#define _POSIX_C_SOURCE 200809L
#include "ops/trace_file.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "boot/oob_mpi.h"
#include "core/error.h"
#include "core/log.h"
#include "ops/roles.h"

typedef struct trace_store {
  mkx_trace_rec *r;
  int n, cap;
  long dropped;
} trace_store;

void mkx_trace_add(MKX_Comm c, const mkx_trace_rec *r) {
  if (!c->opt.trace[0]) return;
  trace_store *s = c->trace;
  if (!s && !(s = c->trace = calloc(1, sizeof *s))) return;
  if (s->n == s->cap) {
    const int cap = s->cap ? 2 * s->cap : 256;
    mkx_trace_rec *g = NULL;
    if (cap <= MKX_TRACE_MAX) g = realloc(s->r, sizeof *g * (size_t)cap);
    if (!g) {
      s->dropped++;
      return;
    }
    s->r = g, s->cap = cap;
  }
  s->r[s->n] = *r;
  s->r[s->n++].rank = c->rank;
}

/* what as a JSON string body: quotes, backslashes and controls escaped. */
static void json_text(FILE *f, const char *what) {
  for (const unsigned char *p = (const unsigned char *)what; *p; p++)
    if (*p == '"' || *p == '\\')
      fprintf(f, "\\%c", *p);
    else if (*p < 0x20)
      fprintf(f, "\\u%04x", *p);
    else
      fputc(*p, f);
}

int mkx_trace_json(FILE *f, const mkx_trace_rec *r, int n,
                   const char *const names[MKX_TRACE_TRACKS]) {
  double t0 = 0;
  int ranks = 0;
  for (int i = 0; i < n; i++) {
    if (i == 0 || r[i].ts_us < t0) t0 = r[i].ts_us;
    if (r[i].rank + 1 > ranks) ranks = r[i].rank + 1;
  }
  fprintf(f, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n");
  const char *sep = "";
  for (int q = 0; q < ranks; q++) {
    int seen[MKX_TRACE_TRACKS] = {0}, any = 0;
    for (int i = 0; i < n; i++)
      if (r[i].rank == q && r[i].track >= 0 && r[i].track < MKX_TRACE_TRACKS)
        seen[r[i].track] = any = 1;
    if (!any) continue;
    fprintf(f,
            "%s{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, "
            "\"args\": {\"name\": \"rank %d\"}}",
            sep, q, q);
    sep = ",\n";
    for (int k = 0; k < MKX_TRACE_TRACKS; k++)
      if (seen[k])
        fprintf(f,
                ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, "
                "\"tid\": %d, \"args\": {\"name\": \"%s\"}}",
                q, k, names[k]);
  }
  for (int i = 0; i < n; i++) {
    fprintf(f, "%s{\"name\": \"", sep);
    json_text(f, r[i].what);
    fprintf(f,
            "\", \"ph\": \"X\", \"pid\": %d, \"tid\": %d, \"ts\": %.3f, "
            "\"dur\": %.3f, \"args\": {\"run\": %d, \"ctas\": %d}}",
            r[i].rank, r[i].track, r[i].ts_us - t0,
            r[i].dur_us > 0 ? r[i].dur_us : 0, r[i].run, r[i].ctas);
    sep = ",\n";
  }
  fprintf(f, "\n]}\n");
  return ferror(f) ? -1 : 0;
}

_Static_assert(MKX_TRACE_TRACKS == 1 + MKX_ROLE_COUNT,
               "a track for the run and one per role");

/* Rank 0: the records written to path beside it, then renamed over it. */
static void write_file(const char *path, const mkx_trace_rec *r, int n) {
  const char *names[MKX_TRACE_TRACKS] = {"run"};
  char tmp[MKX_OPT_STRING_MAX + 16];
  for (int k = 1; k < MKX_TRACE_TRACKS; k++)
    names[k] = mkx_role_range_of((mkx_role)(k - 1))->name;
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  int rc = f ? mkx_trace_json(f, r, n, names) : -1;
  if (f && fclose(f) != 0) rc = -1;
  if (rc == 0 && rename(tmp, path) != 0) rc = -1;
  if (rc != 0) {
    mkx_log(MKX_LOG_WARN, "option trace: cannot write %s: %s", path,
            strerror(errno));
    remove(tmp);
  } else {
    mkx_log(MKX_LOG_INFO, "option trace: %d records in %s", n, path);
  }
}

/* Rank 0 receives every rank's records (counts first, both bounded);
 * buffers a late rank may still fill are left to MPI (mkx_mpi_abandon). */
static void gather(MKX_Comm c, trace_store *s) {
  const int64_t bound = c->opt.timeout_ms > 0 ? c->opt.timeout_ms : 300000;
  const int mine = s ? s->n : 0, sz = (int)sizeof(mkx_trace_rec);
  int *counts = calloc((size_t)c->size * 2, sizeof *counts);
  if (!counts) return;
  int *displs = counts + c->size;
  if (mkx_mpi_allgather(&mine, counts, sizeof mine, c->mpi, bound,
                        "option trace: record counts") != MKX_SUCCESS) {
    mkx_log(MKX_LOG_WARN, "option trace: %s", MKX_Get_last_error());
    free(counts);
    return;
  }
  int total = 0;
  for (int q = 0; q < c->size; q++) {
    displs[q] = total * sz;
    total += counts[q];
    counts[q] *= sz;
  }
  mkx_trace_rec *all = NULL;
  if (c->rank == 0 &&
      !(all = malloc((size_t)(total ? total : 1) * sizeof *all)))
    total = -1; /* still joins the gather, with nowhere to keep it */
  MPI_Request req = MPI_REQUEST_NULL;
  int rc =
      mkx_mpi_check(MPI_Igatherv(s ? s->r : NULL, mine * sz, MPI_BYTE, all,
                                 counts, displs, MPI_BYTE, 0, c->mpi, &req),
                    "option trace: MPI_Igatherv");
  if (rc == MKX_SUCCESS)
    rc = mkx_mpi_wait(&req, bound, "option trace: gathering the records");
  if (rc != MKX_SUCCESS) {
    mkx_log(MKX_LOG_WARN, "option trace: %s", MKX_Get_last_error());
    if (req != MPI_REQUEST_NULL) {
      /* MPI may still read s->r and write all and counts */
      mkx_mpi_abandon(&req, all);
      if (s) s->r = NULL;
      return;
    }
  } else if (c->rank == 0 && total >= 0) {
    write_file(c->opt.trace, all, total);
  }
  free(all);
  free(counts);
}

void mkx_trace_close(MKX_Comm c) {
  trace_store *s = c->trace;
  if (!c->opt.trace[0]) return;
  if (s && s->dropped)
    mkx_log(MKX_LOG_WARN,
            "option trace: rank %d kept %d records and dropped %ld "
            "(at most %d)",
            c->rank, s->n, s->dropped, MKX_TRACE_MAX);
  if (c->broken) /* its collectives out of step: no gather to wait out */
    mkx_log(MKX_LOG_WARN,
            "option trace: the communicator is unusable (%s); %s not written",
            c->broken_why, c->opt.trace);
  else
    gather(c, s);
  if (s) free(s->r);
  free(s);
  c->trace = NULL;
}
