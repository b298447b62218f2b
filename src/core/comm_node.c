/* The ranks of one node as an MKX communicator of their own, so that a
 * call over several nodes can run its node's part as a single-node call
 * (src/ops/nodes/hier_nvlink.c).  Made on first use, collectively over the whole
 * communicator (each node makes its own at the same time). */
#include <stdio.h>
#include "core/comm.h"
#include "core/error.h"

static int make_node(MKX_Comm c, MKX_Comm *out) {
  MPI_Info info;
  char dev[16];
  /* the parent's GPU, whatever the launcher's local rank says; one node */
  snprintf(dev, sizeof dev, "%d", c->device);
  if (MPI_Info_create(&info) != MPI_SUCCESS)
    return mkx_error(MKX_ERR_MPI, "MPI_Info_create (node communicator)");
  int rc = MKX_SUCCESS;
  if (MPI_Info_set(info, "mkx_device", dev) != MPI_SUCCESS ||
      MPI_Info_set(info, "mkx_virtual_node_size", "0") != MPI_SUCCESS)
    rc = mkx_error(MKX_ERR_MPI, "MPI_Info_set (node communicator)");
  /* the node's ranks create it together: each takes part, failed or not,
   * and the caller agrees on the outcome */
  const int crc = MKX_Comm_create(c->node_mpi, info, out);
  if (MPI_Info_free(&info) != MPI_SUCCESS && rc == MKX_SUCCESS)
    rc = mkx_error(MKX_ERR_MPI, "MPI_Info_free (node communicator)");
  if (rc == MKX_SUCCESS) rc = crc;
  if (rc != MKX_SUCCESS) return rc;
  (*out)->opt = c->opt; /* options given by MPI_Info reach it too */
  (*out)->opt.virtual_node_size = 0;
  /* Every node's part runs at once: the ranks of the other (virtual)
   * nodes on this GPU share its SMs too, which only the parent sees. */
  (*out)->share = c->share;
  mkx_part_lane_free(&(*out)->lane);
  mkx_sm_part_put((*out)->part);
  (*out)->part = mkx_sm_part_ref(c->part);
  return mkx_part_lane_init((*out)->part, &(*out)->lane);
}

int mkx_comm_node(MKX_Comm c, MKX_Comm *node) {
  if (c->node_comm) return *node = c->node_comm, MKX_SUCCESS;
  if (c->node_mpi == MPI_COMM_NULL)
    return mkx_error(MKX_ERR_INTERNAL, "node communicator: no node group");
  MKX_Comm made = NULL;
  int rc = make_node(c, &made);
  uint64_t bad = 0;
  /* every node must have one before any rank uses it */
  int arc = mkx_comm_agree_u64(c, rc != MKX_SUCCESS, MKX_AGREE_OR, &bad,
                               "node communicator");
  if (arc == MKX_SUCCESS && bad && rc == MKX_SUCCESS)
    arc = mkx_error(MKX_ERR_PEER,
                    "node communicator: failed on another "
                    "node");
  if (rc == MKX_SUCCESS) rc = arc;
  if (rc != MKX_SUCCESS) {
    if (made) MKX_Comm_free(&made);
    return rc;
  }
  c->node_comm = made;
  *node = made;
  return MKX_SUCCESS;
}
