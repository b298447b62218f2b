/* MKX_Tiles_gemm (include/mkx_tiles.h): a closed-source GEMM on tiles.
 * cuBLAS runs in chunks of whole data-tile rows of A, round-robin on two
 * streams so that a chunk waiting for its rows never holds up the one
 * before it; each chunk's wait and signal are the tile set's stream
 * kernels.  One cuBLAS handle and workspace per stream: a workspace used
 * by two streams at once would be raced. */
#include <limits.h>
#include "core/comm.h"
#include "core/device.h"
#include "core/error.h"
#include "core/handles.h"
#include "ops/tiles/chunk_walk.h"
#include "ops/tiles/tile_set.h"
#include "ops/validate.h"

#define FN "MKX_Tiles_gemm"

static int set_ok(MKX_Tiles t, const char *name) {
  if (!mkx_handle_is(t, MKX_HANDLE_TILES))
    return mkx_error(MKX_ERR_INVALID_ARG, "%s: %s is NULL or freed", FN, name);
  return mkx_tile_set_failure(t, FN);
}

static int types_ok(MKX_Datatype ab, MKX_Datatype c) {
  if (ab == MKX_FP32) return c == MKX_FP32;
  return (ab == MKX_BF16 || ab == MKX_FP16) &&
         (c == MKX_BF16 || c == MKX_FP16 || c == MKX_FP32);
}

#if HAVE_CUDA
#include "core/cuda_rc.h"
#include "ops/fused/fused.h"
#include "tiles/tiles.h"

/* The streams and handles, on the first call (never while capturing). */
static int gemm_ready(MKX_Tiles a, cudaStream_t st) {
  if (a->gemm.n) return MKX_SUCCESS;
  if (mkx_stream_capturing(st))
    return mkx_error(MKX_ERR_UNSUPPORTED,
                     "%s: the first call on a tile set makes its cuBLAS "
                     "handles and streams; make it outside a graph capture",
                     FN);
  int rc = mkx_tile_fan_make(&a->gemm, 2, a->comm->part, FN);
  for (int i = 0; rc == MKX_SUCCESS && i < 2; i++)
    rc = mkx_tp_blas_make(&a->blas[i], FN);
  if (rc != MKX_SUCCESS) {
    mkx_tile_fan_free(&a->gemm);
    for (int i = 0; i < 2; i++) mkx_tp_blas_free(a->blas[i]), a->blas[i] = 0;
  }
  return rc;
}

/* One chunk's GEMM of rows [lo, hi) of A on stream s: after its wait,
 * and signalled on this rank's copy of ct (if any). */
static int chunk_gemm(MKX_Tiles a, int q, const mkx_gemm_desc *g, MKX_Tiles ct,
                      int64_t lo, int64_t hi, int i) {
  const MKX_Tiles_dev *d = &a->dev;
  cudaStream_t s = a->gemm.s[i % 2];
  int rc = mkx_tiles_wait_launch(d, q, lo, hi - lo, 0, d->cols, s);
  if (rc) return mkx_cuda_rc((cudaError_t)rc, FN, "wait kernel");
  mkx_gemm_desc c = *g;
  c.m = hi - lo;
  c.a = d->data[q] + (size_t)lo * (size_t)d->ld[q] * (size_t)d->elem_size;
  c.c = (char *)g->c +
        (size_t)lo * (size_t)g->ldc * MKX_Type_size((MKX_Datatype)g->c_type);
  MKX_TRY(mkx_tp_blas_gemm(&a->blas[i % 2], &c, s, FN));
  if (!ct) return MKX_SUCCESS;
  rc = mkx_tiles_signal_launch(&ct->dev, ct->dev.rank, lo, hi - lo, 0, g->n, s);
  return rc ? mkx_cuda_rc((cudaError_t)rc, FN, "signal kernel") : MKX_SUCCESS;
}

/* Consuming an AllGather, the chunks from this rank's own block on (the
 * rows the AllGather lands first); producing for a reduction of ct, in
 * rounds over every rank's block, since a block's sum can start only once
 * every rank has written it (ops/tiles/chunk_walk.h). */
static int chunks(MKX_Tiles a, int q, const mkx_gemm_desc *g, MKX_Tiles ct,
                  int64_t chunk, cudaStream_t user) {
  const MKX_Tiles_dev *d = &a->dev;
  mkx_chunk_walk w;
  mkx_chunk_walk_init(&w, ct ? MKX_WALK_ROUNDS : MKX_WALK_FROM_OWN, d->rows,
                      d->size, d->rank, chunk);
  MKX_TRY(mkx_tile_fan_fork(&a->gemm, user, FN));
  int64_t lo, hi;
  for (int i = 0; mkx_chunk_walk_next(&w, &lo, &hi); i++)
    MKX_TRY(chunk_gemm(a, q, g, ct, lo, hi, i));
  return mkx_tile_fan_join(&a->gemm, user, FN);
}
#endif

int MKX_Tiles_gemm(MKX_Tiles a, int a_rank, const void *B, int64_t n,
                   int64_t ldb, MKX_Trans transb, void *C, int64_t ldc,
                   MKX_Datatype ctype, MKX_Tiles c_tiles, int64_t chunk_rows,
                   MKX_Stream stream) {
  mkx_error_clear();
  MKX_TRY(set_ok(a, "a"));
  if (c_tiles) MKX_TRY(set_ok(c_tiles, "c_tiles"));
#if HAVE_CUDA
  int q;
  MKX_TRY(mkx_tile_set_node_rank(a, FN, a_rank, &q));
  const MKX_Tiles_dev *d = &a->dev;
  if (!d->data[q])
    return mkx_error(MKX_ERR_INVALID_ARG,
                     "%s: tile set a has no buffers (buf was NULL)", FN);
  if (d->col_major)
    return mkx_error(MKX_ERR_UNSUPPORTED,
                     "%s: a is column-major; row-major only", FN);
  MKX_TRY(mkx_check_ptr(FN, "B", B));
  MKX_TRY(mkx_check_ptr(FN, "C", C));
  MKX_TRY(mkx_check_size(FN, "n", n, 1));
  MKX_TRY(mkx_check_size(FN, "chunk_rows", chunk_rows, 0));
  MKX_TRY(mkx_check_trans(FN, transb));
  MKX_TRY(mkx_check_dtype(FN, "ctype", ctype));
  if (!types_ok(a->dtype, ctype))
    return mkx_error(MKX_ERR_INVALID_ARG,
                     "%s: a's dtype %d with ctype %d; bf16 or fp16 A and B "
                     "with bf16, fp16 or fp32 C, or fp32 for all",
                     FN, (int)a->dtype, (int)ctype);
  const int64_t K = d->cols;
  if (transb == MKX_NO_TRANS)
    MKX_TRY(mkx_check_ld(FN, "ldb", ldb, K, n, MKX_ROW_MAJOR));
  else
    MKX_TRY(mkx_check_ld(FN, "ldb", ldb, n, K, MKX_ROW_MAJOR));
  MKX_TRY(mkx_check_ld(FN, "ldc", ldc, d->rows, n, MKX_ROW_MAJOR));
  if (d->rows > INT_MAX || n > INT_MAX || K > INT_MAX || ldb > INT_MAX ||
      ldc > INT_MAX || d->ld[q] > INT_MAX)
    return mkx_error(MKX_ERR_UNSUPPORTED,
                     "%s: a size or leading dimension over 2^31 - 1 (cuBLAS)",
                     FN);
  if (c_tiles && (c_tiles->comm != a->comm || c_tiles->dev.rows != d->rows ||
                  c_tiles->dev.cols != n))
    return mkx_error(MKX_ERR_INVALID_ARG,
                     "%s: c_tiles is %lld x %lld on its communicator; C is "
                     "%lld x %lld on a's",
                     FN, (long long)c_tiles->dev.rows,
                     (long long)c_tiles->dev.cols, (long long)d->rows,
                     (long long)n);
  MKX_TRY(mkx_device_set(a->comm->device));
  MKX_TRY(gemm_ready(a, (cudaStream_t)stream));
  const int64_t tr = d->tile_rows;
  const int64_t chunk = chunk_rows ? (chunk_rows + tr - 1) / tr * tr : tr;
  const mkx_gemm_desc g = {.n = n,
                           .k = K,
                           .lda = d->ld[q],
                           .b = B,
                           .ldb = ldb,
                           .b_kmajor = transb == MKX_TRANS,
                           .c = C,
                           .ldc = ldc,
                           .ab_type = mkx_fused_gemm_type(a->dtype),
                           .c_type = mkx_fused_gemm_type(ctype)};
  return chunks(a, q, &g, c_tiles, chunk, (cudaStream_t)stream);
#else
  (void)a_rank, (void)B, (void)n, (void)ldb, (void)transb, (void)C, (void)ldc;
  (void)ctype, (void)chunk_rows, (void)stream, (void)types_ok;
  return MKX_ERR_INTERNAL; /* no set exists without CUDA */
#endif
}
