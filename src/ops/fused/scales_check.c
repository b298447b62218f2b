/* The fp8 scales of a GPU path, checked before any work is enqueued
 * (fused.h: mkx_fused_scales_check): so a bad scale fails the call with
 * nothing written, as on the host and staged paths.  Both ways wait for
 * the stream, which a capture cannot hold. */
#include <stdlib.h>
#include "core/error.h"
#include "host/scales.h"

#if HAVE_CUDA
#include "core/cuda_rc.h"
#include "ops/fused/fused.h"

/* Every array read back into h (room for all of them) and checked. */
static int read_back(const char *fn, const mkx_scale_array *arr, int count,
                     float *h, cudaStream_t st) {
  cudaError_t e = cudaSuccess;
  int64_t at = 0;
  for (int i = 0; i < count && e == cudaSuccess; at += arr[i].n, i++)
    if (arr[i].n)
      e = cudaMemcpyAsync(h + at, arr[i].p, sizeof(float) * (size_t)arr[i].n,
                          cudaMemcpyDeviceToHost, st);
  if (e == cudaSuccess) e = cudaStreamSynchronize(st);
  MKX_TRY(mkx_cuda_rc(e, fn, "reading the scales back"));
  at = 0;
  for (int i = 0; i < count; at += arr[i].n, i++)
    MKX_TRY(mkx_scales_check_values(fn, arr[i].name, h + at, arr[i].n));
  return MKX_SUCCESS;
}

/* The first bad index of array a from its blocks' results, or -1. */
static long long first_bad(const mkx_fused_ws *ws, int a) {
  volatile const long long *r = ws->scan_host + a * MKX_FUSED_SCAN_BLOCKS;
  long long bad = -1;
  for (int b = 0; b < MKX_FUSED_SCAN_BLOCKS; b++)
    if (r[b] >= 0 && (bad < 0 || r[b] < bad)) bad = r[b];
  return bad;
}

int mkx_fused_scales_scan_enqueue(const char *fn, const mkx_scale_array *arr,
                                  int count, const mkx_fused_ws *ws,
                                  cudaStream_t st) {
  if (count > MKX_FUSED_SCAN_MAX)
    return mkx_error(MKX_ERR_INTERNAL, "%s: more than %d scale arrays", fn,
                     MKX_FUSED_SCAN_MAX);
  mkx_fused_scan_desc d = {.count = count, .first = ws->scan_dev};
  for (int i = 0; i < count; i++) d.p[i] = arr[i].p, d.n[i] = arr[i].n;
  return mkx_fused_launch_rc(mkx_fused_scales_scan(&d, st), fn,
                             "check of the scales");
}

/* Every array scanned on the GPU; only a bad value itself comes back. */
static int scan(const char *fn, const mkx_scale_array *arr, int count,
                const mkx_fused_ws *ws, cudaStream_t st) {
  MKX_TRY(mkx_fused_scales_scan_enqueue(fn, arr, count, ws, st));
  MKX_TRY(
      mkx_cuda_rc(cudaStreamSynchronize(st), fn, "check of the scales (wait)"));
  for (int i = 0; i < count; i++) {
    const long long bad = first_bad(ws, i);
    if (bad < 0) continue;
    float v = 0.0f;
    /* on st: a legacy-stream copy would wait for other streams' work */
    cudaError_t e = cudaMemcpyAsync(&v, arr[i].p + bad, sizeof v,
                                    cudaMemcpyDeviceToHost, st);
    if (e == cudaSuccess) e = cudaStreamSynchronize(st);
    MKX_TRY(mkx_cuda_rc(e, fn, "reading a bad scale back"));
    return mkx_scales_bad(fn, arr[i].name, bad, v);
  }
  return MKX_SUCCESS;
}

int mkx_fused_scales_check(const char *fn, const mkx_scale_array *arr,
                           int count, const mkx_fused_ws *ws, float *host,
                           cudaStream_t st) {
  int64_t total = 0;
  for (int i = 0; i < count; i++) total += arr[i].n;
  if (total == 0) return MKX_SUCCESS;
  enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  MKX_TRY(mkx_cuda_rc(cudaStreamIsCapturing(st, &cap), fn,
                      "cudaStreamIsCapturing"));
  if (cap != cudaStreamCaptureStatusNone)
    return mkx_error(MKX_ERR_UNSUPPORTED,
                     "%s: fp8 scales are checked before the run (a stream "
                     "synchronisation), which a capture cannot hold",
                     fn);
  if (host) return read_back(fn, arr, count, host, st);
  if (!ws)
    return mkx_error(MKX_ERR_INTERNAL, "%s: no workspace for the scales' check",
                     fn);
  return scan(fn, arr, count, ws, st);
}
#else
typedef int mkx_fused_scales_check_unused; /* ISO C: not an empty unit */
#endif
