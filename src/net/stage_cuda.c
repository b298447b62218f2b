/* The CUDA stager of the tcp and shm transports (mkx_net_stager in
 * net.h): device memory goes through pinned host buffers, copied on two
 * non-blocking streams of the endpoint's own (one per direction), so a
 * copy never waits behind a kernel on the legacy default stream, which may
 * be the kernel that waits for the copy.  For shm it also exports device
 * regions by CUDA IPC and copies into peers' regions on the sending
 * stream.  Without CUDA there is no stager and tcp refuses device memory. */
#include <stdlib.h>
#include <string.h>
#include "core/error.h"
#include "net/net.h"
#if HAVE_CUDA
#include <cuda.h>
#include <cuda_runtime.h>
#include "core/cuda_rc.h"
#include "core/device.h"

/* 1 MiB: large enough that a copy costs more than its launch, small
 * enough to keep two per endpoint. */
#define STAGE_BYTES (1u << 20)

typedef struct cuda_stage {
  int device;
  cudaStream_t out, in; /* device -> host (senders), host -> device */
} cuda_stage;

static int device_of(const void *p) {
  int count = 0;
  struct cudaPointerAttributes at;
  if (!p) return -1;
  /* No driver or no GPU: everything is host memory (and no context is
   * created by asking). */
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0 ||
      cudaPointerGetAttributes(&at, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  return at.type == cudaMemoryTypeDevice || at.type == cudaMemoryTypeManaged
             ? at.device
             : -1;
}

static void stage_close(void *ctx) {
  cuda_stage *s = ctx;
  if (!s) return;
  if (cudaSetDevice(s->device) == cudaSuccess) {
    if (s->out) MKX_CUDA_RELEASE(cudaStreamDestroy(s->out));
    if (s->in) MKX_CUDA_RELEASE(cudaStreamDestroy(s->in));
  }
  (void)cudaGetLastError();
  free(s);
}

static int stage_open(int device, void **ctx) {
  cuda_stage *s = calloc(1, sizeof *s);
  *ctx = NULL;
  if (!s) return mkx_error(MKX_ERR_NOMEM, "tcp staging");
  s->device = device;
  int rc = mkx_cuda_rc(cudaSetDevice(device), "tcp staging", "cudaSetDevice");
  if (rc == MKX_SUCCESS)
    rc = mkx_cuda_rc(cudaStreamCreateWithFlags(&s->out, cudaStreamNonBlocking),
                     "tcp staging", "cudaStreamCreateWithFlags");
  if (rc == MKX_SUCCESS)
    rc = mkx_cuda_rc(cudaStreamCreateWithFlags(&s->in, cudaStreamNonBlocking),
                     "tcp staging", "cudaStreamCreateWithFlags");
  if (rc != MKX_SUCCESS) {
    stage_close(s);
    return rc;
  }
  *ctx = s;
  return MKX_SUCCESS;
}

static int host_alloc(void *ctx, size_t bytes, void **p) {
  cuda_stage *s = ctx;
  MKX_CUDA_TRY(cudaSetDevice(s->device), "tcp staging");
  return mkx_cuda_rc(cudaHostAlloc(p, bytes, cudaHostAllocPortable),
                     "tcp staging", "cudaHostAlloc");
}

static void host_free(void *ctx, void *p) {
  (void)ctx;
  if (p) MKX_CUDA_RELEASE(cudaFreeHost(p));
  (void)cudaGetLastError();
}

/* Each thread that copies makes the endpoint's device its own first. */
static int copy(const cuda_stage *s, void *dst, const void *src, size_t len,
                enum cudaMemcpyKind kind, cudaStream_t st) {
  MKX_CUDA_TRY(cudaSetDevice(s->device), "tcp staging");
  MKX_TRY(mkx_cuda_rc(cudaMemcpyAsync(dst, src, len, kind, st), "tcp staging",
                      kind == cudaMemcpyDeviceToHost ? "copy to the send stage"
                      : kind == cudaMemcpyHostToDevice
                          ? "copy from the receive stage"
                          : "copy into a peer's region"));
  return mkx_cuda_rc(cudaStreamSynchronize(st), "tcp staging",
                     "cudaStreamSynchronize");
}

static int to_host(void *ctx, void *dst, const void *src, size_t len) {
  cuda_stage *s = ctx;
  return copy(s, dst, src, len, cudaMemcpyDeviceToHost, s->out);
}

static int to_device(void *ctx, void *dst, const void *src, size_t len) {
  cuda_stage *s = ctx;
  return copy(s, dst, src, len, cudaMemcpyHostToDevice, s->in);
}

/* The start of the allocation holding p (the driver's
 * cuPointerGetAttribute). */
static int allocation_start(const void *p, void **start) {
  typedef CUresult (*get_fn)(void *, CUpointer_attribute, CUdeviceptr);
  static get_fn get;
  if (!get) get = (get_fn)mkx_driver_fn("cuPointerGetAttribute", 12000);
  CUdeviceptr at = 0;
  if (!get || get(&at, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                  (CUdeviceptr)(uintptr_t)p) != CUDA_SUCCESS)
    return mkx_error(MKX_ERR_UNSUPPORTED,
                     "shm: no allocation range for device pointer %p", p);
  *start = (void *)(uintptr_t)at;
  return MKX_SUCCESS;
}

static int ipc_export(void *ctx, const void *p, void *handle,
                      uint64_t *offset) {
  cuda_stage *s = ctx;
  void *start = NULL;
  cudaIpcMemHandle_t h;
  _Static_assert(sizeof h <= MKX_NET_IPC_BYTES, "IPC handle size");
  MKX_CUDA_TRY(cudaSetDevice(s->device), "shm IPC");
  MKX_TRY(allocation_start(p, &start));
  MKX_TRY(mkx_cuda_rc(cudaIpcGetMemHandle(&h, start), "shm IPC",
                      "cudaIpcGetMemHandle"));
  memcpy(handle, &h, sizeof h);
  *offset = (uint64_t)((const char *)p - (const char *)start);
  return MKX_SUCCESS;
}

static int ipc_import(void *ctx, const void *handle, void **base) {
  cuda_stage *s = ctx;
  cudaIpcMemHandle_t h;
  memcpy(&h, handle, sizeof h);
  MKX_CUDA_TRY(cudaSetDevice(s->device), "shm IPC");
  return mkx_cuda_rc(
      cudaIpcOpenMemHandle(base, h, cudaIpcMemLazyEnablePeerAccess), "shm IPC",
      "cudaIpcOpenMemHandle of a peer's region");
}

static void ipc_release(void *ctx, void *base) {
  cuda_stage *s = ctx;
  if (cudaSetDevice(s->device) == cudaSuccess) cudaIpcCloseMemHandle(base);
  (void)cudaGetLastError();
}

static int copy_any(void *ctx, void *dst, const void *src, size_t len) {
  cuda_stage *s = ctx;
  return copy(s, dst, src, len, cudaMemcpyDefault, s->out);
}

static const mkx_net_stager cuda_stager = {
    .name = "cuda",
    .stage_bytes = STAGE_BYTES,
    .device_of = device_of,
    .open = stage_open,
    .close = stage_close,
    .host_alloc = host_alloc,
    .host_free = host_free,
    .to_host = to_host,
    .to_device = to_device,
    .ipc_export = ipc_export,
    .ipc_import = ipc_import,
    .ipc_release = ipc_release,
    .copy = copy_any,
};

const mkx_net_stager *mkx_net_cuda_stager(void) { return &cuda_stager; }
#else
const mkx_net_stager *mkx_net_cuda_stager(void) { return NULL; }
#endif
