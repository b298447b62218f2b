/*
 * A rank that dies (here: exits right after MKX_Comm_create) under a
 * launcher that keeps the survivors alive (tests/peer_loss.sh): every
 * survivor's next call returns MKX_ERR_TIMEOUT or MKX_ERR_PEER within the
 * bound, the communicator then refuses calls, can be freed, and MPI
 * finalises.  The script checks that every survivor printed its last
 * line, so a hang or a crash anywhere fails it.  With --during the rank
 * dies in the middle of a series of AllGather+GEMM calls instead.
 *
 * With --device (a GPU per rank or shared; skipped without one) the ranks
 * are virtual nodes over shm (of one rank, or of G with --vnode G) and the
 * call is a persistent plan driven by the GPU (option hier_gemm=proxy) of
 * AllGather+GEMM, or with --op rs / --op ar GEMM+ReduceScatter or
 * GEMM+AllReduce: every rank makes one start that must succeed, then the
 * last rank dies, and every survivor's next start (no host collective:
 * the GPU finds the loss, through the proxy, or a node rank's flag that
 * never rises) fails on the GPU within the bound, reported by the
 * asynchronous error query, and the stream comes back.
 */
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "../common/check.h"
#include "mkx.h"
#ifdef MKX_TEST_CUDA
#include <cuda_runtime.h>
#endif

#define N 8

static MKX_Comm make_comm(int device, const char *vnode) {
  MPI_Info info;
  MPI_Info_create(&info);
  MPI_Info_set(info, "mkx_timeout_ms", "2000");
  if (device) {
    MPI_Info_set(info, "mkx_virtual_node_size", vnode);
    MPI_Info_set(info, "mkx_net", "shm");
    MPI_Info_set(info, "mkx_hier_gemm", "proxy");
  }
  MKX_Comm c = NULL;
  int rc = MKX_Comm_create(MPI_COMM_WORLD, info, &c);
  MPI_Info_free(&info);
  CHECK_RC(rc, MKX_SUCCESS, "MKX_Comm_create");
  fflush(stdout);
  return c;
}

/* The host path, the rank dying during a series of AllGather+GEMM calls
 * (from a thread, so anywhere in a call): the survivors' call fails within
 * the bound wherever it waited, the communicator refuses the next, and
 * the exchanges they abandoned towards the dead rank keep no one from
 * finalising. */
enum { DN = 192 };
static void *die_soon(void *arg) {
  usleep(300000);
  _exit(0); /* without a word to MPI */
  return arg;
}

static void host_during(MKX_Comm c, int rank, int size) {
  float *A = calloc((size_t)DN * DN, sizeof *A),
        *B = calloc(DN * DN, sizeof *B);
  float *C = calloc((size_t)DN * DN * (size_t)size, sizeof *C);
  pthread_t t;
  if (!CHECK(A && B && C, "host buffers")) return;
  if (rank == size - 1 && pthread_create(&t, NULL, die_soon, NULL) != 0)
    _exit(0);
  int rc = MKX_SUCCESS, calls = 0;
  double t0 = MPI_Wtime();
  for (; rc == MKX_SUCCESS && calls < 1000000; calls++) {
    t0 = MPI_Wtime();
    rc = MKX_Allgather_gemm(A, DN, DN, DN, B, DN, DN, MKX_NO_TRANS, C, DN, NULL,
                            0, MKX_FP32, MKX_FP32, MKX_ROW_MAJOR, c, NULL);
  }
  const double dt = MPI_Wtime() - t0;
  CHECK(rc == MKX_ERR_TIMEOUT || rc == MKX_ERR_PEER,
        "survivor: call %d fails (%d: %s)", calls, rc, MKX_Get_last_error());
  CHECK(dt < 10.0, "survivor: within the bound (%.1f s, timeout_ms 2000)", dt);
  rc = MKX_Allgather_gemm(A, DN, DN, DN, B, DN, DN, MKX_NO_TRANS, C, DN, NULL,
                          0, MKX_FP32, MKX_FP32, MKX_ROW_MAJOR, c, NULL);
  CHECK_RC(rc, MKX_ERR_INVALID_COMM,
           "survivor: the communicator refuses the next call");
  free(A), free(B), free(C);
}

/* The host path: the call after the loss fails in its agreement. */
static void host_call(MKX_Comm c) {
  float A[N * N], B[N * N], C[N * N];
  for (int i = 0; i < N * N; i++) A[i] = B[i] = 1.0f;
  const double t0 = MPI_Wtime();
  int rc = MKX_Gemm_allreduce(A, N, 2, N, B, N, N, MKX_NO_TRANS, C, N, MKX_FP32,
                              MKX_FP32, MKX_ROW_MAJOR, c, NULL);
  const double dt = MPI_Wtime() - t0;
  CHECK(rc == MKX_ERR_TIMEOUT || rc == MKX_ERR_PEER,
        "survivor: the call "
        "fails (%d: %s)",
        rc, MKX_Get_last_error());
  CHECK(dt < 10.0, "survivor: within the bound (%.1f s, timeout_ms 2000)", dt);
  rc = MKX_Gemm_allreduce(A, N, 2, N, B, N, N, MKX_NO_TRANS, C, N, MKX_FP32,
                          MKX_FP32, MKX_ROW_MAJOR, c, NULL);
  CHECK_RC(rc, MKX_ERR_INVALID_COMM,
           "survivor: the communicator refuses "
           "the next call");
}

#ifdef MKX_TEST_CUDA
#define DM 256 /* rows per rank, K and N of the AllGather+GEMM */

static int cuda_ok(cudaError_t e, const char *what) {
  return CHECK(e == cudaSuccess, "%s: %s", what, cudaGetErrorString(e));
}

/* The persistent plan of `op` (ag, rs, ar) on DM x DM blocks of A per
 * rank, C large enough for every op. */
static int device_plan(const char *op, MKX_Comm c, int size, void *A, void *B,
                       void *C, MKX_Request *r) {
  const int64_t M = (int64_t)size * DM;
  if (!strcmp(op, "rs"))
    return MKX_Gemm_reduce_scatter_init(A, M, DM, DM, B, DM, DM, MKX_NO_TRANS,
                                        C, DM, MKX_BF16, MKX_FP32,
                                        MKX_ROW_MAJOR, c, MPI_INFO_NULL, r);
  if (!strcmp(op, "ar"))
    return MKX_Gemm_allreduce_init(A, M, DM, DM, B, DM, DM, MKX_NO_TRANS, C, DM,
                                   MKX_BF16, MKX_FP32, MKX_ROW_MAJOR, c,
                                   MPI_INFO_NULL, r);
  if (!strcmp(op, "ag"))
    return MKX_Allgather_gemm_init(A, DM, DM, DM, B, DM, DM, MKX_NO_TRANS, C,
                                   DM, NULL, 0, MKX_BF16, MKX_FP32,
                                   MKX_ROW_MAJOR, c, MPI_INFO_NULL, r);
  printf("# --op %s: not ag, rs or ar\n", op);
  return MKX_ERR_INVALID_ARG;
}

/* The GPU-driven plan: one good start by all, then the last rank dies and
 * the survivors' start fails on the GPU. */
static void device_run(MKX_Comm c, const char *op, int rank, int size) {
  void *A = NULL, *B = NULL, *C = NULL;
  cudaStream_t st = NULL;
  MKX_Request r = NULL;
  const size_t blocks = (size_t)size * DM * DM;
  int ok = cuda_ok(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking),
                   "cudaStreamCreate");
  ok = ok && cuda_ok(cudaMalloc(&A, blocks * 2), "cudaMalloc A");
  ok = ok && cuda_ok(cudaMalloc(&B, DM * DM * 2), "cudaMalloc B");
  ok = ok && cuda_ok(cudaMalloc(&C, blocks * 4), "cudaMalloc C");
  ok = ok && cuda_ok(cudaMemset(A, 0, blocks * 2), "cudaMemset A") &&
       cuda_ok(cudaMemset(B, 0, DM * DM * 2), "cudaMemset B");
  int rc = ok ? device_plan(op, c, size, A, B, C, &r) : MKX_ERR_INTERNAL;
  CHECK_RC(rc, MKX_SUCCESS, "plan driven by the GPU");
  MPI_Barrier(MPI_COMM_WORLD);
  if (rc == MKX_SUCCESS) rc = MKX_Start(r, st);
  CHECK_RC(rc, MKX_SUCCESS, "a start by every rank");
  if (rc == MKX_SUCCESS) cuda_ok(cudaStreamSynchronize(st), "its stream");
  int err = -1;
  CHECK_RC(MKX_Comm_get_async_error(c, &err), MKX_SUCCESS, "error query");
  CHECK_RC(err, MKX_SUCCESS, "the start by every rank ran");
  fflush(stdout);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == size - 1) _exit(0); /* dies without a word to MPI */
  usleep(200000);                 /* and is gone */
  const double t0 = MPI_Wtime();
  rc = r ? MKX_Start(r, st) : MKX_ERR_INTERNAL;
  if (rc == MKX_SUCCESS) {
    cuda_ok(cudaStreamSynchronize(st), "the stream after the loss");
    CHECK_RC(MKX_Comm_get_async_error(c, &rc), MKX_SUCCESS, "error query");
  }
  const double dt = MPI_Wtime() - t0;
  CHECK(rc == MKX_ERR_TIMEOUT || rc == MKX_ERR_PEER || rc == MKX_ERR_NET,
        "survivor: the start after the loss fails (%d: %s)", rc,
        MKX_Get_last_error());
  CHECK(dt < 10.0, "survivor: within the bound (%.1f s, timeout_ms 2000)", dt);
  if (r) {
    CHECK_RC(MKX_Start(r, st), MKX_ERR_INVALID_COMM,
             "survivor: the communicator refuses the next start");
    CHECK_RC(MKX_Request_free(&r), MKX_SUCCESS, "survivor: request free");
  }
  cudaFree(A), cudaFree(B), cudaFree(C);
  if (st) cudaStreamDestroy(st);
}

static int gpu_count(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
  (void)cudaGetLastError();
  return n;
}
#endif

int main(int argc, char **argv) {
  int rank = 0, size = 0, device = 0, during = 0;
  const char *vnode = "1", *op = "ag";
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  check_set_rank(rank, size);
  for (int i = 1; i < argc; i++) {
    device |= !strcmp(argv[i], "--device");
    during |= !strcmp(argv[i], "--during");
    if (!strcmp(argv[i], "--vnode") && i + 1 < argc) vnode = argv[++i];
    if (!strcmp(argv[i], "--op") && i + 1 < argc) op = argv[++i];
  }
  int gpus = 0;
#ifdef MKX_TEST_CUDA
  gpus = device ? gpu_count() : 0;
#endif
  const int G = atoi(vnode);
  if (size < 2 || (device && gpus == 0) || G < 1 || size % G || size / G < 2) {
    printf("skip: %s\n", size < 2 ? "needs 2 or more ranks"
                         : device && !gpus
                             ? "no GPU"
                             : "needs 2 or more nodes of --vnode ranks");
    MPI_Finalize();
    return CHECK_SKIP;
  }
  MKX_Comm c = make_comm(device, vnode);
#ifdef MKX_TEST_CUDA
  if (device) device_run(c, op, rank, size);
#endif
  if (!device && during) host_during(c, rank, size);
  if (!device && !during) {
    if (rank == size - 1) _exit(0); /* dies without a word to MPI */
    host_call(c);
  }
  CHECK_RC(MKX_Comm_free(&c), MKX_SUCCESS, "survivor: MKX_Comm_free");
  const int failed = check_failed();
  MPI_Finalize();
  printf("survivor %d finalized, %d failed\n", rank, failed);
  return failed ? 1 : 0;
}
