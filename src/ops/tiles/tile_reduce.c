/* MKX_Reduce_scatter_tiles and MKX_Allreduce_tiles (include/mkx_tiles.h):
 * a kernel of a few persistent CTAs (option tiles_reduce_ctas) on the
 * caller's stream (the set's lane where the rank has an SM partition)
 * sums each data tile of this rank's block over the node ranks' copies as
 * soon as every copy of it is complete (kernels/tiles/reduce.cu). */
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

/* A reduction's rows [r0, r0 + nr) (this rank's block), checked. */
typedef struct reduce_job {
  MKX_Tiles t;
  int64_t r0, nr;
  char *recv; /* row r0 of the ReduceScatter's output, or NULL */
  int64_t ld_recv;
  const MKX_Tiles_dev *out; /* the AllReduce's output set, or NULL */
  cudaStream_t st;
  const char *fn;
} reduce_job;

/* Rows [lo, hi) of the job by `ctas` CTAs of the reduction kernel. */
static int launch_rows(const reduce_job *j, int64_t lo, int64_t hi, int ctas) {
  const MKX_Tiles_dev *d = &j->t->dev;
  char *recv = NULL;
  if (j->recv) {
    const int64_t at = d->col_major ? lo - j->r0 : (lo - j->r0) * j->ld_recv;
    recv = j->recv + at * d->elem_size;
  }
  const int rc = mkx_tiles_reduce_launch(d, (int)j->t->dtype, lo, hi, recv,
                                         j->ld_recv, j->out, ctas, j->st);
  return rc ? mkx_cuda_rc((cudaError_t)rc, j->fn, "reduction kernel")
            : MKX_SUCCESS;
}

/* Data tiles of rows [lo, hi). */
static int64_t tiles_of(const MKX_Tiles_dev *d, int64_t lo, int64_t hi) {
  return ((hi - 1) / d->tile_rows - lo / d->tile_rows + 1) * d->tiles_c;
}

/* One kernel of tiles_reduce_ctas persistent CTAs, each waiting for its
 * next tile: at most half the CTAs the rank's waiting kernels may take, so
 * that the producers it waits for always find SMs. */
static int persistent(const reduce_job *j) {
  const mkx_gpu_share *sh = &j->t->comm->share;
  const int cap = (sh->ctas ? sh->ctas : sh->dev_sms) / 2;
  int most = j->t->comm->opt.tiles_reduce_ctas;
  if (most > cap) most = cap > 1 ? cap : 1;
  const int64_t tiles = tiles_of(&j->t->dev, j->r0, j->r0 + j->nr);
  return launch_rows(j, j->r0, j->r0 + j->nr, tiles < most ? (int)tiles : most);
}

/* The block in REDUCE_GROUPS groups of whole data-tile rows, each a stream
 * wait (one block) for its rows on every copy, then a kernel over as many
 * CTAs as the rank's kernels may take that finds its tiles complete: no
 * CTA holds an SM while the producers still write. */
#define REDUCE_GROUPS 8
static int staged(const reduce_job *j) {
  const MKX_Tiles_dev *d = &j->t->dev;
  const mkx_gpu_share *sh = &j->t->comm->share;
  const int most = sh->ctas ? sh->ctas : sh->dev_sms > 0 ? sh->dev_sms : 1;
  const int64_t tr = d->tile_rows, end = j->r0 + j->nr;
  const int64_t step =
      ((j->nr + REDUCE_GROUPS - 1) / REDUCE_GROUPS + tr - 1) / tr * tr;
  for (int64_t lo = j->r0, hi; lo < end; lo = hi) {
    hi = (lo / tr) * tr + step;
    if (hi > end) hi = end;
    for (int q = 0; q < d->size; q++) {
      const int rc =
          mkx_tiles_wait_launch(d, q, lo, hi - lo, 0, d->cols, j->st);
      if (rc) return mkx_cuda_rc((cudaError_t)rc, j->fn, "wait kernel");
    }
    const int64_t tiles = tiles_of(d, lo, hi);
    MKX_TRY(launch_rows(j, lo, hi, tiles < most ? (int)tiles : most));
  }
  return MKX_SUCCESS;
}

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
  void *run;
  MKX_TRY(mkx_part_fork(t->comm->part, &t->lane, stream, &run));
  const reduce_job j = {t,
                        r0,
                        nr,
                        out ? NULL : (char *)recv,
                        ld_recv,
                        out ? &out->dev : NULL,
                        (cudaStream_t)run,
                        fn};
  const int rc = t->comm->opt.tiles_reduce == MKX_TILES_REDUCE_STAGED
                     ? staged(&j)
                     : persistent(&j);
  const int jrc = mkx_part_join(&t->lane, stream, run);
  return rc != MKX_SUCCESS ? rc : jrc;
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
