/* The tcp provider: the network path over sockets, so it runs (and is
 * tested) on any machine.
 *
 * Connections: one per pair of ranks, the lower rank connecting to the
 * higher one's listener.  Each rank draws a 128-bit secret and publishes
 * it in its address blob (exchanged through the bootstrap, so only ranks
 * of the communicator know it).  A connection opens with a hello carrying
 * the listener's secret and the caller's rank; the listener checks both
 * and answers with the caller's secret, so each side knows the other is a
 * member.  Anything else is closed.  The listener serves the hellos side
 * by side, each with its own deadline, so a stranger that connects and
 * says nothing delays no member.  Once every peer is connected the
 * listener accepts nobody: each new connection is closed at once.
 *
 * Writes: the caller's thread sends a frame (header, then payload) on the
 * peer's socket and reports the completion when the kernel has the bytes
 * (the source buffer is then reusable).  A progress thread reads frames
 * from every peer, copies the payload into the registered region, then
 * sets the signal word with a release store, so data is visible before
 * its signal.  A peer that closes without a goodbye or resets becomes
 * MKX_ERR_PEER, a malformed frame MKX_ERR_NET, reported by the next poll.
 *
 * Device memory (a region whose pointer the stager says is on a GPU) goes
 * through two pinned buffers of the endpoint: a sender copies each piece
 * of the payload device -> pinned and sends it (under stage_lock; the
 * frame is the same on the wire); the progress thread receives into the
 * other and copies pinned -> device whenever it is full, the frame ends or
 * the socket runs dry (it serves every peer from one buffer), and sets the
 * signal only after the last copy has finished.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>
#include "core/error.h"
#include "core/log.h"
#include "net/net.h"
#include "net/regions.h"

#define HELLO_MAGIC 0x4d4b5848u /* "MKXH" */
#define FRAME_MAGIC 0x4d4b5846u /* "MKXF" */
#define BLOB_MAGIC 0x4d4b5841u  /* "MKXA" */
#define SECRET_BYTES 16
/* Refused connections are logged one by one up to this many, then only
 * counted (a port scan must not flood the log); close reports the count. */
#define REFUSALS_SHOWN 3

enum { FRAME_DATA = 1, FRAME_BYE = 2 };
enum { PEER_UP = 0, PEER_CLOSED, PEER_FAILED };

typedef struct tcp_blob {
  uint32_t magic;
  uint32_t ipv4; /* network order */
  uint16_t port; /* network order */
  uint16_t pad;
  uint8_t secret[SECRET_BYTES];
} tcp_blob;

typedef struct hello {
  uint32_t magic;
  uint32_t rank;
  uint8_t secret[SECRET_BYTES];
} hello;

typedef struct frame {
  uint32_t magic, type, region, slot;
  uint64_t offset, len, value;
} frame;

typedef struct tcp_peer {
  int fd;
  _Atomic int status; /* PEER_* */
  pthread_mutex_t send_lock;
  /* Receive state: the progress thread's alone. */
  frame hdr;
  size_t hdr_got;
  char *dst; /* where the next byte goes (device: flushed) */
  size_t left;
  int dev;       /* the frame's region is device memory */
  size_t staged; /* bytes in the receive stage, not yet copied */
} tcp_peer;

typedef struct tcp_impl {
  int listen_fd;
  tcp_blob blob;
  tcp_peer *peers;
  const tcp_blob *remote; /* copies of every rank's blob */
  pthread_t thread;
  int thread_started;
  int wake[2];
  _Atomic int stop;
  pthread_mutex_t lock; /* completions, the first error */
  mkx_net_regions rg;   /* registered regions, GPU-memory staging */
  mkx_net_fifo done;
  int err_code;
  char err_msg[320];
  /* Setup's thread, then the progress thread's: never both at once. */
  unsigned refused;
} tcp_impl;

static tcp_impl *impl_of(mkx_net *n) { return n->impl; }

static const mkx_net_stager *stager_override;

void mkx_net_tcp_set_stager(const mkx_net_stager *s) { stager_override = s; }

/* The first failure wins; later polls keep reporting it. */
static void record_error(tcp_impl *t, tcp_peer *p, int code, const char *fmt,
                         ...) MKX_PRINTF(4, 5);
static void record_error(tcp_impl *t, tcp_peer *p, int code, const char *fmt,
                         ...) {
  va_list ap;
  if (p) atomic_store(&p->status, PEER_FAILED);
  pthread_mutex_lock(&t->lock);
  if (!t->err_code) {
    va_start(ap, fmt);
    vsnprintf(t->err_msg, sizeof t->err_msg, fmt, ap);
    va_end(ap);
    t->err_code = code;
  }
  pthread_mutex_unlock(&t->lock);
}

/* Close a connection we will not serve and say why, naming its source;
 * only the first few are logged. */
static void refuse(tcp_impl *t, int rank, int fd,
                   const struct sockaddr_in *from, const char *why) {
  char addr[INET_ADDRSTRLEN];
  if (close(fd) != 0)
    mkx_log(MKX_LOG_DEBUG, "tcp: close of a refused connection: %s",
            strerror(errno));
  if (++t->refused > REFUSALS_SHOWN) return;
  if (!inet_ntop(AF_INET, &from->sin_addr, addr, sizeof addr))
    strcpy(addr, "?");
  mkx_log(MKX_LOG_WARN, "tcp: rank %d refused a connection from %s:%u: %s%s",
          rank, addr, ntohs(from->sin_port), why,
          t->refused == REFUSALS_SHOWN
              ? " (more refusals are only counted until close)"
              : "");
}

static void report_refusals(const tcp_impl *t, int rank) {
  if (t->refused > REFUSALS_SHOWN)
    mkx_log(MKX_LOG_WARN,
            "tcp: rank %d refused %u connections in all "
            "(%u not shown)",
            rank, t->refused, t->refused - REFUSALS_SHOWN);
}

/* ---- address and listener ---- */

static int resolve_bind(const char *want, struct in_addr *out) {
  char host[256];
  const char *name = want;
  if (!*want) {
    if (gethostname(host, sizeof host) != 0)
      return mkx_error(MKX_ERR_NET, "tcp: gethostname: %s", strerror(errno));
    host[sizeof host - 1] = 0;
    name = host;
  } else if (strcmp(want, "lo") == 0 || strcmp(want, "localhost") == 0) {
    name = "127.0.0.1";
  }
  struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM};
  struct addrinfo *res = NULL;
  int rc = getaddrinfo(name, NULL, &hints, &res);
  if (rc != 0 || !res)
    return mkx_error(MKX_ERR_NET,
                     "tcp: cannot resolve bind address '%s' "
                     "(MKX_NET_TCP_BIND): %s",
                     name, gai_strerror(rc));
  *out = ((struct sockaddr_in *)res->ai_addr)->sin_addr;
  freeaddrinfo(res);
  if (out->s_addr == htonl(INADDR_ANY))
    return mkx_error(MKX_ERR_INVALID_ARG,
                     "tcp: bind address '%s' is the "
                     "wildcard; peers need one address to reach",
                     name);
  return MKX_SUCCESS;
}

/* "0" (or empty), or lo-hi with 1 <= lo <= hi <= 65535. */
static int ports_ok(const char *s, unsigned *lo, unsigned *hi) {
  char extra;
  if (strcmp(s, "0") == 0 || !*s) return *lo = *hi = 0, 1;
  return sscanf(s, "%u-%u%c", lo, hi, &extra) == 2 && *lo >= 1 && *lo <= *hi &&
         *hi <= 65535;
}

/* The option row's check: a bad range fails when options are loaded, on
 * every communicator, not only once a transport opens. */
static int valid_ports(const char *s) {
  unsigned lo, hi;
  return ports_ok(s, &lo, &hi);
}

static int parse_ports(const char *s, unsigned *lo, unsigned *hi) {
  if (ports_ok(s, lo, hi)) return MKX_SUCCESS;
  return mkx_error(MKX_ERR_INVALID_ARG,
                   "tcp: MKX_NET_TCP_PORT_RANGE '%s' "
                   "(expected 0 or lo-hi, 1 <= lo <= hi <= 65535)",
                   s);
}

/* One listening socket on ip:port; EADDRINUSE is left in errno so the
 * caller can try the next port of the range. */
static int listen_on(struct in_addr ip, unsigned port, int backlog, int *out) {
  int one = 1;
  struct sockaddr_in sa = {
      .sin_family = AF_INET, .sin_addr = ip, .sin_port = htons((uint16_t)port)};
  /* Non-blocking: a connection reset between poll and accept must not
   * stall anyone in accept. */
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  /* The connections a closed endpoint accepted linger in TIME_WAIT on its
   * port for a minute; without SO_REUSEADDR the next endpoint could not
   * listen there and a small port range runs dry.  Linux still refuses a
   * second listener on a port, so two live endpoints never share one. */
  if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
      bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
      listen(fd, backlog) != 0) {
    int err = errno;
    close(fd);
    errno = err;
    return -1;
  }
  *out = fd;
  return 0;
}

/* The first port of lo..hi we can listen on.  With SO_REUSEADDR two
 * endpoints may both bind one port; the second then fails in listen, with
 * EADDRINUSE too, and moves on to the next port. */
static int listen_in_range(tcp_impl *t, struct in_addr ip, unsigned lo,
                           unsigned hi, int backlog) {
  char addr[INET_ADDRSTRLEN];
  for (unsigned port = lo;; port++) {
    if (listen_on(ip, port, backlog, &t->listen_fd) == 0) return MKX_SUCCESS;
    if (errno != EADDRINUSE || port >= hi)
      return mkx_error(MKX_ERR_NET,
                       "tcp: listen on %s, port %u to %u "
                       "(MKX_NET_TCP_PORT_RANGE): %s",
                       inet_ntop(AF_INET, &ip, addr, sizeof addr), lo, hi,
                       strerror(errno));
  }
}

static int open_listener(tcp_impl *t, const mkx_options *opt, int size) {
  struct in_addr ip;
  unsigned lo, hi;
  MKX_TRY(resolve_bind(opt->net_tcp_bind, &ip));
  MKX_TRY(parse_ports(opt->net_tcp_port_range, &lo, &hi));
  /* Room for every peer and a few dozen strangers ahead of them, so a
   * peer's connection is not dropped (and retried a second later). */
  MKX_TRY(listen_in_range(t, ip, lo, hi, size + 64));
  struct sockaddr_in sa;
  socklen_t sl = sizeof sa;
  if (getsockname(t->listen_fd, (struct sockaddr *)&sa, &sl) != 0)
    return mkx_error(MKX_ERR_NET, "tcp: getsockname: %s", strerror(errno));
  t->blob.magic = BLOB_MAGIC;
  t->blob.ipv4 = sa.sin_addr.s_addr;
  t->blob.port = sa.sin_port;
  if (getrandom(t->blob.secret, SECRET_BYTES, 0) != SECRET_BYTES)
    return mkx_error(MKX_ERR_NET, "tcp: getrandom: %s", strerror(errno));
  return MKX_SUCCESS;
}

/* ---- bounded socket I/O for the setup phase ---- */

static int wait_fd(int fd, short ev, int64_t deadline) {
  for (;;) {
    int64_t left = deadline - mkx_net_now_ms();
    if (left <= 0) return 0;
    struct pollfd pf = {.fd = fd, .events = ev};
    int rc = poll(&pf, 1, (int)(left > 1000 ? 1000 : left));
    if (rc > 0) return 1;
    if (rc < 0 && errno != EINTR) return -1;
  }
}

/* All of buf, or 0 on timeout/EOF/error (errno says which when set). */
static int io_all(int fd, void *buf, size_t len, int out, int64_t deadline) {
  char *p = buf;
  while (len) {
    ssize_t k = out ? send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT)
                    : recv(fd, p, len, MSG_DONTWAIT);
    if (k > 0) {
      p += k, len -= (size_t)k;
      continue;
    }
    if (k == 0) return errno = ECONNRESET, 0;
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return 0;
    if (wait_fd(fd, out ? POLLOUT : POLLIN, deadline) <= 0)
      return errno = ETIMEDOUT, 0;
  }
  return 1;
}

static int set_socket_options(int fd) {
  int one = 1;
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0 ||
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0)
    return mkx_error(MKX_ERR_NET, "tcp: socket options: %s", strerror(errno));
  return MKX_SUCCESS;
}

/* Non-blocking connect bounded by the deadline. */
static int dial(const tcp_blob *b, int peer, int64_t deadline, int *out) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return mkx_error(MKX_ERR_NET, "tcp: socket: %s", strerror(errno));
  struct sockaddr_in sa = {
      .sin_family = AF_INET, .sin_port = b->port, .sin_addr.s_addr = b->ipv4};
  int rc = set_socket_options(fd), err = 0;
  socklen_t el = sizeof err;
  if (rc == MKX_SUCCESS &&
      connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0 &&
      errno != EINPROGRESS)
    err = errno;
  else if (rc == MKX_SUCCESS && wait_fd(fd, POLLOUT, deadline) <= 0)
    err = ETIMEDOUT;
  else if (rc == MKX_SUCCESS &&
           getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0)
    err = errno;
  if (rc == MKX_SUCCESS && err)
    rc = mkx_error(MKX_ERR_NET, "tcp: connect to rank %d at %s:%u: %s", peer,
                   inet_ntoa(sa.sin_addr), ntohs(b->port), strerror(err));
  if (rc != MKX_SUCCESS) {
    close(fd);
    return rc;
  }
  *out = fd;
  return MKX_SUCCESS;
}

/* ---- connection setup ---- */

/* Constant time, so a prober learns nothing from how long a reject takes. */
static int secret_equal(const uint8_t *a, const uint8_t *b) {
  uint8_t d = 0;
  for (int i = 0; i < SECRET_BYTES; i++) d |= a[i] ^ b[i];
  return d == 0;
}

static int send_hello(mkx_net *n, int peer, int64_t deadline) {
  tcp_impl *t = impl_of(n);
  hello h = {.magic = HELLO_MAGIC, .rank = (uint32_t)n->rank};
  memcpy(h.secret, t->remote[peer].secret, SECRET_BYTES);
  MKX_TRY(dial(&t->remote[peer], peer, deadline, &t->peers[peer].fd));
  if (!io_all(t->peers[peer].fd, &h, sizeof h, 1, deadline))
    return mkx_error(MKX_ERR_NET, "tcp: hello to rank %d: %s", peer,
                     strerror(errno));
  return MKX_SUCCESS;
}

/* The listener's answer proves it knows our secret, i.e. it is a member. */
static int check_reply(mkx_net *n, int peer, int64_t deadline) {
  tcp_impl *t = impl_of(n);
  hello h;
  if (!io_all(t->peers[peer].fd, &h, sizeof h, 0, deadline))
    return mkx_error(MKX_ERR_NET, "tcp: no answer from rank %d: %s", peer,
                     strerror(errno));
  if (h.magic != HELLO_MAGIC || h.rank != (uint32_t)peer ||
      !secret_equal(h.secret, t->blob.secret))
    return mkx_error(MKX_ERR_NET,
                     "tcp: rank %d's listener answered with a "
                     "wrong rank or secret: not a member of this "
                     "communicator",
                     peer);
  return MKX_SUCCESS;
}

/* ---- the listener's side of setup: handshakes side by side ---- */

/* How long a connection may take to send its hello, and how many may be
 * waiting at once: strangers (scanners, half-open probes) wait in
 * parallel with the real peers, never ahead of them. */
#define HELLO_WAIT_MS 2000
#define MAX_PENDING 64

typedef struct pending {
  int fd;
  int64_t deadline;
  size_t got;
  hello h;
  struct sockaddr_in from;
} pending;

typedef struct handshakes {
  mkx_net *n;
  int64_t deadline; /* of the whole setup */
  int count, have;  /* waiting connections; lower ranks admitted */
  pending v[MAX_PENDING];
} handshakes;

enum { HS_WAIT = 0, HS_ADMITTED, HS_CLOSED };

/* A whole hello: a member of lower rank not yet connected, with our
 * secret, is answered and kept; anything else is closed. */
static int check_hello(handshakes *hs, pending *pe) {
  mkx_net *n = hs->n;
  tcp_impl *t = impl_of(n);
  const hello *h = &pe->h;
  if (h->magic != HELLO_MAGIC || !secret_equal(h->secret, t->blob.secret) ||
      h->rank >= (uint32_t)n->rank) {
    refuse(t, n->rank, pe->fd, &pe->from, "bad handshake, secret or rank");
    return HS_CLOSED;
  }
  if (t->peers[h->rank].fd >= 0) {
    refuse(t, n->rank, pe->fd, &pe->from,
           "a second connection claiming "
           "a rank already connected");
    return HS_CLOSED;
  }
  hello r = {.magic = HELLO_MAGIC, .rank = (uint32_t)n->rank};
  memcpy(r.secret, t->remote[h->rank].secret, SECRET_BYTES);
  /* A fresh connection takes 24 bytes at once; the bound is for form. */
  if (!io_all(pe->fd, &r, sizeof r, 1, hs->deadline)) {
    refuse(t, n->rank, pe->fd, &pe->from, "the answer to its hello failed");
    return HS_CLOSED;
  }
  t->peers[h->rank].fd = pe->fd;
  return HS_ADMITTED;
}

/* Whatever part of the hello has arrived; HS_WAIT for more. */
static int read_hello(handshakes *hs, pending *pe) {
  tcp_impl *t = impl_of(hs->n);
  ssize_t k = recv(pe->fd, (char *)&pe->h + pe->got, sizeof pe->h - pe->got,
                   MSG_DONTWAIT);
  if (k > 0) {
    pe->got += (size_t)k;
    return pe->got < sizeof pe->h ? HS_WAIT : check_hello(hs, pe);
  }
  const char *why =
      k == 0 ? "closed before its hello was whole" : strerror(errno);
  if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
    if (mkx_net_now_ms() < pe->deadline) return HS_WAIT;
    why = "no whole hello within its time";
  }
  refuse(t, hs->n->rank, pe->fd, &pe->from, why);
  return HS_CLOSED;
}

/* Take one connection off the backlog into the waiting set; when that is
 * full the oldest makes room.  1: maybe more to take, 0: the backlog is
 * empty, -1: accept failed (the error is set). */
static int take_one(handshakes *hs) {
  tcp_impl *t = impl_of(hs->n);
  pending pe = {.deadline = mkx_net_now_ms() + HELLO_WAIT_MS};
  socklen_t fl = sizeof pe.from;
  int one = 1;
  pe.fd = accept4(t->listen_fd, (struct sockaddr *)&pe.from, &fl,
                  SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (pe.fd < 0 && (errno == EINTR || errno == ECONNABORTED))
    return 1; /* that one gave up; others may wait behind it */
  if (pe.fd < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
  if (pe.fd < 0) {
    mkx_error(MKX_ERR_NET, "tcp: rank %d: accept: %s", hs->n->rank,
              strerror(errno));
    return -1;
  }
  if (setsockopt(pe.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) {
    refuse(t, hs->n->rank, pe.fd, &pe.from, strerror(errno));
    return 1;
  }
  if (hs->count == MAX_PENDING) { /* v[0] is the oldest */
    refuse(t, hs->n->rank, hs->v[0].fd, &hs->v[0].from,
           "too many connections waiting to say hello");
    memmove(hs->v, hs->v + 1, (size_t)--hs->count * sizeof *hs->v);
  }
  if (pe.deadline > hs->deadline) pe.deadline = hs->deadline;
  hs->v[hs->count++] = pe;
  return 1;
}

/* "0, 2" for the lower ranks that have not connected. */
static void missing_ranks(mkx_net *n, char *buf, size_t len) {
  size_t used = 0;
  buf[0] = 0;
  for (int r = 0; r < n->rank && used < len; r++)
    if (impl_of(n)->peers[r].fd < 0)
      used +=
          (size_t)snprintf(buf + used, len - used, "%s%d", used ? ", " : "", r);
}

/* One poll over the listener and every waiting connection. */
static int handshake_round(handshakes *hs) {
  mkx_net *n = hs->n;
  struct pollfd pf[MAX_PENDING + 1];
  int64_t now = mkx_net_now_ms(), wake = hs->deadline;
  pf[0] = (struct pollfd){.fd = impl_of(n)->listen_fd, .events = POLLIN};
  for (int i = 0; i < hs->count; i++) {
    pf[i + 1] = (struct pollfd){.fd = hs->v[i].fd, .events = POLLIN};
    if (hs->v[i].deadline < wake) wake = hs->v[i].deadline;
  }
  int64_t left = wake > now ? wake - now : 0;
  if (poll(pf, (nfds_t)hs->count + 1, (int)(left > 1000 ? 1000 : left)) < 0 &&
      errno != EINTR)
    return mkx_error(MKX_ERR_NET, "tcp: rank %d: poll during setup: %s",
                     n->rank, strerror(errno));
  now = mkx_net_now_ms();
  /* From the end, so the entry moved into a closed one's place has been
   * seen already. */
  for (int i = hs->count - 1; i >= 0; i--) {
    if (!pf[i + 1].revents && now < hs->v[i].deadline) continue;
    int st = read_hello(hs, &hs->v[i]);
    if (st == HS_WAIT) continue;
    hs->have += st == HS_ADMITTED;
    memmove(hs->v + i, hs->v + i + 1,
            (size_t)(--hs->count - i) * sizeof *hs->v);
  }
  int more = pf[0].revents != 0;
  for (int k = 0; more > 0 && k < MAX_PENDING; k++) more = take_one(hs);
  return more < 0 ? MKX_ERR_NET : MKX_SUCCESS;
}

/* Every lower rank's connection, each handshake bounded by its own
 * deadline and all of them by the setup's. */
static int accept_lower(mkx_net *n, int64_t deadline) {
  handshakes *hs = calloc(1, sizeof *hs);
  if (!hs) return mkx_error(MKX_ERR_NOMEM, "tcp: handshakes");
  hs->n = n;
  hs->deadline = deadline;
  int rc = MKX_SUCCESS;
  while (rc == MKX_SUCCESS && hs->have < n->rank) {
    char missing[256];
    missing_ranks(n, missing, sizeof missing);
    if (mkx_net_now_ms() >= deadline)
      rc = mkx_error(MKX_ERR_TIMEOUT,
                     "tcp: rank %d: no hello from rank(s) "
                     "%s within %lld ms",
                     n->rank, missing, (long long)n->timeout_ms);
    else
      rc = handshake_round(hs);
  }
  for (int i = 0; i < hs->count; i++)
    refuse(impl_of(n), n->rank, hs->v[i].fd, &hs->v[i].from,
           "setup ended before its hello");
  free(hs);
  return rc;
}

static void *progress(void *arg);

static int tcp_connect(mkx_net *n, const void *blobs, size_t len) {
  tcp_impl *t = impl_of(n);
  int64_t deadline = mkx_net_now_ms() + n->timeout_ms;
  tcp_blob *copy = malloc(len * (size_t)n->size);
  if (!copy) return mkx_error(MKX_ERR_NOMEM, "tcp: blobs");
  memcpy(copy, blobs, len * (size_t)n->size);
  t->remote = copy;
  for (int r = 0; r < n->size; r++)
    if (copy[r].magic != BLOB_MAGIC)
      return mkx_error(MKX_ERR_NET, "tcp: rank %d's address is garbled", r);
  /* Hellos first (they wait in the peers' backlogs), then accept, then the
   * answers: nobody waits on a rank that is itself waiting. */
  for (int r = n->rank + 1; r < n->size; r++)
    MKX_TRY(send_hello(n, r, deadline));
  MKX_TRY(accept_lower(n, deadline));
  for (int r = n->rank + 1; r < n->size; r++)
    MKX_TRY(check_reply(n, r, deadline));
  if (pipe2(t->wake, O_CLOEXEC | O_NONBLOCK) != 0)
    return mkx_error(MKX_ERR_NET, "tcp: pipe: %s", strerror(errno));
  int rc = pthread_create(&t->thread, NULL, progress, n);
  if (rc != 0)
    return mkx_error(MKX_ERR_NET, "tcp: progress thread: %s", strerror(rc));
  t->thread_started = 1;
  return MKX_SUCCESS;
}

/* ---- the progress thread: receive side ---- */

static int start_frame(mkx_net *n, tcp_peer *p, int peer) {
  tcp_impl *t = impl_of(n);
  frame *f = &p->hdr;
  if (f->magic != FRAME_MAGIC ||
      (f->type != FRAME_DATA && f->type != FRAME_BYE)) {
    record_error(t, p, MKX_ERR_NET,
                 "tcp: rank %d sent a malformed frame "
                 "(magic %#x type %u)",
                 peer, f->magic, f->type);
    return 0;
  }
  if (f->type == FRAME_BYE) {
    atomic_store(&p->status, PEER_CLOSED);
    return 0;
  }
  mkx_net_region rg;
  int ok = mkx_net_regions_find(&t->rg, f->region, f->offset, f->len, &rg) &&
           f->slot < n->num_signals;
  p->dst = ok ? rg.base + f->offset : NULL;
  p->dev = ok && rg.dev >= 0;
  if (!ok) {
    record_error(t, p, MKX_ERR_NET,
                 "tcp: rank %d wrote %llu bytes at %llu "
                 "of region %u, signal %u: outside what rank %d registered",
                 peer, (unsigned long long)f->len,
                 (unsigned long long)f->offset, f->region, f->slot, n->rank);
    return 0;
  }
  p->left = f->len;
  return 1;
}

static void finish_frame(mkx_net *n, tcp_peer *p) {
  /* Release: the payload stores above are visible before the signal. */
  atomic_store_explicit(&n->signals[p->hdr.slot], p->hdr.value,
                        memory_order_release);
  p->hdr_got = 0;
  p->dst = NULL;
}

/* Copy what the receive stage holds to the frame's device region: when
 * the stage is full, the frame ends, or the socket runs dry (the next
 * peer's bytes go into the same stage).  0 once the endpoint failed. */
static int flush_stage(mkx_net *n, tcp_peer *p, int peer) {
  tcp_impl *t = impl_of(n);
  if (!p->staged) return 1;
  int rc =
      t->rg.stager->to_device(t->rg.stage_ctx, p->dst, t->rg.rstage, p->staged);
  if (rc != MKX_SUCCESS) {
    record_error(t, p, rc,
                 "tcp: %zu bytes from rank %d into device memory "
                 "at %p: %s",
                 p->staged, peer, (void *)p->dst, MKX_Get_last_error());
    return 0;
  }
  p->dst += p->staged;
  p->staged = 0;
  return 1;
}

/* Read what the socket has; returns 0 once the peer is done or failed. */
static int drain_peer(mkx_net *n, int peer) {
  tcp_impl *t = impl_of(n);
  tcp_peer *p = &t->peers[peer];
  for (;;) {
    int in_hdr = p->hdr_got < sizeof p->hdr;
    char *dst = in_hdr ? (char *)&p->hdr + p->hdr_got : p->dst;
    size_t want = in_hdr ? sizeof p->hdr - p->hdr_got : p->left;
    if (!in_hdr && p->dev) { /* into the stage, never past it */
      size_t room = t->rg.stager->stage_bytes - p->staged;
      dst = t->rg.rstage + p->staged;
      want = want < room ? want : room;
    }
    ssize_t k = want ? recv(p->fd, dst, want, MSG_DONTWAIT) : 0;
    if (want && k == 0) {
      record_error(t, p, MKX_ERR_PEER,
                   "tcp: rank %d closed its connection "
                   "without a goodbye (the process died?)",
                   peer);
      return 0;
    }
    if (k < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
        return flush_stage(n, p, peer);
      record_error(t, p, MKX_ERR_PEER, "tcp: connection to rank %d broke: %s",
                   peer, strerror(errno));
      return 0;
    }
    if (in_hdr) {
      p->hdr_got += (size_t)k;
      if (p->hdr_got == sizeof p->hdr && !start_frame(n, p, peer)) return 0;
      if (p->hdr_got == sizeof p->hdr && p->left == 0) finish_frame(n, p);
    } else if (p->dev) {
      p->staged += (size_t)k;
      p->left -= (size_t)k;
      if ((p->left == 0 || p->staged == t->rg.stager->stage_bytes) &&
          !flush_stage(n, p, peer))
        return 0;
      if (p->left == 0) finish_frame(n, p); /* after the copy */
    } else {
      p->dst += k;
      p->left -= (size_t)k;
      if (p->left == 0) finish_frame(n, p);
    }
  }
}

/* After setup nobody may connect: close whatever arrives. */
static void refuse_newcomer(tcp_impl *t, int rank) {
  struct sockaddr_in from;
  socklen_t fl = sizeof from;
  int fd = accept4(t->listen_fd, (struct sockaddr *)&from, &fl, SOCK_CLOEXEC);
  if (fd >= 0) refuse(t, rank, fd, &from, "setup is over");
}

static void *progress(void *arg) {
  mkx_net *n = arg;
  tcp_impl *t = impl_of(n);
  (void)pthread_setname_np(pthread_self(), "mkx-tcp");
  struct pollfd *pf = calloc((size_t)n->size + 2, sizeof *pf);
  int *who = calloc((size_t)n->size + 2, sizeof *who);
  if (!pf || !who) {
    record_error(t, NULL, MKX_ERR_NOMEM, "tcp: progress thread memory");
    free(pf);
    free(who);
    return NULL;
  }
  while (!atomic_load(&t->stop)) {
    int np = 0;
    pf[np++] = (struct pollfd){.fd = t->wake[0], .events = POLLIN};
    pf[np++] = (struct pollfd){.fd = t->listen_fd, .events = POLLIN};
    for (int r = 0; r < n->size; r++)
      if (r != n->rank && atomic_load(&t->peers[r].status) == PEER_UP)
        who[np] = r,
        pf[np++] = (struct pollfd){.fd = t->peers[r].fd, .events = POLLIN};
    if (poll(pf, (nfds_t)np, 200) < 0 && errno != EINTR) {
      record_error(t, NULL, MKX_ERR_NET, "tcp: poll: %s", strerror(errno));
      break;
    }
    if (pf[1].revents) refuse_newcomer(t, n->rank);
    for (int i = 2; i < np; i++)
      if (pf[i].revents) drain_peer(n, who[i]);
  }
  free(pf);
  free(who);
  return NULL;
}

/* ---- the provider functions ---- */

static int tcp_probe(const mkx_net_params *p) {
  (void)p;
  return MKX_SUCCESS; /* sockets are everywhere; open reports bind errors */
}

static int tcp_open(mkx_net *n, const mkx_net_params *p) {
  tcp_impl *t = calloc(1, sizeof *t);
  if (!t) return mkx_error(MKX_ERR_NOMEM, "tcp: endpoint");
  n->impl = t;
  t->listen_fd = t->wake[0] = t->wake[1] = -1;
  mkx_net_regions_init(
      &t->rg, "tcp", stager_override ? stager_override : mkx_net_cuda_stager());
  pthread_mutex_init(&t->lock, NULL);
  t->peers = calloc((size_t)p->size, sizeof *t->peers);
  int rc = t->peers ? mkx_net_signals_alloc(p->num_signals, &n->signals)
                    : mkx_error(MKX_ERR_NOMEM, "tcp: peers");
  for (int r = 0; t->peers && r < p->size; r++) {
    t->peers[r].fd = -1;
    pthread_mutex_init(&t->peers[r].send_lock, NULL);
  }
  if (rc == MKX_SUCCESS) rc = open_listener(t, p->opt, p->size);
  if (rc != MKX_SUCCESS) n->prov->close(n);
  return rc;
}

static int tcp_address(mkx_net *n, const void **blob, size_t *len) {
  *blob = &impl_of(n)->blob;
  *len = sizeof(tcp_blob);
  return MKX_SUCCESS;
}

static int tcp_reg(mkx_net *n, const mkx_net_reg_args *a, mkx_net_mr *mr) {
  return mkx_net_regions_reg(&impl_of(n)->rg, a, mr);
}

static int tcp_dereg(mkx_net *n, mkx_net_mr *mr) {
  return mkx_net_regions_dereg(&impl_of(n)->rg, mr);
}

/* iov[0..cnt), whole, before the deadline. */
static int send_iov(mkx_net *n, int peer, struct iovec *iov, int cnt,
                    int64_t deadline) {
  tcp_impl *t = impl_of(n);
  tcp_peer *p = &t->peers[peer];
  struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)cnt};
  while (m.msg_iovlen) {
    ssize_t k = sendmsg(p->fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      record_error(t, p, MKX_ERR_PEER, "tcp: send to rank %d failed: %s", peer,
                   strerror(errno));
      return mkx_error(MKX_ERR_PEER, "tcp: send to rank %d failed: %s", peer,
                       strerror(errno));
    }
    if (k < 0 && wait_fd(p->fd, POLLOUT, deadline) <= 0)
      return mkx_error(MKX_ERR_TIMEOUT,
                       "tcp: rank %d took no data for %lld "
                       "ms",
                       peer, (long long)n->timeout_ms);
    for (size_t done = k > 0 ? (size_t)k : 0; m.msg_iovlen && done;) {
      size_t take = done < m.msg_iov->iov_len ? done : m.msg_iov->iov_len;
      m.msg_iov->iov_base = (char *)m.msg_iov->iov_base + take;
      m.msg_iov->iov_len -= take;
      done -= take;
      if (m.msg_iov->iov_len == 0) m.msg_iov++, m.msg_iovlen--;
    }
    while (m.msg_iovlen && m.msg_iov->iov_len == 0) m.msg_iov++, m.msg_iovlen--;
  }
  return MKX_SUCCESS;
}

/* The header and payload, whole, within the timeout. */
static int send_frame(mkx_net *n, int peer, const frame *f, const void *data) {
  struct iovec iov[2] = {{(void *)f, sizeof *f}, {(void *)data, f->len}};
  return send_iov(n, peer, iov, data ? 2 : 1, mkx_net_now_ms() + n->timeout_ms);
}

/* A frame whose payload is device memory: piece by piece through the send
 * stage.  The first piece is copied before the header goes, so a bad
 * source fails with nothing on the wire; a failure later leaves a frame
 * cut short, so the peer is marked failed. */
static int send_frame_staged(mkx_net *n, int peer, const frame *f,
                             const char *src) {
  tcp_impl *t = impl_of(n);
  mkx_net_regions *g = &t->rg;
  const mkx_net_stager *s = g->stager;
  int64_t deadline = mkx_net_now_ms() + n->timeout_ms;
  size_t off = 0, k = f->len < s->stage_bytes ? f->len : s->stage_bytes;
  pthread_mutex_lock(&g->stage_lock);
  int rc = s->to_host(g->stage_ctx, g->sstage, src, k);
  if (rc == MKX_SUCCESS) {
    struct iovec iov[2] = {{(void *)f, sizeof *f}, {g->sstage, k}};
    rc = send_iov(n, peer, iov, 2, deadline);
  }
  for (off = k; rc == MKX_SUCCESS && off < f->len; off += k) {
    k = f->len - off < s->stage_bytes ? f->len - off : s->stage_bytes;
    rc = s->to_host(g->stage_ctx, g->sstage, src + off, k);
    if (rc == MKX_SUCCESS) {
      struct iovec iov = {g->sstage, k};
      rc = send_iov(n, peer, &iov, 1, deadline);
    }
    if (rc != MKX_SUCCESS)
      record_error(t, &t->peers[peer], rc,
                   "tcp: a write of %llu bytes to "
                   "rank %d broke off after %zu bytes: %s",
                   (unsigned long long)f->len, peer, off, MKX_Get_last_error());
  }
  pthread_mutex_unlock(&g->stage_lock);
  return rc;
}

static int push_completion(tcp_impl *t, uint64_t cookie, int peer) {
  pthread_mutex_lock(&t->lock);
  int rc = mkx_net_fifo_push(&t->done, cookie, peer);
  pthread_mutex_unlock(&t->lock);
  return rc;
}

static int peer_gone(mkx_net *n, int peer) {
  int st = atomic_load(&impl_of(n)->peers[peer].status);
  if (st == PEER_UP) return MKX_SUCCESS;
  return mkx_error(MKX_ERR_PEER, "tcp: rank %d %s", peer,
                   st == PEER_CLOSED ? "closed its endpoint"
                                     : "failed earlier (see the first error)");
}

static int tcp_write_signal(mkx_net *n, int peer, const mkx_net_mr *src,
                            size_t src_off, const mkx_net_rkey *dst,
                            size_t dst_off, size_t len, uint32_t slot,
                            uint64_t value, uint64_t cookie) {
  tcp_impl *t = impl_of(n);
  frame f = {FRAME_MAGIC, FRAME_DATA, dst->id, slot, dst_off, len, value};
  int staged = len && src->kind == MKX_NET_MEM_DEVICE;
  if (staged && t->rg.stage_dev < 0)
    return mkx_error(MKX_ERR_INVALID_ARG,
                     "tcp: region %u is device memory "
                     "this endpoint did not register",
                     src->id);
  MKX_TRY(peer_gone(n, peer));
  pthread_mutex_lock(&t->peers[peer].send_lock);
  int rc = staged ? send_frame_staged(n, peer, &f, (char *)src->base + src_off)
                  : send_frame(n, peer, &f,
                               len ? (char *)src->base + src_off : NULL);
  pthread_mutex_unlock(&t->peers[peer].send_lock);
  MKX_TRY(rc);
  /* The kernel holds a copy now: the source may be reused. */
  return push_completion(t, cookie, peer);
}

static int tcp_poll(mkx_net *n, mkx_net_completion *done, int max, int *ndone) {
  tcp_impl *t = impl_of(n);
  pthread_mutex_lock(&t->lock);
  int code = t->err_code;
  *ndone = code ? 0 : mkx_net_fifo_pop(&t->done, done, max);
  pthread_mutex_unlock(&t->lock);
  if (code) return mkx_error(code, "%s (seen by rank %d)", t->err_msg, n->rank);
  return MKX_SUCCESS;
}

/* Say goodbye to every live peer so it does not take our exit for a crash. */
static void say_goodbye(mkx_net *n) {
  tcp_impl *t = impl_of(n);
  frame bye = {FRAME_MAGIC, FRAME_BYE, 0, 0, 0, 0, 0};
  int64_t saved = n->timeout_ms;
  n->timeout_ms = 1000; /* a peer too busy to take 40 bytes is failing */
  for (int r = 0; r < n->size; r++) {
    if (t->peers[r].fd < 0 || atomic_load(&t->peers[r].status) != PEER_UP)
      continue;
    pthread_mutex_lock(&t->peers[r].send_lock);
    if (send_frame(n, r, &bye, NULL) != MKX_SUCCESS)
      mkx_log(MKX_LOG_DEBUG, "tcp: goodbye to rank %d: %s", r,
              MKX_Get_last_error());
    pthread_mutex_unlock(&t->peers[r].send_lock);
  }
  n->timeout_ms = saved;
}

static void tcp_close(mkx_net *n) {
  tcp_impl *t = impl_of(n);
  if (!t) return;
  if (t->thread_started) {
    say_goodbye(n);
    atomic_store(&t->stop, 1);
    if (write(t->wake[1], "x", 1) < 0)
      mkx_log(MKX_LOG_DEBUG, "tcp: wake: %s", strerror(errno));
    pthread_join(t->thread, NULL);
  }
  report_refusals(t, n->rank);
  for (int r = 0; t->peers && r < n->size; r++) {
    if (t->peers[r].fd >= 0) close(t->peers[r].fd);
    pthread_mutex_destroy(&t->peers[r].send_lock);
  }
  for (int i = 0; i < 2; i++)
    if (t->wake[i] >= 0) close(t->wake[i]);
  if (t->listen_fd >= 0) close(t->listen_fd);
  mkx_net_regions_fini(&t->rg);
  pthread_mutex_destroy(&t->lock);
  free((void *)t->remote);
  free(t->peers);
  mkx_net_fifo_free(&t->done);
  free((void *)n->signals);
  free(t);
  n->impl = NULL;
  n->signals = NULL;
}

int mkx_net_tcp_port(const mkx_net *n) {
  if (!n || n->prov != &mkx_net_tcp_provider || !n->impl) return -1;
  return ntohs(((const tcp_impl *)n->impl)->blob.port);
}

static const mkx_option_desc tcp_options[] = {
    {"net_tcp_bind", MKX_OPT_STRING, offsetof(mkx_options, net_tcp_bind), "",
     "IPv4 address, host name or 'lo'",
     "Where the tcp transport listens: an IPv4 address or host name, or "
     "'lo' for 127.0.0.1 (empty: the address of this host's name)."},
    {"net_tcp_port_range", MKX_OPT_STRING,
     offsetof(mkx_options, net_tcp_port_range), "0", "0 or lo-hi",
     "TCP ports the tcp transport may listen on: 0 lets the kernel choose, "
     "lo-hi tries each port of the range in turn (for firewalled hosts).",
     0, valid_ports},
    {NULL, 0, 0, NULL, NULL, NULL},
};

const mkx_net_provider mkx_net_tcp_provider = {
    .name = "tcp",
    .caps = MKX_NET_CAP_ORDERED, /* one stream per peer; GPU memory staged */
    .signal_bits = 64,
    .options = tcp_options,
    .probe = tcp_probe,
    .open = tcp_open,
    .address = tcp_address,
    .connect = tcp_connect,
    .reg = tcp_reg,
    .dereg = tcp_dereg,
    .write_signal = tcp_write_signal,
    .poll = tcp_poll,
    .close = tcp_close,
};
