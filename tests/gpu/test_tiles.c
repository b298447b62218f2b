/* Tile sets on the GPU (include/mkx_tiles.h, docs/tiles.md), on however
 * many ranks share the node (skips without a GPU):
 *   - a user's kernels (tests/gpu/tiles_kernels.cu): every rank writes its
 *     block of rows into every rank's copy in kernel tiles of 32 x 24,
 *     signalling each; every rank reads its own copy in kernel tiles of
 *     40 x 56, each after a wait; data tiles of 48 x 40 over 203 x 137
 *     (no size divides another), three epochs, outputs poisoned before
 *     each and compared with the host's values;
 *   - kernels without source: the copy engine puts a rank's block into the
 *     peers' copies (a padded leading dimension), MKX_Tiles_signal follows
 *     it on the stream, MKX_Tiles_wait orders the copy out;
 *   - the same epoch captured into a CUDA graph and replayed three times;
 *   - MKX_Allgather_tiles (by its SM kernel, then by the copy engines)
 *     feeding MKX_Tiles_gemm (cuBLAS in chunks of 64 rows, each after a wait
 *     for its rows of A, signalling its rows of C in a second set), in fp32 on small integers so that the product is
 *     exact, against the host; then the same captured and replayed twice
 *     on new inputs;
 *   - MKX_Reduce_scatter_tiles and MKX_Allreduce_tiles on a stream of their
 *     own while every rank's producer writes its partial on another: the
 *     block of the sum, and the sum read back through the output set's
 *     tiles, two epochs;
 *   - the same two reductions of bf16 and fp16 sets, row- and column-major,
 *     with leading dimensions that let the kernel move 16 bytes at a time
 *     and ones that do not, against the host's sums (exact: small integers);
 *   - all of these reductions again with tiles_reduce=staged;
 *   - a kernel that signals rows outside the set: MKX_ERR_INVALID_ARG on its
 *     rank, naming the rectangle; the other ranks' waits end on the tell
 *     (MKX_ERR_PEER) instead of the bound;
 *   - a tile never signalled: every rank's wait ends within the bound
 *     (MKX_ERR_TIMEOUT, or MKX_ERR_PEER once told), the set then refuses
 *     work with that code, and the communicator and other sets still work.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime.h>
#include <mpi.h>
#include "mkx.h"
#include "mkx_tiles.h"
#include "tiles_kernels.h"
#include "../common/check.h"
#include "../common/cuda_check.h"
#include "../common/num16.h"

static int rank, size;
/* the reductions' way of waiting (option tiles_reduce), for messages */
static const char *red_mode = "persistent";

#define CUDA(call) MT_CUDA_AT(rank, call)
#define MKX(call) MT_MKX_AT(rank, call)

enum { ROWS = 203, COLS = 137, TR = 48, TC = 40 };

typedef struct run {
  MKX_Tiles t;
  MKX_Tiles_dev d;
  float *buf, *out, *host;
  int *failed;
  int64_t ld;
  cudaStream_t st;
} run;

static void block_of(int q, int64_t *r0, int64_t *r1) {
  MKX_Block_range(ROWS, size, q, r0, r1);
  *r1 += *r0;
}

static void run_init(run *r, MKX_Comm c, int64_t ld) {
  memset(r, 0, sizeof *r);
  r->ld = ld;
  CUDA(cudaMalloc((void **)&r->buf, sizeof(float) * ROWS * ld));
  CUDA(cudaMalloc((void **)&r->out, sizeof(float) * ROWS * COLS));
  CUDA(cudaMalloc((void **)&r->failed, sizeof(int)));
  CUDA(cudaMallocHost((void **)&r->host, sizeof(float) * ROWS * COLS));
  CUDA(cudaStreamCreateWithFlags(&r->st, cudaStreamNonBlocking));
  MKX(MKX_Tiles_create(r->buf, ROWS, COLS, ld, TR, TC, MKX_FP32, MKX_ROW_MAJOR,
                       c, &r->t));
  MKX(MKX_Tiles_device(r->t, &r->d));
}

static void run_free(run *r) {
  MKX(MKX_Tiles_free(&r->t));
  CHECK(r->t == NULL, "MKX_Tiles_free sets the handle to NULL");
  cudaFree(r->buf), cudaFree(r->out), cudaFree(r->failed);
  cudaFreeHost(r->host);
  cudaStreamDestroy(r->st);
}

static void poison(run *r) {
  CUDA(cudaMemsetAsync(r->out, 0xff, sizeof(float) * ROWS * COLS, r->st));
  CUDA(cudaMemsetAsync(r->failed, 0, sizeof(int), r->st));
}

/* The user's kernels' epoch: produce into every node rank, consume. */
static void kernels_epoch(run *r) {
  int64_t r0, r1;
  block_of(rank, &r0, &r1);
  MKX(MKX_Tiles_begin(r->t, r->st));
  for (int q = 0; q < r->d.size; q++)
    CUDA((cudaError_t)tk_produce(&r->d, r->d.comm_rank[q], r0, r1, 32, 24, 0,
                                 r->st));
  CUDA((cudaError_t)tk_consume(&r->d, 40, 56, r->out, r->failed, r->st));
}

/* The copy engine's epoch: copies into the peers, signals, a wait. */
static void copies_epoch(run *r, int e) {
  int64_t r0, r1;
  block_of(rank, &r0, &r1);
  float *src = malloc(sizeof(float) * (size_t)((r1 - r0) * COLS) + 1);
  for (int64_t i = r0; i < r1; i++)
    for (int64_t j = 0; j < COLS; j++)
      src[(i - r0) * COLS + j] = tk_value(e, i, j);
  MKX(MKX_Tiles_begin(r->t, r->st));
  for (int q = 0; q < r->d.size && r1 > r0; q++) {
    CUDA(cudaMemcpy2DAsync(
        r->d.data[q] + sizeof(float) * (size_t)(r0 * r->d.ld[q]),
        sizeof(float) * (size_t)r->d.ld[q], src, sizeof(float) * COLS,
        sizeof(float) * COLS, (size_t)(r1 - r0), cudaMemcpyDefault, r->st));
    MKX(MKX_Tiles_signal(r->t, r->d.comm_rank[q], r0, r1 - r0, 0, COLS, r->st));
  }
  MKX(MKX_Tiles_wait(r->t, rank, 0, ROWS, 0, COLS, r->st));
  CUDA(cudaMemcpy2DAsync(r->out, sizeof(float) * COLS, r->buf,
                         sizeof(float) * (size_t)r->ld, sizeof(float) * COLS,
                         ROWS, cudaMemcpyDefault, r->st));
  CUDA(cudaStreamSynchronize(r->st));
  free(src);
}

/* The copy out against the host's values of epoch e. */
static void check_out(run *r, int e, const char *what) {
  int failed = 0, bad = 0, first = -1;
  CUDA(cudaMemcpyAsync(r->host, r->out, sizeof(float) * ROWS * COLS,
                       cudaMemcpyDeviceToHost, r->st));
  CUDA(cudaMemcpyAsync(&failed, r->failed, sizeof(int), cudaMemcpyDeviceToHost,
                       r->st));
  CUDA(cudaStreamSynchronize(r->st));
  for (int64_t i = 0; i < ROWS; i++)
    for (int64_t j = 0; j < COLS; j++)
      if (r->host[i * COLS + j] != tk_value(e, i, j) && bad++ == 0)
        first = (int)(i * COLS + j);
  int async = -1;
  MKX(MKX_Tiles_get_async_error(r->t, &async));
  CHECK(!failed && bad == 0 && async == MKX_SUCCESS,
        "%s, epoch %d: %d of %d elements wrong (first at row %d, column %d), "
        "waits failed: %d, async error %d",
        what, e, bad, ROWS * COLS, first / COLS, first % COLS, failed, async);
}

static void graph_replays(run *r, int e0) {
  cudaGraph_t g;
  cudaGraphExec_t x;
  CUDA(cudaStreamBeginCapture(r->st, cudaStreamCaptureModeThreadLocal));
  kernels_epoch(r);
  CUDA(cudaStreamEndCapture(r->st, &g));
  CUDA(cudaGraphInstantiate(&x, g, 0));
  for (int k = 1; k <= 3; k++) {
    poison(r);
    CUDA(cudaGraphLaunch(x, r->st));
    check_out(r, e0 + k, "graph replay");
  }
  cudaGraphExecDestroy(x);
  cudaGraphDestroy(g);
}

enum { GN = 72 };

typedef struct gemm_run {
  MKX_Tiles a, c;
  float *abuf, *send, *b, *cdev, *host_send, *host_c;
  double *want;
  float bh[COLS * GN];
  cudaStream_t st;
} gemm_run;

/* This rank's rows of A for inputs `v` (its block), and the product every
 * rank should get. */
static void gemm_inputs(gemm_run *g, int v) {
  for (int q = 0; q < size; q++) {
    int64_t r0, r1;
    block_of(q, &r0, &r1);
    for (int64_t i = r0; i < r1; i++)
      for (int64_t j = 0; j < COLS; j++)
        if (q == rank) g->host_send[(i - r0) * COLS + j] = tk_value(v, i, j);
  }
  for (int64_t i = 0; i < ROWS; i++)
    for (int64_t j = 0; j < GN; j++) {
      double acc = 0;
      for (int64_t k = 0; k < COLS; k++)
        acc += (double)tk_value(v, i, k) * g->bh[k * GN + j];
      g->want[i * GN + j] = acc;
    }
}

static void gemm_epoch(gemm_run *g) {
  MKX(MKX_Tiles_begin(g->a, g->st));
  MKX(MKX_Tiles_begin(g->c, g->st));
  MKX(MKX_Allgather_tiles(g->send, COLS, g->a, g->st));
  MKX(MKX_Tiles_gemm(g->a, rank, g->b, GN, GN, MKX_NO_TRANS, g->cdev, GN,
                     MKX_FP32, g->c, 64, g->st));
  MKX(MKX_Tiles_wait(g->c, rank, 0, ROWS, 0, GN, g->st));
}

static void gemm_check(gemm_run *g, const char *what) {
  int bad = 0, first = -1;
  CUDA(cudaMemcpyAsync(g->host_c, g->cdev, sizeof(float) * ROWS * GN,
                       cudaMemcpyDeviceToHost, g->st));
  CUDA(cudaStreamSynchronize(g->st));
  for (int i = 0; i < ROWS * GN; i++)
    if ((double)g->host_c[i] != g->want[i] && bad++ == 0) first = i;
  CHECK(bad == 0, "%s: %d of %d elements of C wrong (first at %d: %g, want %g)",
        what, bad, ROWS * GN, first, first < 0 ? 0.0 : g->host_c[first],
        first < 0 ? 0.0 : g->want[first]);
}

static void upload(gemm_run *g, int v) {
  int64_t r0, r1;
  block_of(rank, &r0, &r1);
  gemm_inputs(g, v);
  CUDA(cudaMemcpyAsync(g->send, g->host_send,
                       sizeof(float) * (size_t)((r1 - r0) * COLS) + 4,
                       cudaMemcpyHostToDevice, g->st));
  CUDA(cudaMemsetAsync(g->cdev, 0xff, sizeof(float) * ROWS * GN, g->st));
}

/* AllGather into a set, cuBLAS on its tiles, C signalled in another; `how`
 * names the AllGather's way (the communicator's tiles_ag_sm_bytes). */
static void gather_gemm(MKX_Comm c, const char *how) {
  gemm_run g;
  memset(&g, 0, sizeof g);
  CUDA(cudaStreamCreateWithFlags(&g.st, cudaStreamNonBlocking));
  CUDA(cudaMalloc((void **)&g.abuf, sizeof(float) * ROWS * (COLS + 3)));
  CUDA(cudaMalloc((void **)&g.send, sizeof(float) * ROWS * COLS + 4));
  CUDA(cudaMalloc((void **)&g.b, sizeof(float) * COLS * GN));
  CUDA(cudaMalloc((void **)&g.cdev, sizeof(float) * ROWS * GN));
  CUDA(cudaMallocHost((void **)&g.host_send, sizeof(float) * ROWS * COLS + 4));
  CUDA(cudaMallocHost((void **)&g.host_c, sizeof(float) * ROWS * GN));
  g.want = malloc(sizeof(double) * ROWS * GN);
  for (int i = 0; i < COLS * GN; i++) g.bh[i] = (float)((i * 7 + 3) % 5 - 2);
  CUDA(cudaMemcpy(g.b, g.bh, sizeof g.bh, cudaMemcpyHostToDevice));
  MKX(MKX_Tiles_create(g.abuf, ROWS, COLS, COLS + 3, TR, TC, MKX_FP32,
                       MKX_ROW_MAJOR, c, &g.a));
  MKX(MKX_Tiles_create(NULL, ROWS, GN, 0, 32, 32, MKX_FP32, MKX_ROW_MAJOR, c,
                       &g.c));
  upload(&g, 1);
  gemm_epoch(&g);
  char what[128];
  snprintf(what, sizeof what, "MKX_Allgather_tiles (%s) + MKX_Tiles_gemm", how);
  gemm_check(&g, what);
  cudaGraph_t gr;
  cudaGraphExec_t x;
  CUDA(cudaStreamBeginCapture(g.st, cudaStreamCaptureModeThreadLocal));
  gemm_epoch(&g);
  CUDA(cudaStreamEndCapture(g.st, &gr));
  CUDA(cudaGraphInstantiate(&x, gr, 0));
  for (int v = 2; v <= 3; v++) {
    upload(&g, v);
    CUDA(cudaGraphLaunch(x, g.st));
    gemm_check(&g, "the same, graph replay");
  }
  cudaGraphExecDestroy(x);
  cudaGraphDestroy(gr);
  MKX(MKX_Tiles_free(&g.a));
  MKX(MKX_Tiles_free(&g.c));
  cudaFree(g.abuf), cudaFree(g.send), cudaFree(g.b), cudaFree(g.cdev);
  cudaFreeHost(g.host_send), cudaFreeHost(g.host_c);
  free(g.want);
  cudaStreamDestroy(g.st);
}

/* Rank q's partial in epoch e is tk_value(e + q, ...): the sum's element. */
static float sum_of(int e, int64_t i, int64_t j) {
  float acc = 0;
  for (int q = 0; q < size; q++) acc += tk_value(e + q, i, j);
  return acc;
}

static void reductions(MKX_Comm c) {
  run in, out;
  run_init(&in, c, COLS);
  run_init(&out, c, COLS);
  cudaStream_t ps;
  cudaEvent_t ev;
  CUDA(cudaStreamCreateWithFlags(&ps, cudaStreamNonBlocking));
  CUDA(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  int64_t r0, r1;
  block_of(rank, &r0, &r1);
  float *recv, *host = malloc(sizeof(float) * ROWS * COLS);
  CUDA(cudaMalloc((void **)&recv, sizeof(float) * ROWS * COLS));
  for (int e = 1; e <= 2; e++) {
    poison(&out);
    CUDA(cudaMemsetAsync(recv, 0xff, sizeof(float) * ROWS * COLS, out.st));
    MKX(MKX_Tiles_begin(in.t, out.st));
    MKX(MKX_Tiles_begin(out.t, out.st));
    CUDA(cudaEventRecord(ev, out.st));
    CUDA(cudaStreamWaitEvent(ps, ev, 0));
    /* the producer first: a stream whose work waits holds its hardware
     * queue, which the producer's stream may share (docs/tiles.md) */
    CUDA((cudaError_t)tk_produce(&in.d, rank, 0, ROWS, 32, 24, rank, ps));
    MKX(MKX_Reduce_scatter_tiles(in.t, recv, COLS, out.st));
    MKX(MKX_Allreduce_tiles(in.t, out.t, out.st));
    CUDA((cudaError_t)tk_consume(&out.d, 40, 56, out.out, out.failed, out.st));
    CUDA(cudaEventRecord(ev, ps));
    CUDA(cudaStreamWaitEvent(out.st, ev, 0));
    CUDA(cudaMemcpyAsync(host, recv, sizeof(float) * (size_t)((r1 - r0) * COLS),
                         cudaMemcpyDeviceToHost, out.st));
    CUDA(cudaStreamSynchronize(out.st));
    int bad = 0;
    for (int64_t i = r0; i < r1; i++)
      for (int64_t j = 0; j < COLS; j++)
        bad += host[(i - r0) * COLS + j] != sum_of(e, i, j);
    CHECK(bad == 0, "MKX_Reduce_scatter_tiles (%s), epoch %d: %d of %lld wrong",
          red_mode, e, bad, (long long)((r1 - r0) * COLS));
    CUDA(cudaMemcpy(host, out.out, sizeof(float) * ROWS * COLS,
                    cudaMemcpyDeviceToHost));
    bad = 0;
    for (int64_t i = 0; i < ROWS; i++)
      for (int64_t j = 0; j < COLS; j++)
        bad += host[i * COLS + j] != sum_of(e, i, j);
    int failed = 0, async = -1;
    CUDA(cudaMemcpy(&failed, out.failed, sizeof(int), cudaMemcpyDeviceToHost));
    MKX(MKX_Tiles_get_async_error(in.t, &async));
    CHECK(bad == 0 && !failed && async == MKX_SUCCESS,
          "MKX_Allreduce_tiles (%s) read through out's tiles, epoch %d: %d of "
          "%d "
          "wrong, waits failed %d, async %d",
          red_mode, e, bad, ROWS * COLS, failed, async);
  }
  cudaFree(recv);
  free(host);
  cudaEventDestroy(ev);
  cudaStreamDestroy(ps);
  run_free(&in);
  run_free(&out);
}

/* Rank q's partial of the 16-bit reductions: small integers. */
static float part16(int q, int64_t i, int64_t j) {
  return (float)((i * 3 + j * 5 + q * 7) % 7 - 3);
}

typedef struct case16 {
  MKX_Datatype dt;
  MKX_Order order;
  int64_t rows, cols, pad; /* ld = the stored dimension + pad */
} case16;

/* Element (i, j) of a rows x cols matrix with leading dimension ld. */
static int64_t at16(MKX_Order o, int64_t ld, int64_t i, int64_t j) {
  return o == MKX_COL_MAJOR ? i + j * ld : i * ld + j;
}

static uint16_t to16(MKX_Datatype dt, float v) {
  return dt == MKX_BF16 ? mt_f32_to_bf16(v) : mt_f32_to_f16(v);
}
static float from16(MKX_Datatype dt, uint16_t h) {
  return dt == MKX_BF16 ? mt_bf16_to_f32(h) : mt_f16_to_f32(h);
}

/* Counts the elements of rows [r0, r0 + nr) of a copy h (leading
 * dimension ld) that are not the sum of the ranks' partials. */
static long wrong16(const case16 *k, const uint16_t *h, int64_t ld, int64_t r0,
                    int64_t nr) {
  long bad = 0;
  for (int64_t i = 0; i < nr; i++)
    for (int64_t j = 0; j < k->cols; j++) {
      float want = 0;
      for (int q = 0; q < size; q++) want += part16(q, r0 + i, j);
      bad += from16(k->dt, h[at16(k->order, ld, i, j)]) != want;
    }
  return bad;
}

static void reduction16(MKX_Comm c, const case16 *k) {
  const int cm = k->order == MKX_COL_MAJOR;
  const int64_t ld = (cm ? k->rows : k->cols) + k->pad;
  const size_t n = (size_t)(ld * (cm ? k->cols : k->rows));
  int64_t r0, nr;
  MKX_Block_range(k->rows, size, rank, &r0, &nr);
  const int64_t ld_recv = cm ? nr : k->cols;
  uint16_t *h = malloc(n * 2), *hr = malloc((size_t)(nr * k->cols) * 2 + 2);
  for (size_t x = 0; x < n; x++) h[x] = 0xffff; /* NaN in the padding */
  for (int64_t i = 0; i < k->rows; i++)
    for (int64_t j = 0; j < k->cols; j++)
      h[at16(k->order, ld, i, j)] = to16(k->dt, part16(rank, i, j));
  void *in, *outb, *recv;
  CUDA(cudaMalloc(&in, n * 2));
  CUDA(cudaMalloc(&outb, n * 2));
  CUDA(cudaMalloc(&recv, (size_t)(nr * k->cols) * 2 + 2));
  CUDA(cudaMemcpy(in, h, n * 2, cudaMemcpyHostToDevice));
  CUDA(cudaMemset(outb, 0xff, n * 2));
  CUDA(cudaMemset(recv, 0xff, (size_t)(nr * k->cols) * 2 + 2));
  cudaStream_t st;
  CUDA(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  MKX_Tiles ti, to;
  MKX(MKX_Tiles_create(in, k->rows, k->cols, ld, 64, 128, k->dt, k->order, c,
                       &ti));
  MKX(MKX_Tiles_create(outb, k->rows, k->cols, ld, 64, 128, k->dt, k->order, c,
                       &to));
  MKX(MKX_Tiles_begin(ti, st));
  MKX(MKX_Tiles_begin(to, st));
  MKX(MKX_Tiles_signal(ti, rank, 0, k->rows, 0, k->cols, st));
  MKX(MKX_Reduce_scatter_tiles(ti, recv, ld_recv, st));
  MKX(MKX_Allreduce_tiles(ti, to, st));
  /* the other ranks' blocks of the sum, written into this copy */
  MKX(MKX_Tiles_wait(to, rank, 0, k->rows, 0, k->cols, st));
  CUDA(cudaStreamSynchronize(st));
  int async = -1;
  MKX(MKX_Tiles_get_async_error(ti, &async));
  const char *name = k->dt == MKX_BF16 ? "bf16" : "fp16";
  const char *order = cm ? "column-major" : "row-major";
  CUDA(
      cudaMemcpy(hr, recv, (size_t)(nr * k->cols) * 2, cudaMemcpyDeviceToHost));
  long bad = wrong16(k, hr, ld_recv, r0, nr);
  CHECK(
      bad == 0 && async == MKX_SUCCESS,
      "MKX_Reduce_scatter_tiles (%s), %s %s %lld x %lld, ld %lld: %ld of %lld "
      "wrong, async %d",
      red_mode, name, order, (long long)k->rows, (long long)k->cols,
      (long long)ld, bad, (long long)(nr * k->cols), async);
  CUDA(cudaMemcpy(h, outb, n * 2, cudaMemcpyDeviceToHost));
  bad = wrong16(k, h, ld, 0, k->rows);
  CHECK(bad == 0, "MKX_Allreduce_tiles (%s), %s %s, ld %lld: %ld wrong",
        red_mode, name, order, (long long)ld, bad);
  MKX(MKX_Tiles_free(&ti));
  MKX(MKX_Tiles_free(&to));
  cudaFree(in), cudaFree(outb), cudaFree(recv);
  cudaStreamDestroy(st);
  free(h), free(hr);
}

static void reductions16(MKX_Comm c) {
  const MKX_Datatype dts[2] = {MKX_BF16, MKX_FP16};
  for (int d = 0; d < 2; d++)
    for (int o = 0; o < 2; o++)
      for (int pad = 0; pad <= 3; pad += 3) {
        const case16 k = {dts[d], o ? MKX_COL_MAJOR : MKX_ROW_MAJOR, 256, 264,
                          pad};
        reduction16(c, &k);
      }
}

/* Every rank waits for a tile of its copy that nobody signals. */
static void never_signalled(MKX_Comm c) {
  run r;
  run_init(&r, c, COLS);
  MKX(MKX_Tiles_begin(r.t, r.st));
  const double t0 = MPI_Wtime();
  MKX(MKX_Tiles_wait(r.t, rank, ROWS - 1, 1, COLS - 1, 1, r.st));
  CUDA(cudaStreamSynchronize(r.st));
  const double waited = MPI_Wtime() - t0;
  int async = -1;
  MKX(MKX_Tiles_get_async_error(r.t, &async));
  CHECK(async == MKX_ERR_TIMEOUT || async == MKX_ERR_PEER,
        "a tile never signalled: async error %d after %.1f s (%s)", async,
        waited, MKX_Get_last_error());
  int timeouts = async == MKX_ERR_TIMEOUT, any = 0;
  MPI_Allreduce(&timeouts, &any, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  CHECK(any >= 1, "some rank's wait ran out (%d did)", any);
  const int rc = MKX_Tiles_begin(r.t, r.st);
  CHECK(rc == async && strstr(MKX_Get_last_error(), "data tile (4, 3)"),
        "the failed set refuses a begin with its failure: %d, \"%s\"", rc,
        MKX_Get_last_error());
  int comm_err = -1;
  MKX(MKX_Comm_get_async_error(c, &comm_err));
  CHECK(comm_err == MKX_SUCCESS, "the communicator stays usable (%d)",
        comm_err);
  run_free(&r);
}

/* Rank 0's kernel signals rows past the tensor; the others wait for a
 * tile nobody signals. */
static void bad_device_args(MKX_Comm c) {
  run r;
  run_init(&r, c, COLS);
  MKX(MKX_Tiles_begin(r.t, r.st));
  if (rank == 0)
    CUDA((cudaError_t)tk_signal(&r.d, 0, ROWS, 1, 0, COLS, r.st));
  else
    MKX(MKX_Tiles_wait(r.t, rank, 0, 1, 0, 1, r.st));
  const double t0 = MPI_Wtime();
  CUDA(cudaStreamSynchronize(r.st));
  const double waited = MPI_Wtime() - t0;
  int async = -1;
  MKX(MKX_Tiles_get_async_error(r.t, &async));
  if (rank == 0)
    CHECK(async == MKX_ERR_INVALID_ARG &&
              strstr(MKX_Get_last_error(), "from row 203, column 0"),
          "rows past the tensor in a kernel: %d, \"%s\"", async,
          MKX_Get_last_error());
  else
    CHECK(async == MKX_ERR_PEER && waited < 2.5,
          "told of rank 0's bad arguments: %d after %.1f s (%s)", async, waited,
          MKX_Get_last_error());
  run_free(&r);
}

/* A communicator of every rank with the tests' timeout and one option. */
static MKX_Comm comm_with(const char *key, const char *value) {
  MPI_Info info;
  MKX_Comm c;
  MPI_Info_create(&info);
  MPI_Info_set(info, "mkx_timeout_ms", "3000");
  if (key) MPI_Info_set(info, key, value);
  MKX(MKX_Comm_create(MPI_COMM_WORLD, info, &c));
  MPI_Info_free(&info);
  return c;
}

int main(int argc, char **argv) {
  int ndev = 0;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    MPI_Finalize();
    return CHECK_SKIP;
  }
  check_set_rank(rank, size);
  check_show_passes(rank == 0);
  MKX_Comm c = comm_with(NULL, NULL);
  int local = 0;
  MKX(MKX_Comm_local_size(c, &local));
  if (local != size) {
    if (rank == 0)
      printf("# one node only: %d of %d ranks here\n", local, size);
    MKX(MKX_Comm_free(&c));
    MPI_Finalize();
    return CHECK_SKIP;
  }
  run r;
  run_init(&r, c, COLS);
  for (int e = 1; e <= 3; e++) {
    poison(&r);
    kernels_epoch(&r);
    check_out(&r, e, "a user's kernels");
  }
  graph_replays(&r, 3);
  run_free(&r);

  run p;
  run_init(&p, c, COLS + 9);
  for (int e = 1; e <= 2; e++) {
    poison(&p);
    copies_epoch(&p, e);
    check_out(&p, e, "copies, MKX_Tiles_signal and MKX_Tiles_wait");
  }
  gather_gemm(c, "SM kernel");
  MKX_Comm ce = comm_with("mkx_tiles_ag_sm_bytes", "0");
  gather_gemm(ce, "copy engines");
  MKX(MKX_Comm_free(&ce));
  reductions(c);
  reductions16(c);
  MKX_Comm cs = comm_with("mkx_tiles_reduce", "staged");
  red_mode = "staged";
  reductions(cs);
  reductions16(cs);
  MKX(MKX_Comm_free(&cs));
  bad_device_args(c);
  never_signalled(c);
  /* another set still works after one failed */
  poison(&p);
  copies_epoch(&p, 3);
  check_out(&p, 3, "copies after another set failed");
  run_free(&p);

  MKX(MKX_Comm_free(&c));
  int failed = check_failed(), total = 0;
  MPI_Allreduce(&failed, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0)
    printf("%s test_tiles: %d ranks, %d checks, %d failures\n",
           total ? "FAIL" : "PASS", size, check_count(), total);
  MPI_Finalize();
  return total ? 1 : 0;
}
