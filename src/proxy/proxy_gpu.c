/* The proxy a GPU drives: mapped ring and signal words; see proxy_gpu.h. */
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime.h>
#include "core/cuda_rc.h"
#include "core/error.h"
#include "core/log.h"
#include "proxy/proxy_gpu.h"

_Static_assert(MKX_PROXY_DEV_ERR_TIMEOUT == MKX_ERR_TIMEOUT,
               "proxy_dev.h's timeout code is MKX_ERR_TIMEOUT");
_Static_assert(MKX_PROXY_DEV_ERR_INVALID_ARG == MKX_ERR_INVALID_ARG,
               "proxy_dev.h's argument code is MKX_ERR_INVALID_ARG");

#define PAGE 4096

struct mkx_proxy_gpu {
  mkx_net *net;
  mkx_proxy *proxy;
  int device;
  void *mem;     /* ring, then status: host view */
  void *mem_dev; /* the same, device view */
  size_t ring_bytes;
  void *signals_host; /* registered range of net->signals */
  const uint64_t *signals_dev;
  int64_t timeout_ms;
};

/* The status record sits after the ring, on its own cache line. */
static size_t status_offset(const mkx_proxy_gpu *g) {
  return (g->ring_bytes + 63) & ~(size_t)63;
}

static int map_signals(mkx_proxy_gpu *g) {
  size_t bytes = ((size_t)g->net->num_signals * sizeof(uint64_t) + PAGE - 1) &
                 ~(size_t)(PAGE - 1);
  void *host = (void *)g->net->signals, *dev = NULL;
  if ((uintptr_t)host % PAGE)
    return mkx_error(MKX_ERR_INTERNAL,
                     "GPU proxy: the %s endpoint's signal "
                     "words are not page-aligned (mkx_net_signals_alloc)",
                     mkx_net_name(g->net));
  MKX_TRY(mkx_cuda_rc(
      cudaHostRegister(host, bytes,
                       cudaHostRegisterMapped | cudaHostRegisterPortable),
      "GPU proxy", "cudaHostRegister of the signal words"));
  g->signals_host = host;
  MKX_TRY(mkx_cuda_rc(cudaHostGetDevicePointer(&dev, host, 0), "GPU proxy",
                      "cudaHostGetDevicePointer of the signal words"));
  g->signals_dev = dev;
  return MKX_SUCCESS;
}

static int setup(mkx_proxy_gpu *g, uint32_t entries) {
  /* Checked here so that a bad size fails before anything is mapped. */
  if (entries == 0 || (entries & (entries - 1)) || entries > (1u << 20))
    return mkx_error(MKX_ERR_INVALID_ARG,
                     "GPU proxy: ring entries %u is not "
                     "a power of two <= 2^20",
                     entries);
  MKX_TRY(mkx_cuda_rc(cudaSetDevice(g->device), "GPU proxy", "cudaSetDevice"));
  g->ring_bytes = mkx_proxy_ring_bytes(entries);
  size_t bytes = status_offset(g) + sizeof(mkx_proxy_dev_status);
  /* Not write-combined: the proxy thread reads the ring. */
  MKX_TRY(
      mkx_cuda_rc(cudaHostAlloc(&g->mem, bytes,
                                cudaHostAllocMapped | cudaHostAllocPortable),
                  "GPU proxy", "cudaHostAlloc of the ring"));
  memset(g->mem, 0, bytes);
  MKX_TRY(mkx_cuda_rc(cudaHostGetDevicePointer(&g->mem_dev, g->mem, 0),
                      "GPU proxy", "cudaHostGetDevicePointer of the ring"));
  MKX_TRY(map_signals(g));
  return mkx_proxy_create(g->net, entries, g->mem, g->timeout_ms, &g->proxy);
}

int mkx_proxy_gpu_create(mkx_net *net, int device, uint32_t entries,
                         int64_t timeout_ms, mkx_proxy_gpu **out) {
  *out = NULL;
  if (!net || !net->signals)
    return mkx_error(MKX_ERR_NULL_POINTER, "GPU proxy: no endpoint");
  mkx_proxy_gpu *g = calloc(1, sizeof *g);
  if (!g) return mkx_error(MKX_ERR_NOMEM, "GPU proxy");
  g->net = net;
  g->device = device;
  g->timeout_ms = timeout_ms;
  int rc = setup(g, entries);
  if (rc != MKX_SUCCESS) {
    mkx_proxy_gpu_destroy(g);
    return rc;
  }
  mkx_log(MKX_LOG_INFO,
          "GPU proxy: %u-entry ring and %u signal words "
          "mapped for device %d",
          entries, net->num_signals, device);
  *out = g;
  return MKX_SUCCESS;
}

mkx_proxy *mkx_proxy_gpu_proxy(const mkx_proxy_gpu *g) { return g->proxy; }

void mkx_proxy_gpu_dev(const mkx_proxy_gpu *g, mkx_proxy_dev *d) {
  memset(d, 0, sizeof *d);
  d->ring = g->mem_dev;
  d->signals = g->signals_dev;
  d->entries = mkx_proxy_ring_of(g->proxy)->entries;
  d->num_signals = g->net->num_signals;
  d->timeout_ns = (uint64_t)(g->timeout_ms > 0 ? g->timeout_ms : 1) * 1000000u;
  d->status = (mkx_proxy_dev_status *)((char *)g->mem_dev + status_offset(g));
}

const mkx_proxy_dev_status *mkx_proxy_gpu_status(const mkx_proxy_gpu *g) {
  return (const mkx_proxy_dev_status *)((const char *)g->mem +
                                        status_offset(g));
}

void mkx_proxy_gpu_clear_status(mkx_proxy_gpu *g) {
  memset((char *)g->mem + status_offset(g), 0, sizeof(mkx_proxy_dev_status));
}

void mkx_proxy_gpu_destroy(mkx_proxy_gpu *g) {
  if (!g) return;
  mkx_proxy_destroy(g->proxy); /* stops the thread before the ring goes */
  if (g->signals_host) MKX_CUDA_RELEASE(cudaHostUnregister(g->signals_host));
  if (g->mem) MKX_CUDA_RELEASE(cudaFreeHost(g->mem));
  (void)cudaGetLastError();
  free(g);
}
