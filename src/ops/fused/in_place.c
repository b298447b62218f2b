/* Operands that the node's ranks read in place (option tp_pull): where
 * every rank of a node is on one GPU, a rank's A and B are as near to its
 * peers as to itself, so the overlapped calls map them into the peers and
 * load from them directly instead of moving rows or partial products
 * (kernels/tp/pull.cu). */
#include <stdlib.h>
#include "core/error.h"
#include "ops/op.h"

#if HAVE_CUDA
#include "ops/fused/fused.h"

int mkx_tp_wants_pull(MKX_Comm c) {
  if (c->size < 2 || c->opt.tp_pull == MKX_PULL_NO) return 0;
  return c->opt.tp_pull == MKX_PULL_YES || c->share.node_gpu;
}

int mkx_tp_node_values(MKX_Comm c, const int64_t *mine, int n, int64_t *out) {
  int64_t *all = malloc(sizeof *all * (size_t)n * (size_t)c->size);
  if (!all) return mkx_error(MKX_ERR_NOMEM, "values of the node's ranks");
  int rc = mkx_comm_exchange(c, mine, all, sizeof *all * (size_t)n,
                             "values of the node's ranks");
  for (int q = 0; rc == MKX_SUCCESS && q < c->size; q++)
    for (int i = 0; i < n; i++)
      out[c->place.local_rank_of[q] * n + i] = all[q * n + i];
  free(all);
  return rc;
}

int mkx_tp_map_matrix(MKX_Comm c, const void *p, int64_t rows, int64_t cols,
                      int64_t ld, size_t es, mkx_symm_buf *b) {
  const size_t bytes =
      rows > 0 ? ((size_t)(rows - 1) * (size_t)ld + (size_t)cols) * es : 0;
  return mkx_symm_register(c, (void *)p, bytes, b);
}
int mkx_tp_pin_if_captured(MKX_Comm c, cudaStream_t st, const char *fn,
                           const mkx_symm_buf *const *bufs, int n) {
  enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  MKX_TRY(mkx_cuda_rc(cudaStreamIsCapturing(st, &cap), fn, "capture status"));
  for (int i = 0; cap != cudaStreamCaptureStatusNone && i < n; i++)
    MKX_TRY(mkx_symm_buf_pin(c, bufs[i]));
  return MKX_SUCCESS;
}

int mkx_tp_pull_end(MKX_Comm c, const mkx_fused_ws *ws, const char *fn,
                    cudaStream_t st) {
  mkx_fused_sync s;
  mkx_fused_sync_fill(c, ws, 0, &s);
  return mkx_fused_launch_rc(
      mkx_fused_meet(&s, MKX_FUSED_OFF_PULLED, MKX_FUSED_AT_PULLED, st), fn,
      "meet after the GEMM");
}
#else
typedef int mkx_in_place_unused; /* ISO C: not an empty unit */
#endif
