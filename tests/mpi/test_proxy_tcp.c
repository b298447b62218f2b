/* The proxy over the real tcp transport on 2-4 ranks: a producer posts
 * hundreds of writes with signals through an 8-entry ring (wrap-around),
 * reusing each send chunk only after its previous write completed;
 * receivers wait on the signals and check the data; the transport's byte
 * counters equal what was posted. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "boot/oob_mpi.h"
#include "core/error.h"
#include "core/options.h"
#include "proxy/proxy.h"
#include "mkx.h"
#include "net_main.h"

#define CHUNK 4096
#define CHUNKS 16
#define MSGS 300
#define TIMEOUT_MS 20000

static int dest_of(int src, int i) { return (src + 1 + i % (size - 1)) % size; }

static unsigned char pattern(int src, int dst, int i, int byte) {
  return (unsigned char)(src * 31 + dst * 17 + i * 7 + byte);
}

/* Post every message of this rank; chunk i % CHUNKS is refilled only
 * after the write that used it last has completed. */
static int produce(mkx_proxy_ring *ring, unsigned char *send) {
  uint64_t seq[MSGS];
  uint64_t count[8] = {0};
  for (int i = 0; i < MSGS; i++) {
    int dst = dest_of(rank, i), chunk = i % CHUNKS;
    if (i >= CHUNKS) MKX_TRY(mkx_proxy_wait(ring, seq[i - CHUNKS], TIMEOUT_MS));
    for (int b = 0; b < CHUNK; b++)
      send[chunk * CHUNK + b] = pattern(rank, dst, i, b);
    mkx_proxy_cmd c = {.op = MKX_PROXY_OP_WRITE,
                       .peer = dst,
                       .src = 0,
                       .dst = 1,
                       .src_off = (uint64_t)chunk * CHUNK,
                       .dst_off = ((uint64_t)rank * CHUNKS + chunk) * CHUNK,
                       .len = CHUNK,
                       .slot = (uint32_t)rank,
                       .value = ++count[dst]};
    MKX_TRY(mkx_proxy_post(ring, &c, &seq[i], TIMEOUT_MS));
  }
  return mkx_proxy_wait(ring, seq[MSGS - 1], TIMEOUT_MS);
}

/* Wait for every peer's last signal, then check each chunk holds the
 * last message written to it. */
static void check_received(mkx_net *n, const unsigned char *recv) {
  for (int src = 0; src < size; src++) {
    if (src == rank) continue;
    uint64_t want = 0;
    int last[CHUNKS];
    for (int c = 0; c < CHUNKS; c++) last[c] = -1;
    for (int i = 0; i < MSGS; i++)
      if (dest_of(src, i) == rank) want++, last[i % CHUNKS] = i;
    int rc = mkx_net_wait_signal(n, (uint32_t)src, want, TIMEOUT_MS, NULL);
    CHECK(rc == MKX_SUCCESS, "signal from rank %d reached %llu", src,
          (unsigned long long)want);
    for (int c = 0; c < CHUNKS && rc == MKX_SUCCESS; c++) {
      const unsigned char *got = recv + ((size_t)src * CHUNKS + c) * CHUNK;
      int bad = 0;
      for (int b = 0; last[c] >= 0 && b < CHUNK && !bad; b++)
        bad = got[b] != pattern(src, rank, last[c], b);
      CHECK(!bad, "chunk %d from rank %d holds message %d", c, src, last[c]);
    }
  }
}

static void check_bytes(mkx_net *n) {
  for (int q = 0; q < size; q++) {
    uint64_t want = 0;
    for (int i = 0; q != rank && i < MSGS; i++) want += dest_of(rank, i) == q;
    CHECK(mkx_net_bytes_sent(n, q) == want * CHUNK,
          "bytes to rank %d: %llu, want %llu", q,
          (unsigned long long)mkx_net_bytes_sent(n, q),
          (unsigned long long)(want * CHUNK));
  }
}

static int run(const mkx_oob *oob) {
  static mkx_options opt;
  mkx_net *n = NULL;
  mkx_proxy *p = NULL;
  mkx_net_mr smr, rmr;
  mkx_net_rkey skeys[8], rkeys[8];
  uint32_t si, ri;
  unsigned char *send = calloc(CHUNKS, CHUNK);
  unsigned char *recv = calloc((size_t)size * CHUNKS, CHUNK);
  MKX_TRY(mkx_net_options_register());
  MKX_TRY(mkx_options_load(&opt, MPI_INFO_NULL));
  opt.net = MKX_NET_TCP;
  strcpy(opt.net_tcp_bind, "lo"); /* tests stay on loopback */
  mkx_net_params prm = {.rank = rank,
                        .size = size,
                        .num_signals = (uint32_t)size,
                        .timeout_ms = TIMEOUT_MS,
                        .opt = &opt};
  MKX_TRY(mkx_net_open(&prm, &n));
  MKX_TRY(mkx_net_connect(n, oob));
  mkx_net_reg_args sa = {send, (size_t)CHUNKS * CHUNK, MKX_NET_MEM_HOST, -1, 0};
  mkx_net_reg_args ra = {recv, (size_t)size * CHUNKS * CHUNK, MKX_NET_MEM_HOST,
                         -1, 0};
  MKX_TRY(mkx_net_reg(n, &sa, &smr));
  MKX_TRY(mkx_net_reg(n, &ra, &rmr));
  MKX_TRY(mkx_net_exchange_keys(n, oob, &smr, skeys));
  MKX_TRY(mkx_net_exchange_keys(n, oob, &rmr, rkeys));
  MKX_TRY(mkx_proxy_create(n, 8, NULL, TIMEOUT_MS, &p));
  MKX_TRY(mkx_proxy_add_region(p, &smr, skeys, &si));
  MKX_TRY(mkx_proxy_add_region(p, &rmr, rkeys, &ri));
  CHECK(si == 0 && ri == 1, "region indices %u %u", si, ri);
  MKX_TRY(mkx_proxy_start(p, NULL));
  int rc = produce(mkx_proxy_ring_of(p), send);
  CHECK(rc == MKX_SUCCESS, "all writes posted and completed");
  check_received(n, recv);
  check_bytes(n);
  CHECK(mkx_proxy_stop(p) == MKX_SUCCESS, "proxy stops cleanly");
  /* Nobody closes while a peer may still be reading its last signals. */
  MKX_TRY(oob->barrier(oob->ctx, TIMEOUT_MS, "test barrier"));
  mkx_proxy_destroy(p);
  mkx_net_dereg(n, &smr);
  mkx_net_dereg(n, &rmr);
  mkx_net_close(n);
  free(send);
  free(recv);
  return MKX_SUCCESS;
}

int main(int argc, char **argv) {
  return net_main(argc, argv, "test_proxy_tcp", run);
}
