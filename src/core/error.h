/* Error reporting inside MKX: every failure path records a message that
 * names the argument, rank or tile at fault, then returns its code. */
#ifndef MKX_CORE_ERROR_H
#define MKX_CORE_ERROR_H

#include "mkx.h"

#if defined(__GNUC__)
#define MKX_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define MKX_PRINTF(a, b)
#endif

/* Record "msg" as this thread's last error, log it at debug level, and
 * return `code` so callers can write `return mkx_error(...)`. */
int mkx_error(int code, const char *fmt, ...) MKX_PRINTF(2, 3);

/* Forget the last error (start of every public call). */
void mkx_error_clear(void);

/* Propagate a non-success code without touching its message. */
#define MKX_TRY(expr)                                                          \
  do {                                                                         \
    int mkx_try_rc_ = (expr);                                                  \
    if (mkx_try_rc_ != MKX_SUCCESS) return mkx_try_rc_;                        \
  } while (0)

#endif
