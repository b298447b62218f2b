/* The topology map of this rank's GPU at communicator creation: nearest
 * NICs for the transports, cores for the proxy thread, the peer domain,
 * and the line mkx_info prints.  A machine hwloc cannot describe still
 * gets a communicator: the map is an optimisation, never a requirement. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/comm.h"
#include "core/device.h"
#include "core/error.h"
#include "core/log.h"

#define PCI_LEN 32

/* The distinct GPUs in use by the ranks of this rank's physical host. */
static int gpus_on_host(MKX_Comm c, char (*all)[PCI_LEN], const char **ids) {
  int n = 0, host = c->place.host_of_rank[c->rank];
  for (int q = 0; q < c->size; q++) {
    int dup = all[q][0] == '\0' || c->place.host_of_rank[q] != host;
    for (int i = 0; i < n && !dup; i++) dup = strcmp(ids[i], all[q]) == 0;
    if (!dup) ids[n++] = all[q];
  }
  return n;
}

static void set_peers(mkx_topo *t) {
  static char pcis[MKX_MAX_VISIBLE][PCI_LEN];
  static int can[MKX_MAX_VISIBLE * MKX_MAX_VISIBLE];
  const char *ids[MKX_MAX_VISIBLE];
  int n = 0;
  if (mkx_device_peer_matrix(&n, pcis, can) != MKX_SUCCESS || n == 0) return;
  for (int i = 0; i < n; i++) ids[i] = pcis[i];
  if (mkx_topo_set_peer_matrix(t, n, ids, can) != MKX_SUCCESS)
    mkx_log(MKX_LOG_INFO, "topology: peer matrix not recorded: %s",
            MKX_Get_last_error());
}

static int map_gpu(MKX_Comm c, const char *mine, char (*all)[PCI_LEN]) {
  const char **ids = malloc(sizeof *ids * (size_t)c->size);
  mkx_topo *t = NULL;
  int rc = ids ? mkx_topo_load(NULL, &t)
               : mkx_error(MKX_ERR_NOMEM, "topology");
  if (rc == MKX_SUCCESS)
    rc = mkx_topo_set_gpus_in_use(t, gpus_on_host(c, all, ids), ids);
  if (rc == MKX_SUCCESS) {
    set_peers(t);
    rc = mkx_topo_map_gpu(t, mine, &c->gpu_map);
  }
  if (rc == MKX_SUCCESS)
    rc = mkx_topo_describe(&c->gpu_map, c->topo_desc, sizeof c->topo_desc);
  mkx_topo_free(t);
  free(ids);
  return rc;
}

/* Several ranks of a node on one GPU: the fused paths refuse that (see
 * mkx_tp_node_ok). */
static int gpu_shared(MKX_Comm c, const char *mine, char (*all)[PCI_LEN]) {
  const int node = c->place.node_of_rank[c->rank];
  for (int q = 0; mine[0] != '\0' && q < c->size; q++)
    if (q != c->rank && c->place.node_of_rank[q] == node &&
        strcmp(all[q], mine) == 0)
      return 1;
  return 0;
}

int mkx_comm_map_topology(MKX_Comm c) {
  char mine[PCI_LEN] = "";
  char (*all)[PCI_LEN] = malloc(sizeof *all * (size_t)c->size);
  if (all == NULL) return mkx_error(MKX_ERR_NOMEM, "topology exchange");
  if (c->device >= 0 && mkx_device_pci_id(c->device, mine, sizeof mine))
    mine[0] = '\0';
  int rc = c->oob.allgather(c->oob.ctx, mine, all, sizeof mine,
                            c->opt.timeout_ms);
  if (rc == MKX_SUCCESS) {
    c->gpu_shared = gpu_shared(c, mine, all);
    snprintf(c->topo_desc, sizeof c->topo_desc, "no GPU");
    if (mine[0] != '\0' && map_gpu(c, mine, all) == MKX_SUCCESS)
      c->has_gpu_map = 1;
    else if (mine[0] != '\0')
      snprintf(c->topo_desc, sizeof c->topo_desc, "unavailable (%s)",
               MKX_Get_last_error());
    mkx_error_clear();
    mkx_log(MKX_LOG_INFO, "topology: %s", c->topo_desc);
  }
  free(all);
  return rc;
}
