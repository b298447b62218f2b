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
 * nodes too: their kernels share the SMs all the same), and this rank's
 * place among them. */
static int ranks_on_gpu(MKX_Comm c, const char *mine, char (*all)[PCI_LEN],
                        int *index) {
  const int host = c->place.host_of_rank[c->rank];
  int n = 0;
  *index = 0;
  for (int q = 0; mine[0] != '\0' && q < c->size; q++)
    if (c->place.host_of_rank[q] == host && strcmp(all[q], mine) == 0) {
      if (q < c->rank) (*index)++;
      n++;
    }
  return n > 0 ? n : 1;
}

/* This rank's SMs on a GPU shared under MPS: a partition of its own where
 * its MPS client may use every SM (the default), else the share the user
 * gave the client, else none (logged; option gpu_partition=green makes
 * that an error). */
static int part_init(MKX_Comm c, mkx_gpu_share *s, const mkx_device_sms *d) {
  mkx_sm_part_limits l;
  int refused = 0, sms = 0;
  s->part = MKX_PART_NONE;
  if (!d->mps || s->ranks < 2) return MKX_SUCCESS;
  if (d->ctx_sms < d->dev_sms) { /* a percentage or affinity it can see */
    s->part = MKX_PART_CLIENT;
    return MKX_SUCCESS;
  }
  if (c->opt.gpu_partition == MKX_GPU_PART_NONE) return MKX_SUCCESS;
  int rc = mkx_sm_part_limits_of(c->device, &l);
  if (rc == MKX_SUCCESS && !(sms = mkx_sm_part_size(&l, s->ranks)))
    rc = mkx_error(MKX_ERR_UNSUPPORTED,
                   "SM partition: %d SMs cannot give each of %d ranks a "
                   "partition (at least %d SMs, in steps of %d)",
                   l.sms, s->ranks, l.min_sms, l.align);
  if (rc == MKX_SUCCESS)
    rc =
        mkx_sm_part_get(c->device, s->ranks, s->index, sms, &c->part, &refused);
  if (rc == MKX_SUCCESS) {
    s->part = MKX_PART_GREEN;
    s->ctx_sms = sms;
    return mkx_part_lane_init(c->part, &c->lane);
  }
  /* the daemon's percentage, which no client can see, refuses the split */
  if (refused) s->part = MKX_PART_CLIENT;
  if (refused || c->opt.gpu_partition == MKX_GPU_PART_AUTO) {
    mkx_log(MKX_LOG_INFO, "%s", MKX_Get_last_error());
    mkx_error_clear();
    return MKX_SUCCESS;
  }
  return rc;
}

/* Whether every rank of this rank's node is on its GPU (PCI ids). */
static int node_on_gpu(MKX_Comm c, const char *mine, char (*all)[PCI_LEN]) {
  for (int q = 0; q < c->size; q++)
    if (c->place.node_of_rank[q] == c->place.node && strcmp(all[q], mine))
      return 0;
  return mine[0] != '\0';
}

/* Collective: c->share, from every rank's GPU, its SMs, MPS and partition;
 * a local failure fails every rank alike. */
static int share_init(MKX_Comm c, const char *mine, char (*all)[PCI_LEN]) {
  mkx_gpu_share *s = &c->share;
  mkx_device_sms d = {0, 0, 0};
  int rc = c->device >= 0 ? mkx_device_sm_info(c->device, &d) : MKX_SUCCESS;
  s->ranks = ranks_on_gpu(c, mine, all, &s->index);
  s->dev_sms = d.dev_sms;
  s->ctx_sms = d.ctx_sms;
  const int gpu = c->device >= 0 && d.dev_sms > 0;
  if (rc == MKX_SUCCESS && gpu) rc = part_init(c, s, &d);
  /* rc, mode, CTAs (no GPU: no limit), no SMs of its own under MPS */
  int bid[5] = {rc, 0, 1 << 30, 0, 0};
  if (gpu && s->ranks > 1)
    bid[1] = d.mps ? MKX_SHARE_MPS : MKX_SHARE_TIMESLICED;
  if (gpu)
    bid[2] = mkx_gpu_share_bid(s->ranks, d.mps, d.dev_sms, s->ctx_sms, s->part,
                               c->opt.gpu_ctas);
  bid[3] = gpu && d.mps && s->ranks > 1 && s->part == MKX_PART_NONE;
  bid[4] = gpu && node_on_gpu(c, mine, all);
  int(*got)[5] = malloc(sizeof *got * (size_t)c->size);
  if (!got) return mkx_error(MKX_ERR_NOMEM, "GPU share agreement");
  int orc = mkx_comm_exchange(c, bid, got, sizeof bid, "GPU share agreement");
  s->mode = MKX_SHARE_NONE;
  s->ctas = 1 << 30;
  s->unsafe = 0;
  s->node_gpu = 1;
  for (int q = 0; orc == MKX_SUCCESS && q < c->size; q++) {
    if (got[q][0] != MKX_SUCCESS && rc == MKX_SUCCESS)
      rc = mkx_error(MKX_ERR_PEER, "GPU share: rank %d failed (%s)", q,
                     MKX_Error_string(got[q][0]));
    if (got[q][1] > s->mode) s->mode = got[q][1];
    if (got[q][2] < s->ctas) s->ctas = got[q][2];
    s->unsafe |= got[q][3];
    s->node_gpu &= got[q][4];
  }
  free(got);
  MKX_TRY(orc);
  if (!gpu || s->ctas >= d.dev_sms) s->ctas = 0;
  mkx_log(MKX_LOG_INFO,
          "GPU: %s, %d rank(s) on it, %d of %d SMs for this rank (%s), "
          "fused kernels take %d CTAs%s",
          mkx_gpu_share_name(s->mode), s->ranks, s->ctx_sms, s->dev_sms,
          mkx_gpu_part_name(s->part), s->ctas ? s->ctas : s->dev_sms,
          s->unsafe ? "; a rank has no SMs of its own" : "");
  return rc;
}

int mkx_comm_part_fork(MKX_Comm c, void *user, void **run) {
  return mkx_part_fork(c->part, &c->lane, user, run);
}

int mkx_comm_part_join(MKX_Comm c, void *user, void *run) {
  return mkx_part_join(&c->lane, user, run);
}

int mkx_comm_map_topology(MKX_Comm c) {
  char mine[PCI_LEN] = "";
  char(*all)[PCI_LEN] = malloc(sizeof *all * (size_t)c->size);
  if (all == NULL) return mkx_error(MKX_ERR_NOMEM, "topology exchange");
  if (c->device >= 0 && mkx_device_pci_id(c->device, mine, sizeof mine))
    mine[0] = '\0';
  int rc = mkx_comm_exchange(c, mine, all, sizeof mine, "GPU PCI ids");
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
