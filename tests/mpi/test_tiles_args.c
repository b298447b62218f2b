/* The tile API's arguments (include/mkx_tiles.h), on any machine: each bad
 * argument of MKX_Tiles_create, given by the last rank alone, gets its
 * code there and, on the others, MKX_ERR_PEER (on the GPU) or their own
 * refusal of the host path; a good call on the host path is
 * MKX_ERR_UNSUPPORTED on every rank; handles that are NULL or freed are
 * refused by every call.  With --device also: ranks that differ on an
 * agreed value all get MKX_ERR_SHAPE_MISMATCH naming it, and the local
 * calls refuse ranks and rectangles outside the set. */
#include <stdlib.h>
#include <string.h>
#include "mkx.h"
#include "mkx_tiles.h"
#include "../common/check.h"
#include "../common/mkx_test.h"

static MKX_Comm comm;
static int on_gpu;

typedef struct create_args {
  void *buf;
  int64_t rows, cols, ld, tr, tc;
  MKX_Datatype dtype;
  MKX_Order order;
  int null_out;
} create_args;

static create_args good(void *buf) {
  return (create_args){buf, 100, 60, 64, 32, 16, MKX_BF16, MKX_ROW_MAJOR, 0};
}

static int create(const create_args *a, MKX_Tiles *t) {
  return MKX_Tiles_create(a->buf, a->rows, a->cols, a->ld, a->tr, a->tc,
                          a->dtype, a->order, comm, a->null_out ? NULL : t);
}

/* The last rank passes `bad`, the others `good`; its code `want`. */
static void one_bad(const char *what, create_args g, create_args bad,
                    int want) {
  const int me_bad = mt.rank == mt.size - 1;
  MKX_Tiles t = (MKX_Tiles)&t;
  const int rc = create(me_bad ? &bad : &g, &t);
  const int others = on_gpu ? MKX_ERR_PEER : MKX_ERR_UNSUPPORTED;
  CHECK_RC(rc, me_bad ? want : others, "%s on rank %d: %s", what, mt.size - 1,
           MKX_Get_last_error());
  CHECK(me_bad && bad.null_out ? 1 : t == NULL, "%s: *tiles set to NULL", what);
}

static void bad_arguments(void *buf) {
  const create_args g = good(buf);
  create_args b;
  b = g, b.null_out = 1;
  one_bad("tiles NULL", g, b, MKX_ERR_NULL_POINTER);
  b = g, b.rows = 0;
  one_bad("rows 0", g, b, MKX_ERR_BAD_SIZE);
  b = g, b.cols = -3;
  one_bad("cols -3", g, b, MKX_ERR_BAD_SIZE);
  b = g, b.tr = 0;
  one_bad("tile_rows 0", g, b, MKX_ERR_BAD_SIZE);
  b = g, b.tc = (int64_t)1 << 41;
  one_bad("tile_cols 2^41", g, b, MKX_ERR_BAD_SIZE);
  b = g, b.rows = b.cols = b.tr = b.tc = (int64_t)1 << 16, b.buf = NULL;
  one_bad("a data tile of 2^32 elements", g, b, MKX_ERR_BAD_SIZE);
  b = g, b.dtype = (MKX_Datatype)9;
  one_bad("dtype 9", g, b, MKX_ERR_INVALID_ARG);
  b = g, b.order = (MKX_Order)7;
  one_bad("order 7", g, b, MKX_ERR_INVALID_ARG);
  if (buf) {
    b = g, b.ld = 59;
    one_bad("ld 59 < cols 60", g, b, MKX_ERR_BAD_LD);
    int host[4];
    b = g, b.buf = host;
    one_bad("buf in host memory", g, b, MKX_ERR_INVALID_ARG);
  }
}

static void bad_handles(void) {
  MKX_Tiles t = NULL;
  MKX_Tiles_dev d;
  int e;
  CHECK_RC(MKX_Tiles_free(NULL), MKX_ERR_NULL_POINTER, "free(NULL)");
  CHECK_RC(MKX_Tiles_free(&t), MKX_ERR_INVALID_ARG, "free of a NULL set");
  t = (MKX_Tiles)&e;
  CHECK_RC(MKX_Tiles_begin(t, NULL), MKX_ERR_INVALID_ARG, "begin, garbage");
  CHECK_RC(MKX_Tiles_wait(t, 0, 0, 1, 0, 1, NULL), MKX_ERR_INVALID_ARG,
           "wait, garbage");
  CHECK_RC(MKX_Tiles_signal(t, 0, 0, 1, 0, 1, NULL), MKX_ERR_INVALID_ARG,
           "signal, garbage");
  CHECK_RC(MKX_Tiles_device(t, &d), MKX_ERR_INVALID_ARG, "device, garbage");
  CHECK_RC(MKX_Tiles_get_async_error(NULL, &e), MKX_ERR_INVALID_ARG,
           "async error, NULL set");
}

static void mismatch(void *buf) {
  create_args a = good(buf);
  if (mt.rank == mt.size - 1) a.tc = 8;
  MKX_Tiles t = NULL;
  const int rc = create(&a, &t);
  CHECK_RC(rc, MKX_ERR_SHAPE_MISMATCH, "tile_cols 8 on rank %d only: %s",
           mt.size - 1, MKX_Get_last_error());
  CHECK(
      rc != MKX_ERR_SHAPE_MISMATCH || strstr(MKX_Get_last_error(), "tile_cols"),
      "the message names tile_cols");
}

static void live_set(void *buf) {
  const create_args a = good(buf);
  MKX_Tiles t = NULL;
  MKX_Tiles_dev d;
  int e = -1;
  if (!CHECK_RC(create(&a, &t), MKX_SUCCESS, "a good set: %s",
                MKX_Get_last_error()))
    return;
  CHECK_RC(MKX_Tiles_device(t, NULL), MKX_ERR_NULL_POINTER, "device(NULL)");
  CHECK_RC(MKX_Tiles_device(t, &d), MKX_SUCCESS, "device");
  CHECK(d.tiles_r == 4 && d.tiles_c == 4 && d.size >= 1 &&
            (buf ? d.data[d.rank] != NULL : d.data[d.rank] == NULL),
        "descriptor: %lld x %lld tiles", (long long)d.tiles_r,
        (long long)d.tiles_c);
  CHECK_RC(MKX_Tiles_get_async_error(t, &e), MKX_SUCCESS, "async error");
  CHECK(e == MKX_SUCCESS, "no failure on a new set (%d)", e);
  CHECK_RC(MKX_Tiles_wait(t, mt.size, 0, 1, 0, 1, NULL), MKX_ERR_INVALID_ARG,
           "rank %d of %d", mt.size, mt.size);
  CHECK_RC(MKX_Tiles_wait(t, 0, 99, 2, 0, 1, NULL), MKX_ERR_INVALID_ARG,
           "rows [99, 101) of 100");
  CHECK_RC(MKX_Tiles_signal(t, 0, 0, 1, -1, 2, NULL), MKX_ERR_INVALID_ARG,
           "columns from -1");
  CHECK_RC(MKX_Tiles_signal(t, 0, 0, 0, 0, 1, NULL), MKX_ERR_INVALID_ARG,
           "no rows");
  MKX_Tiles keep = t;
  CHECK_RC(MKX_Tiles_free(&t), MKX_SUCCESS, "free: %s", MKX_Get_last_error());
  CHECK_RC(MKX_Tiles_begin(keep, NULL), MKX_ERR_INVALID_ARG, "begin, freed");
  /* one left for MKX_Comm_free */
  CHECK_RC(create(&a, &t), MKX_SUCCESS, "another set");
}

int main(int argc, char **argv) {
  mt_init(&argc, &argv);
  MPI_Info info;
  MPI_Info_create(&info);
  MPI_Info_set(info, "mkx_path", mt.device ? "gpu" : "host");
  if (MKX_Comm_create(MPI_COMM_WORLD, info, &comm) != MKX_SUCCESS) {
    CHECK(0, "MKX_Comm_create: %s", MKX_Get_last_error());
    return mt_finish();
  }
  MPI_Info_free(&info);
  void *buf = NULL;
  int dev = -1;
  MKX_Comm_device(comm, &dev);
  on_gpu = dev >= 0;
  if (on_gpu)
    CHECK_RC(MKX_Alloc_mem(comm, 100 * 64 * 2, &buf), MKX_SUCCESS,
             "MKX_Alloc_mem");
  bad_arguments(NULL);
  if (on_gpu) bad_arguments(buf);
  bad_handles();
  if (on_gpu) {
    if (mt.size > 1) mismatch(buf);
    live_set(buf);
    live_set(NULL);
  } else {
    const create_args a = good(NULL);
    MKX_Tiles t = NULL;
    CHECK_RC(create(&a, &t), MKX_ERR_UNSUPPORTED, "host path: %s",
             MKX_Get_last_error());
  }
  if (buf) MKX_Free_mem(comm, buf);
  CHECK_RC(MKX_Comm_free(&comm), MKX_SUCCESS,
           "MKX_Comm_free (a set left on the GPU)");
  return mt_finish();
}
