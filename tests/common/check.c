/* The counters and lines of check.h. */
#include "check.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include "mkx.h"

static atomic_int checks, failures;
static int my_rank = -1, my_size, show_passes;
static char note[128];

/* The check between check_at and check_say; per thread, as a test's
 * threads may check at once. */
static _Thread_local struct {
  const char *file;
  int line, ok, n, is_rc, rc, want;
} pending;

void check_set_rank(int rank, int size) {
  my_rank = rank;
  my_size = size;
}

void check_show_passes(int on) { show_passes = on; }

void check_set_note(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(note, sizeof note, fmt, ap);
  va_end(ap);
}

int check_count(void) { return atomic_load(&checks); }
int check_failed(void) { return atomic_load(&failures); }

int check_done(const char *name) {
  const int n = check_count(), bad = check_failed();
  if (bad)
    printf("FAIL %s: %d of %d checks failed\n", name, bad, n);
  else
    printf("PASS %s: %d checks\n", name, n);
  fflush(stdout);
  return bad ? 1 : 0;
}

int check_at(const char *file, int line, int ok) {
  pending.file = file;
  pending.line = line;
  pending.ok = ok;
  pending.is_rc = 0;
  pending.n = atomic_fetch_add(&checks, 1) + 1;
  if (!ok) atomic_fetch_add(&failures, 1);
  return !ok || show_passes;
}

int check_rc_at(const char *file, int line, int rc, int want) {
  const int say = check_at(file, line, rc == want);
  pending.is_rc = 1;
  pending.rc = rc;
  pending.want = want;
  return say;
}

/* The lines after a failure: what MKX said last, often the reason. */
static void why(char *buf, size_t size) {
  const char *le = MKX_Get_last_error();
  int k = 0;
  if (pending.is_rc) {
    const char *es = MKX_Error_string(pending.rc);
    k = snprintf(buf, size, "#   returned %d (%s), wanted %d\n", pending.rc,
                 es ? es : "?", pending.want);
  }
  if (le && *le && k >= 0 && (size_t)k < size)
    snprintf(buf + k, size - (size_t)k, "#   last MKX error: %s\n", le);
}

/* One printf per check, so that the lines of threads and ranks sharing
 * an output do not interleave within a check. */
int check_say(const char *fmt, ...) {
  char msg[1024], rank[32] = "", where[160] = "", tail[160] = "",
                  extra[1200] = "";
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (my_rank >= 0)
    snprintf(rank, sizeof rank, "[rank %d/%d] ", my_rank, my_size);
  if (!pending.ok) {
    const char *base = strrchr(pending.file, '/');
    snprintf(where, sizeof where, "%s:%d: ", base ? base + 1 : pending.file,
             pending.line);
    if (*note) snprintf(tail, sizeof tail, " (%s)", note);
    why(extra, sizeof extra);
  }
  printf("%s %d - %s%s%s%s\n%s", pending.ok ? "ok" : "not ok", pending.n, rank,
         where, msg, tail, extra);
  fflush(stdout);
  return pending.ok;
}
