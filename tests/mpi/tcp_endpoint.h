/* What the tcp setup tests share: an endpoint on loopback with the
 * options a test names, the largest of a value over the ranks, and a
 * stranger's connection to a listener. */
#ifndef MKX_TESTS_TCP_ENDPOINT_H
#define MKX_TESTS_TCP_ENDPOINT_H

#include <arpa/inet.h>
#include <mpi.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <stdio.h>
#include "boot/oob_mpi.h"
#include "core/error.h"
#include "core/options.h"
#include "net/net.h"

/* Open a tcp endpoint bound to 127.0.0.1, on `ports` ("0" or "lo-hi"). */
static inline int tcp_ep_open(const mkx_oob *oob, const char *ports,
                              int64_t timeout_ms, mkx_net **n) {
  static mkx_options opt; /* the endpoint reads it until it is closed */
  MKX_TRY(mkx_net_options_register());
  MKX_TRY(mkx_options_load(&opt, MPI_INFO_NULL));
  opt.net = MKX_NET_TCP;
  strcpy(opt.net_tcp_bind, "lo");
  snprintf(opt.net_tcp_port_range, sizeof opt.net_tcp_port_range, "%s", ports);
  mkx_net_params p = {.rank = oob->rank,
                      .size = oob->size,
                      .num_signals = (uint32_t)oob->size,
                      .timeout_ms = timeout_ms,
                      .opt = &opt};
  return mkx_net_open(&p, n);
}

/* Every rank learns whether every rank succeeded. */
static inline int tcp_ep_all_ok(int rc) {
  int ok = rc == MKX_SUCCESS, all = 0;
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all;
}

static inline int64_t tcp_ep_max(int64_t v) {
  long long in = v, out = 0;
  MPI_Allreduce(&in, &out, 1, MPI_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
  return out;
}

/* A connection to 127.0.0.1:port that sends `len` bytes (maybe none). */
static inline int tcp_ep_knock(int port, const void *payload, size_t len) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET,
                           .sin_port = htons((uint16_t)port),
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
      (len && send(fd, payload, len, MSG_NOSIGNAL) != (ssize_t)len)) {
    if (fd >= 0) close(fd);
    return -1;
  }
  return fd;
}

/* Refused: the listener closes the connection (EOF or reset) within `ms`
 * without sending a byte. Closes fd. */
static inline int tcp_ep_refused(int fd, int ms) {
  struct pollfd pf = {.fd = fd, .events = POLLIN};
  char c;
  int rc = poll(&pf, 1, ms) == 1 && recv(fd, &c, 1, 0) <= 0;
  close(fd);
  return rc;
}

#endif
