/* The three tensor-parallel calls over virtual nodes (2 ranks per node):
 * results equal those of a single-node communicator on the same inputs,
 * and the bytes that crossed the network are exactly the minimum of the
 * hierarchical scheme: every A row once per destination node (AllGather),
 * every node's partial of a foreign block once (ReduceScatter), plus each
 * rounded block once per other node (AllReduce). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/comm.h"
#include "core/comm_net.h"
#include "mkx.h"

static int rank, size, failures, checks;

#define CHECK(cond, ...)                                                     \
  do {                                                                       \
    checks++;                                                                \
    if (!(cond)) {                                                           \
      failures++;                                                            \
      printf("not ok - rank %d line %d: ", rank, __LINE__);                  \
      printf(__VA_ARGS__);                                                   \
      printf(" (%s)\n", MKX_Get_last_error());                               \
    }                                                                        \
  } while (0)

static float frand(unsigned *s) {
  *s = *s * 1664525u + 1013904223u;
  return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static void fill(float *x, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) x[i] = frand(&seed);
}

static double rel_diff(const float *a, const float *b, size_t n) {
  double d = 0, r = 0;
  for (size_t i = 0; i < n; i++) {
    d += (double)(a[i] - b[i]) * (a[i] - b[i]);
    r += (double)b[i] * b[i];
  }
  return sqrt(d / (r > 0 ? r : 1));
}

typedef struct geo {
  int N, G, j, l;
} geo;

static int64_t block_rows(int64_t M, int q) {
  int64_t first, count;
  MKX_Block_range(M, size, q, &first, &count);
  return count;
}

/* Rank of (node k, local l) when virtual nodes of G are cut in rank order. */
static int at(const geo *g, int k, int l) { return k * g->G + l; }

static void allgather(MKX_Comm hier, MKX_Comm flat, const geo *g, int64_t m,
                      int64_t k, int64_t n) {
  int64_t M = m * size;
  float *A = malloc(sizeof(float) * m * k), *B = malloc(sizeof(float) * k * n);
  float *C1 = malloc(sizeof(float) * M * n), *C2 = malloc(sizeof(float) * M * n);
  fill(A, m * k, 11 + rank), fill(B, k * n, 7 + rank);
  uint64_t before = mkx_comm_net_bytes_sent(hier);
  int rc = MKX_Allgather_gemm(A, m, k, k, B, n, n, MKX_NO_TRANS, C1, n, NULL,
                              0, MKX_FP32, MKX_FP32, MKX_ROW_MAJOR, hier, NULL);
  uint64_t sent = mkx_comm_net_bytes_sent(hier) - before;
  CHECK(rc == MKX_SUCCESS, "hierarchical allgather-GEMM");
  CHECK(MKX_Allgather_gemm(A, m, k, k, B, n, n, MKX_NO_TRANS, C2, n, NULL, 0,
                           MKX_FP32, MKX_FP32, MKX_ROW_MAJOR, flat,
                           NULL) == MKX_SUCCESS, "flat allgather-GEMM");
  CHECK(memcmp(C1, C2, sizeof(float) * M * n) == 0,
        "allgather-GEMM: same bits as on one node");
  uint64_t want = (uint64_t)(g->N - 1) * m * k * sizeof(float);
  CHECK(sent == want, "allgather-GEMM sent %llu bytes, minimum %llu",
        (unsigned long long)sent, (unsigned long long)want);
  free(A), free(B), free(C1), free(C2);
}

/* Bytes of node partials this rank sends: one per foreign block of its
 * column, in fp32. */
static uint64_t rs_bytes(const geo *g, int64_t M, int64_t n) {
  uint64_t b = 0;
  for (int k = 0; k < g->N; k++)
    if (k != g->j) b += (uint64_t)block_rows(M, at(g, k, g->l)) * n * 4;
  return b;
}

static void reduce(MKX_Comm hier, MKX_Comm flat, const geo *g, int64_t M,
                   int64_t kl, int64_t n, int all) {
  int64_t rows = all ? M : block_rows(M, rank);
  float *A = malloc(sizeof(float) * M * kl), *B = malloc(sizeof(float) * kl * n);
  float *C1 = malloc(sizeof(float) * (rows * n + 1));
  float *C2 = malloc(sizeof(float) * (rows * n + 1));
  fill(A, M * kl, 5 + rank), fill(B, kl * n, 3 + rank);
  uint64_t before = mkx_comm_net_bytes_sent(hier);
  int rc = all ? MKX_Gemm_allreduce(A, M, kl, kl, B, n, n, MKX_NO_TRANS, C1,
                                    n, MKX_FP32, MKX_FP32, MKX_ROW_MAJOR,
                                    hier, NULL)
               : MKX_Gemm_reduce_scatter(A, M, kl, kl, B, n, n, MKX_NO_TRANS,
                                         C1, n, MKX_FP32, MKX_FP32,
                                         MKX_ROW_MAJOR, hier, NULL);
  uint64_t sent = mkx_comm_net_bytes_sent(hier) - before;
  CHECK(rc == MKX_SUCCESS, "hierarchical %s", all ? "allreduce" : "RS");
  rc = all ? MKX_Gemm_allreduce(A, M, kl, kl, B, n, n, MKX_NO_TRANS, C2, n,
                                MKX_FP32, MKX_FP32, MKX_ROW_MAJOR, flat, NULL)
           : MKX_Gemm_reduce_scatter(A, M, kl, kl, B, n, n, MKX_NO_TRANS, C2,
                                     n, MKX_FP32, MKX_FP32, MKX_ROW_MAJOR,
                                     flat, NULL);
  CHECK(rc == MKX_SUCCESS, "flat %s", all ? "allreduce" : "RS");
  /* Another order of the same sums: equal to rounding. */
  CHECK(rel_diff(C1, C2, (size_t)(rows * n)) < 1e-5,
        "%s: equals the one-node result (rel %g)", all ? "allreduce" : "RS",
        rel_diff(C1, C2, (size_t)(rows * n)));
  uint64_t want = rs_bytes(g, M, n);
  if (all) want += (uint64_t)(g->N - 1) * block_rows(M, rank) * n * 4;
  CHECK(sent == want, "%s sent %llu bytes, minimum %llu",
        all ? "allreduce" : "reduce-scatter", (unsigned long long)sent,
        (unsigned long long)want);
  free(A), free(B), free(C1), free(C2);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size % 2) {
    if (rank == 0) printf("test_hier needs an even rank count: skipped\n");
    MPI_Finalize();
    return 77;
  }
  MPI_Info info;
  MPI_Info_create(&info);
  MPI_Info_set(info, "mkx_virtual_node_size", "2");
  MPI_Info_set(info, "mkx_net", "tcp");
  MKX_Comm hier, flat;
  CHECK(MKX_Comm_create(MPI_COMM_WORLD, info, &hier) == MKX_SUCCESS,
        "virtual-node communicator");
  CHECK(MKX_Comm_create(MPI_COMM_WORLD, MPI_INFO_NULL, &flat) == MKX_SUCCESS,
        "one-node communicator");
  MPI_Info_free(&info);
  geo g = {size / 2, 2, rank / 2, rank % 2};
  int nodes = 0;
  MKX_Comm_num_nodes(hier, &nodes);
  CHECK(nodes == g.N, "%d virtual nodes", nodes);
  CHECK(mkx_comm_net_bytes_sent(flat) == 0, "no network on one node");
  int64_t shapes[][3] = {{16, 32, 24}, {5, 7, 3}, {64, 8, 40}, {1, 1, 1}};
  for (int s = 0; s < 4; s++) {
    allgather(hier, flat, &g, shapes[s][0], shapes[s][1], shapes[s][2]);
    reduce(hier, flat, &g, shapes[s][0] * size + s, shapes[s][1],
           shapes[s][2], 0);
    reduce(hier, flat, &g, shapes[s][0] * size - s, shapes[s][1],
           shapes[s][2], 1);
  }
  MKX_Comm_free(&hier);
  MKX_Comm_free(&flat);
  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0)
    printf("%s test_hier: %d ranks as %d nodes, %d checks each, %d failures\n",
           total ? "FAIL" : "PASS", size, size / 2, checks, total);
  MPI_Finalize();
  return total ? 1 : 0;
}
