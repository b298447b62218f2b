/* Measures the candidate ways of keeping the ranks that share a GPU to SMs
 * of their own (docs/shared-gpu.md, "SM partitions: one owner of the GPU's SMs"):
 *   none      the ranks' kernels on ordinary streams (MPS as it is set);
 *   green     a green context per rank on group `rank` of an even split of
 *             the device's SMs, the kernels on a stream of it;
 *   affinity  a context per rank with an execution affinity of its share
 *             of the SMs (MPS only), the kernels on a stream of it.
 * Rank 0 launches first a kernel of one CTA per SM of the GPU, each holding
 * its SM until a CTA of every rank has arrived (tests/gpu/sm_hold_kernels.cu),
 * and waits until its CTAs run; then every other rank launches the same.
 * Kept to SMs of its own, rank 0's kernel leaves the others theirs and all
 * arrive; otherwise it holds every SM and the others' kernels wait for the
 * bound.  Each rank prints what its context reports, whether its kernel
 * ended in time, the SMs its CTAs ran on, how many of them another rank's
 * CTAs also ran on, and whether the same launch captured into a CUDA graph
 * from the caller's stream runs in the partition.
 * Mode drain (2 ranks) asks which CUDA calls of one MPS client wait for
 * another client's kernels: rank 0's kernel waits for rank 1's, and before
 * launching it rank 1 makes one call and times it; a call that waits for
 * the whole GPU takes the bound.
 * Usage: mpirun -np N probe_sm_partition none|green|affinity|drain [bound_ms]
 * Built and run by ci/gpu-check (stage probe); not part of make check. */
#define _POSIX_C_SOURCE 200809L
#include <cuda.h>
#include <cuda_runtime.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "sm_hold_kernels.h"

#define MAX_SMS 1024

static int rank, ranks;

static void *drv(const char *name, unsigned version) {
  void *p = NULL;
  enum cudaDriverEntryPointQueryResult q;
  if (cudaGetDriverEntryPointByVersion(name, &p, version, cudaEnableDefault,
                                       &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess)
    return NULL;
  return p;
}

#define CUDA(x)                                                                \
  do {                                                                         \
    cudaError_t e_ = (x);                                                      \
    if (e_ != cudaSuccess) {                                                   \
      printf("rank %d: %s: %s\n", rank, #x, cudaGetErrorString(e_));           \
      fflush(stdout);                                                          \
      MPI_Abort(MPI_COMM_WORLD, 1);                                            \
    }                                                                          \
  } while (0)
#define DRV(call, ...)                                                         \
  do {                                                                         \
    if (!call) {                                                               \
      printf("rank %d: no driver entry point %s\n", rank, #call);              \
      return 1;                                                                \
    }                                                                          \
    CUresult r_ = call(__VA_ARGS__);                                           \
    if (r_ != CUDA_SUCCESS) {                                                  \
      printf("rank %d: %s failed: CUresult %d\n", rank, #call, (int)r_);       \
      return 1;                                                                \
    }                                                                          \
  } while (0)

typedef CUresult (*get_res_fn)(CUdevice, CUdevResource *, CUdevResourceType);
typedef CUresult (*ctx_res_fn)(CUcontext, CUdevResource *, CUdevResourceType);
typedef CUresult (*split_fn)(CUdevResource *, unsigned *, const CUdevResource *,
                             CUdevResource *, unsigned, unsigned);
typedef CUresult (*desc_fn)(CUdevResourceDesc *, CUdevResource *, unsigned);
typedef CUresult (*green_fn)(CUgreenCtx *, CUdevResourceDesc, CUdevice,
                             unsigned);
typedef CUresult (*gstream_fn)(CUstream *, CUgreenCtx, unsigned, int);
typedef CUresult (*ctx_create_fn)(CUcontext *, CUctxCreateParams *, unsigned,
                                  CUdevice);
typedef CUresult (*ctx_get_fn)(CUcontext *);
typedef CUresult (*aff_fn)(CUexecAffinityParam *, CUexecAffinityType);

/* What the device and this process's primary context report. */
static void report_resources(int dev_sms_attr) {
  get_res_fn get_res = (get_res_fn)drv("cuDeviceGetDevResource", 12040);
  ctx_res_fn ctx_res = (ctx_res_fn)drv("cuCtxGetDevResource", 12040);
  ctx_get_fn ctx_get = (ctx_get_fn)drv("cuCtxGetCurrent", 4000);
  aff_fn aff = (aff_fn)drv("cuCtxGetExecAffinity", 11040);
  CUdevResource d, c;
  CUcontext cur = NULL;
  CUexecAffinityParam a;
  memset(&d, 0, sizeof d), memset(&c, 0, sizeof c), memset(&a, 0, sizeof a);
  int dr = get_res ? (int)get_res(0, &d, CU_DEV_RESOURCE_TYPE_SM) : -1;
  int cr = ctx_get && ctx_get(&cur) == CUDA_SUCCESS && ctx_res
               ? (int)ctx_res(cur, &c, CU_DEV_RESOURCE_TYPE_SM)
               : -1;
  int ar = aff ? (int)aff(&a, CU_EXEC_AFFINITY_TYPE_SM_COUNT) : -1;
  printf(
      "rank %d: attribute SMs %d; device resource SMs %u (rc %d, min "
      "partition %u, alignment %u); primary context resource SMs %u (rc "
      "%d); execution affinity SMs %u (rc %d); "
      "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=%s\n",
      rank, dev_sms_attr, d.sm.smCount, dr, d.sm.minSmPartitionSize,
      d.sm.smCoscheduledAlignment, c.sm.smCount, cr, a.param.smCount.val, ar,
      getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")
          ? getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")
          : "(unset)");
}

/* A stream of this rank's green context on group `rank` of the SMs split
 * in groups of `share`; *got: its SMs. */
static int green_stream(int share, cudaStream_t *st, int *got) {
  get_res_fn get_res = (get_res_fn)drv("cuDeviceGetDevResource", 12040);
  split_fn split = (split_fn)drv("cuDevSmResourceSplitByCount", 12040);
  desc_fn gen = (desc_fn)drv("cuDevResourceGenerateDesc", 12040);
  green_fn create = (green_fn)drv("cuGreenCtxCreate", 12040);
  gstream_fn gstream = (gstream_fn)drv("cuGreenCtxStreamCreate", 12050);
  CUdevResource dev, groups[64], rest;
  CUdevResourceDesc desc;
  CUgreenCtx g;
  CUstream s;
  unsigned n = (unsigned)ranks;
  DRV(get_res, 0, &dev, CU_DEV_RESOURCE_TYPE_SM);
  DRV(split, groups, &n, &dev, &rest, 0, (unsigned)share);
  if ((int)n <= rank) {
    printf("rank %d: the split gave %u groups of %d SMs\n", rank, n, share);
    return 1;
  }
  DRV(gen, &desc, &groups[rank], 1);
  DRV(create, &g, desc, 0, CU_GREEN_CTX_DEFAULT_STREAM);
  DRV(gstream, &s, g, CU_STREAM_NON_BLOCKING, 0);
  *st = (cudaStream_t)s;
  *got = (int)groups[rank].sm.smCount;
  return 0;
}

/* A stream of a new context limited to `share` SMs, left current (the
 * probe's buffers are then that context's).  *reach: whether a copy of a
 * buffer the primary context allocated works from the new context. */
static int affinity_stream(int share, cudaStream_t *st, int *got,
                           const char **reach) {
  ctx_create_fn create = (ctx_create_fn)drv("cuCtxCreate", 12050);
  aff_fn aff = (aff_fn)drv("cuCtxGetExecAffinity", 11040);
  CUcontext mine;
  CUexecAffinityParam p;
  CUctxCreateParams cp;
  int *primary_buf, x = 0;
  CUDA(cudaMalloc((void **)&primary_buf, sizeof(int)));
  CUDA(cudaMemset(primary_buf, 0, sizeof(int)));
  CUDA(cudaDeviceSynchronize());
  memset(&p, 0, sizeof p), memset(&cp, 0, sizeof cp);
  p.type = CU_EXEC_AFFINITY_TYPE_SM_COUNT;
  p.param.smCount.val = (unsigned)share;
  cp.execAffinityParams = &p;
  cp.numExecAffinityParams = 1;
  DRV(create, &mine, &cp, 0, 0);
  DRV(aff, &p, CU_EXEC_AFFINITY_TYPE_SM_COUNT);
  *got = (int)p.param.smCount.val;
  cudaError_t e = cudaMemcpy(&x, primary_buf, sizeof x, cudaMemcpyDeviceToHost);
  *reach = e == cudaSuccess ? "yes" : cudaGetErrorName(e);
  (void)cudaGetLastError();
  CUDA(cudaStreamCreateWithFlags(st, cudaStreamNonBlocking));
  return 0;
}

/* Rank 0 first, running; then the others. */
static void launch_ordered(sm_hold_args *a, cudaStream_t st, int *host_cnt,
                           cudaStream_t peek) {
  if (rank == 0) {
    CUDA((cudaError_t)sm_hold_launch(a, st));
    *host_cnt = 0;
    for (int i = 0; i < 2000; i++) { /* up to ~2 s for the first CTA */
      CUDA(cudaMemcpyAsync(host_cnt, &a->arrived[0], sizeof(int),
                           cudaMemcpyDeviceToHost, peek));
      CUDA(cudaStreamSynchronize(peek));
      if (*host_cnt > 0) break;
      struct timespec ts = {0, 1000000};
      nanosleep(&ts, NULL);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank != 0) CUDA((cudaError_t)sm_hold_launch(a, st));
}

/* Kernels that wait for this one (rank 0's, launched first): does `op`
 * on rank 1 wait for them?  Returns the milliseconds it took. */
static double timed_op(int op, void **keep) {
  static void *buf;
  cudaStream_t s;
  cudaEvent_t ev;
  char host[4096];
  double t0 = MPI_Wtime();
  switch (op) {
    case 0:
      CUDA(cudaMalloc(&buf, 1 << 20));
      break;
    case 1:
      CUDA(cudaFree(buf));
      break;
    case 2:
      CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
      *keep = s;
      break;
    case 3:
      CUDA(cudaEventCreate(&ev));
      break;
    case 4:
      CUDA(cudaMallocHost(&buf, 1 << 20));
      CUDA(cudaFreeHost(buf));
      break;
    case 5:
      CUDA(cudaMalloc(&buf, 1 << 20));
      CUDA(cudaMemcpy(buf, host, sizeof host, cudaMemcpyHostToDevice));
      break;
    case 6:
      CUDA(cudaMemset(buf, 0, 4096));
      CUDA(cudaStreamSynchronize(0));
      break;
    case 7:
      CUDA(cudaDeviceSynchronize());
      break;
    case 8:
      CUDA(cudaFree(buf));
      break;
    case 9: {
      int *p;
      CUDA(cudaMalloc((void **)&p, 256 << 20));
      CUDA(cudaFree(p));
      break;
    }
    case 10:
      CUDA((cudaError_t)sm_idle_launch(0));
      break;
  }
  return (MPI_Wtime() - t0) * 1e3;
}
static const char *const op_names[] = {
    "cudaMalloc 1 MiB",
    "cudaFree",
    "cudaStreamCreate",
    "cudaEventCreate",
    "cudaMallocHost+cudaFreeHost",
    "cudaMalloc+cudaMemcpy (pageable, sync)",
    "cudaMemset legacy stream + sync",
    "cudaDeviceSynchronize",
    "cudaFree",
    "cudaMalloc+cudaFree 256 MiB",
    "first launch of a kernel (lazy loading)"};

static void drain_checks(int *arrived, int *sm_of_cta, int *timed_out,
                         cudaStream_t st, cudaStream_t peek, int *host_cnt,
                         long bound_ms) {
  const int n_ops = (int)(sizeof op_names / sizeof op_names[0]);
  for (int op = 0; op < n_ops; op++) {
    void *keep = NULL;
    if (rank == 0) CUDA(cudaMemset(arrived, 0, 2 * 64 * sizeof(int)));
    CUDA(cudaMemset(timed_out, 0, sizeof(int)));
    CUDA(cudaDeviceSynchronize());
    MPI_Barrier(MPI_COMM_WORLD);
    sm_hold_args a = {
        arrived, rank,      2,         1,
        0,       sm_of_cta, timed_out, (uint64_t)bound_ms * 1000000ull};
    double ms = 0;
    if (rank <= 1) {
      if (rank == 0)
        launch_ordered(&a, st, host_cnt, peek);
      else {
        MPI_Barrier(MPI_COMM_WORLD); /* rank 0's kernel runs */
        ms = timed_op(op, &keep);
        CUDA((cudaError_t)sm_hold_launch(&a, st));
      }
    } else
      MPI_Barrier(MPI_COMM_WORLD);
    CUDA(cudaStreamSynchronize(st));
    int to = 0;
    CUDA(cudaMemcpy(&to, timed_out, sizeof to, cudaMemcpyDeviceToHost));
    MPI_Allreduce(MPI_IN_PLACE, &to, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Bcast(&ms, 1, MPI_DOUBLE, 1, MPI_COMM_WORLD);
    if (rank == 0)
      printf(
          "probe drain: %-40s on rank 1 took %7.1f ms while rank 0's kernel "
          "waited for rank 1's%s\n",
          op_names[op], ms, to ? " (rank 0's kernel TIMED OUT)" : "");
    fflush(stdout);
  }
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const char *mode = argc > 1 ? argv[1] : "none";
  const long bound_ms = argc > 2 ? atol(argv[2]) : 3000;
  int sms = 0, smem_max = 0, n_sm[MAX_SMS] = {0};
  CUDA(cudaSetDevice(0));
  CUDA(cudaFree(NULL));
  CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CUDA(cudaDeviceGetAttribute(&smem_max,
                              cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
  report_resources(sms);

  /* the GPU's SMs: the largest count any rank sees */
  int dev_sms = sms;
  MPI_Allreduce(&sms, &dev_sms, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  const int share = dev_sms / ranks / 8 * 8 > 0 ? dev_sms / ranks / 8 * 8 : 8;
  cudaStream_t st = NULL, peek;
  int got = 0, fail = 0;
  const char *reach = "(same context)";
  double t0 = MPI_Wtime();
  if (!strcmp(mode, "green"))
    fail = green_stream(share, &st, &got);
  else if (!strcmp(mode, "affinity"))
    fail = affinity_stream(share, &st, &got, &reach);
  else {
    CUDA(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    got = sms;
  }
  const double setup_ms = (MPI_Wtime() - t0) * 1e3;
  int any_fail = 0;
  MPI_Allreduce(&fail, &any_fail, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (any_fail) {
    if (rank == 0) printf("probe %s: set-up failed on a rank\n", mode);
    MPI_Finalize();
    return 1;
  }
  CUDA(cudaStreamCreateWithFlags(&peek, cudaStreamNonBlocking));

  /* the arrival counters: rank 0's memory, mapped by every rank */
  int *arrived = NULL, *host_cnt, *sm_of_cta, *timed_out;
  cudaIpcMemHandle_t h;
  if (rank == 0) {
    CUDA(cudaMalloc((void **)&arrived, 2 * 64 * sizeof(int)));
    CUDA(cudaMemset(arrived, 0, 2 * 64 * sizeof(int)));
    CUDA(cudaDeviceSynchronize());
    CUDA(cudaIpcGetMemHandle(&h, arrived));
  }
  MPI_Bcast(&h, sizeof h, MPI_BYTE, 0, MPI_COMM_WORLD);
  if (rank != 0)
    CUDA(cudaIpcOpenMemHandle((void **)&arrived, h,
                              cudaIpcMemLazyEnablePeerAccess));
  CUDA(cudaMalloc((void **)&sm_of_cta, (size_t)dev_sms * sizeof(int)));
  CUDA(cudaMalloc((void **)&timed_out, sizeof(int)));
  CUDA(cudaMemset(sm_of_cta, 0xff, (size_t)dev_sms * sizeof(int)));
  CUDA(cudaMemset(timed_out, 0, sizeof(int)));
  CUDA(cudaMallocHost((void **)&host_cnt, sizeof(int)));
  CUDA(cudaDeviceSynchronize());
  MPI_Barrier(MPI_COMM_WORLD);

  if (!strcmp(mode, "drain")) {
    drain_checks(arrived, sm_of_cta, timed_out, st, peek, host_cnt, bound_ms);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank != 0) CUDA(cudaIpcCloseMemHandle(arrived));
    MPI_Finalize();
    return 0;
  }
  sm_hold_args a = {arrived,
                    rank,
                    ranks,
                    dev_sms,
                    (size_t)smem_max / 2 + 1024,
                    sm_of_cta,
                    timed_out,
                    (uint64_t)bound_ms * 1000000ull};
  t0 = MPI_Wtime();
  launch_ordered(&a, st, host_cnt, peek);
  CUDA(cudaStreamSynchronize(st));
  const double run_ms = (MPI_Wtime() - t0) * 1e3;
  int to = 0, *cta_sm = malloc(sizeof(int) * (size_t)dev_sms);
  CUDA(cudaMemcpy(&to, timed_out, sizeof to, cudaMemcpyDeviceToHost));
  CUDA(cudaMemcpy(cta_sm, sm_of_cta, sizeof(int) * (size_t)dev_sms,
                  cudaMemcpyDeviceToHost));
  int distinct = 0;
  for (int i = 0; i < dev_sms; i++)
    if (cta_sm[i] >= 0 && cta_sm[i] < MAX_SMS && !n_sm[cta_sm[i]]++) distinct++;
  /* the SMs of every rank, to count the ones used by another rank too */
  int *all = malloc(sizeof(int) * MAX_SMS * (size_t)ranks);
  for (int i = 0; i < MAX_SMS; i++) n_sm[i] = n_sm[i] > 0;
  MPI_Allgather(n_sm, MAX_SMS, MPI_INT, all, MAX_SMS, MPI_INT, MPI_COMM_WORLD);
  int shared = 0;
  for (int i = 0; i < MAX_SMS; i++)
    for (int q = 0; n_sm[i] && q < ranks; q++)
      if (q != rank && all[q * MAX_SMS + i]) {
        shared++;
        break;
      }

  /* The same launch captured into a graph from an ordinary stream, forked
   * onto the partition's stream and joined back; replayed twice. */
  const char *graph = "not tried";
  if (strcmp(mode, "none")) {
    cudaStream_t user;
    cudaEvent_t fork, join;
    cudaGraph_t gr;
    cudaGraphExec_t ge;
    CUDA(cudaStreamCreateWithFlags(&user, cudaStreamNonBlocking));
    CUDA(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    CUDA(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
    sm_hold_args b = a;
    b.grid = got; /* one wave: every CTA waits for the other ranks' */
    cudaError_t e =
        cudaStreamBeginCapture(user, cudaStreamCaptureModeThreadLocal);
    if (e == cudaSuccess) e = cudaEventRecord(fork, user);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(st, fork, 0);
    if (e == cudaSuccess) e = (cudaError_t)sm_hold_launch(&b, st);
    if (e == cudaSuccess) e = cudaEventRecord(join, st);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(user, join, 0);
    cudaError_t e2 = cudaStreamEndCapture(user, &gr);
    if (e == cudaSuccess) e = e2;
    if (e == cudaSuccess) e = cudaGraphInstantiate(&ge, gr, 0);
    if (e != cudaSuccess) {
      graph = cudaGetErrorName(e);
      (void)cudaGetLastError();
    } else {
      CUDA(cudaMemset(sm_of_cta, 0xff, (size_t)dev_sms * sizeof(int)));
      CUDA(cudaMemset(timed_out, 0, sizeof(int)));
      if (rank == 0) CUDA(cudaMemset(arrived, 0, 2 * 64 * sizeof(int)));
      CUDA(cudaDeviceSynchronize());
      MPI_Barrier(MPI_COMM_WORLD);
      CUDA(cudaGraphLaunch(ge, user));
      CUDA(cudaStreamSynchronize(user));
      int gto = 0, inside = 1;
      CUDA(cudaMemcpy(&gto, timed_out, sizeof gto, cudaMemcpyDeviceToHost));
      CUDA(cudaMemcpy(cta_sm, sm_of_cta, sizeof(int) * (size_t)got,
                      cudaMemcpyDeviceToHost));
      for (int i = 0; i < got; i++)
        inside &= cta_sm[i] >= 0 && cta_sm[i] < MAX_SMS && n_sm[cta_sm[i]];
      graph = gto      ? "replayed, timed out"
              : inside ? "replayed, on the partition's SMs"
                       : "replayed, on SMs outside the partition";
    }
  }
  printf(
      "probe %s rank %d of %d: partition %d SMs (set up in %.1f ms); "
      "kernel of %d CTAs %s in %.0f ms; ran on %d SMs, %d of them used by "
      "another rank too; graph: %s; primary context's memory: %s\n",
      mode, rank, ranks, got, setup_ms, dev_sms, to ? "TIMED OUT" : "ended",
      run_ms, distinct, shared, graph, reach);
  fflush(stdout);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank != 0) CUDA(cudaIpcCloseMemHandle(arrived));
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Finalize();
  return 0;
}
