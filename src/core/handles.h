/* The handles MKX gave out and has not taken back (communicators,
 * persistent requests, MKX_Alloc_mem host memory, tile sets), so that a call can tell
 * a live handle from a freed, foreign or garbage one without reading the
 * memory behind it. */
#ifndef MKX_CORE_HANDLES_H
#define MKX_CORE_HANDLES_H

typedef enum {
  MKX_HANDLE_COMM = 1,
  MKX_HANDLE_REQUEST,
  MKX_HANDLE_HOST_MEM,
  MKX_HANDLE_TILES
} mkx_handle_kind;

/* Thread-safe.  add: MKX_ERR_NOMEM if the table cannot grow; adding a
 * live pointer again replaces its kind.  remove: no-op if not live. */
int mkx_handle_add(const void *h, mkx_handle_kind kind);
void mkx_handle_remove(const void *h);
/* 1 if h is live and of this kind. */
int mkx_handle_is(const void *h, mkx_handle_kind kind);

#endif
