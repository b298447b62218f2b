/* Twelve tcp endpoints made and freed back to back, every rank listening
 * in one range of 4 ports on 127.0.0.1 (at most 4 ranks).  Each cycle the
 * ranks close from the highest down, so the higher ranks close first and
 * every connection a listener accepted lingers in TIME_WAIT on that
 * listener's port: the next cycle must listen there again.  Every cycle
 * must connect, carry one write each way and close: 12 of 12. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include "net_main.h"
#include "tcp_endpoint.h"

#define CYCLES 12
#define PORTS 4
#define TIMEOUT_MS 10000

/* Rank 0 picks PORTS free ports in a row below the ephemeral range,
 * varied by its pid so that concurrent runs of the test do not meet; a
 * port still in TIME_WAIT from an earlier run is not free here (no
 * SO_REUSEADDR in the probe). */
static int port_free(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET,
                           .sin_port = htons((uint16_t)port),
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  int ok = fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
  if (fd >= 0) close(fd);
  return ok;
}

static int pick_base(void) {
  int base = 0;
  for (int i = 0; rank == 0 && i < 500 && !base; i++) {
    int b = 20000 + (int)((getpid() + i * 97) % 2500) * PORTS, ok = 1;
    for (int k = 0; k < PORTS && ok; k++) ok = port_free(b + k);
    if (ok) base = b;
  }
  MPI_Bcast(&base, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return base;
}

/* One write to every peer (slot = our rank, value = cycle + 1), then wait
 * for every peer's. */
static int exchange(const mkx_oob *oob, mkx_net *n, int cycle) {
  static uint64_t buf[8];
  mkx_net_mr mr;
  mkx_net_rkey keys[8];
  mkx_net_reg_args a = {buf, sizeof buf, MKX_NET_MEM_HOST, -1, 0};
  MKX_TRY(mkx_net_reg(n, &a, &mr));
  int rc = mkx_net_exchange_keys(n, oob, &mr, keys);
  for (int p = 0; p < size && rc == MKX_SUCCESS; p++)
    if (p != rank)
      rc = mkx_net_write_signal(n, p, &mr, 0, &keys[p],
                                (size_t)rank * sizeof *buf, sizeof *buf,
                                (uint32_t)rank, (uint64_t)cycle + 1, 0);
  for (int p = 0; p < size && rc == MKX_SUCCESS; p++)
    if (p != rank)
      rc = mkx_net_wait_signal(n, (uint32_t)p, (uint64_t)cycle + 1, TIMEOUT_MS,
                               NULL);
  if (rc == MKX_SUCCESS)
    rc = oob->barrier(oob->ctx, TIMEOUT_MS, "test barrier");
  mkx_net_dereg(n, &mr);
  return rc;
}

/* Highest rank first: its accepted connections end in TIME_WAIT on its
 * listening port. */
static void close_in_order(mkx_net *n) {
  for (int r = size - 1; r >= 0; r--) {
    if (r == rank && n) mkx_net_close(n);
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

static int cycle(const mkx_oob *oob, const char *range, int lo, int c) {
  mkx_net *n = NULL;
  int rc = tcp_ep_open(oob, range, TIMEOUT_MS, &n);
  int port = rc == MKX_SUCCESS ? mkx_net_tcp_port(n) : -1;
  if (!CHECK(rc == MKX_SUCCESS && port >= lo && port < lo + PORTS,
             "cycle %d: listen in %s (port %d)", c, range, port))
    rc = MKX_ERR_NET;
  /* Everyone or no one goes on, so a failed rank cannot strand the rest
   * in the address exchange. */
  int ok = tcp_ep_all_ok(rc);
  if (ok) {
    rc = mkx_net_connect(n, oob);
    CHECK_RC(rc, MKX_SUCCESS, "cycle %d: connect", c);
    ok = tcp_ep_all_ok(rc);
  }
  if (ok) {
    rc = exchange(oob, n, c);
    CHECK_RC(rc, MKX_SUCCESS, "cycle %d: one write each way", c);
    ok = tcp_ep_all_ok(rc);
  }
  close_in_order(n);
  return ok;
}

static int run(const mkx_oob *oob) {
  if (size > PORTS) {
    if (rank == 0)
      printf("test_net_tcp_cycles: %d ranks, %d ports\n", size, PORTS);
    return MKX_SUCCESS;
  }
  int lo = pick_base(), good = 0;
  if (!CHECK(lo > 0, "no %d free ports in a row", PORTS)) return MKX_SUCCESS;
  char range[32];
  snprintf(range, sizeof range, "%d-%d", lo, lo + PORTS - 1);
  for (int c = 0; c < CYCLES; c++) good += cycle(oob, range, lo, c);
  if (rank == 0)
    printf("test_net_tcp_cycles: %d of %d cycles succeeded on ports %s\n", good,
           CYCLES, range);
  CHECK(good == CYCLES, "%d of %d cycles succeeded", good, CYCLES);
  return MKX_SUCCESS;
}

int main(int argc, char **argv) {
  return net_main(argc, argv, "test_net_tcp_cycles", run);
}
