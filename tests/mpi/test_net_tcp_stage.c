/* tcp's staging of device memory, without a GPU: a fake stager declares
 * two host buffers "device memory" of GPU 0 and copies with memcpy through
 * 1000-byte stages (so most writes take several pieces and the last piece
 * is short), counting every copy.  On 2-4 ranks, through the proxy and an
 * 8-entry ring, like a GPU producer would:
 *  - registration: the fake device pointers registered as host memory are
 *    recognised (mr.kind is device), a host pointer registered as device
 *    memory and memory of a second GPU are refused;
 *  - 300 writes per rank of 1 to 4000 bytes from a few reused send chunks
 *    into one receive place per message; the receiver checks, whenever a
 *    signal moves, that every message up to it is complete (the signal
 *    comes after the last copy to the device), and at the end every byte;
 *  - the copies: device -> stage bytes equal the bytes sent, stage ->
 *    device bytes equal the bytes received, in stage-sized pieces;
 *  - a copy that fails before anything is on the wire is returned to the
 *    writer and leaves the connection usable. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <mpi.h>
#include "boot/oob_mpi.h"
#include "core/error.h"
#include "core/options.h"
#include "mkx.h"
#include "fake_stager.h"
#include "net_main.h"
#include "net/net.h"
#include "proxy/proxy.h"

#define STAGE 1000
#define MAXLEN 4000
#define CHUNKS 4
#define MSGS 300
#define TIMEOUT_MS 20000

/* ---- the fake stager: "device" memory is host memory it knows ---- */

static struct {
  char *dev[2]; /* device 0's send and receive buffers */
  size_t len[2];
  char *other; /* "GPU 1" */
  size_t other_len;
  pthread_mutex_t lock;
  uint64_t out_bytes, out_calls, in_bytes, in_calls, bad_copies;
  int fail_next_out; /* the next device -> stage copy fails */
  int stages;        /* host_alloc calls */
} fk = {.lock = PTHREAD_MUTEX_INITIALIZER};

static int fake_device_of(const void *p) {
  for (int i = 0; i < 2; i++)
    if (in_range(p, 1, fk.dev[i], fk.len[i])) return 0;
  return in_range(p, 1, fk.other, fk.other_len) ? 1 : -1;
}

static int fake_host_alloc(void *ctx, size_t bytes, void **p) {
  (void)ctx;
  fk.stages++;
  return fake_stage_alloc(bytes, p);
}

static int fake_to_host(void *ctx, void *dst, const void *src, size_t len) {
  (void)ctx;
  pthread_mutex_lock(&fk.lock);
  int fail = fk.fail_next_out;
  fk.fail_next_out = 0;
  if (!fail) {
    fk.out_bytes += len, fk.out_calls++;
    if (len > STAGE || !in_range(src, len, fk.dev[0], fk.len[0]))
      fk.bad_copies++;
  }
  pthread_mutex_unlock(&fk.lock);
  if (fail) return mkx_error(MKX_ERR_CUDA, "fake: injected copy failure");
  memcpy(dst, src, len);
  return MKX_SUCCESS;
}

static int fake_to_device(void *ctx, void *dst, const void *src, size_t len) {
  (void)ctx;
  pthread_mutex_lock(&fk.lock);
  fk.in_bytes += len, fk.in_calls++;
  if (len > STAGE || !in_range(dst, len, fk.dev[1], fk.len[1])) fk.bad_copies++;
  pthread_mutex_unlock(&fk.lock);
  memcpy(dst, src, len);
  return MKX_SUCCESS;
}

static const mkx_net_stager fake = {.name = "fake",
                                    .stage_bytes = STAGE,
                                    .device_of = fake_device_of,
                                    .open = fake_open,
                                    .close = fake_close,
                                    .host_alloc = fake_host_alloc,
                                    .host_free = fake_host_free,
                                    .to_host = fake_to_host,
                                    .to_device = fake_to_device};

/* ---- the traffic ---- */

static int dest_of(int src, int i) { return (src + 1 + i % (size - 1)) % size; }
static size_t len_of(int src, int i) {
  return 1 + (size_t)(src * 131 + i * 997) % MAXLEN;
}
static unsigned char pattern(int src, int i, size_t byte) {
  return (unsigned char)(src * 29 + i * 13 + byte * 7 + (byte >> 8));
}
/* Receive place of message i from src at its destination. */
static size_t place(int src, int i) {
  return ((size_t)src * MSGS + (size_t)i) * MAXLEN;
}

static int produce(mkx_proxy_ring *ring, char *send) {
  uint64_t seq[MSGS], count[8] = {0};
  for (int i = 0; i < MSGS; i++) {
    int dst = dest_of(rank, i), chunk = i % CHUNKS;
    size_t len = len_of(rank, i);
    if (i >= CHUNKS) MKX_TRY(mkx_proxy_wait(ring, seq[i - CHUNKS], TIMEOUT_MS));
    for (size_t b = 0; b < len; b++)
      send[(size_t)chunk * MAXLEN + b] = (char)pattern(rank, i, b);
    mkx_proxy_cmd c = {.op = MKX_PROXY_OP_WRITE,
                       .peer = dst,
                       .src = 0,
                       .dst = 1,
                       .src_off = (uint64_t)chunk * MAXLEN,
                       .dst_off = place(rank, i),
                       .len = len,
                       .slot = (uint32_t)rank,
                       .value = ++count[dst]};
    MKX_TRY(mkx_proxy_post(ring, &c, &seq[i], TIMEOUT_MS));
  }
  return mkx_proxy_wait(ring, seq[MSGS - 1], TIMEOUT_MS);
}

/* Message i from src is in place, whole. */
static int arrived(const char *recv, int src, int i) {
  const unsigned char *got = (const unsigned char *)recv + place(src, i);
  for (size_t b = 0; b < len_of(src, i); b++)
    if (got[b] != pattern(src, i, b)) return 0;
  return 1;
}

/* Watch every source's signal; each time it moves, every message it
 * covers must be complete already. */
static void consume(mkx_net *n, const char *recv) {
  uint64_t seen[8] = {0}, want[8] = {0};
  int order[8][MSGS], bad = 0;
  for (int src = 0; src < size; src++)
    for (int i = 0; src != rank && i < MSGS; i++)
      if (dest_of(src, i) == rank) order[src][want[src]++] = i;
  int64_t deadline = mkx_net_now_ms() + TIMEOUT_MS;
  for (int busy = 1; busy && mkx_net_now_ms() < deadline;) {
    busy = 0;
    for (int src = 0; src < size; src++) {
      if (src == rank) continue;
      uint64_t v = mkx_net_signal(n, (uint32_t)src);
      for (; seen[src] < v && seen[src] < want[src]; seen[src]++)
        bad += !arrived(recv, src, order[src][seen[src]]);
      busy |= seen[src] < want[src];
    }
  }
  for (int src = 0; src < size; src++)
    CHECK(src == rank || seen[src] == want[src],
          "rank %d's signal reached %llu of %llu", src,
          (unsigned long long)seen[src], (unsigned long long)want[src]);
  CHECK(bad == 0, "%d messages incomplete when their signal was seen", bad);
}

static void check_all(mkx_net *n, const char *recv) {
  uint64_t sent = 0, got = 0, pieces = 0;
  int bad = 0;
  for (int i = 0; i < MSGS; i++) {
    sent += len_of(rank, i);
    pieces += (len_of(rank, i) + STAGE - 1) / STAGE;
  }
  for (int src = 0; src < size; src++)
    for (int i = 0; src != rank && i < MSGS; i++)
      if (dest_of(src, i) == rank) {
        got += len_of(src, i);
        bad += !arrived(recv, src, i);
      }
  CHECK(bad == 0, "%d messages differ at the end", bad);
  uint64_t posted = 0;
  for (int q = 0; q < size; q++) posted += mkx_net_bytes_sent(n, q);
  CHECK(posted == sent, "bytes posted %llu, sent %llu",
        (unsigned long long)posted, (unsigned long long)sent);
  pthread_mutex_lock(&fk.lock);
  CHECK(fk.out_bytes == sent && fk.out_calls == pieces,
        "device -> stage: %llu bytes in %llu copies, want %llu in %llu",
        (unsigned long long)fk.out_bytes, (unsigned long long)fk.out_calls,
        (unsigned long long)sent, (unsigned long long)pieces);
  CHECK(fk.in_bytes == got && fk.in_calls >= (got + STAGE - 1) / STAGE,
        "stage -> device: %llu bytes in %llu copies, want %llu",
        (unsigned long long)fk.in_bytes, (unsigned long long)fk.in_calls,
        (unsigned long long)got);
  CHECK(fk.bad_copies == 0, "%llu copies outside the regions or the stage",
        (unsigned long long)fk.bad_copies);
  CHECK(fk.stages == 2, "%d stages allocated (one each way)", fk.stages);
  pthread_mutex_unlock(&fk.lock);
}

/* A failing first copy: nothing goes on the wire, the writer hears of it,
 * the next write to the same peer arrives. */
static void failed_copy(mkx_net *n, const mkx_net_mr *smr,
                        const mkx_net_rkey *rkeys, const mkx_oob *oob) {
  int peer = (rank + 1) % size, from = (rank + size - 1) % size;
  fk.fail_next_out = 1;
  int rc = mkx_net_write_signal(n, peer, smr, 0, &rkeys[peer], place(rank, 0),
                                2 * STAGE, (uint32_t)rank, MSGS + 1, 1);
  CHECK(rc == MKX_ERR_CUDA, "a failed copy is the writer's error: %d", rc);
  memset(fk.dev[0], 0x5a, 2 * STAGE);
  rc = mkx_net_write_signal(n, peer, smr, 0, &rkeys[peer], place(rank, 0),
                            2 * STAGE + 1, (uint32_t)rank, MSGS + 2, 2);
  CHECK(rc == MKX_SUCCESS, "the next write goes");
  rc = mkx_net_wait_signal(n, (uint32_t)from, MSGS + 2, TIMEOUT_MS, NULL);
  CHECK(rc == MKX_SUCCESS, "the write after the failure arrives: %d", rc);
  const char *at = fk.dev[1] + place(from, 0);
  int ok = 1;
  for (int b = 0; b < 2 * STAGE; b++) ok &= at[b] == 0x5a;
  CHECK(ok, "its data is the second write's");
  CHECK(oob->barrier(oob->ctx, TIMEOUT_MS, "test barrier") == MKX_SUCCESS,
        "barrier");
}

static void registration(mkx_net *n, const mkx_net_mr *smr,
                         const mkx_net_mr *rmr) {
  mkx_net_mr mr;
  char host[64];
  CHECK(smr->kind == MKX_NET_MEM_DEVICE && rmr->kind == MKX_NET_MEM_DEVICE,
        "device pointers registered as host memory are recognised");
  mkx_net_reg_args a = {host, sizeof host, MKX_NET_MEM_DEVICE, -1, 0};
  CHECK(mkx_net_reg(n, &a, &mr) == MKX_ERR_UNSUPPORTED,
        "host memory registered as device memory is refused");
  a = (mkx_net_reg_args){fk.other, fk.other_len, MKX_NET_MEM_DEVICE, -1, 0};
  CHECK(mkx_net_reg(n, &a, &mr) == MKX_ERR_UNSUPPORTED,
        "memory of a second GPU is refused");
}

static int run(const mkx_oob *oob) {
  static mkx_options opt;
  mkx_net *n = NULL;
  mkx_proxy *p = NULL;
  mkx_net_mr smr, rmr;
  mkx_net_rkey skeys[8], rkeys[8];
  uint32_t si, ri;
  fk.len[0] = (size_t)CHUNKS * MAXLEN;
  fk.len[1] = (size_t)size * MSGS * MAXLEN;
  fk.dev[0] = calloc(1, fk.len[0]);
  fk.dev[1] = calloc(1, fk.len[1]);
  fk.other_len = 4096;
  fk.other = calloc(1, fk.other_len);
  if (!fk.dev[0] || !fk.dev[1] || !fk.other)
    return mkx_error(MKX_ERR_NOMEM, "buffers");
  MKX_TRY(mkx_net_options_register());
  MKX_TRY(mkx_options_load(&opt, MPI_INFO_NULL));
  opt.net = MKX_NET_TCP;
  strcpy(opt.net_tcp_bind, "lo");
  mkx_net_tcp_set_stager(&fake);
  mkx_net_params prm = {.rank = rank,
                        .size = size,
                        .num_signals = (uint32_t)size,
                        .timeout_ms = TIMEOUT_MS,
                        .opt = &opt};
  MKX_TRY(mkx_net_open(&prm, &n));
  mkx_net_tcp_set_stager(NULL);
  CHECK((uintptr_t)n->signals % 4096 == 0, "signal words are page-aligned");
  MKX_TRY(mkx_net_connect(n, oob));
  /* Registered as host memory: tcp finds out itself. */
  mkx_net_reg_args sa = {fk.dev[0], fk.len[0], MKX_NET_MEM_HOST, -1, 0};
  mkx_net_reg_args ra = {fk.dev[1], fk.len[1], MKX_NET_MEM_HOST, -1, 0};
  MKX_TRY(mkx_net_reg(n, &sa, &smr));
  MKX_TRY(mkx_net_reg(n, &ra, &rmr));
  registration(n, &smr, &rmr);
  MKX_TRY(mkx_net_exchange_keys(n, oob, &smr, skeys));
  MKX_TRY(mkx_net_exchange_keys(n, oob, &rmr, rkeys));
  MKX_TRY(mkx_proxy_create(n, 8, NULL, TIMEOUT_MS, &p));
  MKX_TRY(mkx_proxy_add_region(p, &smr, skeys, &si));
  MKX_TRY(mkx_proxy_add_region(p, &rmr, rkeys, &ri));
  MKX_TRY(mkx_proxy_start(p, NULL));
  int rc = produce(mkx_proxy_ring_of(p), fk.dev[0]);
  CHECK(rc == MKX_SUCCESS, "every write posted and completed");
  consume(n, fk.dev[1]);
  check_all(n, fk.dev[1]);
  CHECK(mkx_proxy_stop(p) == MKX_SUCCESS, "proxy stops cleanly");
  mkx_proxy_destroy(p);
  MKX_TRY(oob->barrier(oob->ctx, TIMEOUT_MS, "test barrier"));
  failed_copy(n, &smr, rkeys, oob);
  mkx_net_dereg(n, &smr);
  mkx_net_dereg(n, &rmr);
  mkx_net_close(n);
  free(fk.dev[0]), free(fk.dev[1]), free(fk.other);
  return MKX_SUCCESS;
}

int main(int argc, char **argv) {
  return net_main(argc, argv, "test_net_tcp_stage", run);
}
