/* SM partitions of ranks that share a GPU (src/core/sm_partition.c),
 * on however many ranks share it (skips without a GPU):
 *   - what the communicator reports: under MPS with every SM for each
 *     client, a partition of its own of the size the rule gives, all of
 *     them fitting on the GPU; where the user gave each client a share, that
 *     share, undivided; with option gpu_partition=none, none, and the fused
 *     paths refused (shared_gpu=auto); a second communicator over the same
 *     ranks holds the same partition;
 *   - the hold check: rank 0 first launches on its calls' stream a kernel
 *     of one CTA per SM of the GPU whose CTAs each hold their SM until a CTA
 *     of every rank has arrived (tests/gpu/sm_hold_kernels.cu), and waits
 *     until it runs; then every other rank launches the same.  Kept to its
 *     partition, rank 0's kernel leaves the others SMs and every CTA ends in
 *     time; without partitions under MPS rank 0's kernel holds every SM
 *     and gives up at the bound (and so may the next ones), which the run
 *     with gpu_partition=none expects;
 *   - the same launch captured into a CUDA graph from the caller's stream
 *     and replayed three times.
 * MKX_TEST_HOLD_MS: the kernels' bound (default 5000). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cuda_runtime.h>
#include "core/comm.h"
#include "core/sm_partition.h"
#include "ops/fused/fused.h"
#include "mkx.h"
#include "sm_hold_kernels.h"
#include "../common/check.h"
#include "../common/cuda_check.h"

static int rank, size;

#define CUDA(call) MT_CUDA_AT(rank, call)
#define MKX(call) MT_MKX_AT(rank, call)

typedef struct hold {
  int *arrived, *sm_of_cta, *timed_out, *host;
  cudaStream_t user, peek;
  sm_hold_args a;
} hold;

static void hold_init(hold *h, MKX_Comm c, int grid) {
  cudaIpcMemHandle_t ipc;
  int smem = 0;
  const char *ms = getenv("MKX_TEST_HOLD_MS");
  memset(h, 0, sizeof *h);
  if (rank == 0) {
    CUDA(cudaMalloc((void **)&h->arrived, 64 * sizeof(int)));
    CUDA(cudaIpcGetMemHandle(&ipc, h->arrived));
  }
  MPI_Bcast(&ipc, sizeof ipc, MPI_BYTE, 0, MPI_COMM_WORLD);
  if (rank != 0)
    CUDA(cudaIpcOpenMemHandle((void **)&h->arrived, ipc,
                              cudaIpcMemLazyEnablePeerAccess));
  CUDA(cudaMalloc((void **)&h->sm_of_cta, (size_t)grid * sizeof(int)));
  CUDA(cudaMalloc((void **)&h->timed_out, sizeof(int)));
  CUDA(cudaMallocHost((void **)&h->host, sizeof(int)));
  CUDA(cudaStreamCreateWithFlags(&h->user, cudaStreamNonBlocking));
  CUDA(cudaStreamCreateWithFlags(&h->peek, cudaStreamNonBlocking));
  CUDA(cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                              c->device));
  h->a = (sm_hold_args){h->arrived,
                        c->share.index,
                        c->share.ranks,
                        grid,
                        (size_t)smem / 2 + 1024,
                        h->sm_of_cta,
                        h->timed_out,
                        (uint64_t)(ms ? atol(ms) : 5000) * 1000000ull};
}

static void hold_free(hold *h) {
  if (rank != 0) CUDA(cudaIpcCloseMemHandle(h->arrived));
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) CUDA(cudaFree(h->arrived));
  CUDA(cudaFree(h->sm_of_cta));
  CUDA(cudaFree(h->timed_out));
  CUDA(cudaFreeHost(h->host));
  CUDA(cudaStreamDestroy(h->user));
  CUDA(cudaStreamDestroy(h->peek));
}

static void hold_reset(hold *h) {
  if (rank == 0) CUDA(cudaMemset(h->arrived, 0, 64 * sizeof(int)));
  CUDA(cudaMemset(h->timed_out, 0, sizeof(int)));
  CUDA(cudaDeviceSynchronize());
  MPI_Barrier(MPI_COMM_WORLD);
}

/* The hold kernel on the communicator's stream for calls, between the
 * fork from and the join to the caller's stream, as a fused call runs. */
static void hold_enqueue(hold *h, MKX_Comm c) {
  void *run;
  MKX(mkx_comm_part_fork(c, h->user, &run));
  CUDA((cudaError_t)sm_hold_launch(&h->a, (cudaStream_t)run));
  MKX(mkx_comm_part_join(c, h->user, run));
}

/* Rank 0's kernel first, running, then the others'; 1 if a CTA of any
 * rank gave up. */
static int hold_ordered(hold *h, MKX_Comm c, cudaGraphExec_t graph) {
  hold_reset(h);
  if (rank == 0) {
    if (graph)
      CUDA(cudaGraphLaunch(graph, h->user));
    else
      hold_enqueue(h, c);
    *h->host = 0;
    for (int i = 0; i < 10000 && *h->host == 0; i++) {
      const struct timespec ms = {0, 1000000};
      CUDA(cudaMemcpyAsync(h->host, h->arrived, sizeof(int),
                           cudaMemcpyDeviceToHost, h->peek));
      CUDA(cudaStreamSynchronize(h->peek));
      if (*h->host == 0) nanosleep(&ms, NULL);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank != 0) {
    if (graph)
      CUDA(cudaGraphLaunch(graph, h->user));
    else
      hold_enqueue(h, c);
  }
  CUDA(cudaStreamSynchronize(h->user));
  int to = 0, any = 0;
  CUDA(cudaMemcpy(&to, h->timed_out, sizeof to, cudaMemcpyDeviceToHost));
  MPI_Allreduce(&to, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return any;
}

/* What the communicator says of the GPU's sharing, against the rule. */
static void check_report(MKX_Comm c, int want_none) {
  const mkx_gpu_share *s = &c->share;
  if (s->mode != MKX_SHARE_MPS) {
    CHECK(s->part == MKX_PART_NONE && !s->unsafe,
          "%s: no partition expected (%s)", mkx_gpu_share_name(s->mode),
          mkx_gpu_part_name(s->part));
    return;
  }
  if (want_none) {
    CHECK(s->part == MKX_PART_NONE || s->part == MKX_PART_CLIENT,
          "gpu_partition=none, yet %s", mkx_gpu_part_name(s->part));
    if (s->part == MKX_PART_NONE)
      CHECK(s->unsafe && mkx_fused_share_why(c) != NULL,
            "no SMs of its own, yet the fused paths are not refused");
    return;
  }
  CHECK(s->part != MKX_PART_NONE && !s->unsafe,
        "under MPS a rank has no SMs of its own (%s)",
        mkx_gpu_part_name(s->part));
  if (s->part == MKX_PART_GREEN) {
    mkx_sm_part_limits l;
    MKX(mkx_sm_part_limits_of(c->device, &l));
    CHECK(s->ctx_sms == mkx_sm_part_size(&l, s->ranks) &&
              s->ranks * s->ctx_sms <= s->dev_sms &&
              s->ctx_sms == mkx_sm_part_sms(c->part),
          "partition of %d SMs for %d ranks on %d SMs (rule: %d)", s->ctx_sms,
          s->ranks, s->dev_sms, mkx_sm_part_size(&l, s->ranks));
    CHECK(s->ctas >= 1 && s->ctas <= s->ctx_sms,
          "fused kernels take %d CTAs of a partition of %d SMs", s->ctas,
          s->ctx_sms);
  }
}

/* The hold launch captured from the caller's stream, replayed 3 times. */
static void graph_replays(hold *h, MKX_Comm c, int expect_hold) {
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CUDA(cudaStreamBeginCapture(h->user, cudaStreamCaptureModeThreadLocal));
  hold_enqueue(h, c);
  CUDA(cudaStreamEndCapture(h->user, &g));
  CUDA(cudaGraphInstantiate(&ge, g, 0));
  for (int i = 0; i < 3; i++) {
    const int to = hold_ordered(h, c, ge);
    CHECK(to == expect_hold, "graph replay %d: %s (%s)", i,
          to ? "a CTA gave up" : "every CTA ended",
          mkx_gpu_part_name(c->share.part));
  }
  CUDA(cudaGraphExecDestroy(ge));
  CUDA(cudaGraphDestroy(g));
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
  check_show_passes(1);
  MKX_Comm c, c2;
  MKX(MKX_Comm_create(MPI_COMM_WORLD, MPI_INFO_NULL, &c));
  const int want_none = c->opt.gpu_partition == MKX_GPU_PART_NONE;
  check_report(c, want_none);
  MKX(MKX_Comm_create(MPI_COMM_WORLD, MPI_INFO_NULL, &c2));
  CHECK(c2->part == c->part && c2->share.ctx_sms == c->share.ctx_sms,
        "a second communicator over the same ranks: another partition");
  MKX(MKX_Comm_free(&c2));
  if (rank == 0) MKX(MKX_Info_print(c, stdout));

  /* one GPU shared by every rank: the hold check (several GPUs: each
   * rank's kernel waits for ranks it does not share SMs with, trivially) */
  int one_gpu = c->share.ranks == size, all = 0;
  MPI_Allreduce(&one_gpu, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (all && size > 1) {
    const int expect_hold =
        c->share.mode == MKX_SHARE_MPS && c->share.part == MKX_PART_NONE;
    hold h;
    hold_init(&h, c, c->share.dev_sms);
    const int to = hold_ordered(&h, c, NULL);
    CHECK(to == expect_hold, "%d CTAs on each of %d ranks (%s, %s): %s",
          c->share.dev_sms, size, mkx_gpu_share_name(c->share.mode),
          mkx_gpu_part_name(c->share.part),
          to ? "a CTA gave up" : "every CTA ended");
    graph_replays(&h, c, expect_hold);
    hold_free(&h);
  }
  MKX(MKX_Comm_free(&c));
  int failed = check_failed(), total = 0;
  MPI_Allreduce(&failed, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0)
    printf("%s test_sm_partition: %d ranks, %d checks, %d failures\n",
           total ? "FAIL" : "PASS", size, check_count(), total);
  MPI_Finalize();
  return total ? 1 : 0;
}
