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
  int rc = ids ? mkx_topo_load(NULL, &t) : mkx_error(MKX_ERR_NOMEM, "topology");
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

/* Ranks of this host on this rank's GPU, itself included (across virtual
 * nodes too: their kernels share the SMs all the same). */
static int ranks_on_gpu(MKX_Comm c, const char *mine, char (*all)[PCI_LEN]) {
  const int host = c->place.host_of_rank[c->rank];
  int n = 0;
  for (int q = 0; mine[0] != '\0' && q < c->size; q++)
    n += c->place.host_of_rank[q] == host && strcmp(all[q], mine) == 0;
  return n > 0 ? n : 1;
}

/* Collective: c->share, from every rank's GPU, its SMs and MPS; a local
 * failure fails every rank alike. */
static int share_init(MKX_Comm c, const char *mine, char (*all)[PCI_LEN]) {
  mkx_gpu_share *s = &c->share;
  mkx_device_sms d = {0, 0, 0};
  int rc = c->device >= 0 ? mkx_device_sm_info(c->device, &d) : MKX_SUCCESS;
  s->ranks = ranks_on_gpu(c, mine, all);
  s->dev_sms = d.dev_sms;
  s->ctx_sms = d.ctx_sms;
  const int gpu = c->device >= 0 && d.dev_sms > 0;
  int bid[3] = {rc, 0, 1 << 30}; /* rc, mode, CTAs (no GPU: no limit) */
  if (gpu && s->ranks > 1)
    bid[1] = d.mps ? MKX_SHARE_MPS : MKX_SHARE_TIMESLICED;
  if (gpu)
    bid[2] = mkx_gpu_share_bid(s->ranks, d.mps, d.dev_sms, d.ctx_sms,
                               c->opt.gpu_ctas);
  int(*got)[3] = malloc(sizeof *got * (size_t)c->size);
  if (!got) return mkx_error(MKX_ERR_NOMEM, "GPU share agreement");
  int orc =
      c->oob.allgather(c->oob.ctx, bid, got, sizeof bid, c->opt.timeout_ms);
  s->mode = MKX_SHARE_NONE;
  s->ctas = 1 << 30;
  for (int q = 0; orc == MKX_SUCCESS && q < c->size; q++) {
    if (got[q][0] != MKX_SUCCESS && rc == MKX_SUCCESS)
      rc = mkx_error(MKX_ERR_PEER, "GPU share: rank %d failed (%s)", q,
                     MKX_Error_string(got[q][0]));
    if (got[q][1] > s->mode) s->mode = got[q][1];
    if (got[q][2] < s->ctas) s->ctas = got[q][2];
  }
  free(got);
  if (orc != MKX_SUCCESS) return mkx_comm_fail(c, orc);
  if (!gpu || s->ctas >= d.dev_sms) s->ctas = 0;
  mkx_log(MKX_LOG_INFO,
          "GPU: %s, %d rank(s) on it, %d of %d SMs for this "
          "rank's context, fused kernels take %d CTAs",
          mkx_gpu_share_name(s->mode), s->ranks, s->ctx_sms, s->dev_sms,
          s->ctas ? s->ctas : s->dev_sms);
  return rc;
}

int mkx_comm_map_topology(MKX_Comm c) {
  char mine[PCI_LEN] = "";
  char(*all)[PCI_LEN] = malloc(sizeof *all * (size_t)c->size);
  if (all == NULL) return mkx_error(MKX_ERR_NOMEM, "topology exchange");
  if (c->device >= 0 && mkx_device_pci_id(c->device, mine, sizeof mine))
    mine[0] = '\0';
  int rc =
      c->oob.allgather(c->oob.ctx, mine, all, sizeof mine, c->opt.timeout_ms);
  if (rc == MKX_SUCCESS) {
    snprintf(c->topo_desc, sizeof c->topo_desc, "no GPU");
    if (mine[0] != '\0' && map_gpu(c, mine, all) == MKX_SUCCESS)
      c->has_gpu_map = 1;
    else if (mine[0] != '\0')
      snprintf(c->topo_desc, sizeof c->topo_desc, "unavailable (%s)",
               MKX_Get_last_error());
    mkx_error_clear();
    mkx_log(MKX_LOG_INFO, "topology: %s", c->topo_desc);
    rc = share_init(c, mine, all);
  }
  free(all);
  return rc;
}
