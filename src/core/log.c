/* Logging: one line per message on stderr, prefixed with the rank. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "core/log.h"

static int log_level = -1; /* -1: not read from the environment yet */
static int log_rank = -1;

static int level_from_env(void) {
  static const char *const names[] = {"none", "error", "warn", "info", "debug"};
  const char *v = getenv("MKX_LOG_LEVEL");
  if (v == NULL) return MKX_LOG_WARN;
  for (int i = 0; i < (int)(sizeof names / sizeof names[0]); i++)
    if (strcasecmp(v, names[i]) == 0) return i;
  return MKX_LOG_WARN; /* the options table reports the bad value */
}

int mkx_log_level(void) {
  if (log_level < 0) log_level = level_from_env();
  return log_level;
}

void mkx_log_set_level(int level) { log_level = level; }
void mkx_log_set_rank(int rank) { log_rank = rank; }

void mkx_log(int level, const char *fmt, ...) {
  static const char *const tags[] = {"", "error", "warn", "info", "debug"};
  if (level > mkx_log_level() || level <= MKX_LOG_NONE) return;
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (log_rank >= 0)
    fprintf(stderr, "[mkx %d] %s: %s\n", log_rank, tags[level], line);
  else
    fprintf(stderr, "[mkx] %s: %s\n", tags[level], line);
}
