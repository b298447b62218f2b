/* The proxy thread and the host-side producer; see proxy.h. */
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include "core/error.h"
#include "core/log.h"
#include "proxy/proxy.h"

#define MAX_REGIONS 64
#define POLL_BATCH 64

/* The GPU producer (kernels/proxy/proxy_dev.cuh) asserts the same offsets. */
#define LAYOUT(field, off)                                                     \
  _Static_assert(offsetof(mkx_proxy_ring, field) == (off),                     \
                 "mkx_proxy_ring." #field " moved: fix proxy_layout.h")
LAYOUT(reserved, MKX_PROXY_OFF_RESERVED);
LAYOUT(consumed, MKX_PROXY_OFF_CONSUMED);
LAYOUT(completed, MKX_PROXY_OFF_COMPLETED);
LAYOUT(error, MKX_PROXY_OFF_ERROR);
LAYOUT(entries, MKX_PROXY_OFF_ENTRIES);
LAYOUT(cmd, MKX_PROXY_OFF_CMD);
#undef LAYOUT
#define CMD_LAYOUT(field, off)                                                 \
  _Static_assert(offsetof(mkx_proxy_cmd, field) == (off),                      \
                 "mkx_proxy_cmd." #field " moved: fix proxy_layout.h")
CMD_LAYOUT(op, MKX_PROXY_CMD_OP);
CMD_LAYOUT(peer, MKX_PROXY_CMD_PEER);
CMD_LAYOUT(src, MKX_PROXY_CMD_SRC);
CMD_LAYOUT(dst, MKX_PROXY_CMD_DST);
CMD_LAYOUT(src_off, MKX_PROXY_CMD_SRC_OFF);
CMD_LAYOUT(dst_off, MKX_PROXY_CMD_DST_OFF);
CMD_LAYOUT(len, MKX_PROXY_CMD_LEN);
CMD_LAYOUT(slot, MKX_PROXY_CMD_SLOT);
CMD_LAYOUT(pad, MKX_PROXY_CMD_PAD);
CMD_LAYOUT(value, MKX_PROXY_CMD_VALUE);
CMD_LAYOUT(seq, MKX_PROXY_CMD_SEQ);
#undef CMD_LAYOUT
_Static_assert(sizeof(mkx_proxy_cmd) == MKX_PROXY_CMD_BYTES,
               "a command is 64 bytes");
_Static_assert(sizeof(mkx_proxy_ring) == MKX_PROXY_HEADER_BYTES,
               "the ring header is 128 bytes");
_Static_assert(sizeof(_Atomic uint64_t) == 8 && _Alignof(_Atomic uint64_t) == 8,
               "the GPU reads the counters as plain 64-bit words");
_Static_assert(sizeof(_Atomic int32_t) == 4, "the error word is 32 bits");

typedef struct region {
  mkx_net_mr mr;
  mkx_net_rkey *keys; /* [size] */
} region;

struct mkx_proxy {
  mkx_net *net;
  mkx_proxy_ring *ring;
  int own_ring;
  int64_t timeout_ms;
  uint8_t *done; /* [entries]: command seq % entries has completed */
  region regions[MAX_REGIONS];
  uint32_t nregions;
  pthread_t thread;
  clockid_t cpu_clock; /* the thread's CPU-time clock, while it runs */
  int running;
  _Atomic int stop;
  _Atomic uint64_t bytes;   /* payload of the commands posted */
  _Atomic uint64_t cpu_ns;  /* the thread's CPU time when it ended */
  _Atomic uint64_t busy_ns; /* mkx_proxy_stats.busy_ns */
  uint64_t busy_since;      /* the thread's: start of the open interval */
  char why[256];            /* message of the error that stopped the proxy */
};

size_t mkx_proxy_ring_bytes(uint32_t entries) {
  return sizeof(mkx_proxy_ring) + (size_t)entries * sizeof(mkx_proxy_cmd);
}

int mkx_proxy_create(mkx_net *net, uint32_t entries, void *ring_mem,
                     int64_t timeout_ms, mkx_proxy **out) {
  *out = NULL;
  if (entries == 0 || (entries & (entries - 1)) || entries > (1u << 20))
    return mkx_error(MKX_ERR_INVALID_ARG,
                     "proxy: ring entries %u is not a "
                     "power of two <= 2^20",
                     entries);
  mkx_proxy *p = calloc(1, sizeof *p);
  void *mem =
      ring_mem ? ring_mem : aligned_alloc(64, mkx_proxy_ring_bytes(entries));
  if (p) p->done = calloc(entries, 1);
  if (!p || !mem || !p->done) {
    if (p) free(p->done);
    if (!ring_mem) free(mem);
    free(p);
    return mkx_error(MKX_ERR_NOMEM, "proxy ring of %u entries", entries);
  }
  memset(mem, 0, mkx_proxy_ring_bytes(entries));
  p->ring = mem;
  p->ring->entries = entries;
  p->own_ring = ring_mem == NULL;
  p->net = net;
  p->timeout_ms = timeout_ms;
  *out = p;
  return MKX_SUCCESS;
}

mkx_proxy_ring *mkx_proxy_ring_of(mkx_proxy *p) { return p->ring; }

int mkx_proxy_set_region(mkx_proxy *p, uint32_t index, const mkx_net_mr *mr,
                         const mkx_net_rkey *keys) {
  mkx_proxy_ring *r = p->ring;
  if (index >= MAX_REGIONS)
    return mkx_error(MKX_ERR_INVALID_ARG, "proxy: region %u (at most %d)",
                     index, MAX_REGIONS);
  if (atomic_load(&r->completed) != atomic_load(&r->reserved))
    return mkx_error(MKX_ERR_INTERNAL,
                     "proxy: region %u changed while "
                     "commands are in flight",
                     index);
  region *g = &p->regions[index];
  mkx_net_rkey *k = realloc(g->keys, sizeof *k * (size_t)p->net->size);
  if (!k) return mkx_error(MKX_ERR_NOMEM, "proxy region keys");
  memcpy(k, keys, sizeof *k * (size_t)p->net->size);
  g->keys = k;
  g->mr = *mr;
  if (index >= p->nregions) p->nregions = index + 1;
  return MKX_SUCCESS;
}

int mkx_proxy_add_region(mkx_proxy *p, const mkx_net_mr *mr,
                         const mkx_net_rkey *keys, uint32_t *index) {
  *index = p->nregions;
  return mkx_proxy_set_region(p, p->nregions, mr, keys);
}

/* Stop with `rc`: producers and waiters read `error` and give up. */
static void fail(mkx_proxy *p, int rc) {
  snprintf(p->why, sizeof p->why, "%s", MKX_Get_last_error());
  mkx_log(MKX_LOG_ERROR, "proxy stopped: %s: %s", MKX_Error_string(rc), p->why);
  atomic_store_explicit(&p->ring->error, rc, memory_order_release);
}

static int check_cmd(const mkx_proxy *p, const mkx_proxy_cmd *c) {
  if (c->op != MKX_PROXY_OP_WRITE)
    return mkx_error(MKX_ERR_INVALID_ARG, "proxy: command %llu has op %u",
                     (unsigned long long)c->seq, c->op);
  if (c->src >= p->nregions || c->dst >= p->nregions ||
      !p->regions[c->src].keys || !p->regions[c->dst].keys)
    return mkx_error(MKX_ERR_INVALID_ARG,
                     "proxy: command %llu names region "
                     "%u/%u, not both set (%u indices)",
                     (unsigned long long)c->seq, c->src, c->dst, p->nregions);
  return MKX_SUCCESS; /* the transport checks peer, offsets and slot */
}

static int post(mkx_proxy *p, const mkx_proxy_cmd *c) {
  const region *src = &p->regions[c->src], *dst = &p->regions[c->dst];
  MKX_TRY(check_cmd(p, c));
  return mkx_net_write_signal(p->net, c->peer, &src->mr, c->src_off,
                              &dst->keys[c->peer], c->dst_off, c->len, c->slot,
                              c->value, c->seq);
}

/* Take every command whose slot is filled; returns how many. */
static int drain(mkx_proxy *p, int *rc) {
  mkx_proxy_ring *r = p->ring;
  uint32_t mask = r->entries - 1;
  int taken = 0;
  uint64_t next = atomic_load_explicit(&r->consumed, memory_order_relaxed);
  for (;; next++, taken++) {
    mkx_proxy_cmd *slot = &r->cmd[next & mask];
    if (atomic_load_explicit(&slot->seq, memory_order_acquire) != next + 1)
      break;
    mkx_proxy_cmd c;
    memcpy(&c, slot, offsetof(mkx_proxy_cmd, seq));
    c.seq = next + 1;
    if ((*rc = post(p, &c)) != MKX_SUCCESS) break;
    atomic_store_explicit(
        &p->bytes,
        atomic_load_explicit(&p->bytes, memory_order_relaxed) + c.len,
        memory_order_relaxed); /* this thread only */
    atomic_store_explicit(&r->consumed, next + 1, memory_order_release);
  }
  return taken;
}

/* Record completions and advance `completed` over the finished prefix. */
static int reap(mkx_proxy *p, int *rc) {
  mkx_net_completion done[POLL_BATCH];
  mkx_proxy_ring *r = p->ring;
  uint32_t mask = r->entries - 1;
  int n = 0;
  if ((*rc = mkx_net_poll(p->net, done, POLL_BATCH, &n)) != MKX_SUCCESS)
    return 0;
  for (int i = 0; i < n; i++) p->done[done[i].cookie & mask] = 1;
  uint64_t c = atomic_load_explicit(&r->completed, memory_order_relaxed);
  while (p->done[(c + 1) & mask] &&
         c < atomic_load_explicit(&r->consumed, memory_order_relaxed))
    p->done[(++c) & mask] = 0;
  atomic_store_explicit(&r->completed, c, memory_order_release);
  return n;
}

static void idle(long spins) {
  struct timespec nap = {0, spins > 10000 ? 200000 : 5000};
  if (spins > 100)
    nanosleep(&nap, NULL);
  else
    sched_yield();
}

/* The proxy thread between rounds of work.  While commands it took are
 * still with the transport it only yields: their completions free the
 * producers' buffers and ring slots, and a nap would delay them all.  Idle,
 * it naps (idle()), which costs a command that arrives then at most the
 * nap: 5 us (the thread's timer slack is 1 us, see proxy_main), or 200 us
 * after 10000 rounds without work. */
static void proxy_idle(const mkx_proxy *p, long spins) {
  const mkx_proxy_ring *r = p->ring;
  if (atomic_load_explicit(&r->completed, memory_order_relaxed) !=
      atomic_load_explicit(&r->consumed, memory_order_relaxed))
    sched_yield();
  else
    idle(spins);
}

static uint64_t clock_ns(clockid_t clock) {
  struct timespec ts;
  if (clock_gettime(clock, &ts) != 0) return 0;
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The CPU time the thread has used so far, kept when it ends. */
static void *proxy_end(mkx_proxy *p) {
  atomic_store(&p->cpu_ns, clock_ns(CLOCK_THREAD_CPUTIME_ID));
  return NULL;
}

/* Opens or closes a busy interval when the transport's load changes;
 * reads the clock only then. */
static void track_busy(mkx_proxy *p) {
  const mkx_proxy_ring *r = p->ring;
  const int busy = atomic_load_explicit(&r->completed, memory_order_relaxed) !=
                   atomic_load_explicit(&r->consumed, memory_order_relaxed);
  if (busy == (p->busy_since != 0)) return;
  const uint64_t now = clock_ns(CLOCK_MONOTONIC);
  if (busy) {
    p->busy_since = now ? now : 1;
    return;
  }
  atomic_store_explicit(
      &p->busy_ns,
      atomic_load_explicit(&p->busy_ns, memory_order_relaxed) + now -
          p->busy_since,
      memory_order_relaxed); /* this thread only */
  p->busy_since = 0;
}

static void *proxy_main(void *arg) {
  mkx_proxy *p = arg;
  long spins = 0;
  int rc = MKX_SUCCESS;
  /* Naps of 5 us would last the default 50 us slack more: a command
   * arriving in a lull would wait ten times the nap. */
  (void)prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL); /* best effort */
  (void)pthread_setname_np(pthread_self(), "mkx-proxy"); /* for top -H */
  while (rc == MKX_SUCCESS) {
    int work = drain(p, &rc);
    track_busy(p); /* from the first command handed to the transport */
    if (rc == MKX_SUCCESS) work += reap(p, &rc);
    if (rc != MKX_SUCCESS) break;
    track_busy(p);
    /* Stop once everything taken is done, or when told to give up. */
    uint64_t consumed = atomic_load(&p->ring->consumed);
    if (atomic_load(&p->stop) &&
        (atomic_load(&p->ring->completed) == consumed ||
         atomic_load(&p->ring->error) != MKX_SUCCESS))
      return proxy_end(p);
    spins = work ? 0 : spins + 1;
    if (!work) proxy_idle(p, spins);
  }
  fail(p, rc);
  return proxy_end(p);
}

/* "0-3,8,10-11" into a cpu set; 0 if malformed. */
static int parse_cpulist(const char *s, cpu_set_t *set) {
  CPU_ZERO(set);
  while (*s) {
    char *end;
    long a = strtol(s, &end, 10), b = a;
    if (end == s || a < 0) return 0;
    if (*end == '-') {
      s = end + 1;
      b = strtol(s, &end, 10);
      if (end == s || b < a) return 0;
    }
    for (long c = a; c <= b && c < CPU_SETSIZE; c++) CPU_SET((int)c, set);
    s = *end == ',' ? end + 1 : end;
    if (*end && *end != ',') return 0;
  }
  return CPU_COUNT(set) > 0;
}

int mkx_proxy_start(mkx_proxy *p, const char *cpulist) {
  cpu_set_t set;
  int err = pthread_create(&p->thread, NULL, proxy_main, p);
  if (err)
    return mkx_error(MKX_ERR_INTERNAL, "proxy thread: %s", strerror(err));
  p->running = 1;
  if (pthread_getcpuclockid(p->thread, &p->cpu_clock) != 0)
    p->cpu_clock = (clockid_t)-1; /* stats then give 0 until it ends */
  if (cpulist && *cpulist) {
    if (!parse_cpulist(cpulist, &set))
      mkx_log(MKX_LOG_WARN, "proxy: bad cpu list '%s', not pinned", cpulist);
    else if ((err = pthread_setaffinity_np(p->thread, sizeof set, &set)))
      mkx_log(MKX_LOG_INFO, "proxy: not pinned to %s: %s", cpulist,
              strerror(err));
  }
  return MKX_SUCCESS;
}

int mkx_proxy_stop(mkx_proxy *p) {
  if (!p->running) return MKX_SUCCESS;
  int rc =
      mkx_proxy_wait(p->ring, atomic_load(&p->ring->reserved), p->timeout_ms);
  /* On a timeout the thread may be stuck behind a lost peer: the error
   * word tells it to give up instead of finishing. */
  if (rc != MKX_SUCCESS) {
    int none = MKX_SUCCESS;
    atomic_compare_exchange_strong(&p->ring->error, &none, rc);
  }
  atomic_store(&p->stop, 1);
  pthread_join(p->thread, NULL);
  p->running = 0;
  int err = atomic_load(&p->ring->error);
  if (rc == MKX_SUCCESS && err != MKX_SUCCESS)
    rc = mkx_error(err, "proxy: %s", p->why);
  /* Nobody drains the ring any more: a producer or waiter that comes now
   * (a kernel still running, say) must fail at once, not wait its bound. */
  int none = MKX_SUCCESS;
  if (atomic_compare_exchange_strong(&p->ring->error, &none, MKX_ERR_NET))
    snprintf(p->why, sizeof p->why, "the proxy was stopped");
  return rc;
}

void mkx_proxy_get_stats(const mkx_proxy *p, mkx_proxy_stats *s) {
  const mkx_proxy_ring *r = p->ring;
  s->commands = atomic_load(&r->consumed);
  s->bytes = atomic_load(&p->bytes);
  s->busy_ns = atomic_load(&p->busy_ns);
  s->cpu_ns = p->running && p->cpu_clock != (clockid_t)-1
                  ? clock_ns(p->cpu_clock)
                  : atomic_load(&p->cpu_ns);
}

void mkx_proxy_destroy(mkx_proxy *p) {
  if (!p) return;
  if (p->running) mkx_proxy_stop(p);
  for (uint32_t i = 0; i < p->nregions; i++) free(p->regions[i].keys);
  if (p->own_ring) free(p->ring);
  free(p->done);
  free(p);
}

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Wait until `ok(r, arg)` or the proxy's error or the deadline. */
static int wait_until(mkx_proxy_ring *r, int (*ok)(mkx_proxy_ring *, uint64_t),
                      uint64_t arg, int64_t timeout_ms, const char *what) {
  int64_t deadline = now_ms() + timeout_ms;
  for (long spins = 0; !ok(r, arg); spins++) {
    int err = atomic_load_explicit(&r->error, memory_order_acquire);
    if (err != MKX_SUCCESS)
      return mkx_error(err, "%s: the proxy stopped (%s)", what,
                       MKX_Error_string(err));
    if (now_ms() > deadline)
      return mkx_error(MKX_ERR_TIMEOUT,
                       "%s: command %llu not done after "
                       "%lld ms",
                       what, (unsigned long long)arg, (long long)timeout_ms);
    idle(spins);
  }
  return MKX_SUCCESS;
}

static int has_room(mkx_proxy_ring *r, uint64_t seq) {
  return seq - atomic_load_explicit(&r->completed, memory_order_acquire) <=
         r->entries;
}

static int is_complete(mkx_proxy_ring *r, uint64_t seq) {
  return atomic_load_explicit(&r->completed, memory_order_acquire) >= seq;
}

int mkx_proxy_post(mkx_proxy_ring *r, const mkx_proxy_cmd *c, uint64_t *seq,
                   int64_t timeout_ms) {
  /* No ticket on a stopped ring: nobody would take the command. */
  int err = atomic_load_explicit(&r->error, memory_order_acquire);
  if (seq) *seq = 0;
  if (err != MKX_SUCCESS)
    return mkx_error(err, "proxy post: the proxy stopped (%s)",
                     MKX_Error_string(err));
  uint64_t s = atomic_fetch_add(&r->reserved, 1) + 1;
  /* The ticket is taken: even on failure the slot must be filled, or the
   * proxy would wait on it; a failed producer leaves the proxy stopped. */
  int rc = wait_until(r, has_room, s, timeout_ms, "proxy ring full");
  if (seq) *seq = s;
  if (rc != MKX_SUCCESS) return rc;
  mkx_proxy_cmd *slot = &r->cmd[(s - 1) & (r->entries - 1)];
  memcpy(slot, c, offsetof(mkx_proxy_cmd, seq));
  atomic_store_explicit(&slot->seq, s, memory_order_release);
  return MKX_SUCCESS;
}

int mkx_proxy_wait(mkx_proxy_ring *r, uint64_t seq, int64_t timeout_ms) {
  return wait_until(r, is_complete, seq, timeout_ms, "proxy completion");
}
