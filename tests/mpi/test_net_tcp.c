/* The tcp transport end to end on loopback, every rank writing into every
 * other rank's registered host buffer with signals:
 *  - a connection with a wrong secret (before setup) and garbage (during
 *    traffic) is refused without disturbing the real traffic;
 *  - 2000 small writes of varying size and offset, then 4 MiB writes,
 *    in lockstep: the data is checked as soon as its signal arrives;
 *  - completions: one per write, in order per peer; byte counters equal
 *    the bytes written;
 *  - a peer that dies: the last rank's endpoint lives in a forked child,
 *    which _exit(0)s after a barrier; every other rank must get
 *    MKX_ERR_PEER or MKX_ERR_NET within the timeout, never a hang.
 * The victim is a child process rather than an MPI rank because mpirun
 * aborts the whole job when a rank exits without MPI_Finalize; this way
 * the exit is as abrupt (sockets closed by the kernel, no goodbye) and
 * MPI still finishes cleanly.  The child reaches the bootstrap through its
 * parent, which relays allgathers and barriers to MPI.
 *
 * With --shm (test_net_tcp-npN-shm.mpi) the same traffic and the same death
 * run over the shm transport: the 4 MiB writes placed straight into the
 * peers' buffers (process_vm_writev, unless the system refuses); with
 * --rings (-np2-rings.mpi) through rings of 1 MiB, so the 4 MiB writes go
 * in pieces and the rings wrap.  The strangers (a tcp matter) stay home.
 * Then an shm endpoint with an emulated link (1000 MB/s, 400 us): a 4 MiB
 * write from rank 0 to rank 1 and an 8-byte answer must take at least
 * their transfer time plus two latencies (the cap holds; no upper bound
 * is asserted). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <mpi.h>
#include "boot/oob_mpi.h"
#include "core/error.h"
#include "core/options.h"
#include "mkx.h"
#include "net/net.h"
#include "../common/check.h"

#define SLICE (8u << 20) /* per source rank: two halves of 4 MiB */
#define HALF (SLICE / 2)
#define SMALL_ITERS 2000
#define LARGE_ITERS 4
#define TIMEOUT_MS 20000

static int me = -1;
static int use_shm;   /* --shm: the shm transport instead of tcp */
static int use_rings; /* --rings: shm without direct placement */

/* ---- the relay: the child's oob goes through its parent to MPI ---- */

enum { REQ_ALLGATHER = 1, REQ_BARRIER, REQ_VERDICT };
typedef struct req {
  int type, size;
  uint64_t bytes;
  char what[48]; /* the exchange's name, which travels with it */
} req;

static int io_full(int fd, void *buf, size_t len, int out) {
  char *p = buf;
  while (len) {
    ssize_t k = out ? write(fd, p, len) : read(fd, p, len);
    if (k <= 0 && !(k < 0 && errno == EINTR)) return 0;
    if (k > 0) p += k, len -= (size_t)k;
  }
  return 1;
}

typedef struct relay {
  int fd, rank, size;
} relay;

static int relay_allgather(void *ctx, const void *send, void *recv,
                           size_t bytes, int64_t timeout_ms, const char *what) {
  relay *r = ctx;
  req q = {REQ_ALLGATHER, r->size, bytes, ""};
  (void)timeout_ms;
  snprintf(q.what, sizeof q.what, "%s", what);
  if (!io_full(r->fd, &q, sizeof q, 1) ||
      !io_full(r->fd, (void *)send, bytes, 1) ||
      !io_full(r->fd, recv, bytes * (size_t)r->size, 0))
    return MKX_ERR_MPI;
  return MKX_SUCCESS;
}

static int relay_barrier(void *ctx, int64_t timeout_ms, const char *what) {
  relay *r = ctx;
  req q = {REQ_BARRIER, r->size, 0, ""};
  char ack;
  (void)timeout_ms;
  snprintf(q.what, sizeof q.what, "%s", what);
  if (!io_full(r->fd, &q, sizeof q, 1) || !io_full(r->fd, &ack, 1, 0))
    return MKX_ERR_MPI;
  return MKX_SUCCESS;
}

/* Parent: serve the child until it reports its verdict (returned). */
static int serve_child(int fd, const mkx_oob *oob) {
  req q;
  while (io_full(fd, &q, sizeof q, 0)) {
    if (q.type == REQ_VERDICT) return (int)q.bytes;
    q.what[sizeof q.what - 1] = '\0';
    if (q.type == REQ_BARRIER) {
      char ack = 1;
      if (oob->barrier(oob->ctx, TIMEOUT_MS, q.what) != MKX_SUCCESS ||
          !io_full(fd, &ack, 1, 1))
        return 1000;
      continue;
    }
    char *send = malloc(q.bytes), *recv = malloc(q.bytes * (size_t)q.size);
    int ok = send && recv && io_full(fd, send, q.bytes, 0) &&
             oob->allgather(oob->ctx, send, recv, q.bytes, TIMEOUT_MS,
                            q.what) == MKX_SUCCESS &&
             io_full(fd, recv, q.bytes * (size_t)q.size, 1);
    free(send);
    free(recv);
    if (!ok) return 1000;
  }
  return 1000; /* the child died before its verdict */
}

/* ---- a stranger knocking on the listener ---- */

typedef struct stranger {
  int port, refused;
  const void *payload;
  size_t len;
} stranger;

static int knock(int port, const void *payload, size_t len) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET,
                           .sin_port = htons((uint16_t)port),
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
      send(fd, payload, len, MSG_NOSIGNAL) != (ssize_t)len) {
    if (fd >= 0) close(fd);
    return -1;
  }
  return fd;
}

/* Refused: the endpoint closes the connection (EOF or reset) in time. */
static int was_refused(int fd, int ms) {
  struct pollfd pf = {.fd = fd, .events = POLLIN};
  char c;
  int rc = poll(&pf, 1, ms) == 1 && recv(fd, &c, 1, 0) <= 0;
  close(fd);
  return rc;
}

static void *stranger_main(void *arg) {
  stranger *s = arg;
  int fd = knock(s->port, s->payload, s->len);
  s->refused = fd >= 0 && was_refused(fd, 5000);
  return NULL;
}

/* ---- traffic ---- */

static uint8_t pattern(int src, int dst, int iter, size_t i) {
  return (uint8_t)(src * 131 + dst * 17 + iter * 7 + i * 13 + (i >> 9));
}

static size_t msg_len(int iter, int large) {
  return large ? HALF - (size_t)(iter % 8) * 4099
               : 1 + (size_t)iter * 37 % 4000;
}

static size_t msg_off(int iter, int large, size_t len) {
  size_t room = HALF - len;
  return (iter % 2) * HALF + (large ? room / 3 : (size_t)iter * 4093 % room);
}

typedef struct ctx {
  mkx_net *n;
  mkx_net_mr dst_mr, src_mr;
  mkx_net_rkey *keys;
  uint8_t *dst, *src;
  int size, completed, posted;
  uint64_t expect_bytes[64];
  uint64_t next_cookie[64];
} ctx;

static void post_all(ctx *c, int iter, int large) {
  size_t len = msg_len(iter, large), off = msg_off(iter, large, len);
  for (int p = 0; p < c->size; p++) {
    if (p == me) continue;
    uint8_t *s = c->src + (size_t)p * SLICE;
    for (size_t i = 0; i < len; i++) s[i] = pattern(me, p, iter, i);
    /* Slot = source rank, value = iteration + 1: a sequence number. */
    int rc = mkx_net_write_signal(c->n, p, &c->src_mr, (size_t)p * SLICE,
                                  &c->keys[p], (size_t)me * SLICE + off, len,
                                  (uint32_t)me, (uint64_t)iter + 1,
                                  c->next_cookie[p]++ * 64 + (uint64_t)p);
    CHECK(rc == MKX_SUCCESS, "write to %d, iteration %d", p, iter);
    c->expect_bytes[p] += len;
    c->posted++;
  }
}

/* Completions: cookies in posting order per peer, every write once; the
 * source buffers are reusable after. */
static uint64_t seen_cookie[64];
static int poll_once(ctx *c) {
  mkx_net_completion done[32];
  int got = 0, rc = mkx_net_poll(c->n, done, 32, &got);
  for (int i = 0; i < got; i++) {
    int p = done[i].peer;
    CHECK(done[i].cookie == seen_cookie[p]++ * 64 + (uint64_t)p,
          "completion order for peer %d", p);
  }
  c->completed += got;
  return rc;
}

static void drain_completions(ctx *c) {
  int64_t deadline = mkx_net_now_ms() + TIMEOUT_MS;
  int rc = MKX_SUCCESS;
  while (rc == MKX_SUCCESS && c->completed < c->posted &&
         mkx_net_now_ms() < deadline)
    rc = poll_once(c);
  CHECK(rc == MKX_SUCCESS && c->completed == c->posted,
        "%d of %d writes completed", c->completed, c->posted);
}

/* Poll (keeping every completion) until signal `slot` reaches value. */
static int wait_for(ctx *c, uint32_t slot, uint64_t value) {
  int64_t deadline = mkx_net_now_ms() + TIMEOUT_MS;
  while (mkx_net_signal(c->n, slot) < value) {
    MKX_TRY(poll_once(c));
    if (mkx_net_now_ms() > deadline) return MKX_ERR_TIMEOUT;
    /* Leave the cores to the progress threads (CI oversubscribes). */
    struct timespec pause = {0, 20000};
    nanosleep(&pause, NULL);
  }
  return MKX_SUCCESS;
}

static void check_all(ctx *c, int iter, int large) {
  size_t len = msg_len(iter, large), off = msg_off(iter, large, len);
  for (int q = 0; q < c->size; q++) {
    if (q == me) continue;
    int rc = wait_for(c, (uint32_t)q, (uint64_t)iter + 1);
    CHECK(rc == MKX_SUCCESS, "signal from %d, iteration %d", q, iter);
    const uint8_t *d = c->dst + (size_t)q * SLICE + off;
    size_t bad = 0;
    while (bad < len && d[bad] == pattern(q, me, iter, bad)) bad++;
    CHECK(bad == len, "data from %d, iteration %d: byte %zu of %zu wrong", q,
          iter, bad, len);
  }
}

static void traffic(ctx *c) {
  for (int it = 0; it < SMALL_ITERS; it++) {
    post_all(c, it, 0);
    check_all(c, it, 0);
    drain_completions(c);
  }
  /* Signals keep counting up: large iteration k is sequence number
   * SMALL_ITERS + k + 1. */
  for (int k = 0; k < LARGE_ITERS; k++) {
    post_all(c, SMALL_ITERS + k, 1);
    check_all(c, SMALL_ITERS + k, 1);
    drain_completions(c);
  }
  for (int p = 0; p < c->size; p++)
    if (p != me)
      CHECK(mkx_net_bytes_sent(c->n, p) == c->expect_bytes[p],
            "bytes to %d: %llu, expected %llu", p,
            (unsigned long long)mkx_net_bytes_sent(c->n, p),
            (unsigned long long)c->expect_bytes[p]);
}

/* ---- setup ---- */

/* An endpoint of the transport under test; shm with an emulated link of
 * cap_mbps MB/s and cap_us latency (0: none). */
static int open_endpoint(const mkx_oob *oob, mkx_options *opt, ctx *c,
                         int64_t cap_mbps, int cap_us) {
  mkx_net_params p = {.rank = oob->rank,
                      .size = oob->size,
                      .num_signals = (uint32_t)oob->size,
                      .timeout_ms = TIMEOUT_MS,
                      .opt = opt};
  CHECK(mkx_net_options_register() == MKX_SUCCESS &&
            mkx_options_load(opt, MPI_INFO_NULL) == MKX_SUCCESS,
        "options");
  opt->net = use_shm ? MKX_NET_SHM : MKX_NET_TCP;
  strcpy(opt->net_tcp_bind, "lo"); /* tests stay on loopback */
  if (use_shm && opt->net_shm_ring == 8388608) opt->net_shm_ring = 1 << 20;
  if (use_rings) opt->net_shm_cma = 0;
  opt->net_shm_bandwidth = cap_mbps;
  opt->net_shm_latency_us = cap_us;
  int rc = mkx_net_open(&p, &c->n);
  CHECK(rc == MKX_SUCCESS, "open");
  if (rc != MKX_SUCCESS) return rc;
  CHECK(strcmp(mkx_net_name(c->n), use_shm ? "shm" : "tcp") == 0, "provider %s",
        mkx_net_name(c->n));
  /* one stream (ring) per peer: in order; GPU memory staged */
  CHECK(mkx_net_caps(c->n) == MKX_NET_CAP_ORDERED &&
            mkx_net_signal_bits(c->n) == 64,
        "%s capabilities", mkx_net_name(c->n));
  return MKX_SUCCESS;
}

/* A well-formed hello with a wrong secret, sent before setup: the
 * listener must not take it for the rank it names. */
static int knock_wrong_secret(mkx_net *n) {
  struct {
    uint32_t magic, rank;
    uint8_t secret[16];
  } h = {0x4d4b5848u, 0, {0}};
  memset(h.secret, 0x5a, sizeof h.secret);
  return knock(mkx_net_tcp_port(n), &h, sizeof h);
}

static int register_buffers(ctx *c, const mkx_oob *oob) {
  size_t bytes = (size_t)c->size * SLICE;
  c->dst = calloc(1, bytes);
  c->src = calloc(1, bytes);
  c->keys = calloc((size_t)c->size, sizeof *c->keys);
  if (!c->dst || !c->src || !c->keys) return MKX_ERR_NOMEM;
  mkx_net_reg_args a = {c->dst, bytes, MKX_NET_MEM_HOST, -1, 0};
  int rc = mkx_net_reg(c->n, &a, &c->dst_mr);
  a.base = c->src;
  if (rc == MKX_SUCCESS) rc = mkx_net_reg(c->n, &a, &c->src_mr);
  if (rc != MKX_SUCCESS) return rc;
  a.kind = MKX_NET_MEM_DEVICE;
  mkx_net_mr dev;
  CHECK(mkx_net_reg(c->n, &a, &dev) == MKX_ERR_UNSUPPORTED,
        "host memory registered as device memory is refused");
  return mkx_net_exchange_keys(c->n, oob, &c->dst_mr, c->keys);
}

/* Survivors: the dead rank shows up as an error, in time, on every one. */
static void survive(ctx *c, int victim) {
  int64_t t0 = mkx_net_now_ms();
  int rc =
      mkx_net_wait_signal(c->n, (uint32_t)victim, UINT64_MAX, TIMEOUT_MS, NULL);
  int64_t took = mkx_net_now_ms() - t0;
  char why[512];
  snprintf(why, sizeof why, "%s", MKX_Get_last_error());
  CHECK(rc == MKX_ERR_PEER || rc == MKX_ERR_NET,
        "waiting on the dead rank %d gave %d", victim, rc);
  CHECK(took < TIMEOUT_MS, "noticed after %lld ms", (long long)took);
  CHECK(strstr(why, "rank") != NULL, "message names a rank: %s", why);
  int got = 0;
  mkx_net_completion done[4];
  rc = mkx_net_poll(c->n, done, 4, &got);
  CHECK(rc == MKX_ERR_PEER || rc == MKX_ERR_NET, "later polls fail too (%d)",
        rc);
  rc = mkx_net_write_signal(c->n, victim, &c->src_mr, 0, &c->keys[victim], 0,
                            64, (uint32_t)me, 1, 0);
  CHECK(rc == MKX_ERR_PEER || rc == MKX_ERR_NET || rc == MKX_ERR_TIMEOUT,
        "a write to the dead rank fails (%d)", rc);
  printf("rank %d: saw rank %d die after %lld ms: %s\n", me, victim,
         (long long)took, why);
}

/* shm's emulated link: a 4 MiB write 0 -> 1 and 8 bytes back take at
 * least 4 MiB / bandwidth plus two latencies, measured by rank 0. */
#define CAP_MBPS 1000
#define CAP_US 400
static void capped_link(const mkx_oob *oob) {
  mkx_options opt;
  ctx c = {.size = oob->size};
  if (open_endpoint(oob, &opt, &c, CAP_MBPS, CAP_US) != MKX_SUCCESS) return;
  int rc;
  CHECK(mkx_net_connect(c.n, oob) == MKX_SUCCESS, "capped connect");
  CHECK(register_buffers(&c, oob) == MKX_SUCCESS, "capped register");
  const size_t big = 4u << 20;
  if (oob->rank == 0) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    rc =
        mkx_net_write_signal(c.n, 1, &c.src_mr, 0, &c.keys[1], 0, big, 0, 1, 0);
    if (rc == MKX_SUCCESS)
      rc = mkx_net_wait_signal(c.n, 1, 1, TIMEOUT_MS, NULL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const int64_t took_us =
        (t1.tv_sec - t0.tv_sec) * 1000000 + (t1.tv_nsec - t0.tv_nsec) / 1000;
    /* bytes / (MB/s) is microseconds */
    const int64_t least_us = (int64_t)big / CAP_MBPS + 2 * CAP_US;
    CHECK(rc == MKX_SUCCESS && took_us >= least_us,
          "capped round trip: %lld us, at least %lld (rc %d)",
          (long long)took_us, (long long)least_us, rc);
  } else if (oob->rank == 1) {
    rc = mkx_net_wait_signal(c.n, 0, 1, TIMEOUT_MS, NULL);
    if (rc == MKX_SUCCESS)
      rc =
          mkx_net_write_signal(c.n, 0, &c.src_mr, 0, &c.keys[0], 0, 8, 1, 1, 0);
    CHECK(rc == MKX_SUCCESS, "capped answer");
  }
  int got = 0;
  mkx_net_completion done[4];
  for (int64_t end = mkx_net_now_ms() + 1000; mkx_net_now_ms() < end;)
    if (mkx_net_poll(c.n, done, 4, &got) != MKX_SUCCESS) break;
  CHECK(oob->barrier(oob->ctx, TIMEOUT_MS, "test barrier") == MKX_SUCCESS,
        "capped barrier");
  mkx_net_close(c.n);
  free(c.dst);
  free(c.src);
  free(c.keys);
}

/* A segment name as a job killed before its peers mapped it leaves one:
 * its maker (a child that has exited) gone, made `age` seconds ago. */
static void stale_name(char *name, size_t len, int age) {
  fflush(stdout);
  const pid_t pid = fork();
  if (pid == 0) _exit(0);
  waitpid(pid, NULL, 0);
  snprintf(name, len, "/mkx-shm-%d-test%d", (int)pid, age);
  const int fd = shm_open(name, O_CREAT | O_RDWR, 0600);
  if (fd >= 0) close(fd);
  char path[300];
  snprintf(path, sizeof path, "/dev/shm%s", name);
  const struct timespec t[2] = {{time(NULL) - age, 0}, {time(NULL) - age, 0}};
  utimensat(AT_FDCWD, path, t, 0);
}

static int name_exists(const char *name) {
  const int fd = shm_open(name, O_RDONLY, 0);
  if (fd >= 0) close(fd);
  return fd >= 0;
}

/* shm: the next endpoint removes names left by dead jobs, once old enough
 * that no live job's connect could still need them. */
static void stale_segments(const mkx_oob *oob) {
  char old[96], young[96];
  stale_name(old, sizeof old, 3 * 3600);
  stale_name(young, sizeof young, 60);
  mkx_options opt;
  ctx c = {.size = oob->size};
  if (open_endpoint(oob, &opt, &c, 0, 0) != MKX_SUCCESS) return;
  CHECK(!name_exists(old), "shm: %s, a dead job's from 3 h ago, removed", old);
  CHECK(name_exists(young), "shm: %s, from a minute ago, left alone", young);
  shm_unlink(young);
  mkx_net_close(c.n);
}

/* Everything one endpoint does; the victim dies inside (never returns). */
static void run(const mkx_oob *oob, int relay_fd) {
  mkx_options opt;
  ctx c = {.size = oob->size};
  int victim = oob->size - 1;
  if (open_endpoint(oob, &opt, &c, 0, 0) != MKX_SUCCESS) return;
  int knocked = use_shm ? 0 : knock_wrong_secret(c.n);
  CHECK(knocked >= 0, "stranger connects");
  CHECK(mkx_net_connect(c.n, oob) == MKX_SUCCESS, "connect");
  if (!use_shm)
    CHECK(knocked >= 0 && was_refused(knocked, 5000), "wrong secret refused");
  CHECK(register_buffers(&c, oob) == MKX_SUCCESS, "register and exchange");
  static const char junk[] = "GET / HTTP/1.0\r\n\r\n garbage garbage";
  stranger s = {use_shm ? -1 : mkx_net_tcp_port(c.n), 0, junk, sizeof junk};
  pthread_t th;
  if (!use_shm)
    CHECK(pthread_create(&th, NULL, stranger_main, &s) == 0, "stranger");
  traffic(&c);
  if (use_shm) {
    int on = 0;
    const uint64_t placed = mkx_net_shm_placed(c.n, &on);
    CHECK(use_rings ? placed == 0 && !on : placed > 0 || !on,
          "shm: %llu writes placed directly (direct placement %s)",
          (unsigned long long)placed, on ? "on" : "off");
  }
  if (!use_shm) {
    pthread_join(th, NULL);
    CHECK(s.refused, "garbage during traffic refused");
  }
  CHECK(oob->barrier(oob->ctx, TIMEOUT_MS, "test barrier") == MKX_SUCCESS,
        "barrier");
  if (use_shm) capped_link(oob);
  if (oob->rank == victim && relay_fd >= 0) {
    req v = {REQ_VERDICT, 0, (uint64_t)check_failed()};
    printf("rank %d (child): %d checks, %d failed; dying now\n", me,
           check_count(), check_failed());
    fflush(stdout);
    if (!io_full(relay_fd, &v, sizeof v, 1)) _exit(3);
    _exit(0); /* abrupt: no close, no goodbye */
  }
  survive(&c, victim);
  mkx_net_close(c.n);
  free(c.dst);
  free(c.src);
  free(c.keys);
}

/* The victim's endpoint runs in a child; the parent relays its oob. */
static int run_victim(const mkx_oob *oob) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return 1;
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) return 1;
  if (pid == 0) {
    close(sv[0]);
    relay r = {sv[1], oob->rank, oob->size};
    mkx_oob child = {oob->rank, oob->size, relay_allgather, relay_barrier, &r};
    run(&child, sv[1]);
    _exit(2); /* run returned early: setup failed */
  }
  close(sv[1]);
  int verdict = serve_child(sv[0], oob), status = 0;
  close(sv[0]);
  CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
            WEXITSTATUS(status) == 0,
        "child exit status %#x", status);
  CHECK(verdict == 0, "child reported %d failures", verdict);
  return 0;
}

int main(int argc, char **argv) {
  mkx_oob oob;
  int size, total = 0;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size < 2 || size > 64) {
    if (me == 0) printf("SKIP: needs 2 to 64 ranks\n");
    MPI_Finalize();
    return CHECK_SKIP;
  }
  check_set_rank(me, size);
  use_rings = argc > 1 && !strcmp(argv[1], "--rings");
  use_shm = use_rings || (argc > 1 && !strcmp(argv[1], "--shm"));
  if (!CHECK_RC(mkx_oob_mpi_init(&oob, MPI_COMM_WORLD), MKX_SUCCESS,
                "oob init"))
    MPI_Abort(MPI_COMM_WORLD, 1);
  if (use_shm) stale_segments(&oob);
  if (me == size - 1)
    run_victim(&oob);
  else
    run(&oob, -1);
  int failed = check_failed();
  MPI_Allreduce(&failed, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (me == 0)
    printf("%s: %s transport on %d ranks, %d failures\n",
           total ? "FAIL" : "PASS", use_shm ? "shm" : "tcp", size, total);
  mkx_oob_mpi_fini(&oob);
  MPI_Finalize();
  return total ? 1 : 0;
}
