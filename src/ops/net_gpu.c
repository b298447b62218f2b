/* What the calls driven by the GPU over nodes of one rank share
 * (net_gpu.h). */
#include <string.h>
#include "core/error.h"

#if HAVE_CUDA
#include "core/comm_net.h"
#include "ops/net_gpu.h"

const char *mkx_net_fits_comm(MKX_Comm c) {
  if (c->opt.hier_gemm != MKX_HIER_GEMM_PROXY)
    return "option hier_gemm is not proxy";
  if (c->place.num_nodes != c->size)
    return "hier_gemm=proxy takes nodes of one rank only";
  if (c->size > MKX_TP_MAX) return "hier_gemm=proxy takes at most 8 nodes";
  if (!mkx_comm_net_gpu(c)) return "no network ring mapped for the GPU";
  return NULL;
}

int mkx_net_start_ok(MKX_Comm c, MKX_Stream st, const char *fn) {
  enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  MKX_TRY(mkx_cuda_rc(cudaStreamIsCapturing((cudaStream_t)st, &cap), fn,
                      "cudaStreamIsCapturing"));
  if (cap != cudaStreamCaptureStatusNone)
    return mkx_error(MKX_ERR_UNSUPPORTED,
                     "%s: option hier_gemm=proxy: calls cannot be captured "
                     "in a CUDA graph",
                     fn);
  return mkx_comm_net_gpu_after(c, st);
}

void mkx_net_desc_fill(MKX_Comm c, const mkx_tp_ws *ws, uint64_t *words,
                       mkx_tp_net_desc *d) {
  memset(d, 0, sizeof *d);
  mkx_proxy_gpu_dev(mkx_comm_net_gpu(c), &d->proxy);
  d->epoch = words;
  d->last_seq = words + 1;
  d->rank = c->rank;
  d->size = c->size;
  d->slot0 = mkx_comm_net_gpu_slot(c, 0);
  d->words = MKX_COMM_NET_GPU_WORDS;
  d->region = MKX_COMM_NET_GPU_REGION;
  d->row_bytes = 1;
  d->chunk_tiles = 1;
  mkx_tp_sync_fill(c, ws, 0, &d->sync);
}
#else
typedef int mkx_net_gpu_unused; /* ISO C: not an empty unit */
#endif
