/* Node split and local ranks from an allgather of host names.  Pure logic
 * over the oob callbacks, so a threaded unit test can drive it. */
#include <stdlib.h>
#include <string.h>
#include "boot/bootstrap.h"
#include "core/error.h"

static int same_host(const char *names, int a, int b) {
  return strncmp(names + (size_t)a * MKX_HOSTNAME_MAX,
                 names + (size_t)b * MKX_HOSTNAME_MAX, MKX_HOSTNAME_MAX) == 0;
}

/* Ranks are walked in order; a rank opens a new node when its host has not
 * been seen, or when its host's current (virtual) node is full. */
static void assign_nodes(const char *names, int size, int vsize,
                         mkx_placement *pl) {
  int nodes = 0, hosts = 0;
  for (int r = 0; r < size; r++) {
    int first = r;  /* lowest rank on the same host */
    int before = 0; /* earlier ranks on the same host */
    for (int q = 0; q < r; q++)
      if (same_host(names, q, r)) {
        if (before == 0) first = q;
        before++;
      }
    pl->host_of_rank[r] = first == r ? hosts++ : pl->host_of_rank[first];
    if (first == r || (vsize > 0 && before % vsize == 0)) {
      pl->node_of_rank[r] = nodes++;
      pl->local_rank_of[r] = 0;
    } else {
      int prev = r - 1;
      while (!same_host(names, prev, r)) prev--;
      pl->node_of_rank[r] = pl->node_of_rank[prev];
      pl->local_rank_of[r] = pl->local_rank_of[prev] + 1;
    }
  }
  pl->num_nodes = nodes;
}

int mkx_boot_placement(const mkx_oob *oob, const char *host,
                       int virtual_node_size, int64_t timeout_ms,
                       mkx_placement *pl) {
  char mine[MKX_HOSTNAME_MAX] = {0};
  strncpy(mine, host, MKX_HOSTNAME_MAX - 1);
  memset(pl, 0, sizeof *pl);
  char *names = calloc((size_t)oob->size, MKX_HOSTNAME_MAX);
  pl->node_of_rank = calloc((size_t)oob->size, sizeof(int));
  pl->local_rank_of = calloc((size_t)oob->size, sizeof(int));
  pl->host_of_rank = calloc((size_t)oob->size, sizeof(int));
  if (!names || !pl->node_of_rank || !pl->local_rank_of || !pl->host_of_rank) {
    free(names);
    mkx_placement_free(pl);
    return mkx_error(MKX_ERR_NOMEM, "bootstrap: no memory for %d ranks",
                     oob->size);
  }
  int rc = oob->allgather(oob->ctx, mine, names, MKX_HOSTNAME_MAX, timeout_ms,
                          "host names");
  if (rc == MKX_SUCCESS) {
    assign_nodes(names, oob->size, virtual_node_size, pl);
    pl->node = pl->node_of_rank[oob->rank];
    pl->local_rank = pl->local_rank_of[oob->rank];
    for (int r = 0; r < oob->rank; r++)
      pl->host_local_rank += same_host(names, r, oob->rank);
    for (int r = 0; r < oob->size; r++)
      pl->local_size += pl->node_of_rank[r] == pl->node;
    /* Nodes fill in rank order, so they are equal iff each has as many
     * ranks as node 0 and the sizes add up. */
    pl->equal_nodes = 1;
    for (int r = 0; r < oob->size; r++)
      if (pl->local_rank_of[r] >= pl->local_size) pl->equal_nodes = 0;
    if (pl->num_nodes * pl->local_size != oob->size) pl->equal_nodes = 0;
  } else {
    mkx_placement_free(pl);
  }
  free(names);
  return rc;
}

int mkx_placement_rank_at(const mkx_placement *pl, int size, int node,
                          int local) {
  for (int q = 0; q < size; q++)
    if (pl->node_of_rank[q] == node && pl->local_rank_of[q] == local) return q;
  return -1;
}

void mkx_placement_free(mkx_placement *pl) {
  free(pl->node_of_rank);
  free(pl->local_rank_of);
  free(pl->host_of_rank);
  pl->node_of_rank = pl->local_rank_of = pl->host_of_rank = NULL;
}
