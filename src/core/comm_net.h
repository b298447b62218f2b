/* The communicator's network endpoint: a transport (src/net) and its
 * proxy (src/proxy), opened when the communicator spans several nodes,
 * with staging regions through which the host path's inter-node traffic
 * flows and the counters that show how many bytes crossed nodes. */
#ifndef MKX_CORE_COMM_NET_H
#define MKX_CORE_COMM_NET_H

#include <stddef.h>
#include <stdint.h>
#include "mkx.h"

/* Collective; a no-op on a single node. */
int mkx_comm_net_open(MKX_Comm c);
/* Collective (meets the peers first, so nobody closes mid-transfer). */
void mkx_comm_net_close(MKX_Comm c);

/* One inter-node exchange: this rank sends send_len[q] bytes from
 * send[q] to each rank q (0: nothing), and receives recv_len[q] bytes
 * from each rank q into recv[q].  Every rank must call it with lengths
 * that match pairwise (what q sends to r is what r expects from q).
 * Collective over the communicator (the staging regions may grow). */
int mkx_comm_net_exchange(MKX_Comm c, const void *const *send,
                          const size_t *send_len, void *const *recv,
                          const size_t *recv_len);

/* Payload bytes this rank has sent over the network so far (0 without an
 * endpoint). */
uint64_t mkx_comm_net_bytes_sent(MKX_Comm c);

#endif
