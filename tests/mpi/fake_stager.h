/* What the tests' fake stagers (mkx_net_stager in src/net/net.h: "device"
 * memory that is host memory the fake knows) share: one device, 0, and
 * stages from malloc.  Each test adds its own copies and counts. */
#ifndef MKX_TESTS_FAKE_STAGER_H
#define MKX_TESTS_FAKE_STAGER_H

#include <stdlib.h>
#include "core/error.h"
#include "mkx.h"

/* [p, p + n) inside [base, base + len) */
static inline int in_range(const void *p, size_t n, const char *base,
                           size_t len) {
  const char *c = p;
  return base && c >= base && c + n <= base + len;
}

static inline int fake_open(int device, void **ctx) {
  static int dummy;
  *ctx = &dummy;
  return device == 0 ? MKX_SUCCESS
                     : mkx_error(MKX_ERR_INTERNAL, "fake: device %d", device);
}
static inline void fake_close(void *ctx) { (void)ctx; }
static inline int fake_stage_alloc(size_t bytes, void **p) {
  *p = malloc(bytes);
  return *p ? MKX_SUCCESS : mkx_error(MKX_ERR_NOMEM, "fake stage");
}
static inline void fake_host_free(void *ctx, void *p) {
  (void)ctx;
  free(p);
}

#endif
