/* MKX_Reduce_scatter_tiles and MKX_Allreduce_tiles (include/mkx_tiles.h):
 * a kernel of a few persistent CTAs (option tiles_reduce_ctas) on the
 * caller's stream sums each data tile of this rank's block over the node
 * ranks' copies as soon as every copy of it is complete
 * (kernels/tiles/reduce.cu). */
#include "core/comm.h"
#include "core/device.h"
#include "core/error.h"
#include "core/handles.h"
#include "ops/tiles/tile_set.h"
#include "ops/validate.h"

static int set_ok(MKX_Tiles t, const char *fn, const char *name) {
  if (!mkx_handle_is(t, MKX_HANDLE_TILES))
    return mkx_error(MKX_ERR_INVALID_ARG, "%s: %s is NULL or freed", fn, name);
  return mkx_tile_set_failure(t, fn);
}

#if HAVE_CUDA
#include "core/cuda_rc.h"
#include "tiles/tiles.h"

static int reduce(MKX_Tiles t, void *recv, int64_t ld_recv, MKX_Tiles out,
                  MKX_Stream stream, const char *fn) {
  const MKX_Tiles_dev *d = &t->dev;
  if (!d->data[d->rank])
    return mkx_error(MKX_ERR_INVALID_ARG,
                     "%s: the tile set has no buffers (buf was NULL)", fn);
  if (t->dtype != MKX_BF16 && t->dtype != MKX_FP16 && t->dtype != MKX_FP32)
    return mkx_error(MKX_ERR_UNSUPPORTED,
                     "%s: the set's dtype %d; bf16, fp16 or fp32 only", fn,
                     (int)t->dtype);
  int64_t r0, nr;
  MKX_Block_range(d->rows, d->size, d->rank, &r0, &nr);
  if (!out && nr > 0) {
    MKX_TRY(mkx_check_ptr(fn, "recv", recv));
    MKX_TRY(mkx_check_ld(fn, "ld_recv", ld_recv, nr, d->cols,
                         d->col_major ? MKX_COL_MAJOR : MKX_ROW_MAJOR));
  }
  if (out) {
    const MKX_Tiles_dev *o = &out->dev;
    if (out->comm != t->comm || o->rows != d->rows || o->cols != d->cols ||
        o->tile_rows != d->tile_rows || o->tile_cols != d->tile_cols ||
        out->dtype != t->dtype || o->col_major != d->col_major ||
        !o->data[o->rank])
      return mkx_error(MKX_ERR_INVALID_ARG,
                       "%s: out is not a set of the same communicator, "
                       "shape, data tiles, dtype and order as tiles, with "
                       "buffers",
                       fn);
  }
  if (nr == 0) return MKX_SUCCESS;
  MKX_TRY(mkx_device_set(t->comm->device));
  const int64_t tiles =
      ((r0 + nr - 1) / d->tile_rows - r0 / d->tile_rows + 1) * d->tiles_c;
  /* at most half the CTAs the rank's waiting kernels may take, so that
   * the producers the reduction waits for always find SMs */
  const mkx_gpu_share *sh = &t->comm->share;
  const int cap = (sh->ctas ? sh->ctas : sh->dev_sms) / 2;
  int most = t->comm->opt.tiles_reduce_ctas;
  if (most > cap) most = cap > 1 ? cap : 1;
  const int ctas = tiles < most ? (int)tiles : most;
  const int rc = mkx_tiles_reduce_launch(
      d, (int)t->dtype, r0, r0 + nr, out ? NULL : recv, ld_recv,
      out ? &out->dev : NULL, ctas, (cudaStream_t)stream);
  return rc ? mkx_cuda_rc((cudaError_t)rc, fn, "reduction kernel")
            : MKX_SUCCESS;
}
#else
static int reduce(MKX_Tiles t, void *recv, int64_t ld_recv, MKX_Tiles out,
                  MKX_Stream stream, const char *fn) {
  (void)t, (void)recv, (void)ld_recv, (void)out, (void)stream, (void)fn;
  return MKX_ERR_INTERNAL; /* no set exists without CUDA */
}
#endif

int MKX_Reduce_scatter_tiles(MKX_Tiles tiles, void *recv, int64_t ld_recv,
                             MKX_Stream stream) {
  const char *fn = "MKX_Reduce_scatter_tiles";
  mkx_error_clear();
  MKX_TRY(set_ok(tiles, fn, "tiles"));
  return reduce(tiles, recv, ld_recv, NULL, stream, fn);
}

int MKX_Allreduce_tiles(MKX_Tiles tiles, MKX_Tiles out, MKX_Stream stream) {
  const char *fn = "MKX_Allreduce_tiles";
  mkx_error_clear();
  MKX_TRY(set_ok(tiles, fn, "tiles"));
  MKX_TRY(set_ok(out, fn, "out"));
  return reduce(tiles, NULL, 0, out, stream, fn);
}
