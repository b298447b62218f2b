/* MKX_Allgather_tiles (include/mkx_tiles.h): each rank's rows into every
 * node rank's copy, each chunk of whole data-tile rows signalled on its
 * destination as soon as it has landed.  Large blocks go by the copy
 * engines, one side stream per destination, in chunks that double from
 * one data-tile row, a small kernel signalling after each copy (around copy-engine work the signal is an SM kernel, so
 * the two never contend for one engine); blocks of at most option
 * tiles_ag_sm_bytes by an SM kernel that stores and signals (the copy
 * engines' fixed cost per copy outweighs small copies). */
#include "core/comm.h"
#include "core/device.h"
#include "core/error.h"
#include "core/handles.h"
#include "ops/tiles/tile_set.h"
#include "ops/validate.h"

#define FN "MKX_Allgather_tiles"
/* CTAs of the SM kernel: small blocks need few to be latency-bound. */
#define AG_SM_CTAS 16

#if HAVE_CUDA
#include "core/cuda_rc.h"
#include "tiles/tiles.h"

/* Rows [lo, hi) of this rank's block [r0, ...) from send into node rank
 * q's copy, on s. */
static int copy_rows(const MKX_Tiles_dev *d, int q, const char *send,
                     int64_t ld_send, int64_t r0, int64_t lo, int64_t hi,
                     cudaStream_t s) {
  const size_t es = (size_t)d->elem_size;
  const size_t dp = (size_t)d->ld[q] * es, sp = (size_t)ld_send * es;
  cudaError_t e;
  if (d->col_major)
    e = cudaMemcpy2DAsync(
        d->data[q] + (size_t)lo * es, dp, send + (size_t)(lo - r0) * es, sp,
        (size_t)(hi - lo) * es, (size_t)d->cols, cudaMemcpyDefault, s);
  else
    e = cudaMemcpy2DAsync(
        d->data[q] + (size_t)lo * dp, dp, send + (size_t)(lo - r0) * sp, sp,
        (size_t)d->cols * es, (size_t)(hi - lo), cudaMemcpyDefault, s);
  return mkx_cuda_rc(e, FN, "cudaMemcpy2DAsync");
}

static int gather(MKX_Tiles t, const char *send, int64_t ld_send,
                  cudaStream_t user) {
  const MKX_Tiles_dev *d = &t->dev;
  int64_t r0, nr;
  MKX_Block_range(d->rows, d->size, d->rank, &r0, &nr);
  MKX_TRY(mkx_tile_fan_fork(&t->ag, user, FN));
  for (int i = 0; i < d->size; i++) {
    const int q = (d->rank + i) % d->size; /* this rank's own copy first */
    cudaStream_t s = t->ag.s[i];
    /* chunks of 1, 2, 4, ... data-tile rows: the first rows land soon,
     * and a few copies pay the engines' and the signals' fixed cost */
    int64_t span = 1;
    for (int64_t lo = r0, hi; lo < r0 + nr; lo = hi, span *= 2) {
      hi = (lo / d->tile_rows + span) * d->tile_rows;
      if (hi > r0 + nr) hi = r0 + nr;
      MKX_TRY(copy_rows(d, q, send, ld_send, r0, lo, hi, s));
      const int rc = mkx_tiles_signal_launch(d, q, lo, hi - lo, 0, d->cols, s);
      if (rc) return mkx_cuda_rc((cudaError_t)rc, FN, "signal kernel");
    }
  }
  return mkx_tile_fan_join(&t->ag, user, FN);
}
#endif

int MKX_Allgather_tiles(const void *send, int64_t ld_send, MKX_Tiles tiles,
                        MKX_Stream stream) {
  mkx_error_clear();
  if (!mkx_handle_is(tiles, MKX_HANDLE_TILES))
    return mkx_error(MKX_ERR_INVALID_ARG, "%s: tiles is NULL or freed", FN);
  MKX_TRY(mkx_tile_set_failure(tiles, FN));
#if HAVE_CUDA
  const MKX_Tiles_dev *d = &tiles->dev;
  if (!d->data[d->rank])
    return mkx_error(MKX_ERR_INVALID_ARG,
                     "%s: the tile set has no buffers (buf was NULL)", FN);
  int64_t r0, nr;
  MKX_Block_range(d->rows, d->size, d->rank, &r0, &nr);
  if (nr > 0) {
    MKX_TRY(mkx_check_ptr(FN, "send", send));
    MKX_TRY(mkx_check_ld(FN, "ld_send", ld_send, nr, d->cols,
                         d->col_major ? MKX_COL_MAJOR : MKX_ROW_MAJOR));
  }
  MKX_TRY(mkx_device_set(tiles->comm->device));
  const int64_t bytes = nr * d->cols * d->elem_size;
  const int64_t sm_max = tiles->comm->opt.tiles_ag_sm_bytes;
  if (nr == 0 || sm_max == 0 || bytes > sm_max)
    return gather(tiles, send, ld_send, (cudaStream_t)stream);
  const int64_t chunks = (r0 + nr - 1) / d->tile_rows - r0 / d->tile_rows + 1;
  const int64_t items = chunks * d->size;
  void *run;
  MKX_TRY(mkx_part_fork(tiles->comm->part, &tiles->lane, stream, &run));
  const int rc = mkx_tiles_ag_sm_launch(
      d, send, ld_send, r0, nr, items < AG_SM_CTAS ? (int)items : AG_SM_CTAS,
      (cudaStream_t)run);
  const int jrc = mkx_part_join(&tiles->lane, stream, run);
  if (rc) return mkx_cuda_rc((cudaError_t)rc, FN, "AllGather kernel");
  return jrc;
#else
  (void)send, (void)ld_send, (void)stream;
  return MKX_ERR_INTERNAL; /* no set exists without CUDA */
#endif
}
