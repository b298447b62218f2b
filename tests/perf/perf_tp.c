/*
 * mkx_perf tp: the fused tensor-parallel calls against what users would
 * otherwise run, in the same MPI run on the same GPUs (run with
 * `mpirun -np P mkx_perf tp ...`, one GPU per rank):
 *
 *   mkx     the MKX call (persistent plan, MKX_Start), fused path
 *   serial  cuBLAS GEMM and NCCL collective on one stream, one after the other
 *           (AllGather then GEMM; GEMM then ReduceScatter / AllReduce)
 *   gemm    the cuBLAS GEMM alone, coll the NCCL collective alone
 *   ideal   max(gemm, coll): perfect overlap
 *
 * bf16 in, bf16 out, B stored N x K (a weight as in nn.Linear).  Every sample
 * starts after an MPI barrier; the four variants are interleaved sample by
 * sample so that clocks and power state hit all alike.  Reported: medians
 * (ms) of the slowest rank, and ratios serial/mkx and ideal/mkx.
 *
 *   mkx_perf tp [--op ag|rs|ar|all] [--shape MxNxK]... [--full] [--small]
 *               [--reps N] [--out FILE] [--overlap auto|yes|no]
 *               [--vnode G --hier host|gpu|nvlink] [--versus KEY=VALUE]
 *               [--host-times]
 * Without --shape: M = 8192, N = K = 8192; --full: the table
 * (M in 4096..32768, (N, K) = (8192, 8192) and (28672, 8192) for ag,
 * (8192, 28672) for rs and ar); --small: 6 small and mid-size shapes
 * (128 x 1024 x 1024 ... 2048 x 8192 x 8192), with --full after it.
 * M, N, K are the global GEMM sizes.  --overlap: MKX's option tp_overlap
 * (the overlapped or the split single-node path; default auto).  --vnode G:
 * MKX runs on virtual nodes of G ranks over tcp with option hier_gemm (the
 * several-node paths; cuBLAS + NCCL still run over NVLink on one node).
 * --versus KEY=VALUE: a second MKX communicator with that option too (e.g.
 * tp_overlap=no, tp_split_gemm=cublas), interleaved with the others: two
 * more columns, its time and serial / its time.  --host-times: a comment
 * line per shape with the host's time to enqueue each variant.
 */
#define _POSIX_C_SOURCE 200809L
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "mkx.h"

#define PK(x)                                                                \
  do {                                                                       \
    cudaError_t e_ = (x);                                                    \
    if (e_ != cudaSuccess) {                                                 \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x,             \
              cudaGetErrorString(e_));                                       \
      MPI_Abort(MPI_COMM_WORLD, 1);                                          \
    }                                                                        \
  } while (0)
#define PN(x)                                                                \
  do {                                                                       \
    ncclResult_t r_ = (x);                                                   \
    if (r_ != ncclSuccess) {                                                 \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x,             \
              ncclGetErrorString(r_));                                       \
      MPI_Abort(MPI_COMM_WORLD, 1);                                          \
    }                                                                        \
  } while (0)
#define PB(x)                                                                \
  do {                                                                       \
    cublasStatus_t s_ = (x);                                                 \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                       \
      fprintf(stderr, "%s:%d: %s: cublas %d\n", __FILE__, __LINE__, #x,      \
              (int)s_);                                                      \
      MPI_Abort(MPI_COMM_WORLD, 1);                                          \
    }                                                                        \
  } while (0)
#define PM(x)                                                                \
  do {                                                                       \
    int r_ = (x);                                                            \
    if (r_ != MKX_SUCCESS) {                                                 \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x,             \
              MKX_Get_last_error());                                         \
      MPI_Abort(MPI_COMM_WORLD, 1);                                          \
    }                                                                        \
  } while (0)

enum { OP_AG, OP_RS, OP_AR };
enum { V_MKX, V_SERIAL, V_GEMM, V_COLL, V_MKX2, NV };
static const char *const op_names[] = {"allgather_gemm", "gemm_rs",
                                       "gemm_ar"};

typedef struct env {
  int rank, size;
  int host_times; /* --host-times: also the host's enqueue time per variant */
  MKX_Comm mkx, mkx2; /* mkx2: --versus, or NULL */
  ncclComm_t nccl;
  cublasHandle_t blas;
  cudaStream_t st;
} env;

typedef struct bufs {
  void *A, *B, *C, *Afull, *P; /* A_r, B_r, C_r, gathered A, partial */
  int64_t m_loc, k_loc, c_rows;
  MKX_Request req, req2;
} bufs;

static int cmp_f(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

/* The middle of n samples (sorted in place). */
static float median_of(float *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_f);
  return v[n / 2];
}

static void *dalloc(size_t bytes) {
  void *p = NULL;
  PK(cudaMalloc(&p, bytes ? bytes : 16));
  PK(cudaMemset(p, 0, bytes ? bytes : 16));
  return p;
}

/* Small random bf16 values (exact small integers / 64), so sums stay finite. */
static void fill(void *d, size_t count, unsigned seed) {
  size_t chunk = count < ((size_t)1 << 22) ? count : ((size_t)1 << 22);
  uint16_t *h = malloc(chunk * 2);
  for (size_t i = 0; i < chunk; i++) {
    seed = seed * 1103515245u + 12345u;
    float f = (float)((int)((seed >> 16) % 17) - 8) / 64.0f;
    uint32_t x;
    memcpy(&x, &f, 4);
    h[i] = (uint16_t)(x >> 16);
  }
  for (size_t done = 0; done < count; done += chunk) {
    size_t n = count - done < chunk ? count - done : chunk;
    PK(cudaMemcpy((uint16_t *)d + done, h, n * 2, cudaMemcpyHostToDevice));
  }
  free(h);
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

/* The MKX plan of this job on communicator c. */
static void plan_on(MKX_Comm c, int op, int64_t M, int64_t N, int64_t K,
                    bufs *b, MKX_Request *req) {
  if (op == OP_AG)
    PM(MKX_Allgather_gemm_init(b->A, b->m_loc, K, K, b->B, N, K, MKX_TRANS,
                               b->C, N, NULL, K, MKX_BF16, MKX_BF16,
                               MKX_ROW_MAJOR, c, MPI_INFO_NULL, req));
  else if (op == OP_RS)
    PM(MKX_Gemm_reduce_scatter_init(b->A, M, b->k_loc, b->k_loc, b->B, N,
                                    b->k_loc, MKX_TRANS, b->C, N, MKX_BF16,
                                    MKX_BF16, MKX_ROW_MAJOR, c,
                                    MPI_INFO_NULL, req));
  else
    PM(MKX_Gemm_allreduce_init(b->A, M, b->k_loc, b->k_loc, b->B, N,
                               b->k_loc, MKX_TRANS, b->C, N, MKX_BF16,
                               MKX_BF16, MKX_ROW_MAJOR, c, MPI_INFO_NULL,
                               req));
}

static void setup(env *e, int op, int64_t M, int64_t N, int64_t K, bufs *b) {
  memset(b, 0, sizeof *b);
  const int p = e->size;
  if (op == OP_AG) {
    b->m_loc = M / p;
    b->A = dalloc((size_t)(b->m_loc * K) * 2);
    b->B = dalloc((size_t)(N * K) * 2);
    b->C = dalloc((size_t)(M * N) * 2);
    b->Afull = dalloc((size_t)(M * K) * 2);
    fill(b->A, (size_t)(b->m_loc * K), 11u + (unsigned)e->rank);
    fill(b->B, (size_t)(N * K), 23u + (unsigned)e->rank);
  } else {
    b->k_loc = K / p;
    int64_t first;
    MKX_Block_range(M, p, e->rank, &first, &b->c_rows);
    if (op == OP_AR) b->c_rows = M;
    b->A = dalloc((size_t)(M * b->k_loc) * 2);
    b->B = dalloc((size_t)(N * b->k_loc) * 2);
    b->C = dalloc((size_t)(b->c_rows * N) * 2);
    b->P = dalloc((size_t)(M * N) * 2);
    fill(b->A, (size_t)(M * b->k_loc), 11u + (unsigned)e->rank);
    fill(b->B, (size_t)(N * b->k_loc), 23u + (unsigned)e->rank);
  }
  plan_on(e->mkx, op, M, N, K, b, &b->req);
  if (e->mkx2) plan_on(e->mkx2, op, M, N, K, b, &b->req2);
}

static void teardown(bufs *b) {
  PM(MKX_Request_free(&b->req));
  if (b->req2) PM(MKX_Request_free(&b->req2));
  cudaFree(b->A), cudaFree(b->B), cudaFree(b->C);
  if (b->Afull) cudaFree(b->Afull);
  if (b->P) cudaFree(b->P);
}

static void coll(env *e, int op, int64_t M, int64_t N, bufs *b,
                 int64_t K) {
  const int p = e->size;
  if (op == OP_AG)
    PN(ncclAllGather(b->A, b->Afull, (size_t)(b->m_loc * K), ncclBfloat16,
                     e->nccl, e->st));
  else if (op == OP_RS)
    PN(ncclReduceScatter(b->P, b->C, (size_t)(M / p * N), ncclBfloat16,
                         ncclSum, e->nccl, e->st));
  else
    PN(ncclAllReduce(b->P, b->C, (size_t)(M * N), ncclBfloat16, ncclSum,
                     e->nccl, e->st));
}

static void gemm_only(env *e, int op, int64_t M, int64_t N, int64_t K,
                      bufs *b) {
  if (op == OP_AG) blas_gemm(e, b->Afull, b->B, b->C, M, N, K);
  else blas_gemm(e, b->A, b->B, b->P, M, N, b->k_loc);
}

static void variant(env *e, int v, int op, int64_t M, int64_t N, int64_t K,
                    bufs *b) {
  switch (v) {
    case V_MKX: PM(MKX_Start(b->req, e->st)); break;
    case V_MKX2: PM(MKX_Start(b->req2, e->st)); break;
    case V_SERIAL:
      if (op == OP_AG) coll(e, op, M, N, b, K), gemm_only(e, op, M, N, K, b);
      else gemm_only(e, op, M, N, K, b), coll(e, op, M, N, b, K);
      break;
    case V_GEMM: gemm_only(e, op, M, N, K, b); break;
    case V_COLL: coll(e, op, M, N, b, K); break;
  }
}

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}

/* One sample: both ranks start together (barrier), GPU time by events;
 * *host_us: the host's time to enqueue the variant. */
static float sample(env *e, int v, int op, int64_t M, int64_t N, int64_t K,
                    bufs *b, cudaEvent_t e0, cudaEvent_t e1, float *host_us) {
  float ms = 0;
  PK(cudaStreamSynchronize(e->st));
  MPI_Barrier(MPI_COMM_WORLD);
  PK(cudaEventRecord(e0, e->st));
  const double t0 = now_us();
  variant(e, v, op, M, N, K, b);
  *host_us = (float)(now_us() - t0);
  PK(cudaEventRecord(e1, e->st));
  PK(cudaEventSynchronize(e1));
  PK(cudaEventElapsedTime(&ms, e0, e1));
  return ms;
}

static void bench(env *e, int op, int64_t M, int64_t N, int64_t K, int reps,
                  FILE *out) {
  bufs b;
  cudaEvent_t e0, e1;
  float *t = malloc(sizeof *t * (size_t)(NV * reps)), med[NV];
  float *h = malloc(sizeof *h * (size_t)(NV * reps)), hmed[NV];
  setup(e, op, M, N, K, &b);
  PK(cudaEventCreate(&e0));
  PK(cudaEventCreate(&e1));
  const int nv = e->mkx2 ? NV : V_MKX2; /* the variants this run has */
  for (int v = nv; v < NV; v++)
    for (int r = 0; r < reps; r++) t[v * reps + r] = h[v * reps + r] = 0;
  for (int w = 0; w < 3; w++)
    for (int v = 0; v < nv; v++) {
      float warm_us;
      sample(e, v, op, M, N, K, &b, e0, e1, &warm_us);
    }
  for (int r = 0; r < reps; r++)
    for (int v = 0; v < nv; v++)
      t[v * reps + r] = sample(e, v, op, M, N, K, &b, e0, e1, h + v * reps + r);
  for (int v = 0; v < NV; v++) {
    med[v] = median_of(t + v * reps, reps);
    hmed[v] = median_of(h + v * reps, reps);
  }
  MPI_Allreduce(MPI_IN_PLACE, med, NV, MPI_FLOAT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, hmed, NV, MPI_FLOAT, MPI_MAX, MPI_COMM_WORLD);
  if (e->host_times && e->rank == 0)
    printf("# %s %lldx%lldx%lld host enqueue (us, median, slowest rank): mkx "
           "%.1f, serial %.1f, gemm %.1f, coll %.1f%s%.1f\n", op_names[op],
           (long long)M, (long long)N, (long long)K, hmed[V_MKX],
           hmed[V_SERIAL], hmed[V_GEMM], hmed[V_COLL],
           e->mkx2 ? ", versus " : "", e->mkx2 ? hmed[V_MKX2] : 0.0f);
  float ideal = med[V_GEMM] > med[V_COLL] ? med[V_GEMM] : med[V_COLL];
  if (e->rank == 0) {
    char line[320], more[64] = "";
    if (e->mkx2)
      snprintf(more, sizeof more, " %.3f | %.2f |", med[V_MKX2],
               med[V_SERIAL] / med[V_MKX2]);
    snprintf(line, sizeof line,
             "| %s | %lld | %lld | %lld | %.3f | %.3f | %.3f | %.3f | %.3f | "
             "%.2f | %.2f |%s\n",
             op_names[op], (long long)M, (long long)N, (long long)K,
             med[V_MKX], med[V_SERIAL], med[V_GEMM], med[V_COLL], ideal,
             med[V_SERIAL] / med[V_MKX], ideal / med[V_MKX], more);
    fputs(line, stdout);
    fflush(stdout);
    if (out) fputs(line, out), fflush(out);
  }
  PK(cudaEventDestroy(e0));
  PK(cudaEventDestroy(e1));
  teardown(&b);
  free(t);
  free(h);
}

/* An MKX communicator with the run's options and (versus) one more. */
static MKX_Comm mkx_comm(const char *overlap, const char *vnode,
                         const char *hier, const char *versus) {
  MPI_Info info;
  MKX_Comm c = NULL;
  MPI_Info_create(&info);
  MPI_Info_set(info, "mkx_fused", "auto");
  MPI_Info_set(info, "mkx_tp_overlap", overlap);
  if (vnode) {
    MPI_Info_set(info, "mkx_virtual_node_size", vnode);
    MPI_Info_set(info, "mkx_net", "tcp");
    MPI_Info_set(info, "mkx_hier_gemm", hier);
  }
  char key[80];
  const char *eq = versus ? strchr(versus, '=') : NULL;
  if (eq && eq - versus < 70) {
    snprintf(key, sizeof key, "mkx_%.*s", (int)(eq - versus), versus);
    MPI_Info_set(info, key, eq + 1);
  }
  PM(MKX_Comm_create(MPI_COMM_WORLD, info, &c));
  MPI_Info_free(&info);
  return c;
}

static void env_init(env *e, const char *overlap, const char *vnode,
                     const char *hier, const char *versus) {
  ncclUniqueId id;
  MPI_Comm_rank(MPI_COMM_WORLD, &e->rank);
  MPI_Comm_size(MPI_COMM_WORLD, &e->size);
  e->mkx = mkx_comm(overlap, vnode, hier, NULL);
  e->mkx2 = versus ? mkx_comm(overlap, vnode, hier, versus) : NULL;
  int dev = -1;
  PM(MKX_Comm_device(e->mkx, &dev));
  PK(cudaSetDevice(dev));
  if (e->rank == 0) PN(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  PN(ncclCommInitRank(&e->nccl, e->size, id, e->rank));
  PB(cublasCreate(&e->blas));
  PK(cudaStreamCreateWithFlags(&e->st, cudaStreamNonBlocking));
  PB(cublasSetStream(e->blas, e->st));
}

static void env_fini(env *e) {
  PN(ncclCommDestroy(e->nccl));
  PB(cublasDestroy(e->blas));
  PK(cudaStreamDestroy(e->st));
  PM(MKX_Comm_free(&e->mkx));
  if (e->mkx2) PM(MKX_Comm_free(&e->mkx2));
}

typedef struct job { int op; int64_t m, n, k; } job;

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
  static const int64_t sh[][3] = {{128, 1024, 1024}, {512, 2048, 2048},
                                  {1024, 4096, 4096}, {2048, 8192, 8192},
                                  {4096, 4096, 4096}, {1024, 8192, 28672}};
  for (int op = 0; op < 3; op++)
    for (size_t i = 0; i < sizeof sh / sizeof sh[0]; i++)
      jobs[nj++] = (job){op, sh[i][0], sh[i][1], sh[i][2]};
  return nj;
}

int mkx_perf_tp(int argc, char **argv) {
  job jobs[96];
  int nj = 0, reps = 10, ops = 7, full = 0, small = 0;
  const char *outname = NULL, *overlap = "auto", *vnode = NULL, *hier = "gpu";
  const char *versus = NULL;
  int host_times = 0;
  int64_t shapes[16][3];
  int ns = 0;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--out") && i + 1 < argc) outname = argv[++i];
    else if (!strcmp(argv[i], "--full")) full = 1;
    else if (!strcmp(argv[i], "--small")) small = 1;
    else if (!strcmp(argv[i], "--overlap") && i + 1 < argc) overlap = argv[++i];
    else if (!strcmp(argv[i], "--vnode") && i + 1 < argc) vnode = argv[++i];
    else if (!strcmp(argv[i], "--hier") && i + 1 < argc) hier = argv[++i];
    else if (!strcmp(argv[i], "--versus") && i + 1 < argc) versus = argv[++i];
    else if (!strcmp(argv[i], "--host-times")) host_times = 1;
    else if (!strcmp(argv[i], "--op") && i + 1 < argc) {
      const char *o = argv[++i];
      ops = !strcmp(o, "ag") ? 1 : !strcmp(o, "rs") ? 2 : !strcmp(o, "ar") ? 4 : 7;
    } else if (!strcmp(argv[i], "--shape") && i + 1 < argc && ns < 16) {
      long long m, n, k;
      if (sscanf(argv[++i], "%lldx%lldx%lld", &m, &n, &k) == 3)
        shapes[ns][0] = m, shapes[ns][1] = n, shapes[ns][2] = k, ns++;
    }
  }
  if (reps < 1) reps = 1;
  if (full) nj = full_table(jobs);
  if (small) nj = small_table(jobs, nj);
  else if (!full && ns == 0)
    shapes[0][0] = shapes[0][1] = shapes[0][2] = 8192, ns = 1;
  for (int op = 0; !full && !small && op < 3; op++)
    for (int s = 0; s < ns; s++)
      jobs[nj++] = (job){op, shapes[s][0], shapes[s][1], shapes[s][2]};
  MPI_Init(NULL, NULL);
  env e;
  if (versus && !strchr(versus, '=')) {
    fprintf(stderr, "mkx_perf tp: --versus takes KEY=VALUE (an MKX option)\n");
    return 2;
  }
  env_init(&e, overlap, vnode, hier, versus);
  e.host_times = host_times;
  FILE *out = NULL;
  if (e.rank == 0) {
    char dev[256] = "?";
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
      snprintf(dev, sizeof dev, "%s", prop.name);
    time_t now = time(NULL);
    char day[32];
    strftime(day, sizeof day, "%Y-%m-%d %H:%M UTC", gmtime(&now));
    char head[768], cols[160] = "", rule[32] = "";
    if (versus) {
      snprintf(cols, sizeof cols, " mkx (%s) | serial/that |", versus);
      snprintf(rule, sizeof rule, "---:|---:|");
    }
    snprintf(head, sizeof head,
             "\n%s, %d x %s, bf16, B stored N x K, MKX option tp_overlap=%s%s%s%s%s, "
             "medians of %d (ms, slowest rank)\n\n| call | M | N | K | mkx | serial | gemm | coll | "
             "ideal | serial/mkx | ideal/mkx |%s\n|---|---:|---:|---:|---:|---:|"
             "---:|---:|---:|---:|---:|%s\n", day, e.size, dev, overlap,
             vnode ? ", virtual nodes of " : "", vnode ? vnode : "",
             vnode ? " over tcp, hier_gemm=" : "", vnode ? hier : "", reps,
             cols, rule);
    fputs(head, stdout);
    if (outname && (out = fopen(outname, "a"))) fputs(head, out);
  }
  for (int j = 0; j < nj; j++)
    if (ops & (1 << jobs[j].op))
      bench(&e, jobs[j].op, jobs[j].m, jobs[j].n, jobs[j].k, reps, out);
  if (out) fclose(out);
  env_fini(&e);
  MPI_Finalize();
  return 0;
}
