/* shm's copies into peers' device memory (CUDA IPC), without a GPU: a fake
 * stager declares two POSIX shared-memory buffers per rank "device memory"
 * of GPU 0, exports them by name and maps a peer's by that name, and
 * copies with memcpy, counting every call.  On 2-4 ranks:
 *  - both device regions are exported at registration;
 *  - 200 writes per rank of 1 byte to 20000 bytes into every other rank's
 *    receive region: each is one copy straight into the peer's region (no
 *    staging, no ring payload), every byte is right once the signals say
 *    all arrived, and each peer's region is mapped once;
 *  - a write past the end of the peer's region is refused at the sender
 *    and copies nothing;
 *  - the receive region registered again (a new export): the senders map
 *    it anew and the writes land;
 *  - a second endpoint where rank 0 cannot map its peer's region: rank 0
 *    says so, stages its writes through host memory from then on, and they
 *    arrive right; the other ranks keep copying.
 * With --device (-gpu runs; skipped without a GPU) the same on cudaMalloc
 * memory through the CUDA stager, without the fake's counts and the
 * refused mapping, then rank 0 writes 1 GiB to rank 1 in 16 MiB writes and
 * prints the rate (the emulated link's cap from the environment, e.g.
 * MKX_NET_SHM_BANDWIDTH=50000). */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <mpi.h>
#include "boot/oob_mpi.h"
#include "core/error.h"
#include "core/options.h"
#include "mkx.h"
#include "fake_stager.h"
#include "net_main.h"
#include "net/net.h"
#ifdef MKX_TEST_CUDA
#include <cuda_runtime.h>
#endif

#define MSGS 200
#define MAXLEN 20000
#define SEND_BYTES ((size_t)MAXLEN)
#define TIMEOUT_MS 20000
#define MAGIC 0x46414b45u /* "FAKE" */

/* ---- the fake stager: "device" memory is named shared memory ---- */

typedef struct fake_handle {
  uint32_t magic;
  uint32_t len;
  char name[48];
} fake_handle;
_Static_assert(sizeof(fake_handle) <= MKX_NET_IPC_BYTES, "fake handle");

static struct {
  char *dev[2]; /* this rank's send and receive buffers */
  size_t len[2];
  char name[2][48];
  pthread_mutex_t lock;
  uint64_t exports, imports, releases, copies, copy_bytes, staged;
  int fail_import; /* the next import fails */
  void *maps[64];
  size_t map_len[64];
} fk = {.lock = PTHREAD_MUTEX_INITIALIZER};

static int fake_device_of(const void *p) {
  for (int i = 0; i < 2; i++)
    if (in_range(p, 1, fk.dev[i], fk.len[i])) return 0;
  return -1;
}
static int fake_host_alloc(void *ctx, size_t bytes, void **p) {
  (void)ctx;
  return fake_stage_alloc(bytes, p);
}
static int fake_stage(void *ctx, void *dst, const void *src, size_t len) {
  (void)ctx;
  memcpy(dst, src, len);
  pthread_mutex_lock(&fk.lock);
  fk.staged += len;
  pthread_mutex_unlock(&fk.lock);
  return MKX_SUCCESS;
}
static int fake_export(void *ctx, const void *p, void *handle,
                       uint64_t *offset) {
  (void)ctx;
  for (int i = 0; i < 2; i++)
    if (in_range(p, 1, fk.dev[i], fk.len[i])) {
      fake_handle h = {MAGIC, (uint32_t)fk.len[i], {0}};
      snprintf(h.name, sizeof h.name, "%s", fk.name[i]);
      memcpy(handle, &h, sizeof h);
      *offset = (uint64_t)((const char *)p - fk.dev[i]);
      pthread_mutex_lock(&fk.lock);
      fk.exports++;
      pthread_mutex_unlock(&fk.lock);
      return MKX_SUCCESS;
    }
  return mkx_error(MKX_ERR_INTERNAL, "fake: export of %p", p);
}
static int fake_import(void *ctx, const void *handle, void **base) {
  (void)ctx;
  fake_handle h;
  memcpy(&h, handle, sizeof h);
  pthread_mutex_lock(&fk.lock);
  const int fail = fk.fail_import;
  fk.fail_import = 0;
  pthread_mutex_unlock(&fk.lock);
  if (fail) return mkx_error(MKX_ERR_CUDA, "fake: mapping refused");
  if (h.magic != MAGIC) return mkx_error(MKX_ERR_INTERNAL, "fake: bad handle");
  int fd = shm_open(h.name, O_RDWR, 0);
  void *m = fd < 0
                ? MAP_FAILED
                : mmap(NULL, h.len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (fd >= 0) close(fd);
  if (m == MAP_FAILED) return mkx_error(MKX_ERR_CUDA, "fake: map %s", h.name);
  pthread_mutex_lock(&fk.lock);
  int k = 0;
  while (k < 64 && fk.maps[k]) k++;
  if (k < 64) fk.maps[k] = m, fk.map_len[k] = h.len;
  fk.imports++;
  pthread_mutex_unlock(&fk.lock);
  *base = m;
  return k < 64 ? MKX_SUCCESS : mkx_error(MKX_ERR_INTERNAL, "fake: maps");
}
static void fake_release(void *ctx, void *base) {
  (void)ctx;
  pthread_mutex_lock(&fk.lock);
  for (int k = 0; k < 64; k++)
    if (fk.maps[k] == base) {
      munmap(base, fk.map_len[k]);
      fk.maps[k] = NULL;
      fk.releases++;
    }
  pthread_mutex_unlock(&fk.lock);
}
static int fake_copy(void *ctx, void *dst, const void *src, size_t len) {
  (void)ctx;
  memcpy(dst, src, len);
  pthread_mutex_lock(&fk.lock);
  fk.copies++;
  fk.copy_bytes += len;
  pthread_mutex_unlock(&fk.lock);
  return MKX_SUCCESS;
}

static const mkx_net_stager fake = {.name = "fake",
                                    .stage_bytes = 4096,
                                    .device_of = fake_device_of,
                                    .open = fake_open,
                                    .close = fake_close,
                                    .host_alloc = fake_host_alloc,
                                    .host_free = fake_host_free,
                                    .to_host = fake_stage,
                                    .to_device = fake_stage,
                                    .ipc_export = fake_export,
                                    .ipc_import = fake_import,
                                    .ipc_release = fake_release,
                                    .copy = fake_copy};

/* ---- the memory under test: the fake's, or the GPU's (--device) ---- */

static int use_device;
static unsigned char *host_recv;

#ifdef MKX_TEST_CUDA
#define CUDA_OK(x) ((x) == cudaSuccess)
#else
#define CUDA_OK(x) 0
#endif

static int put_send(const unsigned char *h, size_t len) {
  if (!use_device) {
    memcpy(fk.dev[0], h, len);
    return MKX_SUCCESS;
  }
  /* a copy from pageable memory may return before its DMA is done, and
   * the transport reads the buffer on a stream of its own: the data must be
   * there before the write is posted, as a kernel's must */
  return CUDA_OK(cudaMemcpy(fk.dev[0], h, len, cudaMemcpyHostToDevice)) &&
                 CUDA_OK(cudaDeviceSynchronize())
             ? MKX_SUCCESS
             : mkx_error(MKX_ERR_CUDA, "test: copy to the send buffer");
}
static const unsigned char *get_recv(void) {
  if (!use_device) return (const unsigned char *)fk.dev[1];
  return CUDA_OK(cudaMemcpy(host_recv, fk.dev[1], fk.len[1],
                            cudaMemcpyDeviceToHost))
             ? host_recv
             : NULL;
}
static void clear_recv(void) {
  if (!use_device)
    memset(fk.dev[1], 0, fk.len[1]);
  else
    CHECK(CUDA_OK(cudaMemset(fk.dev[1], 0, fk.len[1])), "clear");
}

static char *shared_buffer(int i, size_t len) {
  snprintf(fk.name[i], sizeof fk.name[i], "/mkx-fake-dev-%d-%d", (int)getpid(),
           i);
  int fd = shm_open(fk.name[i], O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return NULL;
  void *m = ftruncate(fd, (off_t)len) == 0
                ? mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                : MAP_FAILED;
  close(fd);
  fk.len[i] = len;
  return m == MAP_FAILED ? NULL : m;
}

/* ---- the traffic ---- */

static int dest_of(int src, int i) { return (src + 1 + i % (size - 1)) % size; }
static size_t len_of(int src, int i) {
  return 1 + (size_t)(src * 131 + i * 997) % MAXLEN;
}
static unsigned char pattern(int src, int i, size_t b, int round) {
  return (unsigned char)(src * 29 + i * 13 + b * 7 + (b >> 8) + round * 101);
}
static size_t place(int src, int i) {
  return ((size_t)src * MSGS + (size_t)i) * MAXLEN;
}
static size_t recv_bytes(void) { return (size_t)size * MSGS * MAXLEN; }

typedef struct ep {
  mkx_net *n;
  mkx_net_mr smr, rmr;
  mkx_net_rkey rkeys[8];
} ep;

static int open_ep(const mkx_oob *oob, ep *e) {
  static mkx_options opt;
  MKX_TRY(mkx_net_options_register());
  MKX_TRY(mkx_options_load(&opt, MPI_INFO_NULL));
  opt.net = MKX_NET_SHM;
  opt.net_shm_ring = 1 << 20;
  mkx_net_params prm = {.rank = rank,
                        .size = size,
                        .num_signals = (uint32_t)size,
                        .timeout_ms = TIMEOUT_MS,
                        .opt = &opt};
  mkx_net_shm_set_stager(use_device ? NULL : &fake);
  int rc = mkx_net_open(&prm, &e->n);
  mkx_net_shm_set_stager(NULL);
  MKX_TRY(rc);
  MKX_TRY(mkx_net_connect(e->n, oob));
  mkx_net_reg_args sa = {fk.dev[0], fk.len[0], MKX_NET_MEM_DEVICE, -1, 0};
  mkx_net_reg_args ra = {fk.dev[1], fk.len[1], MKX_NET_MEM_DEVICE, -1, 0};
  MKX_TRY(mkx_net_reg(e->n, &sa, &e->smr));
  MKX_TRY(mkx_net_reg(e->n, &ra, &e->rmr));
  return mkx_net_exchange_keys(e->n, oob, &e->rmr, e->rkeys);
}

/* Every rank's MSGS writes, then every message from every source checked
 * once the source's signal says all of them arrived (signals count from
 * `base`). */
static int traffic(ep *e, const mkx_oob *oob, int round, uint64_t base) {
  uint64_t count[8] = {0};
  static unsigned char msg[MAXLEN];
  for (int i = 0; i < MSGS; i++) {
    const int dst = dest_of(rank, i);
    const size_t len = len_of(rank, i);
    for (size_t b = 0; b < len; b++) msg[b] = pattern(rank, i, b, round);
    MKX_TRY(put_send(msg, len));
    MKX_TRY(mkx_net_write_signal(e->n, dst, &e->smr, 0, &e->rkeys[dst],
                                 place(rank, i), len, (uint32_t)rank,
                                 base + ++count[dst], (uint64_t)i));
    mkx_net_completion done[16];
    int got = 0;
    MKX_TRY(mkx_net_poll(e->n, done, 16, &got));
  }
  int bad = 0;
  for (int src = 0; src < size; src++) {
    if (src == rank) continue;
    uint64_t want = 0;
    for (int i = 0; i < MSGS; i++) want += dest_of(src, i) == rank;
    MKX_TRY(mkx_net_wait_signal(e->n, (uint32_t)src, base + want, TIMEOUT_MS,
                                NULL));
  }
  const unsigned char *recv = get_recv();
  if (!recv) return mkx_error(MKX_ERR_CUDA, "test: copy of the receive buffer");
  for (int src = 0; src < size; src++) {
    if (src == rank) continue;
    for (int i = 0; i < MSGS; i++) {
      if (dest_of(src, i) != rank) continue;
      const unsigned char *got = recv + place(src, i);
      for (size_t b = 0; b < len_of(src, i); b++)
        bad += got[b] != pattern(src, i, b, round);
    }
  }
  CHECK(bad == 0, "round %d: %d bytes differ", round, bad);
  return oob->barrier(oob->ctx, TIMEOUT_MS, "test barrier");
}

static uint64_t sent_by_me(void) {
  uint64_t s = 0;
  for (int i = 0; i < MSGS; i++) s += len_of(rank, i);
  return s;
}

static void close_ep(ep *e) {
  mkx_net_dereg(e->n, &e->smr);
  mkx_net_dereg(e->n, &e->rmr);
  mkx_net_close(e->n);
}

/* The buffers: the fake's named shared memory, or cudaMalloc memory on
 * GPU rank % count. */
static int make_buffers(void) {
  fk.len[0] = SEND_BYTES;
  fk.len[1] = recv_bytes();
  if (!use_device) {
    fk.dev[0] = shared_buffer(0, SEND_BYTES);
    fk.dev[1] = shared_buffer(1, recv_bytes());
    return fk.dev[0] && fk.dev[1]
               ? MKX_SUCCESS
               : mkx_error(MKX_ERR_NOMEM, "fake device buffers");
  }
#ifdef MKX_TEST_CUDA
  int count = 0;
  host_recv = malloc(fk.len[1]);
  if (host_recv && CUDA_OK(cudaGetDeviceCount(&count)) && count > 0 &&
      CUDA_OK(cudaSetDevice(rank % count)) &&
      CUDA_OK(cudaMalloc((void **)&fk.dev[0], fk.len[0])) &&
      CUDA_OK(cudaMalloc((void **)&fk.dev[1], fk.len[1])) &&
      CUDA_OK(cudaMemset(fk.dev[1], 0, fk.len[1])))
    return MKX_SUCCESS;
#endif
  return mkx_error(MKX_ERR_CUDA, "test: device buffers");
}

static void free_buffers(void) {
  for (int i = 0; i < 2; i++) {
    if (!use_device) {
      if (fk.dev[i]) munmap(fk.dev[i], fk.len[i]);
      if (fk.name[i][0]) shm_unlink(fk.name[i]);
    }
#ifdef MKX_TEST_CUDA
    else
      cudaFree(fk.dev[i]);
#endif
  }
  free(host_recv);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* --device: rank 0 writes 1 GiB to rank 1 in 16 MiB writes (one more
 * region each, on the device); rank 1 times them from a barrier to the
 * last signal and prints the rate.  A measurement, nothing asserted but
 * the arrival. */
static int rate(ep *e, const mkx_oob *oob) {
#ifdef MKX_TEST_CUDA
  const size_t piece = (size_t)16 << 20, total = (size_t)1 << 30;
  void *buf = NULL;
  mkx_net_mr mr;
  mkx_net_rkey keys[8];
  if (!CUDA_OK(cudaMalloc(&buf, rank == 0 ? piece : total)))
    return mkx_error(MKX_ERR_CUDA, "test: rate buffer");
  mkx_net_reg_args a = {buf, rank == 0 ? piece : total, MKX_NET_MEM_DEVICE, -1,
                        0};
  MKX_TRY(mkx_net_reg(e->n, &a, &mr));
  MKX_TRY(mkx_net_exchange_keys(e->n, oob, &mr, keys));
  MKX_TRY(oob->barrier(oob->ctx, TIMEOUT_MS, "test barrier"));
  const double t0 = now_s();
  if (rank == 0)
    for (size_t off = 0, k = 1; off < total; off += piece, k++) {
      MKX_TRY(mkx_net_write_signal(e->n, 1, &mr, 0, &keys[1], off, piece, 0,
                                   2 * MSGS + k, k));
      mkx_net_completion done[16];
      int got = 0;
      MKX_TRY(mkx_net_poll(e->n, done, 16, &got));
    }
  if (rank == 1) {
    MKX_TRY(mkx_net_wait_signal(e->n, 0, 2 * MSGS + total / piece, TIMEOUT_MS,
                                NULL));
    const double ms = 1e3 * (now_s() - t0);
    printf(
        "# rank 0 -> 1: %zu MiB in %zu MiB writes of device memory: %.2f "
        "ms, %.1f GB/s\n",
        total >> 20, piece >> 20, ms, ms > 0 ? (double)total / ms / 1e6 : 0.);
  }
  MKX_TRY(oob->barrier(oob->ctx, TIMEOUT_MS, "test barrier"));
  mkx_net_dereg(e->n, &mr);
  cudaFree(buf);
  return MKX_SUCCESS;
#else
  (void)e, (void)oob;
  return MKX_SUCCESS;
#endif
}

static int checks(const mkx_oob *oob) {
  ep e;
  int on = 0;
  MKX_TRY(open_ep(oob, &e));
  if (!use_device)
    CHECK(fk.exports == 2, "both device regions exported (%llu)",
          (unsigned long long)fk.exports);
  MKX_TRY(traffic(&e, oob, 0, 0));
  uint64_t copies = mkx_net_shm_ipc_copies(e.n, &on);
  CHECK(on && copies == MSGS, "every write copied into the peer: %llu of %d",
        (unsigned long long)copies, MSGS);
  if (!use_device) {
    CHECK(fk.copies == MSGS && fk.copy_bytes == sent_by_me(),
          "one copy each: %llu copies of %llu bytes (want %d, %llu)",
          (unsigned long long)fk.copies, (unsigned long long)fk.copy_bytes,
          MSGS, (unsigned long long)sent_by_me());
    CHECK(fk.staged == 0, "nothing staged (%llu bytes)",
          (unsigned long long)fk.staged);
    CHECK(fk.imports == (uint64_t)(size - 1), "each peer mapped once (%llu)",
          (unsigned long long)fk.imports);
  }
  const int peer = (rank + 1) % size;
  int rc = mkx_net_write_signal(e.n, peer, &e.smr, 0, &e.rkeys[peer],
                                recv_bytes() - 10, 11, (uint32_t)rank, 1, 0);
  CHECK(rc == MKX_ERR_INVALID_ARG, "a write past the region's end: %d", rc);
  CHECK(mkx_net_shm_ipc_copies(e.n, &on) == MSGS, "and nothing copied");
  /* the receive region again: a new export the senders map anew (cleared
   * first: once the keys are out, peers write) */
  clear_recv();
  MKX_TRY(oob->barrier(oob->ctx, TIMEOUT_MS, "test barrier"));
  mkx_net_dereg(e.n, &e.rmr);
  mkx_net_reg_args ra = {fk.dev[1], fk.len[1], MKX_NET_MEM_DEVICE, -1, 0};
  MKX_TRY(mkx_net_reg(e.n, &ra, &e.rmr));
  MKX_TRY(mkx_net_exchange_keys(e.n, oob, &e.rmr, e.rkeys));
  MKX_TRY(traffic(&e, oob, 1, MSGS));
  CHECK(mkx_net_shm_ipc_copies(e.n, &on) == 2 * MSGS,
        "registered again: still copied");
  if (!use_device)
    CHECK(fk.imports == 2 * (uint64_t)(size - 1) &&
              fk.releases == (uint64_t)(size - 1),
          "registered again: mapped anew (%llu maps, %llu released)",
          (unsigned long long)fk.imports, (unsigned long long)fk.releases);
  if (use_device && size >= 2) MKX_TRY(rate(&e, oob));
  close_ep(&e);
  if (!use_device) {
    CHECK(fk.releases == fk.imports, "every mapping released at close");
    /* a second endpoint; rank 0 cannot map its peer's region */
    fk.copies = fk.copy_bytes = fk.staged = 0;
    fk.fail_import = rank == 0;
    clear_recv();
    MKX_TRY(oob->barrier(oob->ctx, TIMEOUT_MS, "test barrier"));
    MKX_TRY(open_ep(oob, &e));
    MKX_TRY(traffic(&e, oob, 2, 0));
    copies = mkx_net_shm_ipc_copies(e.n, &on);
    if (rank == 0)
      CHECK(!on && copies == 0 && fk.copies == 0 && fk.staged >= sent_by_me(),
            "refused mapping: IPC off (%d), %llu copies, %llu bytes staged", on,
            (unsigned long long)copies, (unsigned long long)fk.staged);
    else
      CHECK(on && copies == MSGS, "the others keep copying (%llu)",
            (unsigned long long)copies);
    close_ep(&e);
  }
  return oob->barrier(oob->ctx, TIMEOUT_MS, "test barrier");
}

/* The buffers go whatever happened (the fake's names in /dev/shm too). */
static int run(const mkx_oob *oob) {
  int rc = make_buffers();
  if (rc == MKX_SUCCESS) rc = checks(oob);
  free_buffers();
  return rc;
}

/* --device without a GPU (or a build without CUDA): skipped. */
static int no_gpu(void) {
#ifdef MKX_TEST_CUDA
  int count = 0;
  if (CUDA_OK(cudaGetDeviceCount(&count)) && count > 0) return 0;
#endif
  return 1;
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) use_device |= !strcmp(argv[i], "--device");
  if (use_device && no_gpu()) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) printf("1..0 # SKIP test_net_shm_ipc --device: no GPU\n");
    MPI_Finalize();
    return CHECK_SKIP;
  }
  return net_main(argc, argv, "test_net_shm_ipc", run);
}
