/* The proxy over a fake transport (one process plays every rank): ring
 * wrap-around with several producers, in-order completion over
 * out-of-order transport completions, a full ring that times out, and
 * transport errors and bad commands that stop the proxy with an error
 * producers see instead of hanging. */
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "core/error.h"
#include "proxy/proxy.h"
#include "mkx.h"
#include "../common/check.h"

#define RANKS 4
#define CHUNK 64

/* The fake transport: writes copy at once; completions are handed out
 * newest first (out of order), some held back on request. */
static struct {
  pthread_mutex_t lock;
  uint64_t pending[4096];
  int npending;
  uint64_t posted[4096];
  int nposted;
  uint64_t hold;  /* completion of this cookie is withheld */
  int complete;   /* 0: never complete anything */
  int fail_after; /* poll fails with MKX_ERR_PEER after this many posts */
} fake;

static int fake_write(mkx_net *n, int peer, const mkx_net_mr *src,
                      size_t src_off, const mkx_net_rkey *dst, size_t dst_off,
                      size_t len, uint32_t slot, uint64_t value,
                      uint64_t cookie) {
  (void)n, (void)peer, (void)slot, (void)value;
  memcpy((char *)(uintptr_t)dst->addr + dst_off, (char *)src->base + src_off,
         len);
  pthread_mutex_lock(&fake.lock);
  fake.pending[fake.npending++] = cookie;
  fake.posted[fake.nposted++] = cookie;
  pthread_mutex_unlock(&fake.lock);
  return MKX_SUCCESS;
}

static int fake_poll(mkx_net *n, mkx_net_completion *done, int max,
                     int *ndone) {
  (void)n;
  pthread_mutex_lock(&fake.lock);
  int failing = fake.fail_after && fake.nposted >= fake.fail_after;
  for (int i = fake.npending - 1;
       !failing && fake.complete && i >= 0 && *ndone < max; i--) {
    if (fake.pending[i] == fake.hold) continue;
    done[(*ndone)++] = (mkx_net_completion){fake.pending[i], 1};
    memmove(&fake.pending[i], &fake.pending[i + 1],
            sizeof(uint64_t) * (size_t)(--fake.npending - i));
  }
  pthread_mutex_unlock(&fake.lock);
  return failing ? mkx_error(MKX_ERR_PEER, "fake: rank 1 lost") : MKX_SUCCESS;
}

static const mkx_net_provider fake_provider = {
    .name = "fake", .write_signal = fake_write, .poll = fake_poll};

static _Atomic uint64_t signals[RANKS], bytes[RANKS];
static mkx_net net = {.prov = &fake_provider,
                      .rank = 0,
                      .size = RANKS,
                      .num_signals = RANKS,
                      .timeout_ms = 2000,
                      .signals = signals,
                      .bytes_sent = bytes,
                      .connected = 1};
static char src_buf[CHUNK * 64], dst_buf[RANKS][CHUNK * 64];

static void reset(int complete, uint64_t hold, int fail_after) {
  memset(&fake.pending, 0, sizeof fake.pending);
  fake.npending = fake.nposted = 0;
  fake.complete = complete;
  fake.hold = hold;
  fake.fail_after = fail_after;
}

static mkx_proxy *make_proxy(uint32_t entries) {
  mkx_proxy *p = NULL;
  mkx_net_mr mr = {.id = 0, .base = src_buf, .len = sizeof src_buf};
  mkx_net_rkey keys[RANKS];
  uint32_t idx;
  for (int r = 0; r < RANKS; r++)
    keys[r] = (mkx_net_rkey){(uintptr_t)dst_buf[r], sizeof dst_buf[r], 0, 0};
  CHECK(mkx_proxy_create(&net, entries, NULL, 2000, &p) == MKX_SUCCESS,
        "create");
  CHECK(mkx_proxy_add_region(p, &mr, keys, &idx) == MKX_SUCCESS && idx == 0,
        "region 0");
  CHECK(mkx_proxy_start(p, "0") == MKX_SUCCESS, "start");
  return p;
}

static mkx_proxy_cmd write_cmd(int peer, int chunk) {
  return (mkx_proxy_cmd){.op = MKX_PROXY_OP_WRITE,
                         .peer = peer,
                         .src_off = (uint64_t)chunk * CHUNK,
                         .dst_off = (uint64_t)chunk * CHUNK,
                         .len = CHUNK,
                         .slot = 0,
                         .value = 1};
}

/* Two producers post 200 commands each through an 8-entry ring. */
static void *producer(void *arg) {
  mkx_proxy_ring *r = arg;
  for (int i = 0; i < 200; i++) {
    mkx_proxy_cmd c = write_cmd(1 + i % 3, i % 64);
    if (mkx_proxy_post(r, &c, NULL, 2000) != MKX_SUCCESS) return r;
  }
  return NULL;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void test_wraparound(void) {
  const double t0 = now_s();
  reset(1, 0, 0);
  for (int i = 0; i < (int)sizeof src_buf; i++) src_buf[i] = (char)(i * 7);
  memset(dst_buf, 0, sizeof dst_buf);
  mkx_proxy *p = make_proxy(8);
  mkx_proxy_ring *r = mkx_proxy_ring_of(p);
  pthread_t t[2];
  void *res[2];
  for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, producer, r);
  for (int i = 0; i < 2; i++) pthread_join(t[i], &res[i]);
  CHECK(!res[0] && !res[1], "producers posted everything: %s",
        MKX_Get_last_error());
  CHECK(mkx_proxy_wait(r, 400, 2000) == MKX_SUCCESS, "all 400 complete");
  CHECK(atomic_load(&r->completed) == 400, "completed %llu",
        (unsigned long long)atomic_load(&r->completed));
  int in_order = fake.nposted == 400;
  for (int i = 0; in_order && i < 400; i++)
    in_order = fake.posted[i] == (uint64_t)i + 1;
  CHECK(in_order, "the proxy posts commands in sequence order");
  CHECK(memcmp(dst_buf[1], src_buf, sizeof src_buf) == 0 &&
            memcmp(dst_buf[2], src_buf, sizeof src_buf) == 0,
        "data arrived");
  mkx_proxy_stats st, after;
  mkx_proxy_get_stats(p, &st);
  const double wall = now_s() - t0;
  CHECK(st.commands == 400 && st.bytes == 400ull * CHUNK && st.cpu_ns > 0,
        "stats: %llu commands, %llu bytes, %llu ns of CPU",
        (unsigned long long)st.commands, (unsigned long long)st.bytes,
        (unsigned long long)st.cpu_ns);
  CHECK(st.busy_ns > 0 && st.busy_ns <= (uint64_t)(wall * 1e9),
        "stats: the transport busy %llu ns, within the %.0f ns of the run",
        (unsigned long long)st.busy_ns, wall * 1e9);
  CHECK(mkx_proxy_stop(p) == MKX_SUCCESS, "clean stop");
  mkx_proxy_get_stats(p, &after);
  CHECK(after.commands == 400 && after.cpu_ns >= st.cpu_ns,
        "stats kept after the stop (%llu ns >= %llu)",
        (unsigned long long)after.cpu_ns, (unsigned long long)st.cpu_ns);
  mkx_proxy_destroy(p);
}

static void sleep_ms(int ms) {
  struct timespec ts = {0, ms * 1000000L};
  nanosleep(&ts, NULL);
}

/* Command 5's completion is held: `completed` stops at 4 although 6..10
 * are done, and moves to 10 once 5 is released. */
static void test_in_order_completion(void) {
  reset(1, 5, 0);
  mkx_proxy *p = make_proxy(16);
  mkx_proxy_ring *r = mkx_proxy_ring_of(p);
  for (int i = 0; i < 10; i++) {
    mkx_proxy_cmd c = write_cmd(2, i);
    CHECK(mkx_proxy_post(r, &c, NULL, 1000) == MKX_SUCCESS, "post %d", i);
  }
  sleep_ms(100);
  CHECK(atomic_load(&r->completed) == 4,
        "completed stops before the held "
        "command: %llu",
        (unsigned long long)atomic_load(&r->completed));
  CHECK(mkx_proxy_wait(r, 10, 50) == MKX_ERR_TIMEOUT, "wait for 10 times out");
  fake.hold = 0;
  CHECK(mkx_proxy_wait(r, 10, 2000) == MKX_SUCCESS, "then completes");
  CHECK(mkx_proxy_stop(p) == MKX_SUCCESS, "clean stop");
  mkx_proxy_destroy(p);
}

/* Nothing completes: the ring fills and the next post times out. */
static void test_full_ring(void) {
  reset(0, 0, 0);
  mkx_proxy *p = make_proxy(4);
  mkx_proxy_ring *r = mkx_proxy_ring_of(p);
  for (int i = 0; i < 4; i++) {
    mkx_proxy_cmd c = write_cmd(1, i);
    CHECK(mkx_proxy_post(r, &c, NULL, 1000) == MKX_SUCCESS, "post %d", i);
  }
  mkx_proxy_cmd c = write_cmd(1, 4);
  CHECK(mkx_proxy_post(r, &c, NULL, 100) == MKX_ERR_TIMEOUT,
        "a full ring times out: %s", MKX_Get_last_error());
  CHECK(mkx_proxy_stop(p) == MKX_ERR_TIMEOUT, "stop reports the stuck ring");
  mkx_proxy_destroy(p);
}

/* The transport loses a peer after 3 posts: the producer's next post or
 * wait returns MKX_ERR_PEER instead of hanging. */
static void test_transport_error(void) {
  reset(1, 0, 3);
  mkx_proxy *p = make_proxy(4);
  mkx_proxy_ring *r = mkx_proxy_ring_of(p);
  int rc = MKX_SUCCESS;
  uint64_t seq = 0;
  for (int i = 0; i < 50 && rc == MKX_SUCCESS; i++) {
    mkx_proxy_cmd c = write_cmd(3, i % 64);
    rc = mkx_proxy_post(r, &c, &seq, 2000);
  }
  if (rc == MKX_SUCCESS) rc = mkx_proxy_wait(r, seq, 2000);
  CHECK(rc == MKX_ERR_PEER, "producer sees the lost peer: %d (%s)", rc,
        MKX_Get_last_error());
  CHECK(atomic_load(&r->error) == MKX_ERR_PEER, "error word set");
  CHECK(mkx_proxy_stop(p) != MKX_SUCCESS, "stop reports the failure");
  mkx_proxy_destroy(p);
}

/* A command naming a region that does not exist stops the proxy. */
static void test_bad_command(void) {
  reset(1, 0, 0);
  mkx_proxy *p = make_proxy(4);
  mkx_proxy_ring *r = mkx_proxy_ring_of(p);
  mkx_proxy_cmd c = write_cmd(1, 0);
  c.dst = 7;
  uint64_t seq;
  CHECK(mkx_proxy_post(r, &c, &seq, 1000) == MKX_SUCCESS, "post");
  CHECK(mkx_proxy_wait(r, seq, 2000) == MKX_ERR_INVALID_ARG,
        "bad region stops the proxy: %s", MKX_Get_last_error());
  mkx_proxy_destroy(p);
  mkx_proxy *q = NULL;
  CHECK(mkx_proxy_create(&net, 6, NULL, 100, &q) == MKX_ERR_INVALID_ARG,
        "ring size must be a power of two");
}

/* Regions may be set out of order, leaving indices unset: a command
 * naming a set one goes through, one naming an unset one stops the proxy. */
static void test_region_hole(void) {
  reset(1, 0, 0);
  mkx_proxy *p = make_proxy(4);
  mkx_proxy_ring *r = mkx_proxy_ring_of(p);
  mkx_net_mr mr = {.id = 0, .base = src_buf, .len = sizeof src_buf};
  mkx_net_rkey keys[RANKS];
  for (int q = 0; q < RANKS; q++)
    keys[q] = (mkx_net_rkey){(uintptr_t)dst_buf[q], sizeof dst_buf[q], 0, 0};
  CHECK(mkx_proxy_set_region(p, 3, &mr, keys) == MKX_SUCCESS, "region 3");
  CHECK(mkx_proxy_set_region(p, 64, &mr, keys) == MKX_ERR_INVALID_ARG,
        "region 64 refused");
  mkx_proxy_cmd c = write_cmd(1, 0);
  c.src = 3, c.dst = 3;
  uint64_t seq;
  CHECK(mkx_proxy_post(r, &c, &seq, 1000) == MKX_SUCCESS, "post to region 3");
  CHECK(mkx_proxy_wait(r, seq, 2000) == MKX_SUCCESS, "region 3 written: %s",
        MKX_Get_last_error());
  c.dst = 2;
  CHECK(mkx_proxy_post(r, &c, &seq, 1000) == MKX_SUCCESS, "post to region 2");
  CHECK(mkx_proxy_wait(r, seq, 2000) == MKX_ERR_INVALID_ARG,
        "unset region 2 stops the proxy: %s", MKX_Get_last_error());
  mkx_proxy_destroy(p);
}

/* The GPU producer writes the ring by the offsets of proxy_layout.h, not
 * through mkx_proxy_cmd: a producer doing the same, with plain 64-bit
 * words, is understood by the proxy (wrapping an 8-entry ring). */
static uint64_t *word(void *ring, size_t off) {
  return (uint64_t *)((char *)ring + off);
}

static void raw_post(void *ring, uint32_t entries, int peer, int chunk,
                     uint64_t value) {
  uint64_t s = __atomic_fetch_add(word(ring, MKX_PROXY_OFF_RESERVED), 1,
                                  __ATOMIC_RELAXED) +
               1;
  while (s - __atomic_load_n(word(ring, MKX_PROXY_OFF_COMPLETED),
                             __ATOMIC_ACQUIRE) >
         entries)
    sched_yield();
  char *slot = (char *)ring + MKX_PROXY_OFF_CMD +
               ((s - 1) & (entries - 1)) * MKX_PROXY_CMD_BYTES;
  uint32_t op = MKX_PROXY_OP_WRITE, zero = 0, slot_no = 2;
  uint64_t off = (uint64_t)chunk * CHUNK, len = CHUNK;
  memcpy(slot + MKX_PROXY_CMD_OP, &op, 4);
  memcpy(slot + MKX_PROXY_CMD_PEER, &peer, 4);
  memcpy(slot + MKX_PROXY_CMD_SRC, &zero, 4);
  memcpy(slot + MKX_PROXY_CMD_DST, &zero, 4);
  memcpy(slot + MKX_PROXY_CMD_SRC_OFF, &off, 8);
  memcpy(slot + MKX_PROXY_CMD_DST_OFF, &off, 8);
  memcpy(slot + MKX_PROXY_CMD_LEN, &len, 8);
  memcpy(slot + MKX_PROXY_CMD_SLOT, &slot_no, 4);
  memcpy(slot + MKX_PROXY_CMD_PAD, &zero, 4);
  memcpy(slot + MKX_PROXY_CMD_VALUE, &value, 8);
  __atomic_store_n(word(slot, MKX_PROXY_CMD_SEQ), s, __ATOMIC_RELEASE);
}

static void test_layout_producer(void) {
  reset(1, 0, 0);
  for (int i = 0; i < (int)sizeof src_buf; i++) src_buf[i] = (char)(i * 3 + 1);
  memset(dst_buf, 0, sizeof dst_buf);
  mkx_proxy *p = make_proxy(8);
  void *ring = mkx_proxy_ring_of(p);
  CHECK(*(uint32_t *)((char *)ring + MKX_PROXY_OFF_ENTRIES) == 8,
        "entries at its offset");
  /* 192 = every chunk to each of the three peers once. */
  for (int i = 0; i < 192; i++) raw_post(ring, 8, 1 + i % 3, i % 64, i + 1);
  CHECK(mkx_proxy_wait(ring, 192, 2000) == MKX_SUCCESS, "raw commands done");
  CHECK(*word(ring, MKX_PROXY_OFF_COMPLETED) == 192 &&
            *word(ring, MKX_PROXY_OFF_CONSUMED) == 192,
        "completed and consumed at their offsets");
  CHECK(memcmp(dst_buf[1], src_buf, sizeof src_buf) == 0 &&
            memcmp(dst_buf[2], src_buf, sizeof src_buf) == 0 &&
            memcmp(dst_buf[3], src_buf, sizeof src_buf) == 0,
        "raw commands carried the right offsets and lengths");
  CHECK(mkx_proxy_stop(p) == MKX_SUCCESS, "clean stop");
  mkx_proxy_destroy(p);
}

/* After mkx_proxy_stop nobody drains the ring: the error word says so and
 * a late producer fails at once instead of waiting out its bound. */
static void test_stopped_ring(void) {
  reset(1, 0, 0);
  mkx_proxy *p = make_proxy(4);
  mkx_proxy_ring *r = mkx_proxy_ring_of(p);
  mkx_proxy_cmd c = write_cmd(1, 0);
  uint64_t seq;
  CHECK(mkx_proxy_post(r, &c, &seq, 1000) == MKX_SUCCESS, "post");
  CHECK(mkx_proxy_stop(p) == MKX_SUCCESS, "stop after the work is done");
  CHECK(atomic_load(&r->error) == MKX_ERR_NET,
        "the ring is marked stopped: "
        "%d",
        atomic_load(&r->error));
  CHECK(mkx_proxy_wait(r, seq, 1000) == MKX_SUCCESS,
        "finished work still counts");
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  int rc = mkx_proxy_post(r, &c, &seq, 5000);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
  CHECK(rc == MKX_ERR_NET && ms < 1000,
        "a late post fails at once: %d after "
        "%.0f ms",
        rc, ms);
  mkx_proxy_destroy(p);
}

#if HAVE_CUDA
#include "proxy/proxy_gpu.h"
/* The GPU proxy's host side: a bad ring size is refused before CUDA is
 * touched; without a GPU, creation fails with MKX_ERR_CUDA and leaves
 * nothing behind; with one, the kernel's descriptor describes the ring. */
static void test_gpu_setup(void) {
  mkx_proxy_gpu *g = (mkx_proxy_gpu *)&g;
  _Atomic uint64_t *sig = NULL, *saved = net.signals;
  CHECK(mkx_net_signals_alloc(RANKS, &sig) == MKX_SUCCESS &&
            (uintptr_t)sig % 4096 == 0,
        "signal words in whole pages");
  net.signals = sig;
  CHECK(mkx_proxy_gpu_create(&net, 0, 12, 1000, &g) == MKX_ERR_INVALID_ARG &&
            g == NULL,
        "12 entries refused");
  int rc = mkx_proxy_gpu_create(&net, 0, 16, 1500, &g);
  if (rc == MKX_SUCCESS) {
    mkx_proxy_dev d;
    mkx_proxy_gpu_dev(g, &d);
    CHECK(d.entries == 16 && d.num_signals == RANKS &&
              d.timeout_ns == 1500000000ull && d.ring && d.signals && d.status,
          "descriptor");
    CHECK(mkx_proxy_ring_of(mkx_proxy_gpu_proxy(g))->entries == 16 &&
              mkx_proxy_gpu_status(g)->code == 0,
          "ring and status");
    mkx_proxy_gpu_destroy(g);
  } else {
    CHECK(rc == MKX_ERR_CUDA && g == NULL, "no GPU: %d (%s)", rc,
          MKX_Get_last_error());
  }
  net.signals = saved;
  free((void *)sig);
}
#else
static void test_gpu_setup(void) {}
#endif

int main(void) {
  pthread_mutex_init(&fake.lock, NULL);
  test_gpu_setup();
  test_layout_producer();
  test_stopped_ring();
  test_wraparound();
  test_in_order_completion();
  test_full_ring();
  test_transport_error();
  test_bad_command();
  test_region_hole();
  return check_done("test_proxy");
}
