/* Tile sets (include/mkx_tiles.h, docs/tiles.md): the semaphores' areas in
 * symmetric memory, the agreement on the set's shape, the stream-side
 * kernels (kernels/tiles/) and the failures their waits record. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mkx_tiles.h"
#include "core/comm.h"
#include "core/device.h"
#include "core/error.h"
#include "core/handles.h"
#include "core/log.h"
#include "mem/symm.h"
#include "ops/validate.h"
#include "ops/tiles/tile_set.h"

#define FN_CREATE "MKX_Tiles_create"

/* What every rank checks and exchanges at creation. */
typedef struct tiles_record {
  int64_t rc, rows, cols, tile_rows, tile_cols, dtype, order, has_buf, ld;
} tiles_record;

static int check_local(void *buf, int64_t rows, int64_t cols, int64_t ld,
                       int64_t tile_rows, int64_t tile_cols, MKX_Datatype dtype,
                       MKX_Order order, MKX_Comm c, MKX_Tiles *tiles) {
  MKX_TRY(mkx_check_ptr(FN_CREATE, "tiles", tiles));
  MKX_TRY(mkx_check_size(FN_CREATE, "rows", rows, 1));
  MKX_TRY(mkx_check_size(FN_CREATE, "cols", cols, 1));
  MKX_TRY(mkx_check_size(FN_CREATE, "tile_rows", tile_rows, 1));
  MKX_TRY(mkx_check_size(FN_CREATE, "tile_cols", tile_cols, 1));
  MKX_TRY(mkx_check_dtype(FN_CREATE, "dtype", dtype));
  MKX_TRY(mkx_check_not_fp8(FN_CREATE, dtype));
  MKX_TRY(mkx_check_order(FN_CREATE, order));
  const int64_t tr = tile_rows < rows ? tile_rows : rows;
  const int64_t tc = tile_cols < cols ? tile_cols : cols;
  if (tr > (INT64_C(1) << 31) / tc)
    return mkx_error(MKX_ERR_BAD_SIZE,
                     "%s: a data tile of %lld x %lld elements is over 2^31",
                     FN_CREATE, (long long)tr, (long long)tc);
  MKX_TRY(MKX_CHECK_ELEMS(FN_CREATE, "the grid of data tiles",
                          (rows + tile_rows - 1) / tile_rows,
                          (cols + tile_cols - 1) / tile_cols, 8));
  if (buf) {
    MKX_TRY(mkx_check_ld(FN_CREATE, "ld", ld, rows, cols, order));
    MKX_TRY(mkx_check_span(FN_CREATE, "buf", rows, cols, ld, order));
    if (mkx_pointer_kind(buf) != MKX_MEM_DEVICE)
      return mkx_error(MKX_ERR_INVALID_ARG, "%s: buf %p is not device memory",
                       FN_CREATE, buf);
  }
  if (c->device < 0)
    return mkx_error(MKX_ERR_UNSUPPORTED,
                     "%s: rank %d runs the host path (no GPU); tile sets "
                     "live on the GPU",
                     FN_CREATE, c->rank);
  if (c->place.local_size > MKX_TILES_MAX_RANKS)
    return mkx_error(MKX_ERR_UNSUPPORTED,
                     "%s: %d ranks on rank %d's node; a tile set reaches at "
                     "most %d",
                     FN_CREATE, c->place.local_size, c->rank,
                     MKX_TILES_MAX_RANKS);
  return MKX_SUCCESS;
}

static const char *const agreed_names[] = {
    "rows",  "cols",  "tile_rows",          "tile_cols",
    "dtype", "order", "whether buf is NULL"};

/* Every rank takes part, even one whose own arguments are bad, so that all
 * fail alike; all[] receives every rank's record. */
static int agree(MKX_Comm c, const tiles_record *mine, tiles_record *all) {
  int rc = mkx_comm_exchange(c, mine, all, sizeof *mine, FN_CREATE);
  if (rc == MKX_SUCCESS && mine->rc != MKX_SUCCESS) rc = (int)mine->rc;
  for (int q = 0; rc == MKX_SUCCESS && q < c->size; q++)
    if (all[q].rc != MKX_SUCCESS)
      rc = mkx_error(MKX_ERR_PEER, "%s failed on rank %d (%s)", FN_CREATE, q,
                     MKX_Error_string((int)all[q].rc));
  for (int q = 0; rc == MKX_SUCCESS && q < c->size; q++) {
    const int64_t *a = &mine->rows, *b = &all[q].rows;
    for (int v = 0; v < 7; v++)
      if (a[v] != b[v]) {
        rc = mkx_error(MKX_ERR_SHAPE_MISMATCH,
                       "%s: %s is %lld on rank %d but %lld on rank %d",
                       FN_CREATE, agreed_names[v], (long long)a[v], c->rank,
                       (long long)b[v], q);
        break;
      }
  }
  return rc;
}

int MKX_Tiles_create(void *buf, int64_t rows, int64_t cols, int64_t ld,
                     int64_t tile_rows, int64_t tile_cols, MKX_Datatype dtype,
                     MKX_Order order, MKX_Comm comm, MKX_Tiles *tiles) {
  mkx_error_clear();
  if (tiles) *tiles = NULL;
  MKX_TRY(mkx_comm_check(comm));
  tiles_record mine = {0};
  mine.rc = check_local(buf, rows, cols, ld, tile_rows, tile_cols, dtype, order,
                        comm, tiles);
  mine.rows = rows, mine.cols = cols, mine.tile_rows = tile_rows;
  mine.tile_cols = tile_cols, mine.dtype = dtype, mine.order = order;
  mine.has_buf = buf != NULL, mine.ld = buf ? ld : 0;
  tiles_record *all = malloc(sizeof *all * (size_t)comm->size);
  if (!all) return mkx_error(MKX_ERR_NOMEM, "%s", FN_CREATE);
  int rc = agree(comm, &mine, all);
  int64_t lds[MKX_TILES_MAX_RANKS] = {0};
  for (int q = 0; rc == MKX_SUCCESS && q < comm->size; q++)
    if (comm->place.node_of_rank[q] == comm->place.node)
      lds[comm->place.local_rank_of[q]] = all[q].ld;
  free(all);
  if (rc != MKX_SUCCESS) return rc;
  mkx_tile_set_shape shape = {rows,      cols,  tile_rows,
                              tile_cols, dtype, order == MKX_COL_MAJOR};
  memcpy(shape.ld, lds, sizeof lds);
  return mkx_tile_set_make(comm, buf, &shape, tiles);
}

int MKX_Tiles_free(MKX_Tiles *tiles) {
  mkx_error_clear();
  if (!tiles)
    return mkx_error(MKX_ERR_NULL_POINTER, "MKX_Tiles_free: tiles is NULL");
  if (!mkx_handle_is(*tiles, MKX_HANDLE_TILES))
    return mkx_error(MKX_ERR_INVALID_ARG,
                     "MKX_Tiles_free: *tiles is NULL or freed");
  const int rc = mkx_tile_set_free(*tiles);
  *tiles = NULL;
  return rc;
}

/* A live set whose recorded failure (if any) is reported, for the calls
 * that enqueue work. */
static int usable(MKX_Tiles t, const char *fn) {
  if (!mkx_handle_is(t, MKX_HANDLE_TILES))
    return mkx_error(MKX_ERR_INVALID_ARG, "%s: tiles is NULL or freed", fn);
  return mkx_tile_set_failure(t, fn);
}

int MKX_Tiles_begin(MKX_Tiles tiles, MKX_Stream stream) {
  mkx_error_clear();
  MKX_TRY(usable(tiles, "MKX_Tiles_begin"));
  return mkx_tile_set_begin(tiles, stream);
}

/* [lo, lo + n) within [0, total), else an error naming `what`. */
static int span_ok(const char *fn, const char *what, int64_t lo, int64_t n,
                   int64_t total) {
  if (lo >= 0 && n >= 1 && lo <= total - n) return MKX_SUCCESS;
  return mkx_error(MKX_ERR_INVALID_ARG,
                   "%s: %s [%lld, %lld + %lld) are not within the tensor's "
                   "%lld",
                   fn, what, (long long)lo, (long long)lo, (long long)n,
                   (long long)total);
}

/* The node rank of `rank` and the rectangle, checked. */
static int check_rect(MKX_Tiles t, const char *fn, int rank, int64_t row0,
                      int64_t nrows, int64_t col0, int64_t ncols, int *q) {
  MKX_TRY(usable(t, fn));
  MKX_TRY(mkx_tile_set_node_rank(t, fn, rank, q));
  int64_t rows, cols;
  mkx_tile_set_dims(t, &rows, &cols);
  MKX_TRY(span_ok(fn, "rows", row0, nrows, rows));
  return span_ok(fn, "columns", col0, ncols, cols);
}

static int rect_call(MKX_Tiles t, int signal, int rank, int64_t row0,
                     int64_t nrows, int64_t col0, int64_t ncols,
                     MKX_Stream stream) {
  const char *fn = signal ? "MKX_Tiles_signal" : "MKX_Tiles_wait";
  int q;
  mkx_error_clear();
  MKX_TRY(check_rect(t, fn, rank, row0, nrows, col0, ncols, &q));
  return mkx_tile_set_rect(t, signal, q, row0, nrows, col0, ncols, stream);
}

int MKX_Tiles_wait(MKX_Tiles tiles, int rank, int64_t row0, int64_t nrows,
                   int64_t col0, int64_t ncols, MKX_Stream stream) {
  return rect_call(tiles, 0, rank, row0, nrows, col0, ncols, stream);
}

int MKX_Tiles_signal(MKX_Tiles tiles, int rank, int64_t row0, int64_t nrows,
                     int64_t col0, int64_t ncols, MKX_Stream stream) {
  return rect_call(tiles, 1, rank, row0, nrows, col0, ncols, stream);
}

int MKX_Tiles_device(MKX_Tiles tiles, MKX_Tiles_dev *dev) {
  mkx_error_clear();
  if (!mkx_handle_is(tiles, MKX_HANDLE_TILES))
    return mkx_error(MKX_ERR_INVALID_ARG,
                     "MKX_Tiles_device: tiles is NULL or freed");
  MKX_TRY(mkx_check_ptr("MKX_Tiles_device", "dev", dev));
  mkx_tile_set_dev(tiles, dev);
  return MKX_SUCCESS;
}

int MKX_Tiles_get_async_error(MKX_Tiles tiles, int *async_error) {
  mkx_error_clear();
  if (!mkx_handle_is(tiles, MKX_HANDLE_TILES))
    return mkx_error(MKX_ERR_INVALID_ARG,
                     "MKX_Tiles_get_async_error: tiles is NULL or freed");
  MKX_TRY(
      mkx_check_ptr("MKX_Tiles_get_async_error", "async_error", async_error));
  *async_error = mkx_tile_set_failure(tiles, "MKX_Tiles_get_async_error");
  return MKX_SUCCESS;
}
