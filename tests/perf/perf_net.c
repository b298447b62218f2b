/*
 * mkx_perf net: the network alone between virtual nodes, the yardstick of
 * the several-node calls ("network transfer alone").  Every rank sends B
 * bytes to every rank of the other virtual nodes and receives as much, by
 * the exchange the several-node paths use (mkx_comm_net_exchange: pieces
 * staged through registered host regions, posted by the proxy thread), on
 * host buffers, so no GPU is needed.  Per size: the median time of the
 * slowest rank, the rate at which each rank sends (B x peers / time), and
 * the proxy thread's CPU time per exchange (the most costly rank).
 *
 *   mpirun -np P mkx_perf net --vnode G [--net tcp|shm] [--bytes B]...
 *                             [--reps N] [--out FILE]
 * --vnode G: virtual nodes of G ranks (option virtual_node_size; P/G of
 * them, at least 2).  --net: the transport (default tcp; shm takes options
 * net_shm_bandwidth, net_shm_latency_us and net_shm_ring from the
 * environment, e.g. MKX_NET_SHM_BANDWIDTH=50000 for 50 GB/s).  --bytes:
 * per destination rank (default 134217728, what each rank of an
 * AllGather+GEMM of 16384 x 8192 x 8192 on 2 ranks sends), up to 16.
 * --reps: timed exchanges per size after one warm-up (default 10).
 */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "core/comm_net.h" /* the exchange and the proxy's cost (internal) */
#include "mkx.h"
#include "perf_job.h"
#include "perf_util.h"

static const char net_usage[] =
    "usage: mpirun -np P mkx_perf net --vnode G [--net tcp|shm] "
    "[--bytes B]... [--reps N] [--out FILE]\n"
    "  Every rank sends B bytes to every rank of the other virtual nodes\n"
    "  through MKX's several-node exchange, host buffers; "
    "tests/perf/perf_net.c documents the columns.\n";

typedef struct net_opts {
  const char *vnode, *net, *outname;
  long long bytes[16];
  int nb, reps;
} net_opts;

static int parse(int argc, char **argv, net_opts *o) {
  const char *cmd = "mkx_perf net";
  memset(o, 0, sizeof *o);
  o->net = "tcp", o->reps = 10;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      fputs(net_usage, stderr);
      return 1;
    }
    if (!v) return perf_usage_error(cmd, net_usage, "missing value", a);
    i++;
    if (!strcmp(a, "--vnode"))
      o->vnode = v;
    else if (!strcmp(a, "--net") && (!strcmp(v, "tcp") || !strcmp(v, "shm")))
      o->net = v;
    else if (!strcmp(a, "--out"))
      o->outname = v;
    else if (!strcmp(a, "--reps") && atoi(v) >= 1 && atoi(v) <= 1000)
      o->reps = atoi(v);
    else if (!strcmp(a, "--bytes") && o->nb < 16 && atoll(v) >= 1)
      o->bytes[o->nb++] = atoll(v);
    else
      return perf_usage_error(cmd, net_usage, "bad option or value", a);
  }
  if (!o->vnode)
    return perf_usage_error(cmd, net_usage, "--vnode is required", "");
  if (o->nb == 0) o->bytes[o->nb++] = 134217728;
  return 0;
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The communicator: virtual nodes over the chosen transport. */
static MKX_Comm net_comm(const net_opts *o) {
  MPI_Info info;
  MKX_Comm c = NULL;
  AI(MPI_Info_create(&info));
  AI(MPI_Info_set(info, "mkx_virtual_node_size", o->vnode));
  AI(MPI_Info_set(info, "mkx_net", o->net));
  AM(MKX_Comm_create(MPI_COMM_WORLD, info, &c));
  AI(MPI_Info_free(&info));
  return c;
}

typedef struct exch {
  int size;
  void **send, **recv;
  size_t *slen, *rlen;
  int peers; /* ranks of other nodes */
} exch;

/* Buffers of B bytes to and from every rank of another node (same node:
 * 0 bytes); the payload is written once, so pages are real. */
static void exch_alloc(exch *x, MKX_Comm c, size_t b) {
  int node = 0;
  AM(MKX_Comm_size(c, &x->size));
  x->send = calloc((size_t)x->size, sizeof *x->send);
  x->recv = calloc((size_t)x->size, sizeof *x->recv);
  x->slen = calloc((size_t)x->size, sizeof *x->slen);
  x->rlen = calloc((size_t)x->size, sizeof *x->rlen);
  int *node_of = calloc((size_t)x->size, sizeof *node_of);
  if (!x->send || !x->recv || !x->slen || !x->rlen || !node_of) {
    fprintf(stderr, "%s: rank %d: out of memory\n", perf_cmd, perf_rank);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  AM(MKX_Comm_node(c, &node));
  AI(MPI_Allgather(&node, 1, MPI_INT, node_of, 1, MPI_INT, MPI_COMM_WORLD));
  x->peers = 0;
  for (int q = 0; q < x->size; q++) {
    if (node_of[q] == node) continue;
    x->slen[q] = x->rlen[q] = b;
    x->send[q] = malloc(b);
    x->recv[q] = malloc(b);
    if (!x->send[q] || !x->recv[q]) {
      fprintf(stderr, "%s: rank %d: no memory for %zu bytes\n", perf_cmd,
              perf_rank, b);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    memset(x->send[q], perf_rank + 1, b);
    memset(x->recv[q], 0, b);
    x->peers++;
  }
  free(node_of);
}

static void exch_free(exch *x) {
  for (int q = 0; q < x->size; q++) free(x->send[q]), free(x->recv[q]);
  free(x->send), free(x->recv), free(x->slen), free(x->rlen);
}

/* One size: *ms the median of the slowest rank, *cpu_ms the proxy's CPU
 * per exchange (most costly rank); the received bytes checked. */
static int time_size(MKX_Comm c, size_t b, int reps, double *ms, double *cpu_ms,
                     int *peers) {
  exch x;
  exch_alloc(&x, c, b);
  float *t = calloc((size_t)reps, sizeof *t);
  mkx_proxy_stats s0, s1;
  double cpu = 0;
  for (int r = -1; r < reps; r++) {
    AI(MPI_Barrier(MPI_COMM_WORLD));
    mkx_comm_net_proxy_stats(c, &s0);
    const double t0 = now_s();
    AM(mkx_comm_net_exchange(c, (const void *const *)x.send, x.slen, x.recv,
                             x.rlen));
    const double dt = now_s() - t0;
    mkx_comm_net_proxy_stats(c, &s1);
    if (r < 0) continue; /* warm-up */
    t[r] = (float)(dt * 1e3);
    cpu += (double)(s1.cpu_ns - s0.cpu_ns) / 1e6 / reps;
  }
  int bad = 0;
  for (int q = 0; q < x.size; q++) { /* rank q's bytes are all q + 1 */
    const unsigned char *got = x.recv[q], want = (unsigned char)(q + 1);
    for (size_t i = 0; i < x.rlen[q] && !bad; i++) bad = got[i] != want;
  }
  double med = perf_median(t, reps);
  AI(MPI_Allreduce(&med, ms, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
  AI(MPI_Allreduce(&cpu, cpu_ms, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
  AI(MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
  *peers = x.peers;
  free(t);
  exch_free(&x);
  return bad;
}

static int run(const net_opts *o);

int mkx_perf_net(int argc, char **argv) {
  net_opts o;
  int rc = parse(argc, argv, &o);
  if (rc) return rc == 1 ? 0 : rc;
  perf_cmd = "mkx_perf net";
  if (MPI_Init(NULL, NULL) != MPI_SUCCESS) {
    fprintf(stderr, "mkx_perf net: MPI_Init failed\n");
    return 1;
  }
  AI(MPI_Comm_rank(MPI_COMM_WORLD, &perf_rank));
  rc = run(&o);
  AI(MPI_Finalize());
  return rc;
}

static int run(const net_opts *op) {
  const net_opts o = *op;
  MKX_Comm c = net_comm(&o);
  int nodes = 0, size = 0;
  AM(MKX_Comm_num_nodes(c, &nodes));
  AM(MKX_Comm_size(c, &size));
  if (nodes < 2) {
    if (perf_rank == 0)
      fprintf(stderr, "mkx_perf net: %d virtual node(s): nothing crosses\n",
              nodes);
    AM(MKX_Comm_free(&c));
    return 2;
  }
  char head[1024] = "", env[512] = "", day[32];
  time_t now = time(NULL);
  strftime(day, sizeof day, "%Y-%m-%d %H:%M UTC", gmtime(&now));
  perf_mkx_environment(env, sizeof env);
  perf_cat(head, sizeof head,
           "\n### mkx_perf net, %s, %d ranks as %d virtual nodes over %s\n\n"
           "MKX_* environment: %s.  Each rank sends B bytes to each rank of "
           "the other nodes and receives as much (host buffers, MKX's "
           "several-node exchange); median of %d after a warm-up, slowest "
           "rank; GB/s: what each rank sends per second; proxy CPU: the "
           "network proxy thread's CPU time per exchange, the most costly "
           "rank.\n\n| B per peer | peers | ms | GB/s sent per rank | proxy "
           "CPU ms |\n|---:|---:|---:|---:|---:|\n",
           day, size, nodes, o.net, env, o.reps);
  FILE *out = perf_rank == 0 ? perf_table_open(head, o.outname) : NULL;
  int bad = 0;
  for (int i = 0; i < o.nb; i++) {
    double ms = 0, cpu = 0;
    int peers = 0;
    bad |= time_size(c, (size_t)o.bytes[i], o.reps, &ms, &cpu, &peers);
    if (perf_rank != 0) continue;
    char row[200];
    snprintf(row, sizeof row, "| %lld | %d | %.3f | %.2f | %.3f |\n",
             o.bytes[i], peers, ms, (double)o.bytes[i] * peers / ms / 1e6, cpu);
    fputs(row, stdout);
    if (out) fputs(row, out);
  }
  if (out) fclose(out);
  if (bad && perf_rank == 0)
    fprintf(stderr, "mkx_perf net: received bytes are wrong\n");
  AM(MKX_Comm_free(&c));
  return bad ? 1 : 0;
}
