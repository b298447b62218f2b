/* The GPU-driven proxy on two GPUs as two nodes: each rank is
 * its own virtual node (virtual_node_size=1) with its own GPU, and the
 * ranks talk over tcp on loopback, device memory staged through pinned
 * host buffers.  Kernels post commands into the host-mapped ring
 * (kernels/proxy/proxy_dev.cuh) and wait on host-mapped signal words.
 *  1. exchange: several CTAs of each rank post writes of device chunks to
 *     the other rank at once, more writes than the ring has entries (it
 *     wraps), reusing a few send chunks only after their writes completed;
 *     other CTAs wait for the incoming signals and compare each message in
 *     the kernel.  Then the host compares every received byte, the signal
 *     words, the byte counters and the ring's counters.  Twice: many 4 KiB
 *     writes through an 8-entry ring, then a few writes of 2.5 MiB (several
 *     pieces of the 1 MiB staging buffers each).
 *  2. ring full: no proxy thread; the kernel's post after `entries` posts
 *     gives up after its bound with MKX_ERR_TIMEOUT and stops the ring.
 *  3. proxy stopped: a kernel waits for a signal that never comes; the
 *     host stops the proxy and the kernel returns MKX_ERR_NET at once.
 *  4. bad command: a CTA posts a command naming a region that does not
 *     exist; the proxy stops with MKX_ERR_INVALID_ARG and the kernels
 *     waiting on it return that code.
 * Every kernel is watched with a wall-clock bound (and alarm() guards the
 * whole run): a hang is a failure, never a hung test.  Exits 77 (skip)
 * without a GPU.  Run: mpirun -np 2 tests/gpu/test_proxy_gpu */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cuda_runtime.h>
#include <mpi.h>
#include "core/comm.h"
#include "core/error.h"
#include "mkx.h"
#include "net/net.h"
#include "proxy/proxy_gpu.h"
#include "proxy_gpu_kernels.h"
#include "../common/check.h"
#include "../common/cuda_check.h"

static int rank, size;

#define CUDA(call) MT_CUDA_AT(rank, call)
#define MKX(call) MT_MKX_AT(rank, call)

#define TIMEOUT_MS 20000
#define MAX_CTAS 4
#define REGION_SEND 0
#define REGION_RECV 1

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Wait for the stream, at most `limit` seconds: a kernel that does not
 * finish is a failure (and the process is aborted: it cannot be freed). */
static double finish(cudaStream_t s, double limit, const char *what) {
  double t0 = now_s();
  cudaError_t e;
  while ((e = cudaStreamQuery(s)) == cudaErrorNotReady) {
    if (now_s() - t0 > limit) {
      printf("not ok - rank %d: %s: kernel still running after %.0f s\n", rank,
             what, limit);
      fflush(stdout);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    usleep(200);
  }
  CUDA(e);
  return now_s() - t0;
}

typedef struct setup {
  MKX_Comm comm;
  mkx_net *net;
  int to, from;
  cudaStream_t stream;
  int *rc; /* device [2 * MAX_CTAS + 1] */
  unsigned long long *bad;
  char *send, *recv; /* device */
  size_t send_bytes, recv_bytes;
  mkx_net_mr smr, rmr;
  mkx_net_rkey skeys[8], rkeys[8];
} setup;

/* A GPU proxy on the test's endpoint with the two regions, started and
 * pinned where the topology map says (unless start == 0). */
static mkx_proxy_gpu *gpu_proxy(setup *t, uint32_t entries, int start) {
  mkx_proxy_gpu *g = NULL;
  uint32_t si, ri;
  MKX(mkx_proxy_gpu_create(t->net, t->comm->device, entries, TIMEOUT_MS, &g));
  mkx_proxy *p = mkx_proxy_gpu_proxy(g);
  MKX(mkx_proxy_add_region(p, &t->smr, t->skeys, &si));
  MKX(mkx_proxy_add_region(p, &t->rmr, t->rkeys, &ri));
  CHECK(si == REGION_SEND && ri == REGION_RECV, "regions %u %u", si, ri);
  if (start)
    MKX(mkx_proxy_start(p,
                        t->comm->has_gpu_map ? t->comm->gpu_map.cpus : NULL));
  return g;
}

static void get_rc(const setup *t, int *rc, int n) {
  CUDA(cudaMemcpy(rc, t->rc, sizeof(int) * (size_t)n, cudaMemcpyDeviceToHost));
}

/* ---- 1. the exchange ---- */

static void exchange(setup *t, int ctas, int msgs, int chunks, uint32_t bytes,
                     uint32_t entries, uint64_t base) {
  pg_exchange x = {.rank = rank,
                   .to = t->to,
                   .from = t->from,
                   .ctas = ctas,
                   .msgs = msgs,
                   .chunks = chunks,
                   .bytes = bytes,
                   .base = base,
                   .send = t->send,
                   .recv = t->recv,
                   .send_region = REGION_SEND,
                   .recv_region = REGION_RECV,
                   .rc = t->rc,
                   .bad = t->bad};
  size_t per_source = (size_t)ctas * msgs * bytes;
  uint64_t sent0 = mkx_net_bytes_sent(t->net, t->to);
  CUDA(cudaMemset(t->recv, 0, (size_t)size * per_source));
  CUDA(cudaMemset(t->rc, 0xff, sizeof(int) * (2 * MAX_CTAS + 1)));
  CUDA(cudaMemset(t->bad, 0, sizeof *t->bad));
  CUDA(cudaDeviceSynchronize());
  mkx_proxy_gpu *g = gpu_proxy(t, entries, 1);
  mkx_proxy_dev d;
  mkx_proxy_gpu_dev(g, &d);
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK(pg_exchange_run(&d, &x, t->stream) == 0, "launch");
  double secs = finish(t->stream, 120, "exchange");
  int rc[2 * MAX_CTAS];
  get_rc(t, rc, 2 * ctas);
  for (int b = 0; b < 2 * ctas; b++)
    CHECK(rc[b] == MKX_SUCCESS, "%s CTA %d returned %d",
          b < ctas ? "producer" : "consumer", b % ctas, rc[b]);
  const mkx_proxy_dev_status *st = mkx_proxy_gpu_status(g);
  CHECK(st->code == 0,
        "status %d (where %d, CTA %d, slot %u, what %llu, "
        "seen %llu)",
        st->code, st->where, st->block, st->slot, (unsigned long long)st->what,
        (unsigned long long)st->seen);
  unsigned long long bad = 0;
  CUDA(cudaMemcpy(&bad, t->bad, sizeof bad, cudaMemcpyDeviceToHost));
  CHECK(bad == 0, "%llu words differed when the kernel read them", bad);
  /* Every byte, on the host. */
  uint32_t *got = malloc(per_source);
  CUDA(cudaMemcpy(got, t->recv + (size_t)t->from * per_source, per_source,
                  cudaMemcpyDeviceToHost));
  size_t wrong = 0, words = bytes / 4;
  for (int b = 0; b < ctas; b++)
    for (int i = 0; i < msgs; i++)
      for (uint32_t k = 0; k < words; k++)
        wrong += got[((size_t)b * msgs + i) * words + k] !=
                 pg_word(t->from, b, i, k);
  CHECK(wrong == 0, "%zu of %zu received words differ", wrong,
        (size_t)ctas * msgs * words);
  free(got);
  for (int b = 0; b < ctas; b++)
    CHECK(mkx_net_signal(t->net, (uint32_t)(t->from * ctas + b)) ==
              base + (uint64_t)msgs,
          "signal of CTA %d from rank %d: %llu", b, t->from,
          (unsigned long long)mkx_net_signal(t->net,
                                             (uint32_t)(t->from * ctas + b)));
  uint64_t sent = mkx_net_bytes_sent(t->net, t->to) - sent0;
  CHECK(sent == per_source, "sent %llu bytes, want %zu",
        (unsigned long long)sent, per_source);
  mkx_proxy_ring *r = mkx_proxy_ring_of(mkx_proxy_gpu_proxy(g));
  uint64_t n = (uint64_t)ctas * msgs;
  CHECK(atomic_load(&r->reserved) == n && atomic_load(&r->completed) == n,
        "ring: %llu reserved, %llu completed, want %llu",
        (unsigned long long)atomic_load(&r->reserved),
        (unsigned long long)atomic_load(&r->completed), (unsigned long long)n);
  MPI_Barrier(MPI_COMM_WORLD); /* the peer has seen our last signal */
  CHECK(mkx_proxy_stop(mkx_proxy_gpu_proxy(g)) == MKX_SUCCESS, "clean stop");
  mkx_proxy_gpu_destroy(g);
  if (rank == 0)
    printf(
        "# exchange: %d CTAs x %d writes of %u bytes, %u-entry ring: "
        "%.3f s, %.2f GB/s per direction\n",
        ctas, msgs, bytes, entries, secs, per_source / secs / 1e9);
}

/* ---- 2. a full ring with nobody draining it ---- */

static void ring_full(setup *t) {
  const uint32_t entries = 4;
  mkx_proxy_gpu *g = gpu_proxy(t, entries, 0);
  mkx_proxy_dev d;
  mkx_proxy_gpu_dev(g, &d);
  d.timeout_ns = 300u * 1000000u; /* a short bound: it will run out */
  int *posted;
  CUDA(cudaMalloc((void **)&posted, sizeof *posted));
  CHECK(pg_post_many(&d, t->to, REGION_SEND, REGION_RECV, 0, 10, t->rc, posted,
                     t->stream) == 0,
        "launch");
  double secs = finish(t->stream, 30, "ring full");
  int rc, n;
  get_rc(t, &rc, 1);
  CUDA(cudaMemcpy(&n, posted, sizeof n, cudaMemcpyDeviceToHost));
  CHECK(rc == MKX_ERR_TIMEOUT && n == (int)entries,
        "full ring: rc %d after %d posts (want %d after %u)", rc, n,
        MKX_ERR_TIMEOUT, entries);
  CHECK(secs >= 0.25 && secs < 10, "gave up after its bound: %.2f s", secs);
  const mkx_proxy_dev_status *st = mkx_proxy_gpu_status(g);
  CHECK(st->code == MKX_ERR_TIMEOUT && st->where == MKX_PROXY_AT_POST &&
            st->what == entries + 1,
        "status %d where %d what %llu", st->code, st->where,
        (unsigned long long)st->what);
  mkx_proxy_ring *r = mkx_proxy_ring_of(mkx_proxy_gpu_proxy(g));
  CHECK(atomic_load(&r->error) == MKX_ERR_TIMEOUT,
        "the ring is stopped by the producer that gave up: %d",
        atomic_load(&r->error));
  CUDA(cudaFree(posted));
  mkx_proxy_gpu_destroy(g);
}

/* ---- 3. the proxy stopped under a waiting kernel ---- */

static void stopped(setup *t) {
  mkx_proxy_gpu *g = gpu_proxy(t, 8, 1);
  mkx_proxy_dev d;
  mkx_proxy_gpu_dev(g, &d);
  CHECK(pg_wait_signal(&d, 0, UINT64_C(1) << 40, t->rc, t->stream) == 0,
        "launch");
  usleep(300000);
  CHECK(cudaStreamQuery(t->stream) == cudaErrorNotReady,
        "the kernel is waiting");
  double t0 = now_s();
  CHECK(mkx_proxy_stop(mkx_proxy_gpu_proxy(g)) == MKX_SUCCESS, "stop");
  finish(t->stream, 30, "stopped proxy");
  double secs = now_s() - t0;
  int rc;
  get_rc(t, &rc, 1);
  CHECK(rc == MKX_ERR_NET, "the kernel gave up with %d (want %d)", rc,
        MKX_ERR_NET);
  CHECK(secs < TIMEOUT_MS / 1000.0 / 2,
        "at once (%.3f s), not at its "
        "bound",
        secs);
  const mkx_proxy_dev_status *st = mkx_proxy_gpu_status(g);
  CHECK(st->code == MKX_ERR_NET && st->where == MKX_PROXY_AT_SIGNAL,
        "status %d where %d", st->code, st->where);
  mkx_proxy_gpu_destroy(g);
}

/* ---- 4. a bad command ---- */

static void bad_command(setup *t) {
  const int ctas = 4;
  mkx_proxy_gpu *g = gpu_proxy(t, 8, 1);
  mkx_proxy_dev d;
  mkx_proxy_gpu_dev(g, &d);
  CUDA(cudaMemset(t->rc, 0xff, sizeof(int) * ctas));
  CHECK(pg_bad_command(&d, ctas, t->to, REGION_SEND, REGION_RECV, 99,
                       (uint32_t)(rank * MAX_CTAS), t->rc, t->stream) == 0,
        "launch");
  double secs = finish(t->stream, 30, "bad command");
  int rc[4];
  get_rc(t, rc, ctas);
  CHECK(rc[0] == MKX_ERR_INVALID_ARG, "the bad command's CTA: %d", rc[0]);
  for (int b = 1; b < ctas; b++)
    CHECK(rc[b] == MKX_SUCCESS || rc[b] == MKX_ERR_INVALID_ARG, "CTA %d: %d", b,
          rc[b]);
  CHECK(secs < TIMEOUT_MS / 1000.0 / 2, "at once (%.3f s)", secs);
  const mkx_proxy_dev_status *st = mkx_proxy_gpu_status(g);
  CHECK(st->code == MKX_ERR_INVALID_ARG, "status %d", st->code);
  CHECK(mkx_proxy_stop(mkx_proxy_gpu_proxy(g)) == MKX_ERR_INVALID_ARG,
        "stop reports the bad command");
  mkx_proxy_gpu_destroy(g);
}

static void run(setup *t) {
  mkx_options opt = t->comm->opt;
  opt.net = MKX_NET_TCP;
  strcpy(opt.net_tcp_bind, "lo");
  mkx_net_params prm = {.rank = rank,
                        .size = size,
                        .num_signals = (uint32_t)(size * MAX_CTAS),
                        .timeout_ms = TIMEOUT_MS,
                        .opt = &opt};
  MKX(mkx_net_open(&prm, &t->net));
  MKX(mkx_net_connect(t->net, &t->comm->oob));
  t->to = (rank + 1) % size;
  t->from = (rank + size - 1) % size;
  /* The largest runs: 4 CTAs x 4 chunks of 4 KiB / 2 CTAs x 2 x 2.5 MiB
   * to send; every message its own place to receive (4 MiB / 15 MiB per
   * source). */
  t->send_bytes = 16u << 20;
  t->recv_bytes = (size_t)size * (16u << 20);
  CUDA(cudaMalloc((void **)&t->send, t->send_bytes));
  CUDA(cudaMalloc((void **)&t->recv, t->recv_bytes));
  CUDA(cudaMalloc((void **)&t->rc, sizeof(int) * (2 * MAX_CTAS + 1)));
  CUDA(cudaMalloc((void **)&t->bad, sizeof *t->bad));
  CUDA(cudaStreamCreateWithFlags(&t->stream, cudaStreamNonBlocking));
  /* Registered as host memory on purpose: tcp finds device memory itself. */
  mkx_net_reg_args sa = {t->send, t->send_bytes, MKX_NET_MEM_HOST, -1, 0};
  mkx_net_reg_args ra = {t->recv, t->recv_bytes, MKX_NET_MEM_DEVICE, -1, 0};
  MKX(mkx_net_reg(t->net, &sa, &t->smr));
  MKX(mkx_net_reg(t->net, &ra, &t->rmr));
  CHECK(t->smr.kind == MKX_NET_MEM_DEVICE && t->rmr.kind == MKX_NET_MEM_DEVICE,
        "tcp recognises device memory");
  MKX(mkx_net_exchange_keys(t->net, &t->comm->oob, &t->smr, t->skeys));
  MKX(mkx_net_exchange_keys(t->net, &t->comm->oob, &t->rmr, t->rkeys));

  /* 256 x 4 KiB per CTA: 1024 commands through 8 entries. */
  exchange(t, 4, 256, 4, 4096, 8, 0);
  /* 2.5 MiB + 16: three staging pieces each, the last a short one. */
  exchange(t, 2, 3, 2, (5u << 19) + 16, 4, 256);
  MPI_Barrier(MPI_COMM_WORLD);
  ring_full(t);
  MPI_Barrier(MPI_COMM_WORLD);
  stopped(t);
  MPI_Barrier(MPI_COMM_WORLD);
  bad_command(t);
  /* Nobody closes while a peer may still read its last frames. */
  MPI_Barrier(MPI_COMM_WORLD);
  mkx_net_dereg(t->net, &t->smr);
  mkx_net_dereg(t->net, &t->rmr);
  mkx_net_close(t->net);
  CUDA(cudaStreamDestroy(t->stream));
  CUDA(cudaFree(t->send));
  CUDA(cudaFree(t->recv));
  CUDA(cudaFree(t->rc));
  CUDA(cudaFree(t->bad));
}

int main(int argc, char **argv) {
  int ndev = 0;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  /* No driver: the count stays 0 (the runtime does not write it). */
  int skip = cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0 ||
             size < 2 || size > 8;
  MPI_Allreduce(MPI_IN_PLACE, &skip, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (skip) {
    if (rank == 0)
      printf(
          "1..0 # SKIP test_proxy_gpu needs a GPU per rank and 2..8 "
          "ranks\n");
    MPI_Finalize();
    return CHECK_SKIP;
  }
  check_set_rank(rank, size);
  alarm(300); /* whatever happens, no hung test (SIGALRM ends it) */
  MPI_Info info;
  MPI_Info_create(&info);
  MPI_Info_set(info, "mkx_virtual_node_size", "1");
  MPI_Info_set(info, "mkx_net", "tcp");
  setup t = {0};
  MKX(MKX_Comm_create(MPI_COMM_WORLD, info, &t.comm));
  MPI_Info_free(&info);
  CHECK(t.comm->device >= 0, "rank %d has a GPU", rank);
  CHECK(t.comm->place.num_nodes == size, "%d virtual nodes",
        t.comm->place.num_nodes);
  printf("# rank %d: device %d, proxy cpus '%s'\n", rank, t.comm->device,
         t.comm->has_gpu_map ? t.comm->gpu_map.cpus : "");
  fflush(stdout);
  if (t.comm->device >= 0) run(&t);
  MKX_Comm_free(&t.comm);
  int failed = check_failed(), total = 0;
  MPI_Allreduce(&failed, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0)
    printf("%s test_proxy_gpu: %d ranks, %d checks each, %d failures\n",
           total ? "FAIL" : "PASS", size, check_count(), total);
  MPI_Finalize();
  return total ? 1 : 0;
}
