/* Error codes, their strings, and the per-thread last-error message. */
#include <stdarg.h>
#include <stdio.h>
#include "core/error.h"
#include "core/log.h"

static _Thread_local char last_message[512];

static const char *const error_strings[MKX_ERR_LASTCODE + 1] = {
    [MKX_SUCCESS] = "success",
    [MKX_ERR_INVALID_ARG] = "invalid argument",
    [MKX_ERR_NULL_POINTER] = "required pointer is NULL",
    [MKX_ERR_BAD_SIZE] = "invalid size",
    [MKX_ERR_BAD_LD] = "leading dimension too small",
    [MKX_ERR_UNSUPPORTED] = "unsupported type, order or feature",
    [MKX_ERR_SHAPE_MISMATCH] = "ranks disagree on a collective argument",
    [MKX_ERR_TRUNCATE] = "output buffer too small",
    [MKX_ERR_CUDA] = "CUDA error",
    [MKX_ERR_MPI] = "MPI error",
    [MKX_ERR_NET] = "network transport error",
    [MKX_ERR_TIMEOUT] = "timed out waiting for a peer",
    [MKX_ERR_NOMEM] = "out of memory",
    [MKX_ERR_PEER] = "another rank failed",
    [MKX_ERR_INVALID_COMM] = "invalid or unusable communicator",
    [MKX_ERR_INVALID_REQUEST] = "invalid request",
    [MKX_ERR_INTERNAL] = "internal error (please report)",
};

const char *MKX_Error_string(int err) {
  if (err < 0 || err > MKX_ERR_LASTCODE) return "unknown MKX error code";
  return error_strings[err];
}

const char *MKX_Get_last_error(void) { return last_message; }

void mkx_error_clear(void) { last_message[0] = '\0'; }

int mkx_error(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_message, sizeof last_message, fmt, ap);
  va_end(ap);
  mkx_log(MKX_LOG_DEBUG, "%s: %s", MKX_Error_string(code), last_message);
  return code;
}
