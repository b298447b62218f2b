/* A proxy a GPU drives: its command ring is host memory mapped
 * for the GPU (cudaHostAlloc, mapped and portable), and so are the
 * endpoint's signal words (cudaHostRegister; mkx_net_signals_alloc makes
 * them whole pages), so a kernel can post commands and wait for
 * completions and signals with kernels/proxy/proxy_dev.cuh.  Built only
 * with CUDA.
 *
 *   mkx_proxy_gpu_create(net, device, entries, timeout, &g);
 *   mkx_proxy_add_region(mkx_proxy_gpu_proxy(g), ...);   as for any proxy
 *   mkx_proxy_start(mkx_proxy_gpu_proxy(g), gpu_map.cpus);
 *   mkx_proxy_gpu_dev(g, &d);  kernel<<<...>>>(d, ...);
 *   ... mkx_proxy_gpu_status(g)->code after the kernel: 0 or the failure
 *   mkx_proxy_gpu_destroy(g);  stops the proxy first
 *
 * One proxy drives an endpoint: do not run this one beside another proxy
 * on the same endpoint (they would take each other's completions). */
#ifndef MKX_PROXY_PROXY_GPU_H
#define MKX_PROXY_PROXY_GPU_H

#include <stdint.h>
#include "net/net.h"
#include "proxy/proxy.h"
#include "proxy/proxy_dev.h" /* kernels/proxy: the kernel's descriptor */

typedef struct mkx_proxy_gpu mkx_proxy_gpu;

/* A proxy over `net` (opened and connected) whose ring of `entries`
 * commands and the endpoint's signal words are mapped for CUDA device
 * `device` (made current on the calling thread).  timeout_ms bounds the
 * proxy's waits and, in nanoseconds, every wait of the kernels. */
int mkx_proxy_gpu_create(mkx_net *net, int device, uint32_t entries,
                         int64_t timeout_ms, mkx_proxy_gpu **out);
mkx_proxy *mkx_proxy_gpu_proxy(const mkx_proxy_gpu *g);
/* The kernel's descriptor: device addresses, entries, bound, status. */
void mkx_proxy_gpu_dev(const mkx_proxy_gpu *g, mkx_proxy_dev *d);
/* The kernels' first failure (host view; read it after the kernel). */
const mkx_proxy_dev_status *mkx_proxy_gpu_status(const mkx_proxy_gpu *g);
void mkx_proxy_gpu_clear_status(mkx_proxy_gpu *g);
/* Stops the proxy (if running) and releases the mappings. */
void mkx_proxy_gpu_destroy(mkx_proxy_gpu *g);

#endif
