/* The shm provider: the network path between ranks of one host through
 * shared memory, for virtual nodes (option virtual_node_size), with an
 * optional bandwidth and latency cap so that a host can emulate a NIC's
 * rail (options net_shm_bandwidth, net_shm_latency_us).  A test and
 * emulation tool: `net=auto` never picks it; `net=shm` does.
 *
 * Rings: each endpoint creates one POSIX shared-memory segment (a random
 * name, published in its address blob, so only ranks of the communicator
 * learn it) holding one ring per sending rank.  A write appends records
 * (a 64-byte header, then the payload, 64-byte aligned) to the receiver's
 * ring from this rank; a payload larger than a quarter of the ring goes
 * in several records, the last one carrying the signal.  Records never
 * wrap: one that does not fit before the ring's end is preceded by a skip
 * record.  The ring's head (the sender's) and tail (the receiver's) are
 * byte counts that only grow, published with release stores.
 *
 * Delivery: a progress thread of the receiver takes each ring's records in
 * order once their delivery time has come, copies the payload into the
 * registered region (GPU memory through the staging buffers, as tcp does)
 * and then sets the signal word with a release store, so data is visible
 * before its signal (of a placed or copied write it sets only the signal).
 * The send buffer is reusable once the payload is in the ring (or in the
 * peer's region): that is when the completion is reported.
 *
 * Direct placement (option net_shm_cma): a write of at least CMA_MIN
 * bytes from host memory into a peer's host region skips the ring: the
 * sender copies it straight into the peer's region (process_vm_writev,
 * one copy instead of two) and appends a record without payload that
 * carries the signal, delivered as any other.  The data may then land
 * before earlier writes' records are delivered, so, as on the RDMA
 * providers, a region's bytes must not be written again before the
 * signal of the write that last wrote them has been seen (every MKX
 * protocol waits for a credit).  Where the kernel refuses (EPERM:
 * ptrace restrictions, a container's seccomp) the endpoint goes back to
 * the ring for good, and says so at log level info.
 *
 * Copies into device memory (option net_shm_ipc): a device region is
 * exported at registration (its CUDA IPC handle and offset in the
 * owner's segment, after the header, by region id, with a generation
 * written last), and its key says so.  A write into an exported region is
 * copied straight into it by the copy engine (the sender maps the peer's
 * allocation once per generation, copies on its sending stream and waits)
 * and then appends a record without payload that carries the signal, as
 * a placed write.  A region that cannot be exported is staged; a peer's
 * region that cannot be mapped turns the copies off for the endpoint, which
 * says so at log level info.
 *
 * The cap: the sends of an endpoint share one emulated link.  A record of
 * len bytes leaves at max(now, the link's free time), holds the link for
 * len / bandwidth and is delivered `latency` after it has left.
 *
 * Failures: a peer's process id is in its blob.  A peer that closes says
 * so in its segment; one whose process is gone without that is
 * MKX_ERR_PEER on the next poll, and a write waiting for ring space to a
 * closed or dead peer fails the same way.  A record outside what the
 * receiver registered is MKX_ERR_NET. */

#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#include "core/error.h"
#include "core/log.h"
#include "net/net.h"
#include "net/regions.h"

#define SEG_MAGIC 0x4d4b5853u  /* "MKXS" */
#define REC_MAGIC 0x4d4b5852u  /* "MKXR" */
#define BLOB_MAGIC 0x4d4b5842u /* "MKXB" */
#define REC_BYTES 64
#define HDR_BYTES 24576 /* the segment header, then the export table */
#define NO_SLOT 0xffffffffu

enum { REC_DATA = 1, REC_SKIP = 2, REC_PLACED = 3 };
/* Writes from this size on are placed directly where allowed. */
#define CMA_MIN ((uint64_t)64 << 10)
/* mr.rkey of a region in host memory: peers may place into it. */
#define RKEY_HOST 0x484f5354u /* "HOST" */
/* mr.rkey of an exported device region: peers may copy into it. */
#define RKEY_IPC 0x49504344u /* "IPCD" */

typedef struct shm_blob {
  uint32_t magic;
  int32_t pid;
  uint64_t ring_bytes;
  char name[48];
} shm_blob;

/* The segment's first page. */
typedef struct seg_hdr {
  uint32_t magic;
  int32_t size;
  uint64_t ring_bytes;
  _Atomic int closed; /* the owner closed its endpoint */
  _Atomic int mapped; /* peers that have mapped it (the owner unlinks) */
} seg_hdr;

/* The export table (after the header, by region id): a device region of
 * the owner that peers may map (CUDA IPC).  gen 0: none; the owner writes
 * offset and handle, then gen (release), and clears gen before the
 * region goes. */
typedef struct ipc_entry {
  _Atomic uint32_t gen;
  uint32_t pad;
  uint64_t offset; /* the region's byte 0 in its allocation */
  uint8_t handle[MKX_NET_IPC_BYTES];
} ipc_entry;
#define IPC_TABLE_OFF 64
_Static_assert(sizeof(seg_hdr) <= IPC_TABLE_OFF &&
                   IPC_TABLE_OFF + MKX_NET_MAX_REGIONS * sizeof(ipc_entry) <=
                       HDR_BYTES,
               "segment header");

/* A peer's exported region mapped here. */
typedef struct ipc_map {
  uint32_t gen;
  void *map; /* what ipc_import returned (the allocation's byte 0) */
  char *at;  /* the region's byte 0 */
} ipc_map;

/* One ring's control words, each on its own cache line. */
typedef struct ring_ctl {
  _Alignas(64) _Atomic uint64_t head; /* bytes written (the sender) */
  _Alignas(64) _Atomic uint64_t tail; /* bytes taken (the receiver) */
} ring_ctl;

typedef struct rec {
  uint32_t magic, type, region, slot;
  uint64_t offset, len, value;
  int64_t deliver_ns;
  uint8_t pad[REC_BYTES - 48];
} rec;
_Static_assert(sizeof(rec) == REC_BYTES, "record header");

typedef struct shm_impl {
  shm_blob blob;
  char *own; /* this endpoint's segment (receiving) */
  size_t seg_bytes;
  char **peer; /* [size] peers' segments (sending into), own at self */
  shm_blob *remote;
  int unlinked;
  pthread_t thread;
  int thread_started;
  _Atomic int stop;
  pthread_mutex_t lock; /* completions, the first error */
  mkx_net_fifo done;
  int err_code;
  char err_msg[320];
  mkx_net_regions rg;
  int cma; /* direct placement allowed (option, and not refused yet) */
  _Atomic uint64_t placed; /* writes placed directly */
  int ipc; /* copies into peers' device regions (option, stager, not refused) */
  uint32_t ipc_gen;            /* the last export's generation */
  ipc_map **imports;           /* [size][MKX_NET_MAX_REGIONS], made on use */
  _Atomic uint64_t ipc_copies; /* writes copied into a peer's device region */
  /* the emulated link (the sending side; one thread drives an endpoint) */
  double ns_per_byte;
  int64_t latency_ns, link_free_ns;
} shm_impl;

static shm_impl *impl_of(mkx_net *n) { return n->impl; }

static const mkx_net_stager *stager_override;

void mkx_net_shm_set_stager(const mkx_net_stager *st) { stager_override = st; }

static ipc_entry *ipc_table(char *seg) {
  return (ipc_entry *)(seg + IPC_TABLE_OFF);
}

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static uint64_t round_rec(uint64_t b) {
  return (b + REC_BYTES - 1) / REC_BYTES * REC_BYTES;
}

/* Bytes a record takes in its ring: a placed one has no payload. */
static uint64_t rec_span(const rec *r) {
  return REC_BYTES + (r->type == REC_DATA ? round_rec(r->len) : 0);
}

static size_t seg_size(int size, uint64_t ring_bytes) {
  return HDR_BYTES + (size_t)size * (sizeof(ring_ctl) + ring_bytes);
}

/* Ring of sender `from` in segment seg. */
static ring_ctl *ring_ctl_of(char *seg, int from, uint64_t ring_bytes) {
  return (ring_ctl *)(seg + HDR_BYTES +
                      (size_t)from * (sizeof(ring_ctl) + ring_bytes));
}
static char *ring_data(char *seg, int from, uint64_t ring_bytes) {
  return (char *)(ring_ctl_of(seg, from, ring_bytes) + 1);
}

static void record_error(shm_impl *s, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void record_error(shm_impl *s, int code, const char *fmt, ...) {
  pthread_mutex_lock(&s->lock);
  if (!s->err_code) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->err_msg, sizeof s->err_msg, fmt, ap);
    va_end(ap);
    s->err_code = code;
  }
  pthread_mutex_unlock(&s->lock);
}

static int peer_alive(const shm_impl *s, int peer) {
  return kill(s->remote[peer].pid, 0) == 0 || errno != ESRCH;
}

/* ---- receiving ------------------------------------------------------------ */

/* Copy a record's payload into its region, then set its signal: 1 done,
 * 0 the endpoint failed (recorded). */
static int deliver(mkx_net *n, int from, const rec *r, const char *payload) {
  shm_impl *s = impl_of(n);
  mkx_net_region rg;
  if (!mkx_net_regions_find(&s->rg, r->region, r->offset, r->len, &rg) ||
      (r->slot != NO_SLOT && r->slot >= n->num_signals)) {
    record_error(s, MKX_ERR_NET,
                 "shm: rank %d wrote %llu bytes at %llu of region %u, "
                 "signal %u: outside what rank %d registered",
                 from, (unsigned long long)r->len,
                 (unsigned long long)r->offset, r->region, r->slot, n->rank);
    return 0;
  }
  char *dst = rg.base + r->offset;
  if (r->type == REC_PLACED) {
    if (rg.dev >= 0 && !atomic_load_explicit(&ipc_table(s->own)[r->region].gen,
                                             memory_order_relaxed)) {
      record_error(s, MKX_ERR_NET,
                   "shm: rank %d placed %llu bytes into device memory it may "
                   "not map",
                   from, (unsigned long long)r->len);
      return 0;
    }
  } else if (rg.dev < 0) {
    memcpy(dst, payload, r->len);
  } else { /* through the receive stage: the progress thread's alone */
    const mkx_net_stager *st = s->rg.stager;
    for (uint64_t off = 0; off < r->len; off += st->stage_bytes) {
      const size_t k = r->len - off < st->stage_bytes ? (size_t)(r->len - off)
                                                      : st->stage_bytes;
      memcpy(s->rg.rstage, payload + off, k);
      const int rc = st->to_device(s->rg.stage_ctx, dst + off, s->rg.rstage, k);
      if (rc != MKX_SUCCESS) {
        record_error(s, rc,
                     "shm: %zu bytes from rank %d into device memory "
                     "at %p: %s",
                     k, from, (void *)(dst + off), MKX_Get_last_error());
        return 0;
      }
    }
  }
  if (r->slot != NO_SLOT)
    atomic_store_explicit(&n->signals[r->slot], r->value, memory_order_release);
  return 1;
}

/* The records of sender `from` that are due; *wait_ns: the time to the
 * next one that is not (or unchanged); *moved: set if one was taken.  0
 * once the endpoint failed. */
static int drain_ring(mkx_net *n, int from, int64_t *wait_ns, int *moved) {
  shm_impl *s = impl_of(n);
  const uint64_t rb = s->blob.ring_bytes;
  ring_ctl *c = ring_ctl_of(s->own, from, rb);
  char *data = ring_data(s->own, from, rb);
  uint64_t tail = atomic_load_explicit(&c->tail, memory_order_relaxed);
  const uint64_t head = atomic_load_explicit(&c->head, memory_order_acquire);
  while (tail < head) {
    const rec *r = (const rec *)(data + tail % rb);
    if (r->magic != REC_MAGIC ||
        (r->type != REC_DATA && r->type != REC_SKIP && r->type != REC_PLACED)) {
      record_error(s, MKX_ERR_NET, "shm: a malformed record from rank %d",
                   from);
      return 0;
    }
    /* a record, its payload included (a placed one has none here), lies
     * between the tail and the head and before the ring's end, whatever the
     * peer wrote into its length */
    const int data = r->type == REC_DATA;
    if (r->type != REC_SKIP &&
        ((data && r->len > rb) || tail % rb + rec_span(r) > rb ||
         tail + rec_span(r) > head)) {
      record_error(s, MKX_ERR_NET,
                   "shm: a record of %llu bytes from rank %d runs past its "
                   "ring",
                   (unsigned long long)r->len, from);
      return 0;
    }
    if (r->type == REC_SKIP) {
      tail += rb - tail % rb;
    } else {
      const int64_t left = r->deliver_ns - now_ns();
      if (left > 0) {
        if (left < *wait_ns) *wait_ns = left;
        break;
      }
      if (!deliver(n, from, r, (const char *)(r + 1))) return 0;
      tail += rec_span(r);
    }
    atomic_store_explicit(&c->tail, tail, memory_order_release);
    *moved = 1;
  }
  return 1;
}

/* Spins while records come (a microsecond's latency must stay one),
 * sleeps in steps of 20 us once idle for a while, and of 200 us after 20000
 * such steps, a second or more (as the proxy does): an idle endpoint then
 * costs its host a few percent of a core instead of a tenth, and the first
 * record after a long pause waits at most 200 us. */
static void *progress(void *arg) {
  mkx_net *n = arg;
  shm_impl *s = impl_of(n);
  int ok = 1, idle = 0;
  (void)pthread_setname_np(pthread_self(), "mkx-shm");
  while (ok && !atomic_load(&s->stop)) {
    int64_t wait_ns = INT64_MAX;
    int moved = 0;
    for (int r = 0; ok && r < n->size; r++)
      if (r != n->rank) ok = drain_ring(n, r, &wait_ns, &moved);
    idle = moved ? 0 : idle + (idle < 1000000);
    if (wait_ns < INT64_MAX) idle = 0; /* a record is due soon: stay near */
    if (idle > 20000) {
      struct timespec ts = {0, idle > 40000 ? 200000 : 20000};
      nanosleep(&ts, NULL);
    } else if (idle > 200) {
      sched_yield();
    }
  }
  return NULL;
}

/* ---- set-up ------------------------------------------------------------------ */

static int shm_probe(const mkx_net_params *p) {
  (void)p;
  return MKX_SUCCESS; /* open reports a shm_open failure */
}

/* A job ended between making its segments and its peers mapping them (a
 * signal to the launcher) leaves their names behind.  The next endpoint on
 * the host removes those of this user whose maker (its pid is in the name)
 * is gone, once older than any connect could last (so a live job's, seen
 * from another pid namespace, is left alone), and says so at info. */
#define STALE_S (2 * 3600)
static void reclaim_stale(void) {
  DIR *d = opendir("/dev/shm");
  if (!d) return;
  const time_t now = time(NULL);
  for (struct dirent *e; (e = readdir(d));) {
    int pid = 0, at = 0;
    if (sscanf(e->d_name, "mkx-shm-%d-%n", &pid, &at) != 1 || !at || pid <= 0)
      continue;
    char path[320];
    struct stat st;
    snprintf(path, sizeof path, "/dev/shm/%s", e->d_name);
    if (stat(path, &st) != 0 || st.st_uid != getuid() ||
        now - st.st_mtime < STALE_S || kill(pid, 0) == 0 || errno != ESRCH)
      continue;
    if (shm_unlink(path + 8) == 0)
      mkx_log(MKX_LOG_INFO, "shm: removed %s, left by process %d (gone)",
              path + 8, pid);
  }
  closedir(d);
}

static int make_segment(shm_impl *s, int size) {
  reclaim_stale();
  uint8_t rnd[16];
  if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd)
    return mkx_error(MKX_ERR_NET, "shm: getrandom: %s", strerror(errno));
  int k = snprintf(s->blob.name, sizeof s->blob.name, "/mkx-shm-%d-",
                   (int)getpid());
  for (size_t i = 0; i < sizeof rnd && k + 2 < (int)sizeof s->blob.name; i++)
    k += snprintf(s->blob.name + k, sizeof s->blob.name - (size_t)k, "%02x",
                  rnd[i]);
  s->seg_bytes = seg_size(size, s->blob.ring_bytes);
  int fd = shm_open(s->blob.name, O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0)
    return mkx_error(MKX_ERR_NET, "shm: shm_open %s: %s", s->blob.name,
                     strerror(errno));
  int rc = ftruncate(fd, (off_t)s->seg_bytes) == 0
               ? MKX_SUCCESS
               : mkx_error(MKX_ERR_NOMEM, "shm: %zu bytes of shared memory: %s",
                           s->seg_bytes, strerror(errno));
  void *m =
      rc ? MAP_FAILED
         : mmap(NULL, s->seg_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (!rc && m == MAP_FAILED)
    rc = mkx_error(MKX_ERR_NOMEM, "shm: mmap: %s", strerror(errno));
  if (rc) {
    shm_unlink(s->blob.name);
    return rc;
  }
  s->own = m;
  seg_hdr *h = (seg_hdr *)s->own;
  h->magic = SEG_MAGIC;
  h->size = size;
  h->ring_bytes = s->blob.ring_bytes;
  return MKX_SUCCESS;
}

static int shm_open_ep(mkx_net *n, const mkx_net_params *p) {
  shm_impl *s = calloc(1, sizeof *s);
  if (!s) return mkx_error(MKX_ERR_NOMEM, "shm: endpoint");
  n->impl = s;
  pthread_mutex_init(&s->lock, NULL);
  const mkx_net_stager *st =
      stager_override ? stager_override : mkx_net_cuda_stager();
  mkx_net_regions_init(&s->rg, "shm", st);
  s->blob.magic = BLOB_MAGIC;
  s->blob.pid = (int32_t)getpid();
  s->blob.ring_bytes = round_rec((uint64_t)p->opt->net_shm_ring);
  s->ns_per_byte = p->opt->net_shm_bandwidth > 0
                       ? 1000.0 / (double)p->opt->net_shm_bandwidth
                       : 0; /* MB/s: 1e9 ns / 1e6 bytes */
  s->latency_ns = (int64_t)p->opt->net_shm_latency_us * 1000;
  s->cma = p->opt->net_shm_cma;
  s->ipc = p->opt->net_shm_ipc && st && st->ipc_export && st->ipc_import &&
           st->ipc_release && st->copy;
  s->peer = calloc((size_t)p->size, sizeof *s->peer);
  s->imports = calloc((size_t)p->size, sizeof *s->imports);
  int rc = s->peer && s->imports
               ? mkx_net_signals_alloc(p->num_signals, &n->signals)
               : mkx_error(MKX_ERR_NOMEM, "shm: peers");
  if (rc == MKX_SUCCESS) rc = make_segment(s, p->size);
  if (rc != MKX_SUCCESS) n->prov->close(n);
  return rc;
}

static int shm_address(mkx_net *n, const void **blob, size_t *len) {
  *blob = &impl_of(n)->blob;
  *len = sizeof(shm_blob);
  return MKX_SUCCESS;
}

static int map_peer(shm_impl *s, int r, int size) {
  const shm_blob *b = &s->remote[r];
  if (b->magic != BLOB_MAGIC || b->ring_bytes != s->blob.ring_bytes)
    return mkx_error(MKX_ERR_NET,
                     "shm: rank %d's address is not an shm endpoint with "
                     "rings of %llu bytes (option net_shm_ring must agree)",
                     r, (unsigned long long)s->blob.ring_bytes);
  int fd = shm_open(b->name, O_RDWR, 0);
  if (fd < 0)
    return mkx_error(MKX_ERR_NET,
                     "shm: rank %d's segment %s: %s (shm needs every rank "
                     "on one host)",
                     r, b->name, strerror(errno));
  void *m = mmap(NULL, s->seg_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED)
    return mkx_error(MKX_ERR_NET, "shm: mmap rank %d's segment: %s", r,
                     strerror(errno));
  seg_hdr *h = m;
  if (h->magic != SEG_MAGIC || h->size != size) {
    munmap(m, s->seg_bytes);
    return mkx_error(MKX_ERR_NET,
                     "shm: rank %d's segment is not one of %d "
                     "ranks",
                     r, size);
  }
  s->peer[r] = m;
  atomic_fetch_add(&h->mapped, 1);
  return MKX_SUCCESS;
}

static int shm_connect(mkx_net *n, const void *blobs, size_t len) {
  shm_impl *s = impl_of(n);
  if (len != sizeof(shm_blob))
    return mkx_error(MKX_ERR_NET, "shm: address of %zu bytes", len);
  s->remote = malloc((size_t)n->size * sizeof *s->remote);
  if (!s->remote) return mkx_error(MKX_ERR_NOMEM, "shm: addresses");
  memcpy(s->remote, blobs, (size_t)n->size * sizeof *s->remote);
  for (int r = 0; r < n->size; r++)
    if (r != n->rank) MKX_TRY(map_peer(s, r, n->size));
  s->peer[n->rank] = s->own;
  if (pthread_create(&s->thread, NULL, progress, n) != 0)
    return mkx_error(MKX_ERR_NET, "shm: progress thread");
  s->thread_started = 1;
  return MKX_SUCCESS;
}

/* Device region `id` at `base` into the export table: 1, or 0 where the
 * stager cannot export it (writes into it are then staged). */
static int export_region(shm_impl *s, uint32_t id, const char *base) {
  ipc_entry *e = &ipc_table(s->own)[id];
  if (s->rg.stager->ipc_export(s->rg.stage_ctx, base, e->handle, &e->offset) !=
      MKX_SUCCESS) {
    mkx_log(MKX_LOG_INFO,
            "shm: device region %u not exported (%s): writes "
            "into it are staged",
            id, MKX_Get_last_error());
    return 0;
  }
  if (++s->ipc_gen == 0) s->ipc_gen = 1;
  atomic_store_explicit(&e->gen, s->ipc_gen, memory_order_release);
  return 1;
}

static int shm_reg(mkx_net *n, const mkx_net_reg_args *a, mkx_net_mr *mr) {
  shm_impl *s = impl_of(n);
  mkx_net_region r;
  MKX_TRY(mkx_net_regions_reg(&s->rg, a, mr));
  /* peers learn from the key whether they may place or copy into it */
  mr->rkey = 0;
  if (mkx_net_regions_find(&s->rg, mr->id, 0, 0, &r)) {
    if (r.dev < 0)
      mr->rkey = RKEY_HOST;
    else if (s->ipc && export_region(s, mr->id, r.base))
      mr->rkey = RKEY_IPC;
  }
  return MKX_SUCCESS;
}

static int shm_dereg(mkx_net *n, mkx_net_mr *mr) {
  shm_impl *s = impl_of(n);
  if (mr->id < MKX_NET_MAX_REGIONS)
    atomic_store_explicit(&ipc_table(s->own)[mr->id].gen, 0,
                          memory_order_release);
  return mkx_net_regions_dereg(&s->rg, mr);
}

/* ---- sending ------------------------------------------------------------------ */

/* MKX_SUCCESS while peer may take records, else MKX_ERR_PEER. */
static int peer_usable(const shm_impl *s, int peer) {
  const seg_hdr *h = (const seg_hdr *)s->peer[peer];
  if (atomic_load(&h->closed))
    return mkx_error(MKX_ERR_PEER, "shm: rank %d closed its endpoint", peer);
  if (!peer_alive(s, peer))
    return mkx_error(MKX_ERR_PEER, "shm: rank %d (process %d) is gone", peer,
                     (int)s->remote[peer].pid);
  return MKX_SUCCESS;
}

/* Room for `need` contiguous bytes in ring (c, data) at *head, waiting for
 * the receiver within the deadline; a skip record first where the ring's
 * end is too close. */
static int make_room(mkx_net *n, int peer, ring_ctl *c, char *data,
                     uint64_t *head, uint64_t need, int64_t deadline_ms) {
  shm_impl *s = impl_of(n);
  const uint64_t rb = s->blob.ring_bytes;
  const uint64_t to_end = rb - *head % rb;
  const uint64_t total = need > to_end ? to_end + need : need;
  for (int spins = 0;; spins++) {
    const uint64_t tail = atomic_load_explicit(&c->tail, memory_order_acquire);
    if (rb - (*head - tail) >= total) break;
    if (spins % 1024 == 1023) {
      MKX_TRY(peer_usable(s, peer));
      if (mkx_net_now_ms() > deadline_ms)
        return mkx_error(MKX_ERR_TIMEOUT,
                         "shm: rank %d took no data for %lld ms (its ring "
                         "is full)",
                         peer, (long long)n->timeout_ms);
      sched_yield();
    }
  }
  if (total > need) {
    rec *skip = (rec *)(data + *head % rb);
    *skip = (rec){.magic = REC_MAGIC, .type = REC_SKIP};
    *head += to_end;
  }
  return MKX_SUCCESS;
}

/* One record of `len` payload bytes from src (device memory: staged). */
static int put_record(mkx_net *n, int peer, const mkx_net_mr *src,
                      const char *from, const rec *hdr, int64_t deadline_ms) {
  shm_impl *s = impl_of(n);
  const uint64_t rb = s->blob.ring_bytes;
  ring_ctl *c = ring_ctl_of(s->peer[peer], n->rank, rb);
  char *data = ring_data(s->peer[peer], n->rank, rb);
  uint64_t head = atomic_load_explicit(&c->head, memory_order_relaxed);
  MKX_TRY(make_room(n, peer, c, data, &head, rec_span(hdr), deadline_ms));
  rec *r = (rec *)(data + head % rb);
  *r = *hdr;
  char *payload = (char *)(r + 1);
  if (hdr->type == REC_PLACED) {
    /* the data is in the peer's region already */
  } else if (hdr->len && src->kind == MKX_NET_MEM_DEVICE) {
    mkx_net_regions *g = &s->rg;
    pthread_mutex_lock(&g->stage_lock);
    int rc = MKX_SUCCESS;
    for (uint64_t off = 0; rc == MKX_SUCCESS && off < hdr->len;
         off += g->stager->stage_bytes) {
      const size_t k = hdr->len - off < g->stager->stage_bytes
                           ? (size_t)(hdr->len - off)
                           : g->stager->stage_bytes;
      rc = g->stager->to_host(g->stage_ctx, g->sstage, from + off, k);
      if (rc == MKX_SUCCESS) memcpy(payload + off, g->sstage, k);
    }
    pthread_mutex_unlock(&g->stage_lock);
    MKX_TRY(rc);
  } else if (hdr->len) {
    memcpy(payload, from, hdr->len);
  }
  atomic_store_explicit(&c->head, head + rec_span(hdr), memory_order_release);
  return MKX_SUCCESS;
}

/* When a record of len bytes sent now is delivered (the link's model). */
static int64_t delivery(shm_impl *s, uint64_t len) {
  const int64_t now = now_ns();
  if (s->ns_per_byte <= 0) return now + s->latency_ns;
  const int64_t start = s->link_free_ns > now ? s->link_free_ns : now;
  s->link_free_ns = start + (int64_t)(s->ns_per_byte * (double)len);
  return s->link_free_ns + s->latency_ns;
}

/* Direct placement of len bytes at `from` into the peer's region at `to`
 * (see the top of the file): *placed = 1, or 0 where the kernel refuses
 * (then never again on this endpoint). */
static int place(mkx_net *n, int peer, const char *from, uint64_t to,
                 size_t len, int *placed) {
  shm_impl *s = impl_of(n);
  size_t moved = 0;
  *placed = 0;
  while (moved < len) {
    struct iovec l = {(void *)(uintptr_t)(from + moved), len - moved};
    struct iovec r = {(void *)(uintptr_t)(to + moved), len - moved};
    const ssize_t k = process_vm_writev(s->remote[peer].pid, &l, 1, &r, 1, 0);
    if (k > 0) {
      moved += (size_t)k;
      continue;
    }
    if (k < 0 && errno == EINTR) continue;
    const int e = k < 0 ? errno : EIO;
    if (moved == 0 && (e == EPERM || e == EACCES || e == ENOSYS)) {
      s->cma = 0;
      mkx_log(MKX_LOG_INFO,
              "shm: no direct placement into rank %d (%s): writes go "
              "through the rings",
              peer, strerror(e));
      return MKX_SUCCESS;
    }
    if (e == ESRCH)
      return mkx_error(MKX_ERR_PEER, "shm: rank %d (process %d) is gone", peer,
                       (int)s->remote[peer].pid);
    return mkx_error(MKX_ERR_NET,
                     "shm: placing %zu bytes into rank %d's region at %#llx: "
                     "%s",
                     len, peer, (unsigned long long)to, strerror(e));
  }
  *placed = 1;
  return MKX_SUCCESS;
}

/* A placed write: its record carries the signal (no payload). */
static int put_placed(mkx_net *n, int peer, const mkx_net_mr *src,
                      const mkx_net_rkey *dst, size_t dst_off, size_t len,
                      uint32_t slot, uint64_t value, int64_t deadline_ms) {
  const rec hdr = {.magic = REC_MAGIC,
                   .type = REC_PLACED,
                   .region = dst->id,
                   .slot = slot,
                   .offset = dst_off,
                   .len = len,
                   .value = value,
                   .deliver_ns = delivery(impl_of(n), len)};
  return put_record(n, peer, src, NULL, &hdr, deadline_ms);
}

/* A write through the ring, in records of at most a quarter of it; the
 * last one carries the signal. */
static int put_pieces(mkx_net *n, int peer, const mkx_net_mr *src,
                      const char *from, const mkx_net_rkey *dst, size_t dst_off,
                      size_t len, uint32_t slot, uint64_t value,
                      int64_t deadline_ms) {
  shm_impl *s = impl_of(n);
  const uint64_t piece = s->blob.ring_bytes / 4 - REC_BYTES;
  size_t off = 0;
  do {
    const uint64_t k = len - off < piece ? len - off : piece;
    const int last = off + k == len;
    const rec hdr = {.magic = REC_MAGIC,
                     .type = REC_DATA,
                     .region = dst->id,
                     .slot = last ? slot : NO_SLOT,
                     .offset = dst_off + off,
                     .len = k,
                     .value = value,
                     .deliver_ns = delivery(s, k)};
    MKX_TRY(
        put_record(n, peer, src, from ? from + off : NULL, &hdr, deadline_ms));
    off += k;
  } while (off < len);
  return MKX_SUCCESS;
}

/* Rank peer's exported region dst->id mapped here: *at its byte 0, or
 * NULL where it is not exported (or being re-registered) or cannot be
 * mapped; then copies into device memory stay off for this endpoint, and
 * it says so. */
static int ipc_target(mkx_net *n, int peer, const mkx_net_rkey *dst,
                      char **at) {
  shm_impl *s = impl_of(n);
  const mkx_net_stager *st = s->rg.stager;
  *at = NULL;
  const ipc_entry *e = &ipc_table(s->peer[peer])[dst->id];
  const uint32_t gen = atomic_load_explicit(&e->gen, memory_order_acquire);
  if (!gen) return MKX_SUCCESS;
  if (!s->imports[peer] &&
      !(s->imports[peer] = calloc(MKX_NET_MAX_REGIONS, sizeof(ipc_map))))
    return mkx_error(MKX_ERR_NOMEM, "shm: mappings of rank %d", peer);
  ipc_map *m = &s->imports[peer][dst->id];
  if (m->gen != gen) {
    if (m->map) st->ipc_release(s->rg.stage_ctx, m->map);
    *m = (ipc_map){0, NULL, NULL};
    uint8_t handle[MKX_NET_IPC_BYTES];
    memcpy(handle, e->handle, sizeof handle);
    const uint64_t offset = e->offset;
    if (atomic_load_explicit(&e->gen, memory_order_acquire) != gen)
      return MKX_SUCCESS;
    void *map = NULL;
    if (st->ipc_import(s->rg.stage_ctx, handle, &map) != MKX_SUCCESS) {
      s->ipc = 0;
      mkx_log(MKX_LOG_INFO,
              "shm: rank %d's region %u cannot be mapped (%s): "
              "writes into device memory are staged",
              peer, dst->id, MKX_Get_last_error());
      return MKX_SUCCESS;
    }
    *m = (ipc_map){gen, map, (char *)map + offset};
  }
  *at = m->at;
  return MKX_SUCCESS;
}

/* A write copied straight into rank peer's device region (CUDA IPC):
 * *copied = 1, or 0 where that cannot be (then it goes the usual way). */
static int ipc_copy(mkx_net *n, int peer, const char *from,
                    const mkx_net_rkey *dst, size_t dst_off, size_t len,
                    int *copied) {
  shm_impl *s = impl_of(n);
  *copied = 0;
  /* the net layer checked the bounds; the id indexes the peer's table */
  if (dst->id >= MKX_NET_MAX_REGIONS)
    return mkx_error(MKX_ERR_INVALID_ARG, "shm: rank %d's region %u", peer,
                     dst->id);
  char *at = NULL;
  MKX_TRY(ipc_target(n, peer, dst, &at));
  if (!at) return MKX_SUCCESS;
  mkx_net_regions *g = &s->rg;
  pthread_mutex_lock(&g->stage_lock);
  const int rc = g->stager->copy(g->stage_ctx, at + dst_off, from, len);
  pthread_mutex_unlock(&g->stage_lock);
  MKX_TRY(rc);
  *copied = 1;
  return MKX_SUCCESS;
}

static int shm_write_signal(mkx_net *n, int peer, const mkx_net_mr *src,
                            size_t src_off, const mkx_net_rkey *dst,
                            size_t dst_off, size_t len, uint32_t slot,
                            uint64_t value, uint64_t cookie) {
  shm_impl *s = impl_of(n);
  if (len && src->kind == MKX_NET_MEM_DEVICE && s->rg.stage_dev < 0)
    return mkx_error(MKX_ERR_INVALID_ARG,
                     "shm: region %u is device memory this endpoint did not "
                     "register",
                     src->id);
  MKX_TRY(peer_usable(s, peer));
  const int64_t deadline_ms = mkx_net_now_ms() + n->timeout_ms;
  const char *from = len ? (const char *)src->base + src_off : NULL;
  int placed = 0, copied = 0;
  if (s->cma && len >= CMA_MIN && src->kind != MKX_NET_MEM_DEVICE &&
      dst->rkey == RKEY_HOST)
    MKX_TRY(place(n, peer, from, dst->addr + dst_off, len, &placed));
  else if (s->ipc && len && dst->rkey == RKEY_IPC && s->rg.stage_ctx)
    MKX_TRY(ipc_copy(n, peer, from, dst, dst_off, len, &copied));
  if (placed || copied) {
    MKX_TRY(
        put_placed(n, peer, src, dst, dst_off, len, slot, value, deadline_ms));
    atomic_fetch_add(placed ? &s->placed : &s->ipc_copies, 1);
  } else {
    MKX_TRY(put_pieces(n, peer, src, from, dst, dst_off, len, slot, value,
                       deadline_ms));
  }
  /* The payload is in the peer's region or the ring: the source may be
   * reused. */
  pthread_mutex_lock(&s->lock);
  const int rc = mkx_net_fifo_push(&s->done, cookie, peer);
  pthread_mutex_unlock(&s->lock);
  return rc;
}

/* n's shm endpoint, or NULL for another provider (the tests' counters). */
static const shm_impl *shm_of(const mkx_net *n) {
  return n && n->prov == &mkx_net_shm_provider ? n->impl : NULL;
}

uint64_t mkx_net_shm_placed(const mkx_net *n, int *enabled) {
  const shm_impl *s = shm_of(n);
  *enabled = s ? s->cma : 0;
  return s ? atomic_load(&s->placed) : 0;
}

uint64_t mkx_net_shm_ipc_copies(const mkx_net *n, int *enabled) {
  const shm_impl *s = shm_of(n);
  *enabled = s ? s->ipc : 0;
  return s ? atomic_load(&s->ipc_copies) : 0;
}

/* Peers whose process is gone without closing: MKX_ERR_PEER. */
static void check_peers(mkx_net *n) {
  shm_impl *s = impl_of(n);
  for (int r = 0; s->remote && r < n->size; r++) {
    if (r == n->rank || !s->peer[r]) continue;
    const seg_hdr *h = (const seg_hdr *)s->peer[r];
    if (!atomic_load(&h->closed) && !peer_alive(s, r))
      record_error(s, MKX_ERR_PEER, "shm: rank %d (process %d) is gone", r,
                   (int)s->remote[r].pid);
  }
}

static int shm_poll(mkx_net *n, mkx_net_completion *done, int max, int *ndone) {
  shm_impl *s = impl_of(n);
  seg_hdr *h = (seg_hdr *)s->own;
  /* every peer has the segment mapped: its name may go */
  if (!s->unlinked && s->remote && atomic_load(&h->mapped) == n->size - 1) {
    shm_unlink(s->blob.name);
    s->unlinked = 1;
  }
  check_peers(n);
  pthread_mutex_lock(&s->lock);
  const int code = s->err_code;
  *ndone = code ? 0 : mkx_net_fifo_pop(&s->done, done, max);
  pthread_mutex_unlock(&s->lock);
  if (code) return mkx_error(code, "%s (seen by rank %d)", s->err_msg, n->rank);
  return MKX_SUCCESS;
}

static void shm_close(mkx_net *n) {
  shm_impl *s = impl_of(n);
  if (!s) return;
  if (s->own) atomic_store(&((seg_hdr *)s->own)->closed, 1);
  if (s->thread_started) {
    atomic_store(&s->stop, 1);
    pthread_join(s->thread, NULL);
  }
  for (int r = 0; s->imports && r < n->size; r++) {
    for (int id = 0; s->imports[r] && id < MKX_NET_MAX_REGIONS; id++)
      if (s->imports[r][id].map)
        s->rg.stager->ipc_release(s->rg.stage_ctx, s->imports[r][id].map);
    free(s->imports[r]);
  }
  free(s->imports);
  for (int r = 0; s->peer && r < n->size; r++)
    if (s->peer[r] && r != n->rank) munmap(s->peer[r], s->seg_bytes);
  if (s->own) {
    if (!s->unlinked) shm_unlink(s->blob.name);
    munmap(s->own, s->seg_bytes);
  }
  mkx_net_regions_fini(&s->rg);
  pthread_mutex_destroy(&s->lock);
  free(s->peer);
  free(s->remote);
  mkx_net_fifo_free(&s->done);
  free((void *)n->signals);
  free(s);
  n->impl = NULL;
  n->signals = NULL;
}

static const mkx_option_desc shm_options[] = {
    {"net_shm_bandwidth", MKX_OPT_LONG,
     offsetof(mkx_options, net_shm_bandwidth), "0", "0:100000000",
     "The shm transport's emulated link: MB/s an endpoint's writes share "
     "(0: as fast as memory copies go), e.g. 50000 for a 400 Gb/s rail.",
     1},
    {"net_shm_latency_us", MKX_OPT_INT,
     offsetof(mkx_options, net_shm_latency_us), "0", "0:1000000",
     "The shm transport's emulated latency: microseconds from a write "
     "leaving the link to its delivery.",
     1},
    {"net_shm_ring", MKX_OPT_LONG, offsetof(mkx_options, net_shm_ring),
     "8388608", "65536:1073741824",
     "Bytes of each shm ring (one per pair of ranks, in the receiver's shared "
     "memory); writes larger than a quarter of it go in pieces.",
     1},
    {"net_shm_cma", MKX_OPT_BOOL, offsetof(mkx_options, net_shm_cma), "yes",
     "yes|no",
     "The shm transport's writes of 64 KiB or more from host memory into a "
     "peer's host memory: yes: copied straight into the peer's region "
     "(process_vm_writev; where the system refuses, through the rings); "
     "no: always through the rings (two copies).",
     1},
    {"net_shm_ipc", MKX_OPT_BOOL, offsetof(mkx_options, net_shm_ipc), "yes",
     "yes|no",
     "The shm transport's writes into a peer's device memory: yes: copied "
     "straight into it by the copy engine (CUDA IPC; where a region cannot "
     "be exported or mapped, staged through host memory); no: always "
     "staged (the sender's and the receiver's CPU copy every byte).",
     1},
    {NULL, 0, 0, NULL, NULL, NULL},
};

const mkx_net_provider mkx_net_shm_provider = {
    .name = "shm",
    .caps = MKX_NET_CAP_ORDERED, /* one ring per pair; GPU memory staged */
    .signal_bits = 64,
    .options = shm_options,
    .probe = shm_probe,
    .open = shm_open_ep,
    .address = shm_address,
    .connect = shm_connect,
    .reg = shm_reg,
    .dereg = shm_dereg,
    .write_signal = shm_write_signal,
    .poll = shm_poll,
    .close = shm_close,
};
