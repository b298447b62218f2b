/* A tile set's state (ops/tiles/tile_set.h).
 *
 * Each rank's area (header and semaphores, kernels' layout in
 * include/mkx_tiles_dev.h) is symmetric memory of the communicator, zeroed
 * before any rank can see it; the error record is host memory mapped for
 * the GPU, read without synchronising.  The communicator keeps its live
 * sets in a list (c->tiles): MKX_Comm_free releases the sets left (their
 * areas go with the communicator's symmetric memory).  A set's failure is
 * its own: the communicator stays usable. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ops/tiles/tile_set.h"
#include "core/comm.h"
#include "core/device.h"
#include "core/error.h"
#include "core/handles.h"
#include "core/log.h"
#include "mem/symm.h"
#include "ops/validate.h"

#if HAVE_CUDA
#include <cuda_runtime.h>
#include "core/cuda_rc.h"
#include "tiles/tiles.h"
#include "ops/fused/fused.h"

int mkx_tile_fan_make(mkx_tile_fan *f, int n, mkx_sm_part *part,
                      const char *fn) {
  memset(f, 0, sizeof *f);
  MKX_TRY(
      mkx_cuda_rc(cudaEventCreateWithFlags(&f->fork, cudaEventDisableTiming),
                  fn, "cudaEventCreate"));
  for (; f->n < n; f->n++) {
    void *s = NULL;
    const int rc = mkx_sm_part_stream(part, &s);
    f->s[f->n] = (cudaStream_t)s;
    if (rc != MKX_SUCCESS) {
      char why[256];
      snprintf(why, sizeof why, "%s", MKX_Get_last_error());
      return mkx_error(rc, "%s: %s", fn, why);
    }
    MKX_TRY(mkx_cuda_rc(
        cudaEventCreateWithFlags(&f->join[f->n], cudaEventDisableTiming), fn,
        "cudaEventCreate"));
  }
  return MKX_SUCCESS;
}

int mkx_tile_fan_fork(mkx_tile_fan *f, cudaStream_t user, const char *fn) {
  MKX_TRY(mkx_cuda_rc(cudaEventRecord(f->fork, user), fn, "cudaEventRecord"));
  for (int i = 0; i < f->n; i++)
    MKX_TRY(mkx_cuda_rc(cudaStreamWaitEvent(f->s[i], f->fork, 0), fn,
                        "cudaStreamWaitEvent"));
  return MKX_SUCCESS;
}

int mkx_tile_fan_join(mkx_tile_fan *f, cudaStream_t user, const char *fn) {
  for (int i = 0; i < f->n; i++) {
    MKX_TRY(mkx_cuda_rc(cudaEventRecord(f->join[i], f->s[i]), fn,
                        "cudaEventRecord"));
    MKX_TRY(mkx_cuda_rc(cudaStreamWaitEvent(user, f->join[i], 0), fn,
                        "cudaStreamWaitEvent"));
  }
  return MKX_SUCCESS;
}

void mkx_tile_fan_free(mkx_tile_fan *f) {
  for (int i = 0; i < f->n; i++) {
    if (f->s[i]) MKX_CUDA_RELEASE(cudaStreamDestroy(f->s[i]));
    if (f->join[i]) MKX_CUDA_RELEASE(cudaEventDestroy(f->join[i]));
  }
  if (f->fork) MKX_CUDA_RELEASE(cudaEventDestroy(f->fork));
  memset(f, 0, sizeof *f);
}

static void set_release(MKX_Tiles t) {
  mkx_handle_remove(t);
  mkx_tile_fan_free(&t->ag);
  mkx_tile_fan_free(&t->gemm);
  mkx_part_lane_free(&t->lane);
  for (int i = 0; i < 2; i++) mkx_tp_blas_free(t->blas[i]);
  mkx_symm_buf_free(&t->data_map);
  mkx_symm_buf_free(&t->area_map);
  if (t->err_host) MKX_CUDA_RELEASE(cudaFreeHost(t->err_host));
  free(t);
}

static void tiles_release(MKX_Comm c) {
  while (c->tiles) {
    MKX_Tiles t = c->tiles;
    c->tiles = t->next;
    set_release(t);
  }
}

static void fill_dev(MKX_Comm c, const mkx_tile_set_shape *s, MKX_Tiles t) {
  MKX_Tiles_dev *d = &t->dev;
  d->rank = c->place.local_rank;
  d->size = c->place.local_size;
  d->rows = s->rows, d->cols = s->cols;
  d->tile_rows = s->tile_rows, d->tile_cols = s->tile_cols;
  d->tiles_r = (s->rows + s->tile_rows - 1) / s->tile_rows;
  d->tiles_c = (s->cols + s->tile_cols - 1) / s->tile_cols;
  d->elem_size = (int)MKX_Type_size(s->dtype);
  d->col_major = s->col_major;
  for (int i = 0; i < d->size; i++) {
    d->comm_rank[i] =
        mkx_placement_rank_at(&c->place, c->size, c->place.node, i);
    d->ld[i] = s->ld[i];
    d->area[i] = t->area_map.peer[i];
    d->data[i] = t->data_map.peer ? t->data_map.peer[i] : NULL;
  }
  d->timeout_ns = (uint64_t)c->opt.timeout_ms * 1000000u;
}

/* The library's kernels loaded, this rank's area zeroed, its error record
 * and (with buffers) the AllGather's streams made (local steps). */
static int make_local(MKX_Tiles t, size_t bytes, int has_buf) {
  const char *fn = "MKX_Tiles_create";
  MKX_TRY(mkx_fused_load_kernels(fn));
  MKX_TRY(mkx_cuda_rc(cudaMemset(t->area, 0, bytes), fn, "cudaMemset"));
  MKX_TRY(mkx_cuda_rc(cudaDeviceSynchronize(), fn, "cudaDeviceSynchronize"));
  MKX_TRY(mkx_cuda_rc(
      cudaHostAlloc((void **)&t->err_host, MKX_TILES_ERR_WORDS * sizeof(int),
                    cudaHostAllocMapped),
      fn, "cudaHostAlloc"));
  memset(t->err_host, 0, MKX_TILES_ERR_WORDS * sizeof(int));
  /* MKX_Allgather_tiles's streams, one per destination, and where the
   * rank has an SM partition the lane of the set's SM kernels on it */
  mkx_sm_part *part = t->comm->part;
  if (has_buf)
    MKX_TRY(mkx_tile_fan_make(&t->ag, t->comm->place.local_size, part, fn));
  if (has_buf) MKX_TRY(mkx_part_lane_init(part, &t->lane));
  return mkx_cuda_rc(
      cudaHostGetDevicePointer((void **)&t->dev.err, t->err_host, 0), fn,
      "cudaHostGetDevicePointer");
}

int mkx_tile_set_make(MKX_Comm c, void *buf, const mkx_tile_set_shape *s,
                      MKX_Tiles *out) {
  static const char hook_key = 0;
  const char *fn = "MKX_Tiles_create";
  MKX_TRY(mkx_device_set(c->device));
  MKX_Tiles t = calloc(1, sizeof *t);
  int rc = mkx_comm_agree_rc(
      c, t ? MKX_SUCCESS : mkx_error(MKX_ERR_NOMEM, "%s", fn), fn);
  if (rc != MKX_SUCCESS) {
    free(t);
    return rc;
  }
  t->comm = c;
  t->dtype = s->dtype;
  const size_t bytes =
      MKX_TILES_OFF_SEMS +
      sizeof(uint64_t) * (size_t)((s->rows + s->tile_rows - 1) / s->tile_rows) *
          (size_t)((s->cols + s->tile_cols - 1) / s->tile_cols);
  rc = mkx_symm_alloc(c, bytes, &t->area);
  if (rc != MKX_SUCCESS) {
    free(t);
    return rc;
  }
  /* zeroed on every rank before any maps it: the registration below is
   * an exchange every rank enters after its own zeroing */
  rc = mkx_comm_agree_rc(c, make_local(t, bytes, buf != NULL),
                         "MKX_Tiles_create: area");
  if (rc == MKX_SUCCESS)
    rc = mkx_symm_register(c, t->area, bytes, &t->area_map);
  if (rc == MKX_SUCCESS && buf)
    rc = mkx_symm_register(
        c, buf,
        mkx_matrix_bytes(s->rows, s->cols, s->ld[c->place.local_rank],
                         s->col_major ? MKX_COL_MAJOR : MKX_ROW_MAJOR,
                         s->dtype),
        &t->data_map);
  if (rc == MKX_SUCCESS) {
    int local = mkx_handle_add(t, MKX_HANDLE_TILES);
    if (local == MKX_SUCCESS && !c->tiles)
      local = mkx_comm_add_hook(c, &hook_key, tiles_release, NULL);
    rc = mkx_comm_agree_rc(c, local, "MKX_Tiles_create: handle");
  }
  if (rc != MKX_SUCCESS) {
    void *area = t->area;
    set_release(t);
    /* every rank got here alike (agreed), so the free meets */
    if (!c->broken) mkx_symm_free(c, area);
    return rc;
  }
  fill_dev(c, s, t);
  t->next = c->tiles;
  c->tiles = t;
  *out = t;
  mkx_log(MKX_LOG_INFO,
          "tile set: %lld x %lld in data tiles of %lld x %lld (%lld x %lld), "
          "%d node ranks%s",
          (long long)s->rows, (long long)s->cols, (long long)s->tile_rows,
          (long long)s->tile_cols, (long long)t->dev.tiles_r,
          (long long)t->dev.tiles_c, t->dev.size,
          buf ? ", buffers mapped" : "");
  return MKX_SUCCESS;
}

int mkx_tile_set_free(MKX_Tiles t) {
  MKX_Comm c = t->comm;
  if (c->tiles == t)
    c->tiles = t->next;
  else
    for (MKX_Tiles u = c->tiles; u; u = u->next)
      if (u->next == t) {
        u->next = t->next;
        break;
      }
  void *area = t->area;
  set_release(t);
  if (mkx_device_set(c->device) != MKX_SUCCESS) return MKX_ERR_CUDA;
  return mkx_symm_free(c, area);
}

static const char *where_name(int where) {
  switch (where) {
    case MKX_TILES_AT_KERNEL:
      return "in a kernel";
    case MKX_TILES_AT_STREAM:
      return "at MKX_Tiles_wait";
    case MKX_TILES_AT_BEGIN:
      return "at MKX_Tiles_begin";
  }
  return "at an unknown place";
}

/* err[] (MKX_TILES_ERR_WORDS, code > 0) in words. */
static void describe(const MKX_Tiles t, const int *err, char *out, size_t n) {
  const MKX_Tiles_dev *d = &t->dev;
  const int peer = err[1] >= 0 && err[1] < d->size ? d->comm_rank[err[1]] : -1;
  const int first = err[6] >= 0 && err[6] < d->size ? d->comm_rank[err[6]] : -1;
  char what[96];
  if (err[4] == MKX_TILES_AT_BEGIN)
    snprintf(what, sizeof what, "rank %d to begin the epoch", peer);
  else
    snprintf(what, sizeof what, "rank %d's data tile (%d, %d)", peer, err[2],
             err[3]);
  const int me = d->comm_rank[d->rank];
  if (err[0] == MKX_ERR_INVALID_ARG) {
    snprintf(out, n,
             "a device function on rank %d was given rank %d and a rectangle "
             "from row %d, column %d, not within the tile set (%lld x %lld "
             "on the node's %d ranks) in epoch %d; the tile set is unusable",
             me, err[1], err[2], err[3], (long long)d->rows, (long long)d->cols,
             d->size, err[5]);
    return;
  }
  if (err[0] == MKX_ERR_TIMEOUT)
    snprintf(out, n,
             "rank %d's wait %s for %s ran out after %lld ms in epoch %d; "
             "the tile set is unusable",
             me, where_name(err[4]), what, (long long)t->comm->opt.timeout_ms,
             err[5]);
  else
    snprintf(out, n,
             "rank %d gave up first, so rank %d's wait %s for %s ended in "
             "epoch %d; the tile set is unusable",
             first, me, where_name(err[4]), what, err[5]);
}

int mkx_tile_set_failure(MKX_Tiles t, const char *fn) {
  if (!t->failure) {
    int err[MKX_TILES_ERR_WORDS];
    const volatile int *e = t->err_host;
    err[0] = e[0];
    if (err[0] <= 0) return MKX_SUCCESS; /* none, or being written */
    for (int i = 1; i < MKX_TILES_ERR_WORDS; i++) err[i] = e[i];
    describe(t, err, t->why, sizeof t->why);
    t->failure = err[0];
  }
  return mkx_error(t->failure, "%s: %s", fn, t->why);
}

int mkx_tile_set_node_rank(MKX_Tiles t, const char *fn, int rank, int *q) {
  const MKX_Comm c = t->comm;
  if (rank < 0 || rank >= c->size)
    return mkx_error(MKX_ERR_INVALID_ARG,
                     "%s: rank %d is not a rank of the tile set's "
                     "communicator (size %d)",
                     fn, rank, c->size);
  if (c->place.node_of_rank[rank] != c->place.node)
    return mkx_error(MKX_ERR_UNSUPPORTED,
                     "%s: rank %d is on node %d, not rank %d's node %d: a "
                     "tile set reaches the ranks of a node",
                     fn, rank, c->place.node_of_rank[rank], c->rank,
                     c->place.node);
  *q = c->place.local_rank_of[rank];
  return MKX_SUCCESS;
}

void mkx_tile_set_dims(MKX_Tiles t, int64_t *rows, int64_t *cols) {
  *rows = t->dev.rows;
  *cols = t->dev.cols;
}

void mkx_tile_set_dev(MKX_Tiles t, MKX_Tiles_dev *dev) { *dev = t->dev; }

static int launched(MKX_Tiles t, int rc, const char *fn) {
  (void)t;
  return rc ? mkx_cuda_rc((cudaError_t)rc, fn, "kernel launch") : MKX_SUCCESS;
}

int mkx_tile_set_begin(MKX_Tiles t, MKX_Stream st) {
  MKX_TRY(mkx_device_set(t->comm->device));
  return launched(t, mkx_tiles_begin_launch(&t->dev, (cudaStream_t)st),
                  "MKX_Tiles_begin");
}

int mkx_tile_set_rect(MKX_Tiles t, int signal, int q, int64_t row0,
                      int64_t nrows, int64_t col0, int64_t ncols,
                      MKX_Stream st) {
  MKX_TRY(mkx_device_set(t->comm->device));
  cudaStream_t s = (cudaStream_t)st;
  return launched(
      t,
      signal ? mkx_tiles_signal_launch(&t->dev, q, row0, nrows, col0, ncols, s)
             : mkx_tiles_wait_launch(&t->dev, q, row0, nrows, col0, ncols, s),
      signal ? "MKX_Tiles_signal" : "MKX_Tiles_wait");
}

#else

static int no_cuda(void) {
  return mkx_error(MKX_ERR_UNSUPPORTED,
                   "MKX_Tiles_create: MKX was built without CUDA; tile sets "
                   "live on the GPU");
}
int mkx_tile_set_make(MKX_Comm c, void *buf, const mkx_tile_set_shape *s,
                      MKX_Tiles *out) {
  (void)c, (void)buf, (void)s, (void)out;
  return no_cuda();
}
/* Never reached: no set exists without CUDA. */
int mkx_tile_set_free(MKX_Tiles t) {
  (void)t;
  return MKX_ERR_INTERNAL;
}
int mkx_tile_set_failure(MKX_Tiles t, const char *fn) {
  (void)t, (void)fn;
  return MKX_SUCCESS;
}
int mkx_tile_set_node_rank(MKX_Tiles t, const char *fn, int rank, int *q) {
  (void)t, (void)fn, (void)rank, (void)q;
  return MKX_ERR_INTERNAL;
}
void mkx_tile_set_dims(MKX_Tiles t, int64_t *rows, int64_t *cols) {
  (void)t;
  *rows = *cols = 0;
}
void mkx_tile_set_dev(MKX_Tiles t, MKX_Tiles_dev *dev) {
  (void)t;
  memset(dev, 0, sizeof *dev);
}
int mkx_tile_set_begin(MKX_Tiles t, MKX_Stream st) {
  (void)t, (void)st;
  return MKX_ERR_INTERNAL;
}
int mkx_tile_set_rect(MKX_Tiles t, int signal, int q, int64_t row0,
                      int64_t nrows, int64_t col0, int64_t ncols,
                      MKX_Stream st) {
  (void)t, (void)signal, (void)q, (void)row0, (void)nrows, (void)col0;
  (void)ncols, (void)st;
  return MKX_ERR_INTERNAL;
}
#endif
