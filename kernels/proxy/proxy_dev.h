/*
 * What a kernel needs to drive the network proxy: the device
 * addresses of a proxy's command ring and of the endpoint's signal words,
 * both host memory mapped for the GPU (src/proxy/proxy_gpu.h fills this),
 * the bound of every wait, and where to report the first failure.  Plain
 * C, includable from C11 and CUDA; the device functions are in
 * proxy_dev.cuh.
 */
#ifndef MKX_KERNELS_PROXY_DEV_H
#define MKX_KERNELS_PROXY_DEV_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* MKX codes the device side produces itself (mkx.h is not includable from
 * CUDA here; proxy_gpu.c asserts they are equal). */
#define MKX_PROXY_DEV_ERR_INVALID_ARG 1
#define MKX_PROXY_DEV_ERR_TIMEOUT 11

/* Where a device wait gave up (mkx_proxy_dev_status.where). */
enum {
  MKX_PROXY_AT_POST = 1,     /* waiting for room in the ring */
  MKX_PROXY_AT_COMPLETE = 2, /* waiting for a command's completion */
  MKX_PROXY_AT_SIGNAL = 3    /* waiting for a signal word */
};

/* The first failure of the kernels using a descriptor (host-mapped; the
 * host reads it after the kernel).  code: an MKX_ERR_* value (the ring's
 * error word, or MKX_ERR_TIMEOUT when a bound ran out), 0 if none. */
typedef struct mkx_proxy_dev_status {
  int32_t code;
  int32_t where; /* MKX_PROXY_AT_* */
  int32_t block; /* blockIdx.x of the reporter */
  uint32_t slot; /* the signal slot (MKX_PROXY_AT_SIGNAL) */
  uint64_t what; /* the command's sequence number, or the signal value
                      waited for */
  uint64_t seen; /* `completed`, or the signal word, when it gave up */
} mkx_proxy_dev_status;

typedef struct mkx_proxy_dev {
  void *ring;              /* the mkx_proxy_ring, as the GPU sees it */
  const uint64_t *signals; /* the endpoint's signal words, likewise */
  uint32_t entries;        /* ring entries (a power of two) */
  uint32_t num_signals;
  uint64_t timeout_ns;          /* bound of every device wait */
  mkx_proxy_dev_status *status; /* may be NULL: nothing is reported */
} mkx_proxy_dev;

#ifdef __cplusplus
}
#endif

#endif
