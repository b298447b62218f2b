/* Strangers queued ahead of the real peers must not slow tcp setup down.
 * Each rank times a clean setup, then one with 10 connections to its own
 * listener made before any rank dials (half of them silent, half sending
 * half a hello and then nothing).  The slowest rank's setup with the
 * strangers may take at most a second longer than the slowest clean one
 * (a stranger is given 2 s to say hello, so waiting on even one of them in
 * turn fails this).  Every stranger is then closed without an answer, and
 * the warnings about them name their address and stop after the first
 * few, with a count of all of them at close. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/log.h"
#include "net_main.h"
#include "tcp_endpoint.h"

#define INTRUDERS 10
#define SHOWN 3 /* refusals logged one by one; tcp.c's REFUSALS_SHOWN */
#define TIMEOUT_MS 10000
#define SLACK_MS 1000

/* A timed setup; the slowest rank's time, or -1 if any rank failed. */
static int64_t timed_setup(const mkx_oob *oob, mkx_net *n) {
  MPI_Barrier(MPI_COMM_WORLD); /* every stranger is queued by now */
  int64_t t0 = mkx_net_now_ms();
  int rc = mkx_net_connect(n, oob);
  int64_t took = mkx_net_now_ms() - t0;
  CHECK_RC(rc, MKX_SUCCESS, "connect");
  return tcp_ep_all_ok(rc) ? tcp_ep_max(took) : -1;
}

static void knock_all(int port, int *fd) {
  const uint32_t half_hello[3] = {0x4d4b5848u, 0, 0x5a5a5a5a}; /* of 24 */
  for (int i = 0; i < INTRUDERS; i++) {
    fd[i] = tcp_ep_knock(port, half_hello, i % 2 ? sizeof half_hello : 0);
    CHECK(fd[i] >= 0, "stranger %d connects to port %d", i, port);
  }
}

/* stderr into a file while the strangers are refused, to read the
 * warnings back; returns the saved stderr. */
static int capture_stderr(FILE **log) {
  fflush(stderr);
  int saved = dup(2);
  *log = tmpfile();
  if (saved < 0 || !*log || dup2(fileno(*log), 2) < 0) return -1;
  return saved;
}

static void check_warnings(FILE *log) {
  char line[1200];
  int shown = 0, summary = 0, unnamed = 0;
  rewind(log);
  while (fgets(line, sizeof line, log)) {
    if (!strstr(line, "refused")) continue;
    if (strstr(line, "in all")) {
      summary += strstr(line, "refused 10 connections in all") != NULL;
      continue;
    }
    shown++;
    unnamed += strstr(line, "127.0.0.1:") == NULL;
    printf("rank %d: %s", rank, line);
  }
  CHECK(shown == SHOWN, "%d refusals shown one by one, want %d", shown, SHOWN);
  CHECK(unnamed == 0, "%d refusal warnings without the address", unnamed);
  CHECK(summary == 1, "one summary of all 10 refusals (%d)", summary);
}

static int64_t intruded_setup(const mkx_oob *oob) {
  mkx_net *n = NULL;
  int fd[INTRUDERS];
  FILE *log = NULL;
  if (!CHECK_RC(tcp_ep_open(oob, "0", TIMEOUT_MS, &n), MKX_SUCCESS, "open"))
    return -1;
  knock_all(mkx_net_tcp_port(n), fd);
  int saved = capture_stderr(&log);
  CHECK(saved >= 0, "capture stderr");
  int64_t took = timed_setup(oob, n);
  int refused = 0;
  int64_t until = mkx_net_now_ms() + 5000;
  for (int i = 0; i < INTRUDERS; i++) {
    int64_t left = until - mkx_net_now_ms();
    refused += fd[i] >= 0 && tcp_ep_refused(fd[i], left > 0 ? (int)left : 0);
  }
  CHECK(refused == INTRUDERS, "%d of %d strangers closed unanswered", refused,
        INTRUDERS);
  MPI_Barrier(MPI_COMM_WORLD);
  mkx_net_close(n);
  if (saved >= 0) {
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    check_warnings(log);
  }
  if (log) fclose(log);
  return took;
}

static int run(const mkx_oob *oob) {
  mkx_net *n = NULL;
  mkx_log_set_level(MKX_LOG_WARN);
  if (!CHECK_RC(tcp_ep_open(oob, "0", TIMEOUT_MS, &n), MKX_SUCCESS, "open"))
    return MKX_ERR_NET;
  int64_t clean = timed_setup(oob, n);
  MPI_Barrier(MPI_COMM_WORLD);
  mkx_net_close(n);
  int64_t intruded = intruded_setup(oob);
  if (rank == 0)
    printf(
        "test_net_tcp_intruders: setup %lld ms clean, %lld ms with %d "
        "strangers per rank\n",
        (long long)clean, (long long)intruded, INTRUDERS);
  CHECK(clean >= 0 && intruded >= 0 && intruded <= clean + SLACK_MS,
        "setup took %lld ms with strangers, %lld ms clean", (long long)intruded,
        (long long)clean);
  return MKX_SUCCESS;
}

int main(int argc, char **argv) {
  return net_main(argc, argv, "test_net_tcp_intruders", run);
}
