/* The MPI job side the mkx_perf subcommands on device buffers share. */
#define _POSIX_C_SOURCE 200809L
#include "perf_job.h"

#include <errno.h>
#include <string.h>
#include <time.h>
#include "core/device.h"
#include "gemm_engine.h"
#include "ops/path.h"
#include "perf_util.h"

extern char **environ;

int perf_rank;
const char *perf_cmd = "mkx_perf";

/* Distinct GPUs of the job (UUIDs over MPI_Allgather), and whether two
 * ranks share one. */
static void job_gpus(perf_env *e) {
  unsigned char *all = calloc((size_t)e->size, 16);
  if (!all) {
    fprintf(stderr, "%s: out of host memory\n", perf_cmd);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  AI(MPI_Allgather(e->prop.uuid.bytes, 16, MPI_BYTE, all, 16, MPI_BYTE,
                   MPI_COMM_WORLD));
  e->gpus = 0, e->shared = 0;
  for (int q = 0; q < e->size; q++) {
    int seen = 0;
    for (int s = 0; s < q && !seen; s++)
      seen = !memcmp(all + 16 * s, all + 16 * q, 16);
    e->gpus += !seen;
    e->shared |= seen;
  }
  free(all);
}

int perf_env_init(perf_env *e, const char *cmd) {
  int mindev;
  memset(e, 0, sizeof *e);
  perf_cmd = cmd;
  AI(MPI_Comm_rank(MPI_COMM_WORLD, &e->rank));
  AI(MPI_Comm_size(MPI_COMM_WORLD, &e->size));
  perf_rank = e->rank;
  AM(MKX_Comm_create(MPI_COMM_WORLD, MPI_INFO_NULL, &e->mkx));
  AM(MKX_Comm_device(e->mkx, &e->dev));
  AI(MPI_Allreduce(&e->dev, &mindev, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  if (mindev < 0) {
    if (e->rank == 0)
      fprintf(stderr,
              "%s: no GPU on %s (MKX runs the host path there); this "
              "benchmark times device buffers: skipped\n",
              cmd, e->size > 1 ? "some rank" : "this machine");
    AM(MKX_Comm_free(&e->mkx));
    return 77;
  }
  AK(cudaSetDevice(e->dev));
  AK(cudaGetDeviceProperties(&e->prop, e->dev));
  mkx_device_sms sms;
  if (mkx_device_sm_info(e->dev, &sms) == MKX_SUCCESS)
    e->mps = sms.mps, e->ctx_sms = sms.ctx_sms;
  else
    e->mps = -1, e->ctx_sms = e->prop.multiProcessorCount;
  job_gpus(e);
  AK(cudaStreamCreateWithFlags(&e->st, cudaStreamNonBlocking));
  AK(cudaEventCreate(&e->e0));
  AK(cudaEventCreate(&e->e1));
  return 0;
}

void perf_env_fini(perf_env *e) {
  AK(cudaEventDestroy(e->e0));
  AK(cudaEventDestroy(e->e1));
  AK(cudaStreamDestroy(e->st));
  AM(MKX_Comm_free(&e->mkx));
}

void perf_mkx_environment(char *s, size_t len) {
  int n = 0;
  for (char **v = environ; v && *v; v++)
    if (!strncmp(*v, "MKX_", 4))
      perf_cat(s, len, "%s`%s`", n++ ? ", " : "", *v);
  if (n == 0) perf_cat(s, len, "none");
}

void perf_table_title(const perf_env *e, char *s, size_t len) {
  char day[32];
  time_t now = time(NULL);
  struct tm g;
  gmtime_r(&now, &g);
  strftime(day, sizeof day, "%Y-%m-%d %H:%M UTC", &g);
  perf_cat(s, len, "\n### %s, %s, %d rank%s on %d x %s (%d SMs)\n\n", perf_cmd,
           day, e->size, e->size > 1 ? "s" : "", e->gpus, e->prop.name,
           e->prop.multiProcessorCount);
  if (e->shared)
    perf_cat(s, len,
             "Ranks share a GPU (same GPU UUID on several ranks), %s; this "
             "rank's context has %d of its %d SMs.  ",
             e->mps == 1   ? "under MPS"
             : e->mps == 0 ? "in time slices (no MPS)"
                           : "MPS unknown",
             e->ctx_sms, e->prop.multiProcessorCount);
  else
    perf_cat(s, len, "One GPU per rank (GPU UUIDs differ).  ");
}

FILE *perf_table_open(const char *head, const char *outname) {
  fputs(head, stdout);
  fflush(stdout);
  FILE *out = NULL;
  if (outname && (out = fopen(outname, "a")) == NULL) {
    fprintf(stderr, "%s: --out %s: %s\n", perf_cmd, outname, strerror(errno));
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  if (out) fputs(head, out), fflush(out);
  return out;
}

static void paths_taken(const long *before, int reps, char *s, size_t len) {
  int n = 0;
  s[0] = '\0';
  for (int p = 0; p < MKX_PATH_COUNT; p++) {
    long d = mkx_path_starts((mkx_path)p) - before[p];
    if (d <= 0) continue;
    perf_cat(s, len, "%s%s", n++ ? " + " : "", mkx_path_name((mkx_path)p));
    if (d != reps) perf_cat(s, len, " (%ld of %d)", d, reps);
  }
  if (n == 0) perf_cat(s, len, "?");
}

static float *samples(int reps) {
  float *t = calloc((size_t)reps, sizeof *t);
  if (!t) {
    fprintf(stderr, "%s: out of host memory\n", perf_cmd);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return t;
}

/* One timed sample of `call` (or of graph g where call is NULL). */
static float sample(const perf_env *e, perf_call_fn call, const void *ctx,
                    cudaGraphExec_t g) {
  float ms = 0;
  AK(cudaStreamSynchronize(e->st));
  AI(MPI_Barrier(MPI_COMM_WORLD));
  AK(cudaEventRecord(e->e0, e->st));
  if (call)
    call(e, ctx);
  else
    AK(cudaGraphLaunch(g, e->st));
  AK(cudaEventRecord(e->e1, e->st));
  AK(cudaEventSynchronize(e->e1));
  AK(cudaEventElapsedTime(&ms, e->e0, e->e1));
  return ms;
}

/* After the timed runs: GPU work that failed after its call returned
 * gives no number; else the slowest rank's median. */
static float slowest_median(const perf_env *e, float *t, int reps) {
  int async = MKX_SUCCESS;
  AK(cudaStreamSynchronize(e->st));
  AK(cudaGetLastError());
  AM(MKX_Comm_get_async_error(e->mkx, &async));
  if (async != MKX_SUCCESS) {
    fprintf(stderr, "%s: rank %d: a timed call failed: %s: %s\n", perf_cmd,
            e->rank, MKX_Error_string(async), MKX_Get_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  float med = perf_median(t, reps);
  AI(MPI_Allreduce(MPI_IN_PLACE, &med, 1, MPI_FLOAT, MPI_MAX, MPI_COMM_WORLD));
  free(t);
  return med;
}

float perf_time_calls(const perf_env *e, int warmup, int reps,
                      perf_call_fn call, const void *ctx, char *paths,
                      size_t paths_len) {
  float *t = samples(reps);
  long before[MKX_PATH_COUNT];
  for (int w = 0; w < warmup; w++) call(e, ctx);
  for (int p = 0; p < MKX_PATH_COUNT; p++)
    before[p] = mkx_path_starts((mkx_path)p);
  for (int i = 0; i < reps; i++) t[i] = sample(e, call, ctx, NULL);
  const float med = slowest_median(e, t, reps);
  paths_taken(before, reps, paths, paths_len);
  return med;
}

float perf_time_graph(const perf_env *e, int warmup, int reps, MKX_Request r) {
  const char *name = NULL;
  int capturable = 0, ctas = 0;
  AM(MKX_Request_get_path(r, &name, &capturable, &ctas));
  AI(MPI_Allreduce(MPI_IN_PLACE, &capturable, 1, MPI_INT, MPI_MIN,
                   MPI_COMM_WORLD));
  if (!capturable) return -1;
  cudaGraph_t g;
  cudaGraphExec_t ge;
  AK(cudaStreamSynchronize(e->st));
  AK(cudaStreamBeginCapture(e->st, cudaStreamCaptureModeThreadLocal));
  const int rc = MKX_Start(r, e->st);
  AK(cudaStreamEndCapture(e->st, &g));
  AM(rc);
  AK(cudaGraphInstantiate(&ge, g, 0));
  AK(cudaGraphDestroy(g));
  float *t = samples(reps);
  for (int w = 0; w < warmup; w++) AK(cudaGraphLaunch(ge, e->st));
  for (int i = 0; i < reps; i++) t[i] = sample(e, NULL, NULL, ge);
  const float med = slowest_median(e, t, reps);
  AK(cudaGraphExecDestroy(ge));
  return med;
}

void perf_graph_cells(char *line, size_t len, double call_ms, double graph_ms) {
  if (graph_ms <= 0)
    perf_cat(line, len, " - | - |");
  else
    perf_cat(line, len, " %.3f | %.2f |", graph_ms, call_ms / graph_ms);
}

const char perf_graph_legend[] =
    "graph ms: a plan of the same call whose MKX_Start is captured once "
    "into a CUDA graph on every rank and replayed, timed the same way; "
    "MKX / graph: the call's ms over the replay's (above 1: what a graph "
    "saves of launches and host work; - where the path may not be "
    "captured).";

void perf_bounds_measure(const perf_env *e, perf_bounds *b) {
  int clock_khz = 0, bus_bits = 0;
  AK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, e->dev));
  AK(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth,
                            e->dev));
  /* double data rate */
  b->hbm_bytes_s = 2.0 * clock_khz * 1e3 * (bus_bits / 8.0);
  b->engine_tflops = 0;
  if (e->rank == 0) {
    const int64_t n = 8192;
    const size_t bytes = (size_t)(n * n) * 2;
    void *a = NULL, *bm = NULL, *c = NULL;
    AK(cudaMalloc(&a, bytes));
    AK(cudaMalloc(&bm, bytes));
    AK(cudaMalloc(&c, bytes));
    perf_fill_bf16(a, (size_t)(n * n), 1, e->st);
    perf_fill_bf16(bm, (size_t)(n * n), 2, e->st);
    mkx_gemm_desc d;
    memset(&d, 0, sizeof d);
    d.m = d.n = d.k = n;
    d.a = a, d.lda = n, d.b = bm, d.ldb = n, d.b_kmajor = 1;
    d.c = c, d.ldc = n;
    d.ab_type = d.c_type = MKX_GEMM_BF16;
    float t[10];
    for (int i = 0; i < 13; i++) {
      AK(cudaEventRecord(e->e0, e->st));
      const int rc = mkx_gemm_run(&d, e->st);
      if (rc) {
        fprintf(stderr, "%s: the engine's reference GEMM: %d\n", perf_cmd, rc);
        MPI_Abort(MPI_COMM_WORLD, 1);
      }
      AK(cudaEventRecord(e->e1, e->st));
      AK(cudaEventSynchronize(e->e1));
      if (i >= 3) AK(cudaEventElapsedTime(&t[i - 3], e->e0, e->e1));
    }
    b->engine_tflops = 2.0 * n * n * n / (perf_median(t, 10) * 1e-3) / 1e12;
    AK(cudaFree(a));
    AK(cudaFree(bm));
    AK(cudaFree(c));
  }
  AI(MPI_Bcast(&b->engine_tflops, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD));
}
