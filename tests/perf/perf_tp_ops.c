/* The tensor-parallel calls' operands, plans and communicators
 * (perf_tp_ops.h). */
#include "perf_tp_ops.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime.h>
#include "perf_job.h"
#include "perf_util.h"

const char *const perf_tp_op_names[3] = {"allgather_gemm", "gemm_rs",
                                         "gemm_ar"};

void *perf_dalloc(size_t bytes) {
  void *p = NULL;
  AK(cudaMalloc(&p, bytes ? bytes : 16));
  AK(cudaMemset(p, 0, bytes ? bytes : 16));
  return p;
}

void perf_tp_fill(void *d, size_t count, unsigned seed) {
  size_t chunk = count < ((size_t)1 << 22) ? count : ((size_t)1 << 22);
  uint16_t *h = calloc(chunk ? chunk : 1, 2);
  if (!h) {
    fprintf(stderr, "%s: out of host memory\n", perf_cmd);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  for (size_t i = 0; i < chunk; i++) {
    seed = seed * 1103515245u + 12345u;
    float f = (float)((int)((seed >> 16) % 17) - 8) / 64.0f;
    uint32_t x;
    memcpy(&x, &f, 4);
    h[i] = (uint16_t)(x >> 16);
  }
  for (size_t done = 0; done < count; done += chunk) {
    size_t n = count - done < chunk ? count - done : chunk;
    AK(cudaMemcpy((uint16_t *)d + done, h, n * 2, cudaMemcpyHostToDevice));
  }
  free(h);
}

static void plan_fp8(MKX_Comm c, int op, int64_t M, int64_t N, int64_t K,
                     const perf_tp_bufs *b, MKX_Request *req) {
  const MKX_Scales s = {MKX_SCALE_TENSOR, b->sa, b->sb, NULL};
  const MKX_Datatype t = MKX_FP8_E4M3;
  if (op == OP_AG)
    AM(MKX_Allgather_gemm_scaled_init(
        b->A, b->m_loc, K, K, b->B, N, K, MKX_TRANS, b->C, N, NULL, K, t,
        MKX_BF16, MKX_ROW_MAJOR, &s, c, MPI_INFO_NULL, req));
  else if (op == OP_RS)
    AM(MKX_Gemm_reduce_scatter_scaled_init(
        b->A, M, b->k_loc, b->k_loc, b->B, N, b->k_loc, MKX_TRANS, b->C, N, t,
        MKX_BF16, MKX_ROW_MAJOR, &s, c, MPI_INFO_NULL, req));
  else
    AM(MKX_Gemm_allreduce_scaled_init(
        b->A, M, b->k_loc, b->k_loc, b->B, N, b->k_loc, MKX_TRANS, b->C, N, t,
        MKX_BF16, MKX_ROW_MAJOR, &s, c, MPI_INFO_NULL, req));
}

void perf_tp_plan(MKX_Comm c, int op, int64_t M, int64_t N, int64_t K,
                  const perf_tp_bufs *b, MKX_Request *req) {
  if (b->fp8)
    plan_fp8(c, op, M, N, K, b, req);
  else if (op == OP_AG)
    AM(MKX_Allgather_gemm_init(b->A, b->m_loc, K, K, b->B, N, K, MKX_TRANS,
                               b->C, N, NULL, K, MKX_BF16, MKX_BF16,
                               MKX_ROW_MAJOR, c, MPI_INFO_NULL, req));
  else if (op == OP_RS)
    AM(MKX_Gemm_reduce_scatter_init(
        b->A, M, b->k_loc, b->k_loc, b->B, N, b->k_loc, MKX_TRANS, b->C, N,
        MKX_BF16, MKX_BF16, MKX_ROW_MAJOR, c, MPI_INFO_NULL, req));
  else
    AM(MKX_Gemm_allreduce_init(b->A, M, b->k_loc, b->k_loc, b->B, N, b->k_loc,
                               MKX_TRANS, b->C, N, MKX_BF16, MKX_BF16,
                               MKX_ROW_MAJOR, c, MPI_INFO_NULL, req));
}

void perf_tp_fill_operand(const perf_tp_bufs *b, void *d, size_t count,
                          unsigned seed) {
  if (b->fp8)
    perf_fill_e4m3(d, count, seed);
  else
    perf_tp_fill(d, count, seed);
}

/* fp8: per-tensor scales, powers of two (the products stay exact). */
static void scales(perf_tp_bufs *b) {
  const float v[2] = {0.5f, 2.0f};
  b->sa = perf_dalloc(sizeof(float));
  b->sb = perf_dalloc(sizeof(float));
  AK(cudaMemcpy(b->sa, v, sizeof(float), cudaMemcpyHostToDevice));
  AK(cudaMemcpy(b->sb, v + 1, sizeof(float), cudaMemcpyHostToDevice));
}

void perf_tp_alloc(int op, int64_t M, int64_t N, int64_t K, int p, int r,
                   int flags, perf_tp_bufs *b) {
  memset(b, 0, sizeof *b);
  b->fp8 = (flags & PERF_TP_FP8) != 0;
  const int baselines = (flags & PERF_TP_BASELINES) != 0;
  const size_t es = b->fp8 ? 1 : 2; /* A and B; C and the partial: bf16 */
  if (b->fp8) scales(b);
  if (op == OP_AG) {
    b->m_loc = M / p;
    b->A = perf_dalloc((size_t)(b->m_loc * K) * es);
    b->B = perf_dalloc((size_t)(N * K) * es);
    b->C = perf_dalloc((size_t)(M * N) * 2);
    if (baselines) b->Afull = perf_dalloc((size_t)(M * K) * es);
    perf_tp_fill_operand(b, b->A, (size_t)(b->m_loc * K), 11u + (unsigned)r);
    perf_tp_fill_operand(b, b->B, (size_t)(N * K), 23u + (unsigned)r);
  } else {
    b->k_loc = K / p;
    int64_t first;
    AM(MKX_Block_range(M, p, r, &first, &b->c_rows));
    if (op == OP_AR) b->c_rows = M;
    b->A = perf_dalloc((size_t)(M * b->k_loc) * es);
    b->B = perf_dalloc((size_t)(N * b->k_loc) * es);
    b->C = perf_dalloc((size_t)(b->c_rows * N) * 2);
    if (baselines) b->P = perf_dalloc((size_t)(M * N) * 2);
    perf_tp_fill_operand(b, b->A, (size_t)(M * b->k_loc), 11u + (unsigned)r);
    perf_tp_fill_operand(b, b->B, (size_t)(N * b->k_loc), 23u + (unsigned)r);
  }
}

void perf_tp_free(perf_tp_bufs *b) {
  if (b->req) AM(MKX_Request_free(&b->req));
  if (b->req2) AM(MKX_Request_free(&b->req2));
  AK(cudaFree(b->A));
  AK(cudaFree(b->B));
  AK(cudaFree(b->C));
  AK(cudaFree(b->Afull));
  AK(cudaFree(b->P));
  AK(cudaFree(b->sa));
  AK(cudaFree(b->sb));
}

/* MPI_Info_set of KEY=VALUE as mkx_KEY (ignored if it has no '='). */
static void set_option(MPI_Info info, const char *kv) {
  char key[80];
  const char *eq = kv ? strchr(kv, '=') : NULL;
  if (!eq || eq - kv >= 70) return;
  snprintf(key, sizeof key, "mkx_%.*s", (int)(eq - kv), kv);
  AI(MPI_Info_set(info, key, eq + 1));
}

MKX_Comm perf_tp_comm(MPI_Comm comm, const perf_tp_conf *f,
                      const char *const *extra, int n, int device) {
  MPI_Info info;
  MKX_Comm c = NULL;
  AI(MPI_Info_create(&info));
  AI(MPI_Info_set(info, "mkx_fused", "auto"));
  AI(MPI_Info_set(info, "mkx_tp_overlap", f->overlap));
  if (f->vnode) {
    AI(MPI_Info_set(info, "mkx_virtual_node_size", f->vnode));
    AI(MPI_Info_set(info, "mkx_net", f->net));
    AI(MPI_Info_set(info, "mkx_hier_gemm", f->hier));
  }
  if (device >= 0) {
    char d[16];
    snprintf(d, sizeof d, "%d", device);
    AI(MPI_Info_set(info, "mkx_device", d));
  }
  for (int i = 0; i < n; i++) set_option(info, extra[i]);
  AM(MKX_Comm_create(comm, info, &c));
  AI(MPI_Info_free(&info));
  return c;
}

int perf_tp_shape(const char *v, int64_t s[3]) {
  long long m, n, k;
  char end;
  if (sscanf(v, "%lldx%lldx%lld%c", &m, &n, &k, &end) != 3 || m < 1 || n < 1 ||
      k < 1)
    return 0;
  s[0] = m, s[1] = n, s[2] = k;
  return 1;
}

int perf_tp_op_mask(const char *v) {
  return !strcmp(v, "ag")    ? 1 << OP_AG
         : !strcmp(v, "rs")  ? 1 << OP_RS
         : !strcmp(v, "ar")  ? 1 << OP_AR
         : !strcmp(v, "all") ? 7
                             : 0;
}
