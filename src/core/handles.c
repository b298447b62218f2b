/* The live-handle table (handles.h): open addressing on the pointer's
 * bits, linear probing, removed slots marked so probes go past them, and
 * rebuilt when live and removed slots fill half. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include "core/error.h"
#include "core/handles.h"

enum { EMPTY = 0, REMOVED = -1 };

typedef struct slot {
  const void *h;
  int kind; /* mkx_handle_kind, EMPTY or REMOVED */
} slot;

static slot *g_slots;
static size_t g_cap, g_used; /* used: live and removed slots */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

static size_t hash(const void *h) {
  uint64_t x = (uint64_t)(uintptr_t)h;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return (size_t)x;
}

/* The slot holding h, or the first free one of its probe sequence. */
static slot *find(const void *h, int for_insert) {
  slot *free_slot = NULL;
  for (size_t i = hash(h) & (g_cap - 1);; i = (i + 1) & (g_cap - 1)) {
    slot *s = &g_slots[i];
    if (s->kind == EMPTY) return for_insert && free_slot ? free_slot : s;
    if (s->kind == REMOVED) {
      if (!free_slot) free_slot = s;
    } else if (s->h == h) {
      return s;
    }
  }
}

/* Rebuilt without the removed slots: twice the size if live ones fill a
 * quarter, else the same size (create/free cycles leave removed slots,
 * not more live ones). */
static int grow(void) {
  size_t live = 0, old_cap = g_cap;
  for (size_t i = 0; i < old_cap; i++) live += g_slots[i].kind > 0;
  size_t cap = !g_cap ? 64 : 4 * (live + 1) > g_cap ? 2 * g_cap : g_cap;
  slot *old = g_slots, *fresh = calloc(cap, sizeof *fresh);
  if (!fresh) return mkx_error(MKX_ERR_NOMEM, "handle table");
  g_slots = fresh, g_cap = cap, g_used = 0;
  for (size_t i = 0; i < old_cap; i++)
    if (old[i].kind > 0) {
      *find(old[i].h, 1) = old[i];
      g_used++;
    }
  free(old);
  return MKX_SUCCESS;
}

int mkx_handle_add(const void *h, mkx_handle_kind kind) {
  int rc = MKX_SUCCESS;
  pthread_mutex_lock(&g_lock);
  if (2 * (g_used + 1) > g_cap) rc = grow();
  if (rc == MKX_SUCCESS) {
    slot *s = find(h, 1);
    if (s->kind == EMPTY) g_used++;
    s->h = h;
    s->kind = (int)kind;
  }
  pthread_mutex_unlock(&g_lock);
  return rc;
}

void mkx_handle_remove(const void *h) {
  pthread_mutex_lock(&g_lock);
  if (g_cap) {
    slot *s = find(h, 0);
    if (s->kind > 0) s->kind = REMOVED;
  }
  pthread_mutex_unlock(&g_lock);
}

int mkx_handle_is(const void *h, mkx_handle_kind kind) {
  int live = 0;
  if (!h) return 0;
  pthread_mutex_lock(&g_lock);
  if (g_cap) live = find(h, 0)->kind == (int)kind;
  pthread_mutex_unlock(&g_lock);
  return live;
}
