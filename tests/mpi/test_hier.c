/* The three tensor-parallel calls over virtual nodes: results equal those
 * of a single-node communicator on the same inputs, and the bytes that
 * crossed the network are exactly the minimum of the hierarchical scheme:
 * every A row once per destination node (AllGather), every node's partial
 * of a foreign block once (ReduceScatter), plus each rounded block once per
 * other node (AllReduce).  Host buffers: nodes of 2 ranks.  With --device:
 * on 2 or 3 ranks one rank per node, so 2 GPUs are 2 nodes over tcp; on 4
 * or more ranks nodes of 2 (4 ranks on 2 GPUs: each node has both GPUs,
 * so hier_gemm=nvlink's node part runs over NVLink).  --shm: the virtual
 * nodes over the shm transport instead of tcp. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/comm.h"
#include "core/comm_net.h"
#include "host/hier.h"
#include "mkx.h"
#include "mkx_test.h"
#include "ops/path.h"
#ifdef MKX_TEST_CUDA
#include "cuda_check.h"
#include "ops/fused/fused.h"
#include "ops/nodes/hier.h"
#include "host/op_args.h"
#endif

typedef struct geo {
  int N, G, j, l;
} geo;

static float frand(unsigned *s) {
  *s = *s * 1664525u + 1013904223u;
  return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

/* A buffer of n floats, filled from `seed` (or poisoned if seed is 0). */
static void make(tbuf *b, size_t n, unsigned seed) {
  CHECK(tbuf_alloc(b, n * sizeof(float) + sizeof(float)) == 0, "alloc");
  float *x = b->host;
  for (size_t i = 0; seed && i < n; i++) x[i] = frand(&seed);
  tbuf_upload(b);
}

static double rel_diff(const float *a, const float *b, size_t n) {
  double d = 0, r = 0;
  for (size_t i = 0; i < n; i++) {
    d += (double)(a[i] - b[i]) * (a[i] - b[i]);
    r += (double)b[i] * b[i];
  }
  return sqrt(d / (r > 0 ? r : 1));
}

static int64_t block_rows(int64_t M, int q) {
  int64_t first, count;
  MKX_Block_range(M, mt.size, q, &first, &count);
  return count;
}

/* Rank of (node k, local l): virtual nodes are cut in rank order. */
static int at(const geo *g, int k, int l) { return k * g->G + l; }

static void allgather(MKX_Comm hier, MKX_Comm flat, const geo *g, int64_t m,
                      int64_t k, int64_t n) {
  int64_t M = m * mt.size;
  tbuf A, B, C1, C2;
  make(&A, m * k, 11 + mt.rank), make(&B, k * n, 7 + mt.rank);
  make(&C1, M * n, 0), make(&C2, M * n, 0);
  uint64_t before = mkx_comm_net_bytes_sent(hier);
  int rc = MKX_Allgather_gemm(tbuf_ptr(&A), m, k, k, tbuf_ptr(&B), n, n,
                              MKX_NO_TRANS, tbuf_ptr(&C1), n, NULL, 0, MKX_FP32,
                              MKX_FP32, MKX_ROW_MAJOR, hier, NULL);
  uint64_t sent = mkx_comm_net_bytes_sent(hier) - before;
  CHECK_RC(rc, MKX_SUCCESS, "hierarchical allgather-GEMM %lldx%lldx%lld",
           (long long)M, (long long)n, (long long)k);
  rc = MKX_Allgather_gemm(tbuf_ptr(&A), m, k, k, tbuf_ptr(&B), n, n,
                          MKX_NO_TRANS, tbuf_ptr(&C2), n, NULL, 0, MKX_FP32,
                          MKX_FP32, MKX_ROW_MAJOR, flat, NULL);
  CHECK_RC(rc, MKX_SUCCESS, "one-node allgather-GEMM");
  tbuf_download(&C1), tbuf_download(&C2);
  CHECK(memcmp(C1.host, C2.host, sizeof(float) * M * n) == 0,
        "allgather-GEMM: same bits as on one node");
  uint64_t want = (uint64_t)(g->N - 1) * m * k * sizeof(float);
  CHECK(sent == want, "allgather-GEMM sent %llu bytes, minimum %llu",
        (unsigned long long)sent, (unsigned long long)want);
  tbuf_free(&A), tbuf_free(&B), tbuf_free(&C1), tbuf_free(&C2);
}

/* Node partials this rank sends: one per foreign block of its column. */
static uint64_t rs_bytes(const geo *g, int64_t M, int64_t n) {
  uint64_t b = 0;
  for (int k = 0; k < g->N; k++)
    if (k != g->j) b += (uint64_t)block_rows(M, at(g, k, g->l)) * n * 4;
  return b;
}

static int reduce_call(int all, tbuf *A, int64_t M, int64_t kl, tbuf *B,
                       int64_t n, tbuf *C, MKX_Comm c) {
  if (all)
    return MKX_Gemm_allreduce(tbuf_ptr(A), M, kl, kl, tbuf_ptr(B), n, n,
                              MKX_NO_TRANS, tbuf_ptr(C), n, MKX_FP32, MKX_FP32,
                              MKX_ROW_MAJOR, c, NULL);
  return MKX_Gemm_reduce_scatter(tbuf_ptr(A), M, kl, kl, tbuf_ptr(B), n, n,
                                 MKX_NO_TRANS, tbuf_ptr(C), n, MKX_FP32,
                                 MKX_FP32, MKX_ROW_MAJOR, c, NULL);
}

static void reduce(MKX_Comm hier, MKX_Comm flat, const geo *g, int64_t M,
                   int64_t kl, int64_t n, int all) {
  const char *what = all ? "allreduce" : "reduce-scatter";
  int64_t rows = all ? M : block_rows(M, mt.rank);
  tbuf A, B, C1, C2;
  make(&A, M * kl, 5 + mt.rank), make(&B, kl * n, 3 + mt.rank);
  make(&C1, rows * n, 0), make(&C2, rows * n, 0);
  uint64_t before = mkx_comm_net_bytes_sent(hier);
  int rc = reduce_call(all, &A, M, kl, &B, n, &C1, hier);
  uint64_t sent = mkx_comm_net_bytes_sent(hier) - before;
  CHECK_RC(rc, MKX_SUCCESS, "hierarchical %s %lldx%lldx%lld", what,
           (long long)M, (long long)n, (long long)kl);
  CHECK_RC(reduce_call(all, &A, M, kl, &B, n, &C2, flat), MKX_SUCCESS,
           "one-node %s", what);
  tbuf_download(&C1), tbuf_download(&C2);
  /* Another order of the same sums: equal to rounding. */
  double d = rel_diff(C1.host, C2.host, (size_t)(rows * n));
  CHECK(d < 1e-5, "%s: equals the one-node result (rel %g)", what, d);
  uint64_t want = rs_bytes(g, M, n);
  if (all) want += (uint64_t)(g->N - 1) * block_rows(M, mt.rank) * n * 4;
  CHECK(sent == want, "%s sent %llu bytes, minimum %llu", what,
        (unsigned long long)sent, (unsigned long long)want);
  tbuf_free(&A), tbuf_free(&B), tbuf_free(&C1), tbuf_free(&C2);
}

#ifdef MKX_TEST_CUDA
/* Starts on the several-node GPU paths so far (ops/path.h). */
static long hier_starts(void) {
  return mkx_path_starts(MKX_PATH_HIER_GPU) +
         mkx_path_starts(MKX_PATH_HIER_NVLINK) +
         mkx_path_starts(MKX_PATH_HIER_PROXY);
}

/* bf16 data from the seed, stored into a fresh buffer (uploaded). */
static void make16(tbuf *b, int64_t rows, int64_t cols, int salt) {
  double *v = mt_gen(rows, cols, MKX_BF16, mt.seed, mt.rank, salt);
  CHECK(tbuf_alloc(b, (size_t)(rows * cols) * 2 + 2) == 0, "alloc");
  mt_store(b->host, MKX_BF16, MKX_ROW_MAJOR, rows, cols, cols, v);
  free(v);
  tbuf_upload(b);
}

/* One call on both communicators: the GPU-GEMM path must be taken on
 * `gpu`, agree with the staged path (fp32 C: they differ only by the
 * GEMMs' summation order) and send `want` bytes over the network. */
static void same_as_staged(int op, MKX_Comm staged, MKX_Comm gpu, tbuf *A,
                           int64_t rows, int64_t k, tbuf *B, int64_t n,
                           int64_t crows, uint64_t want) {
  static const char *const name[] = {"allgather-GEMM", "reduce-scatter",
                                     "allreduce"};
  tbuf C[2];
  make(&C[0], (size_t)(crows * n), 0), make(&C[1], (size_t)(crows * n), 0);
  uint64_t sent = 0;
  for (int v = 0; v < 2; v++) {
    MKX_Comm c = v ? gpu : staged;
    uint64_t before = mkx_comm_net_bytes_sent(c);
    long starts = hier_starts();
    int rc =
        op == 0 ? MKX_Allgather_gemm(tbuf_ptr(A), rows, k, k, tbuf_ptr(B), n, n,
                                     MKX_NO_TRANS, tbuf_ptr(&C[v]), n, NULL, 0,
                                     MKX_BF16, MKX_FP32, MKX_ROW_MAJOR, c, NULL)
        : op == 1
            ? MKX_Gemm_reduce_scatter(tbuf_ptr(A), rows, k, k, tbuf_ptr(B), n,
                                      n, MKX_NO_TRANS, tbuf_ptr(&C[v]), n,
                                      MKX_BF16, MKX_FP32, MKX_ROW_MAJOR, c,
                                      NULL)
            : MKX_Gemm_allreduce(tbuf_ptr(A), rows, k, k, tbuf_ptr(B), n, n,
                                 MKX_NO_TRANS, tbuf_ptr(&C[v]), n, MKX_BF16,
                                 MKX_FP32, MKX_ROW_MAJOR, c, NULL);
    CHECK_RC(rc, MKX_SUCCESS, "%s bf16 %s", name[op],
             v ? "hier_gemm=gpu" : "staged");
    CHECK(hier_starts() - starts == v, "%s: %s path taken", name[op],
          v ? "GPU-GEMM" : "staged");
    /* the calls driven by the GPU post to the network after they return */
    mt_sync();
    if (v) sent = mkx_comm_net_bytes_sent(c) - before;
  }
  tbuf_download(&C[0]), tbuf_download(&C[1]);
  double d = rel_diff(C[1].host, C[0].host, (size_t)(crows * n));
  CHECK(d < 1e-4,
        "%s bf16 %lldx%lldx%lld: GPU GEMM equals the staged "
        "path (rel %g)",
        name[op], (long long)rows, (long long)n, (long long)k, d);
  CHECK(sent == want, "%s bf16 sent %llu bytes, minimum %llu", name[op],
        (unsigned long long)sent, (unsigned long long)want);
  tbuf_free(&C[0]), tbuf_free(&C[1]);
}

/* GEMM+ReduceScatter and GEMM+AllReduce of the M x k rows A (same_as_staged),
 * each with its minimum network bytes. */
static void reductions_same(MKX_Comm staged, MKX_Comm gpu, const geo *g,
                            tbuf *A, int64_t M, int64_t k, tbuf *B, int64_t n) {
  same_as_staged(1, staged, gpu, A, M, k, B, n, block_rows(M, mt.rank),
                 rs_bytes(g, M, n));
  same_as_staged(2, staged, gpu, A, M, k, B, n, M,
                 rs_bytes(g, M, n) +
                     (uint64_t)(g->N - 1) * block_rows(M, mt.rank) * n * 4);
}

/* hier_gemm=proxy: back-to-back calls on fresh inputs each (a peer's
 * rows of one call must never land in another): AllGather+GEMM with
 * A_out (256 rows per rank, so each rank's rows go in two chunks), then
 * GEMM+ReduceScatter and GEMM+AllReduce on M = 256 p + it rows, against
 * the staged path. */
static void repeated(MKX_Comm staged, MKX_Comm gpu, const geo *g) {
  const int64_t m = 256, k = 64, n = 72, M = m * mt.size;
  tbuf B, C[2], O[2];
  make16(&B, k, n, 61);
  for (int v = 0; v < 2; v++)
    make(&C[v], (size_t)(M * n), 0), make(&O[v], (size_t)(M * k) / 2 + 1, 0);
  for (int it = 0; it < 12; it++) {
    tbuf A;
    make16(&A, m, k, 70 + it);
    uint64_t before = mkx_comm_net_bytes_sent(gpu);
    for (int v = 0; v < 2; v++)
      CHECK_RC(MKX_Allgather_gemm(tbuf_ptr(&A), m, k, k, tbuf_ptr(&B), n, n,
                                  MKX_NO_TRANS, tbuf_ptr(&C[v]), n,
                                  tbuf_ptr(&O[v]), k, MKX_BF16, MKX_FP32,
                                  MKX_ROW_MAJOR, v ? gpu : staged, NULL),
               MKX_SUCCESS, "repeated allgather-GEMM %d (%s)", it,
               v ? "proxy" : "staged");
    mt_sync();
    const uint64_t sent = mkx_comm_net_bytes_sent(gpu) - before;
    tbuf_download(&C[0]), tbuf_download(&C[1]);
    tbuf_download(&O[0]), tbuf_download(&O[1]);
    double d = rel_diff(C[1].host, C[0].host, (size_t)(M * n));
    CHECK(d < 1e-4,
          "repeated allgather-GEMM %d equals the staged path "
          "(rel %g)",
          it, d);
    CHECK(!memcmp(O[0].host, O[1].host, (size_t)(M * k) * 2),
          "repeated allgather-GEMM %d: A_out bit-exact", it);
    CHECK(sent == (uint64_t)(g->N - 1) * m * k * 2,
          "repeated allgather-GEMM %d sent %llu bytes", it,
          (unsigned long long)sent);
    tbuf_free(&A);
    /* the reductions on awkward row counts, fresh A each time */
    const int64_t M2 = m * mt.size + it;
    make16(&A, M2, k, 90 + it);
    reductions_same(staged, gpu, g, &A, M2, k, &B, n);
    tbuf_free(&A);
  }
  for (int v = 0; v < 2; v++) tbuf_free(&C[v]), tbuf_free(&O[v]);
  tbuf_free(&B);
}

/* hier_gemm=proxy: an AllGather+GEMM plan (uneven rows per rank) started
 * once under CUDA graph capture, the graph launched 3 times on fresh A
 * each time: every launch a call of its own over the network (its bytes
 * counted), equal to the staged path. */
static void captured(MKX_Comm staged, MKX_Comm gpu, const geo *g) {
  const int64_t m = 200 + 16 * mt.rank, k = 64, n = 72;
  const int64_t M = 200 * mt.size + 8 * mt.size * (mt.size - 1);
  tbuf A, B, C[2];
  make16(&A, m, k, 80), make16(&B, k, n, 81);
  make(&C[0], (size_t)(M * n), 0), make(&C[1], (size_t)(M * n), 0);
  cudaStream_t s = NULL;
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  MKX_Request r = NULL;
  MT_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int rc = MKX_Allgather_gemm_init(
      tbuf_ptr(&A), m, k, k, tbuf_ptr(&B), n, n, MKX_NO_TRANS, tbuf_ptr(&C[1]),
      n, NULL, 0, MKX_BF16, MKX_FP32, MKX_ROW_MAJOR, gpu, MPI_INFO_NULL, &r);
  CHECK_RC(rc, MKX_SUCCESS, "captured allgather-GEMM: plan");
  if (rc == MKX_SUCCESS) {
    MT_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    rc = MKX_Start(r, s);
    const cudaError_t e = cudaStreamEndCapture(s, &graph);
    CHECK_RC(rc, MKX_SUCCESS, "captured allgather-GEMM: start under capture");
    CHECK(e == cudaSuccess, "captured allgather-GEMM: capture ends (%s)",
          cudaGetErrorString(e));
    if (rc == MKX_SUCCESS && e == cudaSuccess)
      MT_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  }
  for (int it = 0; exec && it < 3; it++) {
    double *v = mt_gen(m, k, MKX_BF16, mt.seed, mt.rank, 90 + it);
    mt_store(A.host, MKX_BF16, MKX_ROW_MAJOR, m, k, k, v);
    free(v);
    tbuf_upload(&A);
    tbuf_poison(&C[1]);
    mt_sync();
    const uint64_t before = mkx_comm_net_bytes_sent(gpu);
    MT_CUDA(cudaGraphLaunch(exec, s));
    MT_CUDA(cudaStreamSynchronize(s));
    mt_sync();
    const uint64_t sent = mkx_comm_net_bytes_sent(gpu) - before;
    CHECK_RC(
        MKX_Allgather_gemm(tbuf_ptr(&A), m, k, k, tbuf_ptr(&B), n, n,
                           MKX_NO_TRANS, tbuf_ptr(&C[0]), n, NULL, 0, MKX_BF16,
                           MKX_FP32, MKX_ROW_MAJOR, staged, NULL),
        MKX_SUCCESS, "captured allgather-GEMM %d: staged", it);
    tbuf_download(&C[0]), tbuf_download(&C[1]);
    const double d = rel_diff(C[1].host, C[0].host, (size_t)(M * n));
    CHECK(d < 1e-4,
          "captured allgather-GEMM launch %d equals the staged path "
          "(rel %g)",
          it, d);
    CHECK(sent == (uint64_t)(g->N - 1) * m * k * 2,
          "captured allgather-GEMM launch %d sent %llu bytes", it,
          (unsigned long long)sent);
  }
  if (exec) MT_CUDA(cudaGraphExecDestroy(exec));
  if (graph) MT_CUDA(cudaGraphDestroy(graph));
  if (r) CHECK_RC(MKX_Request_free(&r), MKX_SUCCESS, "captured: plan freed");
  MT_CUDA(cudaStreamDestroy(s));
  tbuf_free(&A), tbuf_free(&B), tbuf_free(&C[0]), tbuf_free(&C[1]);
}

/* --device: option hier_gemm=gpu (the GEMM on the GPU, only A rows,
 * partials and blocks through the host) or nvlink (the node's part as a
 * single-node GPU call) on shapes the engine takes. */
static void gpu_gemm(MKX_Comm staged, MKX_Comm gpu, const geo *g) {
  static const int64_t t[][3] = {
      {37, 64, 48}, {128, 256, 136}, {1, 8, 8}, {200, 72, 16}};
  for (int i = 0; i < 4; i++) {
    const int64_t m = t[i][0], k = t[i][1], n = t[i][2];
    const int64_t M = m * mt.size + i;
    tbuf A, B;
    make16(&A, m, k, 31 + i), make16(&B, k, n, 41 + i);
    same_as_staged(0, staged, gpu, &A, m, k, &B, n, m * mt.size,
                   (uint64_t)(g->N - 1) * m * k * 2);
    tbuf_free(&A);
    make16(&A, M, k, 51 + i);
    reductions_same(staged, gpu, g, &A, M, k, &B, n);
    tbuf_free(&A), tbuf_free(&B);
  }
}
#endif

#ifdef MKX_TEST_CUDA
/* hier_gemm=nvlink's logic on the CPU (mkx_hier_nvlink_host: host buffers,
 * the node's part as the host path's call on the node communicator): the
 * results of one node, A_out bit-exact, the minimum network bytes, on
 * shapes that take 1-4 column slices and 1-4 row chunks. */
static void nvlink_host(MKX_Comm hier, MKX_Comm flat, const geo *g) {
  static const int64_t t[][3] = {
      {37, 24, 48}, {130, 16, 130}, {300, 8, 72}, {1, 8, 8}, {200, 40, 136}};
  for (int i = 0; i < 5; i++) {
    const int64_t m = t[i][0], k = t[i][1], n = t[i][2], M = m * mt.size;
    tbuf A, B, C[2], Ao[2];
    make(&A, m * k, 61 + mt.rank + i), make(&B, k * n, 67 + mt.rank + i);
    for (int v = 0; v < 2; v++) make(&C[v], M * n, 0), make(&Ao[v], M * k, 0);
    uint64_t before = mkx_comm_net_bytes_sent(hier);
    mkx_ag_gemm_args ag = {
        A.host,       m,         k, k,          B.host, n,        n,
        MKX_NO_TRANS, C[0].host, n, Ao[0].host, k,      MKX_FP32, MKX_FP32,
        MKX_ROW_MAJOR};
    CHECK_RC(mkx_hier_nvlink_host(hier, MKX_TP_OP_AG, &ag), MKX_SUCCESS,
             "nvlink logic: allgather-GEMM %lldx%lldx%lld", (long long)M,
             (long long)n, (long long)k);
    uint64_t sent = mkx_comm_net_bytes_sent(hier) - before;
    CHECK_RC(MKX_Allgather_gemm(A.host, m, k, k, B.host, n, n, MKX_NO_TRANS,
                                C[1].host, n, Ao[1].host, k, MKX_FP32, MKX_FP32,
                                MKX_ROW_MAJOR, flat, NULL),
             MKX_SUCCESS, "one-node allgather");
    double d = rel_diff(C[0].host, C[1].host, (size_t)(M * n));
    CHECK(d < 1e-5,
          "nvlink logic: allgather-GEMM equals one node (rel "
          "%g)",
          d);
    CHECK(memcmp(Ao[0].host, Ao[1].host, sizeof(float) * M * k) == 0,
          "nvlink logic: A_out bit-exact");
    uint64_t want = (uint64_t)(g->N - 1) * m * k * sizeof(float);
    CHECK(sent == want,
          "nvlink logic: allgather-GEMM sent %llu bytes, "
          "minimum %llu",
          (unsigned long long)sent, (unsigned long long)want);
    for (int v = 0; v < 2; v++) tbuf_free(&C[v]), tbuf_free(&Ao[v]);
    tbuf_free(&A);
    for (int all = 0; all < 2; all++) {
      const int64_t Mr = M + i, rows = all ? Mr : block_rows(Mr, mt.rank);
      make(&A, Mr * k, 71 + mt.rank + i);
      make(&C[0], rows * n, 0), make(&C[1], rows * n, 0);
      mkx_rs_ar_args rs = {
          A.host,    Mr, k,        k,        B.host,       n, n, MKX_NO_TRANS,
          C[0].host, n,  MKX_FP32, MKX_FP32, MKX_ROW_MAJOR};
      before = mkx_comm_net_bytes_sent(hier);
      CHECK_RC(
          mkx_hier_nvlink_host(hier, all ? MKX_TP_OP_AR : MKX_TP_OP_RS, &rs),
          MKX_SUCCESS, "nvlink logic: %s %lldx%lldx%lld",
          all ? "allreduce" : "reduce-scatter", (long long)Mr, (long long)n,
          (long long)k);
      sent = mkx_comm_net_bytes_sent(hier) - before;
      CHECK_RC(reduce_call(all, &A, Mr, k, &B, n, &C[1], flat), MKX_SUCCESS,
               "one-node reduce");
      d = rel_diff(C[0].host, C[1].host, (size_t)(rows * n));
      CHECK(d < 1e-5, "nvlink logic: %s equals one node (rel %g)",
            all ? "allreduce" : "reduce-scatter", d);
      want = rs_bytes(g, Mr, n);
      if (all) want += (uint64_t)(g->N - 1) * block_rows(Mr, mt.rank) * n * 4;
      CHECK(sent == want, "nvlink logic: %s sent %llu bytes, minimum %llu",
            all ? "allreduce" : "reduce-scatter", (unsigned long long)sent,
            (unsigned long long)want);
      tbuf_free(&A), tbuf_free(&C[0]), tbuf_free(&C[1]);
    }
    tbuf_free(&B);
  }
}
#endif

/* The node's ranks as a communicator of their own (hier_gemm=nvlink runs
 * the node's part on it): its shape, an allreduce on it against the node's
 * sum computed here, and the column identity that lets the node's even
 * split stand for the columns. */
static void node_comm(MKX_Comm hier, const geo *g) {
  MKX_Comm node = NULL, again = NULL;
  int rc = mkx_comm_node(hier, &node);
  CHECK_RC(rc, MKX_SUCCESS, "node communicator");
  if (!mt_all(rc == MKX_SUCCESS)) return;
  CHECK_RC(mkx_comm_node(hier, &again), MKX_SUCCESS,
           "node communicator "
           "again");
  CHECK(again == node, "made once");
  int size = 0, rank = -1, nodes = 0;
  MKX_Comm_size(node, &size), MKX_Comm_rank(node, &rank);
  MKX_Comm_num_nodes(node, &nodes);
  CHECK(size == g->G && rank == g->l && nodes == 1,
        "node communicator: "
        "%d ranks, rank %d, %d node(s) (want %d, %d, 1)",
        size, rank, nodes, g->G, g->l);
  /* an allreduce inside the node: the node's ranks' products summed */
  const int64_t M = 9, kl = 5, n = 6;
  tbuf A, B, C;
  make(&A, M * kl, 71 + mt.rank), make(&B, kl * n, 81 + mt.rank);
  make(&C, M * n, 0);
  rc = MKX_Gemm_allreduce(tbuf_ptr(&A), M, kl, kl, tbuf_ptr(&B), n, n,
                          MKX_NO_TRANS, tbuf_ptr(&C), n, MKX_FP32, MKX_FP32,
                          MKX_ROW_MAJOR, node, NULL);
  CHECK_RC(rc, MKX_SUCCESS, "allreduce on the node communicator");
  tbuf_download(&C);
  float *want = calloc((size_t)(M * n), sizeof *want);
  for (int l = 0; l < g->G; l++) {
    tbuf a, b;
    const int q = g->j * g->G + l;
    make(&a, M * kl, 71 + q), make(&b, kl * n, 81 + q);
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < n; j++)
        for (int64_t t = 0; t < kl; t++)
          want[i * n + j] +=
              ((float *)a.host)[i * kl + t] * ((float *)b.host)[t * n + j];
    tbuf_free(&a), tbuf_free(&b);
  }
  double d = rel_diff(C.host, want, (size_t)(M * n));
  CHECK(d < 1e-5, "node allreduce equals the node's sum (rel %g)", d);
  free(want);
  tbuf_free(&A), tbuf_free(&B), tbuf_free(&C);
  /* the slices of hier_gemm=nvlink's pipeline cover the columns */
  int sbad = 0;
  for (int64_t n = 0; n <= 700; n++) {
    int64_t j[MKX_HIER_MAX_SLICES + 1];
    const int S = mkx_hier_slices(n, j);
    int ok = S >= (n > 0) && S <= MKX_HIER_MAX_SLICES && j[0] == 0 && j[S] == n;
    for (int s = 0; ok && s < S; s++)
      ok = j[s + 1] > j[s] && (s == S - 1 || (j[s + 1] - j[s]) % 8 == 0);
    sbad += !ok;
  }
  CHECK(sbad == 0, "column slices cover n = 0..700 (%d bad)", sbad);
  int bad = 0;
  for (int64_t m = 1; m <= 300; m++) bad += !mkx_hier_split_matches(hier, m);
  CHECK(bad == 0,
        "node-major ranks: the node's even split is the "
        "columns' rows for M = 1..300 (%d mismatches)",
        bad);
}

/* ---- exchanges in small pieces ---- */

/* Bytes rank `from` sends rank `to` in exchange `it`: some none, most of
 * many 256-byte pieces, lengths not multiples of a piece or of 4. */
static size_t xlen(int from, int to, int it) {
  return (size_t)((from * 7 + to * 13 + it * 5) % 11) * 97 + (size_t)it % 3;
}

static unsigned char xbyte(int from, int to, int it, size_t i) {
  return (unsigned char)(from * 31 + to * 17 + it * 5 + i * 7 + (i >> 8));
}

/* The sink's view: every piece where it belongs, in the promised order
 * (rounds by offset, sources in the given order within a round). */
typedef struct order_check {
  unsigned char **got;
  const int *pos; /* [size]: place of each source in the order */
  size_t last_off;
  int last_pos, bad;
} order_check;

static int order_take(void *ctx, int src, size_t off, const void *data,
                      size_t len) {
  order_check *o = ctx;
  const int pos = o->pos[src];
  if (off < o->last_off || (off == o->last_off && pos <= o->last_pos)) o->bad++;
  o->last_off = off, o->last_pos = pos;
  memcpy(o->got[src] + off, data, len);
  return MKX_SUCCESS;
}

/* One exchange with every rank; `reversed`: through a sink taking the
 * sources in reverse rank order.  Returns the bytes this rank sent. */
static uint64_t irregular_exchange(MKX_Comm c, int it, int reversed) {
  const int p = mt.size, me = mt.rank;
  const void **sp = calloc((size_t)p, sizeof *sp);
  unsigned char **rp = calloc((size_t)p, sizeof *rp);
  size_t *sl = calloc((size_t)p, sizeof *sl),
         *rl = calloc((size_t)p, sizeof *rl);
  int *order = calloc((size_t)p, sizeof *order);
  int *pos = calloc((size_t)p, sizeof *pos);
  uint64_t sent = 0;
  for (int q = 0; q < p; q++) {
    if (q == me) continue;
    sl[q] = xlen(me, q, it), rl[q] = xlen(q, me, it);
    unsigned char *b = malloc(sl[q] + 1);
    for (size_t i = 0; i < sl[q]; i++) b[i] = xbyte(me, q, it, i);
    sp[q] = b, rp[q] = calloc(rl[q] + 1, 1), sent += sl[q];
  }
  for (int i = 0; i < p; i++) order[i] = p - 1 - i, pos[p - 1 - i] = i;
  order_check oc = {.got = rp, .pos = pos, .last_pos = -1};
  mkx_comm_net_sink sink = {
      .take = order_take, .ctx = &oc, .order = order, .norder = p};
  int rc = reversed ? mkx_comm_net_exchange_to(c, sp, sl, rl, &sink)
                    : mkx_comm_net_exchange(c, sp, sl, (void *const *)rp, rl);
  CHECK_RC(rc, MKX_SUCCESS, "exchange %d in small pieces", it);
  CHECK(oc.bad == 0, "exchange %d: %d pieces out of order", it, oc.bad);
  int wrong = 0;
  for (int q = 0; q < p; q++)
    for (size_t i = 0; q != me && i < rl[q]; i++)
      wrong += rp[q][i] != xbyte(q, me, it, i);
  CHECK(wrong == 0, "exchange %d: %d bytes wrong", it, wrong);
  for (int q = 0; q < p; q++) free((void *)sp[q]), free(rp[q]);
  free(sp), free(rp), free(sl), free(rl), free(order), free(pos);
  return sent;
}

/* Node j's partial of element e of a block: 1e8, -1e8 and small numbers
 * in turn, so that fp32 sums taken in another order than node order
 * ((p_0 + p_1) + p_2 ...) come out different. */
static float node_part(int j, int64_t e, int N) {
  const int r = (int)((e + j) % 3);
  return r == 0 ? 1e8f : r == 1 ? -1e8f : (float)(1 + (e + N) % 5);
}

/* mkx_hier_column_reduce adds the nodes' partials in node order: every
 * element exactly the sum computed here in that order. */
static void column_reduce_order(MKX_Comm c, const geo *g, const char *what) {
  const int64_t n = 70; /* rows of 280 bytes: pieces end inside rows */
  int64_t *rows = malloc(sizeof *rows * (size_t)mt.size), col = 0;
  for (int q = 0; q < mt.size; q++) rows[q] = 3 + (q * 5) % 4;
  for (int k = 0; k < g->N; k++) col += rows[at(g, k, g->l)];
  float *colsum = malloc(sizeof(float) * (size_t)(col * n));
  const int64_t mine = rows[mt.rank];
  float *block = calloc((size_t)(mine * n) + 1, sizeof(float));
  float *want = calloc((size_t)(mine * n) + 1, sizeof(float));
  int64_t off = 0;
  for (int k = 0; k < g->N; k++) { /* this node's partial of k's block */
    const int64_t len = rows[at(g, k, g->l)] * n;
    for (int64_t e = 0; e < len; e++)
      colsum[off + e] = node_part(g->j, e, g->N);
    off += len;
  }
  for (int64_t e = 0; e < mine * n; e++) {
    float sum = node_part(0, e, g->N);
    for (int j = 1; j < g->N; j++) sum += node_part(j, e, g->N);
    want[e] = sum;
  }
  CHECK_RC(mkx_hier_column_reduce(c, MKX_FP32, colsum, rows, n, block),
           MKX_SUCCESS, "column reduce (%s)", what);
  CHECK(memcmp(block, want, sizeof(float) * (size_t)(mine * n)) == 0,
        "column reduce (%s): the nodes added in node order", what);
  free(rows), free(colsum), free(block), free(want);
}

/* The transport between virtual nodes: tcp, or shm with --shm. */
static const char *vnode_net = "tcp";

/* A communicator of virtual nodes of `vs` ranks over vnode_net, with
 * option key = val as well (MPI_Info key "mkx_" key); NULL where it
 * failed. */
static MKX_Comm vnode_comm(const char *vs, const char *key, const char *val) {
  char k[64];
  MPI_Info info;
  MKX_Comm c = NULL;
  MPI_Info_create(&info);
  MPI_Info_set(info, "mkx_virtual_node_size", vs);
  MPI_Info_set(info, "mkx_net", vnode_net);
  snprintf(k, sizeof k, "mkx_%s", key);
  MPI_Info_set(info, k, val);
  CHECK_RC(MKX_Comm_create(MPI_COMM_WORLD, info, &c), MKX_SUCCESS,
           "virtual-node communicator with %s=%s", key, val);
  MPI_Info_free(&info);
  return c;
}

/* CUDA_DEVICE_MAX_CONNECTIONS=1 on the last rank only: every rank's
 * communicator knows (agreed), so all keep the network part on the host
 * alike; where no rank has it, none does. */
static void one_queue(MKX_Comm hier, const char *vs) {
  int env = 0, any = 0;
  const char *v = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  env = v && atoi(v) == 1;
  MPI_Allreduce(&env, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  CHECK(hier->one_queue == any,
        "one hardware queue on %s rank: communicator says %d",
        any ? "some" : "no", hier->one_queue);
  char *old = v ? strdup(v) : NULL;
  if (mt.rank == mt.size - 1) setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1", 1);
  MKX_Comm c = vnode_comm(vs, "hier_gemm", "proxy");
  if (mt.rank == mt.size - 1) {
    if (old)
      setenv("CUDA_DEVICE_MAX_CONNECTIONS", old, 1);
    else
      unsetenv("CUDA_DEVICE_MAX_CONNECTIONS");
  }
  free(old);
  if (c)
    CHECK(c->one_queue == 1,
          "CUDA_DEVICE_MAX_CONNECTIONS=1 on rank %d only: communicator says "
          "%d on rank %d",
          mt.size - 1, c->one_queue, mt.rank);
  MKX_Comm_free(&c);
}

/* A transport that does not open on the last rank (a bind address that
 * does not exist there): that rank gets its error, the others MKX_ERR_PEER
 * at once instead of waiting in the connect for it. */
static void open_fails(const char *vs) {
  MPI_Info info;
  MKX_Comm c = NULL;
  const int last = mt.size - 1;
  MPI_Info_create(&info);
  MPI_Info_set(info, "mkx_virtual_node_size", vs);
  MPI_Info_set(info, "mkx_net", "tcp");
  if (mt.rank == last) MPI_Info_set(info, "mkx_net_tcp_bind", "192.0.2.1");
  const double t0 = MPI_Wtime();
  int rc = MKX_Comm_create(MPI_COMM_WORLD, info, &c);
  const double dt = MPI_Wtime() - t0;
  MPI_Info_free(&info);
  CHECK(rc != MKX_SUCCESS && (mt.rank == last || rc == MKX_ERR_PEER),
        "transport not opening on rank %d: rc %d (%s)", last, rc,
        MKX_Get_last_error());
  CHECK(dt < 60, "told within %.1f s, not after the 300 s bound", dt);
  if (rc == MKX_SUCCESS) MKX_Comm_free(&c);
}

/* An exchange that rank 0 skips: every other rank gives up after the
 * bound with MKX_ERR_TIMEOUT naming rank 0, instead of hanging. */
static void missing_rank(const char *vs) {
  /* not shorter: the set-up exchange before must not time out on a
   * loaded machine (2 cores, 6 ranks, tests running side by side) */
  MKX_Comm c = vnode_comm(vs, "timeout_ms", "3000");
  if (!mt_all(c != NULL)) return;
  char buf[2][1000] = {{0}};
  const void **sp = calloc((size_t)mt.size, sizeof *sp);
  void **rp = calloc((size_t)mt.size, sizeof *rp);
  size_t *len = calloc((size_t)mt.size, sizeof *len);
  for (int q = 0; q < mt.size; q++)
    sp[q] = buf[0], rp[q] = buf[1], len[q] = q == mt.rank ? 0 : 10;
  /* the first exchange sets up the regions: everyone takes part */
  CHECK_RC(mkx_comm_net_exchange(c, sp, len, rp, len), MKX_SUCCESS,
           "exchange before the missing one");
  if (mt.rank != 0) {
    double t = MPI_Wtime();
    int rc = mkx_comm_net_exchange(c, sp, len, rp, len);
    t = MPI_Wtime() - t;
    CHECK_RC(rc, MKX_ERR_TIMEOUT, "exchange without rank 0");
    CHECK(strstr(MKX_Get_last_error(), "rank 0") != NULL,
          "the timeout names rank 0: %s", MKX_Get_last_error());
    CHECK(t > 2.9 && t < 30, "gave up after %.2f s (bound 3 s)", t);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  free(sp), free(rp), free(len);
  MKX_Comm_free(&c);
}

/* A communicator whose exchanges go in pieces of 256 bytes, so messages
 * take many pieces, the 4 slots of each pair wrap again and again, and
 * sources of unequal length leave the rounds early: direct exchanges
 * (data, delivery order, bytes counted), then the column collectives
 * against the default communicator: the same bits (the reduce adds the
 * nodes in the same order whatever the pieces) and the same bytes. */
static void small_pieces(MKX_Comm hier, MKX_Comm flat, const geo *g,
                         const char *vs) {
  mkx_comm_net_test_piece(256);
  MKX_Comm tiny = vnode_comm(vs, "hier_gemm", "host");
  mkx_comm_net_test_piece(0);
  if (!mt_all(tiny != NULL)) return;
  for (int it = 0; it < 12; it++) {
    uint64_t before = mkx_comm_net_bytes_sent(tiny);
    uint64_t want = irregular_exchange(tiny, it, it % 2);
    uint64_t sent = mkx_comm_net_bytes_sent(tiny) - before;
    CHECK(sent == want, "exchange %d sent %llu bytes, want %llu", it,
          (unsigned long long)sent, (unsigned long long)want);
  }
  column_reduce_order(hier, g, "whole pieces");
  column_reduce_order(tiny, g, "small pieces");
  static const int64_t t[][3] = {{16, 32, 24}, {37, 9, 70}, {5, 7, 3}};
  for (int i = 0; i < 3; i++) {
    allgather(tiny, flat, g, t[i][0], t[i][1], t[i][2]);
    for (int all = 0; all < 2; all++) {
      const int64_t M = t[i][0] * mt.size + i, kl = t[i][1], n = t[i][2];
      const int64_t rows = all ? M : block_rows(M, mt.rank);
      tbuf A, B, C[2];
      make(&A, M * kl, 91 + mt.rank + i), make(&B, kl * n, 97 + mt.rank);
      make(&C[0], rows * n, 0), make(&C[1], rows * n, 0);
      uint64_t sent[2];
      for (int v = 0; v < 2; v++) {
        MKX_Comm c = v ? tiny : hier;
        uint64_t before = mkx_comm_net_bytes_sent(c);
        CHECK_RC(reduce_call(all, &A, M, kl, &B, n, &C[v], c), MKX_SUCCESS,
                 "%s in %s pieces", all ? "allreduce" : "reduce-scatter",
                 v ? "small" : "whole");
        sent[v] = mkx_comm_net_bytes_sent(c) - before;
      }
      tbuf_download(&C[0]), tbuf_download(&C[1]);
      CHECK(memcmp(C[0].host, C[1].host, sizeof(float) * rows * n) == 0,
            "%s %lldx%lldx%lld: same bits in small pieces",
            all ? "allreduce" : "reduce-scatter", (long long)M, (long long)n,
            (long long)kl);
      CHECK(sent[0] == sent[1],
            "%s: %llu bytes in small pieces, %llu "
            "in whole ones",
            all ? "allreduce" : "reduce-scatter", (unsigned long long)sent[1],
            (unsigned long long)sent[0]);
      tbuf_free(&A), tbuf_free(&B), tbuf_free(&C[0]), tbuf_free(&C[1]);
    }
  }
  MKX_Comm_free(&tiny);
  missing_rank(vs);
  open_fails(vs);
}

int main(int argc, char **argv) {
  mt_init(&argc, &argv);
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--shm")) vnode_net = "shm";
  int vnode = mt.device && mt.size < 4 ? 1 : 2;
  /* MKX_TEST_VNODE=G: virtual nodes of G ranks (e.g. 8 GPUs as 2 of 4) */
  const char *vn = getenv("MKX_TEST_VNODE");
  if (vn && atoi(vn) > 0) vnode = atoi(vn);
  if (mt.size % vnode || mt.size / vnode < 2) {
    if (mt.rank == 0)
      printf("1..0 # SKIP test_hier needs a multiple of %d ranks, >= %d\n",
             vnode, 2 * vnode);
    MPI_Finalize();
    return 77;
  }
  char vs[16];
  snprintf(vs, sizeof vs, "%d", vnode);
  MKX_Comm hier = vnode_comm(vs, "hier_gemm", "host"), flat = NULL;
  CHECK_RC(MKX_Comm_create(MPI_COMM_WORLD, MPI_INFO_NULL, &flat), MKX_SUCCESS,
           "one-node communicator");
  if (!mt_all(hier && flat)) return mt_finish();
  geo g = {mt.size / vnode, vnode, mt.rank / vnode, mt.rank % vnode};
  int nodes = 0;
  MKX_Comm_num_nodes(hier, &nodes);
  CHECK(nodes == g.N, "%d virtual nodes (want %d)", nodes, g.N);
  CHECK(mkx_comm_net_bytes_sent(flat) == 0, "no network on one node");
  /* Fixed awkward shapes, then random ones from the seed. */
  int64_t shapes[8][3] = {{16, 32, 24}, {5, 7, 3}, {64, 8, 40}, {1, 1, 1}};
  unsigned s = (unsigned)mt.seed;
  for (int i = 4; i < 8; i++)
    for (int d = 0; d < 3; d++)
      shapes[i][d] = 1 + (int64_t)((frand(&s) + 1.0f) * 40);
  for (int i = 0; i < 8; i++) {
    allgather(hier, flat, &g, shapes[i][0], shapes[i][1], shapes[i][2]);
    reduce(hier, flat, &g, shapes[i][0] * mt.size + i, shapes[i][1],
           shapes[i][2], 0);
    reduce(hier, flat, &g, shapes[i][0] * mt.size - i % 2, shapes[i][1],
           shapes[i][2], 1);
  }
  node_comm(hier, &g);
  one_queue(hier, vs);
  if (!mt.device) small_pieces(hier, flat, &g, vs);
#ifdef MKX_TEST_CUDA
  if (!mt.device) nvlink_host(hier, flat, &g);
#endif
#ifdef MKX_TEST_CUDA
  /* proxy and auto: every call driven by the GPU, on nodes of one rank
   * and of several */
  static const char *const modes[] = {"gpu", "nvlink", "proxy", "auto"};
  for (int i = 0; mt.device && i < 4; i++) {
    MKX_Comm gpu = vnode_comm(vs, "hier_gemm", modes[i]);
    long nv = mkx_path_starts(MKX_PATH_HIER_NVLINK);
    long px = mkx_path_starts(MKX_PATH_HIER_PROXY);
    const long want_px = i >= 2 ? 12 : 0;
    if (mt_all(gpu != NULL)) gpu_gemm(hier, gpu, &g);
    CHECK(mkx_path_starts(MKX_PATH_HIER_PROXY) - px == want_px,
          "hier_gemm=%s: %ld calls driven by the GPU (want %ld)", modes[i],
          mkx_path_starts(MKX_PATH_HIER_PROXY) - px, want_px);
    CHECK(mkx_path_starts(MKX_PATH_HIER_NVLINK) - nv == (i ? 12 - want_px : 0),
          "hier_gemm=%s: %ld calls took the nvlink variant", modes[i],
          mkx_path_starts(MKX_PATH_HIER_NVLINK) - nv);
    if (i == 2 && want_px && mt_all(gpu != NULL)) {
      repeated(hier, gpu, &g);
      captured(hier, gpu, &g);
    }
    MKX_Comm_free(&gpu);
  }
#endif
  MKX_Comm_free(&hier);
  MKX_Comm_free(&flat);
  return mt_finish();
}
