/*
 * mkx_perf tp: the fused tensor-parallel calls against what users would
 * otherwise run, in the same MPI run on the same GPUs (run with
 * `mpirun -np P mkx_perf tp ...`, one GPU per rank, or several ranks on one
 * GPU under NVIDIA MPS):
 *
 *   mkx     the MKX call (persistent plan, MKX_Start), fused path
 *   serial  cuBLAS GEMM and NCCL collective on one stream, one after the other
 *           (AllGather then GEMM; GEMM then ReduceScatter / AllReduce)
 *   gemm    the cuBLAS GEMM alone, coll the NCCL collective alone
 *   ideal   max(gemm, coll): perfect overlap
 *
 * bf16 in, bf16 out, B stored N x K (a weight as in nn.Linear); --dtype fp8:
 * e4m3 A and B with per-tensor scales (the _scaled calls), bf16 out, and
 * cuBLASLt's fp8 GEMM in the baselines (NCCL gathers fp8 bytes; the
 * reductions' partials are bf16).  Every sample
 * starts after an MPI barrier; the variants are interleaved sample by
 * sample so that clocks and power state hit all alike.  Reported: medians
 * (ms) of the slowest rank, and ratios serial/mkx and ideal/mkx.
 *
 * Ranks that share a GPU (same host name and PCI bus id, e.g. under MPS):
 * NCCL refuses two ranks on one device, so no NCCL communicator is made;
 * serial, coll, ideal, serial/mkx and ideal/mkx print "-", gemm is every
 * rank's cuBLAS GEMM at once on the shared GPU, and the table's first line
 * says "N ranks on G x GPU" and that ranks share a GPU.
 *
 *   mkx_perf tp [--op ag|rs|ar|all] [--shape MxNxK]... [--full] [--small]
 *               [--reps N] [--out FILE] [--overlap auto|yes|no]
 *               [--vnode G --hier host|gpu|nvlink|proxy [--net tcp|shm]]
 *               [--versus KEY=VALUE]
 *               [--no-nccl] [--one-rank] [--graph] [--host-times]
 *               [--dtype bf16|fp8] [--help]
 * Without --shape: M = 8192, N = K = 8192; --full: the large-shape table
 * (M in 4096..32768, (N, K) = (8192, 8192) and (28672, 8192) for ag,
 * (8192, 28672) for rs and ar); --small: 6 small and mid-size shapes
 * (128 x 1024 x 1024 ... 2048 x 8192 x 8192), with --full after it.
 * M, N, K are the global GEMM sizes: ag splits M over the ranks (each rank
 * multiplies the gathered M x K by its own N x K weight), rs and ar split K.
 * --out FILE: appends the table (date UTC, GPUs, options in its first line).
 * --overlap: MKX's option tp_overlap (the overlapped or the split
 * single-node path; default auto).  --vnode G:
 * MKX runs on virtual nodes of G ranks over tcp (--net shm: the shared
 * memory transport, capped by options net_shm_bandwidth and
 * net_shm_latency_us) with option hier_gemm (the several-node paths;
 * cuBLAS + NCCL still run over NVLink on one node), and a comment line per
 * shape gives the CPU time, commands and megabytes of the network proxy
 * thread per MKX call and how long its transport had writes in flight;
 * over shm with a cap, another gives those megabytes' time at the cap and
 * mkx / max(gemm, that time).
 * --versus KEY=VALUE: a second MKX communicator with that option too (e.g.
 * tp_overlap=no, tp_split_gemm=cublas, fused=off), interleaved with the
 * others: two more columns, `mkx (KEY=VALUE)`, its time, and `serial/that`,
 * serial / its time ("-" without NCCL).  --no-nccl: as if ranks shared a
 * GPU (no NCCL communicator, no serial, coll, ideal).  --one-rank: the
 * job's whole product by the same MKX call on rank 0 alone (a communicator
 * over MPI_COMM_SELF with the same options, on the same GPU, its own
 * global-size buffers), interleaved with the others; while it runs the
 * other ranks only join the sample's barrier.  ag: M x P*N x K (every
 * rank's weight side by side), rs and ar: M x N x K.  Two more columns,
 * after --versus's: `1 rank`, rank 0's time, and `mkx/1rank`, mkx / 1 rank
 * to 3 decimals (what splitting a GPU's work over P ranks costs).  Ignored,
 * with a note, when the job has one rank.
 * --warmup N: untimed samples of every variant before the timed ones
 * (default 3): with --versus tune=adapt, the runs its search has had.
 * --graph: the mkx variant's MKX_Start also captured once into a CUDA
 * graph (on every rank) and replayed, interleaved with the others: two
 * more columns, `graph`, its time, and `mkx/graph`, mkx / graph (above 1:
 * the launch and host overhead a graph saves).
 * A legend line under the title names the columns when --no-nccl,
 * --one-rank, --graph or a shared GPU changes them.  --host-times: a comment line
 * per shape with the host's time to enqueue each variant.
 */
#define _POSIX_C_SOURCE 200809L
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "core/comm_net.h" /* the proxy's cost (internal) */
#include "mkx.h"
#include "perf_job.h"
#include "perf_lt.h"
#include "perf_tp_ops.h"
#include "perf_util.h"

#define PK(x)                                                                  \
  do {                                                                         \
    cudaError_t e_ = (x);                                                      \
    if (e_ != cudaSuccess) {                                                   \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x,               \
              cudaGetErrorString(e_));                                         \
      MPI_Abort(MPI_COMM_WORLD, 1);                                            \
    }                                                                          \
  } while (0)
#define PN(x)                                                                  \
  do {                                                                         \
    ncclResult_t r_ = (x);                                                     \
    if (r_ != ncclSuccess) {                                                   \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x,               \
              ncclGetErrorString(r_));                                         \
      MPI_Abort(MPI_COMM_WORLD, 1);                                            \
    }                                                                          \
  } while (0)
#define PB(x)                                                                  \
  do {                                                                         \
    cublasStatus_t s_ = (x);                                                   \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                         \
      fprintf(stderr, "%s:%d: %s: cublas %d\n", __FILE__, __LINE__, #x,        \
              (int)s_);                                                        \
      MPI_Abort(MPI_COMM_WORLD, 1);                                            \
    }                                                                          \
  } while (0)
/* The variants, in the order one sample of each is interleaved. */
enum { V_MKX, V_SERIAL, V_GEMM, V_COLL, V_MKX2, V_ONE, V_GRAPH, NV };
static const char *const v_names[NV] = {"mkx",    "serial", "gemm", "coll",
                                        "versus", "1 rank", "graph"};

typedef struct env {
  int rank, size;
  int gpus;       /* distinct GPUs of the job: fewer than size when shared */
  int shared;     /* two ranks of the job on one GPU */
  int nccl_on;    /* a NCCL communicator exists: not shared, no --no-nccl */
  int host_times; /* --host-times: also the host's enqueue time per variant */
  int net_stats;  /* --vnode: the network proxy's cost per MKX call */
  unsigned vmask; /* the variants this run times, 1u << V_* */
  /* mkx2: --versus; mkx1: --one-rank, on rank 0 only; else NULL */
  MKX_Comm mkx, mkx2, mkx1;
  ncclComm_t nccl;
  cublasHandle_t blas;
  cudaStream_t st;
} env;

typedef perf_tp_bufs bufs;

/* One shape's buffers: this rank's share, and (--one-rank, rank 0) the
 * whole job's operands of the 1-rank call, which is n_one wide. */
typedef struct work {
  bufs b, one;
  int64_t n_one;
  cudaGraphExec_t graph; /* --graph: b.req's start, captured */
  perf_lt *lt;           /* fp8: the baselines' cuBLASLt GEMM */
} work;

typedef struct job {
  int op;
  int64_t m, n, k;
} job;

typedef struct opts {
  job jobs[96];
  int nj, reps, warmup, ops, host_times, no_nccl, one_rank, graph, fp8;
  const char *outname, *overlap, *vnode, *hier, *versus, *net;
} opts;

static const char tp_usage[] =
    "usage: mpirun -np P mkx_perf tp [--op ag|rs|ar|all] [--shape MxNxK]...\n"
    "         [--full] [--small] [--reps N] [--warmup N] [--out FILE]\n"
    "         [--overlap auto|yes|no] [--vnode G --hier host|gpu|nvlink|proxy\n"
    "         [--net tcp|shm]]\n"
    "         [--versus KEY=VALUE] [--no-nccl] [--one-rank] [--graph]\n"
    "         [--host-times] [--dtype bf16|fp8]\n"
    "  The fused tensor-parallel calls against cuBLAS + NCCL; --no-nccl (or\n"
    "  ranks sharing a GPU) leaves NCCL out; --one-rank adds the same call\n"
    "  on rank 0 alone; --graph its start replayed from a CUDA graph.\n"
    "  tests/perf/perf_tp.c documents every option and "
    "column.\n";

static int on(const env *e, int v) { return (int)(e->vmask >> v) & 1; }

static void *xcalloc(size_t n, size_t size) {
  void *p = calloc(n ? n : 1, size ? size : 1);
  if (p == NULL) {
    fprintf(stderr, "mkx_perf tp: out of host memory\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return p;
}

/* A table cell: x with prec decimals, or "-" for a variant not run. */
static void cell(char *s, size_t len, int run, int prec, double x) {
  if (run)
    perf_cat(s, len, " %.*f |", prec, x);
  else
    perf_cat(s, len, " - |");
}

/* The middle of n samples (sorted in place). */
static float median_of(float *v, int n) {
  qsort(v, (size_t)n, sizeof *v, perf_cmp_float);
  return v[n / 2];
}

/* Row-major C (m x n) = A (m x k) * B^T, B stored n x k (all bf16). */
static void blas_gemm(env *e, const void *A, const void *B, void *C, int64_t m,
                      int64_t n, int64_t k) {
  const float one = 1.0f, zero = 0.0f;
  PB(cublasGemmEx(e->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)n, (int)m, (int)k,
                  &one, B, CUDA_R_16BF, (int)k, A, CUDA_R_16BF, (int)k, &zero,
                  C, CUDA_R_16BF, (int)n, CUBLAS_COMPUTE_32F,
                  CUBLAS_GEMM_DEFAULT));
}

/* N of the 1-rank call that does the whole job: on P ranks AllGather+GEMM
 * multiplies the gathered A by every rank's own N x K weight (the column
 * shards of one P*N-wide layer); the reducing calls split K, so their P
 * products already sum to one M x N x K product. */
static int64_t one_rank_n(int op, int64_t N, int p) {
  return op == OP_AG ? N * p : N;
}

/* fp8: the baselines' GEMM, cuBLASLt's on the gathered A (ag) or this
 * rank's A into the bf16 partial (rs, ar). */
static perf_lt *lt_of(int op, int64_t M, int64_t N, const bufs *b, int64_t K) {
  perf_lt *lt =
      op == OP_AG
          ? perf_lt_make(M, N, K, b->Afull, b->B, b->C, b->sa, b->sb)
          : perf_lt_make(M, N, b->k_loc, b->A, b->B, b->P, b->sa, b->sb);
  if (!lt) {
    fprintf(stderr, "mkx_perf tp: no cuBLASLt fp8 GEMM for %s %lldx%lldx%lld\n",
            perf_tp_op_names[op], (long long)M, (long long)N, (long long)K);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return lt;
}

static void setup(env *e, int fp8, int op, int64_t M, int64_t N, int64_t K,
                  work *w) {
  bufs *b = &w->b;
  const int type = fp8 ? PERF_TP_FP8 : 0;
  perf_tp_alloc(op, M, N, K, e->size, e->rank, PERF_TP_BASELINES | type, b);
  /* Without NCCL nothing gathers into Afull; the GEMM alone must still
   * read data, not zeros (power and clocks depend on the values). */
  if (!e->nccl_on && b->Afull)
    perf_tp_fill_operand(b, b->Afull, (size_t)(M * K), 37u + (unsigned)e->rank);
  w->lt = fp8 ? lt_of(op, M, N, b, K) : NULL;
  perf_tp_plan(e->mkx, op, M, N, K, b, &b->req);
  if (e->mkx2) perf_tp_plan(e->mkx2, op, M, N, K, b, &b->req2);
  memset(&w->one, 0, sizeof w->one);
  w->n_one = one_rank_n(op, N, e->size);
  if (e->mkx1) {
    perf_tp_alloc(op, M, w->n_one, K, 1, 0, type, &w->one);
    perf_tp_plan(e->mkx1, op, M, w->n_one, K, &w->one, &w->one.req);
  }
  w->graph = NULL;
  if (on(e, V_GRAPH)) {
    cudaGraph_t g;
    PK(cudaStreamBeginCapture(e->st, cudaStreamCaptureModeThreadLocal));
    const int rc = MKX_Start(b->req, e->st);
    PK(cudaStreamEndCapture(e->st, &g));
    AM(rc);
    PK(cudaGraphInstantiate(&w->graph, g, 0));
    PK(cudaGraphDestroy(g));
  }
}

static void teardown(work *w) {
  if (w->graph) PK(cudaGraphExecDestroy(w->graph));
  if (w->lt) perf_lt_free(w->lt);
  perf_tp_free(&w->b);
  perf_tp_free(&w->one);
}

static void coll(env *e, int op, int64_t M, int64_t N, bufs *b, int64_t K) {
  const int p = e->size;
  if (op == OP_AG)
    PN(ncclAllGather(b->A, b->Afull, (size_t)(b->m_loc * K),
                     b->fp8 ? ncclUint8 : ncclBfloat16, e->nccl, e->st));
  else if (op == OP_RS)
    PN(ncclReduceScatter(b->P, b->C, (size_t)(M / p * N), ncclBfloat16, ncclSum,
                         e->nccl, e->st));
  else
    PN(ncclAllReduce(b->P, b->C, (size_t)(M * N), ncclBfloat16, ncclSum,
                     e->nccl, e->st));
}

static void gemm_only(env *e, int op, int64_t M, int64_t N, int64_t K,
                      work *w) {
  const bufs *b = &w->b;
  if (w->lt) {
    const int rc = perf_lt_run(w->lt, e->st);
    if (rc) {
      fprintf(stderr, "mkx_perf tp: cuBLASLt fp8 GEMM: status %d\n", rc);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  } else if (op == OP_AG)
    blas_gemm(e, b->Afull, b->B, b->C, M, N, K);
  else
    blas_gemm(e, b->A, b->B, b->P, M, N, b->k_loc);
}

static void variant(env *e, int v, int op, int64_t M, int64_t N, int64_t K,
                    work *w) {
  bufs *b = &w->b;
  switch (v) {
    case V_MKX:
      AM(MKX_Start(b->req, e->st));
      break;
    case V_MKX2:
      AM(MKX_Start(b->req2, e->st));
      break;
    case V_ONE:
      AM(MKX_Start(w->one.req, e->st));
      break;
    case V_GRAPH:
      PK(cudaGraphLaunch(w->graph, e->st));
      break;
    case V_SERIAL:
      if (op == OP_AG)
        coll(e, op, M, N, b, K), gemm_only(e, op, M, N, K, w);
      else
        gemm_only(e, op, M, N, K, w), coll(e, op, M, N, b, K);
      break;
    case V_GEMM:
      gemm_only(e, op, M, N, K, w);
      break;
    case V_COLL:
      coll(e, op, M, N, b, K);
      break;
  }
}

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}

/* One sample: all ranks start together (barrier), GPU time by events;
 * *host_us: the host's time to enqueue the variant.  0 on a rank that
 * does not run it. */
static float sample(env *e, int v, int op, int64_t M, int64_t N, int64_t K,
                    work *w, cudaEvent_t e0, cudaEvent_t e1, float *host_us) {
  float ms = 0;
  *host_us = 0;
  PK(cudaStreamSynchronize(e->st));
  AI(MPI_Barrier(MPI_COMM_WORLD));
  /* The 1-rank call has the GPU to itself: the other ranks launch nothing
   * and wait at the next sample's barrier until rank 0 is done. */
  if (v == V_ONE && e->rank != 0) return 0;
  PK(cudaEventRecord(e0, e->st));
  const double t0 = now_us();
  variant(e, v, op, M, N, K, w);
  *host_us = (float)(now_us() - t0);
  PK(cudaEventRecord(e1, e->st));
  PK(cudaEventSynchronize(e1));
  PK(cudaEventElapsedTime(&ms, e0, e1));
  return ms;
}

static void print_host_times(const env *e, int op, int64_t M, int64_t N,
                             int64_t K, const float *hmed) {
  char s[320] = "";
  const char *sep = " ";
  perf_cat(s, sizeof s,
           "# %s %lldx%lldx%lld host enqueue (us, median, slowest "
           "rank):",
           perf_tp_op_names[op], (long long)M, (long long)N, (long long)K);
  for (int v = 0; v < NV; v++)
    if (on(e, v)) {
      perf_cat(s, sizeof s, "%s%s %.1f", sep, v_names[v], hmed[v]);
      sep = ", ";
    }
  printf("%s\n", s);
}

/* --vnode: what the network proxy thread cost per MKX call (mean over the
 * timed calls; the rank whose proxy cost most) and how long its transport
 * had writes in flight (against the call's time: how long the link was
 * idle within it), as a comment line on
 * stdout (and in `out` if given; not between a table's rows); over a
 * capped shm link also those bytes' time at the cap and the call's time
 * over the slower of that and its GEMM. */
static void print_proxy(const env *e, int op, int64_t M, int64_t N, int64_t K,
                        double *proxy, const float *med, FILE *out) {
  char s[480];
  AI(MPI_Allreduce(MPI_IN_PLACE, proxy, 4, MPI_DOUBLE, MPI_MAX,
                   MPI_COMM_WORLD));
  if (e->rank != 0) return;
  snprintf(s, sizeof s,
           "# %s %lldx%lldx%lld network proxy per mkx call (mean, most "
           "costly rank): %.3f ms of CPU, %.0f commands, %.1f MB, the "
           "transport busy %.3f ms\n",
           perf_tp_op_names[op], (long long)M, (long long)N, (long long)K,
           proxy[0], proxy[1], proxy[2], proxy[3]);
  fputs(s, stdout);
  if (out) fputs(s, out);
  /* over an emulated link: those bytes at its cap, and the call against
   * the slower of them and its GEMM */
  const int64_t mbps = mkx_comm_net_link_mbps(e->mkx);
  if (mbps <= 0) return;
  const double link = 1e3 * proxy[2] / (double)mbps;
  const double bound = on(e, V_GEMM) && med[V_GEMM] > link ? med[V_GEMM] : link;
  snprintf(s, sizeof s,
           "# %s %lldx%lldx%lld link: %.1f MB at %lld MB/s take %.3f ms; "
           "mkx / max(gemm, link) = %.2f\n",
           perf_tp_op_names[op], (long long)M, (long long)N, (long long)K,
           proxy[2], (long long)mbps, link, med[V_MKX] / bound);
  fputs(s, stdout);
  if (out) fputs(s, out);
}

/* One table row (rank 0): times of the slowest rank, "-" where not run. */
static void print_row(const env *e, int op, int64_t M, int64_t N, int64_t K,
                      const float *med, FILE *out) {
  const int nc = e->nccl_on;
  const float ideal = med[V_GEMM] > med[V_COLL] ? med[V_GEMM] : med[V_COLL];
  char line[400] = "";
  perf_cat(line, sizeof line, "| %s | %lld | %lld | %lld |",
           perf_tp_op_names[op], (long long)M, (long long)N, (long long)K);
  cell(line, sizeof line, 1, 3, med[V_MKX]);
  cell(line, sizeof line, nc, 3, med[V_SERIAL]);
  cell(line, sizeof line, on(e, V_GEMM), 3, med[V_GEMM]);
  cell(line, sizeof line, nc, 3, med[V_COLL]);
  cell(line, sizeof line, nc, 3, ideal);
  cell(line, sizeof line, nc, 2, med[V_SERIAL] / med[V_MKX]);
  cell(line, sizeof line, nc, 2, ideal / med[V_MKX]);
  if (on(e, V_MKX2)) {
    cell(line, sizeof line, 1, 3, med[V_MKX2]);
    cell(line, sizeof line, nc, 2, med[V_SERIAL] / med[V_MKX2]);
  }
  if (on(e, V_ONE)) {
    cell(line, sizeof line, 1, 3, med[V_ONE]);
    cell(line, sizeof line, 1, 3, med[V_MKX] / med[V_ONE]);
  }
  if (on(e, V_GRAPH)) {
    cell(line, sizeof line, 1, 3, med[V_GRAPH]);
    cell(line, sizeof line, 1, 2, med[V_MKX] / med[V_GRAPH]);
  }
  perf_cat(line, sizeof line, "\n");
  fputs(line, stdout);
  fflush(stdout);
  if (out) fputs(line, out), fflush(out);
}

static void bench(env *e, const opts *o, int op, int64_t M, int64_t N,
                  int64_t K, FILE *out) {
  const int warmup = o->warmup, reps = o->reps;
  work w;
  cudaEvent_t e0, e1;
  float *t = xcalloc((size_t)(NV * reps), sizeof *t), med[NV];
  float *h = xcalloc((size_t)(NV * reps), sizeof *h), hmed[NV];
  setup(e, o->fp8, op, M, N, K, &w);
  PK(cudaEventCreate(&e0));
  PK(cudaEventCreate(&e1));
  for (int r = 0; r < warmup; r++)
    for (int v = 0; v < NV; v++) {
      float warm_us;
      if (on(e, v)) sample(e, v, op, M, N, K, &w, e0, e1, &warm_us);
    }
  /* ms of CPU, commands, MB, ms of the transport busy, over the calls */
  double proxy[4] = {0, 0, 0, 0};
  for (int r = 0; r < reps; r++)
    for (int v = 0; v < NV; v++) {
      if (!on(e, v)) continue;
      mkx_proxy_stats s0, s1;
      if (v == V_MKX && e->net_stats) mkx_comm_net_proxy_stats(e->mkx, &s0);
      t[v * reps + r] = sample(e, v, op, M, N, K, &w, e0, e1, h + v * reps + r);
      if (v == V_MKX && e->net_stats) {
        mkx_comm_net_proxy_stats(e->mkx, &s1);
        proxy[0] += (double)(s1.cpu_ns - s0.cpu_ns) / 1e6 / reps;
        proxy[1] += (double)(s1.commands - s0.commands) / reps;
        proxy[2] += (double)(s1.bytes - s0.bytes) / 1e6 / reps;
        proxy[3] += (double)(s1.busy_ns - s0.busy_ns) / 1e6 / reps;
      }
    }
  for (int v = 0; v < NV; v++) {
    med[v] = median_of(t + v * reps, reps);
    hmed[v] = median_of(h + v * reps, reps);
  }
  /* The 1-rank time is 0 on the other ranks: the maximum is rank 0's. */
  AI(MPI_Allreduce(MPI_IN_PLACE, med, NV, MPI_FLOAT, MPI_MAX, MPI_COMM_WORLD));
  AI(MPI_Allreduce(MPI_IN_PLACE, hmed, NV, MPI_FLOAT, MPI_MAX, MPI_COMM_WORLD));
  if (e->host_times && e->rank == 0) print_host_times(e, op, M, N, K, hmed);
  if (e->rank == 0) print_row(e, op, M, N, K, med, out);
  if (e->net_stats) print_proxy(e, op, M, N, K, proxy, med, NULL);
  PK(cudaEventDestroy(e0));
  PK(cudaEventDestroy(e1));
  teardown(&w);
  free(t);
  free(h);
}

/* An MKX communicator over comm with the run's options, (versus) one more,
 * and (device >= 0) that GPU. */
static MKX_Comm mkx_comm(MPI_Comm comm, const opts *o, const char *versus,
                         int device) {
  const perf_tp_conf f = {o->overlap, o->vnode, o->net, o->hier};
  return perf_tp_comm(comm, &f, &versus, versus != NULL, device);
}

typedef struct gpu_id {
  char host[256];
  char pci[32];
} gpu_id;

/* The job's distinct GPUs (host name, PCI bus id), and whether two ranks
 * share one: NCCL refuses that ("Duplicate GPU detected"). */
static int job_gpus(const env *e, int dev, int *shared) {
  gpu_id mine;
  gpu_id *all = xcalloc((size_t)e->size, sizeof *all);
  int n = 0;
  memset(&mine, 0, sizeof mine);
  if (gethostname(mine.host, sizeof mine.host - 1) != 0) {
    perror("mkx_perf tp: gethostname");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  PK(cudaDeviceGetPCIBusId(mine.pci, (int)sizeof mine.pci, dev));
  AI(MPI_Allgather(&mine, (int)sizeof mine, MPI_BYTE, all, (int)sizeof mine,
                   MPI_BYTE, MPI_COMM_WORLD));
  *shared = 0;
  for (int q = 0; q < e->size; q++) {
    int seen = 0;
    for (int s = 0; s < q && !seen; s++)
      seen =
          !strcmp(all[s].host, all[q].host) && !strcmp(all[s].pci, all[q].pci);
    n += !seen;
    *shared |= seen;
  }
  free(all);
  return n;
}

static void nccl_init(env *e) {
  ncclUniqueId id;
  if (e->rank == 0) PN(ncclGetUniqueId(&id));
  AI(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD));
  PN(ncclCommInitRank(&e->nccl, e->size, id, e->rank));
}

static unsigned variants(const env *e, const opts *o) {
  unsigned m = 1u << V_MKX | 1u << V_GEMM;
  if (e->nccl_on) m |= 1u << V_SERIAL | 1u << V_COLL;
  if (e->mkx2) m |= 1u << V_MKX2;
  if (o->one_rank && e->size > 1) m |= 1u << V_ONE;
  if (o->graph) m |= 1u << V_GRAPH;
  return m;
}

static void env_init(env *e, const opts *o) {
  memset(e, 0, sizeof *e);
  perf_cmd = "mkx_perf tp";
  AI(MPI_Comm_rank(MPI_COMM_WORLD, &e->rank));
  perf_rank = e->rank;
  AI(MPI_Comm_size(MPI_COMM_WORLD, &e->size));
  e->host_times = o->host_times;
  e->net_stats = o->vnode != NULL;
  e->mkx = mkx_comm(MPI_COMM_WORLD, o, NULL, -1);
  e->mkx2 = o->versus ? mkx_comm(MPI_COMM_WORLD, o, o->versus, -1) : NULL;
  int dev = -1;
  AM(MKX_Comm_device(e->mkx, &dev));
  if (dev < 0) {
    fprintf(stderr,
            "mkx_perf tp: rank %d has no GPU (MKX runs the host "
            "path)\n",
            e->rank);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  PK(cudaSetDevice(dev));
  e->gpus = job_gpus(e, dev, &e->shared);
  e->nccl_on = !e->shared && !o->no_nccl;
  if (e->nccl_on) nccl_init(e);
  /* Pinned to rank 0's GPU: on its own, a 1-rank communicator would choose
   * by its local rank, which need not give the same device. */
  if (o->one_rank && e->size > 1 && e->rank == 0)
    e->mkx1 = mkx_comm(MPI_COMM_SELF, o, NULL, dev);
  PB(cublasCreate(&e->blas));
  PK(cudaStreamCreateWithFlags(&e->st, cudaStreamNonBlocking));
  PB(cublasSetStream(e->blas, e->st));
  e->vmask = variants(e, o);
}

static void env_fini(env *e) {
  if (e->nccl_on) PN(ncclCommDestroy(e->nccl));
  PB(cublasDestroy(e->blas));
  PK(cudaStreamDestroy(e->st));
  AM(MKX_Comm_free(&e->mkx));
  if (e->mkx2) AM(MKX_Comm_free(&e->mkx2));
  if (e->mkx1) AM(MKX_Comm_free(&e->mkx1));
}

/* What the columns mean, where they differ from the default ones. */
static void legend(const env *e, const opts *o, char *s, size_t len) {
  if (e->nccl_on && !on(e, V_ONE) && !on(e, V_GRAPH)) return;
  perf_cat(s, len, "Columns: mkx: the MKX call on all %d ranks", e->size);
  if (e->nccl_on)
    perf_cat(s, len,
             "; serial: cuBLAS GEMM then NCCL (or NCCL then GEMM); "
             "gemm, coll: each alone; ideal: max(gemm, coll)");
  else
    perf_cat(s, len,
             "; gemm: every rank's cuBLAS GEMM at once%s; serial, coll, "
             "ideal and their ratios: not run (-), no NCCL",
             e->shared ? " on the shared GPU" : "");
  if (o->versus)
    perf_cat(s, len,
             "; mkx (%s): the MKX call with that option too; "
             "serial/that: serial / its time",
             o->versus);
  if (on(e, V_ONE))
    perf_cat(
        s, len,
        "; 1 rank: the whole job (ag: M x %d*N x K, every rank's "
        "weight side by side; rs, ar: M x N x K) by the same MKX call on "
        "rank 0 alone, same options and GPU, the other ranks idle, rank 0's "
        "time; mkx/1rank: mkx / 1 rank",
        e->size);
  if (on(e, V_GRAPH))
    perf_cat(s, len,
             "; graph: mkx's MKX_Start captured once in a CUDA graph on "
             "every rank and replayed; mkx/graph: mkx / graph (above 1: "
             "what the graph saves of launches and host work)");
  perf_cat(s, len, ".\n\n");
}

/* Rank 0: the table's title (date, GPUs, options), legend and column
 * heads, on stdout and appended to --out (returned, or NULL). */
static FILE *open_table(const env *e, const opts *o) {
  char dev[256] = "?", gpus[320], day[32], head[2048] = "";
  struct cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
    snprintf(dev, sizeof dev, "%s", prop.name);
  if (e->gpus == e->size)
    snprintf(gpus, sizeof gpus, "%d x %s", e->size, dev);
  else
    snprintf(gpus, sizeof gpus, "%d ranks on %d x %s", e->size, e->gpus, dev);
  time_t now = time(NULL);
  strftime(day, sizeof day, "%Y-%m-%d %H:%M UTC", gmtime(&now));
  perf_cat(head, sizeof head,
           "\n%s, %s, %s, B stored N x K, MKX option "
           "tp_overlap=%s%s%s%s%s%s%s, medians of %d (ms, slowest rank)",
           day, gpus,
           o->fp8 ? "e4m3 x e4m3 (per-tensor scales) -> bf16, the "
                    "baselines' GEMM cuBLASLt fp8"
                  : "bf16",
           o->overlap, o->vnode ? ", virtual nodes of " : "",
           o->vnode ? o->vnode : "", o->vnode ? " over " : "",
           o->vnode ? o->net : "", o->vnode ? ", hier_gemm=" : "",
           o->vnode ? o->hier : "", o->reps);
  if (e->shared)
    perf_cat(head, sizeof head,
             "; ranks share a GPU, where NCCL cannot run: "
             "no cuBLAS + NCCL baselines");
  else if (!e->nccl_on)
    perf_cat(head, sizeof head,
             "; NCCL off (--no-nccl): no cuBLAS + NCCL "
             "baselines");
  perf_cat(head, sizeof head, "\n\n");
  legend(e, o, head, sizeof head);
  perf_cat(head, sizeof head,
           "| call | M | N | K | mkx | serial | gemm | coll | "
           "ideal | serial/mkx | ideal/mkx |");
  if (o->versus)
    perf_cat(head, sizeof head, " mkx (%s) | serial/that |", o->versus);
  if (on(e, V_ONE)) perf_cat(head, sizeof head, " 1 rank | mkx/1rank |");
  if (on(e, V_GRAPH)) perf_cat(head, sizeof head, " graph | mkx/graph |");
  perf_cat(head, sizeof head,
           "\n|---|---:|---:|---:|---:|---:|---:|---:|---:|"
           "---:|---:|%s%s%s\n",
           o->versus ? "---:|---:|" : "", on(e, V_ONE) ? "---:|---:|" : "",
           on(e, V_GRAPH) ? "---:|---:|" : "");
  fputs(head, stdout);
  FILE *out = NULL;
  if (o->outname && (out = fopen(o->outname, "a")) == NULL) perror(o->outname);
  if (out) fputs(head, out);
  return out;
}

static int full_table(job *jobs) {
  static const int64_t ms[] = {4096, 8192, 16384, 32768};
  int nj = 0;
  for (int op = 0; op < 3; op++)
    for (int i = 0; i < 4; i++) {
      jobs[nj++] = (job){op, ms[i], 8192, 8192};
      jobs[nj++] = op == OP_AG ? (job){op, ms[i], 28672, 8192}
                               : (job){op, ms[i], 8192, 28672};
    }
  return nj;
}

/* Small and mid-size shapes, where the fused calls' fixed cost shows
 * (tests/perf/results/tp-h200x2.md): the automatic fallback's table. */
static int small_table(job *jobs, int nj) {
  static const int64_t sh[][3] = {{128, 1024, 1024},  {512, 2048, 2048},
                                  {1024, 4096, 4096}, {2048, 8192, 8192},
                                  {4096, 4096, 4096}, {1024, 8192, 28672}};
  for (int op = 0; op < 3; op++)
    for (size_t i = 0; i < sizeof sh / sizeof sh[0]; i++)
      jobs[nj++] = (job){op, sh[i][0], sh[i][1], sh[i][2]};
  return nj;
}

static int usage_error(const char *what, const char *arg) {
  fprintf(stderr, "mkx_perf tp: %s: %s\n%s", what, arg, tp_usage);
  return 2;
}

/* Whether a is an option that takes a value (set_value knows them). */
static int takes_value(const char *a) {
  static const char *const names[] = {
      "--reps",   "--warmup", "--out",   "--overlap", "--vnode", "--hier",
      "--versus", "--op",     "--shape", "--net",     "--dtype"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (!strcmp(a, names[i])) return 1;
  return 0;
}

/* The options without a value; 0 if a is none of them. */
static int set_flag(const char *a, opts *o, int *full, int *small) {
  if (!strcmp(a, "--full"))
    *full = 1;
  else if (!strcmp(a, "--small"))
    *small = 1;
  else if (!strcmp(a, "--host-times"))
    o->host_times = 1;
  else if (!strcmp(a, "--no-nccl"))
    o->no_nccl = 1;
  else if (!strcmp(a, "--one-rank"))
    o->one_rank = 1;
  else if (!strcmp(a, "--graph"))
    o->graph = 1;
  else
    return 0;
  return 1;
}

/* The options with a value; 0, or 2 after a message for a bad one. */
static int set_value(const char *a, const char *v, opts *o,
                     int64_t (*shapes)[3], int *ns) {
  if (!strcmp(a, "--dtype")) {
    if (strcmp(v, "bf16") && strcmp(v, "fp8"))
      return usage_error("--dtype takes bf16 or fp8", v);
    o->fp8 = !strcmp(v, "fp8");
  } else if (!strcmp(a, "--reps"))
    o->reps = atoi(v);
  else if (!strcmp(a, "--warmup"))
    o->warmup = atoi(v);
  else if (!strcmp(a, "--out"))
    o->outname = v;
  else if (!strcmp(a, "--overlap"))
    o->overlap = v;
  else if (!strcmp(a, "--vnode"))
    o->vnode = v;
  else if (!strcmp(a, "--hier"))
    o->hier = v;
  else if (!strcmp(a, "--net")) {
    if (strcmp(v, "tcp") && strcmp(v, "shm"))
      return usage_error("--net takes tcp or shm", v);
    o->net = v;
  } else if (!strcmp(a, "--versus")) {
    if (!strchr(v, '=') || v[0] == '=')
      return usage_error("--versus takes KEY=VALUE (an MKX option)", v);
    o->versus = v;
  } else if (!strcmp(a, "--op")) {
    if (!(o->ops = perf_tp_op_mask(v)))
      return usage_error("--op takes ag, rs, ar or all", v);
  } else if (!strcmp(a, "--shape")) {
    if (*ns == 16) return usage_error("at most 16 --shape", v);
    if (!perf_tp_shape(v, shapes[*ns]))
      return usage_error("--shape takes MxNxK (positive)", v);
    ++*ns;
  }
  return 0;
}

static void make_jobs(opts *o, int full, int small, int64_t (*shapes)[3],
                      int ns) {
  if (full) o->nj = full_table(o->jobs);
  if (small)
    o->nj = small_table(o->jobs, o->nj);
  else if (!full && ns == 0)
    shapes[0][0] = shapes[0][1] = shapes[0][2] = 8192, ns = 1;
  for (int op = 0; !full && !small && op < 3; op++)
    for (int s = 0; s < ns; s++)
      o->jobs[o->nj++] = (job){op, shapes[s][0], shapes[s][1], shapes[s][2]};
}

/* 0: run; 1: --help; 2: bad arguments (said on stderr). */
static int parse_args(int argc, char **argv, opts *o) {
  int64_t shapes[16][3];
  int ns = 0, full = 0, small = 0;
  memset(o, 0, sizeof *o);
  o->reps = 10, o->warmup = 3, o->ops = 7, o->overlap = "auto", o->hier = "gpu",
  o->net = "tcp";
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) return 1;
    if (set_flag(a, o, &full, &small)) continue;
    if (!takes_value(a)) return usage_error("unknown option", a);
    if (i + 1 >= argc) return usage_error("missing its value", a);
    int rc = set_value(a, argv[++i], o, shapes, &ns);
    if (rc) return rc;
  }
  if (o->reps < 1) o->reps = 1;
  if (o->warmup < 0) o->warmup = 0;
  if (o->fp8 && o->graph) /* mkx.h: a call with scales reads them back */
    return usage_error(
        "--graph with --dtype fp8: the scaled calls are not "
        "captured",
        "--graph");
  make_jobs(o, full, small, shapes, ns);
  return 0;
}

int mkx_perf_tp(int argc, char **argv) {
  opts o;
  int rc = parse_args(argc, argv, &o);
  if (rc == 1) fputs(tp_usage, stdout);
  if (rc) return rc == 1 ? 0 : rc;
  if (MPI_Init(NULL, NULL) != MPI_SUCCESS) {
    fprintf(stderr, "mkx_perf tp: MPI_Init failed\n");
    return 1;
  }
  env e;
  env_init(&e, &o);
  if (o.one_rank && e.size == 1 && e.rank == 0)
    fprintf(stderr,
            "mkx_perf tp: --one-rank ignored: the job has one "
            "rank, so the 1-rank call is the mkx column\n");
  FILE *out = e.rank == 0 ? open_table(&e, &o) : NULL;
  for (int j = 0; j < o.nj; j++)
    if (o.ops & (1 << o.jobs[j].op))
      bench(&e, &o, o.jobs[j].op, o.jobs[j].m, o.jobs[j].n, o.jobs[j].k, out);
  if (out && fclose(out) != 0) perror(o.outname);
  env_fini(&e);
  AI(MPI_Finalize());
  return 0;
}
