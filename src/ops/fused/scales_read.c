/* The fp8 scales of a GPU path, read back and checked before any work is
 * enqueued (fused.h: mkx_fused_scales_read): so a bad scale fails the call
 * with nothing written, as on the host and staged paths.  The read-back is
 * a stream synchronisation, which a capture cannot hold. */
#include <stdlib.h>
#include "core/error.h"
#include "host/scales.h"

#if HAVE_CUDA
#include "core/cuda_rc.h"
#include "ops/fused/fused.h"

int mkx_fused_scales_read(const char *fn, const mkx_scale_array *arr, int count,
                          float *host, cudaStream_t st) {
  int64_t total = 0;
  for (int i = 0; i < count; i++) total += arr[i].n;
  if (total == 0) return MKX_SUCCESS;
  enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  MKX_TRY(mkx_cuda_rc(cudaStreamIsCapturing(st, &cap), fn,
                      "cudaStreamIsCapturing"));
  if (cap != cudaStreamCaptureStatusNone)
    return mkx_error(MKX_ERR_UNSUPPORTED,
                     "%s: fp8 scales are read back before the run (a stream "
                     "synchronisation), which a capture cannot hold",
                     fn);
  float *h = host ? host : malloc(sizeof(float) * (size_t)total);
  if (!h) return mkx_error(MKX_ERR_NOMEM, "%s: host copy of the scales", fn);
  cudaError_t e = cudaSuccess;
  int64_t at = 0;
  for (int i = 0; i < count && e == cudaSuccess; at += arr[i].n, i++)
    if (arr[i].n)
      e = cudaMemcpyAsync(h + at, arr[i].p, sizeof(float) * (size_t)arr[i].n,
                          cudaMemcpyDeviceToHost, st);
  if (e == cudaSuccess) e = cudaStreamSynchronize(st);
  int rc = mkx_cuda_rc(e, fn, "reading the scales back");
  at = 0;
  for (int i = 0; i < count && rc == MKX_SUCCESS; at += arr[i].n, i++)
    rc = mkx_scales_check_values(fn, arr[i].name, h + at, arr[i].n);
  if (h != host) free(h);
  return rc;
}
#else
typedef int mkx_fused_scales_read_unused; /* ISO C: not an empty unit */
#endif
