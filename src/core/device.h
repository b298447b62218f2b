/* The CUDA side of the host code: device choice, pointer kinds and error
 * mapping.  Without CUDA in the build every query answers "no GPU". */
#ifndef MKX_CORE_DEVICE_H
#define MKX_CORE_DEVICE_H

#include <stddef.h>
#include "core/options.h"

enum { MKX_MEM_HOST = 0, MKX_MEM_DEVICE = 1 };

/* Number of usable CUDA devices; 0 when CUDA is absent, has no driver, or
 * reports any error. */
int mkx_device_count(void);

/* Pick this rank's device (see MKX_Comm_create in mkx.h), or -1 for the
 * host path; `why` receives a short explanation for logs and mkx_info. */
int mkx_device_choose(const mkx_options *opt, int host_local_rank, int *device,
                      char *why, size_t why_len);

/* The choice itself, given the visible device count (unit-testable). */
int mkx_device_pick(int count, int path, int opt_device, int host_local_rank,
                    int *device, char *why, size_t why_len);

/* Make `device` current on the calling thread. */
int mkx_device_set(int device);

/* MKX_MEM_DEVICE for memory a kernel on `device` can read (device, managed
 * or registered), MKX_MEM_HOST otherwise. */
int mkx_pointer_kind(const void *p);

int mkx_device_name(int device, char *buf, size_t len);

/* 1 if `device` is sm_90 (the fused kernels are Hopper code), else 0. */
int mkx_device_hopper(int device);

/* PCI bus id of a device, "0000:1b:00.0" (as cudaDeviceGetPCIBusId). */
int mkx_device_pci_id(int device, char *buf, size_t len);

#define MKX_MAX_VISIBLE 64
/* The visible devices' PCI ids and which pairs have peer access
 * (can[i * n + j]); *n is 0 without a GPU. */
int mkx_device_peer_matrix(int *n, char pcis[][32], int *can);

/* The SMs of `device` and those this process's context on it may use
 * (fewer under MPS with CUDA_MPS_ACTIVE_THREAD_PERCENTAGE or an execution
 * affinity), and whether contexts on it are MPS clients: kernels of several
 * processes then run at once on separate SMs, else the processes take
 * turns in time slices.  The device must be current. */
typedef struct mkx_device_sms {
  int dev_sms, ctx_sms, mps;
} mkx_device_sms;
int mkx_device_sm_info(int device, mkx_device_sms *out);

/* Device memory (aligned, as cudaMalloc) and copies between host and
 * device on `stream`, complete on return (work on any stream after it
 * sees the data). */
int mkx_device_alloc(size_t bytes, void **p);
int mkx_device_free(void *p);
int mkx_device_copy(void *dst, const void *src, size_t bytes, int to_device,
                    void *stream);
int mkx_stream_sync(void *stream);
/* 1 if `stream` (not NULL) is being captured into a CUDA graph, else 0
 * (0 without CUDA; the legacy stream is never captured itself). */
int mkx_stream_capturing(void *stream);
/* While a captured call makes its plan (on): this thread's capture mode
 * relaxed, so that the CUDA calls of a plan that makes nothing (mapping
 * queries, kernel loads) are not refused as calls that could be unsafe
 * during a capture; returns what mkx_capture_restore takes back. */
int mkx_capture_relax(int on);
void mkx_capture_restore(int saved);

/* A range of the calling thread's timeline in Nsight Systems and other
 * NVTX tools, named `name` (copied); nothing without CUDA or a tool. */
void mkx_trace_push(const char *name);
void mkx_trace_pop(void);

/* A CUDA driver entry point of at least `version` (e.g. 12000), or NULL
 * (no CUDA in the build, no driver): MKX never links libcuda, whose stub
 * would keep programs from starting where there is no driver. */
void *mkx_driver_fn(const char *name, unsigned version);

#endif
