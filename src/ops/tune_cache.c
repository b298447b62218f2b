/* The tuner cache (tune_cache.h). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/device.h"
#include "core/log.h"
#include "ops/tune_cache.h"

#define HEADER "mkx-tune-cache 1"

static int log2_bucket(int64_t v) {
  int b = 0;
  while (v > 1 && b < 62) v >>= 1, b++;
  return b;
}

/* The GPU's model ("NVIDIA H100 80GB HBM3"). */
static void gpu_model(MKX_Comm c, char *buf, size_t len) {
  snprintf(buf, len, "cpu");
  if (c->device >= 0 && mkx_device_name(c->device, buf, len) != 0)
    snprintf(buf, len, "gpu%d", c->device);
  char *paren = strstr(buf, " (");
  if (paren) *paren = '\0'; /* the SMs follow in the key */
}

void mkx_tune_key(MKX_Comm c, const char *op, const char *path, int role,
                  int64_t m, int64_t n, int64_t k, int dtype,
                  char key[MKX_TUNE_KEY_MAX]) {
  char model[128];
  gpu_model(c, model, sizeof model);
  snprintf(key, MKX_TUNE_KEY_MAX, "%s,%dsm,%dctas,%dx%d,%s,%s,r%d,%d/%d/%d,t%d",
           model, c->share.dev_sms, c->share.ctas, c->place.local_size,
           c->place.num_nodes, op, path, role, log2_bucket(m), log2_bucket(n),
           log2_bucket(k), dtype);
  /* one word in the file: the names' spaces become '_' */
  for (char *s = key; *s; s++)
    if (*s == ' ' || *s == '\t' || *s == '\n') *s = '_';
}

const mkx_tune_entry *mkx_tune_table_get(const mkx_tune_table *t,
                                         const char *key) {
  for (int i = 0; t && i < t->n; i++)
    if (!strcmp(t->e[i].key, key)) return &t->e[i];
  return NULL;
}

int mkx_tune_table_put(mkx_tune_table *t, const char *key, int ctas, float ms,
                       int runs) {
  mkx_tune_entry *e = (mkx_tune_entry *)mkx_tune_table_get(t, key);
  if (!e) {
    if (strlen(key) >= MKX_TUNE_KEY_MAX || strchr(key, ' ')) return -1;
    if (t->n == t->cap) {
      const int cap = t->cap ? 2 * t->cap : 16;
      mkx_tune_entry *g = realloc(t->e, sizeof *g * (size_t)cap);
      if (!g) return -1;
      t->e = g, t->cap = cap;
    }
    e = &t->e[t->n++];
    snprintf(e->key, sizeof e->key, "%s", key);
  }
  e->ctas = ctas, e->ms = ms, e->runs = runs;
  return 0;
}

void mkx_tune_table_free(mkx_tune_table *t) {
  free(t->e);
  memset(t, 0, sizeof *t);
}

/* "KEY CTAS MS RUNS": 1 if the line is an entry. */
static int parse(const char *line, mkx_tune_entry *e) {
  char key[MKX_TUNE_KEY_MAX], end;
  int ctas, runs;
  float ms;
  if (sscanf(line, "%191s %d %f %d %c", key, &ctas, &ms, &runs, &end) != 4)
    return 0;
  if (ctas < 1 || !(ms > 0) || runs < 0) return 0;
  snprintf(e->key, sizeof e->key, "%s", key);
  e->ctas = ctas, e->ms = ms, e->runs = runs;
  return 1;
}

int mkx_tune_file_read(const char *path, mkx_tune_table *t, int *bad) {
  char line[512];
  if (bad) *bad = 0;
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  if (!fgets(line, sizeof line, f) || strncmp(line, HEADER, strlen(HEADER)) ||
      (line[strlen(HEADER)] != '\n' && line[strlen(HEADER)] != '\0')) {
    fclose(f);
    return -1;
  }
  mkx_tune_entry e;
  while (fgets(line, sizeof line, f)) {
    if (line[0] == '#' || line[0] == '\n') continue;
    if (!strchr(line, '\n') && !feof(f)) { /* too long: skip the rest */
      int ch;
      while ((ch = fgetc(f)) != EOF && ch != '\n') {}
      if (bad) ++*bad;
      continue;
    }
    if (!parse(line, &e) || mkx_tune_table_put(t, e.key, e.ctas, e.ms, e.runs))
      if (bad) ++*bad;
  }
  fclose(f);
  return 0;
}

/* An exclusive lock on PATH.lock, held while the file is merged and
 * replaced (ranks of a job, and jobs, may write it at once); -1 without. */
static int lock_file(const char *path) {
  char lock[4200];
  snprintf(lock, sizeof lock, "%s.lock", path);
  const int fd = open(lock, O_RDWR | O_CREAT, 0644);
  if (fd < 0) return -1;
  struct flock l = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
  if (fcntl(fd, F_SETLKW, &l) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

static int write_all(const char *tmp, const mkx_tune_table *t) {
  FILE *f = fopen(tmp, "w");
  if (!f) return -1;
  int rc = fprintf(f, "%s\n", HEADER) < 0;
  for (int i = 0; !rc && i < t->n; i++)
    rc = fprintf(f, "%s %d %.6g %d\n", t->e[i].key, t->e[i].ctas,
                 (double)t->e[i].ms, t->e[i].runs) < 0;
  if (fflush(f) != 0 || fsync(fileno(f)) != 0) rc = 1;
  if (fclose(f) != 0) rc = 1;
  return rc ? -1 : 0;
}

int mkx_tune_file_write(const char *path, const mkx_tune_table *t) {
  char tmp[4200];
  mkx_tune_table all = {0};
  const int fd = lock_file(path);
  if (fd < 0) return -1;
  int rc = 0;
  /* a foreign or stale file is replaced (its reader warned already) */
  if (mkx_tune_file_read(path, &all, NULL) != 0) mkx_tune_table_free(&all);
  for (int i = 0; !rc && i < t->n; i++)
    rc = mkx_tune_table_put(&all, t->e[i].key, t->e[i].ctas, t->e[i].ms,
                            t->e[i].runs);
  snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
  if (!rc) rc = write_all(tmp, &all);
  if (!rc) rc = rename(tmp, path);
  if (rc) {
    const int e = errno;
    unlink(tmp);
    errno = e;
  }
  mkx_tune_table_free(&all);
  close(fd); /* releases the lock */
  return rc ? -1 : 0;
}

/* ---- the communicator's cache -------------------------------------------- */

void mkx_tune_cache_close(MKX_Comm c) {
  mkx_tune_table *t = c->tune_table;
  if (!t) return;
  if (t->dirty && mkx_tune_file_write(c->opt.tune_cache, t) != 0)
    mkx_log(MKX_LOG_WARN, "option tune_cache: could not write %s (%s)",
            c->opt.tune_cache, strerror(errno));
  mkx_tune_table_free(t);
  free(t);
  c->tune_table = NULL;
}

/* The table, read at the first use; NULL without the option or memory. */
static mkx_tune_table *cache_of(MKX_Comm c) {
  if (c->tune_table || !c->opt.tune_cache[0]) return c->tune_table;
  mkx_tune_table *t = calloc(1, sizeof *t);
  if (!t) return NULL;
  int bad = 0;
  if (mkx_tune_file_read(c->opt.tune_cache, t, &bad) != 0)
    mkx_log(MKX_LOG_WARN,
            "option tune_cache: %s is not a tuner cache of this version "
            "(first line \"%s\"): ignored, and replaced when written",
            c->opt.tune_cache, HEADER);
  else if (bad)
    mkx_log(MKX_LOG_WARN, "option tune_cache: %d line(s) of %s ignored", bad,
            c->opt.tune_cache);
  c->tune_table = t;
  return t;
}

const mkx_tune_entry *mkx_tune_cache_get(MKX_Comm c, const char *key) {
  return mkx_tune_table_get(cache_of(c), key);
}

void mkx_tune_cache_put(MKX_Comm c, const char *key, int ctas, float ms,
                        int runs) {
  mkx_tune_table *t = cache_of(c);
  if (t && mkx_tune_table_put(t, key, ctas, ms, runs) == 0) t->dirty = 1;
}
