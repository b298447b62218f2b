/* The address blob each rank of the verbs transport publishes through the
 * bootstrap: shared by the provider and its unit test, so the test reads
 * the layout the provider writes. */
#ifndef MKX_NET_VERBS_BLOB_H
#define MKX_NET_VERBS_BLOB_H

#include <stdint.h>

#define BLOB_MAGIC 0x4d4b5856u /* "MKXV" */

typedef struct verbs_blob {
  uint32_t magic;
  uint16_t lid;
  uint8_t port, mtu;
  uint8_t gid[16];
  uint64_t sig_addr;
  uint32_t sig_rkey;
  uint32_t psn;
  uint32_t qpn[]; /* [size]: the QP this rank uses towards rank r */
} verbs_blob;

#endif
