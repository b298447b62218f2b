/* The bootstrap's node split, driven by threads through the out-of-band
 * callbacks (no MPI): host names, virtual nodes, and a rank that never
 * arrives (the others must time out, not hang). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "boot/bootstrap.h"
#include "mkx.h"
#include "../common/check.h"

#define MAX_RANKS 16

/* A shared-memory allgather among threads. */
typedef struct group {
  int size;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int arrived, generation;
  char buf[MAX_RANKS * 256];
} group;

typedef struct thread_ctx {
  group *g;
  mkx_oob oob;
  const char *host;
  int vsize, skip, rc;
  mkx_placement pl;
} thread_ctx;

static int thread_allgather(void *ctx, const void *send, void *recv,
                            size_t bytes, int64_t timeout_ms,
                            const char *what) {
  thread_ctx *t = ctx;
  (void)what;
  group *g = t->g;
  struct timespec dl;
  int rc = MKX_SUCCESS;
  clock_gettime(CLOCK_REALTIME, &dl);
  dl.tv_sec += timeout_ms / 1000;
  dl.tv_nsec += (timeout_ms % 1000) * 1000000;
  if (dl.tv_nsec >= 1000000000) dl.tv_sec++, dl.tv_nsec -= 1000000000;
  pthread_mutex_lock(&g->lock);
  memcpy(g->buf + (size_t)t->oob.rank * bytes, send, bytes);
  int gen = g->generation;
  if (++g->arrived == g->size) {
    g->arrived = 0;
    g->generation++;
    pthread_cond_broadcast(&g->cond);
  }
  while (gen == g->generation && rc == MKX_SUCCESS)
    if (pthread_cond_timedwait(&g->cond, &g->lock, &dl) != 0 &&
        gen == g->generation)
      rc = MKX_ERR_TIMEOUT;
  if (rc == MKX_SUCCESS) memcpy(recv, g->buf, bytes * (size_t)g->size);
  pthread_mutex_unlock(&g->lock);
  return rc;
}

static void *run_rank(void *arg) {
  thread_ctx *t = arg;
  if (t->skip) return NULL;
  t->rc = mkx_boot_placement(&t->oob, t->host, t->vsize, 300, &t->pl);
  return NULL;
}

/* Run `size` threads with the given host names; skip < 0: all arrive. */
static void run_group(int size, const char **hosts, int vsize, int skip,
                      thread_ctx *t) {
  group g = {.size = size};
  pthread_t th[MAX_RANKS];
  pthread_mutex_init(&g.lock, NULL);
  pthread_cond_init(&g.cond, NULL);
  for (int r = 0; r < size; r++) {
    t[r] = (thread_ctx){
        .g = &g, .host = hosts[r], .vsize = vsize, .skip = r == skip};
    t[r].oob = (mkx_oob){r, size, thread_allgather, NULL, &t[r]};
    pthread_create(&th[r], NULL, run_rank, &t[r]);
  }
  for (int r = 0; r < size; r++) pthread_join(th[r], NULL);
  pthread_mutex_destroy(&g.lock);
  pthread_cond_destroy(&g.cond);
}

static void expect(int size, const char **hosts, int vsize, const int *node,
                   const int *local, int nodes) {
  thread_ctx t[MAX_RANKS];
  run_group(size, hosts, vsize, -1, t);
  for (int r = 0; r < size; r++) {
    CHECK(t[r].rc == MKX_SUCCESS, "rank %d rc %d", r, t[r].rc);
    if (t[r].rc) continue;
    CHECK(t[r].pl.node == node[r], "rank %d node %d, want %d", r, t[r].pl.node,
          node[r]);
    CHECK(t[r].pl.local_rank == local[r], "rank %d local %d, want %d", r,
          t[r].pl.local_rank, local[r]);
    CHECK(t[r].pl.num_nodes == nodes, "rank %d nodes %d, want %d", r,
          t[r].pl.num_nodes, nodes);
    /* Physical hosts are numbered in order of first appearance: count
     * the first appearances before this host's first. */
    int first = 0, host = 0;
    while (strcmp(hosts[first], hosts[r]) != 0) first++;
    for (int q = 0; q < first; q++) {
      int seen = 0;
      for (int p = 0; p < q; p++) seen |= strcmp(hosts[p], hosts[q]) == 0;
      host += !seen;
    }
    CHECK(t[r].pl.host_of_rank[r] == host, "rank %d host %d, want %d", r,
          t[r].pl.host_of_rank[r], host);
    int lsize = 0, equal = 1;
    for (int q = 0; q < size; q++) lsize += node[q] == node[r];
    for (int k = 0; k < nodes; k++) {
      int n = 0;
      for (int q = 0; q < size; q++) n += node[q] == k;
      equal &= n == size / nodes && size % nodes == 0;
    }
    CHECK(t[r].pl.equal_nodes == equal, "rank %d equal_nodes %d, want %d", r,
          t[r].pl.equal_nodes, equal);
    CHECK(t[r].pl.local_size == lsize, "rank %d local size %d want %d", r,
          t[r].pl.local_size, lsize);
    mkx_placement_free(&t[r].pl);
  }
}

int main(void) {
  const char *one[] = {"a"};
  expect(1, one, 0, (int[]){0}, (int[]){0}, 1);

  /* Interleaved hosts: nodes numbered by lowest rank. */
  const char *mixed[] = {"b", "a", "b", "a", "c"};
  expect(5, mixed, 0, (int[]){0, 1, 0, 1, 2}, (int[]){0, 0, 1, 1, 0}, 3);

  /* Virtual nodes of 2 on one host of 5 ranks: 3 nodes, the last short. */
  const char *same[] = {"h", "h", "h", "h", "h"};
  expect(5, same, 2, (int[]){0, 0, 1, 1, 2}, (int[]){0, 1, 0, 1, 0}, 3);

  /* Virtual nodes inside each of two interleaved hosts. */
  const char *two[] = {"x", "y", "x", "y", "x", "y", "x", "y"};
  expect(8, two, 2, (int[]){0, 1, 0, 1, 2, 3, 2, 3},
         (int[]){0, 0, 1, 1, 0, 0, 1, 1}, 4);

  /* Long host names are cut, not overrun. */
  char longname[300];
  memset(longname, 'z', sizeof longname - 1);
  longname[sizeof longname - 1] = '\0';
  const char *longs[] = {longname, longname};
  expect(2, longs, 0, (int[]){0, 0}, (int[]){0, 1}, 1);

  /* A rank that never arrives: the others time out instead of hanging. */
  thread_ctx t[MAX_RANKS];
  const char *four[] = {"h", "h", "h", "h"};
  run_group(4, four, 0, 2, t);
  for (int r = 0; r < 4; r++)
    if (r != 2)
      CHECK(t[r].rc == MKX_ERR_TIMEOUT, "rank %d with a missing peer: rc %d", r,
            t[r].rc);

  return check_done("test_bootstrap");
}
