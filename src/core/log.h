/* Logging to stderr, filtered by the log_level option. */
#ifndef MKX_CORE_LOG_H
#define MKX_CORE_LOG_H

#include "core/error.h"

enum {
  MKX_LOG_NONE = 0,
  MKX_LOG_ERROR,
  MKX_LOG_WARN,
  MKX_LOG_INFO,
  MKX_LOG_DEBUG
};

/* The level comes from MKX_LOG_LEVEL at first use; a communicator's info
 * key can raise or lower it for the whole process. */
void mkx_log_set_level(int level);
int mkx_log_level(void);
/* Set the rank printed in front of messages (-1: none). */
void mkx_log_set_rank(int rank);
void mkx_log(int level, const char *fmt, ...) MKX_PRINTF(2, 3);

#endif
