/* Device choice and thin, checked wrappers over the CUDA runtime. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/device.h"
#include "core/error.h"
#include "core/log.h"
#if HAVE_CUDA
#include <cuda.h>
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>
#include "core/cuda_rc.h"
#endif

/* Launchers publish the rank within the host under several names. */
static const char *const local_rank_vars[] = {
    "SLURM_LOCALID",     "OMPI_COMM_WORLD_LOCAL_RANK",
    "MPI_LOCALRANKID",   "MV2_COMM_WORLD_LOCAL_RANK",
    "PALS_LOCAL_RANKID", NULL};

static int launcher_local_rank(const char **var) {
  for (int i = 0; local_rank_vars[i]; i++) {
    const char *v = getenv(local_rank_vars[i]);
    char *end;
    long x = v ? strtol(v, &end, 10) : -1;
    if (v && end != v && *end == '\0' && x >= 0) {
      *var = local_rank_vars[i];
      return (int)x;
    }
  }
  return -1;
}

#if HAVE_CUDA
/* What an MPS failure asks of the user ("" for other errors): a server
 * gone mid-job fails every client of the GPU, which only a restart after
 * the daemon's mends. */
static const char *mps_hint(cudaError_t e) {
  switch (e) {
    case cudaErrorMpsConnectionFailed:
    case cudaErrorMpsRpcFailure:
    case cudaErrorMpsServerNotReady:
    case cudaErrorMpsClientTerminated:
      return "; the GPU's MPS server is gone or failing: every rank on this "
             "GPU must start again once the daemon runs "
             "(nvidia-cuda-mps-control "
             "-d, the same CUDA_MPS_PIPE_DIRECTORY)";
    case cudaErrorMpsMaxClientsReached:
    case cudaErrorMpsMaxConnectionsReached:
      return "; the GPU's MPS server has no room for this rank: fewer ranks "
             "per GPU, or a lower CUDA_DEVICE_MAX_CONNECTIONS";
    default:
      return "";
  }
}

int mkx_cuda_rc_at(cudaError_t e, const char *where, const char *what,
                   const char *file, int line) {
  if (e == cudaSuccess) return MKX_SUCCESS;
  (void)cudaGetLastError();
  mkx_log(MKX_LOG_DEBUG, "%s:%d: %s failed: %s", file, line, what,
          cudaGetErrorName(e));
  return mkx_error(
      e == cudaErrorMemoryAllocation ? MKX_ERR_NOMEM : MKX_ERR_CUDA,
      "%s%s%s: %s (%s)%s", where ? where : "", where ? ": " : "", what,
      cudaGetErrorString(e), cudaGetErrorName(e), mps_hint(e));
}

void mkx_cuda_release_at(cudaError_t e, const char *what, const char *file,
                         int line) {
  if (e == cudaSuccess) return;
  (void)cudaGetLastError();
  const int exiting = e == cudaErrorCudartUnloading;
  mkx_log(exiting ? MKX_LOG_DEBUG : MKX_LOG_WARN, "%s:%d: %s failed: %s (%s)",
          file, line, what, cudaGetErrorString(e), cudaGetErrorName(e));
}

int mkx_device_count(void) {
  int n = 0; /* stays 0 without a driver: the runtime does not write it */
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

int mkx_device_set(int device) {
  return mkx_cuda_rc(cudaSetDevice(device), NULL, "cudaSetDevice");
}

int mkx_device_hopper(int device) {
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor,
                             device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor,
                             device) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return major == 9 && minor == 0;
}

int mkx_pointer_kind(const void *p) {
  struct cudaPointerAttributes at;
  if (p == NULL || cudaPointerGetAttributes(&at, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return MKX_MEM_HOST;
  }
  return at.type == cudaMemoryTypeDevice || at.type == cudaMemoryTypeManaged
             ? MKX_MEM_DEVICE
             : MKX_MEM_HOST;
}

int mkx_device_name(int device, char *buf, size_t len) {
  struct cudaDeviceProp prop;
  int rc = mkx_cuda_rc(cudaGetDeviceProperties(&prop, device), NULL,
                       "cudaGetDeviceProperties");
  if (rc == MKX_SUCCESS)
    snprintf(buf, len, "%s (sm_%d%d, %d SMs, %.0f GiB)", prop.name, prop.major,
             prop.minor, prop.multiProcessorCount,
             prop.totalGlobalMem / 1073741824.0);
  return rc;
}

int mkx_device_pci_id(int device, char *buf, size_t len) {
  return mkx_cuda_rc(cudaDeviceGetPCIBusId(buf, (int)len, device), NULL,
                     "cudaDeviceGetPCIBusId");
}

int mkx_device_peer_matrix(int *n, char pcis[][32], int *can) {
  int count = mkx_device_count();
  *n = count < MKX_MAX_VISIBLE ? count : MKX_MAX_VISIBLE;
  for (int i = 0; i < *n; i++) {
    MKX_TRY(mkx_device_pci_id(i, pcis[i], 32));
    for (int j = 0; j < *n; j++) {
      int ok = i == j;
      if (i != j)
        MKX_TRY(mkx_cuda_rc(cudaDeviceCanAccessPeer(&ok, i, j), NULL,
                            "cudaDeviceCanAccessPeer"));
      can[i * *n + j] = ok;
    }
  }
  return MKX_SUCCESS;
}

int mkx_device_alloc(size_t bytes, void **p) {
  return mkx_cuda_rc(cudaMalloc(p, bytes ? bytes : 1), NULL, "cudaMalloc");
}

int mkx_device_free(void *p) {
  return mkx_cuda_rc(cudaFree(p), NULL, "cudaFree");
}

int mkx_device_copy(void *dst, const void *src, size_t bytes, int to_device,
                    void *stream) {
  /* From pageable memory cudaMemcpy may return before the data has
   * landed, and work on a non-blocking stream is not ordered after it:
   * copy on the caller's stream and wait for it. */
  cudaStream_t s = (cudaStream_t)stream;
  MKX_TRY(mkx_cuda_rc(
      cudaMemcpyAsync(
          dst, src, bytes,
          to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, s),
      NULL,
      to_device ? "cudaMemcpyAsync to device" : "cudaMemcpyAsync to host"));
  return mkx_cuda_rc(cudaStreamSynchronize(s), NULL,
                     "cudaStreamSynchronize after a copy");
}

int mkx_stream_sync(void *stream) {
  return mkx_cuda_rc(cudaStreamSynchronize((cudaStream_t)stream), NULL,
                     "cudaStreamSynchronize");
}

int mkx_stream_capturing(void *stream) {
  enum cudaStreamCaptureStatus s = cudaStreamCaptureStatusNone;
  if (!stream) return 0;
  if (cudaStreamIsCapturing((cudaStream_t)stream, &s) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return s != cudaStreamCaptureStatusNone;
}

void mkx_trace_push(const char *name) { nvtxRangePushA(name); }
void mkx_trace_pop(void) { nvtxRangePop(); }

int mkx_capture_relax(int on) {
  enum cudaStreamCaptureMode m = cudaStreamCaptureModeRelaxed;
  if (!on) return 0;
  if (cudaThreadExchangeStreamCaptureMode(&m) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return (int)m + 1;
}

void mkx_capture_restore(int saved) {
  enum cudaStreamCaptureMode m = (enum cudaStreamCaptureMode)(saved - 1);
  if (saved > 0 && cudaThreadExchangeStreamCaptureMode(&m) != cudaSuccess)
    (void)cudaGetLastError();
}

void *mkx_driver_fn(const char *name, unsigned version) {
  void *p = NULL;
  enum cudaDriverEntryPointQueryResult q;
  if (cudaGetDriverEntryPointByVersion(name, &p, version, cudaEnableDefault,
                                       &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess) {
    (void)cudaGetLastError();
    return NULL;
  }
  return p;
}

/* Contexts on the device are MPS clients (0 where the driver cannot say). */
static int device_mps(int device) {
  typedef CUresult (*get_fn)(CUdevice *, int);
  typedef CUresult (*attr_fn)(int *, CUdevice_attribute, CUdevice);
  get_fn get = (get_fn)mkx_driver_fn("cuDeviceGet", 2000);
  attr_fn attr = (attr_fn)mkx_driver_fn("cuDeviceGetAttribute", 2000);
  CUdevice d;
  int on = 0;
  if (!get || !attr || get(&d, device) != CUDA_SUCCESS ||
      attr(&on, CU_DEVICE_ATTRIBUTE_MPS_ENABLED, d) != CUDA_SUCCESS)
    return 0;
  return on != 0;
}

/* SMs the current context may use; 0 where it has no SM limit of its own
 * (the driver supports execution affinity under MPS only). */
static int context_sms(void) {
  typedef CUresult (*aff_fn)(CUexecAffinityParam *, CUexecAffinityType);
  aff_fn aff = (aff_fn)mkx_driver_fn("cuCtxGetExecAffinity", 11040);
  CUexecAffinityParam p;
  memset(&p, 0, sizeof p);
  if (!aff || aff(&p, CU_EXEC_AFFINITY_TYPE_SM_COUNT) != CUDA_SUCCESS) return 0;
  return (int)p.param.smCount.val;
}

/* CUDA_MPS_ACTIVE_THREAD_PERCENTAGE of this process, 0 if not set. */
static int mps_percentage(void) {
  const char *v = getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE");
  char *end;
  const double p = v ? strtod(v, &end) : 0;
  return v && end != v && p > 0 && p < 100 ? (int)p : 0;
}

int mkx_device_sm_info(int device, mkx_device_sms *out) {
  int seen = 0;
  memset(out, 0, sizeof *out);
  /* the primary context must exist before its affinity can be read */
  MKX_CUDA_TRY(cudaFree(NULL), NULL);
  /* under MPS this is already the client's share of the SMs */
  MKX_TRY(mkx_cuda_rc(
      cudaDeviceGetAttribute(&seen, cudaDevAttrMultiProcessorCount, device),
      NULL, "cudaDeviceGetAttribute"));
  out->mps = device_mps(device);
  const int ctx = context_sms();
  out->ctx_sms = ctx > 0 && ctx < seen ? ctx : seen;
  /* The GPU's own count, for sharing it fairly: a client limited by
   * CUDA_MPS_ACTIVE_THREAD_PERCENTAGE = P sees P% of it, rounded one way
   * or the other, so where that is not exact take the smaller count it
   * may come from.  A limit set in the MPS daemon instead cannot be seen:
   * the share then errs on the small side only. */
  const int pct = out->mps ? mps_percentage() : 0;
  out->dev_sms = !pct               ? seen
                 : seen * 100 % pct ? (seen - 1) * 100 / pct
                                    : seen * 100 / pct;
  if (out->dev_sms < seen) out->dev_sms = seen;
  return MKX_SUCCESS;
}
#else
int mkx_device_count(void) { return 0; }
int mkx_device_hopper(int device) {
  (void)device;
  return 0;
}
int mkx_device_set(int device) {
  return mkx_error(MKX_ERR_UNSUPPORTED, "device %d: MKX built without CUDA",
                   device);
}
int mkx_pointer_kind(const void *p) {
  (void)p;
  return MKX_MEM_HOST;
}
int mkx_device_name(int device, char *buf, size_t len) {
  snprintf(buf, len, "none");
  return mkx_device_set(device);
}
int mkx_device_pci_id(int device, char *buf, size_t len) {
  snprintf(buf, len, "none");
  return mkx_device_set(device);
}
int mkx_device_peer_matrix(int *n, char pcis[][32], int *can) {
  (void)pcis, (void)can;
  *n = 0;
  return MKX_SUCCESS;
}
int mkx_device_alloc(size_t bytes, void **p) {
  (void)bytes, (void)p;
  return mkx_device_set(0);
}
int mkx_device_free(void *p) {
  (void)p;
  return mkx_device_set(0);
}
int mkx_device_copy(void *dst, const void *src, size_t bytes, int to_device,
                    void *stream) {
  (void)dst, (void)src, (void)bytes, (void)to_device, (void)stream;
  return mkx_device_set(0);
}
int mkx_stream_sync(void *stream) {
  (void)stream;
  return MKX_SUCCESS;
}
int mkx_stream_capturing(void *stream) {
  (void)stream;
  return 0;
}
int mkx_capture_relax(int on) {
  (void)on;
  return 0;
}
void mkx_capture_restore(int saved) { (void)saved; }
void mkx_trace_push(const char *name) { (void)name; }
void mkx_trace_pop(void) {}
int mkx_device_sm_info(int device, mkx_device_sms *out) {
  memset(out, 0, sizeof *out);
  return mkx_device_set(device);
}
void *mkx_driver_fn(const char *name, unsigned version) {
  (void)name, (void)version;
  return NULL;
}
#endif

int mkx_device_pick(int count, int path, int opt_device, int host_local_rank,
                    int *device, char *why, size_t why_len) {
  const char *var = NULL;
  *device = -1;
  if (count == 0) {
    snprintf(why, why_len, "no usable CUDA device");
    return path == MKX_PATH_OPT_GPU
               ? mkx_error(MKX_ERR_UNSUPPORTED,
                           "option path=gpu but no usable CUDA device")
               : MKX_SUCCESS;
  }
  if (opt_device >= 0) {
    if (opt_device >= count)
      return mkx_error(MKX_ERR_INVALID_ARG,
                       "option device=%d but only %d device(s) visible",
                       opt_device, count);
    *device = opt_device;
    snprintf(why, why_len, "option device=%d", opt_device);
  } else if (count == 1) {
    *device = 0;
    snprintf(why, why_len, "the only visible device");
  } else {
    int lr = launcher_local_rank(&var);
    *device = (lr >= 0 ? lr : host_local_rank) % count;
    snprintf(why, why_len, "local rank %d (%s) modulo %d devices",
             lr >= 0 ? lr : host_local_rank, lr >= 0 ? var : "MPI placement",
             count);
  }
  return MKX_SUCCESS;
}

int mkx_device_choose(const mkx_options *opt, int host_local_rank, int *device,
                      char *why, size_t why_len) {
  return mkx_device_pick(mkx_device_count(), opt->path, opt->device,
                         host_local_rank, device, why, why_len);
}
